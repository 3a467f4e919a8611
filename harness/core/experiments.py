"""Named what-if experiments: a step file with a few exact text edits, measured like a step.

A writeup that says "h05 is limited by X, not Y" needs a measurement that changes only X. An
experiment is that measurement, written down: the base step, the question, and the edits (each
``old`` text must occur exactly once in the base file, so an edit that no longer applies fails
loudly instead of measuring something else). ``ladder table --steps exp:h05-loads-free`` builds it
under build/experiments/, runs it in a child like any step, and ``--record`` files the result under
"experiments" in the results file (never among the ladder's rows), where the writeups' generated
``experiments`` blocks read it. ``ladder diff h05 exp:h05-loads-free`` shows the edit.

A *diagnostic* experiment computes a wrong answer on purpose (say, K/V loaded once and reused):
it bounds what a mechanism could be worth; its numerics are expected to fail and are not a failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.core.markers import without_markers
from harness.core.paths import BUILD, ROOT, publish

BUILD = BUILD / "experiments"
PREFIX = "exp:"


@dataclass(frozen=True)
class Experiment:
    name: str
    base: str                                  # the step id whose file is edited
    question: str                              # what the measurement answers
    edits: tuple[tuple[str, str], ...]         # (old, new) exact texts, each old occurring once
    diagnostic: bool = False                   # wrong answers by design: a bound, not a kernel
    scratch_stores: bool = False               # adds thread smem stores harness/model/smem_model.py does not model


# --- edits shared by h04 and h05 (their main loops are the same text) ---------------------------

_LOAD_KV = """        if warp_idx == 0:
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(kv_full, kv_bytes)
            cute.copy(tma_K, tKgK[None, n_block], tKsK, tma_bar_ptr=kv_full)
            cute.copy(tma_V, tVgV[None, n_block], tVsV, tma_bar_ptr=kv_full)
"""
_WAIT_KV = "        cute.arch.mbarrier_wait(kv_full, n_block % 2)\n"

# K/V loaded for the first tile only; every later tile reuses them (wrong answers): what the
# kernel would reach if loads cost nothing.
LOADS_FREE = (
    (_LOAD_KV, _LOAD_KV.replace("if warp_idx == 0:", "if warp_idx == 0 and n_block == 0:", 1)),
    (_WAIT_KV, "        cute.arch.mbarrier_wait(kv_full, 0)\n"),
)

# K and V complete on separate mbarriers; K_{j+1} is issued as soon as every warp's S_j wgmmas
# are done with sK, so it lands while softmax_j and P_j V_j run (V_{j+1} still waits for the top
# of the next iteration). One buffer each, no extra smem: a first taste of h08's pipeline.
PREFETCH_K = (
    ("        kv_full: cute.struct.MemRange[cutlass.Int64, 1]\n",
     "        kv_full: cute.struct.MemRange[cutlass.Int64, 1]\n"
     "        v_full: cute.struct.MemRange[cutlass.Int64, 1]\n"),
    ("    kv_full = storage.kv_full.data_ptr()\n",
     "    kv_full = storage.kv_full.data_ptr()\n    v_full = storage.v_full.data_ptr()\n"),
    ("    kv_bytes = cute.size_in_bytes(dtype, sK_layout) + cute.size_in_bytes(dtype, sVt_layout)\n",
     "    kv_bytes = cute.size_in_bytes(dtype, sK_layout)       # now K only\n"
     "    v_bytes = cute.size_in_bytes(dtype, sVt_layout)\n"),
    ("            cute.arch.mbarrier_init(kv_full, 1)\n",
     "            cute.arch.mbarrier_init(kv_full, 1)\n            cute.arch.mbarrier_init(v_full, 1)\n"),
    (_LOAD_KV, """        if warp_idx == 0:
            with cute.arch.elect_one():
                if n_block == 0:
                    cute.arch.mbarrier_arrive_and_expect_tx(kv_full, kv_bytes)
                cute.arch.mbarrier_arrive_and_expect_tx(v_full, v_bytes)
            if n_block == 0:
                cute.copy(tma_K, tKgK[None, n_block], tKsK, tma_bar_ptr=kv_full)
            cute.copy(tma_V, tVgV[None, n_block], tVsV, tma_bar_ptr=v_full)
"""),
    ("        # Online softmax, row by row",
     """        # barrier: every warp's S_j wgmmas are done with sK; then K_{j+1} may overwrite it.
        cute.arch.sync_threads()
        if warp_idx == 0 and n_block + 1 < n_blocks:
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(kv_full, kv_bytes)
            cute.copy(tma_K, tKgK[None, n_block + 1], tKsK, tma_bar_ptr=kv_full)

        # Online softmax, row by row"""),
    ("        # O += P V: 8 wgmmas",
     "        cute.arch.mbarrier_wait(v_full, n_block % 2)    # V_j landed (v_full phase j)\n"
     "        # O += P V: 8 wgmmas"),
)

def _split_kv_edits(staged: bool):
    """K and V on separate full/empty barriers, for h07 (one buffer each) or h08 (a ring of stages,
    ``staged``). The producer loads K_{j+1} as soon as every consumer warp's S_j wgmmas are done
    with its K buffer, i.e. during softmax_j and P_j V_j, and V_{j+1} once P_j V_j is done; a
    consumer starts S_j once K_j has landed and waits for V_j only before P_j V_j. (FA3 keeps K
    and V in separate pipelines too.) The two steps' texts differ only in the stage index."""
    at = " + stage" if staged else ""                  # which barrier of the ring
    slot = "[None, stage]" if staged else ""           # which smem stage a copy writes
    count = "NUM_STAGES" if staged else "1"
    pad = "    " if staged else ""                     # h08 initializes its barriers in a loop
    ptrs_comment = "   # stage s: base + s" if staged else ""
    one_stage = (lambda name: f"cute.select({name}, mode=[0, 1])") if staged else (lambda name: name)
    old_bytes = (f"    kv_bytes = (cute.size_in_bytes(dtype, {one_stage('sK.layout')})\n"
                 f"                + cute.size_in_bytes(dtype, {one_stage('sVt.layout')}))\n"
                 if staged else
                 "    kv_bytes = cute.size_in_bytes(dtype, sK.layout) + cute.size_in_bytes(dtype, sVt.layout)\n")
    return (
        (f"        kv_full: cute.struct.MemRange[cutlass.Int64, {count}]\n"
         f"        kv_empty: cute.struct.MemRange[cutlass.Int64, {count}]\n",
         "".join(f"        {name}: cute.struct.MemRange[cutlass.Int64, {count}]\n"
                 for name in ("k_full", "k_empty", "v_full", "v_empty"))),
        (f"    kv_full, kv_empty = storage.kv_full.data_ptr(), storage.kv_empty.data_ptr(){ptrs_comment}\n",
         "    k_full, k_empty = storage.k_full.data_ptr(), storage.k_empty.data_ptr()\n"
         "    v_full, v_empty = storage.v_full.data_ptr(), storage.v_empty.data_ptr()\n"),
        (f"{pad}            cute.arch.mbarrier_init(kv_full{at}, 1)\n"
         f"{pad}            cute.arch.mbarrier_init(kv_empty{at}, NUM_CONSUMER_WARPS)\n",
         "".join(f"{pad}            cute.arch.mbarrier_init({name}{at}, {arrivals})\n" for name, arrivals in
                 (("k_full", 1), ("v_full", 1), ("k_empty", "NUM_CONSUMER_WARPS"), ("v_empty", "NUM_CONSUMER_WARPS")))),
        # the roles get the four barriers in place of the two
        ("            producer(tma_Q, tma_K, tma_V, sQ, sK, sVt, gQ, gK, gVt, q_full, kv_full, kv_empty, n_blocks)\n",
         "            producer(tma_Q, tma_K, tma_V, sQ, sK, sVt, gQ, gK, gVt, q_full, k_full, k_empty, v_full, v_empty,\n"
         "                     n_blocks)\n"),
        ("        consumer(tiled_mma, tiled_mma_pv, sQ, sK, sVt, gO, q_full, kv_full, kv_empty, softmax_scale, n_blocks)\n",
         "        consumer(tiled_mma, tiled_mma_pv, sQ, sK, sVt, gO, q_full, k_full, k_empty, v_full, v_empty,\n"
         "                 softmax_scale, n_blocks)\n"),
        ("             gQ: cute.Tensor, gK: cute.Tensor, gVt: cute.Tensor, q_full, kv_full, kv_empty, n_blocks):\n",
         "             gQ: cute.Tensor, gK: cute.Tensor, gVt: cute.Tensor, q_full, k_full, k_empty, v_full, v_empty,\n"
         "             n_blocks):\n"),
        ("             sVt: cute.Tensor, gO: cute.Tensor, q_full, kv_full, kv_empty, softmax_scale: cutlass.Float32,\n"
         "             n_blocks):\n",
         "             sVt: cute.Tensor, gO: cute.Tensor, q_full, k_full, k_empty, v_full, v_empty,\n"
         "             softmax_scale: cutlass.Float32, n_blocks):\n"),
        (old_bytes,
         f"    k_bytes = cute.size_in_bytes(dtype, {one_stage('sK.layout')})\n"
         f"    v_bytes = cute.size_in_bytes(dtype, {one_stage('sVt.layout')})\n"),
        (f"""        cute.arch.mbarrier_wait(kv_empty{at}, parity ^ 1)
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(kv_full{at}, kv_bytes)
        cute.copy(tma_K, tKgK[None, n_block], tKsK{slot}, tma_bar_ptr=kv_full{at})
        cute.copy(tma_V, tVgV[None, n_block], tVsV{slot}, tma_bar_ptr=kv_full{at})
""", f"""        cute.arch.mbarrier_wait(k_empty{at}, parity ^ 1)    # K buffer free: S of its last tile done
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(k_full{at}, k_bytes)
        cute.copy(tma_K, tKgK[None, n_block], tKsK{slot}, tma_bar_ptr=k_full{at})
        cute.arch.mbarrier_wait(v_empty{at}, parity ^ 1)    # V buffer free: its P V done
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(v_full{at}, v_bytes)
        cute.copy(tma_V, tVgV[None, n_block], tVsV{slot}, tma_bar_ptr=v_full{at})
"""),
        (f"        cute.arch.mbarrier_wait(kv_full{at}, parity)\n",
         f"        cute.arch.mbarrier_wait(k_full{at}, parity)      # K_j landed (k_full, this round)\n"),
        ("""        warpgroup.commit_group()
        warpgroup.wait_group(0)

        # Online softmax""", f"""        warpgroup.commit_group()
        warpgroup.wait_group(0)
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive(k_empty{at})       # this warp is done with its K buffer

        # Online softmax"""),
        ("        # O += P V: 8 wgmmas",
         f"        cute.arch.mbarrier_wait(v_full{at}, parity)      # V_j landed (v_full, this round)\n"
         "        # O += P V: 8 wgmmas"),
        (f"            cute.arch.mbarrier_arrive(kv_empty{at})\n",
         f"            cute.arch.mbarrier_arrive(v_empty{at})\n"),
    )


# h10 without h09's turns: both consumer warpgroups issue their GEMMs and run their softmax at once
# again (h08 with h10's exponential). What ping-pong is worth once the softmax is short.
NO_PINGPONG = (
    ("    if wg == 1:\n"
     "        cute.arch.barrier_arrive(barrier_id=other_turn, number_of_threads=PINGPONG_THREADS)\n", ""),
    ("    cute.arch.barrier(barrier_id=my_turn, number_of_threads=PINGPONG_THREADS)\n\n"
     "    for n_block in range(n_blocks):", "\n    for n_block in range(n_blocks):"),
    ("        cute.arch.barrier_arrive(barrier_id=other_turn, number_of_threads=PINGPONG_THREADS)\n"
     "        warpgroup.wait_group(0)\n", "        warpgroup.wait_group(0)\n"),
    ("        cute.arch.barrier(barrier_id=my_turn, number_of_threads=PINGPONG_THREADS)\n"
     "        # O += P V", "        # O += P V"),
    ("    if wg == 0:\n"
     "        cute.arch.barrier_arrive(barrier_id=other_turn, number_of_threads=PINGPONG_THREADS)\n", ""),
)

def _pin_before_wait_edits(indent: str, stat: str):
    """Each consumer thread stores its two rows' ``stat`` (row_sum or row_max) to a scratch smem slot
    right before wait_group(0); ptxas keeps shared-memory stores on their side of a
    WARPGROUP.DEPBAR, so everything the stored values depend on runs before the wait, under the
    P V in flight. row_sum adds up every exponential of its row (all of the tile's MUFU.EX2 and the
    sum's FADD chain move before the wait); row_max needs only the max reductions (FMNMX, SHFL).
    The slot is a field of the kernel's shared storage: the kernel hands its view to the consumer
    role as a first parameter, ``pin``."""
    return (("        v_empty: cute.struct.MemRange[cutlass.Int64, NUM_STAGES]\n",
             "        v_empty: cute.struct.MemRange[cutlass.Int64, NUM_STAGES]\n"
             f"        {stat}_pin: cute.struct.MemRange[cutlass.Float32, 2 * 2 * WARPGROUP_THREADS]\n"),
            ("    v_full, v_empty = storage.v_full.data_ptr(), storage.v_empty.data_ptr()\n",
             "    v_full, v_empty = storage.v_full.data_ptr(), storage.v_empty.data_ptr()\n"
             f"    pin = storage.{stat}_pin.get_tensor(cute.make_layout((2, 2 * WARPGROUP_THREADS)))\n"),
            ("consumer(tiled_mma, ", "consumer(pin, tiled_mma, "),
            ("\ndef consumer(", "\ndef consumer(pin: cute.Tensor, "),
            (f"{indent}# wait_group(0): P V(j-1) is done: tOrP may be overwritten and acc_O read.\n",
             f"{indent}pin[0, mma_tidx] = {stat}[0]\n"
             f"{indent}pin[1, mma_tidx] = {stat}[1]\n"
             f"{indent}# wait_group(0): P V(j-1) is done: tOrP may be overwritten and acc_O read.\n"))


# A fraction of h10's exponentials computed on the FMA pipe instead of the SFU (MUFU.EX2), as FA4
# does on Blackwell: clamp at -127, round down by adding 1.5 * 2^23 (add.rm), take the fraction,
# evaluate a degree-3 polynomial for 2^frac (Horner, plain FFMA: sm_90 has no FFMA2; FA4's
# coefficients, fitted with sollya), and add the integer part into the exponent bits (shl + add).
# One element in EMU_EVERY of each thread's row. tests/test_ex2_emulation.py reads the constants
# from this text and checks the same arithmetic in float32 on the CPU.
_EX2_EMULATION_HELPER = '''

EMU_EVERY = 8                  # 1 exponential in 8 (12.5%) emulated with FMAs
POLY_EX2_DEG3 = (1.0, 0.695146143436431884765625, 0.227564394474029541015625, 0.077119089663028717041015625)
ROUND_DOWN_MAGIC = float(2**23 + 2**22)   # adding it (rounding down) leaves floor(x) in the low bits


@dsl_user_op
def _asm_f32(asm: str, *args, loc=None, ip=None):
    return cutlass.Float32(llvm.inline_asm(
        T.f32(), [cutlass.Float32(a).ir_value(loc=loc, ip=ip) for a in args], asm, "=f" + ",f" * len(args),
        has_side_effects=False, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT))


def _ex2_on_fma_pipe(x):
    """2^x for x <= 0 without the SFU: 2^floor(x) into the exponent, 2^frac by a polynomial."""
    x = cute.arch.fmax(x, -127.0)
    x_floor_bits = _asm_f32("add.rm.ftz.f32 $0, $1, $2;", x, ROUND_DOWN_MAGIC)
    frac = x - (x_floor_bits - ROUND_DOWN_MAGIC)
    poly = POLY_EX2_DEG3[3]
    for c in POLY_EX2_DEG3[2::-1]:
        poly = poly * frac + c
    return _asm_f32("{ .reg .s32 e, m; mov.b32 e, $1; mov.b32 m, $2; shl.b32 e, e, 23; "
                    "add.s32 m, m, e; mov.b32 $0, m; }", x_floor_bits, poly)
'''
EX2_EMULATION = (
    ("import cutlass\nimport cutlass.cute as cute\n",
     "import cutlass\nimport cutlass.cute as cute\nfrom cutlass._mlir.dialects import llvm\n"
     "from cutlass.cutlass_dsl import T, dsl_user_op\n"),
    ("\n\ndef ring_position(n_block):", _EX2_EMULATION_HELPER + "\n\ndef ring_position(n_block):"),
    ("            p_row = cute.math.exp2(s_row * scale_log2 - m_scaled, fastmath=True)\n",
     "            for c in cutlass.range_constexpr(cute.size(S_mn, mode=[1])):\n"
     "                x = S_mn[r, c] * scale_log2 - m_scaled\n"
     "                S_mn[r, c] = (_ex2_on_fma_pipe(x) if c % EMU_EVERY == EMU_EVERY - 1\n"
     "                              else cute.math.exp2(x, fastmath=True))\n"
     "            p_row = S_mn[r, None].load()\n"),
)


# The wgmma operand fragments sliced by thread index (the ladder's slicing before h02 took FA4's
# warp-uniform one): each HGMMA's descriptor starts in a per-thread register and is moved into a
# uniform register (R2UR) first.
def _per_thread_descriptors(tidx: str):
    return ((f"    # The smem operands' descriptors are the same for every thread of a warpgroup (one wgmma\n"
             f"    # reads the whole tile): slice them by the warpgroup's first thread, a warp-uniform value, as\n"
             f"    # FA4 does, so they can stay in the uniform registers wgmma reads (no R2UR move per wgmma).\n"
             f"    wg_first = cute.arch.make_warp_uniform({tidx} // WARPGROUP_THREADS) * WARPGROUP_THREADS\n"
             f"    wg_mma, wg_mma_pv = tiled_mma.get_slice(wg_first), tiled_mma_pv.get_slice(wg_first)\n"
             f"    tSrQ = wg_mma.make_fragment_A(wg_mma.partition_A(sQ))\n"
             f"    tSrK = wg_mma.make_fragment_B(wg_mma.partition_B(sK))\n"
             f"    tOrVt = wg_mma_pv.make_fragment_B(wg_mma_pv.partition_B(sVt))\n",
             "    tSrQ = thr_mma.make_fragment_A(thr_mma.partition_A(sQ))\n"
             "    tSrK = thr_mma.make_fragment_B(thr_mma.partition_B(sK))\n"
             "    tOrVt = thr_mma_pv.make_fragment_B(thr_mma_pv.partition_B(sVt))\n"),)

# b12 with no setmaxnreg: the three setmaxregister calls gone, and the launch without
# .minnctapersm 1 (which b12 adds only so that ptxas honours them), as b11 launches; its facts
# without the USETMAXREG fingerprint and the per-role register split.
B12_NO_SETMAXNREG = (
    ("        grid=grid, block=[THREADS, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream,\n"
     "        # .minnctapersm 1 with .reqntid 512: ptxas can then fix the entry register count (65,536 /\n"
     "        # 512 = 128), which it needs to honour setmaxnreg (without it, it ignores them: C7508).\n"
     "        min_blocks_per_mp=1)\n",
     "        grid=grid, block=[THREADS, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream)\n"),
    ("    if warp_idx >= MMA_WARP:\n        cute.arch.setmaxregister_decrease(OTHER_REGISTERS)\n", ""),
    ("        cute.arch.setmaxregister_decrease(CORRECTION_REGISTERS)\n", ""),
    ("        cute.arch.setmaxregister_increase(SOFTMAX_REGISTERS)\n", ""),
    ('"USETMAXREG", "VOTE", "BAR.ARV"', '"VOTE", "BAR.ARV"'),
    ('           "registers": {"softmax": SOFTMAX_REGISTERS, "correction": CORRECTION_REGISTERS, '
     '"other": OTHER_REGISTERS},\n', ""),
)


# b10 with its softmax reading the thread's row of S by one tcgen05.ld.32x32b.x128 (all TILE_N
# columns, one instruction) instead of num_chunks_S loads of TMEM_CHUNK columns: the same single
# pass and one wait, but all 128 destination registers named by one instruction. Its guarded build
# does not fit in the 168 registers of a 320-thread CTA (the facts say so, as b10 once did).
B10_ONE_S_LOAD = (
    ("    S_chunk0 = cute.composition(tStS[0][(None, None), 0, 0], cute.make_layout((TILE_M, TMEM_CHUNK)))\n"
     "    load_s, _ = make_row_copies(S_chunk0, TMEM_CHUNK)\n"
     "    thr_load_s = load_s.get_slice(row)\n"
     "    tS_ld = thr_load_s.partition_S(S_chunk0)\n"
     "    tS_ld = cute.make_tensor(tS_ld.iterator + s_shift, tS_ld.layout)\n"
     "    r_S_row = cute.make_rmem_tensor(TILE_N, cutlass.Float32)\n",
     "    S_row0 = cute.composition(tStS[0][(None, None), 0, 0], cute.make_layout((TILE_M, TILE_N)))\n"
     "    load_row, _ = make_row_copies(S_row0, TILE_N)\n"
     "    thr_load_row = load_row.get_slice(row)\n"
     "    tS_row = thr_load_row.partition_S(S_row0)\n"
     "    tS_row = cute.make_tensor(tS_row.iterator + s_shift, tS_row.layout)\n"
     "    r_S_row = cute.make_rmem_tensor(thr_load_row.partition_D(S_row0).shape, cutlass.Float32)\n"),
    ("        for c in cutlass.range_constexpr(num_chunks_S):\n"
     "            cute.copy(thr_load_s, chunk(tS_ld, c), r_S[c])\n",
     "        cute.copy(thr_load_row, tS_row, r_S_row)\n"),
    ('           "kv_stages": NUM_STAGES},\n',
     '           "kv_stages": NUM_STAGES,\n'
     '           "no_tmem_guard": "one tcgen05.ld of the whole row of S names 128 destination registers; with '
     "ptxas's TMEM guardrail calls around it register allocation fails at the 168 registers a 320-thread "
     'CTA allows"},\n'),
)


EXPERIMENTS = {e.name: e for e in (
    Experiment("h04-one-cta-per-sm", "h04",
               "h04 padded with 24 KB of unused smem, so one CTA fits per SM, not two",
               (("        kv_full: cute.struct.MemRange[cutlass.Int64, 1]\n",
                 "        kv_full: cute.struct.MemRange[cutlass.Int64, 1]\n"
                 "        pad: cute.struct.MemRange[cutlass.Int8, 24 * 1024]   # 120 KB: 1 CTA/SM\n"),)),
    Experiment("h04-loads-free", "h04", "h04 if K/V loads cost nothing (an upper bound)",
               LOADS_FREE, diagnostic=True),
    Experiment("h04-prefetch-k", "h04", "h04 with K_{j+1} issued as soon as S_j is done", PREFETCH_K),
    Experiment("h05-cta-barrier-for-p", "h05",
               "h05 with a CTA-wide barrier before P V (as h04 has) instead of the warpgroup's own",
               (("        cute.arch.barrier(barrier_id=1 + warpgroup_idx, number_of_threads=128)\n",
                 "        cute.arch.sync_threads()\n"),)),
    Experiment("h05-loads-free", "h05", "h05 if K/V loads cost nothing (an upper bound)",
               LOADS_FREE, diagnostic=True),
    Experiment("h05-prefetch-k", "h05", "h05 with K_{j+1} issued as soon as S_j is done", PREFETCH_K),
    Experiment("h07-split-kv", "h07",
               "h07 with K and V on separate full/empty barriers: K_{j+1} loads during softmax_j "
               "and P_j V_j, with one buffer each", _split_kv_edits(staged=False)),
    Experiment("h08-three-stages", "h08", "h08 with a ring of 3 K/V stages (224 KB of smem) instead of 2",
               (("NUM_STAGES = 2         # K/V ring depth: tiles in flight ahead of the consumers\n",
                 "NUM_STAGES = 3         # K/V ring depth: tiles in flight ahead of the consumers\n"),)),
    Experiment("h14-three-stages", "h14", "h14 with a ring of 3 K/V stages (224 KB of smem, O's tile in Q's) "
               "instead of 2: the producer one more tile ahead across a work tile's boundary",
               (("NUM_STAGES = 2         # K/V ring depth: tiles in flight ahead of the consumers\n",
                 "NUM_STAGES = 3         # K/V ring depth: tiles in flight ahead of the consumers\n"),)),
    Experiment("h10-no-pingpong", "h10",
               "h10 without h09's turns: h08's lock-step warpgroups with h10's ex2 softmax", NO_PINGPONG),
    Experiment("h10-exp2-emulation", "h10",
               "h10 with 1 exponential in 8 computed by a degree-3 FMA polynomial instead of MUFU.EX2 "
               "(FA4's Blackwell recipe, plain FFMA)", EX2_EMULATION),
    Experiment("h14-one-tile-per-cta", "h14",
               "h14's persistent code with one CTA per work tile (the grid h13 launches): the loop's own "
               "cost, without the persistence",
               (("    grid = (SM_COUNT, 1, 1)       # persistent: one CTA per SM; the kernel walks the work tiles\n",
                 "    grid = (cute.size(mQ.shape[1]) // TILE_M * cute.size(mQ.shape[0]) * cute.size(mQ.shape[2]), 1, 1)\n"),)),
    Experiment("h12-pinned-exponentials", "h12",
               "h12 with all of the softmax's exponentials (and the row sums' adds) before wait_group(0), "
               "not after it as ptxas schedules them", _pin_before_wait_edits(" " * 8, "row_sum"), scratch_stores=True),
    Experiment("h13-pinned-exponentials", "h13", "h13 with all exponentials (and the row sums' adds) "
               "before wait_group(0)", _pin_before_wait_edits(" " * 8, "row_sum"), scratch_stores=True),
    Experiment("h14-pinned-exponentials", "h14", "h14 with all exponentials (and the row sums' adds) "
               "before wait_group(0)", _pin_before_wait_edits(" " * 12, "row_sum"), scratch_stores=True),
    Experiment("h14-pinned-max", "h14", "h14 with both rows' max reductions before wait_group(0) (ptxas 13.4 "
               "leaves one row's shuffles after the wait, in h13 and h14 alike)",
               _pin_before_wait_edits(" " * 12, "row_max"), scratch_stores=True),
    Experiment("h14-per-thread-descriptors", "h14",
               "h14 with the wgmma operand fragments (smem descriptors) sliced by thread index, as the "
               "ladder sliced them before: a per-thread value that ptxas moves into a uniform register "
               "(R2UR) before each HGMMA", _per_thread_descriptors("mma_tidx")),
    Experiment("h06-per-thread-descriptors", "h06",
               "h06 with the wgmma operand fragments sliced by thread index, as the ladder sliced them "
               "before: the first step where that costs an R2UR before each HGMMA",
               _per_thread_descriptors("tidx")),
    Experiment("b10-one-s-load", "b10",
               "b10 with S read by one 128-column tcgen05.ld instead of eight 16-column loads: fewer "
               "load waits, more registers", B10_ONE_S_LOAD),
    Experiment("b12-rescale-threshold-8", "b12",
               "b12 with FA4's conditional rescaling: the running max may lag by up to 2^8 (8 in log2 units) "
               "before O is rescaled, so P reaches up to 2^8 before its bf16 cast and most tiles skip the rescale",
               (("RESCALE_THRESHOLD = 0.0\n", "RESCALE_THRESHOLD = 8.0\n"),)),
    Experiment("b12-no-setmaxnreg", "b12",
               "b12 without setmaxnreg (and without min_blocks_per_mp=1): every one of the 512 threads keeps "
               "the launch's 65,536 / 512 = 128 registers, the softmax included",
               B12_NO_SETMAXNREG),
    Experiment("b13-two-cta-emulation", "b13",
               "b13 with FA4's 2-CTA share of emulated exponentials (24 of 128, EMU_PERIOD 10) instead of "
               "b12's 16: what FA4's setting adds to the CTA pair",
               (("EMU_PERIOD = 16\n", "EMU_PERIOD = 10\n"),)),
    Experiment("h08-split-kv", "h08",
               "h08's 2-stage ring with K and V on separate full/empty barriers: S_j starts once K_j "
               "has landed, and K's stage is refilled right after S_j", _split_kv_edits(staged=True)),
)}


def get(name: str) -> Experiment:
    key = name[len(PREFIX):] if name.startswith(PREFIX) else name
    if key not in EXPERIMENTS:
        raise ValueError(f"no experiment {key!r}; known: {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[key]


def apply_edits(text: str, edits, label: str = "") -> str:
    for old, new in edits:
        count = text.count(old)
        if count != 1:
            raise ValueError(f"experiment {label}: edit anchor occurs {count} times, not once: {old[:70]!r}")
        text = text.replace(old, new)
    return text


def materialize(exp: Experiment, base_path: Path) -> Path:
    """Write ``base_path`` (the file of step ``exp.base``), without its timeline markers (comments
    that the edits' anchors do not contain), with the experiment's edits to
    build/experiments/<name>.py and return that path. (Name resolution is harness.core.steps's job: this
    module never imports it, so the two cannot import each other.)"""
    header = (f"# GENERATED by harness/core/experiments.py from {base_path.relative_to(ROOT)}: experiment "
              f"{exp.name!r}{' (diagnostic: wrong answers by design)' if exp.diagnostic else ''}.\n"
              f"# {exp.question}\n")
    text = header + apply_edits(without_markers(base_path.read_text()), exp.edits, exp.name)
    return publish(BUILD / f"{exp.name.replace('-', '_')}.py", text)
