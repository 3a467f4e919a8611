"""The MMA-pipe hazard model (harness/model/mma_pipe.py): every tcgen05.mma pair of a Blackwell step that
relies on issue order across accumulators is a documented one, and the model does catch new ones."""

import pytest
from conftest import STEPS, step_id

from harness.model import mma_pipe
from harness.model.mma_pipe import Barrier, Commit, Mma, Wait

BLACKWELL = [s for s in STEPS if s.track == "blackwell"]
TMEM_MAP = {"S0": (0, 128), "S1": (128, 128), "O0": (256, 128), "O1": (384, 128)}
ALIASES = {"P0": ("S0", 0, 64), "P1": ("S1", 0, 64)}


@pytest.mark.parametrize("step", BLACKWELL, ids=step_id)
def test_hazards_are_exactly_the_documented_ones(step):
    assert mma_pipe.hazards(step) == set(mma_pipe.DOCUMENTED.get(step.id, {}))


def test_from_b08_on_the_kernels_rely_on_cross_accumulator_issue_order_for_s_over_p_only():
    """b08 introduced the ring (S(j+1) may overwrite P(j) before P V(j) ran); b09 issues S_g(j) right
    after P_g V(j-1). The documented pairs are exactly 'S_g written over the P_g that P_g V reads'."""
    later = sorted(s.id for s in BLACKWELL if s.id >= "b08")
    assert sorted(mma_pipe.DOCUMENTED) == later
    for step, pairs in mma_pipe.DOCUMENTED.items():
        assert set(pairs) == {(f"O{g} += P{g}·B reads P{g} in S{g}", f"S{g} written") for g in (0, 1)}, step
        assert all("issue order across accumulators" in why for why in pairs.values())


def _ptx(between_pv_and_s: str) -> str:
    """A PTX-like MMA loop: S0 = Q K (SS), commit s_full, wait p_full, O0 += P0 V (TS), then
    ``between_pv_and_s`` and the loop's back edge to S0 of the next iteration."""
    return f"""
\tadd.s32 \t%r9, %r1, 64;
\tadd.s32 \t%r10, %r1, 72;
\tadd.s32 \t%r11, %r1, 80;
\tadd.s32 \t%r20, %r5, 256;
\tadd.s32 \t%r21, %r5, 8;
$L__BB0_1:
\ttcgen05.mma.cta_group::1.kind::f16 [%r5], %rd1, %rd2, %r6, %p1;
\ttcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 \t[%r9];
\tmbarrier.try_wait.parity.shared.b64 P1, [%r10], %r3, 10000000;
\ttcgen05.mma.cta_group::1.kind::f16 [%r20], [%r21], %rd3, %r7, %p1;
{between_pv_and_s}
\t@%p2 bra \t$L__BB0_1;
"""


def test_an_undocumented_hazard_is_reported():
    body, feeds = mma_pipe.events(_ptx(""), TMEM_MAP, ALIASES)
    assert [type(e).__name__ for e in body] == ["Mma", "Commit", "Wait", "Mma"]
    found = mma_pipe.find_hazards(body, feeds)
    assert found == {("O0 += P0·B reads P0 in S0", "S0 written")}
    assert found - set(mma_pipe.DOCUMENTED.get("synthetic", {})) == found


def test_a_commit_alone_or_a_wait_on_another_barrier_orders_nothing():
    commit_only = "\ttcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 \t[%r11];"
    other_wait = "\tmbarrier.try_wait.parity.shared.b64 P1, [%r10], %r4, 10000000;"
    for between in (commit_only, other_wait, commit_only + "\n" + other_wait):
        body, feeds = mma_pipe.events(_ptx(between), TMEM_MAP, ALIASES)
        assert mma_pipe.find_hazards(body, feeds), between


def test_removing_the_wait_turns_a_non_hazard_into_a_hazard():
    waited = ("\ttcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 \t[%r11];\n"
              "\tmbarrier.try_wait.parity.shared.b64 P1, [%r11], %r4, 10000000;")
    body, feeds = mma_pipe.events(_ptx(waited), TMEM_MAP, ALIASES)
    assert mma_pipe.find_hazards(body, feeds) == set()
    without = [e for e in body if not isinstance(e, Wait) or e.barrier.offset != 80]
    assert len(without) == len(body) - 1
    assert mma_pipe.find_hazards(without, feeds) == {("O0 += P0·B reads P0 in S0", "S0 written")}


def _body(kv: Barrier, kv_empty: Barrier):
    s0 = Mma("S0", (0, 128))
    pv = Mma("O0", (256, 384), "P0", "S0", (0, 64))
    return [Wait(kv), s0, Commit(Barrier("%r1", 8, False)), Wait(Barrier("%r1", 16, False)), pv,
            Commit(kv_empty)]


def test_a_one_stage_kv_wait_orders_but_a_ring_stage_does_not():
    """b07 against b08: the wait on kv_full at the loop top is fed by kv_empty (the load warp waits on
    it and then loads). With one K/V buffer that is the commit after P V(j); with a ring, iteration
    j+1 waits on the other stage, fed by iteration j-1."""
    feeds = {("%r1", 32, "%r1", 0)}
    one_stage = _body(Barrier("%r1", 0, False), Barrier("%r1", 32, False))
    ring = _body(Barrier("%r1", 0, True), Barrier("%r1", 32, True))
    assert mma_pipe.find_hazards(one_stage, feeds) == set()
    assert mma_pipe.find_hazards(one_stage, set()) == {("O0 += P0·B reads P0 in S0", "S0 written")}
    assert mma_pipe.find_hazards(ring, feeds) == {("O0 += P0·B reads P0 in S0", "S0 written")}


def test_same_accumulator_pairs_are_never_hazards():
    o = Mma("O0", (256, 384), "P0", "S0", (0, 64))
    assert mma_pipe.find_hazards([o, o, Mma("O0", (256, 384))]) == set()


def test_prologue_and_tail_pairs_are_checked():
    """b09's shape: S0 issued once before the loop, O0 += P0 V once after it. With no wait between
    them (a loop that runs no iteration) the tail's P V meets the prologue's S directly."""
    s0 = Mma("S0", (0, 128))
    pv = Mma("O0", (256, 384), "P0", "S0", (0, 64))
    s_full, p_full = Barrier("%r1", 8, False), Barrier("%r1", 16, False)
    body = [Wait(p_full), pv, s0, Commit(s_full)]
    # body: P V(j-1) then S(j) with nothing between: the documented S-over-P pair
    assert mma_pipe.find_hazards(body, set(), [s0, Commit(s_full)], [Wait(p_full), pv]) == {
        ("O0 += P0·B reads P0 in S0", "S0 written")}
    # a tail that writes S0 again right after its P V, with nothing between, is caught there
    assert mma_pipe.find_hazards([Wait(p_full), pv, Commit(s_full), Wait(s_full)], set(), [],
                                 [Wait(p_full), pv, s0]) == {("O0 += P0·B reads P0 in S0", "S0 written")}
    # and with a commit + wait between them, it is not
    assert mma_pipe.find_hazards([Wait(p_full), pv, Commit(s_full), Wait(s_full)], set(), [],
                                 [Wait(p_full), pv, Commit(p_full), Wait(p_full), s0]) == set()


def test_mmas_in_no_loop_or_in_two_separate_loops_are_refused():
    mma = "\ttcgen05.mma.cta_group::1.kind::f16 [%r5], %rd1, %rd2, %r6, %p1;\n"
    with pytest.raises(ValueError, match="no loop"):
        mma_pipe.program(mma, TMEM_MAP, ALIASES)
    two = f"$L__BB0_1:\n{mma}\t@%p2 bra \t$L__BB0_1;\n$L__BB0_2:\n{mma}\t@%p2 bra \t$L__BB0_2;\n"
    with pytest.raises(ValueError, match="two loops"):
        mma_pipe.program(two, TMEM_MAP, ALIASES)
