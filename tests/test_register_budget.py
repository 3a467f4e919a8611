"""setmaxnreg per warpgroup, read from every step's PTX against its role table: each warpgroup's
four warps ask for one count, the PTX sets exactly the role table's counts in the right direction,
and the counts fit the SM's register file (harness/compiler/register_budget.py). Each rule is shown
failing on a broken split."""

import pytest
from conftest import STEPS, step_id

from harness.compiler import register_budget as rb
from harness.compiler.compile import compile_step


def _ptx(step):
    return compile_step(step, "sm_100a" if step.track == "blackwell" else step.info.archs[0]).ptx.read_text()


SPLIT = [s for s in STEPS if (s.track == "hopper" and s.number >= 7) or (s.track == "blackwell" and s.number >= 12)]


@pytest.mark.parametrize("step", SPLIT, ids=step_id)
def test_every_split_fits_the_register_file_per_warpgroup(step):
    budget = rb.for_step(step, _ptx(step))
    assert budget["total"] <= rb.REGISTER_FILE
    if step.track == "blackwell":       # the whole file: 4 warpgroups at 128 on entry
        assert budget["total"] == rb.REGISTER_FILE and budget["launch"] == 128
    else:                               # a producer warpgroup and two consumer warpgroups
        assert budget["warpgroups"] == [24, 240, 240]


@pytest.mark.parametrize("step", [s for s in STEPS if s not in SPLIT], ids=step_id)
def test_steps_before_the_split_set_no_register_count(step):
    assert rb.ptx_setmaxnreg(_ptx(step)) == []


# Blackwell's split (softmax 192 x 2 warpgroups, correction 80, the rest 48) as the PTX sets it.
_PTX = [("inc", 192), ("dec", 80), ("dec", 48)]
_WARPS = [192] * 8 + [80] * 4 + [48] * 4


def test_the_split_as_built_passes():
    assert rb.check(_WARPS, _PTX, 512)["total"] == 65536


@pytest.mark.parametrize("warps, ptx, message", [
    ([192] * 8 + [80] * 3 + [48] * 5, _PTX, "setmaxnreg acts on a whole warpgroup"),       # a role split mid-warpgroup
    ([200] * 8 + [80] * 4 + [48] * 4, [("inc", 200), ("dec", 80), ("dec", 48)], "wait forever"),  # over the file
    (_WARPS, [("inc", 192), ("dec", 80)], "the PTX sets"),                                  # a role's count never set
    (_WARPS, [("inc", 192), ("inc", 80), ("dec", 48)], "the PTX sets"),                     # inc where dec lowers
    ([190] * 8 + [80] * 4 + [48] * 4, [("inc", 190), ("dec", 80), ("dec", 48)], "multiple of 8"),
])
def test_each_broken_split_is_caught(warps, ptx, message):
    with pytest.raises(rb.RegisterBudgetError, match=message):
        rb.check(warps, ptx, 512)
