"""Every step's barrier protocol, read from its kernel's source and replayed under random schedules.

The kernel function is walked as Python syntax, warp by warp: ``warp_idx`` and ``n_blocks`` are
given, the step module's own constants and functions (``ring_position``, ``NUM_STAGES``, ...) are
used as they are, and every branch and loop that contains a barrier operation is decided. What
comes out is, per warp, the list of its barrier operations in program order:

=====================================  ==========================================================
``mbarrier_init(bar, n)``              the barrier and its arrival count
``mbarrier_wait(bar, parity)``         a wait (per warp)
``mbarrier_arrive(bar)``               one arrival per thread: 32 per warp, 1 inside ``elect_one``
``mbarrier_arrive_and_expect_tx``      an arrival that announces the bytes of the copies the same
                                       warp then issues on that barrier (counted in copies)
``cute.copy(..., tma_bar_ptr=bar)``    a TMA copy; it lands later and counts its bytes down
``tcgen05.commit(bar)``                an arrival made later by the tensor core, after the MMAs
                                       the thread issued before it (in any order with the same
                                       thread's other commits: the PTX ISA promises no order)
``sync_threads`` / ``barrier``         a CTA or named barrier (``bar.sync``)
``barrier_arrive``                     a named-barrier arrival that does not wait (``bar.arrive``)
``_timeline_probe(buf, tile, p, edge)`` in an instrumented copy only (harness/timeline.py): a
                                       phase begins or ends (``mark``; the replay ignores it, the
                                       timeline simulation times it)
=====================================  ==========================================================

The replay runs the warps and the asynchronous agents (copies in flight, commits not yet landed)
one step at a time in a random order, on the mbarrier model of harness/pipeline_model.py, and
fails on:

- a deadlock: nobody can move and a warp is not done (the report names each waiting warp, its
  line and the barrier's phase);
- a wait that passes on the wrong phase: each warp's successive waits on one barrier must observe
  successive completions of it; passing on a completion it already observed (two hand-offs
  sharing a barrier), or two completions further on (an arrival count too small), is an error;
- a completion made by an asynchronous agent that no warp waits for: a commit's arrive or a
  copy's bytes is not ordered by any thread's exit, so it could land after the CTA has exited in
  shared memory that belongs to the next CTA (a load warp without a producer tail). Completions
  made only of threads' own arrivals need no waiter: the arriving thread is still in the CTA;
- a barrier that is arrived on but never waited for, or used without being initialised.

A warp's first wait on a barrier must observe the barrier's first completion (parity 0) or, for a
producer's wait on a fresh "empty" barrier, the phase before it (parity 1).

What it does not check: what a barrier protects. That a commit comes after the MMAs that read a
stage, or that an MMA's TMEM operands are not overwritten while it runs, is the business of the
K/V ring replay (harness/pipeline_model.py: which tile a stage holds, who reads it) and of the
MMA-pipe model (harness/mma_pipe.py). Arrivals on another CTA's barrier (clusters) are refused.
"""

from __future__ import annotations

import ast
import inspect
import random
import re
from dataclasses import dataclass, field

from harness.pipeline_model import MBarrier, ProtocolError

PROBE = "_timeline_probe"   # a timeline marker in an instrumented copy (harness/timeline.py): an op "mark"

WARP = 32
_PARAMS = ("warp_idx", "n_blocks", "n_tiles")   # given, never re-assigned by the walk (n_tiles: a
                                                # persistent CTA's work tiles, h14)
_SAFE_BUILTINS = {"range": range, "len": len, "min": min, "max": max, "tuple": tuple, "int": int}


class ExtractionError(ValueError):
    """The kernel does something with barriers that the walk cannot decide."""


@dataclass(frozen=True)
class Bar:
    """One mbarrier: a shared-storage field and an index into it (``kv_full + stage``)."""
    name: str
    index: int = 0

    def __add__(self, k):
        if not isinstance(k, int):
            return NotImplemented
        return Bar(self.name, self.index + k)

    __radd__ = __add__

    def __str__(self):
        return f"{self.name}[{self.index}]"


@dataclass(frozen=True)
class Op:
    kind: str          # init, wait, arrive, expect, copy, commit, sync, bar_arrive, mark
    line: int          # line in the step file
    text: str          # the call as written
    bar: Bar | None = None
    value: int = 0     # init: count; wait: parity; arrive/expect/commit: arrivals; sync: barrier id
    threads: int = 0   # sync / bar_arrive: the barrier's thread count
    copies: int = 0    # expect: copies announced
    tile: int = 0      # mark: the K/V tile of a timeline phase (harness/timeline.py); value: its phase
    edge: int = 0      # mark: 0 begin, 1 end


@dataclass
class Protocol:
    step: str
    warps: list          # warps[w] = [Op, ...]
    counts: dict         # Bar -> arrival count
    roles: dict = field(default_factory=dict)   # warp -> role name

    def role(self, w: int) -> str:
        return self.roles.get(w, f"warp {w}")


def _call_name(call: ast.Call) -> str | None:
    f = call.func
    if isinstance(f, ast.Name) and f.id == PROBE:
        return "mark"
    if isinstance(f, ast.Attribute):
        if f.attr == "commit" and isinstance(f.value, ast.Name) and f.value.id == "tcgen05":
            return "commit"
        if f.attr == "copy" and any(k.arg == "tma_bar_ptr" for k in call.keywords):
            return "copy"
        if f.attr in ("mbarrier_init", "mbarrier_wait", "mbarrier_arrive", "mbarrier_arrive_and_expect_tx",
                      "sync_threads", "barrier", "barrier_arrive"):
            return f.attr
    return None


def _has_barrier_op(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and _call_name(n) for n in ast.walk(node))


def _kernel_def(source: str) -> ast.FunctionDef:
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == "kernel":
            return node
    raise ExtractionError("no `def kernel` in the step file")


def _helpers_with_barriers(source: str) -> list[str]:
    return [n.name for n in ast.parse(source).body
            if isinstance(n, ast.FunctionDef) and n.name != "kernel" and _has_barrier_op(n)]


class _Walk:
    """Walks the kernel body for one warp, collecting its barrier operations."""

    def __init__(self, module, source_lines, warp: int, n_blocks: int, threads: int, n_tiles: int = 1):
        self.glob = {k: v for k, v in vars(module).items()
                     if isinstance(v, (int, float, bool, tuple, str)) or
                     (inspect.isfunction(v) and v.__module__ == module.__name__)}
        self.env = {"warp_idx": warp, "n_blocks": n_blocks, "n_tiles": n_tiles}
        self.lines = source_lines
        self.threads = threads
        self.ops: list[Op] = []
        self.elect = False

    # ---- values
    def _names_known(self, node) -> bool:
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id not in self.env and n.id not in self.glob \
                    and n.id not in _SAFE_BUILTINS:
                return False
            if isinstance(n, ast.Attribute):
                return False
        return True

    def value(self, node):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if f.attr == "data_ptr" and isinstance(f.value, ast.Attribute):
                return Bar(f.value.attr)
            if f.attr in ("range", "range_constexpr"):
                return range(*(self.value(a) for a in node.args))
            if f.attr == "const_expr":
                return self.value(node.args[0])
        if isinstance(node, ast.Tuple):
            return tuple(self.value(e) for e in node.elts)
        if not self._names_known(node):
            raise KeyError(ast.unparse(node))
        return eval(compile(ast.Expression(node), "<kernel>", "eval"),
                    {**self.glob, "__builtins__": _SAFE_BUILTINS}, dict(self.env))

    def decide(self, node, what: str):
        try:
            return self.value(node)
        except Exception as e:
            raise ExtractionError(f"line {node.lineno}: cannot decide the {what} `{ast.unparse(node)}` "
                                  f"around barrier operations ({type(e).__name__}: {e})") from None

    def bind(self, target, val):
        if isinstance(target, ast.Name):
            if target.id not in _PARAMS:
                self.env[target.id] = val
        elif isinstance(target, (ast.Tuple, ast.List)):
            vals = tuple(val) if val is not None else (None,) * len(target.elts)
            for t, v in zip(target.elts, vals, strict=True):
                self.bind(t, v)

    def forget(self, target):
        """An assignment the walk cannot evaluate unbinds the names it assigns; an element store
        (``t[i] = x``, ``o.f = x``) rebinds nothing: the names in its index stay known."""
        if isinstance(target, ast.Name) and target.id not in _PARAMS:
            self.env.pop(target.id, None)
        elif isinstance(target, (ast.Tuple, ast.List, ast.Starred)):
            for t in (target.elts if not isinstance(target, ast.Starred) else [target.value]):
                self.forget(t)

    # ---- statements
    def block(self, stmts):
        for s in stmts:
            self.stmt(s)

    def stmt(self, s):
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and _call_name(s.value):
            self.op(s.value)
        elif isinstance(s, ast.Assign):
            try:
                val = self.value(s.value)
            except Exception:
                for t in s.targets:
                    self.forget(t)
                return
            for t in s.targets:
                self.bind(t, val)
        elif isinstance(s, ast.AugAssign):
            try:
                self.bind(s.target, self.value(ast.BinOp(left=ast.Name(s.target.id, ast.Load()), op=s.op,
                                                          right=s.value)))
            except Exception:
                self.forget(s.target)
        elif isinstance(s, ast.If):
            if not _has_barrier_op(s):
                return
            self.block(s.body if self.decide(s.test, "condition") else s.orelse)
        elif isinstance(s, ast.For):
            if not _has_barrier_op(s):
                return
            for v in self.decide(s.iter, "loop range"):
                self.bind(s.target, v)
                self.block(s.body)
        elif isinstance(s, ast.With):
            elect = any(isinstance(i.context_expr, ast.Call) and isinstance(i.context_expr.func, ast.Attribute)
                        and i.context_expr.func.attr == "elect_one" for i in s.items)
            before, self.elect = self.elect, self.elect or elect
            self.block(s.body)
            self.elect = before
        elif isinstance(s, (ast.While, ast.Try, ast.FunctionDef)) and _has_barrier_op(s):
            raise ExtractionError(f"line {s.lineno}: barrier operations inside a "
                                  f"{ {'While': 'while loop', 'Try': 'try', 'FunctionDef': 'nested def'}[type(s).__name__]} "
                                  "are not modelled")

    def op(self, call: ast.Call):
        name = _call_name(call)
        text = self.lines[call.lineno - 1].strip()
        kw = {k.arg: k.value for k in call.keywords}
        add = lambda kind, **a: self.ops.append(Op(kind, call.lineno, text, **a))  # noqa: E731
        arrivals = 1 if self.elect else WARP
        if name == "mbarrier_init":
            add("init", bar=self.decide(call.args[0], "barrier"), value=self.decide(call.args[1], "arrival count"))
        elif name == "mbarrier_wait":
            add("wait", bar=self.decide(call.args[0], "barrier"), value=self.decide(call.args[1], "parity") % 2)
        elif name == "mbarrier_arrive":
            if len(call.args) > 1 or call.keywords:
                raise ExtractionError(f"line {call.lineno}: an arrive on another CTA's barrier is not modelled")
            add("arrive", bar=self.decide(call.args[0], "barrier"), value=arrivals)
        elif name == "mbarrier_arrive_and_expect_tx":
            add("expect", bar=self.decide(call.args[0], "barrier"), value=arrivals)
        elif name == "commit":
            add("commit", bar=self.decide(call.args[0], "barrier"), value=arrivals)
        elif name == "copy":
            add("copy", bar=self.decide(kw["tma_bar_ptr"], "barrier"))
        elif name == "mark":
            add("mark", tile=self.decide(call.args[1], "timeline tile"), value=self.decide(call.args[2], "phase"),
                edge=self.decide(call.args[3], "edge"))
        elif name in ("sync_threads", "barrier", "barrier_arrive"):
            bid = self.decide(kw["barrier_id"], "barrier id") if "barrier_id" in kw else 0
            n = self.decide(kw["number_of_threads"], "thread count") if "number_of_threads" in kw else self.threads
            add("sync" if name != "barrier_arrive" else "bar_arrive", value=bid, threads=n)


def _announce_copies(ops: list[Op]) -> list[Op]:
    """An expect-tx announces the copies its warp issues next on the same barrier."""
    out = list(ops)
    for i, op in enumerate(ops):
        if op.kind == "copy" and not any(p.kind == "expect" and p.bar == op.bar for p in ops[:i]):
            raise ProtocolError(f"line {op.line}: a TMA copy on {op.bar} with no expect-tx announcing it")
        if op.kind != "expect":
            continue
        n = 0
        for later in ops[i + 1:]:
            if later.bar == op.bar and later.kind != "copy":
                break
            n += later.kind == "copy" and later.bar == op.bar
        out[i] = Op(op.kind, op.line, op.text, op.bar, op.value, copies=n)
    return out


def _role_names(module, n_warps: int) -> dict:
    """Warp -> name from the step's own constants (``MMA_WARP = 8`` names warp 8)."""
    names = {}
    for k, v in vars(module).items():
        if k.endswith("_WARP") and isinstance(v, int) and 0 <= v < n_warps and not isinstance(v, bool):
            names[v] = f"{k.removesuffix('_WARP').lower()} warp {v}"
    return names


def extract(module, n_blocks: int, source: str | None = None, step: str | None = None,
            n_tiles: int = 1) -> Protocol:
    """The step's barrier operations, warp by warp, for a CTA that loops over ``n_blocks`` tiles
    (of each of ``n_tiles`` work tiles, for a persistent kernel that names them ``n_tiles``).
    ``source`` replaces the module's file (to check a deliberately broken copy)."""
    source = inspect.getsource(module) if source is None else source
    helpers = _helpers_with_barriers(source)
    if helpers:
        raise ExtractionError(f"barrier operations outside `kernel` ({', '.join(helpers)}) are not modelled")
    kernel = _kernel_def(source)
    lines = source.splitlines()
    threads = module.INFO.threads
    warps = []
    for w in range(threads // WARP):
        walk = _Walk(module, lines, w, n_blocks, threads, n_tiles)
        walk.block(kernel.body)
        warps.append(_announce_copies(walk.ops))
    counts = {}
    for ops in warps:
        for op in ops:
            if op.kind == "init":
                if op.bar in counts:
                    raise ProtocolError(f"line {op.line}: {op.bar} initialised twice")
                if op.value < 1:
                    raise ProtocolError(f"line {op.line}: {op.bar} initialised with {op.value} arrivals")
                counts[op.bar] = op.value
    warps = [[op for op in ops if op.kind != "init"] for ops in warps]
    for ops in warps:
        for op in ops:
            if op.bar is not None and op.bar not in counts:
                raise ProtocolError(f"line {op.line}: {op.bar} is used but never initialised")
    return Protocol(step or module.INFO.id, warps, counts, _role_names(module, len(warps)))


# ------------------------------------------------------------------------------------------------
# Replay
# ------------------------------------------------------------------------------------------------

def _warp_ranges(ws) -> str:
    ws = sorted(ws)
    out, start = [], None
    for i, w in enumerate(ws):
        start = w if start is None else start
        if i + 1 == len(ws) or ws[i + 1] != w + 1:
            out.append(f"{start}" if start == w else f"{start}-{w}")
            start = None
    return ("warps " if len(ws) > 1 else "warp ") + ",".join(out)


def replay(proto: Protocol, seed: int = 0, max_steps: int = 2_000_000) -> int:
    """Run the protocol once under the schedule ``seed`` picks; return the steps taken."""
    rng = random.Random(seed)
    bars = {b: MBarrier(n) for b, n in proto.counts.items()}
    pc = [0] * len(proto.warps)
    copies: list[Bar] = []                          # in flight
    commits: list[Op] = []                          # issued, not yet landed (any order)
    observed: dict = {}                             # (warp, bar) -> last completion observed
    seen: dict = {b: set() for b in bars}           # completions some warp observed
    waited = set()
    named: dict = {}                                # id -> {"threads", "arrived", "waiting"}
    blocked_at_sync = set()

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
        return True

    def named_barrier(w, op, waits):
        st = named.setdefault(op.value, {"threads": op.threads, "arrived": 0, "waiting": set(), "warps": set()})
        if st["threads"] != op.threads:
            raise ProtocolError(f"{proto.step}: line {op.line}: barrier {op.value} used with {op.threads} "
                                f"and {st['threads']} threads")
        if w in st["warps"]:
            raise ProtocolError(f"{proto.step}: {proto.role(w)} line {op.line} `{op.text}` arrives on barrier "
                                f"{op.value} twice in one generation: its threads count twice, and the "
                                "generation completes without the warps it was meant to wait for")
        st["warps"].add(w)
        st["arrived"] += WARP
        if waits:
            st["waiting"].add(w)
            blocked_at_sync.add(w)
        if st["arrived"] > st["threads"]:
            raise ProtocolError(f"{proto.step}: line {op.line}: more threads than barrier {op.value} expects")
        if st["arrived"] == st["threads"]:
            for x in st["waiting"]:
                blocked_at_sync.discard(x)
                pc[x] += 1
            named[op.value] = {"threads": op.threads, "arrived": 0, "waiting": set(), "warps": set()}
        return not waits

    def warp_step(w):
        if w in blocked_at_sync:
            return False
        op = proto.warps[w][pc[w]]
        if op.kind == "wait":
            if not pass_wait(w, op):
                return False
        elif op.kind in ("arrive", "expect"):
            for _ in range(op.value):
                bars[op.bar].arrive(expect_tx=op.copies if op.kind == "expect" else 0)
        elif op.kind == "copy":
            copies.append(op.bar)
        elif op.kind == "commit":
            commits.append(op)
        elif op.kind in ("sync", "bar_arrive"):
            if not named_barrier(w, op, waits=op.kind == "sync"):
                return True
        pc[w] += 1
        return True

    def land_copy(i):
        bars[copies.pop(i)].complete_tx(1)
        return True

    def land_commit(i):
        op = commits.pop(i)
        for _ in range(op.value):
            bars[op.bar].arrive(asynchronous=True)
        return True

    for steps in range(max_steps):
        actors = [lambda w=w: warp_step(w) for w in range(len(pc)) if pc[w] < len(proto.warps[w])]
        actors += [lambda i=i: land_copy(i) for i in range(len(copies))]
        actors += [lambda i=i: land_commit(i) for i in range(len(commits))]
        if not actors:
            _check_end(proto, bars, seen, waited)
            half = {i: st for i, st in named.items() if st["arrived"]}
            if half:
                raise ProtocolError(f"{proto.step}: named barrier(s) {sorted(half)} end with threads arrived "
                                    "and no generation completed")
            return steps
        rng.shuffle(actors)
        if not any(actor() for actor in actors):
            raise ProtocolError(f"{proto.step}: deadlock, nobody can move:\n" + _blocked(proto, pc, bars, named))
    raise ProtocolError(f"{proto.step}: no end within {max_steps} steps")


def _blocked(proto, pc, bars, named) -> str:
    out = []
    for w, ops in enumerate(proto.warps):
        if pc[w] >= len(ops):
            continue
        op = ops[pc[w]]
        if op.kind == "wait":
            b = bars[op.bar]
            out.append(f"  {proto.role(w)}: line {op.line} `{op.text}` waits on {op.bar} for parity {op.value}; "
                       f"it has completed {b.phase} phase(s), {b.pending} of {b.count} arrivals and {b.tx} "
                       "copies still pending")
        else:
            st = named.get(op.value, {})
            out.append(f"  {proto.role(w)}: line {op.line} `{op.text}` at barrier {op.value} "
                       f"({st.get('arrived', 0)} of {op.threads} threads arrived)")
    return "\n".join(out)


def _check_end(proto, bars, seen, waited):
    for bar, b in bars.items():
        arrived = b.phase > 0 or b.pending != b.count
        if arrived and bar not in waited:
            raise ProtocolError(f"{proto.step}: {bar} is arrived on but no warp ever waits on it")
        late = sorted(c for c in b.async_completions if c not in seen[bar])
        if late:
            raise ProtocolError(f"{proto.step}: completion {late[0]} of {bar} is made by an asynchronous arrive "
                                "(a tcgen05.commit or a copy's bytes) that no warp waits for: it may land after "
                                "the CTA exits, in shared memory that belongs to the next CTA")
        if b.pending != b.count or b.tx:
            raise ProtocolError(f"{proto.step}: {bar} ends with a phase half done "
                                f"({b.count - b.pending} of {b.count} arrivals, {b.tx} copies pending)")


def replay_many(module, *, n_blocks=range(1, 7), seeds=range(25), source=None, step=None,
                n_tiles=(1, 2, 3)) -> None:
    """Replay for each tile count; a persistent kernel (one that names ``n_tiles``) also for each
    count of work tiles per CTA."""
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
    """Who arrives on and who waits on each barrier, by role and line: the suspects of a hang."""
    proto = extract(module, n_blocks)
    sites: dict = {}
    for w, ops in enumerate(proto.warps):
        for op in ops:
            if op.bar is None:
                continue
            key = (op.bar.name, op.kind, op.line, op.text)
            sites.setdefault(key, {"warps": set(), "indices": set()})
            sites[key]["warps"].add(w)
            sites[key]["indices"].add(op.bar.index)
    verb = {"wait": "wait", "arrive": "arrive", "expect": "arrive + expect-tx", "copy": "TMA copy lands",
            "commit": "tcgen05.commit arrives"}
    names = sorted({b.name for b in proto.counts}, key=lambda n: min(
        (op.line for ops in proto.warps for op in ops if op.bar and op.bar.name == n), default=0))
    lines = []
    for name in names:
        idx = sorted(b.index for b in proto.counts if b.name == name)
        count = {proto.counts[Bar(name, i)] for i in idx}
        label = name if idx == [0] else f"{name}[{idx[0]}..{idx[-1]}]"
        lines.append(f"{label} (arrival count {'/'.join(map(str, sorted(count)))}):")
        for (n, kind, line, text), s in sorted(sites.items(), key=lambda kv: kv[0][2]):
            if n != name:
                continue
            ws = s["warps"]
            who = _warp_ranges(ws) if len(ws) > 1 else proto.role(next(iter(ws)))
            lines.append(f"  line {line:4d}  {who}: {verb[kind]}  `{text}`")
    syncs = sorted({(op.line, op.text) for ops in proto.warps for op in ops if op.kind in ("sync", "bar_arrive")})
    if syncs:
        lines.append("CTA / named barriers:")
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
    left out. ``groups``: name -> warps."""
    def bars(warps, kind):
        return [op.bar for w in warps for op in proto.warps[w] if op.kind == kind]
    arrived = {g: set(bars(ws, "arrive")) for g, ws in groups.items()}
    waits = {g: bars(ws[:1], "wait") for g, ws in groups.items()}
    per_tile = {g: {b for b in set(ws) if ws.count(b) > 1} for g, ws in waits.items()}
    ops = proto.warps[issuer]
    found = set()
    for a in groups:
        for i, op in enumerate(ops):
            if op.kind not in ("commit", "arrive") or op.bar not in per_tile[a]:
                continue
            for prev in reversed(ops[:i]):
                if prev.kind != "wait":
                    continue
                if prev.bar in arrived[a]:
                    break
                for b in groups:
                    if b != a and prev.bar in arrived[b]:
                        found.add(f"{a} waits for {b}: the {op.bar} completion of line {op.line} follows the "
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
