"""A kernel's barrier protocol replayed under random schedules (``replay``, ``replay_many``), its
barriers described for a hang report (``describe``), the coupling between softmax groups through the
MMA warp (``cross_waits``), and the arrival counts its PTX initialises (``ptx_init_counts``). What is
checked is listed in harness/model/protocol.py.
"""

from __future__ import annotations

import inspect
import random
import re

from harness.model.pipeline_model import MBarrier, ProtocolError
from harness.model.protocol import RELAXED, WARP, MulticastStages, Protocol, lands_on
from harness.model.protocol_source import extract

# ------------------------------------------------------------------------------------------------
# Replay
# ------------------------------------------------------------------------------------------------

class PairBarrier(MBarrier):
    """A cluster's mbarrier: the peer's cta_group::2 bytes may land before the leader's expect-tx,
    taking the tx-count below zero for a while (the PTX ISA allows it); what is left at the end is
    the end check's business."""

    def complete_tx(self, nbytes: int):
        self.tx -= nbytes
        self._async_now = True
        self._maybe_complete()


def _warp_ranges(ws) -> str:
    ws = sorted(ws)
    out, start = [], None
    for i, w in enumerate(ws):
        start = w if start is None else start
        if i + 1 == len(ws) or ws[i + 1] != w + 1:
            out.append(f"{start}" if start == w else f"{start}-{w}")
            start = None
    return ("warps " if len(ws) > 1 else "warp ") + ",".join(out)


def _who(proto: Protocol, ws) -> str:
    """Warps by role (one) or by ranges, in a cluster per CTA (``warps 0-7 (cta 0 and 1)``)."""
    ws = sorted(ws)
    if len(ws) == 1:
        return proto.role(ws[0])
    if proto.ctas == 1:
        return _warp_ranges(ws)
    local: dict = {}
    for w in ws:
        local.setdefault(proto.cta_of(w), []).append(w % proto.warps_per_cta)
    same: dict = {}
    for c, lw in local.items():
        same.setdefault(tuple(lw), []).append(c)
    return "; ".join((_warp_ranges(lw) if len(lw) > 1 else proto.roles.get(lw[0], f"warp {lw[0]}"))
                     + f" (cta {' and '.join(map(str, cs))})" for lw, cs in same.items())


def replay(proto: Protocol, seed: int = 0, max_steps: int = 2_000_000) -> int:
    """Run the protocol once under the schedule ``seed`` picks; return the steps taken."""
    rng = random.Random(seed)
    cluster = proto.ctas > 1
    bars = {b: (PairBarrier if cluster else MBarrier)(n) for b, n in proto.counts.items()}
    n_warps = len(proto.warps)
    cta = [proto.cta_of(w) for w in range(n_warps)]
    pc = [0] * n_warps
    copies: list = []                               # (bar, what the issuer knew): in flight
    commits: list = []                              # (op, bar, what the issuer knew): issued, not yet
                                                    # landed (any order; a multicast one per CTA)
    observed: dict = {}                             # (warp, bar) -> last completion observed
    seen: dict = {b: set() for b in bars}           # completions some warp observed
    waited = set()
    named: dict = {}                                # (cta, id) -> {"threads", "arrived", "waiting", ...}
    blocked_at_sync = set()
    moved_on: list = []                             # warps a named barrier's completion moved past it
    clusterbar = {"arrived": [0] * n_warps, "waited": [0] * n_warps, "know": {}, "relaxed": set()}
    remote_arrives: list = []                       # (warp, op, completion it counts toward, its cluster arrives)
    agents: dict = {}                               # (bar, completion) -> its asynchronous arrivals: "copy",
                                                    # "commit" or a remote arrive's index in remote_arrives

    # What each warp knows to have happened (cluster only; a 1-CTA step's inits are hoisted): a bit
    # per barrier's init and per warp "done with TMEM" (at its last sync_threads), passed on by
    # every arrive and completion to whoever waits for it.
    know = [0] * n_warps
    bit = {b: 1 << i for i, b in enumerate(bars)}
    done_bit = [1 << (len(bars) + w) for w in range(n_warps)]
    done_at = [max((i for i, op in enumerate(ops) if op.kind == "sync" and op.value == 0), default=len(ops) - 1)
               for ops in proto.warps]
    pending_know = dict.fromkeys(bars, 0)           # arrivals of the phase in progress
    released = dict.fromkeys(bars, 0)               # arrivals of every completed phase
    init_site = {op.bar: (w, op) for w, ops in enumerate(proto.warps) for op in ops if op.kind == "init"}
    inits = (1 << len(bars)) - 1                    # what a relaxed cluster arrive publishes (below)
    stages = MulticastStages(proto, len(bars) + n_warps) if cluster else None

    def need_init(w, op, bar):
        if cluster and not know[w] & bit[bar]:
            iw, init = init_site[bar]
            raise ProtocolError(f"{proto.step}: {proto.role(w)} line {op.line} `{op.text}` uses {bar}, which may not "
                                f"be initialised yet: nothing orders it after its mbarrier_init ({proto.role(iw)} "
                                f"line {init.line}); a remote arrive, copy or commit before the cluster barrier?")

    def arrive(bar, times, knowledge, expect=0, asynchronous=False, tx=0, agent=None):
        b = bars[bar]
        before = b.phase
        b.arrive_many(times, expect_tx=expect, asynchronous=asynchronous)
        if tx:
            b.complete_tx(tx)
        if agent is not None:       # the completions it counts toward: each must be ordered before exit
            last = b.phase + (b.pending != b.count) if b.phase > before else before + 1
            for c in range(before + 1, last + 1):
                agents.setdefault((bar, c), set()).add(agent)
        if cluster:
            pending_know[bar] |= knowledge
            if b.phase != before:
                released[bar] |= pending_know[bar]
                pending_know[bar] = 0

    def pass_wait(w, op):
        b = bars[op.bar]
        if not b.try_wait(op.value):
            return False
        c = b.phase
        last = observed.get((w, op.bar))
        if last is not None and c != last + 1:
            what = "already observed" if c <= last else f"{c - last - 1} completion(s) later than the next"
            raise ProtocolError(f"{proto.step}: {proto.role(w)} line {op.line} `{op.text}` passed on completion "
                                f"{c} of {op.bar}, {what} (its previous wait there observed {last})")
        if last is None and c != 1 - op.value:
            raise ProtocolError(f"{proto.step}: {proto.role(w)} line {op.line} `{op.text}`: its first wait on "
                                f"{op.bar} passed on completion {c}, not the barrier's first (parity 0) or the "
                                "fresh barrier's previous phase (parity 1)")
        observed[(w, op.bar)] = c
        seen[op.bar].add(c)
        waited.add(op.bar)
        know[w] |= released[op.bar]
        return True

    def named_barrier(w, op, waits):
        key = (cta[w], op.value)
        name = f"barrier {op.value}" if not cluster else f"cta {cta[w]}'s barrier {op.value}"
        st = named.setdefault(key, {"threads": op.threads, "arrived": 0, "waiting": set(), "warps": set(), "know": 0})
        if st["threads"] != op.threads:
            raise ProtocolError(f"{proto.step}: line {op.line}: {name} used with {op.threads} "
                                f"and {st['threads']} threads")
        if w in st["warps"]:
            raise ProtocolError(f"{proto.step}: {proto.role(w)} line {op.line} `{op.text}` arrives on {name} "
                                "twice in one generation: its threads count twice, and the "
                                "generation completes without the warps it was meant to wait for")
        st["warps"].add(w)
        st["arrived"] += WARP
        st["know"] |= know[w]
        if waits:
            st["waiting"].add(w)
            blocked_at_sync.add(w)
        if st["arrived"] > st["threads"]:
            raise ProtocolError(f"{proto.step}: line {op.line}: more threads than {name} expects")
        if st["arrived"] == st["threads"]:
            for x in st["waiting"]:
                blocked_at_sync.discard(x)
                know[x] |= st["know"]
                pc[x] += 1
                moved_on.append(x)
            named[key] = {"threads": op.threads, "arrived": 0, "waiting": set(), "warps": set(), "know": 0}
        return not waits

    def cluster_barrier(w, op, waits):
        arrived, done = clusterbar["arrived"], clusterbar["waited"]
        gen = done[w]
        if not waits:
            if arrived[w] != gen:
                raise ProtocolError(f"{proto.step}: {proto.role(w)} line {op.line} `{op.text}` arrives on the cluster "
                                    "barrier twice without waiting in between")
            # barrier.cluster.arrive.relaxed orders no prior memory access: it publishes only the inits
            # (the fence.mbarrier_init before it does) and orders no remote arrive before the exit
            relaxed = op.value == RELAXED
            clusterbar["know"][gen] = clusterbar["know"].get(gen, 0) | (know[w] & inits if relaxed else know[w])
            if relaxed:
                clusterbar["relaxed"].add((w, gen))
            arrived[w] += 1
            return True
        if arrived[w] != gen + 1:
            raise ProtocolError(f"{proto.step}: {proto.role(w)} line {op.line} `{op.text}` waits on the cluster "
                                "barrier without arriving first")
        if min(arrived) <= gen:
            return False
        know[w] |= clusterbar["know"][gen]
        done[w] += 1
        return True

    def dealloc(w, op):
        pair = [x for x in range(n_warps) if cta[x] & ~1 == cta[w] & ~1 and proto.warps[x]]
        missing = [x for x in pair if not know[w] & done_bit[x]]
        if missing:
            raise ProtocolError(f"{proto.step}: {proto.role(w)} line {op.line} `{op.text}` frees the pair's TMEM "
                                f"while nothing orders it after {_who(proto, missing)} reached their last "
                                "sync_threads (done with TMEM): the handshake before it (the other CTA's arrive "
                                "on a barrier this warp waits on) is missing or lands in the wrong CTA")

    def warp_step(w):
        if w in blocked_at_sync:
            return False
        op = proto.warps[w][pc[w]]
        if cluster and pc[w] == done_at[w]:
            know[w] |= done_bit[w]
        if op.kind == "init":
            know[w] |= bit[op.bar]
        elif op.kind == "wait":
            need_init(w, op, op.bar)
            if not pass_wait(w, op):
                return False
            if stages:
                stages.read(w, op.bar, observed[(w, op.bar)])
        elif op.kind in ("arrive", "expect"):
            need_init(w, op, op.bar)
            if stages:
                know[w] |= stages.release(w, op.bar)
            # another CTA's arrive is asynchronous to this one: its exit does not wait for it
            remote = cluster and op.bar.cta != cta[w]
            if remote:
                remote_arrives.append((w, op, bars[op.bar].phase + 1, clusterbar["arrived"][w]))
            arrive(op.bar, op.value, know[w], expect=op.copies if op.kind == "expect" else 0, asynchronous=remote,
                   agent=len(remote_arrives) - 1 if remote else None)
            if stages and op.kind == "expect":
                stages.announce(w, op.bar)
        elif op.kind == "copy":
            if stages and op.ctas:
                stages.check_issue(w, op, know[w])
            for bar in lands_on(op):        # a multicast copy: its bytes land in each CTA of its mask
                need_init(w, op, bar)
                copies.append((bar, know[w]))
        elif op.kind == "commit":
            if stages:
                know[w] |= stages.release(w, op.bar)
            for bar in lands_on(op):
                need_init(w, op, bar)
                commits.append((op, bar, know[w]))
        elif op.kind in ("sync", "bar_arrive"):
            if not named_barrier(w, op, waits=op.kind == "sync"):
                return True
        elif op.kind in ("cluster_arrive", "cluster_wait"):
            if not cluster_barrier(w, op, waits=op.kind == "cluster_wait"):
                return False
        elif op.kind == "dealloc":
            dealloc(w, op)
        pc[w] += 1
        return True

    def land_copy(i):
        bar, knowledge = copies.pop(i)
        arrive(bar, 0, knowledge, tx=1, agent="copy")
        return True

    def land_commit(i):
        op, bar, knowledge = commits.pop(i)
        arrive(bar, op.value, knowledge, asynchronous=True, agent="commit")
        return True

    live = [w for w in range(n_warps) if proto.warps[w]]       # warps with operations left, in order
    for steps in range(max_steps):
        warps, landing = len(live), len(copies)
        total = warps + landing + len(commits)
        if not total:
            _check_end(proto, bars, seen, waited, _exit_ordered(proto, remote_arrives, bars, seen, clusterbar), agents)
            half = {key: st for key, st in named.items() if st["arrived"]}
            if half:
                ids = sorted(i for _, i in half) if not cluster else [f"cta {c}'s {i}" for c, i in sorted(half)]
                raise ProtocolError(f"{proto.step}: named barrier(s) {ids} end with threads arrived "
                                    "and no generation completed")
            return steps
        # The actors (warps, copies in flight, commits not yet landed) in a random order, drawn one
        # at a time until one can move; most steps move the first one drawn.
        moved, tried = False, set()
        while not moved and len(tried) < total:
            j = rng.randrange(total)
            if j in tried:
                continue
            tried.add(j)
            if j < warps:
                w = live[j]
                moved = warp_step(w)
                if moved and (moved_on or pc[w] >= len(proto.warps[w])):
                    live = [x for x in live if pc[x] < len(proto.warps[x])]
                    moved_on.clear()
            elif j < warps + landing:
                moved = land_copy(j - warps)
            else:
                moved = land_commit(j - warps - landing)
        if not moved:
            raise ProtocolError(f"{proto.step}: deadlock, nobody can move:\n"
                                + _blocked(proto, pc, bars, named, clusterbar))
    raise ProtocolError(f"{proto.step}: no end within {max_steps} steps")


def _blocked(proto, pc, bars, named, clusterbar) -> str:
    out: dict = {}          # what a warp is stuck on -> the warps stuck on it
    for w, ops in enumerate(proto.warps):
        if pc[w] >= len(ops):
            continue
        op = ops[pc[w]]
        if op.kind == "wait":
            b = bars[op.bar]
            why = (f"line {op.line} `{op.text}` waits on {op.bar} for parity {op.value}; it has completed "
                   f"{b.phase} phase(s), {b.pending} of {b.count} arrivals and {b.tx} copies still pending")
        elif op.kind == "cluster_wait":
            gen = clusterbar["waited"][w]
            arrived = sum(a > gen for a in clusterbar["arrived"])
            why = f"line {op.line} `{op.text}` at the cluster barrier ({arrived} of {len(proto.warps)} warps arrived)"
        else:
            st = named.get((proto.cta_of(w), op.value), {})
            why = (f"line {op.line} `{op.text}` at barrier {op.value} "
                   f"({st.get('arrived', 0)} of {op.threads} threads arrived)")
        # a cluster's 32 warps: one line per CTA and state (a 1-CTA step keeps a line per warp)
        out.setdefault(why if proto.ctas > 1 else (w, why), []).append(w)
    return "\n".join(f"  {_who(proto, ws)}: {key if proto.ctas > 1 else key[1]}" for key, ws in out.items())


def _exit_ordered(proto, remote_arrives, bars, seen, clusterbar) -> set:
    """Exit safety of arrives on another CTA's barrier (through mapa): each must reach that CTA before
    it exits, so either a warp waits for the phase it counts toward (seen completing) or the arriving
    warp passes a cluster barrier after it, with a release arrive (a relaxed one orders no prior
    memory access), that every warp of the target CTA waits on before its exit. Returns the indices
    (in ``remote_arrives``) of the arrives a cluster barrier orders, for _check_end: only those
    arrives are exempt, not the other asynchronous arrivals of their phase; raises on an arrive
    nothing orders."""
    ordered = set()
    arrived, waited, relaxed = clusterbar["arrived"], clusterbar["waited"], clusterbar["relaxed"]
    for i, (w, op, completion, at_issue) in enumerate(remote_arrives):
        target = [x for x in range(len(proto.warps)) if proto.cta_of(x) == op.bar.cta]
        if any((w, g) not in relaxed and all(waited[x] > g for x in target) for g in range(at_issue, arrived[w])):
            ordered.add(i)
        elif not (bars[op.bar].phase >= completion and completion in seen[op.bar]):
            raise ProtocolError(f"{proto.step}: {proto.role(w)} line {op.line} `{op.text}` arrives on {op.bar} "
                                f"(another CTA's) and nothing orders it before that CTA's exit: no warp waits for "
                                "the phase it counts toward and no cluster barrier with a release arrive (not "
                                ".relaxed) follows it; it may land in the shared memory of an exited CTA")
    return ordered


def _check_end(proto, bars, seen, waited, ordered=frozenset(), agents=None):
    """``agents``: (bar, completion) -> its asynchronous arrivals; a completion no warp observed is
    exit-safe only if every one of them is a remote arrive in ``ordered``."""
    agents = {} if agents is None else agents
    for bar, b in bars.items():
        arrived = b.phase > 0 or b.pending != b.count
        if arrived and bar not in waited:
            raise ProtocolError(f"{proto.step}: {bar} is arrived on but no warp ever waits on it")
        late = sorted(c for c in b.async_completions if c not in seen[bar]
                      and not agents.get((bar, c), {None}) <= ordered)
        if late:
            agents = "a tcgen05.commit or a copy's bytes" if proto.ctas == 1 else \
                "a tcgen05.commit, a copy's bytes or another CTA's arrive"
            raise ProtocolError(f"{proto.step}: completion {late[0]} of {bar} is made by an asynchronous arrive "
                                f"({agents}) that no warp waits for: it may land after "
                                "the CTA exits, in shared memory that belongs to the next CTA")
        if b.pending != b.count or b.tx:
            copies = f"{b.tx} copies pending" if b.tx >= 0 else f"{-b.tx} copies' bytes landed unannounced"
            raise ProtocolError(f"{proto.step}: {bar} ends with a phase half done "
                                f"({b.count - b.pending} of {b.count} arrivals, {copies})")


def replay_many(module, *, n_blocks=range(1, 7), seeds=range(25), source=None, step=None,
                n_tiles=(1, 2, 3)) -> None:
    """Replay for each tile count; a persistent kernel (one that names ``n_tiles``) also for each
    count of work tiles per CTA. A cluster is replayed whole, its CTAs as one system."""
    text = inspect.getsource(module) if source is None else source
    for t in (n_tiles if re.search(r"\bn_tiles\b", text) else (1,)):
        for n in n_blocks:
            proto = extract(module, n, source=source, step=step, n_tiles=t)
            for seed in seeds:
                replay(proto, seed)


# ------------------------------------------------------------------------------------------------
# Description (for a hang report)
# ------------------------------------------------------------------------------------------------

def describe(module, n_blocks: int = 2) -> list[str]:
    """Who arrives on and who waits on each barrier, by role and line: the suspects of a hang. In a
    cluster each arrival says in which CTA it lands."""
    proto = extract(module, n_blocks)
    cluster = proto.ctas > 1
    sites: dict = {}
    for w, ops in enumerate(proto.warps):
        for op in ops:
            if op.bar is None or op.kind == "init":
                continue
            dest = tuple(b.cta for b in lands_on(op)) if cluster and op.kind != "wait" else ()
            key = (op.bar.name, op.kind, op.line, op.text, dest)
            sites.setdefault(key, {"warps": set(), "indices": set()})
            sites[key]["warps"].add(w)
            sites[key]["indices"].add(op.bar.index)
    verb = {"wait": "wait", "arrive": "arrive", "expect": "arrive + expect-tx", "copy": "TMA copy lands",
            "commit": "tcgen05.commit arrives"}
    names = sorted({b.name for b in proto.counts}, key=lambda n: min(
        (op.line for ops in proto.warps for op in ops if op.bar and op.bar.name == n and op.kind != "init"),
        default=0))
    lines = []
    for name in names:
        idx = sorted({b.index for b in proto.counts if b.name == name})
        count = {c for b, c in proto.counts.items() if b.name == name}
        label = name if idx == [0] else f"{name}[{idx[0]}..{idx[-1]}]"
        lines.append(f"{label} (arrival count {'/'.join(map(str, sorted(count)))}{', in each CTA' if cluster else ''}):")
        for (n, kind, line, text, dest), s in sorted(sites.items(), key=lambda kv: (kv[0][2], kv[0][4])):
            if n != name:
                continue
            where = f" in cta {' and '.join(map(str, dest))}" if dest else ""
            lines.append(f"  line {line:4d}  {_who(proto, s['warps'])}: {verb[kind]}{where}  `{text}`")
    kinds = ("sync", "bar_arrive", "cluster_arrive", "cluster_wait")
    syncs = sorted({(op.line, op.text) for ops in proto.warps for op in ops if op.kind in kinds})
    if syncs:
        lines.append("CTA / named barriers:" if not cluster else "CTA / named barriers (each CTA's own) and the "
                     "cluster barrier:")
        lines += [f"  line {line:4d}  `{text}`" for line, text in syncs]
    return lines



# ------------------------------------------------------------------------------------------------
# Coupling: does one softmax warpgroup wait for the other through the MMA warp?
# ------------------------------------------------------------------------------------------------

def cross_waits(proto: Protocol, groups: dict, issuer: int) -> list[str]:
    """Waits of the ``issuer`` warp (the MMA warp) that make one group's next input wait for another
    group's output. For every completion the issuer makes on a barrier group A waits on once per
    tile, walk back through the issuer's operations to its previous wait on a barrier A arrives on
    (A's own last output); a wait met on the way on a barrier another group B arrives on means A's
    next tile waits for B. Barriers a group waits on once (the final O) are not per tile and are
    left out. ``groups``: name -> the protocol's warps (in a cluster, the group's warps in every
    CTA: ``cluster_warps``); the first one's waits stand for the group's."""
    def bars(warps, kind):
        return [op.bar for w in warps for op in proto.warps[w] if op.kind == kind]
    arrived = {g: set(bars(ws, "arrive")) for g, ws in groups.items()}
    waits = {g: bars(ws[:1], "wait") for g, ws in groups.items()}
    per_tile = {g: {b for b in set(ws) if ws.count(b) > 1} for g, ws in waits.items()}
    ops = proto.warps[issuer]
    found = set()
    for a in groups:
        for i, op in enumerate(ops):
            if op.kind not in ("commit", "arrive"):
                continue
            bar = next((b for b in lands_on(op) if b in per_tile[a]), None)
            if bar is None:
                continue
            for prev in reversed(ops[:i]):
                if prev.kind != "wait":
                    continue
                if prev.bar in arrived[a]:
                    break
                for b in groups:
                    if b != a and prev.bar in arrived[b]:
                        found.add(f"{a} waits for {b}: the {bar} completion of line {op.line} follows the "
                                  f"wait on {prev.bar} (line {prev.line}) after {a}'s previous output")
    return sorted(found)


# ------------------------------------------------------------------------------------------------
# The compiled kernel's side: the arrival counts its PTX initialises
# ------------------------------------------------------------------------------------------------

_MOV_IMM = re.compile(r"mov\.[bsu]32\s+(%r\d+),\s*(\d+);")
_INIT = re.compile(r"mbarrier\.init(?:\.shared(?:::cta)?)?\.b64\s+\[[^\]]+\],\s*(%r\d+|\d+);")


def ptx_init_counts(ptx: str) -> list[int]:
    """The arrival count of every ``mbarrier.init`` in the PTX, sorted (registers resolved through
    the ``mov`` of an immediate that sets them)."""
    imm: dict = {}
    for reg, value in _MOV_IMM.findall(ptx):
        imm.setdefault(reg, set()).add(value)
    imm = {reg: values.pop() for reg, values in imm.items() if len(values) == 1}   # set once: unambiguous
    counts = []
    for operand in _INIT.findall(ptx):
        if operand.startswith("%"):
            if operand not in imm:
                raise ValueError(f"mbarrier.init count {operand} is not one moved immediate")
            operand = imm[operand]
        counts.append(int(operand))
    return sorted(counts)
