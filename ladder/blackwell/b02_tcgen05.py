"""b02 — tcgen05: Blackwell's own tensor-core instruction, issued by one thread, accumulating in TMEM.

Change from 01: S = Q K^T and O += P V run on ``tcgen05.mma`` (SASS ``UTCHMMA``) instead of
``mma.sync``. One thread issues each MMA for the whole CTA; both operands are read by the tensor
cores straight from shared memory through matrix descriptors (the unswizzled, INTERLEAVE layout:
8-row core matrices of 16 contiguous bytes), and the fp32 accumulators S and O live in *tensor
memory* (TMEM), 128 lanes x 512 columns of 32-bit cells beside the tensor cores, not in registers.
The query tile grows to the instruction's M = 128 rows: TMEM lane i holds row i of S and of O, and
thread i of the 128 reads and writes exactly that lane. Around that:

  * TMEM is allocated by one warp (``tcgen05.alloc``: 256 columns, S in 0-127, O in 128-255; the
    hardware writes the base address to smem) and freed at the end (``tcgen05.dealloc``).
  * MMA completion is signalled by ``tcgen05.commit`` to an mbarrier (SASS ``UTCBAR``); all threads
    wait on it before reading S or overwriting the operands.
  * The softmax reads S with ``tcgen05.ld`` (SASS ``LDTM``) and rescales O in place with
    ``tcgen05.ld`` / ``tcgen05.st`` (``STTM``), 16 columns at a time.

Everything else is as in 01: synchronous copies by all threads into unswizzled smem, the library
exp, P through smem. The softmax arithmetic is h02's (the same formulas, the same exp); only the
row reduction is simpler: one thread owns a whole row, so no shuffles.

Why: 01 spends its time in shared memory: 144 ``ldmatrix.x4`` per warp per K/V tile, each 8-way
bank-conflicted. tcgen05 needs no ldmatrix (the tensor cores fetch core matrices of 128 contiguous
bytes themselves), and its accumulators do not occupy registers, so one thread drives a
128 x 128 x 16 MMA: the work of 128 ``HMMA.16816`` (128*128*16 MACs / 16*8*16 per HMMA), which 01
spreads over 4 warps.

Expect (arithmetic): per CTA and K/V tile the ldmatrix traffic (18,432 wavefronts per 64 query rows
in 01) is gone. What remains in the shared-memory pipe: the synchronous K and V stores, 64 KB in
16-byte stores = 128 warp stores; in the INTERLEAVE layout the 16 threads that copy one 256-byte
row write 16 core matrices whose rows sit at the same offset, so each quarter-warp's 8 threads hit
the same 4 banks and each warp store costs 32 wavefronts, not 4 (step 03 fixes that), plus the
conflict-free P stores. Shared memory stops being
the limit; the synchronous global loads and the fully serial loop (load, MMA, wait, softmax, MMA,
wait) become it. Per 128 query rows and K/V tile the shared-memory pipe goes from 2 x 18,432 =
36,864 ldmatrix wavefronts (01) to the ~4,096 of the K and V stores plus the P stores: expect a clear
gain over 01, bounded by the serial loop rather than by shared memory.

Evidence: ``ladder sass b02 --against 01`` (UTCHMMA, UTCBAR, LDTM, STTM appear; HMMA and LDSM gone);
tests/test_blackwell_steps.py (TMEM columns a power of two in 32..512; each warp touches only its
own 32 TMEM lanes; descriptor layout type); writeups/blackwell/02-tcgen05.md. Compiled, not yet run
on a B200.
"""

import cutlass
import cutlass.cute as cute
from cutlass._mlir.dialects import nvvm
from cutlass.cute.nvgpu import tcgen05

from ladder import contract

# Tile shapes (named, not magic): one CTA = one 128-row query tile, walking K/V in 128-row tiles.
TILE_M = 128           # query rows per CTA: the M of tcgen05.mma.cta_group::1, one TMEM lane each
TILE_N = 128           # key/value rows per iteration
HEAD_DIM = 128
MMA_K = 16             # bf16 tcgen05.mma consumes 16 of the reduction dim per instruction
NUM_WARPS = 4          # 4 warps x 32 lanes = the 128 TMEM lanes, one thread per query row
THREADS = NUM_WARPS * 32
COPY_BITS = 128        # one synchronous global->smem copy per thread moves 16 bytes = 8 bf16
ELEMS_PER_COPY = COPY_BITS // 16
# Columns per tcgen05.ld/st of S or O (16 registers). 32 also compiles without spills, at more
# registers; 16 is what FA4 uses to rescale O.
TMEM_CHUNK = 16

# TMEM: fp32 S (TILE_N columns) then fp32 O (HEAD_DIM columns). Allocations are powers of two.
TMEM_S_COL = 0
TMEM_O_COL = TILE_N
TMEM_COLS = 256

# smem: Q + K + V + P, all bf16, in tcgen05's unswizzled (INTERLEAVE) layout.
SMEM_BYTES = 2 * (TILE_M * HEAD_DIM + 2 * TILE_N * HEAD_DIM + TILE_M * TILE_N)


def _umma_layout(kind, shape, mn_major=False):
    """Tile a tcgen05 smem layout atom over ``shape``; an MN-major operand is tiled along its
    contiguous (first) mode first."""
    atom = tcgen05.make_smem_layout_atom(kind, cutlass.BFloat16)
    return cute.tile_to_shape(atom, shape, (1, 0) if mn_major else (0, 1))


def make_smem_layouts():
    """(sQ, sK, sVt, sP) in layouts the UMMA descriptors can describe, without swizzle (step 03
    adds it): core matrices of 8 rows x 16 contiguous bytes (INTERLEAVE). Q, K (A/B of S) and P
    (A of O) are K-major; V, the B operand of O += P V shaped (D, keys), has the head dim
    contiguous in memory, so it is MN-major."""
    no_swizzle_k = tcgen05.SmemLayoutAtomKind.K_INTER
    no_swizzle_mn = tcgen05.SmemLayoutAtomKind.MN_INTER
    sQ = _umma_layout(no_swizzle_k, (TILE_M, HEAD_DIM))
    sK = _umma_layout(no_swizzle_k, (TILE_N, HEAD_DIM))
    sVt = _umma_layout(no_swizzle_mn, (HEAD_DIM, TILE_N), mn_major=True)
    sP = _umma_layout(no_swizzle_k, (TILE_M, TILE_N))
    return sQ, sK, sVt, sP


def make_shared_storage(dtype, sQ_layout, sK_layout, sVt_layout, sP_layout):
    """The CTA's shared memory, as a struct (its size is the launch's dynamic smem)."""
    @cute.struct
    class SharedStorage:
        sQ: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sQ_layout)], 128]
        sK: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sK_layout)], 128]
        sV: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sVt_layout)], 128]
        sP: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sP_layout)], 128]
        # mma_done: tcgen05.commit arrives here when the MMAs issued before it have completed.
        mma_done: cute.struct.MemRange[cutlass.Int64, 1]
        # tcgen05.alloc writes the TMEM base address here.
        tmem_base: cutlass.Int32
    return SharedStorage


def make_gmem_copy(dtype):
    """Global -> smem: a plain (synchronous) 16-byte copy; 16 threads cover one 256-byte row, so a
    warp reads two whole rows per instruction (coalesced)."""
    copy_atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), dtype, num_bits_per_copy=COPY_BITS)
    threads_per_row = HEAD_DIM // ELEMS_PER_COPY
    return cute.make_tiled_copy_tv(
        copy_atom,
        cute.make_layout((THREADS // threads_per_row, threads_per_row), stride=(threads_per_row, 1)),
        cute.make_layout((1, ELEMS_PER_COPY)),
    )


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


def transpose_view(t):
    """The same smem with its two modes swapped: (i, j) -> t(j, i)."""
    rows, cols = cute.size(t, mode=[0]), cute.size(t, mode=[1])
    return cute.composition(t, cute.make_layout((cols, rows), stride=(rows, 1)))


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
    tiled_mma, tiled_mma_pv = make_tiled_mmas(dtype)
    grid = (cute.size(mQ.shape[1]) // TILE_M, cute.size(mQ.shape[0]), cute.size(mQ.shape[2]))
    kernel(mQ, mK, mV, mO, softmax_scale, sQ_layout, sK_layout, sVt_layout, sP_layout,
           make_gmem_copy(dtype), tiled_mma, tiled_mma_pv, SharedStorage).launch(
        grid=grid, block=[THREADS, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream)


@cute.kernel
def kernel(mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
           softmax_scale: cutlass.Float32,
           sQ_layout: cute.ComposedLayout, sK_layout: cute.ComposedLayout,
           sVt_layout: cute.ComposedLayout, sP_layout: cute.ComposedLayout,
           gmem_copy: cute.TiledCopy, tiled_mma: cute.TiledMma, tiled_mma_pv: cute.TiledMma,
           SharedStorage: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    m_block, batch, head = cute.arch.block_idx()
    dtype = mQ.element_type
    n_blocks = cute.size(mK.shape[1]) // TILE_N

    # This CTA's tiles in global memory: gQ (TILE_M, D); gK, gV (TILE_N, D, n_blocks); gO (TILE_M, D).
    gQ = cute.local_tile(mQ[batch, None, head, None], (TILE_M, HEAD_DIM), (m_block, 0))
    gK = cute.local_tile(mK[batch, None, head, None], (TILE_N, HEAD_DIM), (None, 0))
    gV = cute.local_tile(mV[batch, None, head, None], (TILE_N, HEAD_DIM), (None, 0))
    gO = cute.local_tile(mO[batch, None, head, None], (TILE_M, HEAD_DIM), (m_block, 0))

    smem = cutlass.memory.SmemAllocator()
    storage = smem.allocate(SharedStorage)
    # The swizzle (the layouts' inner function, trivial here) goes with the smem pointer; the
    # descriptors and the copies then see plain (outer) layouts.
    sQ = storage.sQ.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)
    sK = storage.sK.get_tensor(sK_layout.outer, swizzle=sK_layout.inner)
    sVt = storage.sV.get_tensor(sVt_layout.outer, swizzle=sVt_layout.inner)   # (D, TILE_N): B of P V
    sP = storage.sP.get_tensor(sP_layout.outer, swizzle=sP_layout.inner)
    sV = transpose_view(sVt)                    # the same bytes as (TILE_N, D), for the copy
    mma_done = storage.mma_done.data_ptr()

    # Warp 0 allocates TMEM (a warp-wide instruction; the base address lands in smem) and gives up
    # the right to allocate more, so a CTA resident beside this one can allocate too; one thread
    # initializes the mbarrier. The fence + CTA barrier publish both to every thread.
    if warp_idx == 0:
        cute.arch.alloc_tmem(TMEM_COLS, storage.tmem_base)
        cute.arch.relinquish_tmem_alloc_permit()
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(mma_done, 1)
    cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()
    tmem_base = cute.arch.retrieve_tmem_ptr(cutlass.Float32, 16, storage.tmem_base)

    # Synchronous copies: each thread's slice of every global tile and its smem destination.
    thr_copy = gmem_copy.get_slice(tidx)
    tQgQ, tQsQ = thr_copy.partition_S(gQ), thr_copy.partition_D(sQ)
    tKgK, tKsK = thr_copy.partition_S(gK), thr_copy.partition_D(sK)
    tVgV, tVsV = thr_copy.partition_S(gV), thr_copy.partition_D(sV)

    # MMA operands: "fragments" of smem operands are UMMA matrix descriptors (address + layout),
    # one per 16-wide k-block. The accumulators are TMEM tensors: S at column TMEM_S_COL, O at
    # TMEM_O_COL, lane i = row i. One CTA is one MMA "thread" (cta_group::1), so slice 0.
    thr_mma = tiled_mma.get_slice(0)
    thr_mma_pv = tiled_mma_pv.get_slice(0)
    tSrQ = tiled_mma.make_fragment_A(thr_mma.partition_A(sQ))
    tSrK = tiled_mma.make_fragment_B(thr_mma.partition_B(sK))
    tOrP = tiled_mma_pv.make_fragment_A(thr_mma_pv.partition_A(sP))
    tOrVt = tiled_mma_pv.make_fragment_B(thr_mma_pv.partition_B(sVt))
    tStS = tiled_mma.make_fragment_C(tiled_mma.partition_shape_C((TILE_M, TILE_N)))
    tOtO = tiled_mma_pv.make_fragment_C(tiled_mma_pv.partition_shape_C((TILE_M, HEAD_DIM)))
    tStS = cute.make_tensor(tmem_base + TMEM_S_COL, tStS.layout)
    tOtO = cute.make_tensor(tmem_base + TMEM_O_COL, tOtO.layout)

    # TMEM <-> registers, TMEM_CHUNK columns of this thread's row per tcgen05.ld/st, for S and O
    # alike (both are fp32 (128 lanes, N columns) tiles). Chunk c of a tile is its first chunk's
    # view moved c * TMEM_CHUNK columns along (a TMEM address counts 32-bit columns). A thread
    # holds one chunk at a time, never a whole 128-column row.
    S_chunk0 = cute.composition(tStS[(None, None), 0, 0], cute.make_layout((TILE_M, TMEM_CHUNK)))
    O_chunk0 = cute.composition(tOtO[(None, None), 0, 0], cute.make_layout((TILE_M, TMEM_CHUNK)))
    load_chunk, store_chunk = make_row_copies(O_chunk0, TMEM_CHUNK)
    thr_load, thr_store = load_chunk.get_slice(tidx), store_chunk.get_slice(tidx)
    tS_ld = thr_load.partition_S(S_chunk0)
    tO_ld, tO_st = thr_load.partition_S(O_chunk0), thr_store.partition_D(O_chunk0)
    r_chunk = cute.make_rmem_tensor(thr_load.partition_D(O_chunk0).shape, cutlass.Float32)
    r_chunk_bf16 = cute.make_rmem_tensor(r_chunk.shape, dtype)
    num_chunks_S, num_chunks_O = TILE_N // TMEM_CHUNK, HEAD_DIM // TMEM_CHUNK

    def chunk(t, c):
        return cute.make_tensor(t.iterator + c * TMEM_CHUNK, t.layout)

    row_max = -cutlass.Float32.inf
    row_sum = cutlass.Float32(0.0)

    # Q once, synchronously. It becomes visible to the tensor cores at the first fence + barrier.
    cute.copy(gmem_copy, tQgQ, tQsQ)

    for n_block in range(n_blocks):
        # No barrier needed before overwriting sK/sV/sP: every thread has waited (below, on
        # mma_done) for the P V MMAs, the last readers of the previous tiles.
        cute.copy(gmem_copy, tKgK[None, None, None, n_block], tKsK)
        cute.copy(gmem_copy, tVgV[None, None, None, n_block], tVsV)
        # The tensor cores read smem through the async proxy: make these generic-proxy stores
        # visible to it, then barrier: sK, sV (and sQ on the first iteration) written by all.
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.sync_threads()

        # S = Q K^T: 8 MMAs (one per 16 of the head dim), the first overwriting S. Warp 0 issues
        # them (the compiler elects one thread), then tcgen05.commit: mma_done's next phase
        # completes when they have all finished.
        if warp_idx == 0:
            tcgen05_fence_after_thread_sync()
            for kb in cutlass.range_constexpr(cute.size(tSrQ, mode=[2])):
                tiled_mma.set(tcgen05.Field.ACCUMULATE, kb != 0)
                cute.gemm(tiled_mma, tStS, tSrQ[None, None, kb], tSrK[None, None, kb], tStS)
            with cute.arch.elect_one():
                tcgen05.commit(mma_done)
        # wait: S is in TMEM. Pairs with the arrive of warp 0's tcgen05.commit after the S MMAs;
        # mma_done completes twice per tile, S first: phase 2j, parity 0.
        cute.arch.mbarrier_wait(mma_done, 0)
        tcgen05_fence_after_thread_sync()

        # Online softmax on this thread's row (TMEM lane tidx), same formulas as h02; the row is
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
            cute.autovec_copy(r_chunk_bf16, row_piece(sP, tidx, c))
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
        # stores before the barrier; barrier: every row of P written and of O rescaled.
        cute.arch.fence_proxy("async.shared", space="cta")
        tcgen05_fence_before_thread_sync()
        cute.arch.sync_threads()

        # O += P V: 8 MMAs (one per 16 keys), accumulating onto the rescaled O (overwriting it on
        # the first tile). Commit: mma_done's next phase completes when they have finished.
        if warp_idx == 0:
            tcgen05_fence_after_thread_sync()
            for kb in cutlass.range_constexpr(cute.size(tOrP, mode=[2])):
                tiled_mma_pv.set(tcgen05.Field.ACCUMULATE, n_block > 0 or kb != 0)
                cute.gemm(tiled_mma_pv, tOtO, tOrP[None, None, kb], tOrVt[None, None, kb], tOtO)
            with cute.arch.elect_one():
                tcgen05.commit(mma_done)
        # wait: P V done. Pairs with the arrive of warp 0's second tcgen05.commit of the tile:
        # phase 2j + 1, parity 1. After it sK, sV, sP may be overwritten and O read.
        cute.arch.mbarrier_wait(mma_done, 1)
        tcgen05_fence_after_thread_sync()

    # Epilogue: O / rowsum, chunk by chunk from TMEM, to bf16, stored from registers to this
    # thread's row of global memory.
    inv_sum = cute.arch.rcp_approx(row_sum)
    for c in cutlass.range_constexpr(num_chunks_O):
        cute.copy(thr_load, chunk(tO_ld, c), r_chunk)
        cute.arch.fence_view_async_tmem_load()
        r_chunk_bf16.store((r_chunk.load() * inv_sum).to(dtype))
        cute.autovec_copy(r_chunk_bf16, row_piece(gO, tidx, c))

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
    id="b02",
    slug="tcgen05",
    title="tcgen05 + TMEM",
    change="tcgen05.mma issued by one thread; S and O accumulate in TMEM (alloc/free, commit to an "
           "mbarrier, tcgen05.ld/st); 128-row Q tile",
    archs=("sm_100a",),
    enabler=False,
    threads=THREADS,
    tile_m=TILE_M,
    tile_n=TILE_N,
    smem_bytes=SMEM_BYTES,
    predecessor="01",
    sass_present=("UTCHMMA", "UTCBAR", "LDTM", "STTM", "MUFU.EX2"),
    sass_absent=("HMMA", "HGMMA", "LDSM", "UTMALDG", "LDGSTS"),
    tmem_cols=TMEM_COLS,
    extra={"bound": {"overlap": "serial", "loads": "exposed"},
           "tmem_map": {"S": (TMEM_S_COL, TILE_N), "O": (TMEM_O_COL, HEAD_DIM)}},
)


attention = contract.make_attention(INFO, host)
