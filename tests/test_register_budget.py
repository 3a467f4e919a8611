"""setmaxnreg per warpgroup (harness/compiler/register_budget.py), for every split step and the
register experiments: which warp runs which setmaxnreg is read from kernel()'s branches, each
warpgroup's four warps run the same calls, the PTX sets exactly those calls (with multiplicity),
each role runs at its constant's count, each warp runs at most one setmaxnreg, and the final counts
fit the CTA's pool (ptxas's registers per thread at launch x the CTA's threads). Each rule is shown
failing on a broken copy of a real step's source or PTX."""

import pytest
from conftest import STEPS, step_id

from harness.compiler import register_budget as rb
from harness.compiler.compile import compile_step
from harness.core.steps import resolve


def _report(step):
    return compile_step(step, "sm_100a" if step.track == "blackwell" else step.info.archs[0])


SPLIT = [s for s in STEPS if (s.track == "hopper" and s.number >= 7) or (s.track == "blackwell" and s.number >= 12)]
# the register experiments (harness/core/experiments.py): FA4's 184 / 80 / 64 split on b13 and b14
REGISTER_EXPERIMENTS = ["exp:b13-registers-184-80-64", "exp:b14-registers-184-80-64",
                        "exp:b13-registers-stage-first", "exp:b14-registers-stage-first"]


@pytest.mark.parametrize("step", SPLIT + REGISTER_EXPERIMENTS, ids=step_id)
def test_every_split_fits_the_ctas_pool_per_warpgroup(step):
    step = resolve(step) if isinstance(step, str) else step
    report, m = _report(step), step.module
    budget = rb.for_step(step, report)
    launch, threads = report.registers, report.threads_per_cta      # ptxas's launch count, the PTX's .reqntid
    assert (budget["launch"], budget["threads"], budget["pool"]) == (launch, threads, launch * threads)
    assert launch == rb.launch_registers(threads)       # cross-check: ptxas shared the whole file out
    assert budget["total"] == sum(budget["warpgroups"]) * rb.WARPGROUP_THREADS <= budget["pool"]
    if step.track == "blackwell":       # softmax x 2 warpgroups, correction, the MMA/load warpgroup
        assert budget["warpgroups"] == [m.SOFTMAX_REGISTERS] * 2 + [m.CORRECTION_REGISTERS, m.OTHER_REGISTERS]
    else:                               # a producer warpgroup and two consumer warpgroups
        assert budget["warpgroups"] == [m.PRODUCER_REGISTERS] + [m.CONSUMER_REGISTERS] * 2


@pytest.mark.parametrize("step", [s for s in STEPS if s not in SPLIT], ids=step_id)
def test_steps_before_the_split_set_no_register_count(step):
    assert rb.ptx_setmaxnreg(_report(step).ptx.read_text()) == []


def _edited(text, edits):
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def _swapped(a, b):
    return ((a, "\0"), (b, a), ("\0", b))


def _ptx_count(direction, old, new):
    return (f"setmaxnreg.{direction}.sync.aligned.u32 \t{old};", f"setmaxnreg.{direction}.sync.aligned.u32 \t{new};")


BROKEN = {      # name: (step, source edits, PTX edits (the same change, as its compile would set it), message)
    "producer and consumer conditions swapped": (
        "h14", [("    if warp_idx < 4:\n", "    if warp_idx >= 4:\n")], [], r"no warp runs producer\(\)"),
    "producer and consumer counts swapped": (
        "h14", _swapped("setmaxregister_decrease(PRODUCER_REGISTERS)", "setmaxregister_increase(CONSUMER_REGISTERS)"),
        [], r"consumer\(\) runs on warps \[4, 5, 6, 7, 8, 9, 10, 11\] at 24 registers"),
    "softmax and correction counts swapped": (
        "b12", _swapped("setmaxregister_decrease(CORRECTION_REGISTERS)", "setmaxregister_increase(SOFTMAX_REGISTERS)"),
        [], r"softmax_warpgroup\(\) runs on warps \[0, 1, 2, 3, 4, 5, 6, 7\] at 80 registers"),
    "consumers raised past the pool": (
        "h14", [("CONSUMER_REGISTERS = 240\n", "CONSUMER_REGISTERS = 248\n")], [_ptx_count("inc", 240, 248)],
        r"66,560 > the CTA's pool, 168 at launch x 384 threads = 64,512"),
    # 128 x 32 + 256 x 240 = 65,536: the SM's whole file, which the old bound allowed; 1,024 past the pool.
    "producer raised: within the SM's file, past the CTA's pool": (
        "h14", [("PRODUCER_REGISTERS = 24\n", "PRODUCER_REGISTERS = 32\n")], [_ptx_count("dec", 24, 32)],
        r"65,536 > the CTA's pool"),
    "a Hopper warpgroup split across the roles": (
        "h14", [("    if warp_idx < 4:\n", "    if warp_idx < 3:\n")], [], "warpgroup 0's warps take different"),
    "a Blackwell warpgroup split across the roles": (
        "b12", [("    if warp_idx >= MMA_WARP:\n", "    if warp_idx >= LOAD_WARP:\n")], [],
        "warpgroup 3's warps take different"),
    "a setmaxnreg under a condition other than the warp index": (
        "h14", [("    if warp_idx < 4:\n", "    if tidx < 4:\n")], [], "not the warp index"),
    "a call site no warp reaches": (
        "b12", [("    elif warp_idx >= CORRECTION_WARP:\n", "    elif warp_idx >= NUM_WARPS:\n")], [],
        "dec 80 that no warp reaches"),
    "a setmaxnreg the PTX has twice": (      # a set of counts would still match
        "h14", [], [_ptx_count("inc", 240, "240;\n\tsetmaxnreg.inc.sync.aligned.u32 \t240")], "the PTX sets"),
    "a count the PTX does not set": ("h14", [], [_ptx_count("dec", 24, 32)], "the PTX sets"),
    "inc where dec lowers": (
        "b12", [("setmaxregister_decrease(CORRECTION_REGISTERS)", "setmaxregister_increase(CORRECTION_REGISTERS)")],
        [("setmaxnreg.dec.sync.aligned.u32 \t80;", "setmaxnreg.inc.sync.aligned.u32 \t80;")], "the wrong way"),
    # the consumers raised to 248 (2 x 128 x 248 + 128 x 24 = 66,560 > 64,512: an inc that may wait
    # forever) and lowered to 240 after: the final counts fit the pool, the path between them does not
    "an inc past the pool, then a dec back into it": (
        "h14", [("        cute.arch.setmaxregister_increase(CONSUMER_REGISTERS)\n",
                 "        cute.arch.setmaxregister_increase(CONSUMER_REGISTERS + 8)\n"
                 "        cute.arch.setmaxregister_decrease(CONSUMER_REGISTERS)\n")],
        [_ptx_count("inc", 240, "248;\n\tsetmaxnreg.dec.sync.aligned.u32 \t240")],
        r"warp 4 runs 2 setmaxnreg \(inc 248 \(line \d+\), dec 240 \(line \d+\)\)"),
    "not a multiple of 8": (
        "h14", [("CONSUMER_REGISTERS = 240\n", "CONSUMER_REGISTERS = 236\n")], [_ptx_count("inc", 240, 236)],
        "multiple of 8"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_each_broken_split_is_caught(case):
    sid, source_edits, ptx_edits, message = BROKEN[case]
    step = resolve(sid)
    report = _report(step)
    source, ptx = _edited(step.path.read_text(), source_edits), _edited(report.ptx.read_text(), ptx_edits)
    with pytest.raises(rb.RegisterBudgetError, match=message) as caught:
        rb.check(rb.source_split(source, report.threads_per_cta // 32), rb.ptx_setmaxnreg(ptx), report.registers,
                 report.threads_per_cta)
    if "pool" in message:       # the pool is the only rule such a copy breaks
        assert "; " not in str(caught.value)


def test_a_setmaxnreg_outside_kernel_is_refused():
    """Only kernel()'s branches are read, so a call in a role function would go unseen: refused."""
    source = _edited(resolve("h14").path.read_text(), [("    \"\"\"TMA producer (warp 0)",
                                                        "    cute.arch.setmaxregister_decrease(24)\n"
                                                        "    \"\"\"TMA producer (warp 0)")])
    with pytest.raises(rb.RegisterBudgetError, match=r"setmaxnreg in producer\(\)"):
        rb.source_split(source, 12)


def test_a_launch_count_or_warp_count_that_cannot_be_is_refused():
    """ptxas's launch count cross-checked against the file (176 x 384 > 65,536), and the warps walked
    against the threads."""
    report = _report(resolve("h14"))
    split, ptx = rb.source_split(resolve("h14").path.read_text(), 12), rb.ptx_setmaxnreg(report.ptx.read_text())
    assert rb.check(split, ptx, report.registers, 384)["pool"] == report.registers * 384
    with pytest.raises(rb.RegisterBudgetError, match="exceed the SM's 65,536"):
        rb.check(split, ptx, report.registers + 8, 384)
    with pytest.raises(rb.RegisterBudgetError, match="not whole warpgroups"):
        rb.check(split, ptx, report.registers, 416)
