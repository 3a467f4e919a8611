"""The text edits of the named experiments (harness/core/experiments.py holds the registry: which
base step, what question, which of these edits). Each edit is an exact (old, new) pair of step-file
text; ``old`` must occur once in the base file, markers stripped (harness/core/markers.py)."""

import re

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

def split_kv_edits(staged: bool):
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

def pin_before_wait_edits(indent: str, stat: str):
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
EX2_EMULATION_HELPER = '''

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
    ("\n\ndef ring_position(n_block):", EX2_EMULATION_HELPER + "\n\ndef ring_position(n_block):"),
    ("            p_row = cute.math.exp2(s_row * scale_log2 - m_scaled, fastmath=True)\n",
     "            for c in cutlass.range_constexpr(cute.size(S_mn, mode=[1])):\n"
     "                x = S_mn[r, c] * scale_log2 - m_scaled\n"
     "                S_mn[r, c] = (_ex2_on_fma_pipe(x) if c % EMU_EVERY == EMU_EVERY - 1\n"
     "                              else cute.math.exp2(x, fastmath=True))\n"
     "            p_row = S_mn[r, None].load()\n"),
)

# The same edit with half of each row emulated: what more FMA-pipe work costs when the MUFU is not the limit.
EX2_EMULATION_HALF = tuple((before, after.replace("EMU_EVERY = 8                  # 1 exponential in 8 (12.5%) emulated",
                                                  "EMU_EVERY = 2                  # 1 exponential in 2 (50%) emulated"))
                           for before, after in EX2_EMULATION)
assert EX2_EMULATION_HALF != EX2_EMULATION

# h13 without the proxy fence between the threads' smem writes of O and the TMA store that reads them.
NO_STORE_FENCE = (
    ("    # fence: this thread's smem writes (generic proxy) become visible to the TMA (async proxy).\n"
     "    cute.arch.fence_view_async_shared()\n", ""),
)


# The wgmma operand fragments sliced by thread index (the ladder's slicing before h02 took FA4's
# warp-uniform one): each HGMMA's descriptor starts in a per-thread register and is moved into a
# uniform register (R2UR) first.
def per_thread_descriptors(tidx: str):
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

# A staged wgmma operand sliced by its ring stage before its k-block: tSrK[None, None, None, stage]
# [None, None, kb] for tSrK[None, None, kb, stage]. The same descriptors; sliced stage first, the
# stage's 64-bit descriptor is built once per GEMM and each k-block adds an immediate to it
# (UIADD3.64), where k first costs two or three per HGMMA (UIADD3 or ULOP3 for the low half, and
# UMOVs to place the halves). Each line is one whole gemm line of the base step, with its indentation.
def stage_first_operands(*lines: str):
    return tuple(("\n" + line, "\n" + re.sub(r"(\w+)\[None, None, kb, (\w+)\]",
                                               r"\1[None, None, None, \2][None, None, kb]", line))
                 for line in lines)


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


# The row max as the steps wrote it before they took FA4's four chains (ladder/hopper/*:
# _row_max): one ReductionOp.MAX over the thread's part of the row, which lowers to
# NaN-propagating FMNMX.NAN in the compiler's order; or a single chain of max.f32.
_ROW_MAX_NOW = "        m_new = _quad_allreduce(_row_max(S_mn[r, None], row_max[r]), cute.arch.fmax)\n"
H14_REDUCE_MAX = ((_ROW_MAX_NOW,
                   "        m_new = _quad_allreduce(S_mn[r, None].load().reduce(cute.ReductionOp.MAX, "
                   "-cutlass.Float32.inf, 0), cute.arch.fmax)\n"
                   "        m_new = cute.arch.fmax(m_new, row_max[r])\n"),)
H14_ONE_MAX_CHAIN = ((_ROW_MAX_NOW,
                      "        m_new = row_max[r]\n"
                      "        for c in range(cute.size(S_mn, mode=[1])):\n"
                      "            m_new = cute.arch.fmax(m_new, S_mn[r, c])\n"
                      "        m_new = _quad_allreduce(m_new, cute.arch.fmax)\n"),)


def _rescale_o(indent: str) -> str:
    return (f"{indent}for r in cutlass.range_constexpr(rows_per_thread):\n"
            f"{indent}    O_mn[r, None] = O_mn[r, None].load() * row_scale[r]\n")


def rescale_after_wait(indent: str):
    """O's rescale back where h12 first put it: after wait_group(0), right behind P's conversion,
    on the way from the softmax to the next turn (instead of under the next turn's QK^T)."""
    body = " " * 4 + indent
    return (
        (f"{body}# O rescaled to tile j-1's max (softmax(j-1)'s factors) while S_j runs on the tensor core:\n"
         f"{body}# no wgmma uses acc_O now (P V(j-2) completed at the last wait_group(0)), and this work\n"
         f"{body}# is then off the path from the softmax to the next turn (FA4's rescale_O_before_gemm).\n"
         + _rescale_o(body), ""),
        (f"{body}tOrP.store(_acc_as_a_fragment(acc_S).load().to(dtype))\n",
         f"{body}tOrP.store(_acc_as_a_fragment(acc_S).load().to(dtype))\n" + _rescale_o(body)),
        (f"{indent}# ---- Last half tile: O rescaled to the last tile's max, then P V of the last tile alone.\n"
         + _rescale_o(indent), f"{indent}# ---- Last half tile: P V of the last tile alone.\n"),
    )
