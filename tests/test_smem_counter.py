"""The smem store model (harness/model/smem_model.py) against ncu's counters, for every recorded profile
that counted store instructions: the model may not stand if it disagrees with the hardware."""

import re

import pytest

from harness.core import results
from harness.core.steps import resolve
from harness.gpu.profile import FA4
from harness.model.smem_model import wavefronts
from harness.report import blocks_profile

TOLERANCE = 0.15


def _rows():
    for gpu, data in results.all_recorded().items():
        # profiles are filed by step id (01, h02) or by experiment name (h04-loads-free); FA4's
        # kernel is not one the model describes
        names = [n if re.fullmatch(r"[hb]?\d\d", n) else f"exp:{n}" for n in data.get("profiles", {}) if n != FA4]
        for row in blocks_profile.store_model_rows(data, names):
            yield pytest.param(row, id=f"{gpu}-{row['name']}")


ROWS = list(_rows())


def test_profiles_with_store_counters_exist():
    counted = [name for data in results.all_recorded().values() for name, prof in data.get("profiles", {}).items()
               if isinstance(prof, dict) and "smsp__sass_inst_executed_op_shared_st.sum" in prof.get("metrics", {})]
    assert counted, "no recorded profile counts smem store instructions: run `ladder profile <step> --record`"
    if not ROWS:
        pytest.skip(f"every profile that counted smem stores ({', '.join(sorted(counted))}) measured an earlier "
                    "version of its step's code: re-profile on an H200 (`ladder profile <step> --record`)")


@pytest.mark.parametrize("row", ROWS)
def test_model_counts_the_store_instructions_ncu_counts(row):
    assert row["model"].instructions == pytest.approx(row["instructions"], rel=0.01), row


@pytest.mark.parametrize("row", ROWS)
def test_model_wavefronts_are_a_lower_bound_and_exact_when_the_stores_are_alone(row):
    """Other warps' tensor-core and TMA smem traffic only adds wavefronts; with none of it
    (stores alone on the SM) the model must match the counter."""
    model, counted = row["model"].wavefronts, row["wavefronts"]
    assert model <= counted * (1 + 0.02), row
    if row["alone"]:
        assert model == pytest.approx(counted, rel=TOLERANCE), row


@pytest.mark.parametrize("row", ROWS)
def test_the_bank_conflicts_the_model_predicts_are_the_ones_ncu_counts(row):
    """Where the model predicts conflicts (more than 5% of the wavefronts), ncu's bank-conflict
    counter agrees within 15%."""
    predicted = row["model"].wavefronts - row["model"].minimal
    if predicted > 0.05 * row["model"].wavefronts:
        assert predicted == pytest.approx(row["conflicts"], rel=TOLERANCE), row


def test_a_16_byte_store_is_served_by_quarter_warps():
    """A quarter-warp's 8 threads x 16 bytes fill one wavefront; two quarters on different banks do
    not share one. Threads 0-15 down one 16-byte column of 256-byte rows, threads 16-31 down the
    next: 8-way in every quarter, 32 in all (a whole-warp count would say 16: h02's stores, which
    ncu counts at ~32)."""
    two_columns = [[(t % 16) * 256 + (t // 16) * 16 + i for i in range(16)] for t in range(32)]
    assert wavefronts(two_columns) == (32, 4)
    contiguous = [[t * 16 + i for i in range(16)] for t in range(32)]
    assert wavefronts(contiguous) == (4, 4)
    four_bytes = [[t * 4 + i for i in range(4)] for t in range(32)]
    assert wavefronts(four_bytes) == (1, 1)


@pytest.mark.parametrize("sid", ["01", "h04", "b04"])
def test_the_offsets_read_from_the_layouts_are_the_ones_indexing_finds(sid):
    """The store model reads each thread's smem offsets off its partition's static layout (instant)
    instead of indexing them one by one in a kernel run on the CPU (seconds per step): the two give
    the same costs, for the thread-issued Q/K/V copies and the Hopper P store (01), the Hopper P
    fragment store alone (h04) and Blackwell's P row pieces (b04)."""
    from harness.model.smem_model import _traced_store_costs
    fast = _traced_store_costs(resolve(sid))
    assert fast and fast == _traced_store_costs(resolve(sid), by_element=True)
