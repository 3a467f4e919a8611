"""The softmax's instruction budget, read from the SASS: instructions per score element, by class.

Why: a Blackwell CTA's tensor cores finish a K/V tile's two GEMMs in fewer cycles than its
softmax warps take to *issue* the softmax's instructions. The library exp (``cute.math.exp``)
compiles to the full-precision expf sequence, 8 instructions around one ``MUFU.EX2`` (FFMA.SAT,
FFMA.RM, FADD, FFMA, FFMA, MUFU.EX2, SHF.L.U32, FMUL), and the softmax adds the scale, the row
max, the row sum, the bf16 conversion of P and the O rescale. This module counts them, per step
and arch, from the compiled cubin (no GPU).

Method:

1. The main loop. The loop over K/V tiles is the one place a softmax thread runs once per tile;
   inside it everything is unrolled, so its body is straight-line code with a few forward
   branches. The SASS is cut into basic blocks (a block ends at a ``BRA``, ``EXIT`` or ``RET``,
   and starts at a label); a *loop* is a natural loop: a back edge, a ``BRA`` to a block that
   dominates it, with the blocks that reach the branch without passing that header. (A branch
   back into the body from an out-of-line mbarrier retry path, placed after ``EXIT``, is not a
   back edge: its target does not dominate it.) Of the loops holding ``MUFU.EX2``, the one
   holding the most is chosen, the innermost among ties.
2. The count. The loop's instructions that lie between its header and its backward branch count
   once each, per thread: one pass = one K/V tile. A warp issues a predicated-off instruction as
   well, so predicates are ignored. Forward branches that land inside the body skip a
   *conditional block*: b07/b08's O rescale (skipped on the first tile), b05/b06's TMA and MMA
   issue (run by one warp); those blocks are counted as run and reported apart
   (``conditional_per_element``), so the truth for a given warp and tile lies between
   ``total_per_element - conditional_per_element`` and ``total_per_element``. Loops nested in the
   body (inline mbarrier spin waits) count once (``loop["inner_loops"]``); the loop's out-of-line
   blocks (wait retries) do not count (``loop["out_of_line_instructions"]``).
3. The elements. One softmax thread handles ``E = tile_m * tile_n / softmax_threads`` elements of
   S per K/V tile (``tile_m``: the CTA's query rows, all its Q tiles together, ``INFO.tile_m``):

   * 01, h02-h04: every thread computes: 64 * 128 / 128 = 64;
   * h05, h06: both warpgroups compute: 128 * 128 / 256 = 64;
   * h07, h08: the producer warpgroup does not; softmax threads = ``NUM_CONSUMER_WARPS`` * 32 =
     256: 128 * 128 / 256 = 64;
   * b02-b04: 128 * 128 / 128 = 128 (a thread per TMEM lane: one query row, all 128 columns);
   * b05, b06: 256 * 128 / 256 = 128;
   * b07, b08: softmax threads = the warps of the ``softmax*`` roles in ``INFO.extra["warp_roles"]``
     * 32 = 256 (the MMA and load warps run loops of their own): 256 * 128 / 256 = 128.

   Rows per thread: 1 where S is read from TMEM (a lane is a row), 2 in the mma.sync / wgmma
   accumulator fragments (01 and Hopper: a thread holds rows r and r + 8 of its warp's 16).
4. The classes: FFMA (FFMA, FFMA.SAT, FFMA.RM), FADD, FMUL, FMNMX (and sm_100's 3-input FMNMX3),
   MUFU.EX2, MUFU other (RCP, ...), conversions (F2F, F2FP, I2F, I2FP, F2I), packed (sm_100's
   FFMA2 / FADD2 / FMUL2) and other (everything else: SHF.L.U32 of the expf sequence, moves,
   TMEM loads and stores, address arithmetic, barriers, branches, and in 01-h06 and b02-b06 the
   loads and MMAs the same threads issue). The classes partition the body: they sum to the total.
   Counts are *issued instructions*: a packed instruction is one issue slot and covers 2
   elements, so it counts 1 per 2 elements (``packed_lanes_per_element`` gives the
   element-operations, 2 per packed instruction).

Validation: the loop must hold one ``MUFU.EX2`` per element plus at most one per row (the
rescale exp(m_old - m_new)): ``MUFU.EX2`` per element between 1 and ``(E + rows) / E``
(1.008 on Blackwell, 1.031 with 2 rows); a step that computes some exponentials on the FMA pipe
(b11: ``INFO.extra["ex2_emulated_per_tile"]`` per thread and tile) has that many fewer; and the kernel must have at most ``rows`` more outside
the loop. Otherwise, or when another loop not nested with the chosen one holds as many, the
reason is put in ``ambiguous`` (non-empty = do not trust the numbers), never guessed around.

Limits: a static count: no stalls, no replays, no measured cycles. It assumes one pass of the
loop is one K/V tile (an unroll by 2 would fail the MUFU.EX2 check) and that the loop's
instructions between header and back edge are what one pass runs. Conditional blocks are
counted as run. "other" mixes cheap and costly instructions (an ``LDTM`` is one issue slot but
waits on TMEM). The issue-cycle arithmetic (``tile_cycles``) assumes the 4 schedulers of an SM
issue one warp-instruction each per clock and nothing else competes for them.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from harness.core.memo import per_step_version

# (class, full-mnemonic pattern), first match wins; "other" takes the rest.
CLASSES: tuple[tuple[str, str], ...] = (
    ("FFMA", r"FFMA(?:\..*)?"),
    ("FADD", r"FADD(?:\..*)?"),
    ("FMUL", r"FMUL(?:\..*)?"),
    ("FMNMX", r"FMNMX3?(?:\..*)?"),
    ("MUFU.EX2", r"MUFU\.EX2(?:\..*)?"),
    ("MUFU other", r"MUFU(?:\..*)?"),
    ("conversions", r"(?:F2F|F2FP|I2F|I2FP|F2I)(?:\..*)?"),
    ("FFMA2/FADD2/FMUL2", r"(?:FFMA2|FADD2|FMUL2)(?:\..*)?"),
)
OTHER = "other"
CLASS_NAMES = tuple(name for name, _ in CLASSES) + (OTHER,)
PACKED = "FFMA2/FADD2/FMUL2"
_CLASS_RE = tuple((name, re.compile(pat)) for name, pat in CLASSES)

_SECTION_RE = re.compile(r"^\s*\.section\s+(\S+?),")
_LABEL_RE = re.compile(r"^([.$\w]+):\s*$")
_INSTR_RE = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
_TARGET_RE = re.compile(r"`\(([.$\w]+)\)")


def classify(opcode: str) -> str:
    for name, rx in _CLASS_RE:
        if rx.fullmatch(opcode):
            return name
    return OTHER


@dataclass(frozen=True)
class Instr:
    section: str
    addr: int
    opcode: str
    guarded: bool             # @P / @!P in front: may not run
    operands: str
    target: str | None        # a branch's label

    @property
    def is_branch(self) -> bool:
        return self.opcode.split(".")[0] == "BRA" and self.target is not None

    @property
    def conditional(self) -> bool:
        """A guarded branch, or one with a predicate operand (``BRA.U !UP0, `(.L_x_6)``)."""
        return self.guarded or bool(self.operands.split("`")[0].strip(" ,"))


def parse(text: str) -> tuple[list[Instr], dict[tuple[str, str], int]]:
    """Instructions in order and (section, label) -> address, from nvdisasm output."""
    instrs, labels, pending, section = [], {}, [], ""
    for line in text.splitlines():
        m = _SECTION_RE.match(line)
        if m:
            section, pending = m.group(1), []
            continue
        m = _INSTR_RE.match(line)
        if m:
            addr = int(m.group(1), 16)
            for label in pending:
                labels[(section, label)] = addr
            pending = []
            target = _TARGET_RE.search(m.group(4))
            instrs.append(Instr(section, addr, m.group(3), bool(m.group(2)), m.group(4),
                                target.group(1) if target else None))
            continue
        m = _LABEL_RE.match(line)
        if m:
            pending.append(m.group(1))
    return instrs, labels


@dataclass
class Cfg:
    """Basic blocks of one section (blocks[i] = its instructions), successors and dominators of
    the blocks reachable from the section's first instruction (the kernel's entry)."""
    blocks: list[list[Instr]]
    succ: dict[int, set[int]]
    dom: dict[int, set[int]]
    notes: list[str]


def build_cfg(instrs: list[Instr], labels: dict, section: str) -> Cfg:
    body = [i for i in instrs if i.section == section]
    targets = {addr for (sec, _), addr in labels.items() if sec == section}
    blocks: list[list[Instr]] = []
    for k, ins in enumerate(body):
        ends_prev = k and (body[k - 1].is_branch or body[k - 1].opcode.split(".")[0] in ("EXIT", "RET"))
        if not blocks or ins.addr in targets or ends_prev:
            blocks.append([])
        blocks[-1].append(ins)
    start_of = {b[0].addr: n for n, b in enumerate(blocks)}
    succ, notes = {}, []
    for n, block in enumerate(blocks):
        last, nxt = block[-1], ({n + 1} if n + 1 < len(blocks) else set())
        head = last.opcode.split(".")[0]
        if last.is_branch:
            dest = start_of.get(labels.get((section, last.target)))
            if dest is None:
                notes.append(f"branch at {last.addr:#x} to unknown label {last.target}")
            succ[n] = ({dest} if dest is not None else set()) | (nxt if last.conditional else set())
        elif head in ("EXIT", "RET"):
            succ[n] = nxt if last.guarded else set()
        elif head in ("BRX", "JMX", "JMP"):
            notes.append(f"indirect branch at {last.addr:#x}: its targets are not followed")
            succ[n] = nxt
        else:
            succ[n] = nxt
    reach, stack = set(), [0] if blocks else []
    while stack:
        n = stack.pop()
        if n not in reach:
            reach.add(n)
            stack.extend(succ[n])
    pred = {n: {m for m in reach if n in succ[m]} for n in reach}
    dom = {n: set(reach) for n in reach}
    if blocks:
        dom[0] = {0}
    changed = True
    while changed:
        changed = False
        for n in sorted(reach - {0}):
            new = set.intersection(*(dom[p] for p in pred[n])) | {n} if pred[n] else {n}
            if new != dom[n]:
                dom[n], changed = new, True
    return Cfg(blocks, succ, dom, notes)


@dataclass(frozen=True)
class Loop:
    section: str
    label: str                # the header's label
    start: int                # the header's address
    end: int                  # the (last) backward branch's address
    inline: tuple[Instr, ...]       # the loop's instructions in [start, end]: what one pass runs
    out_of_line: tuple[Instr, ...]  # the loop's blocks placed elsewhere (mbarrier wait retries)
    blocks: frozenset

    def holds(self, ins: Instr) -> bool:
        return ins.section == self.section and self.start <= ins.addr <= self.end


def find_loops(instrs: list[Instr], labels: dict) -> list[Loop]:
    """Natural loops: for each back edge (a branch to a block that dominates it), the blocks that
    reach the branch without passing the header. One loop per header."""
    loops = []
    for section in dict.fromkeys(i.section for i in instrs):
        cfg = build_cfg(instrs, labels, section)
        latches: dict[int, list[int]] = {}
        for n in cfg.dom:
            for h in cfg.succ[n]:
                if h in cfg.dom.get(n, ()) and cfg.blocks[n][-1].is_branch:
                    latches.setdefault(h, []).append(n)
        for h, tails in latches.items():
            members, stack = {h}, list(tails)
            while stack:
                n = stack.pop()
                if n not in members:
                    members.add(n)
                    stack.extend(m for m in cfg.dom if n in cfg.succ[m])
            start = cfg.blocks[h][0].addr
            end = max(cfg.blocks[t][-1].addr for t in tails)
            ins = [i for n in sorted(members) for i in cfg.blocks[n]]
            label = cfg.blocks[max(tails)][-1].target      # as the back edge names it
            loops.append(Loop(section, label, start, end, tuple(i for i in ins if start <= i.addr <= end),
                              tuple(i for i in ins if not start <= i.addr <= end), frozenset(members)))
    return loops


def main_loop(instrs: list[Instr], labels: dict) -> tuple[Loop | None, list[Loop], list[str]]:
    """The loop holding the most MUFU.EX2 (the innermost among ties), the loops nested in it, and
    what makes the choice doubtful."""
    notes = []
    loops = find_loops(instrs, labels)

    def ex2(loop):
        return sum(classify(i.opcode) == "MUFU.EX2" for i in loop.inline)

    scored = [(ex2(loop), loop) for loop in loops if ex2(loop)]
    if not scored:
        return None, [], ["no loop holds a MUFU.EX2 (the tile loop was unrolled away, or has no exp)"]
    most = max(n for n, _ in scored)
    best = [loop for n, loop in scored if n == most]
    chosen = min(best, key=lambda loop: len(loop.inline))

    def nested(a, b):
        return a.section == b.section and (a.blocks <= b.blocks or b.blocks <= a.blocks)

    rivals = [loop for loop in best if not nested(loop, chosen)]
    if rivals:
        notes.append(f"{len(rivals)} other loop(s) not nested with {chosen.label} hold as many MUFU.EX2 ({most})")
    if any(classify(i.opcode) == "MUFU.EX2" for i in chosen.out_of_line):
        notes.append(f"loop {chosen.label} has MUFU.EX2 outside its address range [{chosen.start:#x}, {chosen.end:#x}]")
    inner = [loop for loop in loops if loop is not chosen and loop.section == chosen.section
             and loop.blocks < chosen.blocks and chosen.start <= loop.start <= chosen.end]
    return chosen, inner, notes


def count_loop(loop: Loop, labels: dict, inner: list[Loop] = ()) -> dict:
    """Counts of the loop body, by class and by opcode, with its conditional blocks (forward
    branches that land inside the body) and inner loops."""
    body = loop.inline
    by_class = Counter({name: 0 for name in CLASS_NAMES})
    by_class.update(classify(i.opcode) for i in body)
    conditional, skipped = [], set()
    for ins in body:
        if not ins.is_branch:
            continue
        dest = labels.get((ins.section, ins.target))
        if dest is not None and ins.addr < dest <= loop.end:
            over = {i.addr for i in body if ins.addr < i.addr < dest}
            skipped |= over
            conditional.append({"branch": f"{ins.addr:#x}", "to": ins.target, "skipped_instructions": len(over)})
    return {"by_class": by_class, "opcodes": Counter(i.opcode for i in body), "instructions": len(body),
            "conditional_blocks": conditional, "in_conditional_blocks": len(skipped),
            "inner_loops": [{"label": lp.label, "instructions": len(lp.inline)} for lp in inner]}


def softmax_threads(step) -> int:
    """Threads that run the softmax: the ``softmax*`` warp roles (b07, b08), the consumer warps
    (h07, h08: NUM_CONSUMER_WARPS), else every thread of the CTA."""
    roles = step.info.extra.get("warp_roles")
    if roles:
        return 32 * sum(len(warps) for role, warps in roles.items() if role.startswith("softmax"))
    consumers = getattr(step.module, "NUM_CONSUMER_WARPS", None)
    return 32 * consumers if consumers else step.info.threads


def rows_per_thread(step, arch: str) -> int:
    """Query rows one softmax thread owns: 1 where S lives in TMEM (a lane is a row), 2 in the
    mma.sync / wgmma accumulator fragments (rows r and r + 8)."""
    return 1 if step.info.tmem_cols else 2


def budget_from_sass(text: str, elements: int, rows: int = 1, emulated: int = 0) -> dict:
    """The budget of one kernel's SASS text, for ``elements`` score elements per thread per tile
    and ``rows`` query rows per thread, of which ``emulated`` exponentials per tile are computed
    on the FMA pipe instead of the MUFU (see ``budget`` for the keys)."""
    instrs, labels = parse(text)
    loop, inner, notes = main_loop(instrs, labels)
    ex2_total = sum(1 for i in instrs if classify(i.opcode) == "MUFU.EX2")
    expected = (elements - emulated + rows) / elements
    out = {"elements_per_thread": elements, "rows_per_thread": rows, "ex2_emulated_per_tile": emulated,
           "ex2_expected_per_element": expected,
           "ex2_in_kernel": ex2_total, "ambiguous": notes, "loop": None}
    if loop is None:
        return out
    counted = count_loop(loop, labels, inner)
    by_class = counted["by_class"]
    ex2 = by_class["MUFU.EX2"]
    on_mufu = elements - emulated
    if not on_mufu <= ex2 <= on_mufu + rows:
        notes.append(f"the loop holds {ex2} MUFU.EX2, not {on_mufu} (one per element not emulated) plus up to "
                     f"{rows} (the per-row rescale): it may hold more or less than one K/V tile")
    if ex2_total - ex2 > rows:
        notes.append(f"{ex2_total - ex2} MUFU.EX2 lie outside the chosen loop (a peeled copy of the tile body?)")
    out.update(loop_fields(loop, counted, elements, ex2_total - ex2))
    return out


def _ex2(loop: Loop) -> int:
    return sum(classify(i.opcode) == "MUFU.EX2" for i in loop.inline)


def kv_loop(text: str, elements: int, rows: int, emulated: int = 0):
    """The softmax (K/V tile) loop of a kernel that peels its first K/V tile (FA4; h12 on): the
    innermost loop holding one ``MUFU.EX2`` per element not emulated plus at most one per row (the
    rescale). ``main_loop`` takes the loop holding the *most* ``MUFU.EX2``, which in a persistent
    kernel (FA4 on sm_100, h14) is the work-tile loop (it holds the K/V loop and the peeled first
    K/V tile). Returns (loop, loops nested in it, notes)."""
    instrs, labels = parse(text)
    loops = find_loops(instrs, labels)
    on_mufu = elements - emulated
    fits = [lp for lp in loops if on_mufu <= _ex2(lp) <= on_mufu + rows]
    notes = []
    if not fits:
        counts = sorted({_ex2(lp) for lp in loops if _ex2(lp)})
        return None, [], [f"no loop holds {on_mufu}..{on_mufu + rows} MUFU.EX2 (loops hold {counts})"]
    chosen = min(fits, key=lambda lp: len(lp.inline))

    def nested(a, b):
        return a.section == b.section and (a.blocks <= b.blocks or b.blocks <= a.blocks)

    rivals = [lp for lp in fits if not nested(lp, chosen)]
    if rivals:
        notes.append(f"{len(rivals)} other loop(s) not nested with {chosen.label} hold {on_mufu}..{on_mufu + rows} "
                     "MUFU.EX2")
    if any(classify(i.opcode) == "MUFU.EX2" for i in chosen.out_of_line):
        notes.append(f"loop {chosen.label} has MUFU.EX2 outside its address range")
    inner = [lp for lp in loops if lp is not chosen and lp.section == chosen.section
             and lp.blocks < chosen.blocks and chosen.start <= lp.start <= chosen.end]
    return chosen, inner, notes


def peeled_budget_from_sass(text: str, elements: int, rows: int = 1, emulated: int = 0) -> dict:
    """``budget_from_sass``'s dict for a kernel that peels its first K/V tile, with the loop chosen
    by :func:`kv_loop`. FA4 and h12 on run the first K/V tile of each work tile before the loop,
    so ``elements - emulated`` MUFU.EX2 (give or take ``rows``) outside the loop are expected, not
    a sign of a wrong loop; so are none (at most ``rows``)."""
    instrs, labels = parse(text)
    loop, inner, notes = kv_loop(text, elements, rows, emulated)
    ex2_total = sum(1 for i in instrs if classify(i.opcode) == "MUFU.EX2")
    on_mufu = elements - emulated
    out = {"elements_per_thread": elements, "rows_per_thread": rows, "ex2_emulated_per_tile": emulated,
           "ex2_expected_per_element": (on_mufu + rows) / elements,
           "ex2_in_kernel": ex2_total, "ambiguous": notes, "loop": None}
    if loop is None:
        return out
    counted = count_loop(loop, labels, inner)
    by_class = counted["by_class"]
    outside = ex2_total - by_class["MUFU.EX2"]
    if not (outside <= rows or on_mufu <= outside <= on_mufu + rows):
        notes.append(f"{outside} MUFU.EX2 lie outside the loop, not {on_mufu} (one peeled first K/V tile) "
                     f"or at most {rows}")
    out.update(loop_fields(loop, counted, elements, outside))
    return out


def loop_fields(loop: Loop, counted: dict, elements: int, ex2_outside: int) -> dict:
    """The budget's keys for one chosen loop (``count_loop``'s result) over E = ``elements``."""
    by_class, total = counted["by_class"], counted["instructions"]
    return dict(
        loop={"section": loop.section, "label": loop.label, "start": f"{loop.start:#x}", "end": f"{loop.end:#x}",
              "instructions": total, "ex2_outside": ex2_outside,
              "out_of_line_instructions": len(loop.out_of_line),
              "conditional_blocks": counted["conditional_blocks"], "inner_loops": counted["inner_loops"]},
        counts=dict(by_class), total=total,
        per_element={name: n / elements for name, n in by_class.items()},
        total_per_element=total / elements,
        conditional_per_element=counted["in_conditional_blocks"] / elements,
        packed_lanes_per_element=2 * by_class[PACKED] / elements,
        opcodes=counted["opcodes"],
        other_opcodes=Counter({op: n for op, n in counted["opcodes"].items() if classify(op) == OTHER}),
    )


@per_step_version
def budget(step, arch: str) -> dict:
    """Instructions per score element, by class, of ``step``'s main (K/V tile) loop on ``arch``.

    Returns a dict: ``step``, ``arch``, ``tile_m``, ``tile_n``, ``softmax_threads``,
    ``elements_per_thread`` (E, per K/V tile), ``rows_per_thread``, ``counts`` (class ->
    instructions in the loop body, one thread, one tile), ``total``, ``per_element`` (class ->
    counts / E), ``total_per_element``, ``packed_lanes_per_element``, ``opcodes`` and
    ``other_opcodes`` (full mnemonic -> count in the loop body),
    ``conditional_per_element`` (the share in conditional blocks), ``ex2_expected_per_element``,
    ``loop`` (where it is, its size, conditional blocks, inner loops) and ``ambiguous`` (reasons
    not to trust the numbers; empty when the checks pass).
    See the module docstring for the method."""
    from harness.compiler.compile import compile_step
    report = compile_step(step, arch)
    threads = softmax_threads(step)
    elements = step.info.tile_m * step.info.tile_n // threads
    out = {"step": step.id, "arch": arch, "tile_m": step.info.tile_m, "tile_n": step.info.tile_n,
           "head_dim": step.info.head_dim, "softmax_threads": threads}
    # A step that runs its first K/V tile before the loop (``softmax_peeled``) is read as FA4 is.
    read = peeled_budget_from_sass if step.info.extra.get("softmax_peeled") else budget_from_sass
    out.update(read(report.sass.text, elements, rows_per_thread(step, arch),
                    step.info.extra.get("ex2_emulated_per_tile", 0)))
    return out


# Issue and tensor-core rates the tile arithmetic uses (stated inputs, not measurements).
SCHEDULERS_PER_SM = 4            # warp schedulers per SM, each issues one warp-instruction per clock
WARP = 32
B200_DENSE_FLOP_PER_CLK_SM = 8192   # dense bf16 tensor-core FLOP per clock per SM, B200


def tile_cycles(b: dict, flop_per_clk: int = B200_DENSE_FLOP_PER_CLK_SM) -> dict:
    """Per K/V tile per CTA: the cycles its softmax threads need to issue the loop body, and the
    tensor cores' cycles for its two GEMMs (S = Q K^T and O += P V), from a ``budget`` dict.
    Issue: instructions per element x tile_m x tile_n elements / 32 threads per warp / 4 schedulers
    (``issue_low`` without the conditional blocks, ``issue`` with them). Tensor cores:
    2 GEMMs x 2 FLOP x tile_m x tile_n x head_dim / ``flop_per_clk``."""
    elements = b["tile_m"] * b["tile_n"]
    per_clock = WARP * SCHEDULERS_PER_SM
    return {"elements": elements,
            "issue": b["total_per_element"] * elements / per_clock,
            "issue_low": (b["total_per_element"] - b["conditional_per_element"]) * elements / per_clock,
            "mma": 2 * 2 * elements * b["head_dim"] / flop_per_clk,
            "flop_per_clk": flop_per_clk}


def table(budgets: list[dict], digits: int = 2) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of instructions per score element by class, one column per budget."""
    headers = ["per score element", *(f"{b['step']} {b['arch']}" for b in budgets)]

    def cells(fn):
        return [fn(b) if b.get("loop") else "—" for b in budgets]

    rows = [[name, *cells(lambda b, n=name: f"{b['per_element'][n]:.{digits}f}")] for name in CLASS_NAMES]
    rows += [
        ["**total** (classes summed)", *cells(lambda b: f"**{b['total_per_element']:.{digits}f}**")],
        ["of which in conditional blocks", *cells(lambda b: f"{b['conditional_per_element']:.{digits}f}")],
        ["packed element-ops (2 per FFMA2/FADD2/FMUL2)",
         *cells(lambda b: f"{b['packed_lanes_per_element']:.{digits}f}")],
        ["MUFU.EX2 expected ((E - emulated + rows) / E)", *(f"{b['ex2_expected_per_element']:.3f}" for b in budgets)],
        ["largest 'other' opcodes", *cells(lambda b: ", ".join(
            f"{op} {n / b['elements_per_thread']:.{digits}f}" for op, n in b["other_opcodes"].most_common(2)))],
        ["E = elements / thread / K/V tile", *(
            f"{b['tile_m']}x{b['tile_n']}/{b['softmax_threads']} = {b['elements_per_thread']}" for b in budgets)],
        ["main loop (instructions)", *cells(lambda b: f"{b['loop']['label']} ({b['loop']['instructions']})")],
    ]
    if any(b["ambiguous"] for b in budgets):
        rows.append(["AMBIGUOUS", *("; ".join(b["ambiguous"]) or "no" for b in budgets)])
    return headers, rows
