"""01 — the naive baseline: warp-level ``mma.sync`` tensor cores, everything else as plain as it gets.

Change from the previous step: none; this is where both tracks (Hopper ``h02..``, Blackwell ``b02..``)
start. It is a complete FlashAttention forward (online softmax, one pass over K/V), written so that
every later step has one obvious thing to fix.

What it does, per CTA of 128 threads (4 warps) and one 64-row query tile of one (batch, head):
  * Q (64x128), then each K and V tile (128x128) are copied by all threads, synchronously
    (global -> registers -> shared, 16 B per thread per copy), into row-major, unswizzled smem.
  * S = Q K^T and O += P V run on ``mma.sync.m16n8k16`` (SASS ``HMMA.16816.F32.BF16``); each warp
    owns 16 query rows. Operands go smem -> registers with ``ldmatrix`` (SASS ``LDSM``).
  * Online softmax in fp32 registers, with the library ``exp`` (``cute.math.exp``: a range-reduced
    expf, a few FFMAs around each ``MUFU.EX2``), max/sum reduced across the 4 threads of a row.
  * P (bf16) goes back through shared memory to become the A operand of P V.

Why it is slow (each item is a later step):
  * ``mma.sync`` is Ampere's warp-level MMA; Hopper's ``wgmma`` / Blackwell's ``tcgen05.mma`` are the
    architecture's own, asynchronous, larger tensor-core instructions (step 02).
  * Unswizzled 256-byte rows put the 8 rows an ``ldmatrix`` reads in one bank group: 8-way
    conflicts. Step 02 takes ldmatrix off the MMA path (wgmma / tcgen05 read smem through
    descriptors); step 03 swizzles the layouts that remain.
  * Every thread stalls on its own global loads, and nothing overlaps loading with math
    (steps 04, 07, 08). The library exp costs extra FMAs per score (step 10).
  * P makes a round trip through smem (step 06); softmax and MMA never overlap (step 09).

Expect (arithmetic): shared-memory wavefronts, not tensor cores, set the speed. Per K/V tile each warp
issues 144 ``ldmatrix.x4`` (Q 8, K 64, P 8, V 64). One x4 reads four 8x8 matrices: 4 wavefronts when
conflict-free, but with 256-byte rows the 8 rows of a matrix sit in the same 4 banks, so each matrix
costs 8 wavefronts, 32 per instruction. Per CTA and K/V tile: 4 x 144 x 32 = 18,432 wavefronts for
4 x 64 x 128 x 128 = 4.19 MFLOP; an SM serves one wavefront per clock, so at most 227 FLOP/clk/SM,
about 59 TFLOP/s on 132 SMs at 1.98 GHz (the maximum SM clock): 59 / ~700 = at most ~0.08 of FA4,
less with the copies and the softmax on top.

Evidence: ``ladder sass 01`` (HMMA.16816.F32.BF16, LDSM, MUFU.EX2; no HGMMA/UTCHMMA);
``ladder run 01`` / results/h200.json; writeups/01-naive-mma-sync.md.
"""

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import warp

from ladder import contract

# Tile shapes (named, not magic): one CTA = one 64-row query tile, walking K/V in 128-row tiles.
TILE_M = 64            # query rows per CTA: 4 warps x 16 rows (the m16 of mma.m16n8k16)
TILE_N = 128           # key/value rows per iteration
HEAD_DIM = 128
NUM_WARPS = 4
THREADS = NUM_WARPS * 32
COPY_BITS = 128        # one synchronous global->smem copy per thread moves 16 bytes = 8 bf16
ELEMS_PER_COPY = COPY_BITS // 16

# smem: Q + K + V + P, all bf16, unswizzled row-major.
SMEM_BYTES = 2 * (TILE_M * HEAD_DIM + 2 * TILE_N * HEAD_DIM + TILE_M * TILE_N)


def make_smem_layouts():
    """(sQ, sK, sVt, sP): plain row-major tiles, no swizzle, no padding (step 03 changes this).
    V is described as the B operand of O += P V, shaped (D, keys); in memory it is still V's
    row-major (keys, D) tile, so the head dim is the contiguous mode."""
    sQ = cute.make_layout((TILE_M, HEAD_DIM), stride=(HEAD_DIM, 1))
    sK = cute.make_layout((TILE_N, HEAD_DIM), stride=(HEAD_DIM, 1))
    sVt = cute.make_layout((HEAD_DIM, TILE_N), stride=(1, HEAD_DIM))
    sP = cute.make_layout((TILE_M, TILE_N), stride=(TILE_N, 1))
    return sQ, sK, sVt, sP


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
    """(for S = Q K^T, for O += P V). Tensor cores: mma.sync m16n8k16, 4 warps stacked along M
    (16 query rows each); the N permutation of 16 lets one ldmatrix.x4 feed two n8 atoms of B.
    Both GEMMs use the same one."""
    tiled_mma = cute.make_tiled_mma(
        warp.MmaF16BF16Op(dtype, cutlass.Float32, (16, 8, 16)),
        (NUM_WARPS, 1, 1),
        permutation_mnk=(NUM_WARPS * 16, 16, 16),
    )
    return tiled_mma, tiled_mma


def make_fragment_store(dtype, tiled_mma):
    """Registers -> memory (P to smem, O to global): each thread stores its accumulator-shaped
    values as they lie in its registers."""
    return cute.make_tiled_copy_C(cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), dtype), tiled_mma)


def transpose_view(t):
    """The same smem with its two modes swapped: (i, j) -> t(j, i)."""
    rows, cols = cute.size(t, mode=[0]), cute.size(t, mode=[1])
    return cute.composition(t, cute.make_layout((cols, rows), stride=(rows, 1)))


@cute.jit
def host(mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
         softmax_scale: cutlass.Float32, stream):
    """Build layouts, copies and the tiled MMAs; launch one CTA per (query tile, batch, head)."""
    dtype = mQ.element_type
    mQ, mK, mV, mO = (contract.aligned(t) for t in (mQ, mK, mV, mO))
    sQ_layout, sK_layout, sVt_layout, sP_layout = make_smem_layouts()

    @cute.struct
    class SharedStorage:
        sQ: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sQ_layout)], 128]
        sK: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sK_layout)], 128]
        sV: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sVt_layout)], 128]
        sP: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sP_layout)], 128]

    tiled_mma, tiled_mma_pv = make_tiled_mmas(dtype)
    grid = (cute.size(mQ.shape[1]) // TILE_M, cute.size(mQ.shape[0]), cute.size(mQ.shape[2]))
    kernel(mQ, mK, mV, mO, softmax_scale, sQ_layout, sK_layout, sVt_layout, sP_layout,
           make_gmem_copy(dtype), tiled_mma, tiled_mma_pv, SharedStorage).launch(
        grid=grid, block=[THREADS, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream)


@cute.kernel
def kernel(mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
           softmax_scale: cutlass.Float32,
           sQ_layout: cute.Layout, sK_layout: cute.Layout, sVt_layout: cute.Layout,
           sP_layout: cute.Layout, gmem_copy: cute.TiledCopy, tiled_mma: cute.TiledMma,
           tiled_mma_pv: cute.TiledMma, SharedStorage: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
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
    sQ = storage.sQ.get_tensor(sQ_layout)
    sK = storage.sK.get_tensor(sK_layout)
    sVt = storage.sV.get_tensor(sVt_layout)    # (D, TILE_N): the B operand of O += P V
    sP = storage.sP.get_tensor(sP_layout)
    sV = transpose_view(sVt)                    # the same bytes as (TILE_N, D), for the copy

    # Synchronous copies: each thread's slice of every global tile and its smem destination.
    thr_copy = gmem_copy.get_slice(tidx)
    tQgQ, tQsQ = thr_copy.partition_S(gQ), thr_copy.partition_D(sQ)
    tKgK, tKsK = thr_copy.partition_S(gK), thr_copy.partition_D(sK)
    tVgV, tVsV = thr_copy.partition_S(gV), thr_copy.partition_D(sV)

    # MMA fragments. S and O accumulate in fp32 registers; each warp holds 16 rows of each.
    thr_mma = tiled_mma.get_slice(tidx)
    thr_mma_pv = tiled_mma_pv.get_slice(tidx)
    tSrQ = thr_mma.make_fragment_A(thr_mma.partition_A(sQ))
    tSrK = thr_mma.make_fragment_B(thr_mma.partition_B(sK))
    tOrP = thr_mma_pv.make_fragment_A(thr_mma_pv.partition_A(sP))
    tOrVt = thr_mma_pv.make_fragment_B(thr_mma_pv.partition_B(sVt))
    acc_S = cute.make_rmem_tensor(thr_mma.partition_shape_C((TILE_M, TILE_N)), cutlass.Float32)
    acc_O = cute.make_rmem_tensor(thr_mma_pv.partition_shape_C((TILE_M, HEAD_DIM)), cutlass.Float32)
    acc_O.fill(0.0)

    # smem -> registers with ldmatrix (x4); V is read transposed (.trans) to give V^T fragments.
    ldsm = cute.make_copy_atom(warp.LdMatrix8x8x16bOp(transpose=False, num_matrices=4), dtype)
    ldsm_t = cute.make_copy_atom(warp.LdMatrix8x8x16bOp(transpose=True, num_matrices=4), dtype)
    copy_Q = cute.make_tiled_copy_A(ldsm, tiled_mma).get_slice(tidx)
    copy_K = cute.make_tiled_copy_B(ldsm, tiled_mma).get_slice(tidx)
    copy_P = cute.make_tiled_copy_A(ldsm, tiled_mma_pv).get_slice(tidx)
    copy_Vt = cute.make_tiled_copy_B(ldsm_t, tiled_mma_pv).get_slice(tidx)
    tSsQ, tSrQ_view = copy_Q.partition_S(sQ), copy_Q.retile(tSrQ)
    tSsK, tSrK_view = copy_K.partition_S(sK), copy_K.retile(tSrK)
    tOsP, tOrP_view = copy_P.partition_S(sP), copy_P.retile(tOrP)
    tOsVt, tOrVt_view = copy_Vt.partition_S(sVt), copy_Vt.retile(tOrVt)

    store_P = make_fragment_store(dtype, tiled_mma).get_slice(tidx)
    tPsP = store_P.partition_D(sP)

    # Row statistics of the online softmax. A thread holds 2 rows per 16-row MMA tile
    # (rows r and r+8 of the m16n8 accumulator), so 2 x (TILE_M / 64) = 2 rows here.
    S_mn = _mn_view(acc_S)
    O_mn = _mn_view(acc_O)
    rows_per_thread = cute.size(S_mn, mode=[0])
    row_max = cute.make_rmem_tensor(rows_per_thread, cutlass.Float32)
    row_sum = cute.make_rmem_tensor(rows_per_thread, cutlass.Float32)
    row_max.fill(-cutlass.Float32.inf)
    row_sum.fill(0.0)

    # Q once, synchronously. It becomes visible to other warps at the first barrier below.
    cute.copy(gmem_copy, tQgQ, tQsQ)

    for n_block in range(n_blocks):
        # barrier: every warp is done reading sK/sV/sP of the previous iteration before we overwrite.
        cute.arch.sync_threads()
        cute.copy(gmem_copy, tKgK[None, None, None, n_block], tKsK)
        cute.copy(gmem_copy, tVgV[None, None, None, n_block], tVsV)
        # barrier: sK, sV (and sQ on the first iteration) written by all threads, visible to all.
        cute.arch.sync_threads()

        # S = Q K^T, one k-block (16 of the head dim) at a time: ldmatrix both operands, then MMA.
        acc_S.fill(0.0)
        for kb in cutlass.range_constexpr(cute.size(tSsQ, mode=[2])):
            cute.copy(copy_Q, tSsQ[None, None, kb], tSrQ_view[None, None, kb])
            cute.copy(copy_K, tSsK[None, None, kb], tSrK_view[None, None, kb])
            cute.gemm(tiled_mma, acc_S, tSrQ[None, None, kb], tSrK[None, None, kb], acc_S)

        # Online softmax, row by row: new max, rescale O and the running sum, exponentiate S.
        for r in cutlass.range_constexpr(rows_per_thread):
            s_row = S_mn[r, None].load()
            m_new = _quad_allreduce(_row_max(S_mn[r, None], row_max[r]), cute.arch.fmax)
            # exp(scale * (m_old - m_new)); the first tile has m_old = -inf, so this is 0.
            rescale = cute.math.exp((row_max[r] - m_new) * softmax_scale)
            p_row = cute.math.exp((s_row - m_new) * softmax_scale)
            row_sum[r] = row_sum[r] * rescale + p_row.reduce(cute.ReductionOp.ADD, 0.0, 0)
            row_max[r] = m_new
            S_mn[r, None] = p_row
            O_mn[r, None] = O_mn[r, None].load() * rescale

        # P (bf16) to smem, where the P V MMA reads it back as its A operand.
        rP = cute.make_fragment_like(acc_S, dtype)
        rP.store(acc_S.load().to(dtype))
        cute.copy(store_P, store_P.retile(rP), tPsP)
        # barrier: P written by every thread before any warp ldmatrix-es it. (A warp only reads
        # its own 16 rows, so a warp barrier would do; the baseline keeps the plain CTA barrier.)
        cute.arch.sync_threads()

        # O += P V, one k-block (16 keys) at a time.
        for kb in cutlass.range_constexpr(cute.size(tOsP, mode=[2])):
            cute.copy(copy_P, tOsP[None, None, kb], tOrP_view[None, None, kb])
            cute.copy(copy_Vt, tOsVt[None, None, kb], tOrVt_view[None, None, kb])
            cute.gemm(tiled_mma_pv, acc_O, tOrP[None, None, kb], tOrVt[None, None, kb], acc_O)

    # Epilogue: O / rowsum, to bf16, stored straight from registers to global memory.
    for r in cutlass.range_constexpr(rows_per_thread):
        total = _quad_allreduce(row_sum[r], lambda a, b: a + b)
        O_mn[r, None] = O_mn[r, None].load() * cute.arch.rcp_approx(total)
    rO = cute.make_fragment_like(acc_O, dtype)
    rO.store(acc_O.load().to(dtype))
    store_O = make_fragment_store(dtype, tiled_mma_pv).get_slice(tidx)
    cute.copy(store_O, store_O.retile(rO), store_O.partition_D(gO))


def _row_max(row, init):
    """max(init, this thread's elements of one row of S) in four independent chains of max.f32
    (FMNMX), folded at the end, as FA4 reduces a row. A single chain makes every FMNMX wait for
    the one before it; ReductionOp.MAX lowers to NaN-propagating FMNMX.NAN in longer chains. The
    max heads the softmax's chain of dependent work, so its latency is time on every tile."""
    chains = [row[k] for k in range(4)]
    for c in range(4, cute.size(row), 4):
        for k in range(4):
            chains[k] = cute.arch.fmax(chains[k], row[c + k])
    return cute.arch.fmax(cute.arch.fmax(cute.arch.fmax(chains[0], chains[1]),
                                         cute.arch.fmax(chains[2], chains[3])), init)


def _quad_allreduce(value, op):
    """Reduce across the 4 lanes that hold one accumulator row (lanes 4i..4i+3 of a warp)."""
    value = op(value, cute.arch.shuffle_sync_bfly(value, offset=2))
    value = op(value, cute.arch.shuffle_sync_bfly(value, offset=1))
    return value


def _mn_view(acc: cute.Tensor) -> cute.Tensor:
    """View an m16n8 accumulator fragment ((2, 2), MMA_M, MMA_N) as (rows, cols) of this thread.

    In the value mode, the inner 2 are two adjacent columns and the outer 2 are rows r and r+8.
    """
    layout = cute.make_layout(acc.layout.shape)
    mn = cute.make_layout(
        ((layout.shape[0][1], layout.shape[1]), (layout.shape[0][0], layout.shape[2])),
        stride=((layout.stride[0][1], layout.stride[1]), (layout.stride[0][0], layout.stride[2])),
    )
    return cute.make_tensor(acc.iterator, cute.composition(acc.layout, mn))


# ------------------------------------------------------------------------------ step facts
# What the harness reads about this step (ladder/contract.py StepInfo): not part of the kernel.
INFO = contract.StepInfo(
    id="01",
    slug="naive_mma_sync",
    title="Naive baseline (mma.sync)",
    change="warp-level mma.sync; synchronous copies into unswizzled smem; library exp; P through smem",
    archs=("sm_90a", "sm_100a"),
    enabler=False,
    threads=THREADS,
    tile_m=TILE_M,
    tile_n=TILE_N,
    smem_bytes=SMEM_BYTES,
    predecessor=None,
    sass_present=("HMMA", "LDSM", "MUFU.EX2"),
    sass_absent=("HGMMA", "UTCHMMA", "UTMALDG", "LDGSTS"),
    # For the bound model (harness/model/bound.py): how this kernel's roles overlap, and whether a tile's
    # loads are waited for. A fact about the kernel, not read by it (not part of its code hash).
    extra={"bound": {"overlap": "serial", "loads": "exposed", "ldsm_conflict": 8}}
)


attention = contract.make_attention(INFO, host)
