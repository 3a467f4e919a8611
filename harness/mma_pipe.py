"""MMA-pipe hazard model for the Blackwell steps: which tcgen05.mma pairs rely on issue order.

The PTX ISA promises that tcgen05.mma instructions issued by one thread execute in order only for
the implicitly pipelined pairs, those that use the same accumulator. A kernel that issues an MMA
into TMEM columns that an earlier MMA with a *different* accumulator still reads (or writes), with
nothing in the issuing thread that waits for the earlier one, relies on the tensor core executing
them in issue order anyway (as FA4 does). This module finds such pairs in the compiled PTX.

Model, read from the PTX of the loop that issues the MMAs:
  * events in program order: each ``tcgen05.mma`` (its accumulator D's column offset -> the TMEM map
    region; for a TS-MMA the A operand's column offset -> the alias it reads), each
    ``tcgen05.commit`` (to a barrier) and each ``mbarrier.try_wait/wait/test_wait`` (on a barrier);
  * the loop repeats, so the body's end is also paired with its start (iteration j, then j+1);
  * a pair (earlier, later) is a hazard when the later one writes columns the earlier one reads or
    writes, their accumulators (D regions) differ, and no wait in between orders the earlier one;
  * a wait orders the earlier MMA only when a ``tcgen05.commit`` issued after it arrives on the
    waited barrier, directly or through another thread that waits on the commit's barrier and then
    arrives on the waited one (``wait X; ... arrive Y`` in the PTX: X feeds Y, e.g. kv_empty ->
    load warp -> kv_full). A commit alone orders nothing; a wait on an unrelated barrier neither.
  * a barrier in a ring (its address indexed by the loop counter) is a different stage in the next
    iteration: a commit in iteration j to stage s does not feed a wait in iteration j+1 on stage
    s+1. With one stage (a fixed address) it does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Accepted hazards, per step: (earlier, later) -> why the kernel may rely on it.
_FA4_ORDER = ("relies on tcgen05.mma from one thread executing in issue order across accumulators, as FA4 "
              "does; the PTX ISA promises it only for same-accumulator pairs")
DOCUMENTED: dict[str, dict[tuple[str, str], str]] = {
    "b08": {
        ("O0 += P0·B reads P0 in S0", "S0 written"):
            "S0(j+1) = Q0·K(j+1) overwrites the columns P0·V(j) reads; the wait before it is on kv_full of "
            "the other K/V stage, fed by the commit of iteration j-1, not j. " + _FA4_ORDER,
        ("O1 += P1·B reads P1 in S1", "S1 written"):
            "S1(j+1) = Q1·K(j+1) overwrites the columns P1·V(j) reads, with the same K/V-stage wait only "
            "between them. " + _FA4_ORDER,
    },
}


@dataclass(frozen=True)
class Barrier:
    root: str            # the register the address is built from (the smem base)
    offset: int          # the immediate part of the address
    indexed: bool        # a register (a ring stage) is added too


@dataclass(frozen=True)
class Mma:
    d: str                             # accumulator region, e.g. "S0"
    d_cols: tuple[int, int]            # [first, end)
    a: str | None = None               # TS-MMA: the alias A reads, e.g. "P0"
    a_host: str | None = None          # ... and the region it lies in
    a_cols: tuple[int, int] | None = None


@dataclass(frozen=True)
class Commit:
    barrier: Barrier


@dataclass(frozen=True)
class Wait:
    barrier: Barrier


_ADD_RE = re.compile(r"add\.[su]32\s+(%r\d+),\s*(%r\d+),\s*(-?\d+|%r\d+);")
_ADDR_RE = r"\[(%r\d+)(?:\+(-?\d+))?\]"
_EVENT_RE = re.compile(
    r"(?P<mma>tcgen05\.mma\.[^\[;]*\[(?P<d>%r\d+)\]\s*,\s*(?:\[(?P<a>%r\d+)\])?[^;]*;)"
    rf"|(?P<commit>tcgen05\.commit[^\[;]*{_ADDR_RE};)"
    rf"|(?P<wait>mbarrier\.(?:try_wait|test_wait|wait)[^\[;]*{_ADDR_RE})"
    rf"|(?P<arrive>mbarrier\.arrive[^\[;]*{_ADDR_RE})"
    r"|(?P<label>^\$L\w+:)"
    r"|(?P<bra>bra(?:\.uni)?\s+(?P<target>\$L\w+);)", re.M)


class _Regs:
    def __init__(self, ptx: str):
        self.adds = {r: (base, off) for r, base, off in _ADD_RE.findall(ptx)}

    def resolve(self, reg: str, imm: int = 0) -> tuple[str, int, bool]:
        """A register built by ``add`` chains -> (root register, immediate sum, any register added)."""
        indexed = False
        seen = set()
        while reg in self.adds and reg not in seen:
            seen.add(reg)
            base, off = self.adds[reg]
            if off.startswith("%"):
                indexed = True
            else:
                imm += int(off)
            reg = base
        return reg, imm, indexed

    def barrier(self, reg: str, imm: str | None) -> Barrier:
        return Barrier(*self.resolve(reg, int(imm or 0)))


def _region(col: int, tmem_map: dict) -> str:
    for name, (start, width) in tmem_map.items():
        if start <= col < start + width:
            return name
    raise ValueError(f"TMEM column {col} is in no region of {tmem_map}")


def _alias(col: int, tmem_map: dict, aliases: dict) -> tuple[str, str, tuple[int, int]]:
    for name, (host, lo, cols) in aliases.items():
        first = tmem_map[host][0] + lo
        if first <= col < first + cols:
            return name, host, (first, first + cols)
    raise ValueError(f"TMEM A operand at column {col} is in no alias of {aliases}")


def _loop_body(ptx: str) -> tuple[int, int]:
    """The character span of the innermost loop that holds every tcgen05.mma: from a label before
    the first MMA to the backward branch to it after the last one."""
    mmas = [m.start() for m in re.finditer(r"tcgen05\.mma\.", ptx)]
    if not mmas:
        raise ValueError("no tcgen05.mma in the PTX")
    first, last = mmas[0], mmas[-1]
    labels = {m.group(1): m.start() for m in re.finditer(r"^(\$L\w+):", ptx, re.M)}
    best = None
    for m in re.finditer(r"bra(?:\.uni)?\s+(\$L\w+);", ptx):
        start = labels.get(m.group(1))
        if start is not None and start < first and m.start() > last:
            if best is None or m.start() - start < best[1] - best[0]:
                best = (start, m.end())
    if best is None:
        raise ValueError("the MMAs are in no loop")
    return best


def _feeds(ptx: str, regs: _Regs, body: tuple[int, int]) -> set[tuple[str, int, str, int]]:
    """(root, offset) pairs X -> Y where another thread waits on X and then arrives on Y (before it
    waits again): an arrive on Y implies X completed. Reflexive and transitive."""
    edges = set()
    last_wait = None
    for m in _EVENT_RE.finditer(ptx):
        if body[0] <= m.start() < body[1]:
            last_wait = None
            continue
        if m.group("wait"):
            addr = re.search(_ADDR_RE, m.group("wait"))
            b = regs.barrier(addr.group(1), addr.group(2))
            last_wait = (b.root, b.offset)
        elif m.group("arrive") and last_wait is not None:
            addr = re.search(_ADDR_RE, m.group("arrive"))
            b = regs.barrier(addr.group(1), addr.group(2))
            edges.add((*last_wait, b.root, b.offset))
            last_wait = None
    closure = {(r1, o1, r2, o2) for r1, o1, r2, o2 in edges}
    while True:
        more = {(a, b, e, f) for a, b, c, d in closure for c2, d2, e, f in closure if (c, d) == (c2, d2)} - closure
        if not more:
            return closure
        closure |= more


def events(ptx: str, tmem_map: dict, aliases: dict | None = None):
    """(loop body events in program order, barrier feed relation) read from ``ptx``."""
    aliases = aliases or {}
    regs = _Regs(ptx)
    body = _loop_body(ptx)
    found = []
    for m in _EVENT_RE.finditer(ptx, body[0], body[1]):
        if m.group("mma"):
            _, d_off, _ = regs.resolve(m.group("d"))
            d = _region(d_off, tmem_map)
            start, width = tmem_map[d]
            a = a_host = a_cols = None
            if m.group("a"):
                _, a_off, _ = regs.resolve(m.group("a"))
                a, a_host, a_cols = _alias(a_off, tmem_map, aliases)
            found.append(Mma(d, (start, start + width), a, a_host, a_cols))
        elif m.group("commit"):
            addr = re.search(_ADDR_RE, m.group("commit"))
            found.append(Commit(regs.barrier(addr.group(1), addr.group(2))))
        elif m.group("wait"):
            addr = re.search(_ADDR_RE, m.group("wait"))
            found.append(Wait(regs.barrier(addr.group(1), addr.group(2))))
    return found, _feeds(ptx, regs, body)


def _overlap(x: tuple[int, int], y: tuple[int, int]) -> bool:
    return x[0] < y[1] and y[0] < x[1]


def _fed(commit: Barrier, wait: Barrier, feeds, same_iteration: bool) -> bool:
    if not same_iteration and (commit.indexed or wait.indexed):
        return False             # a ring stage: iteration j+1 waits on the next stage
    if commit.root != wait.root:
        return False
    return commit.offset == wait.offset or (commit.root, commit.offset, wait.root, wait.offset) in feeds


def _ordered(between: list[tuple[object, int]], feeds) -> bool:
    """Does a wait in ``between`` (events with their iteration) wait for the MMA before them?"""
    for i, (ev, it) in enumerate(between):
        if isinstance(ev, Wait) and any(isinstance(c, Commit) and _fed(c.barrier, ev.barrier, feeds, cit == it)
                                        for c, cit in between[:i]):
            return True
    return False


def _describe(earlier: Mma, later: Mma) -> tuple[str, str] | None:
    if earlier.d == later.d:
        return None              # same accumulator: pipelined in order by the ISA
    if earlier.a is not None and _overlap(later.d_cols, earlier.a_cols):
        return f"{earlier.d} += {earlier.a}·B reads {earlier.a} in {earlier.a_host}", f"{later.d} written"
    if _overlap(later.d_cols, earlier.d_cols):
        return f"{earlier.d} written", f"{later.d} written"
    return None


def find_hazards(body: list, feeds=frozenset()) -> set[tuple[str, str]]:
    """Hazards of a repeating loop ``body`` (events as :func:`events` returns them)."""
    found = set()
    for i, earlier in enumerate(body):
        if not isinstance(earlier, Mma):
            continue
        for k, later in enumerate(body):
            if not isinstance(later, Mma):
                continue
            pair = _describe(earlier, later)
            if pair is None:
                continue
            if k > i:
                between = [(ev, 0) for ev in body[i + 1:k]]
            else:                # the later one in the next iteration
                between = [(ev, 0) for ev in body[i + 1:]] + [(ev, 1) for ev in body[:k]]
            if not _ordered(between, feeds):
                found.add(pair)
    return found


def step_events(step):
    from harness.compile import compile_step
    ptx = compile_step(step, "sm_100a").ptx.read_text()
    return events(ptx, step.info.extra["tmem_map"], step.info.extra.get("tmem_aliases"))


def hazards(step) -> set[tuple[str, str]]:
    """(earlier, later) MMA pairs of ``step``'s kernel that rely on issue order across accumulators."""
    body, feeds = step_events(step)
    return find_hazards(body, feeds)


def undocumented(step) -> set[tuple[str, str]]:
    return hazards(step) - set(DOCUMENTED.get(step.id, {}))
