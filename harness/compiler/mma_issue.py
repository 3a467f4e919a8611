"""The MMA warp's issue path on sm_100a, read from the SASS: how many instructions lie between
consecutive tcgen05 MMAs (UTCHMMA) in program order, how long the MMA warp's K/V loop is, and
whether it or the softmax loop touches local memory (LDL/STL: spilled registers).

One thread issues every tcgen05.mma of a CTA (pair). Between two MMAs it builds descriptors,
waits on mbarriers and commits; a gap of a dozen instructions issues in a dozen cycles or so, far
less than an MMA's 128x128x16 runs, so short gaps keep the tensor core fed. A long gap, or a load
from local memory on that path, is time the tensor core may wait. Static counts, not a timing.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.compiler import softmax_budget as sb

MMA_PREFIX = "UTCHMMA"
LOCAL_MEMORY = ("LDL", "STL")
BINS = ((0, 12), (13, 20), (21, 30), (31, None))      # gap sizes in instructions, as the ladder reads them
SHORT_GAP = BINS[0][1]


def bin_label(lo: int, hi: int | None) -> str:
    return f"<= {hi}" if lo == 0 else (f"{lo}-{hi}" if hi is not None else f">= {lo}")


@dataclass(frozen=True)
class MmaIssue:
    mmas: int                       # tcgen05 MMAs in the kernel's text
    gaps: tuple[int, ...]           # instructions between consecutive MMAs, program order
    loop_label: str | None          # the MMA warp's K/V loop: the innermost loop holding MMAs
    loop_instructions: int | None   # its instructions, waits' retry blocks included (None: no such loop found)
    loop_local: int | None          # LDL/STL in it
    loop_gap: int | None            # the largest gap paid every K/V tile: in the MMA loop, wrap-around included
    softmax_local: int | None       # LDL/STL in the softmax's K/V loop (the loop with the most MUFU.EX2)
    local_total: int                # LDL/STL anywhere in the kernel

    def bins(self) -> list[int]:
        return [sum(lo <= g and (hi is None or g <= hi) for g in self.gaps) for lo, hi in BINS]

    @property
    def short_share(self) -> float:
        return sum(g <= SHORT_GAP for g in self.gaps) / len(self.gaps) if self.gaps else 0.0


def _count(instrs, prefixes) -> int:
    return sum(i.opcode.startswith(prefixes) for i in instrs)


def read(sass_text: str) -> MmaIssue:
    """The issue-path reading of one kernel's nvdisasm output."""
    instrs, labels = sb.parse(sass_text)
    at = [k for k, i in enumerate(instrs) if i.opcode.startswith(MMA_PREFIX)]
    gaps = tuple(b - a - 1 for a, b in zip(at, at[1:], strict=False))
    loops = sb.find_loops(instrs, labels)
    with_mma = [lp for lp in loops if _count(lp.inline, MMA_PREFIX)]
    # Innermost: no other MMA loop's blocks nested inside it.
    inner = [lp for lp in with_mma if not any(o is not lp and o.blocks < lp.blocks for o in with_mma)]
    loop = min(inner, key=lambda lp: len(lp.inline), default=None)
    body = (loop.inline + loop.out_of_line) if loop else ()
    softmax, _, _ = sb.main_loop(instrs, labels)
    soft_body = (softmax.inline + softmax.out_of_line) if softmax else ()
    return MmaIssue(mmas=len(at), gaps=gaps, loop_label=loop.label if loop else None,
                    loop_instructions=len(body) if loop else None,
                    loop_local=_count(body, LOCAL_MEMORY) if loop else None,
                    loop_gap=_largest_loop_gap(loop.inline) if loop else None,
                    softmax_local=_count(soft_body, LOCAL_MEMORY) if softmax else None,
                    local_total=_count(instrs, LOCAL_MEMORY))


def _largest_loop_gap(inline) -> int:
    """The largest run of non-MMA instructions one pass of the loop issues between two MMAs,
    counting the run from the last MMA round the back edge to the first."""
    at = [k for k, i in enumerate(inline) if i.opcode.startswith(MMA_PREFIX)]
    inside = [b - a - 1 for a, b in zip(at, at[1:], strict=False)]
    return max([*inside, len(inline) - 1 - at[-1] + at[0]])


def _or_none(value: int | None) -> str:
    return "no loop found" if value is None else str(value)


def rows(readings: dict[str, MmaIssue]) -> tuple[list[str], list[list[str]]]:
    """A table, one column per kernel: gap bins, the share of short gaps, the MMA loop, local memory."""
    headers = ["MMA issue path", *readings]
    body = [[f"gaps of {bin_label(lo, hi)} instructions", *(str(r.bins()[k]) for r in readings.values())]
            for k, (lo, hi) in enumerate(BINS)]
    body += [
        [f"share of gaps <= {SHORT_GAP}", *(f"{r.short_share:.0%}" for r in readings.values())],
        ["largest gap (program order, prologue included)", *(str(max(r.gaps, default=0)) for r in readings.values())],
        ["largest gap paid every K/V tile (MMA loop)", *(_or_none(r.loop_gap) for r in readings.values())],
        ["MMA loop instructions (K/V tile)", *(_or_none(r.loop_instructions) for r in readings.values())],
        ["LDL/STL in the MMA loop", *(_or_none(r.loop_local) for r in readings.values())],
        ["LDL/STL in the softmax loop", *(_or_none(r.softmax_local) for r in readings.values())],
        ["LDL/STL in the kernel", *(str(r.local_total) for r in readings.values())],
    ]
    return headers, body


def of_step(step) -> MmaIssue:
    from harness.compiler.compile import compile_step
    return read(compile_step(step, "sm_100a").sass.text)


def fa4_like(step) -> tuple[str, MmaIssue]:
    """FA4's sm100 forward kernel, built through the same ptxas, in the step's CTA-group choice
    (1-CTA or the 2-CTA pair): its column name and reading."""
    from harness.compiler.fa4_sass import compile_fa4
    two_cta = step.info.extra.get("cta_group", 1) == 2
    return f"FA4 ({'2-CTA' if two_cta else '1-CTA'})", read(compile_fa4("sm_100a", two_cta=two_cta).sass.text)


def readings(step, against=None) -> dict[str, MmaIssue]:
    """The step's reading, the other step's (if any) and FA4's, by column name."""
    out = {s.spec: of_step(s) for s in ([against] if against else []) + [step]}
    name, fa4 = fa4_like(step)
    out[name] = fa4
    return out
