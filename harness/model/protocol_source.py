"""A kernel's barrier protocol read from its source (``extract``): the kernel function walked as
Python syntax, warp by warp, every branch and loop around a barrier operation decided, and every
call of a module-level function that holds barrier operations (a warp role: ``load_warp(...)``)
walked in turn with its parameters bound to the caller's arguments; what the operations are and
what the replay checks is in harness/model/protocol.py.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re

from harness.model.pipeline_model import ProtocolError
from harness.model.protocol import PROBE, RELAXED, WARP, Bar, ExtractionError, Op, Protocol, lands_on

_PARAMS = ("warp_idx", "cta_rank", "n_blocks", "n_tiles")   # given, never re-assigned by the walk
                                                            # (n_tiles: a persistent CTA's work tiles, h14)
_RANK = {"cta_rank", "block_idx", "block_idx_in_cluster"}    # differ between the CTAs of a cluster
_SAFE_BUILTINS = {"range": range, "len": len, "min": min, "max": max, "tuple": tuple, "int": int}
_CLUSTER_OPS = {"cluster_arrive": "cluster_arrive", "cluster_arrive_relaxed": "cluster_arrive",
                "cluster_wait": "cluster_wait"}



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


def _called_function(call: ast.Call) -> str | None:
    """The name of the module-level function a call calls (``load_warp(...)``), if it is one."""
    return call.func.id if isinstance(call.func, ast.Name) else None


def _has_barrier_op(node: ast.AST) -> bool:
    """Whether any call under ``node`` is a barrier operation; kept on the node (the walk asks again
    for every statement it enters, and a parsed source is reused: ``_parsed``)."""
    found = getattr(node, "_ladder_barrier_op", None)
    if found is None:
        found = any(isinstance(n, ast.Call) and (_call_name(n) or getattr(n, "_ladder_role", None))
                    for n in ast.walk(node))
        node._ladder_barrier_op = found
    return found


@functools.lru_cache(maxsize=64)
def _parsed(source: str) -> ast.Module:
    """A step file's syntax tree, parsed once per text (extract runs for many tile counts and
    schedules). Every call of a module-level function that reaches a barrier operation, directly
    or through another such call, is marked with the callee's definition (``_ladder_role``)."""
    tree = ast.parse(source)
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    calls = {name: [c for c in ast.walk(d) if isinstance(c, ast.Call) and _called_function(c) in defs]
             for name, d in defs.items()}
    roles = {name for name, d in defs.items()
             if any(isinstance(c, ast.Call) and _call_name(c) for c in ast.walk(d))}
    grown = True
    while grown:                      # a function that calls a role is a role too
        more = {name for name, cs in calls.items() if any(_called_function(c) in roles for c in cs)}
        grown = bool(more - roles)
        roles |= more
    for cs in calls.values():
        for c in cs:
            if _called_function(c) in roles - {"kernel"}:
                c._ladder_role = defs[_called_function(c)]
    return tree


def _kernel_def(source: str) -> ast.FunctionDef:
    for node in _parsed(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == "kernel":
            return node
    raise ExtractionError("no `def kernel` in the step file")


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

    def call(self, call: ast.Call, fn: ast.FunctionDef):
        """Walk a role function's body with its parameters bound to ``call``'s arguments (those
        the walk can decide; the others unknown) in a scope of its own, as Python would."""
        a = fn.args
        if a.vararg or a.kwarg or a.posonlyargs or a.kwonlyargs:
            raise ExtractionError(f"line {fn.lineno}: `{fn.name}` takes *args, **kwargs or keyword-only "
                                  "parameters: not modelled")
        params = [p.arg for p in a.args]
        given = dict(zip(params, call.args, strict=False))
        if len(call.args) > len(params) or any(isinstance(x, ast.Starred) for x in call.args):
            raise ExtractionError(f"line {call.lineno}: the call of `{fn.name}` does not match its parameters")
        for k in call.keywords:
            if k.arg not in params or k.arg in given:
                raise ExtractionError(f"line {call.lineno}: `{fn.name}` has no parameter {k.arg!r} "
                                      "(or gets it twice)")
            given[k.arg] = k.value
        defaults = dict(zip(params[len(params) - len(a.defaults):], a.defaults, strict=True))
        scope = {k: self.env[k] for k in _PARAMS}
        for name in params:
            node = given.get(name, defaults.get(name))
            if node is None:
                raise ExtractionError(f"line {call.lineno}: the call of `{fn.name}` leaves {name!r} unset")
            try:
                scope[name] = self.value(node)
            except Exception:
                pass                       # not decidable here: unknown inside too
        outer, self.env = self.env, scope
        try:
            self.block(fn.body)
        finally:
            self.env = outer

    def stmt(self, s):
        role = getattr(s.value, "_ladder_role", None) if isinstance(s, (ast.Expr, ast.Assign)) else None
        if role is None and isinstance(s, (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign)) and any(
                getattr(n, "_ladder_role", None) for n in ast.walk(s)):
            raise ExtractionError(f"line {s.lineno}: a call of a function with barrier operations inside an "
                                  "expression is not modelled: call it as a statement")
        if role is not None:
            self.call(s.value, role)
            if isinstance(s, ast.Assign):  # what a role returns is not followed
                for t in s.targets:
                    self.forget(t)
        elif isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and _call_name(s.value):
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
        elif isinstance(s, ast.Return) and s.value is not None and _has_barrier_op(s.value):
            raise ExtractionError(f"line {s.lineno}: a barrier operation in a return statement is not modelled")
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

    def mask_ctas(self, call, node, what) -> tuple:
        """The CTAs a bit mask names (``cutlass.Int16(m)`` read as ``m``)."""
        self.need_cluster(call, f"a {what}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and len(node.args) == 1 \
                and re.fullmatch(r"U?[Ii]nt(8|16|32|64)", node.func.attr):
            node = node.args[0]
        m = self.decide(node, what)
        ctas = tuple(c for c in range(self.ctas) if m >> c & 1)
        if not ctas or m >> self.ctas:
            raise ExtractionError(f"line {call.lineno}: {what} {m:#b} does not name CTAs of the cluster of {self.ctas}")
        return ctas

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
            kw.pop("scope", None)     # memory-model scope (CTA or cluster), not the arrival count
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
            ctas = self.mask_ctas(call, mask, "commit mask")
            add("commit", bar=self.barrier(call.args[0], ctas[0]), value=arrivals, ctas=ctas)
        elif name == "copy":
            if "mcast_mask" in kw:
                # a multicast load: its bytes land in every CTA of the mask, each on its own barrier
                ctas = self.mask_ctas(call, kw["mcast_mask"], "multicast mask")
                add("copy", bar=self.barrier(kw["tma_bar_ptr"]), ctas=ctas)     # bar: its own CTA's
            else:
                # cta_group::2: the bytes complete on the pair leader's barrier
                add("copy", bar=self.barrier(kw["tma_bar_ptr"], self.cta & ~1))
        elif name == "mark":
            add("mark", tile=self.decide(call.args[1], "timeline tile"), value=self.decide(call.args[2], "phase"),
                edge=self.decide(call.args[3], "edge"))
        elif name in _CLUSTER_OPS:
            add(_CLUSTER_OPS[name], value=RELAXED if name == "cluster_arrive_relaxed" else 0)
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
            # a multicast copy's own CTA announces it as the other CTAs do theirs (the same code)
            source = ops if op.ctas else leader_ops
            k = rank[op.bar] = rank.get(op.bar, -1) + 1
            mine = [j for j, p in enumerate(source) if p.kind == "copy" and p.bar == op.bar]
            if k >= len(mine) or not any(p.kind == "expect" and p.bar == op.bar for p in source[:mine[k]]):
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


def _rank_functions(tree: ast.Module) -> set:
    """Module-level functions whose value may differ between the CTAs of a cluster: those that read a
    rank source (``block_idx()``; ``cta_rank`` when not a parameter of theirs) or call (or name) such a
    function, transitively."""
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    own = {d.name: {a.arg for a in ast.walk(d.args) if isinstance(a, ast.arg)} for d in defs}
    ranked: set = set()
    grown = True
    while grown:
        more = {d.name for d in defs if any(isinstance(n, ast.Attribute) and n.attr in _RANK or isinstance(n, ast.Name)
                                            and (n.id in _RANK - own[d.name] or n.id in ranked) for n in ast.walk(d))}
        grown = bool(more - ranked)
        ranked |= more
    return ranked


def _guards(node, parent: dict) -> list:
    """The tests ``node`` runs under in its function: each enclosing if's, while's or conditional
    expression's test, each enclosing for's iterable, and in an enclosing loop every test of an if
    that holds a break or continue (it decides how often the loop body runs)."""
    out = []
    while node in parent:
        node, child = parent[node], node
        if isinstance(node, (ast.If, ast.While, ast.IfExp)) and child is not node.test:
            out.append(node.test)
        if isinstance(node, ast.For) and child is not node.iter:
            out.append(node.iter)
        if isinstance(node, (ast.For, ast.While)):
            out += [i.test for i in ast.walk(node) if isinstance(i, ast.If) and
                    any(isinstance(b, (ast.Break, ast.Continue)) for b in ast.walk(i))]
    return out


def _check_cluster_counts(tree: ast.Module):
    """A cluster is replayed with one ``n_tiles`` and one ``n_blocks`` for all its CTAs (they walk the
    work in step), and the walk never re-assigns either: wherever the source assigns them (the kernel
    or a role function), the value must not depend on which CTA of the cluster computes it, only on
    the cluster's index and the shape, so that both CTAs get the same counts for every shape. Rank
    sources: ``cta_rank``, ``block_idx()``, ``block_idx_in_cluster()``, and a call of a module-level
    function that reads one (``_rank_functions``). A name depends on the rank when an assignment to it
    (a for's target: from its iterable) has a rank-dependent value or runs under a rank-dependent test
    (``_guards``: ``if cta_rank == 1: n_tiles -= 1``). Not followed: an early return or a raise under a
    rank-dependent test, and what a called function does with a rank-dependent argument (its value is
    rank-dependent only through the argument, which is seen)."""
    if getattr(tree, "_ladder_counts_checked", False):      # a parsed source is reused (_parsed)
        return
    rank_fns = _rank_functions(tree)

    def depends(node, ranked):
        return node is not None and any(isinstance(n, ast.Name) and n.id in ranked or
                                        isinstance(n, ast.Attribute) and n.attr in _RANK for n in ast.walk(node))

    def targets(a):
        return {n.id for t in getattr(a, "targets", [getattr(a, "target", None)]) for n in ast.walk(t)
                if isinstance(n, ast.Name)}
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        parent = {c: p for p in ast.walk(fn) for c in ast.iter_child_nodes(p)}
        sources = {a: [a.iter if isinstance(a, ast.For) else a.value, *_guards(a, parent)] for a in ast.walk(fn)
                   if isinstance(a, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.NamedExpr))}
        ranked = set(_RANK) | rank_fns
        grown = True
        while grown:                # what a rank-dependent value is assigned to depends on the rank too
            grown = False
            for a, src in sources.items():
                if targets(a) - ranked and any(depends(x, ranked) for x in src):
                    ranked |= targets(a)
                    grown = True
        for a, src in sources.items():
            for name in sorted(targets(a) & {"n_tiles", "n_blocks"}):
                if any(depends(x, ranked) for x in src):
                    raise ExtractionError(
                        f"line {a.lineno}: {name} depends on the CTA's rank in the cluster: the replay gives "
                        "every CTA of a cluster the same count (a CTA walking more tiles than its peer waits "
                        "forever on the peer's barriers)")
    tree._ladder_counts_checked = True


def extract(module, n_blocks: int, source: str | None = None, step: str | None = None,
            n_tiles: int = 1) -> Protocol:
    """The step's barrier operations, warp by warp, for a CTA (a cluster: every CTA of it) that
    loops over ``n_blocks`` tiles (of each of ``n_tiles`` work tiles, for a persistent kernel that
    names them ``n_tiles``). ``source`` replaces the module's file (to check a deliberately broken
    copy).

    ``n_tiles`` and ``n_blocks`` are given, not computed from the scheduler or the shape: the replay
    covers the counts it is asked for (``replay_many``), and in a cluster every CTA gets the same ones.
    That assumption is checked on the source (``_check_cluster_counts``: no assignment of either
    depends on the CTA's rank in the cluster); that the scheduler's counts cover the work is not
    checked here."""
    source = inspect.getsource(module) if source is None else source
    kernel = _kernel_def(source)
    lines = source.splitlines()
    threads = module.INFO.threads
    ctas = getattr(module, "CLUSTER_CTAS", 1)
    if ctas not in (1, 2):
        raise ExtractionError(f"a cluster of {ctas} CTAs is not modelled (only a pair)")
    if ctas > 1:
        _check_cluster_counts(_parsed(source))
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
