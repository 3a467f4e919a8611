"""h02 — wgmma: Hopper's own tensor-core instruction, issued by a whole warpgroup.

Change from 01: S = Q K^T and O += P V run on ``wgmma.mma_async`` (SASS ``HGMMA.64x128x16.F32.BF16``)
instead of ``mma.sync``. The 4 warps act as one warpgroup that owns all 64 query rows; both operands
(SS) are read by the tensor cores straight from shared memory through matrix descriptors, and the
fp32 accumulators stay in registers. Shared memory therefore takes the layout wgmma reads without a
swizzle (8x8 "core matrices" of 128 contiguous bytes, the INTERLEAVE mode), and every smem write
the tensor cores will read is followed by ``fence.proxy.async`` before the barrier. Everything else
is as in 01: synchronous copies, the library exp, P through smem.

Why: 01 spends its time in shared memory, not in math: 144 ``ldmatrix.x4`` per warp per K/V tile,
each 8-way bank-conflicted (32 wavefronts instead of 4). wgmma needs no ldmatrix at all; the
tensor cores fetch core matrices (128 contiguous bytes each: conflict-free) themselves. One
``HGMMA.64x128x16`` replaces 64 ``HMMA.16816`` (16 in each of the 4 warps), asynchronously.

Expect (arithmetic): per CTA and K/V tile the ldmatrix traffic (18,432 wavefronts) is gone. What
remains in the shared-memory pipe: the synchronous K and V stores, 64 KB in 16-byte stores =
128 warp stores. In the INTERLEAVE layout the 16 threads that copy one 256-byte row write 16 core
matrices whose rows all sit at the same offset; a 16-byte warp store is served a quarter-warp at a
time and each quarter's 8 threads hit the same 4 banks, so each warp store costs 32 wavefronts, not
4: ~4,096 per tile (step 03 fixes that), + 128 for P: 4,224, 4.7x fewer than 01's 19,968. Two ends:
shared memory the only limit (4.19 MFLOP / 4,224 cycles), ~0.37x of FA4; nothing overlapping, ~1,150
cycles of exposed load + 4,224 of stores + 1,024 of MMA + 1,129 instructions per warp at one per 2
cycles = ~8,650 cycles per tile, ~0.18x. Expect 0.18-0.37x of FA4, three to six times 01.

Evidence: ``ladder sass h02 --against 01`` (HGMMA replaces HMMA; LDSM gone; WARPGROUP.ARRIVE /
DEPBAR); ``ladder profile h02``; results/h200.json; writeups/hopper/02-wgmma.md.
"""

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import warpgroup

from ladder import contract

# Tile shapes (named, not magic): one CTA = one 64-row query tile, walking K/V in 128-row tiles.
TILE_M = 64            # query rows per CTA: one warpgroup, the M=64 of wgmma.m64nNk16
TILE_N = 128           # key/value rows per iteration
HEAD_DIM = 128
NUM_WARPS = 4          # one warpgroup
THREADS = NUM_WARPS * 32
WARPGROUP_THREADS = 128          # threads that issue one wgmma together: 4 warps
COPY_BITS = 128        # one synchronous global->smem copy per thread moves 16 bytes = 8 bf16
ELEMS_PER_COPY = COPY_BITS // 16

# smem: Q + K + V + P, all bf16, in wgmma's unswizzled (INTERLEAVE) layout.
SMEM_BYTES = 2 * (TILE_M * HEAD_DIM + 2 * TILE_N * HEAD_DIM + TILE_M * TILE_N)


def _wgmma_layout(kind, shape, mn_major=False):
    """Tile a wgmma smem layout atom over ``shape``; an MN-major operand is tiled along its
    contiguous (first) mode first."""
    atom = warpgroup.make_smem_layout_atom(kind, cutlass.BFloat16)
    return cute.tile_to_shape(atom, shape, (1, 0) if mn_major else (0, 1))


def make_smem_layouts():
    """(sQ, sK, sVt, sP) in layouts wgmma's descriptors can describe, without swizzle (step 03
    adds it): 8x8 core matrices of 128 contiguous bytes (INTERLEAVE). Q, K (A/B of S) and P (A of
    O) are K-major; V, the B operand of O += P V shaped (D, keys), has the head dim contiguous in
    memory, so it is MN-major."""
    no_swizzle_k = warpgroup.SmemLayoutAtomKind.K_INTER
    no_swizzle_mn = warpgroup.SmemLayoutAtomKind.MN_INTER
    sQ = _wgmma_layout(no_swizzle_k, (TILE_M, HEAD_DIM))
    sK = _wgmma_layout(no_swizzle_k, (TILE_N, HEAD_DIM))
    sVt = _wgmma_layout(no_swizzle_mn, (HEAD_DIM, TILE_N), mn_major=True)
    sP = _wgmma_layout(no_swizzle_k, (TILE_M, TILE_N))
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
    """(for S = Q K^T, for O += P V). Tensor cores: one wgmma.m64n128k16 atom per warpgroup, both
    operands from smem (SS). S: A (Q) and B (K) K-major. O: A (P) K-major, B (V) MN-major."""
    K, MN = cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.MN
    tiled_mma = cute.make_tiled_mma(warpgroup.MmaF16BF16Op(
        dtype, cutlass.Float32, (TILE_M, TILE_N, 16), warpgroup.OperandSource.SMEM, K, K))
    tiled_mma_pv = cute.make_tiled_mma(warpgroup.MmaF16BF16Op(
        dtype, cutlass.Float32, (TILE_M, HEAD_DIM, 16), warpgroup.OperandSource.SMEM, K, MN))
    return tiled_mma, tiled_mma_pv


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
           sQ_layout: cute.ComposedLayout, sK_layout: cute.ComposedLayout,
           sVt_layout: cute.ComposedLayout, sP_layout: cute.ComposedLayout,
           gmem_copy: cute.TiledCopy, tiled_mma: cute.TiledMma, tiled_mma_pv: cute.TiledMma,
           SharedStorage: cutlass.Constexpr):
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
    # The swizzle (the layouts' inner function) goes with the smem pointer; wgmma descriptors
    # and the copies then see plain (outer) layouts.
    sQ = storage.sQ.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)
    sK = storage.sK.get_tensor(sK_layout.outer, swizzle=sK_layout.inner)
    sVt = storage.sV.get_tensor(sVt_layout.outer, swizzle=sVt_layout.inner)   # (D, TILE_N): B of P V
    sP = storage.sP.get_tensor(sP_layout.outer, swizzle=sP_layout.inner)
    sV = transpose_view(sVt)                    # the same bytes as (TILE_N, D), for the copy

    # Synchronous copies: each thread's slice of every global tile and its smem destination.
    thr_copy = gmem_copy.get_slice(tidx)
    tQgQ, tQsQ = thr_copy.partition_S(gQ), thr_copy.partition_D(sQ)
    tKgK, tKsK = thr_copy.partition_S(gK), thr_copy.partition_D(sK)
    tVgV, tVsV = thr_copy.partition_S(gV), thr_copy.partition_D(sV)

    # MMA operands: "fragments" of smem operands are wgmma matrix descriptors (address + layout),
    # one per 16-wide k-block; nothing is loaded into registers. S and O accumulate in fp32
    # registers; each warp of the warpgroup holds 16 of the 64 rows.
    thr_mma = tiled_mma.get_slice(tidx)
    thr_mma_pv = tiled_mma_pv.get_slice(tidx)
    # The smem operands' descriptors are the same for every thread of a warpgroup (one wgmma
    # reads the whole tile): slice them by the warpgroup's first thread, a warp-uniform value, as
    # FA4 does, so they can stay in the uniform registers wgmma reads (no R2UR move per wgmma).
    wg_first = cute.arch.make_warp_uniform(tidx // WARPGROUP_THREADS) * WARPGROUP_THREADS
    wg_mma, wg_mma_pv = tiled_mma.get_slice(wg_first), tiled_mma_pv.get_slice(wg_first)
    tSrQ = wg_mma.make_fragment_A(wg_mma.partition_A(sQ))
    tSrK = wg_mma.make_fragment_B(wg_mma.partition_B(sK))
    tOrP = wg_mma_pv.make_fragment_A(wg_mma_pv.partition_A(sP))
    tOrVt = wg_mma_pv.make_fragment_B(wg_mma_pv.partition_B(sVt))
    acc_S = cute.make_rmem_tensor(thr_mma.partition_shape_C((TILE_M, TILE_N)), cutlass.Float32)
    acc_O = cute.make_rmem_tensor(thr_mma_pv.partition_shape_C((TILE_M, HEAD_DIM)), cutlass.Float32)
    acc_O.fill(0.0)

    store_P = make_fragment_store(dtype, tiled_mma).get_slice(tidx)
    tPsP = store_P.partition_D(sP)

    # Row statistics of the online softmax. Within its warp's 16 rows a thread holds rows r and
    # r+8 (as in mma.sync's m16n8 fragment), so 2 rows here.
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
        # The tensor cores read smem through the async proxy: make these generic-proxy stores
        # visible to it, then barrier: sK, sV (and sQ on the first iteration) written by all.
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.sync_threads()

        # S = Q K^T: 8 wgmmas (one per 16 of the head dim), the first overwriting the accumulator.
        # fence: our register accesses before the async MMAs; commit + wait(0): the whole group
        # has finished, so acc_S may be read (and sK, sV overwritten after the next barrier).
        warpgroup.fence()
        for kb in cutlass.range_constexpr(cute.size(tSrQ, mode=[2])):
            tiled_mma.set(warpgroup.Field.ACCUMULATE, kb != 0)
            cute.gemm(tiled_mma, acc_S, tSrQ[None, None, kb], tSrK[None, None, kb], acc_S)
        warpgroup.commit_group()
        warpgroup.wait_group(0)

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
        # fence: P's generic stores -> the tensor cores' async reads; barrier: all 64 rows of P
        # written (the warpgroup's wgmma reads rows written by all 4 warps).
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.sync_threads()

        # O += P V: 8 wgmmas (one per 16 keys), accumulating onto the rescaled O.
        warpgroup.fence()
        tiled_mma_pv.set(warpgroup.Field.ACCUMULATE, True)
        for kb in cutlass.range_constexpr(cute.size(tOrP, mode=[2])):
            cute.gemm(tiled_mma_pv, acc_O, tOrP[None, None, kb], tOrVt[None, None, kb], acc_O)
        warpgroup.commit_group()
        warpgroup.wait_group(0)

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
    """View a wgmma accumulator fragment ((2, 2, N/8), MMA_M, MMA_N) as (rows, cols) of this thread.

    In the value mode, the first 2 are two adjacent columns, the second 2 rows r and r+8, and N/8
    the 8-column groups.
    """
    layout = cute.make_layout(acc.layout.shape)
    v, dv = layout.shape[0], layout.stride[0]
    mn = cute.make_layout(
        ((v[1], layout.shape[1]), (v[0], v[2], layout.shape[2])),
        stride=((dv[1], layout.stride[1]), (dv[0], dv[2], layout.stride[2])),
    )
    return cute.make_tensor(acc.iterator, cute.composition(acc.layout, mn))


# ------------------------------------------------------------------------------ step facts
# What the harness reads about this step (ladder/contract.py StepInfo): not part of the kernel.
INFO = contract.StepInfo(
    id="h02",
    slug="wgmma",
    title="wgmma",
    change="wgmma (SS operands, async, register accumulators), one 64-row warpgroup tile",
    archs=("sm_90a",),
    enabler=False,
    threads=THREADS,
    tile_m=TILE_M,
    tile_n=TILE_N,
    smem_bytes=SMEM_BYTES,
    predecessor="01",
    sass_present=("HGMMA", "WARPGROUP.ARRIVE", "WARPGROUP.DEPBAR", "MUFU.EX2"),
    sass_absent=("HMMA", "LDSM", "UTMALDG", "LDGSTS"),
    # For the bound model (harness/model/bound.py): how this kernel's roles overlap, and whether a tile's
    # loads are waited for. A fact about the kernel, not read by it (not part of its code hash).
    extra={"bound": {"overlap": "serial", "loads": "exposed"}}
)


attention = contract.make_attention(INFO, host)
