"""The text edits of h14's experiments on its persistence: where O's smem tile lives, the
shape of the K/V tile, the last wave, the epilogue (harness/core/experiment_edits.py has the
format; harness/core/experiments.py the registry)."""

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


# h14 with one epilogue per consumer warpgroup: O's smem tile is two 64-row halves, and each
# warpgroup writes its half and stores it (one TMA store of a (64, D) box, issued by its first
# warp, which also waits for its own previous store's read) behind a 128-thread barrier of its
# own. h14's epilogue gathers all 256 consumer threads: warpgroup 0, which finishes its last P V
# half a turn ahead, waits at that barrier for warpgroup 1 before it can start the next work tile.
# Its companion: warpgroup 1 hands warpgroup 0 the next tile's first turn right after its own last
# turn (h14 pre-arrives at the top of every tile, i.e. after warpgroup 1's epilogue, which would
# keep warpgroup 0 waiting for it anyway); the pre-arrive stays for the CTA's first tile only.
_SO_HALVES = ("    sO_layout = _wgmma_layout(warpgroup.SmemLayoutAtomKind.K_SW128, "
              "(WGMMA_M, HEAD_DIM, NUM_WARPGROUPS))\n")
H14_WARPGROUP_EPILOGUE = (
    # O's smem: two 64-row halves (64, D, warpgroup), each a whole swizzled tile; the TMA store
    # moves one half, a (64, D) box.
    ("    sO = storage.sO.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)     # O's tile: Q's layout\n",
     _SO_HALVES + "    sO = storage.sO.get_tensor(sO_layout.outer, swizzle=sO_layout.inner)     # (64, D, warpgroup)\n"),
    ("    tma_O, tma_mO = make_tma_store(mO, sQ_layout)\n",
     _SO_HALVES + "    tma_O, tma_mO = make_tma_store(mO, cute.select(sO_layout, mode=[0, 1]))\n"),
    ("o, sO_layout, (TILE_M, HEAD_DIM))\n", "o, sO_layout, (WGMMA_M, HEAD_DIM))\n"),
    # the stmatrix copy (256 threads, rows 0..127) writes through a (128, D) view of the halves
    ("        # Epilogue: O / rowsum, to bf16, into O's smem tile with stmatrix, then one TMA store.\n",
     "        # Epilogue, per warpgroup: O / rowsum, to bf16, into its half of O's tile with stmatrix,\n"
     "        # then one TMA store of the half.\n"),
    ("        smem_store = make_smem_store(dtype, tiled_mma_pv).get_slice(mma_tidx)\n",
     "        smem_store = make_smem_store(dtype, tiled_mma_pv).get_slice(mma_tidx)\n"
     "        # row r of the tile is row r % 64 of half r // 64: a (128, D) view for the stmatrix copy\n"
     "        sO_mn = cute.composition(sO, cute.make_layout(((WGMMA_M, NUM_WARPGROUPS), HEAD_DIM),\n"
     "                                                      stride=((1, WGMMA_M * HEAD_DIM), WGMMA_M)))\n"
     "        my_epilogue = EPILOGUE_BARRIER + wg          # this warpgroup's own barrier (128 threads)\n"),
    # each warpgroup's first warp waits for its own previous store's read; its own barrier
    ("        # wait(read): the previous work tile's TMA store has read sO (long done: a whole tile ago);\n"
     "        # then the barrier tells the other 224 consumer threads that sO may be written.\n"
     "        if warp_idx == STORE_WARP:\n            cute.arch.cp_async_bulk_wait_group(0, read=True)\n"
     "        cute.arch.barrier(barrier_id=EPILOGUE_BARRIER, number_of_threads=EPILOGUE_THREADS)\n"
     "        cute.copy(smem_store, smem_store.retile(rO), smem_store.partition_D(sO))\n",
     "        # wait(read): this warpgroup's previous TMA store has read its half of sO; then its own\n"
     "        # barrier tells its other 96 threads that the half may be written. The other warpgroup\n"
     "        # is not waited for: it may still be in its last P V.\n"
     "        if warp_idx % 4 == 0:\n            cute.arch.cp_async_bulk_wait_group(0, read=True)\n"
     "        cute.arch.barrier(barrier_id=my_epilogue, number_of_threads=WARPGROUP_THREADS)\n"
     "        cute.copy(smem_store, smem_store.retile(rO), smem_store.partition_D(sO_mn))\n"),
    # barrier: the warpgroup's 128 threads wrote and fenced their half; its first warp stores it
    ("        # barrier: all 256 consumer threads have written and fenced their part of the tile.\n"
     "        cute.arch.barrier(barrier_id=EPILOGUE_BARRIER, number_of_threads=EPILOGUE_THREADS)\n"
     "        if warp_idx == STORE_WARP:\n"
     "            tOsO, tOgO = cpasync.tma_partition(tma_O, 0, cute.make_layout(1), cute.group_modes(sO, 0, 2),\n"
     "                                               cute.group_modes(gO, 0, 2))\n",
     "        # barrier: the warpgroup's 128 threads have written and fenced their half.\n"
     "        cute.arch.barrier(barrier_id=my_epilogue, number_of_threads=WARPGROUP_THREADS)\n"
     "        if warp_idx % 4 == 0:\n"
     "            gO_half = cute.local_tile(gO, (WGMMA_M, HEAD_DIM), (wg, 0))\n"
     "            tOsO, tOgO = cpasync.tma_partition(tma_O, 0, cute.make_layout(1),\n"
     "                                               cute.group_modes(sO[None, None, wg], 0, 2),\n"
     "                                               cute.group_modes(gO_half, 0, 2))\n"),
    # warpgroup 1 hands over the next tile's first turn after its last turn of this one, not after
    # its epilogue; the pre-arrive is for the first tile only
    ("        if wg == 1:\n            cute.arch.barrier_arrive(barrier_id=other_turn",
     "        if wg == 1 and tile_iter == 0:\n            cute.arch.barrier_arrive(barrier_id=other_turn"),
    ("        # Warpgroup 1's pre-arrive gave warpgroup 0 one turn more than its hand-overs do, so only\n"
     "        # warpgroup 0 hands over after its last turn: every named-barrier generation then has one\n"
     "        # sync side and one arrive side, none left half-arrived at exit.\n"
     "        if wg == 0:\n",
     "        # Warpgroup 0 hands over after its last turn (warpgroup 1's first-tile pre-arrive gave it\n"
     "        # one turn more); warpgroup 1 hands the next tile's first turn over after its last one, so\n"
     "        # warpgroup 0 need not wait for its epilogue. After the CTA's last tile only warpgroup 0\n"
     "        # arrives: every named-barrier generation has one sync side and one arrive side.\n"
     "        if wg == 0 or tile_iter + 1 < n_tiles:\n"),
    ("            # One TMA store of the whole tile. The whole warp",
     "            # One TMA store of the warpgroup's half. The whole warp"),
    # at the exit, each warpgroup's first warp waits for its own last store's read
    ("    if warp_idx == STORE_WARP:\n        cute.arch.cp_async_bulk_wait_group(0, read=True)\n\n\ndef online_softmax",
     "    if warp_idx % 4 == 0:\n        cute.arch.cp_async_bulk_wait_group(0, read=True)\n\n\ndef online_softmax"),
)
