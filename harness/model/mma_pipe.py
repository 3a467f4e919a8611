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
# b09's order, kept by b10-b13 (their changes are in the softmax, the correction and the CTA pair): S_g(j) is
# issued right after P_g V(j-1), with at most the kv_full wait of the *next* tile between them.
_ALTERNATING = {
    ("O0 += P0·B reads P0 in S0", "S0 written"):
        "S0(j) = Q0·K(j) is issued right after O0 += P0·V(j-1) and overwrites the columns it reads P0 from; "
        "the only wait between them is on kv_full of tile j, which orders nothing issued before. " + _FA4_ORDER,
    ("O1 += P1·B reads P1 in S1", "S1 written"):
        "S1(j) = Q1·K(j) is issued right after O1 += P1·V(j-1) (and the commit that frees its K/V stage) and "
        "overwrites the columns it reads P1 from, with no wait between them. " + _FA4_ORDER,
}
DOCUMENTED.update({step: _ALTERNATING for step in ("b09", "b10", "b11", "b12", "b13")})
# b14 runs b13's order once per work tile; at a work tile's start S_g(0) follows the previous work
# tile's last P_g V the same way, with the waits for the next Q (q_full) and K_0 between them.
DOCUMENTED["b14"] = {hazard: text + " In b14 the same holds where one work tile's last P V meets the next work "
                     "tile's first S (the q_full and kv_full waits between them order nothing issued before)."
                     for hazard, text in _ALTERNATING.items()}


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
    """The character span of the innermost loop that holds a tcgen05.mma: from its label to the
    backward branch to it. MMAs outside it (a prologue before it, a tail after it) are allowed;
    MMAs in a second loop that does not contain it are not modelled."""
    mmas = [m.start() for m in re.finditer(r"tcgen05\.mma\.", ptx)]
    if not mmas:
        raise ValueError("no tcgen05.mma in the PTX")
    labels = {m.group(1): m.start() for m in re.finditer(r"^(\$L\w+):", ptx, re.M)}
    loops = []
    for m in re.finditer(r"bra(?:\.uni)?\s+(\$L\w+);", ptx):
        start = labels.get(m.group(1))
        if start is not None and start < m.start() and any(start < p < m.start() for p in mmas):
            loops.append((start, m.end()))
    if not loops:
        raise ValueError("the MMAs are in no loop")
    inner = min(loops, key=lambda span: span[1] - span[0])
    if any(not (s <= inner[0] and inner[1] <= e) for s, e in loops):
        raise ValueError("tcgen05.mma in two loops, one not inside the other: not modelled")
    return inner


def _mma_span(ptx: str) -> tuple[int, int]:
    """From the first tcgen05.mma to the end of the last one."""
    mmas = list(re.finditer(r"tcgen05\.mma\.[^;]*;", ptx))
    return mmas[0].start(), mmas[-1].end()


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


@dataclass(frozen=True)
class Program:
    """The MMA-issuing thread's events: ``prologue`` runs once before the loop, ``body`` repeats,
    ``tail`` runs once after it (each may be empty but the body)."""
    prologue: list
    body: list
    tail: list


def _read_events(ptx: str, regs: _Regs, tmem_map: dict, aliases: dict, start: int, end: int) -> list:
    found = []
    for m in _EVENT_RE.finditer(ptx, start, end):
        if m.group("mma"):
            _, d_off, _ = regs.resolve(m.group("d"))
            d = _region(d_off, tmem_map)
            first, width = tmem_map[d]
            a = a_host = a_cols = None
            if m.group("a"):
                _, a_off, _ = regs.resolve(m.group("a"))
                a, a_host, a_cols = _alias(a_off, tmem_map, aliases)
            found.append(Mma(d, (first, first + width), a, a_host, a_cols))
        elif m.group("commit"):
            addr = re.search(_ADDR_RE, m.group("commit"))
            found.append(Commit(regs.barrier(addr.group(1), addr.group(2))))
        elif m.group("wait"):
            addr = re.search(_ADDR_RE, m.group("wait"))
            found.append(Wait(regs.barrier(addr.group(1), addr.group(2))))
    return found


def program(ptx: str, tmem_map: dict, aliases: dict | None = None) -> tuple[Program, set]:
    """(prologue / loop body / tail events in program order, barrier feed relation) read from ``ptx``."""
    aliases = aliases or {}
    regs = _Regs(ptx)
    body = _loop_body(ptx)
    first, last = _mma_span(ptx)
    prologue = _read_events(ptx, regs, tmem_map, aliases, first, body[0]) if first < body[0] else []
    tail = _read_events(ptx, regs, tmem_map, aliases, body[1], last) if last > body[1] else []
    return (Program(prologue, _read_events(ptx, regs, tmem_map, aliases, *body), tail),
            _feeds(ptx, regs, body))


def events(ptx: str, tmem_map: dict, aliases: dict | None = None):
    """(loop body events in program order, barrier feed relation) read from ``ptx``."""
    prog, feeds = program(ptx, tmem_map, aliases)
    return prog.body, feeds


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


def _unordered(seq: list[tuple[object, int]], i: int, k: int, feeds) -> tuple[str, str] | None:
    """The hazard (earlier, later) for the MMAs at ``seq[i]`` and ``seq[k]``, if nothing orders them."""
    pair = _describe(seq[i][0], seq[k][0])
    if pair is None or _ordered(seq[i + 1:k], feeds):
        return None
    return pair


def find_hazards(body: list, feeds=frozenset(), prologue: list = (), tail: list = ()) -> set[tuple[str, str]]:
    """Hazards of a loop ``body`` that repeats (events as :func:`program` returns them), with the
    ``prologue`` issued once before it and the ``tail`` once after it. Pairs checked: within the
    prologue, the body and the tail; the prologue against the first iteration (and against the tail,
    for a loop that runs no iteration); one iteration against the next, up to the same position;
    the last iteration against the tail. Iteration tags keep ring stages apart (see :func:`_fed`)."""
    found = set()
    n = len(body)
    seq = [(ev, -1) for ev in prologue] + [(ev, 0) for ev in body] + [(ev, 1) for ev in body] + [(ev, 2) for ev in tail]
    p = len(prologue)
    for i, (earlier, it_i) in enumerate(seq):
        if not isinstance(earlier, Mma):
            continue
        for k in range(i + 1, len(seq)):
            later, it_k = seq[k]
            if not isinstance(later, Mma):
                continue
            if it_i == 0 and it_k == 1 and k - p - n > i - p:
                continue         # farther than one iteration: the nearer pair already covers it
            if it_i == -1 and it_k >= 1 or it_i == 0 and it_k == 2:
                continue         # the prologue meets iteration 0; only the last iteration meets the tail
            hazard = _unordered(seq, i, k, feeds)
            if hazard:
                found.add(hazard)
    # A loop that runs no iteration: the prologue straight into the tail.
    short = [(ev, -1) for ev in prologue] + [(ev, 2) for ev in tail]
    for i in range(p):
        for k in range(p, len(short)):
            if isinstance(short[i][0], Mma) and isinstance(short[k][0], Mma):
                hazard = _unordered(short, i, k, feeds)
                if hazard:
                    found.add(hazard)
    return found


def step_program(step) -> tuple[Program, set]:
    from harness.compiler.compile import compile_step
    ptx = compile_step(step, "sm_100a").ptx.read_text()
    return program(ptx, step.info.extra["tmem_map"], step.info.extra.get("tmem_aliases"))


def step_events(step):
    prog, feeds = step_program(step)
    return prog.body, feeds


def issue_order(step) -> str:
    """The MMA thread's tcgen05.mma by accumulator, in PTX order: ``before | loop: ... | after``."""
    prog, _ = step_program(step)

    def runs(events):
        out = []
        for ev in events:
            if isinstance(ev, Mma) and (not out or out[-1] != ev.d):
                out.append(ev.d)
        return " ".join(out)
    parts = [runs(prog.prologue), "loop: " + runs(prog.body), runs(prog.tail)]
    return " | ".join(p for p in parts if p)


def hazards(step) -> set[tuple[str, str]]:
    """(earlier, later) MMA pairs of ``step``'s kernel that rely on issue order across accumulators."""
    prog, feeds = step_program(step)
    return find_hazards(prog.body, feeds, prog.prologue, prog.tail)


def undocumented(step) -> set[tuple[str, str]]:
    return hazards(step) - set(DOCUMENTED.get(step.id, {}))
