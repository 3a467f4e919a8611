"""b05 — a second Q tile per CTA: two 128-row query tiles share every K/V tile load.

Change from b04: the CTA owns two 128-row query tiles (256 rows) instead of one, with 8 warps:
warps 0-3 run the softmax of tile 0, warps 4-7 that of tile 1. Per K/V tile, one TMA load of K and
V serves both: the MMA thread issues S0 = Q0 K^T and S1 = Q1 K^T (16 MMAs, one commit), then, after
both softmaxes, O0 += P0 V and O1 += P1 V. TMEM holds S0, S1, O0 and O1, 128 columns each: all
512 columns. Warp w still touches only TMEM lanes 32 (w % 4) .. +31: warps 4-7 use the same lanes
as warps 0-3, in the other tile's columns.

Why: in b04 every CTA loads a K/V tile (64 KB) for 128 query rows. Two Q tiles halve the K/V bytes
per query row (512 -> 256), and the tensor cores get twice the MMA work per wait for a load: the
MMA thread issues 16 MMAs per batch instead of 8 while the load latency is paid once.

Expect (arithmetic): per K/V tile the CTA does twice the MMA work (2 x 8.4 MFLOP) for the same
64 KB load and the same number of barrier round trips; the exposed load latency and the serial
MMA-wait-softmax chain are amortized over twice the work. The softmaxes of the two tiles run at
the same time on different warps, so the serial part grows less than 2x: expect a clear gain.
smem: Q 64 KB + K 32 KB + V 32 KB + P 64 KB = 192 KB.

TMEM_CHUNK (columns per tcgen05.ld/st) stays b04's 16: with 32, ptxas 13.4 holds this kernel at
128 registers and spills (copy this file with TMEM_CHUNK = 32 and run ``ladder sass <copy>
--against b05``); writeups/blackwell/05-two-q-tiles.md ("The TMEM copy chunk") shows it.

Evidence: ``ladder sass b05 --against b04`` (UTCHMMA doubles per tile; 256 threads);
tests/test_blackwell_steps.py (TMEM map S0, S1, O0, O1 = exactly 512 columns; K/V bytes per query
row halve; smem budget; lane ownership); writeups/blackwell/05-two-q-tiles.md. Compiled, not yet
run on a B200.
"""

import cutlass
import cutlass.cute as cute
from cutlass._mlir.dialects import nvvm
from cutlass.cute.nvgpu import cpasync, tcgen05

from ladder import contract

# Tile shapes (named, not magic): one CTA = two 128-row query tiles, walking K/V in 128-row tiles.
TILE_M = 128           # query rows per Q tile: the M of tcgen05.mma.cta_group::1, one TMEM lane each
NUM_Q_TILES = 2        # Q tiles per CTA, sharing every K/V load; one softmax warpgroup each
TILE_N = 128           # key/value rows per iteration
HEAD_DIM = 128
MMA_K = 16             # bf16 tcgen05.mma consumes 16 of the reduction dim per instruction
NUM_WARPS = 4 * NUM_Q_TILES    # per Q tile 4 warps x 32 lanes = the 128 TMEM lanes, one thread per row
THREADS = NUM_WARPS * 32
# Columns per tcgen05.ld/st of S or O (16, as in b02-b04). A register-allocation knob, not part of
# the algorithm: with the second Q tile's addressing, 32 makes ptxas 13.4 hold the kernel at 128
# registers and spill; 16 spills nothing.
TMEM_CHUNK = 16

# TMEM: fp32 S0, S1 (TILE_N columns each), then fp32 O0, O1 (HEAD_DIM columns each): all 512.
TMEM_S_COL = (0, TILE_N)                                   # S of Q tile 0, 1
TMEM_O_COL = (2 * TILE_N, 2 * TILE_N + HEAD_DIM)           # O of Q tile 0, 1
TMEM_COLS = 512

# smem: 2 Q tiles + K + V (128-byte swizzled) + 2 P tiles (interleaved), all bf16.
SMEM_ALIGN = 1024      # the 128B swizzle repeats every 8 rows x 128 B; descriptors assume this base
SMEM_BYTES = 2 * (NUM_Q_TILES * TILE_M * HEAD_DIM + 2 * TILE_N * HEAD_DIM + NUM_Q_TILES * TILE_M * TILE_N)


def _umma_layout(kind, shape, mn_major=False):
    """Tile a tcgen05 smem layout atom over ``shape``; an MN-major operand is tiled along its
    contiguous (first) mode first. A third mode (the Q tile) is tiled last: whole tiles."""
    atom = tcgen05.make_smem_layout_atom(kind, cutlass.BFloat16)
    order = ((1, 0) if mn_major else (0, 1)) + tuple(range(2, len(shape)))
    return cute.tile_to_shape(atom, shape, order)


def make_smem_layouts():
    """(sQ, sK, sVt, sP). Q, K, V in the 128B-swizzle layouts: atoms of 8 rows x 128 bytes with
    the 16-byte chunks of each row permuted by XOR with the row index, tiled over the tile; the
    UMMA descriptors carry the same mode. Q and K (A/B of S) are K-major; V, the B operand of
    O += P V shaped (D, keys), is MN-major. P (A of O, K-major) keeps b02's unswizzled layout: a
    thread's 16-byte stores into its own row are already conflict-free there. Q and P have a
    third mode, the Q tile: (TILE_M, cols, NUM_Q_TILES), each Q tile a whole swizzled tile."""
    sQ = _umma_layout(tcgen05.SmemLayoutAtomKind.K_SW128, (TILE_M, HEAD_DIM, NUM_Q_TILES))
    sK = _umma_layout(tcgen05.SmemLayoutAtomKind.K_SW128, (TILE_N, HEAD_DIM))
    sVt = _umma_layout(tcgen05.SmemLayoutAtomKind.MN_SW128, (HEAD_DIM, TILE_N), mn_major=True)
    sP = _umma_layout(tcgen05.SmemLayoutAtomKind.K_INTER, (TILE_M, TILE_N, NUM_Q_TILES))
    return sQ, sK, sVt, sP


def make_shared_storage(dtype, sQ_layout, sK_layout, sVt_layout, sP_layout):
    """The CTA's shared memory, as a struct (its size is the launch's dynamic smem)."""
    @cute.struct
    class SharedStorage:
        sQ: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sQ_layout)], SMEM_ALIGN]
        sK: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sK_layout)], SMEM_ALIGN]
        sV: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sVt_layout)], SMEM_ALIGN]
        sP: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sP_layout)], SMEM_ALIGN]
        # mbarriers. q_full: Q landed (used once, phase 0). kv_full: K and V of the current tile
        # landed. s_done, o_done: the tcgen05.commit after the S MMAs, after the P V MMAs (one
        # barrier each, so each completes once per tile: with one barrier completing twice per
        # tile, a warp still waiting for P V of tile j could see S of tile j+1 complete first,
        # now that no CTA barrier separates the tiles, and wait forever on the wrong parity).
        q_full: cute.struct.MemRange[cutlass.Int64, 1]
        kv_full: cute.struct.MemRange[cutlass.Int64, 1]
        s_done: cute.struct.MemRange[cutlass.Int64, 1]
        o_done: cute.struct.MemRange[cutlass.Int64, 1]
        # tcgen05.alloc writes the TMEM base address here.
        tmem_base: cutlass.Int32
    return SharedStorage


def make_tma_loads(mQ, mK, mV, sQ_layout, sK_layout, sVt_layout):
    """TMA atoms (descriptor + smem layout, swizzle included) and the coordinate tensors they
    index; Q's atom loads one Q tile (one of sQ's tiles). A TMA box is described with the
    contiguous mode first, so Q and K are viewed as (seqlen, d, heads, batch) and V as
    (d, seqlen, heads, batch): V's smem tile is (D, keys)."""
    q = cute.make_tensor(mQ.iterator, cute.select(mQ.layout, mode=[1, 3, 2, 0]))
    k = cute.make_tensor(mK.iterator, cute.select(mK.layout, mode=[1, 3, 2, 0]))
    vt = cute.make_tensor(mV.iterator, cute.select(mV.layout, mode=[3, 1, 2, 0]))
    load = cpasync.CopyBulkTensorTileG2SOp()
    return (cpasync.make_tiled_tma_atom(load, q, cute.select(sQ_layout, mode=[0, 1]), (TILE_M, HEAD_DIM)),
            cpasync.make_tiled_tma_atom(load, k, sK_layout, (TILE_N, HEAD_DIM)),
            cpasync.make_tiled_tma_atom(load, vt, sVt_layout, (HEAD_DIM, TILE_N)))


def make_tiled_mmas(dtype):
    """(for S = Q K^T, for O += P V). One tcgen05.mma.cta_group::1 atom each, M = 128, both
    operands from smem, fp32 accumulators in TMEM. S: A (Q) and B (K) K-major. O: A (P) K-major,
    B (V) MN-major."""
    K, MN = cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.MN
    tiled_mma = cute.make_tiled_mma(tcgen05.MmaF16BF16Op(
        dtype, cutlass.Float32, (TILE_M, TILE_N, MMA_K), tcgen05.CtaGroup.ONE,
        tcgen05.OperandSource.SMEM, K, K))
    tiled_mma_pv = cute.make_tiled_mma(tcgen05.MmaF16BF16Op(
        dtype, cutlass.Float32, (TILE_M, HEAD_DIM, MMA_K), tcgen05.CtaGroup.ONE,
        tcgen05.OperandSource.SMEM, K, MN))
    return tiled_mma, tiled_mma_pv


def make_row_copies(acc_tile, columns):
    """TMEM <-> registers for thread i = TMEM lane i (= query row i): ``tcgen05.ld/st.32x32b``,
    ``columns`` 32-bit columns per instruction. In the 32x32b shape warp w may touch only lanes
    32w..32w+31 (a warp's TMEM sub-partition), which is exactly its 32 query rows."""
    load = cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition(columns)), cutlass.Float32)
    store = cute.make_copy_atom(tcgen05.St32x32bOp(tcgen05.Repetition(columns)), cutlass.Float32)
    return tcgen05.make_tmem_copy(load, acc_tile), tcgen05.make_tmem_copy(store, acc_tile)


def row_piece(tile, row, piece):
    """Columns piece * TMEM_CHUNK .. + TMEM_CHUNK - 1 of one row of a (rows, cols) tile: what one
    thread stores per chunk of its row (P to smem, O to global memory)."""
    return cute.local_tile(tile, (1, TMEM_CHUNK), (row, piece))


def tcgen05_fence_before_thread_sync():
    """Order this thread's earlier tcgen05 operations (TMEM loads/stores) before the barrier that
    follows, so that an MMA issued after it by another thread sees them."""
    nvvm.tcgen05_fence(nvvm.Tcgen05FenceKind.BEFORE_THREAD_SYNC)


def tcgen05_fence_after_thread_sync():
    """Order this thread's later tcgen05 operations after the barrier (or mbarrier wait) just
    passed."""
    nvvm.tcgen05_fence(nvvm.Tcgen05FenceKind.AFTER_THREAD_SYNC)


@cute.jit
def host(mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
         softmax_scale: cutlass.Float32, stream):
    """Build layouts, copies and the tiled MMAs; launch one CTA per (query tile, batch, head)."""
    dtype = mQ.element_type
    mQ, mK, mV, mO = (contract.aligned(t) for t in (mQ, mK, mV, mO))
    sQ_layout, sK_layout, sVt_layout, sP_layout = make_smem_layouts()

    SharedStorage = make_shared_storage(dtype, sQ_layout, sK_layout, sVt_layout, sP_layout)
    (tma_Q, tma_mQ), (tma_K, tma_mK), (tma_V, tma_mVt) = make_tma_loads(
        mQ, mK, mV, sQ_layout, sK_layout, sVt_layout)
    tiled_mma, tiled_mma_pv = make_tiled_mmas(dtype)
    grid = (cute.size(mQ.shape[1]) // (NUM_Q_TILES * TILE_M), cute.size(mQ.shape[0]), cute.size(mQ.shape[2]))
    kernel(tma_Q, tma_mQ, tma_K, tma_mK, tma_V, tma_mVt, mO, softmax_scale,
           sQ_layout, sK_layout, sVt_layout, sP_layout, tiled_mma, tiled_mma_pv,
           SharedStorage).launch(
        grid=grid, block=[THREADS, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream)


@cute.kernel
def kernel(tma_Q: cute.CopyAtom, tma_mQ: cute.Tensor, tma_K: cute.CopyAtom, tma_mK: cute.Tensor,
           tma_V: cute.CopyAtom, tma_mVt: cute.Tensor, mO: cute.Tensor,
           softmax_scale: cutlass.Float32,
           sQ_layout: cute.ComposedLayout, sK_layout: cute.ComposedLayout,
           sVt_layout: cute.ComposedLayout, sP_layout: cute.ComposedLayout,
           tiled_mma: cute.TiledMma, tiled_mma_pv: cute.TiledMma, SharedStorage: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    # Prefetch the TMA descriptors (kernel parameters, built on the host) into the descriptor cache
    # now, so that the first copies do not wait to fetch them, as FA4 does: one warp, once per CTA.
    if warp_idx == 0:
        for atom in (tma_Q, tma_K, tma_V):
            cpasync.prefetch_descriptor(atom)
    m_block, batch, head = cute.arch.block_idx()
    # Warps 4g .. 4g+3 run the softmax of Q tile g; within it, thread `row` owns row (= TMEM lane)
    # `row` of S_g and O_g. Warp w touches lanes 32 (w % 4) .. +31: its own quarter.
    q_tile = warp_idx // 4
    row = tidx % TILE_M
    dtype = mO.element_type
    n_blocks = cute.size(tma_mK.shape[0]) // TILE_N

    # This CTA's tiles, as TMA coordinates: gQ (TILE_M, D, Q tiles of the sequence); gK (TILE_N,
    # D, n_blocks); gVt (D, TILE_N, n_blocks). The CTA's Q tiles are NUM_Q_TILES * m_block + g.
    # gO (TILE_M, D, Q tiles of the sequence) is plain global memory.
    gQ = cute.local_tile(tma_mQ[None, None, head, batch], (TILE_M, HEAD_DIM), (None, 0))
    gK = cute.local_tile(tma_mK[None, None, head, batch], (TILE_N, HEAD_DIM), (None, 0))
    gVt = cute.local_tile(tma_mVt[None, None, head, batch], (HEAD_DIM, TILE_N), (0, None))
    gO = cute.local_tile(mO[batch, None, head, None], (TILE_M, HEAD_DIM), (None, 0))

    smem = cutlass.memory.SmemAllocator()
    storage = smem.allocate(SharedStorage)
    # The swizzle (the layouts' inner function) goes with the smem pointer; the descriptors and
    # the copies then see plain (outer) layouts.
    sQ = storage.sQ.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)      # (TILE_M, D, Q tile)
    sK = storage.sK.get_tensor(sK_layout.outer, swizzle=sK_layout.inner)
    sVt = storage.sV.get_tensor(sVt_layout.outer, swizzle=sVt_layout.inner)   # (D, TILE_N): B of P V
    sP = storage.sP.get_tensor(sP_layout.outer, swizzle=sP_layout.inner)      # (TILE_M, TILE_N, Q tile)
    q_full, kv_full = storage.q_full.data_ptr(), storage.kv_full.data_ptr()
    s_done, o_done = storage.s_done.data_ptr(), storage.o_done.data_ptr()

    # Warp 0 allocates TMEM (a warp-wide instruction; the base address lands in smem) and gives up
    # the right to allocate more, so a CTA resident beside this one can allocate too; one thread
    # initializes the mbarriers, each with an arrival count of 1 (the expect-tx arrive, or the
    # commit's arrive). The fence + CTA barrier publish them to every thread and to the TMA.
    if warp_idx == 0:
        cute.arch.alloc_tmem(TMEM_COLS, storage.tmem_base)
        cute.arch.relinquish_tmem_alloc_permit()
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(q_full, 1)
            cute.arch.mbarrier_init(kv_full, 1)
            cute.arch.mbarrier_init(s_done, 1)
            cute.arch.mbarrier_init(o_done, 1)
    cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()
    tmem_base = cute.arch.retrieve_tmem_ptr(cutlass.Float32, 16, storage.tmem_base)

    # TMA partitions: each whole smem tile is one TMA destination; the global side keeps the
    # tile index (for K and V, which tile of the sequence).
    def tma_partition(atom, smem, gmem):
        return cpasync.tma_partition(atom, 0, cute.make_layout(1), cute.group_modes(smem, 0, 2),
                                     cute.group_modes(gmem, 0, 2))
    tQsQ, tQgQ = tma_partition(tma_Q, sQ, gQ)
    tKsK, tKgK = tma_partition(tma_K, sK, gK)
    tVsV, tVgV = tma_partition(tma_V, sVt, gVt)
    q_bytes = cute.size_in_bytes(dtype, sQ_layout)             # both Q tiles, on one barrier phase
    kv_bytes = cute.size_in_bytes(dtype, sK_layout) + cute.size_in_bytes(dtype, sVt_layout)

    # MMA operands: "fragments" of smem operands are UMMA matrix descriptors (address + layout),
    # one per 16-wide k-block (and Q tile). The accumulators are TMEM tensors: S_g at column
    # TMEM_S_COL[g], O_g at TMEM_O_COL[g], lane i = row i of Q tile g. One CTA is one MMA
    # "thread" (cta_group::1), so slice 0.
    thr_mma = tiled_mma.get_slice(0)
    thr_mma_pv = tiled_mma_pv.get_slice(0)
    tSrQ = tiled_mma.make_fragment_A(thr_mma.partition_A(sQ))
    tSrK = tiled_mma.make_fragment_B(thr_mma.partition_B(sK))
    tOrP = tiled_mma_pv.make_fragment_A(thr_mma_pv.partition_A(sP))
    tOrVt = tiled_mma_pv.make_fragment_B(thr_mma_pv.partition_B(sVt))
    tStS = tiled_mma.make_fragment_C(tiled_mma.partition_shape_C((TILE_M, TILE_N)))
    tOtO = tiled_mma_pv.make_fragment_C(tiled_mma_pv.partition_shape_C((TILE_M, HEAD_DIM)))
    tStS = [cute.make_tensor(tmem_base + TMEM_S_COL[g], tStS.layout) for g in range(NUM_Q_TILES)]
    tOtO = [cute.make_tensor(tmem_base + TMEM_O_COL[g], tOtO.layout) for g in range(NUM_Q_TILES)]

    # TMEM <-> registers, TMEM_CHUNK columns of this thread's row per tcgen05.ld/st, for S and O
    # alike (both are fp32 (128 lanes, N columns) tiles). Chunk c of a tile is its first chunk's
    # view moved c * TMEM_CHUNK columns along (a TMEM address counts 32-bit columns). A thread
    # holds one chunk at a time, never a whole 128-column row. The copies are built for the 128
    # threads of one Q tile (slice `row`); this thread's Q tile picks the columns: S_g and O_g
    # are S_0 and O_0 moved by TMEM_S_COL[g] - TMEM_S_COL[0] columns (and likewise for O).
    S_chunk0 = cute.composition(tStS[0][(None, None), 0, 0], cute.make_layout((TILE_M, TMEM_CHUNK)))
    O_chunk0 = cute.composition(tOtO[0][(None, None), 0, 0], cute.make_layout((TILE_M, TMEM_CHUNK)))
    load_chunk, store_chunk = make_row_copies(O_chunk0, TMEM_CHUNK)
    thr_load, thr_store = load_chunk.get_slice(row), store_chunk.get_slice(row)
    s_shift = q_tile * (TMEM_S_COL[1] - TMEM_S_COL[0])
    o_shift = q_tile * (TMEM_O_COL[1] - TMEM_O_COL[0])
    tS_ld = thr_load.partition_S(S_chunk0)
    tS_ld = cute.make_tensor(tS_ld.iterator + s_shift, tS_ld.layout)
    tO_ld, tO_st = thr_load.partition_S(O_chunk0), thr_store.partition_D(O_chunk0)
    tO_ld = cute.make_tensor(tO_ld.iterator + o_shift, tO_ld.layout)
    tO_st = cute.make_tensor(tO_st.iterator + o_shift, tO_st.layout)
    sP_mine = sP[None, None, q_tile]                     # this warpgroup's P tile
    gO_mine = gO[None, None, NUM_Q_TILES * m_block + q_tile]
    r_chunk = cute.make_rmem_tensor(thr_load.partition_D(O_chunk0).shape, cutlass.Float32)
    r_chunk_bf16 = cute.make_rmem_tensor(r_chunk.shape, dtype)
    num_chunks_S, num_chunks_O = TILE_N // TMEM_CHUNK, HEAD_DIM // TMEM_CHUNK

    def chunk(t, c):
        return cute.make_tensor(t.iterator + c * TMEM_CHUNK, t.layout)

    row_max = -cutlass.Float32.inf
    row_sum = cutlass.Float32(0.0)

    # Both Q tiles once: one elected thread arrives on q_full announcing both tiles' bytes; warp 0
    # issues one TMA per Q tile (cute.copy of a TMA atom elects its own single issuing thread, so
    # it sits outside elect_one).
    if warp_idx == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(q_full, q_bytes)
        for g in cutlass.range_constexpr(NUM_Q_TILES):
            cute.copy(tma_Q, tQgQ[None, NUM_Q_TILES * m_block + g], tQsQ[None, g], tma_bar_ptr=q_full)
    # wait: both Q tiles landed (pairs with the expect-tx arrive just above; q_full's first phase,
    # parity 0).
    cute.arch.mbarrier_wait(q_full, 0)

    for n_block in range(n_blocks):
        # K_j and V_j by TMA into sK, sV. No barrier first: the issuing thread has itself waited
        # (below, on o_done) for the P V MMAs of the previous tile, the last readers of sK, sV.
        if warp_idx == 0:
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(kv_full, kv_bytes)
            cute.copy(tma_K, tKgK[None, n_block], tKsK, tma_bar_ptr=kv_full)
            cute.copy(tma_V, tVgV[None, n_block], tVsV, tma_bar_ptr=kv_full)
        # wait: K_j and V_j landed (pairs with the expect-tx arrive above). kv_full completes one
        # phase per tile, so tile j waits for parity j % 2. The TMA writes through the async
        # proxy, as the tensor cores read: no proxy fence, and no CTA barrier before the S MMAs.
        cute.arch.mbarrier_wait(kv_full, n_block % 2)

        # S_g = Q_g K^T for both Q tiles: 8 MMAs each (one per 16 of the head dim), the first
        # overwriting S_g; both read the same sK. Warp 0 issues them (the compiler elects one
        # thread), then one tcgen05.commit to s_done: its next phase completes when all 16 finished.
        if warp_idx == 0:
            tcgen05_fence_after_thread_sync()
            for g in cutlass.range_constexpr(NUM_Q_TILES):
                for kb in cutlass.range_constexpr(cute.size(tSrQ, mode=[2])):
                    tiled_mma.set(tcgen05.Field.ACCUMULATE, kb != 0)
                    cute.gemm(tiled_mma, tStS[g], tSrQ[None, None, kb, g], tSrK[None, None, kb], tStS[g])
            with cute.arch.elect_one():
                tcgen05.commit(s_done)
        # wait: S0 and S1 are in TMEM. Pairs with the arrive of warp 0's tcgen05.commit after the S MMAs on
        # s_done: one phase per tile, parity j % 2.
        cute.arch.mbarrier_wait(s_done, n_block % 2)
        tcgen05_fence_after_thread_sync()

        # Online softmax on this thread's row (TMEM lane `row` of S_g), same formulas as h02; the row is
        # whole in one thread, so no shuffles. Pass 1: the new row max, chunk by chunk.
        m_new = row_max
        for c in cutlass.range_constexpr(num_chunks_S):
            cute.copy(thr_load, chunk(tS_ld, c), r_chunk)
            cute.arch.fence_view_async_tmem_load()       # tcgen05.wait::ld: r_chunk is valid
            chunk_max = r_chunk.load().reduce(cute.ReductionOp.MAX, -cutlass.Float32.inf, 0)
            m_new = cute.arch.fmax(chunk_max, m_new)
        # exp(scale * (m_old - m_new)); the first tile has m_old = -inf, so this is 0.
        rescale = cute.math.exp((row_max - m_new) * softmax_scale)
        row_max = m_new
        # Pass 2: P = exp(scale * (S - m_new)), summed, and stored (bf16) into this thread's row
        # of sP, where the P V MMA reads it back as its A operand.
        tile_sum = cutlass.Float32(0.0)
        for c in cutlass.range_constexpr(num_chunks_S):
            cute.copy(thr_load, chunk(tS_ld, c), r_chunk)
            cute.arch.fence_view_async_tmem_load()
            p = cute.math.exp((r_chunk.load() - m_new) * softmax_scale)
            tile_sum += p.reduce(cute.ReductionOp.ADD, 0.0, 0)
            r_chunk_bf16.store(p.to(dtype))
            cute.autovec_copy(r_chunk_bf16, row_piece(sP_mine, row, c))
        row_sum = row_sum * rescale + tile_sum

        # O *= rescale in TMEM, one chunk at a time (load, scale, store). On the first tile O
        # holds nothing yet: the first P V MMA overwrites it instead, so skip the rescale.
        if n_block > 0:
            for c in cutlass.range_constexpr(num_chunks_O):
                cute.copy(thr_load, chunk(tO_ld, c), r_chunk)
                cute.arch.fence_view_async_tmem_load()
                r_chunk.store(r_chunk.load() * rescale)
                cute.copy(thr_store, r_chunk, chunk(tO_st, c))
            cute.arch.fence_view_async_tmem_store()      # tcgen05.wait::st: O rescaled in TMEM

        # fence: P's generic stores -> the tensor cores' async reads; tcgen05 fence: our TMEM
        # stores before the barrier; barrier: every row of P0, P1 written and of O0, O1 rescaled.
        cute.arch.fence_proxy("async.shared", space="cta")
        tcgen05_fence_before_thread_sync()
        cute.arch.sync_threads()

        # O_g += P_g V for both Q tiles: 8 MMAs each (one per 16 keys), accumulating onto the
        # rescaled O_g (overwriting it on the first tile); both read the same sV. Commit:
        # o_done's next phase completes when all 16 have finished.
        if warp_idx == 0:
            tcgen05_fence_after_thread_sync()
            for g in cutlass.range_constexpr(NUM_Q_TILES):
                for kb in cutlass.range_constexpr(cute.size(tOrP, mode=[2])):
                    tiled_mma_pv.set(tcgen05.Field.ACCUMULATE, n_block > 0 or kb != 0)
                    cute.gemm(tiled_mma_pv, tOtO[g], tOrP[None, None, kb, g], tOrVt[None, None, kb], tOtO[g])
            with cute.arch.elect_one():
                tcgen05.commit(o_done)
        # wait: P V done. Pairs with the arrive of warp 0's tcgen05.commit after the P V MMAs on
        # o_done: one phase per tile, parity j % 2. After it sK, sV, sP may be overwritten and O read.
        cute.arch.mbarrier_wait(o_done, n_block % 2)
        tcgen05_fence_after_thread_sync()

    # Epilogue: O / rowsum, chunk by chunk from TMEM, to bf16, stored from registers to this
    # thread's row of global memory.
    inv_sum = cute.arch.rcp_approx(row_sum)
    for c in cutlass.range_constexpr(num_chunks_O):
        cute.copy(thr_load, chunk(tO_ld, c), r_chunk)
        cute.arch.fence_view_async_tmem_load()
        r_chunk_bf16.store((r_chunk.load() * inv_sum).to(dtype))
        cute.autovec_copy(r_chunk_bf16, row_piece(gO_mine, row, c))

    # Free TMEM: every thread's loads are complete (wait::ld above), fenced before the barrier;
    # then the allocating warp deallocates.
    tcgen05_fence_before_thread_sync()
    cute.arch.sync_threads()
    if warp_idx == 0:
        tcgen05_fence_after_thread_sync()
        cute.arch.dealloc_tmem(tmem_base, TMEM_COLS)


# ------------------------------------------------------------------------------ step facts
# What the harness reads about this step (ladder/contract.py StepInfo): not part of the kernel.
INFO = contract.StepInfo(
    id="b05",
    slug="two_q_tiles",
    title="Two Q tiles per CTA",
    change="a second 128-row Q tile per CTA (2 x 128 rows, 8 warps) sharing every K/V tile load; "
           "TMEM S0, S1, O0, O1 = all 512 columns",
    archs=("sm_100a",),
    enabler=False,
    threads=THREADS,
    tile_m=NUM_Q_TILES * TILE_M,
    tile_n=TILE_N,
    smem_bytes=SMEM_BYTES,
    predecessor="b04",
    sass_present=("UTCHMMA", "UTCBAR", "LDTM", "STTM", "UTMALDG", "MUFU.EX2"),
    sass_absent=("HMMA", "HGMMA", "LDSM", "LDG", "LDGSTS"),
    tmem_cols=TMEM_COLS,
    extra={"bound": {"overlap": "lockstep", "loads": "exposed"},
           "tmem_map": {"S0": (TMEM_S_COL[0], TILE_N), "S1": (TMEM_S_COL[1], TILE_N),
                        "O0": (TMEM_O_COL[0], HEAD_DIM), "O1": (TMEM_O_COL[1], HEAD_DIM)}},
)


attention = contract.make_attention(INFO, host)
