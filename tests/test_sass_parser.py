"""The SASS reader on hand-made input: opcode counting, mechanism grouping, target arch."""

from collections import Counter

from harness.sass import _INSTR_RE, mechanism_counts, target_arch

SAMPLE = """
        /*0100*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0110*/               @P0 LDG.E.128 R8, desc[UR4][R2.64] ;
        /*0120*/              @!P1 BRA 0x200 ;
        /*0130*/                   FFMA2 R0, R1, R2, R3 ;
        /*0140*/                   FFMA.SAT R0, R1, R2, R3 ;
        /*0150*/                   UTCHMMA.2CTA gdesc[UR4], gdesc[UR6], tmem[UR8], idesc[UR9], UPT ;
        /*0160*/                   LDGSTS.E.BYPASS.128 [R1], desc[UR4][R2.64] ;
        /*0170*/                   STSM.16.M88.4 [R1], R4 ;
        /*0180*/                   STS.128 [R1], R4 ;
"""


def test_opcodes_and_mechanisms():
    ops = Counter(_INSTR_RE.findall(SAMPLE))
    assert ops["HMMA.16816.F32.BF16"] == 1 and ops["LDG.E.128"] == 1 and ops["BRA"] == 1
    m = mechanism_counts(ops)
    assert m["HMMA"] == 1 and m["UTCHMMA"] == 1 and m["HGMMA"] == 0
    assert m["FFMA"] == 1 and m["FFMA2"] == 1            # FFMA does not count FFMA2
    assert m["LDG"] == 1 and m["LDGSTS"] == 1            # LDG does not count LDGSTS
    assert m["STS"] == 1 and m["STSM"] == 1              # STS does not count STSM


def test_target_arch_from_either_header_style():
    assert target_arch("\t.target\tsm_100a\n") == "sm_100a"
    assert target_arch('.headerflags @"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"') == "sm_90a"
    assert target_arch('.headerflags @"EF_CUDA_SM90"') == "sm_90"
    assert target_arch("nothing") == "unknown"


def test_register_a_wgmma_is_told_apart_by_its_operands():
    text = """
        /*0f20*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT ;
        /*47c0*/                   HGMMA.64x128x16.F32.BF16 R88, R24, gdesc[UR8].tnspB, R88 ;
        /*49c0*/                   HGMMA.64x128x16.F32.BF16 R88, R152, gdesc[UR20].tnspB, R88, gsb0 ;
"""
    m = mechanism_counts(Counter(_INSTR_RE.findall(text)), text)
    assert m["HGMMA"] == 3 and m["HGMMA.RS"] == 2
