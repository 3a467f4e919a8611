"""The softmax instruction budget (harness/compiler/softmax_budget.py): instructions per score element of the
main loop, by class. CPU only: compiles every step and reads its SASS."""

import pytest
from conftest import STEP_ARCHS, step_id

from harness.compiler import softmax_budget as sb
from harness.report import writeups

# A kernel in nvdisasm's format with a known loop: .L_x_0 (0x20-0x120) is the tile loop, with a
# forward branch over 2 instructions (0xb0 -> .L_x_3), an inline spin wait (.L_x_4), and an
# out-of-line retry (.L_x_9, after EXIT) that branches back into the body at .L_x_5: that branch is
# not a loop (.L_x_5 does not dominate it) and the retry block is not counted.
SYNTHETIC = """
\t.section\t.text.kern,"ax",@progbits
.text.kern:
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   ISETP.NE.AND P0, PT, R0, RZ, PT ;
.L_x_0:
        /*0020*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [R2], RZ ;
        /*0030*/              @!P1 BRA `(.L_x_9) ;
.L_x_5:
        /*0040*/                   FMNMX3.NAN R4, R5, R6, R7, !PT ;
        /*0050*/                   FADD2 R8, R8.F32x2.HI_LO, -R4.F32 ;
        /*0060*/                   FFMA.SAT R9, R8, R10, 0.5 ;
        /*0070*/                   FFMA.RM R9, R9, R11, 12582913 ;
        /*0080*/                   MUFU.EX2 R12, R9 ;
        /*0090*/                   MUFU.EX2 R13, R9 ;
        /*00a0*/                   F2FP.BF16.F32.PACK_AB R14, R12, R13 ;
        /*00b0*/               @P0 BRA `(.L_x_3) ;
        /*00c0*/                   FMUL2 R16, R2.F32, R16.F32x2.HI_LO ;
        /*00d0*/                   FMUL R17, R17, R2 ;
.L_x_3:
.L_x_4:
        /*00e0*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P2, [R3], RZ ;
        /*00f0*/              @!P2 BRA `(.L_x_4) ;
        /*0100*/                   IADD3 R0, PT, PT, R0, 0x1, RZ ;
        /*0110*/                   ISETP.NE.AND P3, PT, R0, R20, PT ;
        /*0120*/               @P3 BRA `(.L_x_0) ;
        /*0130*/                   MUFU.RCP R21, R22 ;
        /*0140*/                   EXIT ;
.L_x_9:
        /*0150*/                   NANOSLEEP.SYNCS 0x989680 ;
        /*0160*/                   SYNCS.PHASECHK.TRANS64 P1, [R2], RZ ;
        /*0170*/              @!P1 BRA `(.L_x_9) ;
        /*0180*/                   BRA `(.L_x_5) ;
.L_x_10:
        /*0190*/                   BRA `(.L_x_10);
"""
SYNTHETIC_COUNTS = {"FFMA": 2, "FADD": 0, "FMUL": 1, "FMNMX": 1, "MUFU.EX2": 2, "MUFU other": 0,
                    "conversions": 1, "FFMA2/FADD2/FMUL2": 2, "other": 8}


def test_synthetic_loop_gives_the_known_counts():
    b = sb.budget_from_sass(SYNTHETIC, elements=2, rows=1)
    assert b["ambiguous"] == []
    assert b["loop"]["label"] == ".L_x_0"
    assert (b["loop"]["start"], b["loop"]["end"]) == ("0x20", "0x120")
    assert b["counts"] == SYNTHETIC_COUNTS
    assert b["total"] == 17
    assert b["per_element"]["MUFU.EX2"] == 1.0
    assert b["packed_lanes_per_element"] == 2.0
    assert b["loop"]["conditional_blocks"] == [
        {"branch": "0xb0", "to": ".L_x_3", "skipped_instructions": 2}]
    assert b["conditional_per_element"] == 1.0
    assert b["loop"]["inner_loops"] == [{"label": ".L_x_4", "instructions": 2}]
    assert b["loop"]["out_of_line_instructions"] == 4     # the .L_x_9 retry: in the loop, not counted


def test_a_branch_back_from_out_of_line_code_is_not_a_loop():
    instrs, labels = sb.parse(SYNTHETIC)
    headers = {loop.label for loop in sb.find_loops(instrs, labels)}
    assert headers == {".L_x_0", ".L_x_4", ".L_x_9"}     # not .L_x_5 (re-entry), not .L_x_10 (unreachable)


def test_a_loop_holding_two_tiles_is_reported_not_counted_as_one():
    b = sb.budget_from_sass(SYNTHETIC, elements=1, rows=0)     # 2 MUFU.EX2 for 1 element: 2 tiles a pass
    assert any("MUFU.EX2" in note for note in b["ambiguous"])


def test_no_loop_with_an_exp_is_reported():
    text = SYNTHETIC.replace("MUFU.EX2", "MUFU.RSQ")
    b = sb.budget_from_sass(text, elements=2, rows=1)
    assert b["loop"] is None and b["ambiguous"]


@pytest.mark.parametrize("step,arch", STEP_ARCHS, ids=lambda v: step_id(v))
def test_budget_of_every_step(step, arch):
    b = sb.budget(step, arch)
    assert not b["ambiguous"], b["ambiguous"]
    per = b["per_element"]
    emulated = step.info.extra.get("ex2_emulated_per_tile", 0) / b["elements_per_thread"]
    assert 1.0 - emulated <= per["MUFU.EX2"] <= 1.5
    assert per["MUFU.EX2"] <= b["ex2_expected_per_element"] + 1e-9
    assert sum(b["counts"].values()) == b["total"] == b["loop"]["instructions"]
    assert sum(per.values()) == pytest.approx(b["total_per_element"])
    ops = b["opcodes"]
    if "cute.math.exp(" in step.path.read_text():
        # the library exp is the full expf sequence: one FFMA.SAT and one FFMA.RM per MUFU.EX2, 4 FFMAs in all
        assert ops["FFMA.SAT"] == ops["FFMA.RM"] == ops["MUFU.EX2"]
        assert 4.0 <= per["FFMA"] <= 4.0 * b["ex2_expected_per_element"] + 0.1
        assert per["FADD"] + per["FFMA2/FADD2/FMUL2"] >= 2.0     # expf's FADD and the row sum, at least
    else:
        # ex2.approx with the scale folded in: no range reduction, one FFMA lane per score (an FFMA2
        # serves two), plus the polynomial's three FFMA2 lanes per emulated score (b11)
        assert ops["FFMA.SAT"] == ops["FFMA.RM"] == 0
        ffma_lanes = (ops.get("FFMA", 0) + 2 * ops.get("FFMA2", 0)) / b["elements_per_thread"]
        assert ffma_lanes <= 1.1 + 3 * emulated


def test_b10_needs_about_four_instructions_per_score_element():
    """b10's softmax (FFMA2 scale-and-subtract, MUFU.EX2, FADD2 row sum, FMNMX3 max, F2FP pack, and the
    O rescale's FMUL2) issues about 4 instructions per score element per K/V tile (ptxas 13.4: 4.06,
    of which 0.4 "other"); b09's, with the library exp and S read twice, about three times as many."""
    from harness.core.steps import resolve
    b10, b09 = sb.budget(resolve("b10"), "sm_100a"), sb.budget(resolve("b09"), "sm_100a")
    assert b10["total_per_element"] <= 4.25 < 0.4 * b09["total_per_element"]
    assert b10["opcodes"]["MUFU.EX2"] == b10["elements_per_thread"] + b10["rows_per_thread"]


def test_softmax_threads_leave_out_the_producer_and_the_mma_and_load_warps():
    from harness.core.steps import resolve
    assert sb.softmax_threads(resolve("h07")) == 256           # 384 threads, warpgroup 0 produces
    assert sb.softmax_threads(resolve("b08")) == 256           # 320 threads, warps 8 and 9 do not
    assert sb.softmax_threads(resolve("h05")) == 256


def test_budget_block_renders():
    text = writeups.render("budget b08")
    assert "| MUFU.EX2 " in text and "| b08 sm_100a" in text
    assert "issue / MMA" in text and "8,192 dense FLOP/clk/SM" in text


def test_b11_moves_one_exponential_in_eight_from_the_mufu_to_the_fma_pipe():
    """b11 against b10: MUFU.EX2 per thread and K/V tile drops by 1/8 of the scores (16 of 128), and the
    polynomial appears: 3 FFMA2 (Horner) and one round-down FADD2 per emulated pair."""
    from harness.core.steps import resolve
    b10, b11 = sb.budget(resolve("b10"), "sm_100a"), sb.budget(resolve("b11"), "sm_100a")
    elements = b10["elements_per_thread"]
    emulated = resolve("b11").info.extra["ex2_emulated_per_tile"]
    assert emulated == elements // 8
    assert b10["opcodes"]["MUFU.EX2"] - b11["opcodes"]["MUFU.EX2"] == emulated
    assert b11["opcodes"]["FFMA2"] - b10["opcodes"]["FFMA2"] == 3 * emulated // 2
    assert b11["opcodes"]["FADD2.RM"] == emulated // 2 and "FADD2.RM" not in b10["opcodes"]
    assert not b11["ambiguous"]
