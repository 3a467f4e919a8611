"""The SASS reader on hand-made input: opcode counting, mechanism grouping, target arch."""

from collections import Counter

import pytest

from harness.compiler.sass import _INSTR_RE, mechanism_counts, target_arch

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


def test_a_tmem_a_operand_tcgen05_mma_is_told_apart_by_its_operands():
    text = """
        /*2250*/                   UTCHMMA gdesc[UR66], gdesc[UR50], tmem[UR6], tmem[UR68], idesc[UR69], UR8, !UPT ;
        /*8f90*/                   UTCHMMA tmem[UR5], gdesc[UR8], tmem[UR69], tmem[UR36], idesc[UR37], UR12, UPT ;
        /*8fa0*/               @P0 UTCHMMA.2CTA tmem[UR5], gdesc[UR8], tmem[UR69], idesc[UR37], UPT ;
"""
    m = mechanism_counts(Counter(_INSTR_RE.findall(text)), text)
    assert m["UTCHMMA"] == 3 and m["UTCHMMA.TS"] == 2


def test_umma_descriptors_and_tmem_allocation_from_ptx():
    from harness.compiler.sass import tmem_alloc_columns, umma_a_from_tmem, umma_descriptors
    # K-major, no swizzle: LBO 2048 B, SBO 128 B, version 1; then a 128B-swizzled one (type 2)
    none_k = (1 << 46) | ((128 >> 4) << 32) | ((2048 >> 4) << 16)
    sw128 = (2 << 61) | (1 << 46) | ((1024 >> 4) << 32) | (1 << 16)
    ptx = f"""
	mov.b32 	%r46, 256;
	tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 	[%r5], %r46;
	or.b64 	%rd52, %rd96, {none_k};
	add.s64 	%rd53, %rd95, {sw128};
	tcgen05.mma.cta_group::1.kind::f16 [%r6], %rd52, %rd53, %r23, {{%r1, %r2, %r3, %r4}}, %p12;
	tcgen05.mma.cta_group::1.kind::f16 [%r6], [%r9], %rd53, %r23, {{%r1, %r2, %r3, %r4}}, %p12;
"""
    assert tmem_alloc_columns(ptx) == [256]
    assert umma_a_from_tmem(ptx) == [False, True]
    found = [(d.operand, d.layout_name, d.leading_byte_offset, d.stride_byte_offset, d.version)
             for d in umma_descriptors(ptx)]
    assert found == [("A", "SWIZZLE_NONE (interleave)", 2048, 128, 1), ("B", "SWIZZLE_128B", 16, 1024, 1),
                     ("B", "SWIZZLE_128B", 16, 1024, 1)]


def test_tmem_operand_addresses_tell_a_based_address_from_a_bare_immediate():
    from harness.compiler.sass import umma_tmem_addresses
    ptx = """
	ld.shared.b32 	%r14, [%r1+131096];
	add.s32 	%r17, %r14, 384;
	add.s32 	%r31, %r14, 168;
	mov.b32 	%r40, 168;
	tcgen05.mma.cta_group::1.kind::f16 [%r17], [%r31], %rd38, %r42, {%r1, %r2, %r3, %r4}, %p1;
	tcgen05.mma.cta_group::1.kind::f16 [%r17], [%r40], %rd38, %r42, {%r1, %r2, %r3, %r4}, %p1;
	tcgen05.mma.cta_group::1.kind::f16 [%r14], %rd52, %rd53, %r23, {%r1, %r2, %r3, %r4}, %p2;
"""
    assert umma_tmem_addresses(ptx) == [("D", "%r14", 384), ("A", "%r14", 168), ("D", "%r14", 384),
                                        ("A", None, 168), ("D", "%r14", 0)]


def test_the_machine_code_digest_reads_only_the_text_sections():
    """The digest covers the kernels' instructions and nothing else of the cubin: one byte changed in
    a .text section changes it, one changed in another section (.nv.info: attributes) does not."""
    import struct

    from harness.compiler.compile import compile_step
    from harness.compiler.sass import machine_code_digest
    from harness.core.steps import resolve
    data = bytearray(compile_step(resolve("h08"), "sm_90a").cubin.read_bytes())
    digest = machine_code_digest(bytes(data))
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = heads[shstrndx][4]

    def section(prefix):
        return next(h for h in heads if h[5] > 16 and data[names + h[0]:].startswith(prefix.encode()))

    for prefix, changes in ((".nv.info.", False), (".text.", True)):
        changed = bytearray(data)
        changed[section(prefix)[4] + 8] ^= 0xFF
        assert (machine_code_digest(bytes(changed)) != digest) == changes, prefix


_WGMMA = "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%r1, %r2}, %rd5, %rd6, p, 1,  1, 0, 0;\n"
_BUILT = "or.b64 \t%rd3, %rd2, 4611686293305360384;\n"          # a full descriptor: layout 1 (128B swizzle)


def test_descriptor_reader_follows_a_k_block_offset_and_a_constant_high_half():
    """The stage-first form (a stage descriptor plus a k-block offset) and a descriptor whose high
    half is a constant resolve to their layout type for wgmma; UMMA, which also decodes low-half
    fields, refuses the constant-high-half form instead of guessing them."""
    from harness.compiler.sass import umma_descriptors, wgmma_descriptor_layout_types
    ptx = (_BUILT + "add.s64 \t%rd5, %rd3, 2;\n" + "mov.b32 \t%r9, 1073741888;\n"
           + "mov.b64 \t%rd6, {%r8, %r9};\n" + _WGMMA)
    assert wgmma_descriptor_layout_types(ptx) == [1, 1]
    umma = "tcgen05.mma.cta_group::1.kind::f16 [%r7], %rd6, %rd5, %r4, p;\n"
    with pytest.raises(ValueError, match="not built from an immediate"):
        umma_descriptors(ptx.replace(_WGMMA, umma))


@pytest.mark.parametrize("case", ["offset on an unknown base", "register defined twice", "predicated redefinition"])
def test_descriptor_reader_fails_rather_than_guessing(case):
    from harness.compiler.sass import wgmma_descriptor_layout_types
    if case == "offset on an unknown base":       # the bare offset is not a descriptor (it would read as layout 0)
        ptx = "ld.param.u64 \t%rd3, [p];\n" + "add.s64 \t%rd5, %rd3, 2;\nadd.s64 \t%rd6, %rd3, 4;\n" + _WGMMA
    elif case == "register defined twice":        # which definition reaches the wgmma is not read here
        ptx = _BUILT + "add.s64 \t%rd5, %rd3, 2;\nadd.s64 \t%rd6, %rd3, 4;\nld.param.u64 \t%rd6, [p];\n" + _WGMMA
    else:                                         # a guarded definition is a definition too
        ptx = _BUILT + "add.s64 \t%rd5, %rd3, 2;\nadd.s64 \t%rd6, %rd3, 4;\n@%p1 ld.param.u64 \t%rd6, [p];\n" + _WGMMA
    with pytest.raises(ValueError, match="not built from an immediate"):
        wgmma_descriptor_layout_types(ptx)
