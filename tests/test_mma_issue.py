"""The MMA warp's issue path (harness/compiler/mma_issue.py): instructions between consecutive
tcgen05 MMAs, the MMA loop and its local-memory traffic, read from the SASS on the CPU, for the
2-CTA steps and FA4's sm100 kernel built through the same ptxas."""

import pytest

from harness.compiler import mma_issue
from harness.core.steps import resolve

# An MMA warp in nvdisasm's format: a prologue MMA, then a loop (.L_x_0) of three MMAs with a
# spilled value reloaded in it, then a tail MMA after a long stretch, and a softmax loop (.L_x_2)
# with one exponential and no local memory.
SYNTHETIC = """
\t.section\t.text.kern,"ax",@progbits
.text.kern:
        /*0000*/                   UTCHMMA gdesc[UR4], gdesc[UR6], tmem[UR8], tmem[UR10], idesc[UR11], UPT ;
        /*0010*/                   MOV R1, c[0x0][0x28] ;
.L_x_0:
        /*0020*/                   LDL R2, [R1] ;
        /*0030*/                   UTCHMMA gdesc[UR4], gdesc[UR6], tmem[UR8], tmem[UR10], idesc[UR11], UPT ;
        /*0040*/                   UIADD3.64 UR6, UR6, 0x2, URZ ;
        /*0050*/                   UTCHMMA gdesc[UR4], gdesc[UR6], tmem[UR8], tmem[UR10], idesc[UR11], UPT ;
        /*0060*/                   UTCHMMA gdesc[UR4], gdesc[UR6], tmem[UR8], tmem[UR10], idesc[UR11], UPT ;
        /*0070*/                   IADD3 R0, PT, PT, R0, 0x1, RZ ;
        /*0080*/                   ISETP.NE.AND P3, PT, R0, R20, PT ;
        /*0090*/               @P3 BRA `(.L_x_0) ;
""" + "".join(f"        /*{0xa0 + 16 * k:04x}*/                   NOP ;\n" for k in range(14)) + """\
        /*0180*/                   UTCHMMA gdesc[UR4], gdesc[UR6], tmem[UR8], tmem[UR10], idesc[UR11], UPT ;
.L_x_2:
        /*0190*/                   MUFU.EX2 R12, R9 ;
        /*01a0*/                   IADD3 R5, PT, PT, R5, 0x1, RZ ;
        /*01b0*/                   ISETP.NE.AND P4, PT, R5, R21, PT ;
        /*01c0*/               @P4 BRA `(.L_x_2) ;
        /*01d0*/                   STL [R1], R2 ;
        /*01e0*/                   EXIT ;
"""


def test_synthetic_issue_path_gives_the_known_reading():
    r = mma_issue.read(SYNTHETIC)
    assert r.mmas == 5
    assert r.gaps == (2, 1, 0, 17)          # MOV + LDL; UIADD3.64; none; IADD3, ISETP, BRA + 14 NOPs
    assert r.bins() == [3, 1, 0, 0]
    assert r.short_share == 0.75
    assert r.loop_label == ".L_x_0" and r.loop_instructions == 8 and r.loop_local == 1
    assert r.loop_gap == 4                  # IADD3, ISETP, BRA, then round the back edge: LDL
    assert r.softmax_local == 0 and r.local_total == 2


def test_no_loop_is_reported_as_such():
    r = mma_issue.read(SYNTHETIC.replace("@P3 BRA `(.L_x_0)", "@P3 BRA `(.L_x_2)"))
    assert r.loop_instructions is None and r.loop_local is None and r.loop_gap is None
    headers, rows = mma_issue.rows({"k": r})
    assert dict((row[0], row[1]) for row in rows)["LDL/STL in the MMA loop"] == "no loop found"


@pytest.mark.parametrize("step_id", ["b13", "b14"])
def test_two_cta_mma_warp_issues_as_tightly_as_fa4_without_local_memory(step_id):
    """What the first B200 run relies on: at least 80% of the gaps between consecutive tcgen05
    MMAs are 12 instructions or fewer, no fewer short gaps than FA4's 2-CTA kernel has, and no
    LDL/STL in the MMA warp's K/V loop or in the softmax loop."""
    step = resolve(step_id)
    r = mma_issue.of_step(step)
    name, fa4 = mma_issue.fa4_like(step)
    assert name == "FA4 (2-CTA)"
    assert r.short_share >= 0.8
    assert r.short_share >= fa4.short_share
    assert r.loop_local == 0 and r.loop_gap <= fa4.loop_gap
    assert r.softmax_local == 0                       # None (no softmax loop found) would fail too
