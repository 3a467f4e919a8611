"""Stock FlashAttention-4's forward kernel compiled on the CPU (harness/compiler/fa4_sass.py): the
configuration flash_attn_func picks for the ladder's workload, its SASS mechanisms, and the
softmax budget of its K/V loop. Each arch builds once (~10 s in a child process) and is cached
under build/fa4/."""

import pytest
from test_softmax_budget import SYNTHETIC

from harness.compiler import fa4_sass
from harness.compiler import softmax_budget as sb

SMEM_LIMIT = 227 * 1024        # the most dynamic shared memory a CTA may have on sm_90 and sm_100

# FA4's sm_100 shape in nvdisasm's format: a persistent work-tile loop (.L_x_0) holding the peeled
# first K/V tile (2 MUFU.EX2 for 2 elements, no rescale) and the K/V loop (.L_x_1: 2 + 1 rescale).
PERSISTENT = """
\t.section\t.text.kern,"ax",@progbits
.text.kern:
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_0:
        /*0010*/                   MUFU.EX2 R2, R3 ;
        /*0020*/                   MUFU.EX2 R4, R5 ;
.L_x_1:
        /*0030*/                   FMNMX R6, R7, R8, !PT ;
        /*0040*/                   MUFU.EX2 R9, R6 ;
        /*0050*/                   FFMA2 R10, R10.F32x2.HI_LO, R11.F32x2.HI_LO, R12.F32x2.HI_LO ;
        /*0060*/                   MUFU.EX2 R10, R10 ;
        /*0070*/                   MUFU.EX2 R11, R11 ;
        /*0080*/                   ISETP.NE.AND P0, PT, R0, R20, PT ;
        /*0090*/               @P0 BRA `(.L_x_1) ;
        /*00a0*/                   IADD3 R21, PT, PT, R21, 0x1, RZ ;
        /*00b0*/                   ISETP.NE.AND P1, PT, R21, R22, PT ;
        /*00c0*/               @P1 BRA `(.L_x_0) ;
        /*00d0*/                   EXIT ;
.L_x_2:
        /*00e0*/                   BRA `(.L_x_2);
"""


def test_ex2_emulation_count_follows_fa4s_rule():
    # 4 fragments of 32; fragment 0 (start) and 3 (last) stay on the MUFU; freq 10, res 4 emulates
    # pairs k = 6, 8, 16, 18, 26, 28 of fragments 1 and 2: 2 x 6 x 2 = 24 (2-CTA); freq 16: k = 12,
    # 14, 28, 30: 16 (1-CTA); freq 0: none.
    assert fa4_sass.ex2_emulated(128, freq=10, start_frg=1) == 24
    assert fa4_sass.ex2_emulated(128, freq=16, start_frg=1) == 16
    assert fa4_sass.ex2_emulated(128, freq=0, start_frg=1) == 0


def test_softmax_loop_is_the_kv_loop_not_the_persistent_loop():
    generic = sb.budget_from_sass(PERSISTENT, elements=2, rows=1)
    assert generic["loop"]["label"] == ".L_x_0" and generic["ambiguous"]    # most MUFU.EX2: the wrong loop
    b = sb.peeled_budget_from_sass(PERSISTENT, elements=2, rows=1)
    assert b["ambiguous"] == []
    assert b["loop"]["label"] == ".L_x_1" and b["loop"]["ex2_outside"] == 2  # the peeled first tile
    assert b["counts"]["MUFU.EX2"] == 3 and b["counts"]["FFMA2/FADD2/FMUL2"] == 1 and b["total"] == 7


def test_peeled_budget_matches_the_plain_budget_where_they_pick_the_same_loop():
    ours, theirs = (f(SYNTHETIC, elements=2, rows=1) for f in (sb.peeled_budget_from_sass, sb.budget_from_sass))
    assert ours == theirs


def test_no_loop_fits_is_reported():
    b = sb.peeled_budget_from_sass(PERSISTENT, elements=8, rows=1)
    assert b["loop"] is None and "no loop holds 8..9 MUFU.EX2" in b["ambiguous"][0]


@pytest.fixture(scope="module")
def fa4():
    try:
        fa4_sass.versions()
    except fa4_sass.Fa4Missing as e:
        pytest.skip(str(e))
    return fa4_sass


def test_sm90a_build(fa4):
    b = fa4.compile_fa4("sm_90a")
    assert b.sass.target == "sm_90a" and b.sass.spills == 0
    m = b.sass.mechanisms
    assert m["HGMMA"] > 0 and m["HGMMA.RS"] > 0 and m["MUFU.EX2"] > 0 and m["UTCHMMA"] == 0
    assert b.threads_per_cta == 384 and b.softmax_threads == 256          # producer + 2 consumer warpgroups
    assert (b.tile_m, b.tile_n, b.head_dim, b.q_stage, b.num_stages) == (128, 128, 128, 1, 2)
    assert not b.two_cta and b.cluster_size == 1
    assert 0 < b.smem_bytes <= SMEM_LIMIT
    assert b.setmaxnreg == {"producer": 24, "consumer": 240}
    assert fa4.compile_fa4("sm_90a") is b                                 # memoized


def test_sm100a_build(fa4):
    b = fa4.compile_fa4("sm_100a")
    assert b.sass.target == "sm_100a" and b.sass.spills == 0
    m = b.sass.mechanisms
    assert m["UTCHMMA"] > 0 and m["UTCHMMA.TS"] > 0 and m["MUFU.EX2"] > 0 and m["FFMA2"] > 0 and m["HGMMA"] == 0
    assert any(op.startswith("UTCHMMA.2CTA") for op in b.sass.opcodes)    # the 2-CTA MMA FA4 picks
    assert b.threads_per_cta == 512 and b.softmax_threads == 256          # 16 warps, softmax warps 0-7
    assert (b.m_block_size, b.q_stage, b.tile_m, b.tile_n, b.head_dim) == (128, 2, 256, 128, 128)
    assert b.two_cta and b.cluster_size == 2
    assert 0 < b.smem_bytes <= SMEM_LIMIT
    assert b.ex2_emulated_per_tile == 24                                  # 2-CTA: ex2_emu_freq 10


@pytest.mark.parametrize("arch,label", [
    ("sm_90a", "sm90, 1-CTA, 128x128 tile, 384 threads, P from registers, intra-warpgroup overlap"),
    ("sm_100a", "sm100, 2-CTA, 2 x 128x128 Q tiles per CTA, static persistent")])
def test_the_fa4_configuration_a_gpu_run_records_is_the_one_built_here(fa4, arch, label):
    """``reference.stock.fa4_config`` reads the compile key FA4 looks up for a call; on fake tensors
    (the build's interface check) it names the kernel this module builds, so a B200 table says which
    FA4 it was compared against."""
    from reference.stock import fa4_config_label
    b = fa4.compile_fa4(arch)
    c = b.fa4_config
    assert c["arch"] == int(arch[3:-1]) and (c["tile_m"], c["tile_n"]) == (b.m_block_size, b.tile_n)
    assert c.get("use_2cta_instrs", False) == b.two_cta and c.get("q_stage", 1) == b.q_stage
    assert fa4_config_label(c) == label


def test_a_cached_build_loads_the_same(fa4):
    b = fa4.compile_fa4("sm_100a")
    fa4._memo.clear()
    again = fa4.compile_fa4("sm_100a")
    assert again.cached and again is not b
    assert (again.registers, again.smem_bytes, again.sass.opcodes) == (b.registers, b.smem_bytes, b.sass.opcodes)


@pytest.mark.parametrize("arch", fa4_sass.ARCHS)
def test_fa4_budget_finds_one_kv_loop(fa4, arch):
    b = fa4.fa4_budget(arch)
    assert b["ambiguous"] == [] and b["loop"] is not None
    e, rows, emulated = b["elements_per_thread"], b["rows_per_thread"], b["ex2_emulated_per_tile"]
    assert (e, rows, emulated) == {"sm_90a": (64, 2, 0), "sm_100a": (128, 1, 24)}[arch]
    # one MUFU.EX2 per element not emulated, plus up to one rescale per row; the peeled first tile outside
    assert (e - emulated) / e <= b["per_element"]["MUFU.EX2"] <= b["ex2_expected_per_element"]
    assert b["loop"]["ex2_outside"] == e - emulated
    assert 2 < b["total_per_element"] < 20
    assert sum(b["counts"].values()) == b["total"]
    if arch == "sm_100a":
        assert b["packed_lanes_per_element"] > 1        # scale folded into FFMA2, plus the emulation's
        assert b["generic"]["ambiguous"]                # softmax_budget's pick: the persistent loop


def _around_the_p_v_wait(sass_text: str, opcode: str = "MUFU.EX2") -> tuple[int, int]:
    """(``opcode`` instructions between the first DEPBAR.LE 1 and the DEPBAR.LE 0 after it, and from
    there to the loop's next HGMMA): where the softmax of an intra-warpgroup-overlapped loop really
    runs."""
    from harness.compiler.sass import p_v_wait_window
    lines = sass_text.splitlines()
    one, zero = p_v_wait_window(lines)
    nxt = next((i for i in range(zero, len(lines)) if "HGMMA" in lines[i]), len(lines))
    return (sum(f" {opcode} " in line for line in lines[one:zero]), sum(f" {opcode} " in line for line in lines[zero:nxt]))


def test_the_turns_p_v_runs_over_the_row_max_and_the_exponentials_come_after_its_wait(fa4):
    """What h12's writeup and its README row say the compiler does, in h12, h13, h14 and FA4: ptxas
    keeps most of S_j's row max (FMNMX) between wait_group(1) and wait_group(0), under P V(j-1)
    (FA4: all of it; h12: 59 of 68, h14: 53), and at most a few of the softmax's exponentials
    (none of h12's 66, 10 of FA4's 66); most come after P V is done."""
    from harness.compiler.compile import compile_step
    from harness.core.steps import resolve
    kernels = [(sid, compile_step(resolve(sid), "sm_90a").sass.text) for sid in ("h12", "h13", "h14")]
    counts = {name: (_around_the_p_v_wait(text), _around_the_p_v_wait(text, "FMNMX"))
              for name, text in kernels + [("FA4", fa4.compile_fa4("sm_90a").sass.text)]}
    ex2_mostly_after = {name: ex2[1] > 0 and ex2[0] < ex2[1] / 4 for name, (ex2, _) in counts.items()}
    max_mostly_under = {name: fmnmx[0] >= 3 * sum(fmnmx) // 4 for name, (_, fmnmx) in counts.items()}
    assert ex2_mostly_after == max_mostly_under == dict.fromkeys(("h12", "h13", "h14", "FA4"), True), counts


def _sass(name: str) -> str:
    from harness.compiler.compile import compile_step
    from harness.core.steps import resolve
    return compile_step(resolve(name), "sm_90a").sass.text


def test_a_row_sum_store_pins_every_exponential_before_the_p_v_wait():
    """exp:h12-pinned-exponentials (h12's and h14's writeups): a shared-memory store of the row
    sums before wait_group(0) keeps all 64 exponentials of the tile, and the sums, ahead of it."""
    between, after = _around_the_p_v_wait(_sass("exp:h12-pinned-exponentials"))
    assert (between, after) == (64 + 2, 0)        # 64 scores + 2 rows' rescale factors per thread


def _loop_ops(text: str) -> list:
    loop, _, notes = sb.kv_loop(text, elements=64, rows=2)
    assert loop is not None, notes
    return loop.inline


def test_the_row_max_is_max_f32_in_chains_as_fa4s(fa4):
    """01's and every Hopper step's row max (``_row_max``): four chains of max.f32, so the K/V loop
    holds FMNMX and no NaN-propagating FMNMX.NAN, as FA4's loop; exp:h14-reduce-max (one
    ReductionOp.MAX over the row, as the steps had it) compiles to FMNMX.NAN."""
    for name, text in (("h12", _sass("h12")), ("h14", _sass("h14")), ("FA4", fa4.compile_fa4("sm_90a").sass.text)):
        ops = [ins.opcode for ins in _loop_ops(text)]
        assert ops.count("FMNMX") >= 64 and "FMNMX.NAN" not in ops, name
    assert [ins.opcode for ins in _loop_ops(_sass("exp:h14-reduce-max"))].count("FMNMX.NAN") >= 60
    assert "FMNMX.NAN" not in _sass("01")


def _fmul_placement(ops) -> tuple[int, int]:
    """(FMULs in the turn: between taking it (BAR.SYNC) and the last HGMMA; FMULs after the loop's
    wait_group(0)). ptxas starts a few of the rescale's FMULs before the first HGMMA."""
    turn = next(i for i, ins in enumerate(ops) if ins.opcode.startswith("BAR.SYNC"))
    last = max(i for i, ins in enumerate(ops) if ins.opcode.startswith("HGMMA"))
    zero = next(i for i, ins in enumerate(ops) if ins.opcode.startswith("WARPGROUP.DEPBAR") and "0x0" in ins.operands)
    fmul = [i for i, ins in enumerate(ops) if ins.opcode == "FMUL"]
    return sum(turn < i < last for i in fmul), sum(i > zero for i in fmul)


def test_o_is_rescaled_under_the_turns_qk_not_after_the_p_v_wait():
    """h12-h14 (h12's docstring): O's 64 FMULs per thread run in the turn, around and after its first
    HGMMA (QK^T) and before its last (P V), while S runs; exp:h12-rescale-after-wait puts them back after
    wait_group(0), on the way from the softmax to the next turn."""
    for name in ("h12", "h13", "h14"):
        under_qk, _ = _fmul_placement(_loop_ops(_sass(name)))
        assert under_qk >= 64, (name, under_qk)
    under_qk, after_wait = _fmul_placement(_loop_ops(_sass("exp:h12-rescale-after-wait")))
    assert under_qk < 8 and after_wait >= 64, (under_qk, after_wait)


def test_h14_builds_its_wgmma_descriptors_in_uniform_registers_as_fa4(fa4):
    """h02's writeup: the operand fragments are sliced by the warpgroup's first thread, a
    warp-uniform value, as FA4 slices them, so no HGMMA of h14's K/V loop waits for an R2UR;
    exp:h14-per-thread-descriptors (sliced by thread, as the ladder did before) moves each HGMMA's
    descriptor from a per-thread register first (one R2UR per HGMMA) and runs a longer loop."""
    def loop_ops(text):
        return [ins.opcode for ins in _loop_ops(text)]

    def count(ops, prefix):
        return sum(op.startswith(prefix) for op in ops)

    ours, theirs = loop_ops(_sass("h14")), loop_ops(fa4.compile_fa4("sm_90a").sass.text)
    per_thread = loop_ops(_sass("exp:h14-per-thread-descriptors"))
    assert count(ours, "HGMMA") == count(theirs, "HGMMA") == count(per_thread, "HGMMA") == 16
    assert count(ours, "R2UR") == 0 and count(theirs, "R2UR") == 0 and count(per_thread, "R2UR") == 16
    assert len(ours) < len(per_thread)
