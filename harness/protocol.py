"""Every step's barrier protocol, read from its kernel's source and replayed under random schedules.

The kernel function is walked as Python syntax, warp by warp: ``warp_idx``, ``cta_rank`` and
``n_blocks`` are given, the step module's own constants and functions (``ring_position``,
``NUM_STAGES``, ...) are used as they are, and every branch and loop that contains a barrier
operation is decided. What comes out is, per warp, the list of its barrier operations in program
order:

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
``cluster_arrive`` / ``cluster_wait``  the cluster barrier (a cluster step only, below)
``dealloc_tmem(is_two_cta=True)``      the pair's TMEM freed (a cluster step only, below)
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

Clusters. A step with ``CLUSTER_CTAS = 2`` (b13) is replayed as one system of both CTAs, warp w of
CTA c being the protocol's warp ``c * warps_per_cta + w``, interleaved at random like any warps.
A barrier is then (field, index, CTA), and every CTA runs the same kernel with its own
``cta_rank``:

- waits, inits, arrivals with one argument, expect-tx and the named barriers (keyed by CTA and
  id) act on the warp's own CTA; ``mbarrier_arrive(bar, target)`` arrives on CTA ``target``'s;
- ``tcgen05.commit(bar, mask, ...)`` lands one asynchronous arrival on the barrier in every CTA
  whose bit is set in ``mask`` (each landing at its own time); without a mask, on its own CTA;
- TMA copies are cta_group::2 loads: their bytes complete on the pair leader's barrier (CTA
  ``c & ~1``), whichever CTA issues them. Only the leader issues the expect-tx, and it is taken
  to announce its own following copies on that barrier twice (the pair's bytes: the peer's
  matching copies); the bytes themselves are compared with the PTX elsewhere
  (tests/test_blackwell_steps.py). A copy needs an expect-tx on its barrier before the leader's
  copy of the same rank in the leader's warp. The peer's bytes may land before the leader's
  expect-tx (the tx-count goes below zero, as the PTX ISA allows). Bytes are counted, not tiles:
  that a peer's copy lands in the phase it is meant for is not checked;
- ``cluster_arrive[_relaxed]`` / ``cluster_wait``: the cluster barrier, which a warp passes once
  every warp of every CTA has arrived for that generation (the relaxed arrive is taken to publish
  the inits: the kernel's ``fence.mbarrier_init`` before it does);
- a remote arrive is, for the CTA it lands in, like an asynchronous agent: its completion needs a
  waiter there (the arriving thread is not in that CTA, which could exit first);
- inits stay in the warp's program, and the replay follows what each warp knows to have happened
  (through mbarrier phases, commits, copies, named and cluster barriers): using a barrier (a wait,
  an arrive, an expect-tx, issuing a copy or a commit on it) that nothing orders after its
  ``mbarrier_init`` is an error, whatever the schedule (the cluster barrier after the init is
  what orders the other CTA's uses);
- ``dealloc_tmem(..., is_two_cta=True)`` frees the pair's TMEM: it must be ordered after every
  warp of both CTAs has reached its last ``sync_threads`` (done with TMEM), which in b13 is the
  MMA warps' handshake on each other's ``tmem_free``.

In a 1-CTA step (no ``CLUSTER_CTAS``, or 1) inits are hoisted before everything (each step follows
them with ``sync_threads``), and an arrive with a target CTA or a commit with a mask is refused.
Clusters of more than a pair are not modelled.

What it does not check: what a barrier protects. That a commit comes after the MMAs that read a
stage, or that an MMA's TMEM operands are not overwritten while it runs, is the business of the
K/V ring replay (harness/pipeline_model.py: which tile a stage holds, who reads it) and of the
MMA-pipe model (harness/mma_pipe.py).
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
_PARAMS = ("warp_idx", "cta_rank", "n_blocks", "n_tiles")   # given, never re-assigned by the walk
                                                            # (n_tiles: a persistent CTA's work tiles, h14)
_SAFE_BUILTINS = {"range": range, "len": len, "min": min, "max": max, "tuple": tuple, "int": int}
_CLUSTER_OPS = {"cluster_arrive": "cluster_arrive", "cluster_arrive_relaxed": "cluster_arrive",
                "cluster_wait": "cluster_wait"}


class ExtractionError(ValueError):
    """The kernel does something with barriers that the walk cannot decide."""


@dataclass(frozen=True)
class Bar:
    """One mbarrier: a shared-storage field and an index into it (``kv_full + stage``), and in a
    cluster the CTA whose shared memory holds it (None in a 1-CTA step)."""
    name: str
    index: int = 0
    cta: int | None = None

    def __add__(self, k):
        if not isinstance(k, int):
            return NotImplemented
        return Bar(self.name, self.index + k, self.cta)

    __radd__ = __add__

    def __str__(self):
        bar = f"{self.name}[{self.index}]"
        return bar if self.cta is None else f"cta {self.cta}'s {bar}"


@dataclass(frozen=True)
class Op:
    kind: str          # init, wait, arrive, expect, copy, commit, sync, bar_arrive, mark,
                       # cluster_arrive, cluster_wait, dealloc
    line: int          # line in the step file
    text: str          # the call as written
    bar: Bar | None = None
    value: int = 0     # init: count; wait: parity; arrive/expect/commit: arrivals; sync: barrier id
    threads: int = 0   # sync / bar_arrive: the barrier's thread count
    copies: int = 0    # expect: copies announced
    tile: int = 0      # mark: the K/V tile of a timeline phase (harness/timeline.py); value: its phase
    edge: int = 0      # mark: 0 begin, 1 end
    ctas: tuple = ()   # commit with a mask: the CTAs it lands in (bar: in the first of them)


def lands_on(op: Op) -> tuple:
    """The barriers an operation arrives on: a multicast commit's in each CTA of its mask."""
    return tuple(Bar(op.bar.name, op.bar.index, c) for c in op.ctas) or (op.bar,)


@dataclass
class Protocol:
    step: str
    warps: list          # warps[w] = [Op, ...]; in a cluster, warp w of CTA c is c * warps_per_cta + w
    counts: dict         # Bar -> arrival count
    roles: dict = field(default_factory=dict)   # warp (of one CTA) -> role name
    ctas: int = 1

    @property
    def warps_per_cta(self) -> int:
        return len(self.warps) // self.ctas

    def cta_of(self, w: int) -> int:
        return w // self.warps_per_cta

    def role(self, w: int) -> str:
        local = w % self.warps_per_cta
        name = self.roles.get(local, f"warp {local}")
        return name if self.ctas == 1 else f"{name} (cta {self.cta_of(w)})"

    def cta_counts(self) -> dict:
        """Each barrier's arrival count in one CTA's code (all CTAs run the same code: the counts the
        PTX initialises)."""
        return {Bar(b.name, b.index): n for b, n in self.counts.items()}


def cluster_warps(proto: Protocol, warps) -> list[int]:
    """The protocol's warps that are the given warps of one CTA (``warp_roles``), in every CTA."""
    return [c * proto.warps_per_cta + w for c in range(proto.ctas) for w in warps]


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
                      "sync_threads", "barrier", "barrier_arrive", *_CLUSTER_OPS):
            return f.attr
        # only the pair's dealloc is a protocol event (it needs both CTAs done with TMEM)
        if f.attr == "dealloc_tmem" and (len(call.args) > 2 or any(k.arg == "is_two_cta" for k in call.keywords)):
            return "dealloc"
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
    """Walks the kernel body for one warp (of CTA ``cta`` of a cluster of ``ctas``), collecting its
    barrier operations."""

    def __init__(self, module, source_lines, warp: int, n_blocks: int, threads: int, n_tiles: int = 1,
                 cta: int = 0, ctas: int = 1):
        self.glob = {k: v for k, v in vars(module).items()
                     if isinstance(v, (int, float, bool, tuple, str)) or
                     (inspect.isfunction(v) and v.__module__ == module.__name__)}
        self.env = {"warp_idx": warp, "cta_rank": cta, "n_blocks": n_blocks, "n_tiles": n_tiles}
        self.lines = source_lines
        self.threads = threads
        self.cta, self.ctas = cta, ctas
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

    def barrier(self, node, cta: int | None = None) -> Bar:
        """The barrier ``node`` names, in CTA ``cta`` (default: the warp's own) of a cluster."""
        bar = self.decide(node, "barrier")
        if self.ctas == 1:
            return bar
        return Bar(bar.name, bar.index, self.cta if cta is None else cta)

    def need_cluster(self, call, what):
        if self.ctas == 1:
            raise ExtractionError(f"line {call.lineno}: {what} is not modelled: the step has no cluster "
                                  "(CLUSTER_CTAS)")

    def target_cta(self, node, call, what) -> int:
        self.need_cluster(call, what)
        cta = self.decide(node, "target CTA")
        if not isinstance(cta, int) or not 0 <= cta < self.ctas:
            raise ExtractionError(f"line {call.lineno}: target CTA {cta!r} is not in the cluster of {self.ctas}")
        return cta

    def op(self, call: ast.Call):
        name = _call_name(call)
        text = self.lines[call.lineno - 1].strip()
        kw = {k.arg: k.value for k in call.keywords}
        add = lambda kind, **a: self.ops.append(Op(kind, call.lineno, text, **a))  # noqa: E731
        arrivals = 1 if self.elect else WARP
        if name == "mbarrier_init":
            add("init", bar=self.barrier(call.args[0]), value=self.decide(call.args[1], "arrival count"))
        elif name == "mbarrier_wait":
            add("wait", bar=self.barrier(call.args[0]), value=self.decide(call.args[1], "parity") % 2)
        elif name == "mbarrier_arrive":
            target = call.args[1] if len(call.args) > 1 else kw.pop("peer_cta_rank_in_cluster", None)
            if len(call.args) > 2 or kw:
                raise ExtractionError(f"line {call.lineno}: an arrive with a count or options is not modelled")
            cta = None if target is None else self.target_cta(target, call, "an arrive on another CTA's barrier")
            add("arrive", bar=self.barrier(call.args[0], cta), value=arrivals)
        elif name == "mbarrier_arrive_and_expect_tx":
            if len(call.args) > 2 or "peer_cta_rank_in_cluster" in kw:
                raise ExtractionError(f"line {call.lineno}: an expect-tx on another CTA's barrier is not modelled")
            add("expect", bar=self.barrier(call.args[0]), value=arrivals)
        elif name == "commit":
            mask = call.args[1] if len(call.args) > 1 else kw.get("mask")
            if mask is None or (isinstance(mask, ast.Constant) and mask.value is None):
                add("commit", bar=self.barrier(call.args[0]), value=arrivals)
                return
            self.need_cluster(call, "a multicast commit (a mask)")
            m = self.decide(mask, "commit mask")
            ctas = tuple(c for c in range(self.ctas) if m >> c & 1)
            if not ctas or m >> self.ctas:
                raise ExtractionError(f"line {call.lineno}: commit mask {m:#b} does not name CTAs of the cluster "
                                      f"of {self.ctas}")
            add("commit", bar=self.barrier(call.args[0], ctas[0]), value=arrivals, ctas=ctas)
        elif name == "copy":
            # cta_group::2: the bytes complete on the pair leader's barrier
            add("copy", bar=self.barrier(kw["tma_bar_ptr"], self.cta & ~1))
        elif name == "mark":
            add("mark", tile=self.decide(call.args[1], "timeline tile"), value=self.decide(call.args[2], "phase"),
                edge=self.decide(call.args[3], "edge"))
        elif name in _CLUSTER_OPS:
            add(_CLUSTER_OPS[name])
        elif name == "dealloc":
            two = call.args[2] if len(call.args) > 2 else kw["is_two_cta"]
            if self.decide(two, "is_two_cta"):
                self.need_cluster(call, "the pair's TMEM dealloc (is_two_cta)")
                add("dealloc")
        elif name in ("sync_threads", "barrier", "barrier_arrive"):
            bid = self.decide(kw["barrier_id"], "barrier id") if "barrier_id" in kw else 0
            n = self.decide(kw["number_of_threads"], "thread count") if "number_of_threads" in kw else self.threads
            add("sync" if name != "barrier_arrive" else "bar_arrive", value=bid, threads=n)


def _announce_copies(ops: list[Op], leader_ops: list[Op] | None = None, pair: int = 1,
                     who: tuple = ("", "")) -> list[Op]:
    """An expect-tx announces the copies its warp issues next on the same barrier. In a cluster
    (``pair`` 2) a copy lands on the leader's barrier: it is announced by an expect-tx there before
    the leader's copy of the same rank in ``leader_ops`` (the same warp of the leader CTA), and the
    leader's expect-tx announces its own copies twice (the pair's). ``who``: the two warps' names."""
    leader_ops = ops if leader_ops is None else leader_ops
    out = list(ops)
    rank: dict = {}
    for i, op in enumerate(ops):
        if op.kind == "copy":
            k = rank[op.bar] = rank.get(op.bar, -1) + 1
            mine = [j for j, p in enumerate(leader_ops) if p.kind == "copy" and p.bar == op.bar]
            if k >= len(mine) or not any(p.kind == "expect" and p.bar == op.bar for p in leader_ops[:mine[k]]):
                if pair == 1:
                    raise ProtocolError(f"line {op.line}: a TMA copy on {op.bar} with no expect-tx announcing it")
                raise ProtocolError(f"line {op.line}: a TMA copy on {op.bar} by {who[0]} with no expect-tx announcing "
                                    f"it: {who[1]} has none on it before its own copy number {k + 1} there")
        if op.kind != "expect":
            continue
        n = 0
        for later in ops[i + 1:]:
            if later.bar == op.bar and later.kind != "copy":
                break
            n += later.kind == "copy" and later.bar == op.bar
        out[i] = Op(op.kind, op.line, op.text, op.bar, op.value, copies=n * pair)
    return out


def _role_names(module, n_warps: int, cluster: bool = False) -> dict:
    """Warp -> name from the step's own constants (``MMA_WARP = 8`` names warp 8); in a cluster also
    from ``INFO.extra["warp_roles"]`` (the names then say the CTA: ``Protocol.role``)."""
    names = {}
    for k, v in vars(module).items():
        if k.endswith("_WARP") and isinstance(v, int) and 0 <= v < n_warps and not isinstance(v, bool):
            names[v] = f"{k.removesuffix('_WARP').lower()} warp {v}"
    if cluster:
        for role, ws in module.INFO.extra.get("warp_roles", {}).items():
            for w in ws:
                names.setdefault(w, f"{role} warp {w}")
    return names


def extract(module, n_blocks: int, source: str | None = None, step: str | None = None,
            n_tiles: int = 1) -> Protocol:
    """The step's barrier operations, warp by warp, for a CTA (a cluster: every CTA of it) that
    loops over ``n_blocks`` tiles (of each of ``n_tiles`` work tiles, for a persistent kernel that
    names them ``n_tiles``). ``source`` replaces the module's file (to check a deliberately broken
    copy)."""
    source = inspect.getsource(module) if source is None else source
    helpers = _helpers_with_barriers(source)
    if helpers:
        raise ExtractionError(f"barrier operations outside `kernel` ({', '.join(helpers)}) are not modelled")
    kernel = _kernel_def(source)
    lines = source.splitlines()
    threads = module.INFO.threads
    ctas = getattr(module, "CLUSTER_CTAS", 1)
    if ctas not in (1, 2):
        raise ExtractionError(f"a cluster of {ctas} CTAs is not modelled (only a pair)")
    per_cta = threads // WARP
    warps = []
    for cta in range(ctas):
        for w in range(per_cta):
            walk = _Walk(module, lines, w, n_blocks, threads, n_tiles, cta=cta, ctas=ctas)
            walk.block(kernel.body)
            warps.append(walk.ops)
    proto = Protocol(step or module.INFO.id, warps, {}, _role_names(module, per_cta, ctas > 1), ctas)
    leader = [(w // per_cta & ~1) * per_cta + w % per_cta for w in range(len(warps))]
    warps = [_announce_copies(ops, warps[leader[w]], ctas, (proto.role(w), proto.role(leader[w])))
             for w, ops in enumerate(warps)]
    counts = proto.counts
    for ops in warps:
        for op in ops:
            if op.kind == "init":
                if op.bar in counts:
                    raise ProtocolError(f"line {op.line}: {op.bar} initialised twice")
                if op.value < 1:
                    raise ProtocolError(f"line {op.line}: {op.bar} initialised with {op.value} arrivals")
                counts[op.bar] = op.value
    if ctas == 1:       # inits hoisted: every 1-CTA step follows them with sync_threads
        warps = [[op for op in ops if op.kind != "init"] for ops in warps]
    for ops in warps:
        for op in ops:
            if op.bar is not None and any(b not in counts for b in lands_on(op)):
                bar = next(b for b in lands_on(op) if b not in counts)
                raise ProtocolError(f"line {op.line}: {bar} is used but never initialised")
    proto.warps = warps
    return proto


# ------------------------------------------------------------------------------------------------
# Replay
# ------------------------------------------------------------------------------------------------

class _PairBarrier(MBarrier):
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
    bars = {b: (_PairBarrier if cluster else MBarrier)(n) for b, n in proto.counts.items()}
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
    clusterbar = {"arrived": [0] * n_warps, "waited": [0] * n_warps, "know": {}}

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

    def need_init(w, op, bar):
        if cluster and not know[w] & bit[bar]:
            iw, init = init_site[bar]
            raise ProtocolError(f"{proto.step}: {proto.role(w)} line {op.line} `{op.text}` uses {bar}, which may not "
                                f"be initialised yet: nothing orders it after its mbarrier_init ({proto.role(iw)} "
                                f"line {init.line}); a remote arrive, copy or commit before the cluster barrier?")

    def arrive(bar, times, knowledge, expect=0, asynchronous=False, tx=0):
        b = bars[bar]
        before = b.phase
        for _ in range(times):
            b.arrive(expect_tx=expect, asynchronous=asynchronous)
        if tx:
            b.complete_tx(tx)
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
            named[key] = {"threads": op.threads, "arrived": 0, "waiting": set(), "warps": set(), "know": 0}
        return not waits

    def cluster_barrier(w, op, waits):
        arrived, done = clusterbar["arrived"], clusterbar["waited"]
        gen = done[w]
        if not waits:
            if arrived[w] != gen:
                raise ProtocolError(f"{proto.step}: {proto.role(w)} line {op.line} `{op.text}` arrives on the cluster "
                                    "barrier twice without waiting in between")
            clusterbar["know"][gen] = clusterbar["know"].get(gen, 0) | know[w]
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
        elif op.kind in ("arrive", "expect"):
            need_init(w, op, op.bar)
            # another CTA's arrive is asynchronous to this one: its exit does not wait for it
            arrive(op.bar, op.value, know[w], expect=op.copies if op.kind == "expect" else 0,
                   asynchronous=cluster and op.bar.cta != cta[w])
        elif op.kind == "copy":
            need_init(w, op, op.bar)
            copies.append((op.bar, know[w]))
        elif op.kind == "commit":
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
        arrive(bar, 0, knowledge, tx=1)
        return True

    def land_commit(i):
        op, bar, knowledge = commits.pop(i)
        arrive(bar, op.value, knowledge, asynchronous=True)
        return True

    for steps in range(max_steps):
        actors = [lambda w=w: warp_step(w) for w in range(n_warps) if pc[w] < len(proto.warps[w])]
        actors += [lambda i=i: land_copy(i) for i in range(len(copies))]
        actors += [lambda i=i: land_commit(i) for i in range(len(commits))]
        if not actors:
            _check_end(proto, bars, seen, waited)
            half = {key: st for key, st in named.items() if st["arrived"]}
            if half:
                ids = sorted(i for _, i in half) if not cluster else [f"cta {c}'s {i}" for c, i in sorted(half)]
                raise ProtocolError(f"{proto.step}: named barrier(s) {ids} end with threads arrived "
                                    "and no generation completed")
            return steps
        rng.shuffle(actors)
        if not any(actor() for actor in actors):
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


def _check_end(proto, bars, seen, waited):
    for bar, b in bars.items():
        arrived = b.phase > 0 or b.pending != b.count
        if arrived and bar not in waited:
            raise ProtocolError(f"{proto.step}: {bar} is arrived on but no warp ever waits on it")
        late = sorted(c for c in b.async_completions if c not in seen[bar])
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
