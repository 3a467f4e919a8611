"""The text edits of the named experiments (harness/core/experiments.py holds the registry: which
base step, what question, which of these edits). Each edit is an exact (old, new) pair of step-file
text; ``old`` must occur once in the base file, markers stripped (harness/core/markers.py)."""

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


# h14 with O stored through Q's smem tile, as h13 stores it (h14 gives O a tile of its own): Q's
# buffer is free only once the TMA store has read O, so the next work tile's Q waits for this
# tile's epilogue. The edits undo h14's own O tile: sO, the consumer warps' arrives on q_empty
# after their last QK^T, the deferred wait for the store's read. (The epilogue's first barrier
# stays: the store warp's wait before it then finds nothing outstanding.)
H14_O_IN_Q_TILE = (
    ("SMEM_BYTES = 2 * (2 * TILE_M * HEAD_DIM + NUM_STAGES * 2 * TILE_N * HEAD_DIM)",
     "SMEM_BYTES = 2 * (TILE_M * HEAD_DIM + NUM_STAGES * 2 * TILE_N * HEAD_DIM)"),
    ("        sO: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sQ_layout)], SMEM_ALIGN]\n", ""),
    ("    sO = storage.sO.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)     # O's tile: Q's layout\n",
     "    sO = sQ                                                                 # O through Q's tile\n"),
    ("            cute.arch.mbarrier_init(q_empty, NUM_CONSUMER_WARPS)   # one arrival per consumer warp\n",
     "            cute.arch.mbarrier_init(q_empty, 1)      # the TMA-store warp's arrive (one lane)\n"),
    ("        # arrive: this warp's last QK^T is done reading sQ (its wait_group above): with all 8\n"
     "        # warps' arrives the producer may load the next work tile's Q (q_empty).\n"
     "        with cute.arch.elect_one():\n            cute.arch.mbarrier_arrive(q_empty)\n\n", ""),
    ("q_empty: cute.struct.MemRange[cutlass.Int64, 1]   # sQ free again: the tile's last QK^T is done\n",
     "q_empty: cute.struct.MemRange[cutlass.Int64, 1]   # sQ free again: the O store has read it\n"),
    ("        # wait: sQ is free: every consumer warp's last QK^T of the previous work tile is done\n"
     "        # (pairs with their arrives on q_empty, that tile's phase: parity (i - 1) % 2 = (i % 2) ^ 1;\n"
     "        # for the first the fresh barrier's \"previous phase\" counts as complete). So Q_{i+1} loads\n"
     "        # while tile i's last P V and epilogue still run.\n",
     "        # wait: sQ is free: the previous work tile's O store has read it (pairs with the store\n"
     "        # warp's arrive on q_empty, that tile's phase: parity (i % 2) ^ 1; the first passes at once).\n"),
    ("            # commit, no wait: the consumers go on to the next work tile; the next epilogue (or\n"
     "            # the exit, below) waits for this store's read of sO.\n",
     "            # commit + wait(read): sQ (which holds O) is free for the next work tile's Q.\n"),
    ("            cute.arch.cp_async_bulk_commit_group()\n"
     "    # wait(read): the last TMA store has read sO before the CTA exits and its smem goes away (the\n"
     "    # global writes complete on their own).\n"
     "    if warp_idx == STORE_WARP:\n"
     "        cute.arch.cp_async_bulk_wait_group(0, read=True)\n",
     "            cute.arch.cp_async_bulk_commit_group()\n"
     "            cute.arch.cp_async_bulk_wait_group(0, read=True)\n"
     "            cute.arch.sync_warp()\n"
     "            with cute.arch.elect_one():\n"
     "                cute.arch.mbarrier_arrive(q_empty)      # sQ free: the store has read O out of it\n"),
)


# h14 with FA3's tile for head dim 128, 128 x 176: 176 keys per K/V tile, so the per-tile costs
# (the turns' barriers, the row statistics' shuffles, O's rescale) spread over 37% more keys. Two
# stages of 176-key K and V tiles take 176 KB, so O goes back through Q's tile (exp:h14-o-in-q-tile;
# with its own tile the CTA would need 240 KB): compare it with that experiment.
# 4k, 8k and 16k are not multiples of 176, so the last K/V tile is partial: n_blocks rounds up,
# the TMA fills the tile's rows past seqlen with zeros (V's zero rows add nothing to O), and the
# scores of those columns are masked to -inf so that they count neither in the max nor in the sum.
# The walk goes over the K/V tiles in reverse (as FA4 does), so the partial tile is the first
# one, in the peeled first half: the mask's selects run once per work tile, not in the loop. P's
# conversion goes two values per instruction (cvt.rn.bf16x2.f32, as FA4's utils.cvt_f16): the
# generic .to(bf16) does not pair them for a 176-column fragment and the extra moves spill.
_BF16X2 = '''

@dsl_user_op
def _bf16x2(a, b, *, loc=None, ip=None):
    """(a, b) -> one register holding two bf16 (cvt.rn.bf16x2.f32), a in the low half."""
    return cutlass.Int32(llvm.inline_asm(
        T.i32(), [cutlass.Float32(a).ir_value(loc=loc, ip=ip), cutlass.Float32(b).ir_value(loc=loc, ip=ip)],
        "cvt.rn.bf16x2.f32 $0, $2, $1;", "=r,f,f", has_side_effects=False, is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT))


def _to_bf16_pairs(src, dst):
    """dst (bf16) = src (fp32), two values per instruction."""
    dst32 = cute.recast_tensor(dst, cutlass.Int32)
    for i in range(cute.size(dst32)):
        dst32[i] = _bf16x2(src[2 * i], src[2 * i + 1])
'''
H14_TILE_N_176 = (
    ("TILE_N = 128           # key/value rows per iteration\n",
     "TILE_N = 176           # key/value rows per iteration (FA3's tile for head dim 128)\n"),
    ("import cutlass\nimport cutlass.cute as cute\n",
     "import cutlass\nimport cutlass.cute as cute\nfrom cutlass._mlir.dialects import llvm\n"
     "from cutlass.cutlass_dsl import T, dsl_user_op\n"),
    ("    n_blocks = cute.size(tma_mK.shape[0]) // TILE_N\n",
     "    n_blocks = (cute.size(tma_mK.shape[0]) + TILE_N - 1) // TILE_N     # the last one may be partial\n"),
    ("        cute.copy(tma_K, tKgK[None, 0], tKsK[None, stage], tma_bar_ptr=k_full + stage)\n",
     "        cute.copy(tma_K, tKgK[None, n_blocks - 1], tKsK[None, stage], tma_bar_ptr=k_full + stage)\n"),
    ("                cute.copy(tma_K, tKgK[None, n_block + 1], tKsK[None, k_stage], tma_bar_ptr=k_full + k_stage)\n",
     "                cute.copy(tma_K, tKgK[None, n_blocks - 2 - n_block], tKsK[None, k_stage],\n"
     "                          tma_bar_ptr=k_full + k_stage)\n"),
    ("            cute.copy(tma_V, tVgV[None, n_block], tVsV[None, stage], tma_bar_ptr=v_full + stage)\n",
     "            cute.copy(tma_V, tVgV[None, n_blocks - 1 - n_block], tVsV[None, stage], tma_bar_ptr=v_full + stage)\n"),
    ("        with cute.arch.elect_one():\n"
     "            cute.arch.mbarrier_arrive(k_empty + stage)\n"
     "        online_softmax(S_mn, row_max, row_sum, row_scale, scale_log2)\n",
     "        with cute.arch.elect_one():\n"
     "            cute.arch.mbarrier_arrive(k_empty + stage)\n"
     "        valid = cute.size(tma_mK.shape[0]) - (n_blocks - 1) * TILE_N     # keys of the partial tile\n"
     "        for r in cutlass.range_constexpr(rows_per_thread):\n"
     "            for c in cutlass.range_constexpr(cute.size(S_mn, mode=[1])):\n"
     "                S_mn[r, c] = cutlass.select_(cS_mn[r, c][1] < valid, S_mn[r, c], -cutlass.Float32.inf)\n"
     "        online_softmax(S_mn, row_max, row_sum, row_scale, scale_log2)\n"),
    ("    S_mn = _mn_view(acc_S)\n    O_mn = _mn_view(acc_O)\n",
     "    S_mn = _mn_view(acc_S)\n    O_mn = _mn_view(acc_O)\n"
     "    cS_mn = _mn_view(thr_mma.partition_C(cute.make_identity_tensor((TILE_M, TILE_N))))   # (row, col)\n"),
    ("            tOrP.store(_acc_as_a_fragment(acc_S).load().to(dtype))\n",
     "            _to_bf16_pairs(_acc_as_a_fragment(acc_S), tOrP)\n"),
    ("\n        tOrP.store(_acc_as_a_fragment(acc_S).load().to(dtype))\n",
     "\n        _to_bf16_pairs(_acc_as_a_fragment(acc_S), tOrP)\n"),
    ("\n\ndef _quad_allreduce(", _BF16X2 + "\n\ndef _quad_allreduce("),
    # ladder/contract.py rejects a seqlen that is not a multiple of TILE_N for the steps, none of
    # which masks; this kernel does, so its inputs are checked against its query tile alone.
    ("attention = contract.make_attention(INFO, host)",
     "attention = contract.make_attention(dataclasses.replace(INFO, tile_n=TILE_M), host)"),
    ("import math\n", "import dataclasses\nimport math\n"),
) + H14_O_IN_Q_TILE


# A diagnostic bound for balancing the last wave (stream-K / split-KV of the tail): 2,048 equal
# work tiles over 132 CTAs leave 68 for a 16th round, so 64 SMs idle for a whole tile. Here the
# tiles of the last partial round are cut into SPLIT pieces along K/V (each piece a contiguous
# range of K/V tiles, walked by whichever CTA the round-robin gives it), so every CTA ends within
# a piece of the others. The pieces' partial results are not combined: each writes its own O over
# the tile's (wrong answers by design). What it measures is the time a balanced tail would take,
# without the cost of combining partial results.
_PIECE = '''

SPLIT = 7      # pieces per tail tile (at most n_blocks)


def _piece(unit, n_work, n_ctas, n_blocks):
    """Work unit -> (tile, first K/V tile, K/V tile count): whole tiles for the full rounds, then
    SPLIT pieces of each tile of the last, partial round."""
    full = n_work // n_ctas * n_ctas
    split = cutlass.select_(n_blocks < SPLIT, n_blocks, SPLIT)
    in_tail = unit >= full
    rel = cutlass.select_(in_tail, unit - full, 0)
    piece = rel % split
    lo = cutlass.select_(in_tail, piece * n_blocks // split, 0)
    hi = cutlass.select_(in_tail, (piece + 1) * n_blocks // split, n_blocks)
    return cutlass.select_(in_tail, full + rel // split, unit), lo, hi - lo


def _units(n_work, n_ctas, n_blocks):
    full = n_work // n_ctas * n_ctas
    return full + (n_work - full) * cutlass.select_(n_blocks < SPLIT, n_blocks, SPLIT)
'''
_WORK = "m_blocks * heads * cute.size(tma_mQ.shape[3])"
H14_BALANCED_TAIL = (
    ("\n\ndef ring_position(n_block):", _PIECE + "\n\ndef ring_position(n_block):"),
    (f"    n_tiles = tiles_of(cta, n_ctas, {_WORK})\n",
     f"    n_tiles = tiles_of(cta, n_ctas, _units({_WORK}, n_ctas, n_blocks))     # work units\n"),
    # producer
    ("    for tile_iter in range(n_tiles):\n"
     "        m_block, head, batch = tile_coords(cta + tile_iter * n_ctas, m_blocks, heads)\n"
     "        gQ, gK, gVt, _ = tile_views(tma_mQ, tma_mK, tma_mVt, tma_mO, m_block, head, batch)\n"
     "        kv0 = tile_iter * n_blocks          # K/V tiles this CTA loaded before this work tile\n",
     "    kv0 = cutlass.Int32(0)                   # K/V tiles this CTA loaded before this unit\n"
     "    for tile_iter in range(n_tiles):\n"
     f"        tile, lo, n = _piece(cta + tile_iter * n_ctas, {_WORK}, n_ctas, n_blocks)\n"
     "        m_block, head, batch = tile_coords(tile, m_blocks, heads)\n"
     "        gQ, gK, gVt, _ = tile_views(tma_mQ, tma_mK, tma_mVt, tma_mO, m_block, head, batch)\n"),
    ("        cute.copy(tma_K, tKgK[None, 0], tKsK[None, stage], tma_bar_ptr=k_full + stage)\n",
     "        cute.copy(tma_K, tKgK[None, lo], tKsK[None, stage], tma_bar_ptr=k_full + stage)\n"),
    ("        for n_block in range(n_blocks):\n            if n_block + 1 < n_blocks:\n",
     "        for n_block in range(n):\n            if n_block + 1 < n:\n"),
    ("tKgK[None, n_block + 1]", "tKgK[None, lo + n_block + 1]"),
    ("            cute.copy(tma_V, tVgV[None, n_block], tVsV[None, stage], tma_bar_ptr=v_full + stage)\n",
     "            cute.copy(tma_V, tVgV[None, lo + n_block], tVsV[None, stage], tma_bar_ptr=v_full + stage)\n"
     "        kv0 += n\n"),
    # consumer
    ("    for tile_iter in range(n_tiles):\n"
     "        m_block, head, batch = tile_coords(cta + tile_iter * n_ctas, m_blocks, heads)\n"
     "        _, _, _, gO = tile_views(tma_mQ, tma_mK, tma_mVt, tma_mO, m_block, head, batch)\n"
     "        kv0 = tile_iter * n_blocks              # K/V tiles this CTA consumed before this work tile\n",
     "    kv0 = cutlass.Int32(0)                   # K/V tiles this CTA consumed before this unit\n"
     "    for tile_iter in range(n_tiles):\n"
     f"        tile, lo, n = _piece(cta + tile_iter * n_ctas, {_WORK}, n_ctas, n_blocks)\n"
     "        m_block, head, batch = tile_coords(tile, m_blocks, heads)\n"
     "        _, _, _, gO = tile_views(tma_mQ, tma_mK, tma_mVt, tma_mO, m_block, head, batch)\n"),
    ("        for n_block in range(1, n_blocks):\n", "        for n_block in range(1, n):\n"),
    ("ring_position(kv0 + n_blocks - 1)", "ring_position(kv0 + n - 1)"),
    ("    # wait(read): the last TMA store has read sO before the CTA exits",
     "        kv0 += n\n    # wait(read): the last TMA store has read sO before the CTA exits"),
)
