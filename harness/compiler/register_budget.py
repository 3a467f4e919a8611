"""The register split (setmaxnreg), read from the kernel's source, its PTX and ptxas's launch count.

``setmaxnreg`` changes the registers of every thread of a *warpgroup* (four consecutive warps), and
its pool is the CTA's: what ptxas gave each thread at launch (the compile result's register count)
times the CTA's threads, 168 x 384 = 64,512 for a Hopper step, not the SM's 65,536. A ``.dec`` returns
registers to that pool; an ``.inc`` waits until the pool holds them, and only this CTA's own warps
ever return any. Which warp runs which setmaxnreg is read from ``kernel()``'s branches (an AST walk
that evaluates each ``if`` for every warp index), not assumed. A split is right when
(1) the four warps of each warpgroup run the same setmaxnreg calls (``.sync.aligned``);
(2) each count is a multiple of 8 in 24..256 and moves the way its name says (a dec not above the
    count the warp holds, an inc not below it), every call is reached by some warp, and the PTX sets
    exactly the source's calls, with multiplicity;
(3) each role function runs at its constant's count (``ROLE_REGISTERS``) and some warp runs it;
(4) each warp's path runs at most one setmaxnreg, and the warpgroups' counts after it, 128 threads
    each, fit the pool. Breaking (4) hangs the kernel at an inc; breaking (1) is undefined behaviour;
    breaking (3) puts a role's code on the wrong budget. (The pool is checked on the final counts
    only; a second setmaxnreg on a path, an inc that a later dec undoes, could wait forever between
    them, so it is refused rather than simulated.)
"""

from __future__ import annotations

import ast
import operator
import re
from collections import Counter
from dataclasses import dataclass, field

REGISTER_FILE = 65536          # 32-bit registers per SM (sm_90, sm_100): a cross-check, never the bound
WARPGROUP_WARPS = 4
WARPGROUP_THREADS = 128

_SETMAXNREG = re.compile(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+);")
_CALLS = {"setmaxregister_increase": "inc", "setmaxregister_decrease": "dec"}   # cute.arch's names
# Role function -> the module constant naming the registers it runs at: Hopper h07-h14, Blackwell b12-b14.
ROLE_REGISTERS = {"producer": "PRODUCER_REGISTERS", "consumer": "CONSUMER_REGISTERS",
                  "softmax_warpgroup": "SOFTMAX_REGISTERS", "correction_warpgroup": "CORRECTION_REGISTERS",
                  "mma_warp": "OTHER_REGISTERS", "load_warp": "OTHER_REGISTERS"}


class RegisterBudgetError(ValueError):
    pass


def ptx_setmaxnreg(ptx: str) -> list[tuple[str, int]]:
    """Every setmaxnreg of the PTX in text order: ("inc" or "dec", registers per thread)."""
    return [(d, int(n)) for d, n in _SETMAXNREG.findall(ptx)]


def launch_registers(threads: int) -> int:
    """The most registers per thread a CTA of ``threads`` can launch with (the file shared out in
    multiples of 8): a cross-check of ptxas's launch count, never the bound itself."""
    return REGISTER_FILE // threads // 8 * 8


@dataclass(frozen=True)
class Call:
    line: int
    direction: str          # "inc" or "dec"
    count: int


@dataclass
class Split:
    """What kernel()'s source does, per warp."""
    calls: list[tuple[Call, ...]]                     # per warp: the setmaxnreg calls on its path
    sites: list[Call]                                  # every setmaxnreg call in kernel(), reached or not
    roles: dict[str, set[tuple[int, int | None]]]     # role function -> (warp, count it runs at; None: launch's)
    expected: dict[str, int]                           # role function -> its constant's count


# ------------------------------------------------------------------------------ the source walk

_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge}


def _value(node: ast.AST, env: dict):
    """An int or bool when ``node`` is known from the constants and the warp index; None when not."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, bool)):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id)
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        a, b = _value(node.left, env), _value(node.right, env)
        return None if a is None or b is None else _BIN[type(node.op)](a, b)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
        v = _value(node.operand, env)
        return None if v is None else (not v) if isinstance(node.op, ast.Not) else -v
    if isinstance(node, ast.Compare):
        values = [_value(n, env) for n in (node.left, *node.comparators)]
        if None in values or not all(type(op) in _CMP for op in node.ops):
            return None
        return all(_CMP[type(op)](a, b) for op, a, b in zip(node.ops, values, values[1:], strict=False))
    if isinstance(node, ast.BoolOp):       # three-valued: a known False decides an ``and``
        values = [_value(v, env) for v in node.values]
        decisive = isinstance(node.op, ast.Or)
        if any(v is not None and bool(v) == decisive for v in values):
            return decisive
        return None if None in values else not decisive
    return None


def _name(call: ast.Call) -> str | None:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def _is_warp_index(node: ast.AST) -> bool:
    """``cute.arch.warp_idx()``, or that made warp-uniform (``make_warp_uniform``)."""
    return isinstance(node, ast.Call) and (_name(node) == "warp_idx" or (
        _name(node) == "make_warp_uniform" and len(node.args) == 1 and _is_warp_index(node.args[0])))


@dataclass
class _Path:
    """One warp's way through kernel(): its setmaxnreg calls, the role functions it runs and at what."""
    count: int | None = None
    calls: list[Call] = field(default_factory=list)
    roles: set[tuple[str, int | None]] = field(default_factory=set)
    done: bool = False

    def copy(self) -> _Path:
        return _Path(self.count, list(self.calls), set(self.roles), self.done)


class _Walk:
    def __init__(self, constants: dict, functions: set[str]):
        self.constants, self.functions = constants, functions

    def run(self, body: list[ast.stmt], warp: int) -> _Path:
        path = _Path()
        self.block(body, dict(self.constants), path, warp)
        return path

    def block(self, body, env, path, warp):
        for stmt in body:
            if path.done:
                return
            self.stmt(stmt, env, path, warp)

    def stmt(self, s, env, path, warp):
        if isinstance(s, ast.If):
            taken = _value(s.test, env)
            if taken is not None:
                return self.block(s.body if taken else s.orelse, env, path, warp)
            # Not decided by the warp index: both ways, which must make the same setmaxnreg calls.
            ways = [(dict(env), path.copy()) for _ in range(2)]
            for (e, p), body in zip(ways, (s.body, s.orelse), strict=True):
                self.block(body, e, p, warp)
            (e1, p1), (e2, p2) = ways
            if p1.calls != p2.calls:
                raise RegisterBudgetError(f"line {s.lineno}: setmaxnreg under `{ast.unparse(s.test)}`, a condition "
                                          f"that is not the warp index (warp {warp}: {_show(p1.calls)} or "
                                          f"{_show(p2.calls)})")
            env.clear()
            env.update({k: v for k, v in e1.items() if e2.get(k) == v})
            path.count, path.calls, path.done = p1.count, p1.calls, p1.done and p2.done
            path.roles |= p1.roles | p2.roles
        elif isinstance(s, (ast.For, ast.AsyncFor, ast.While)):
            before = len(path.calls)
            for name in _names(getattr(s, "target", None)):      # the loop variable: not one value
                env[name] = None
            self.block(s.body + s.orelse, env, path, warp)
            if len(path.calls) != before:
                raise RegisterBudgetError(f"line {s.lineno}: setmaxnreg in a loop")
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            self.block(s.body, env, path, warp)
        elif isinstance(s, ast.Try):
            self.block(s.body + s.orelse + s.finalbody, env, path, warp)
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return
        else:
            self.calls(s, env, path)
            targets = s.targets if isinstance(s, ast.Assign) else [s.target] if isinstance(
                s, (ast.AnnAssign, ast.AugAssign)) else []
            if targets:         # a name known afterwards only when plainly assigned a known value
                plain = isinstance(s, (ast.Assign, ast.AnnAssign)) and len(targets) == 1 and s.value is not None
                v = (warp if _is_warp_index(s.value) else _value(s.value, env)) if plain else None
                for name in (n for target in targets for n in _names(target)):
                    env[name] = v if isinstance(targets[0], ast.Name) else None
            path.done = isinstance(s, (ast.Return, ast.Raise))

    def calls(self, s, env, path):
        for call in sorted((n for n in ast.walk(s) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset)):
            name = _name(call)
            if name in _CALLS:
                path.count = _site(call, env)[2]
                path.calls.append(Call(call.lineno, _CALLS[name], path.count))
            elif isinstance(call.func, ast.Name) and name in self.functions:
                path.roles.add((name, path.count))


def _names(target: ast.AST | None) -> list[str]:
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name)] if target is not None else []


def _site(call: ast.Call, env: dict) -> tuple[int, str, int]:
    count = _value(call.args[0], env) if len(call.args) == 1 else None
    if not isinstance(count, int):
        raise RegisterBudgetError(f"line {call.lineno}: setmaxnreg with a count that is not a constant")
    return call.lineno, _CALLS[_name(call)], count


def _constants(tree: ast.Module) -> dict:
    """The module's integer constants, evaluated in order (``NAME = <int expression>``)."""
    env: dict = {}
    for s in tree.body:
        if isinstance(s, (ast.Assign, ast.AnnAssign)) and s.value is not None:
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            v = _value(s.value, env)
            if len(targets) == 1 and isinstance(targets[0], ast.Name) and isinstance(v, int):
                env[targets[0].id] = v
    return env


def source_split(source: str, warps: int) -> Split:
    """Walk the @cute.kernel function (``kernel()``) once per warp index of a CTA of ``warps`` warps."""
    tree = ast.parse(source)
    functions = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
    kernels = [f for f in functions.values() if any(
        (d.attr if isinstance(d, ast.Attribute) else getattr(d, "id", None)) == "kernel" for d in f.decorator_list)]
    if len(kernels) != 1:
        raise RegisterBudgetError(f"{len(kernels)} @cute.kernel functions in the step's source, not one")
    kernel = kernels[0]
    for name, fn in functions.items():       # only kernel()'s branches are read: a call elsewhere is unseen
        if fn is not kernel and any(isinstance(n, ast.Call) and _name(n) in _CALLS for n in ast.walk(fn)):
            raise RegisterBudgetError(f"setmaxnreg in {name}(): only kernel()'s are read")
    constants = _constants(tree)
    walk = _Walk(constants, set(functions) - {kernel.name})
    paths = [walk.run(kernel.body, w) for w in range(warps)]
    sites = [Call(*_site(n, constants)) for n in ast.walk(kernel) if isinstance(n, ast.Call) and _name(n) in _CALLS]
    roles: dict[str, set] = {}
    for w, p in enumerate(paths):
        for name, count in p.roles:
            roles.setdefault(name, set()).add((w, count))
    expected = {f: constants[c] for f, c in ROLE_REGISTERS.items() if f in functions and c in constants}
    if not expected:
        raise RegisterBudgetError("no role function with a register constant (ROLE_REGISTERS)")
    return Split([tuple(p.calls) for p in paths], sorted(sites, key=lambda c: c.line), roles, expected)


# ---------------------------------------------------------------------------------------- rules

def check(split: Split, ptx: list[tuple[str, int]], launch: int, threads: int) -> dict:
    """The split's four rules (module docstring) against ptxas's ``launch`` registers per thread and
    the CTA's ``threads``; raises with every broken one, else returns the per-warpgroup counts."""
    if threads % WARPGROUP_THREADS or len(split.calls) != threads // 32:
        raise RegisterBudgetError(f"{len(split.calls)} warps walked for {threads} threads: not whole warpgroups")
    if launch > launch_registers(threads):
        raise RegisterBudgetError(f"{launch} registers at launch x {threads} threads exceed the SM's {REGISTER_FILE:,}")
    problems = []
    groups = [split.calls[i:i + WARPGROUP_WARPS] for i in range(0, len(split.calls), WARPGROUP_WARPS)]
    for g, calls in enumerate(groups):
        if len(set(calls)) != 1:
            problems.append(f"warpgroup {g}'s warps take different setmaxnreg paths {[_show(c) for c in calls]}: "
                            "setmaxnreg acts on a whole warpgroup")
    for w, warp_calls in enumerate(split.calls):
        if len(warp_calls) > 1:
            problems.append(f"warp {w} runs {len(warp_calls)} setmaxnreg ({', '.join(_show(warp_calls))}): one per "
                            "warpgroup path is modelled (the pool is checked on the final counts; an inc before a "
                            "later dec may wait forever between them)")
        held = launch
        for c in warp_calls:
            if c.count % 8 or not 24 <= c.count <= 256:
                problems.append(f"line {c.line}: {c.count} registers; setmaxnreg takes a multiple of 8 in 24..256")
            if (c.count > held) if c.direction == "dec" else (c.count < held):
                problems.append(f"line {c.line}: setmaxnreg.{c.direction} to {c.count} from {held}: the wrong way")
            held = c.count
    reached = {c for calls in split.calls for c in calls}
    problems += [f"line {c.line}: setmaxnreg.{c.direction} {c.count} that no warp reaches" for c in split.sites
                 if c not in reached]
    source = Counter((c.direction, c.count) for c in split.sites)
    if Counter(ptx) != source:
        problems.append(f"the PTX sets {sorted(Counter(ptx).items())}, kernel() calls {sorted(source.items())} "
                        "(call sites, with multiplicity)")
    for fn, want in split.expected.items():
        runs = split.roles.get(fn, set())
        if not runs:
            problems.append(f"no warp runs {fn}()")
        wrong: dict[int, list[int]] = {}
        for w, n in sorted(runs, key=lambda r: r[0]):
            if (launch if n is None else n) != want:
                wrong.setdefault(launch if n is None else n, []).append(w)
        problems += [f"{fn}() runs on warps {ws} at {n} registers, its constant gives {want}"
                     for n, ws in wrong.items()]
    counts = [calls[0][-1].count if calls[0] else launch for calls in groups]
    total, pool = sum(counts) * WARPGROUP_THREADS, launch * threads
    if total > pool:
        problems.append(f"the warpgroups' {counts} registers x 128 threads = {total:,} > the CTA's pool, {launch} at "
                        f"launch x {threads} threads = {pool:,}: a setmaxnreg.inc would wait forever")
    if problems:
        raise RegisterBudgetError("; ".join(dict.fromkeys(problems)))
    return {"warpgroups": counts, "total": total, "pool": pool, "launch": launch, "threads": threads,
            "file": REGISTER_FILE}


def _show(calls: tuple[Call, ...]) -> list[str]:
    return [f"{c.direction} {c.count} (line {c.line})" for c in calls]


def for_step(step, report) -> dict:
    """The rules for ``step`` as compiled in ``report`` (compile_step's result: its PTX, ptxas's
    register count at launch and the PTX's threads per CTA)."""
    threads = report.threads_per_cta
    return check(source_split(step.path.read_text(), threads // 32), ptx_setmaxnreg(report.ptx.read_text()),
                 report.registers, threads)
