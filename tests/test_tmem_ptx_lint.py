"""PTX lint for the Blackwell steps' tensor-memory hand-offs (sm_100a PTX, no GPU):

1. a ``tcgen05.ld`` result is not computed on before ``tcgen05.wait::ld`` (``mov`` packing is a
   move, not a use);
2. what ``tcgen05.st`` wrote (P, the rescaled O) passes ``tcgen05.wait::st`` and then
   ``tcgen05.fence::before_thread_sync`` before any barrier/mbarrier arrive or MMA hands it on.

Every b-step passes both; each rule is shown to fail on broken copies of b08's (and b06's) PTX."""

import re

import pytest
from conftest import STEPS, step_id

from harness.compiler import ptx_lint
from harness.compiler.compile import compile_step
from harness.core.steps import resolve

BLACKWELL = [s for s in STEPS if s.track == "blackwell"]
ARCH = "sm_100a"


def _ptx(step_or_id):
    step = resolve(step_or_id) if isinstance(step_or_id, str) else step_or_id
    return compile_step(step, ARCH).ptx.read_text()


def _lines_matching(ptx, pattern):
    return [i for i, line in enumerate(ptx.splitlines()) if re.match(pattern, line.strip())]


def _without_lines(ptx, pattern):
    return "\n".join(line for line in ptx.splitlines() if not re.match(pattern, line.strip()))


def _insert_after(ptx, index, new_line):
    lines = ptx.splitlines()
    return "\n".join(lines[:index + 1] + [new_line] + lines[index + 1:])


def _first_ld(ptx):
    """(line index, destination registers, the next line) of the first tcgen05.ld."""
    index = _lines_matching(ptx, r"tcgen05\.ld\.")[0]
    lines = ptx.splitlines()
    dests = re.findall(r"%r\d+", lines[index].split("[")[0])
    return index, dests, lines[index + 1].strip()


RULES = {  # rule -> (the instruction it is about, the wait the rule requires)
    "ld": (ptx_lint.tcgen05_ld_early_uses, r"tcgen05\.ld\.", r"tcgen05\.wait::ld"),
    "st": (ptx_lint.tcgen05_st_unfenced_handoffs, r"tcgen05\.st\.", r"tcgen05\.wait::st"),
}


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("step", BLACKWELL, ids=step_id)
def test_every_tcgen05_load_and_store_is_waited_before_use(step, rule):
    """ld: no use of a tcgen05.ld result before tcgen05.wait::ld; st: every tcgen05.st waited and
    fenced before any hand-off to another thread."""
    lint, instruction, wait = RULES[rule]
    ptx = _ptx(step)
    assert _lines_matching(ptx, instruction), f"{step.id}: nothing to check"
    hazards = lint(ptx)
    assert not hazards, "\n".join(map(str, hazards[:10]))
    # not vacuous: without its waits, the same kernel breaks the rule
    assert lint(_without_lines(ptx, wait))


# --- rule 1 on broken copies of b08 ---------------------------------------------------------

def test_b08_ld_pattern_is_load_then_mov_packing_then_wait():
    """What the lint is built around: the DSL packs the loaded registers with ``mov.b64`` between
    the load and its wait, and computes (``max``) only after the wait."""
    ptx = _ptx("b08")
    index, dests, after = _first_ld(ptx)
    assert len(dests) == resolve("b08").module.TMEM_CHUNK      # one 32-bit register per column of the chunk
    assert re.match(r"mov\.b64\s+%rd\d+, \{%r\d+, %r\d+\};", after)
    lines = ptx.splitlines()
    wait = next(i for i in range(index, len(lines)) if "tcgen05.wait::ld" in lines[i])
    between = {line.split()[0] for line in lines[index + 1:wait]}
    assert between == {"mov.b64"}


def test_arithmetic_on_a_tcgen05_ld_destination_before_the_wait_is_reported():
    ptx = _ptx("b08")
    index, dests, _ = _first_ld(ptx)
    broken = _insert_after(ptx, index, f"\tadd.f32 \t%r99999, {dests[0]}, {dests[1]};")
    hazards = ptx_lint.tcgen05_ld_early_uses(broken)
    assert hazards and {h.line for h in hazards} == {index + 2}      # 1-based line of the add
    assert all(h.instruction.startswith("add.f32") for h in hazards)
    assert dests[0] in hazards[0].why and "before tcgen05.wait::ld" in hazards[0].why


def test_a_use_through_a_mov_copy_and_a_cvt_are_uses_a_plain_mov_is_not():
    ptx = _ptx("b08")
    index, dests, after = _first_ld(ptx)
    packed = re.match(r"mov\.b64\s+(%rd\d+),", after).group(1)        # a copy of two loaded registers
    # a use of the packed 64-bit copy before the wait
    hazards = ptx_lint.tcgen05_ld_early_uses(_insert_after(ptx, index + 1, f"\tadd.s64 \t%rd99999, {packed}, 1;"))
    assert [h.instruction.split()[0] for h in hazards] == ["add.s64"] and packed in hazards[0].why
    # cvt converts (it reads the value): a use
    hazards = ptx_lint.tcgen05_ld_early_uses(_insert_after(ptx, index, f"\tcvt.rn.f16.f32 \t%rs99999, {dests[0]};"))
    assert [h.instruction.split()[0] for h in hazards] == ["cvt.rn.f16.f32"]
    # a mov is a move: allowed, and what it copied is still pending ...
    moved = _insert_after(ptx, index, f"\tmov.b32 \t%r99999, {dests[0]};")
    assert ptx_lint.tcgen05_ld_early_uses(moved) == []
    hazards = ptx_lint.tcgen05_ld_early_uses(_insert_after(moved, index + 1, "\tneg.f32 \t%r99998, %r99999;"))
    assert [h.instruction.split()[0] for h in hazards] == ["neg.f32"] and "%r99999" in hazards[0].why
    # ... but a mov that overwrites a load's own destination while it is in flight is not allowed
    hazards = ptx_lint.tcgen05_ld_early_uses(_insert_after(ptx, index, f"\tmov.b32 \t{dests[0]}, 0;"))
    assert len(hazards) == 1 and "overwrites" in hazards[0].why


def test_a_branch_around_the_wait_ld_is_followed():
    """Straight-line text order would see the wait between the load and the add; the path that
    takes the branch does not."""
    ptx = """
.visible .entry k()
{
    .reg .b32 %r<8>;
    .reg .pred %p<2>;
    tcgen05.ld.sync.aligned.32x32b.x2.b32 {%r1, %r2}, [%r0];
    @%p1 bra $L__BB0_1;
    tcgen05.wait::ld.sync.aligned;
$L__BB0_1:
    add.f32 %r3, %r1, %r2;
    ret;
}
"""
    hazards = ptx_lint.tcgen05_ld_early_uses(ptx)
    assert {h.line for h in hazards} == {10} and len(hazards) == 2
    assert ptx_lint.tcgen05_ld_early_uses(ptx.replace("@%p1 bra $L__BB0_1;", "")) == []


# --- rule 2 on broken copies of b08 (and b06) ------------------------------------------------

def _b08_handoff():
    """b08's softmax warps: tcgen05.st (P, rescaled O) ... wait::st, fence::before_thread_sync,
    then the mbarrier arrive the MMA warp waits on. Returns the line indices of the three."""
    ptx = _ptx("b08")
    (wait,) = _lines_matching(ptx, r"tcgen05\.wait::st")
    lines = ptx.splitlines()
    assert lines[wait + 1].strip() == "tcgen05.fence::before_thread_sync;"
    arrive = next(i for i in range(wait, len(lines)) if lines[i].strip().startswith("mbarrier.arrive"))
    assert arrive - wait <= 3
    assert all("tcgen05.st." not in line for line in lines[wait:arrive])
    return ptx, wait, arrive


def test_a_tmem_store_handed_off_without_wait_st_is_reported():
    ptx, wait, arrive = _b08_handoff()
    broken = _without_lines(ptx, r"tcgen05\.wait::st")
    hazards = ptx_lint.tcgen05_st_unfenced_handoffs(broken)
    assert hazards
    first = hazards[0]
    assert first.line == arrive and first.instruction.startswith("mbarrier.arrive")   # one line fewer, 1-based
    assert "no tcgen05.wait::st" in first.why


def test_a_fence_before_the_wait_st_does_not_count():
    ptx, wait, arrive = _b08_handoff()
    lines = ptx.splitlines()
    lines[wait], lines[wait + 1] = lines[wait + 1], lines[wait]                # fence, then wait
    hazards = ptx_lint.tcgen05_st_unfenced_handoffs("\n".join(lines))
    assert hazards and hazards[0].line == arrive + 1
    assert "no tcgen05.fence::before_thread_sync after it" in hazards[0].why
    # and no fence at all is the same hazard
    hazards = ptx_lint.tcgen05_st_unfenced_handoffs("\n".join(lines[:wait] + lines[wait + 1:]))
    assert hazards and "no tcgen05.fence::before_thread_sync" in hazards[0].why


def test_b06_second_wait_st_covers_the_branch_that_skips_the_o_rescale():
    """b06 waits twice: inside the O-rescale block and again after the label the skip branch goes
    to. Without the second, the P stores (before the branch) reach bar.sync unwaited on the skip
    path, though a wait::st still lies between every store and the bar.sync in text order."""
    ptx = _ptx("b06")
    waits = _lines_matching(ptx, r"tcgen05\.wait::st")
    assert len(waits) == 2
    lines = ptx.splitlines()
    assert any(re.match(r"\$L__BB\d+_\d+:", line) for line in lines[waits[0]:waits[1]])   # a label between
    assert max(_lines_matching(ptx, r"tcgen05\.st\.")) < waits[0]   # text order: every store meets a wait
    broken = "\n".join(lines[:waits[1]] + lines[waits[1] + 1:])
    hazards = ptx_lint.tcgen05_st_unfenced_handoffs(broken)
    assert hazards and all("no tcgen05.wait::st" in h.why for h in hazards)
    p_cols = resolve("b06").module.TMEM_CHUNK // 2                  # a chunk of bf16 P fills half the columns
    p_stores = {i + 1 for i in _lines_matching(broken, rf"tcgen05\.st\.sync\.aligned\.32x32b\.x{p_cols}\b")}
    reported = {int(re.search(r"tcgen05.st at line (\d+)", h.why).group(1)) for h in hazards}
    assert reported <= p_stores and reported
