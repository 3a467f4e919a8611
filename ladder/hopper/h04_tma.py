"""h04 — TMA: one elected thread loads Q, K and V with bulk tensor copies, completed on mbarriers.

Change from h03: the 128 threads no longer copy Q, K and V themselves (LDG + STS, 16 bytes at a
time). One elected thread of warp 0 issues ``cp.async.bulk.tensor`` (SASS ``UTMALDG``): the Tensor
Memory Accelerator reads a whole tile from global memory and writes it into shared memory in the
128B-swizzled layout h03 chose (the TMA descriptor carries the same swizzle). Completion is counted
in bytes on an mbarrier: the issuing thread arrives with ``expect_tx`` = the tile's byte count, the
TMA's writes decrement it, and every thread waits on the barrier's phase. This is an *enabler*.

Why: a synchronous load cannot be in flight while the same threads compute. Ampere's cp.async
(LDGSTS, FA2's pipeline) can be, but costs every thread address math and one instruction per 16 B;
the TMA costs one thread one instruction per box, which h07 (a producer warp) and h08 (a ring) build
on. Here the loop is still serial (issue, wait, compute), so the load latency stays exposed.

Expect (arithmetic): the CTA still waits for 64 KB per tile before any MMA, as in h03; what changes
is who does it. The 128 threads no longer execute 32 LDG + 32 STS each per tile (and the swizzled
address math behind them, which held h03 at the register ceiling: ``ladder sass h04 --against h03``).
In h03's serial count per CTA and tile (~1,150 cycles of exposed load, 1,024 of MMA, the loop's
instructions at one per 2 cycles, the store wavefronts) the loop drops from 1,141 to 1,055
instructions and the 512 K/V store wavefronts go: 5,098 -> 4,414 cycles, about +15% over h03.

Evidence: ``ladder sass h04 --against h03`` (UTMALDG and SYNCS appear; LDG and the 16-byte STS
are gone); results/h200.json; writeups/hopper/04-tma.md.
"""

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync, warpgroup

from ladder import contract

# Tile shapes (named, not magic): one CTA = one 64-row query tile, walking K/V in 128-row tiles.
TILE_M = 64            # query rows per CTA: one warpgroup, the M=64 of wgmma.m64nNk16
TILE_N = 128           # key/value rows per iteration
HEAD_DIM = 128
NUM_WARPS = 4          # one warpgroup
THREADS = NUM_WARPS * 32
WARPGROUP_THREADS = 128          # threads that issue one wgmma together: 4 warps

# smem: Q + K + V (128-byte swizzled) + P (interleaved), all bf16.
SMEM_ALIGN = 1024      # the 128B swizzle repeats every 8 rows x 128 B; descriptors assume this base
SMEM_BYTES = 2 * (TILE_M * HEAD_DIM + 2 * TILE_N * HEAD_DIM + TILE_M * TILE_N)


def _wgmma_layout(kind, shape, mn_major=False):
    """Tile a wgmma smem layout atom over ``shape``; an MN-major operand is tiled along its
    contiguous (first) mode first."""
    atom = warpgroup.make_smem_layout_atom(kind, cutlass.BFloat16)
    return cute.tile_to_shape(atom, shape, (1, 0) if mn_major else (0, 1))


def make_smem_layouts():
    """(sQ, sK, sVt, sP). Q, K and V in wgmma's 128-byte swizzle mode: atoms of 8 rows x 128
    bytes (64 bf16) in which 16-byte chunk c of row r is stored at chunk c ^ (r % 8). Q and K are
    K-major; V, the B operand of O += P V shaped (D, keys), has the head dim contiguous in memory,
    so it is MN-major. P stays in the INTERLEAVE layout: its stores come from the accumulator
    fragment, where a warp's 32 four-byte stores already fill whole 128-byte core-matrix rows
    (1 wavefront, the minimum), while swizzling them would cost a register per XOR-ed address."""
    swizzle_k = warpgroup.SmemLayoutAtomKind.K_SW128
    swizzle_mn = warpgroup.SmemLayoutAtomKind.MN_SW128
    sQ = _wgmma_layout(swizzle_k, (TILE_M, HEAD_DIM))
    sK = _wgmma_layout(swizzle_k, (TILE_N, HEAD_DIM))
    sVt = _wgmma_layout(swizzle_mn, (HEAD_DIM, TILE_N), mn_major=True)
    sP = _wgmma_layout(warpgroup.SmemLayoutAtomKind.K_INTER, (TILE_M, TILE_N))
    return sQ, sK, sVt, sP


def make_tma_loads(mQ, mK, mV, sQ_layout, sK_layout, sVt_layout):
    """TMA atoms (descriptor + smem layout, swizzle included) and the coordinate tensors they
    index. A TMA box is described with the contiguous mode first, so Q and K are viewed as
    (seqlen, d, heads, batch) and V as (d, seqlen, heads, batch): V's smem tile is (D, keys)."""
    q = cute.make_tensor(mQ.iterator, cute.select(mQ.layout, mode=[1, 3, 2, 0]))
    k = cute.make_tensor(mK.iterator, cute.select(mK.layout, mode=[1, 3, 2, 0]))
    vt = cute.make_tensor(mV.iterator, cute.select(mV.layout, mode=[3, 1, 2, 0]))
    load = cpasync.CopyBulkTensorTileG2SOp()
    return (cpasync.make_tiled_tma_atom(load, q, sQ_layout, (TILE_M, HEAD_DIM)),
            cpasync.make_tiled_tma_atom(load, k, sK_layout, (TILE_N, HEAD_DIM)),
            cpasync.make_tiled_tma_atom(load, vt, sVt_layout, (HEAD_DIM, TILE_N)))


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
        sQ: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sQ_layout)], SMEM_ALIGN]
        sK: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sK_layout)], SMEM_ALIGN]
        sV: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sVt_layout)], SMEM_ALIGN]
        sP: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sP_layout)], SMEM_ALIGN]
        # mbarriers: Q landed (used once, phase 0); K and V of the current tile landed.
        q_full: cute.struct.MemRange[cutlass.Int64, 1]
        kv_full: cute.struct.MemRange[cutlass.Int64, 1]

    tiled_mma, tiled_mma_pv = make_tiled_mmas(dtype)
    (tma_Q, tma_mQ), (tma_K, tma_mK), (tma_V, tma_mVt) = make_tma_loads(
        mQ, mK, mV, sQ_layout, sK_layout, sVt_layout)
    grid = (cute.size(mQ.shape[1]) // TILE_M, cute.size(mQ.shape[0]), cute.size(mQ.shape[2]))
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
    m_block, batch, head = cute.arch.block_idx()
    dtype = mO.element_type
    n_blocks = cute.size(tma_mK.shape[0]) // TILE_N

    # This CTA's tiles, as TMA coordinates: gQ (TILE_M, D); gK (TILE_N, D, n_blocks);
    # gVt (D, TILE_N, n_blocks). gO (TILE_M, D) is plain global memory.
    gQ = cute.local_tile(tma_mQ[None, None, head, batch], (TILE_M, HEAD_DIM), (m_block, 0))
    gK = cute.local_tile(tma_mK[None, None, head, batch], (TILE_N, HEAD_DIM), (None, 0))
    gVt = cute.local_tile(tma_mVt[None, None, head, batch], (HEAD_DIM, TILE_N), (0, None))
    gO = cute.local_tile(mO[batch, None, head, None], (TILE_M, HEAD_DIM), (m_block, 0))

    smem = cutlass.memory.SmemAllocator()
    storage = smem.allocate(SharedStorage)
    # The swizzle (the layouts' inner function) goes with the smem pointer; wgmma descriptors
    # and the copies then see plain (outer) layouts.
    sQ = storage.sQ.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)
    sK = storage.sK.get_tensor(sK_layout.outer, swizzle=sK_layout.inner)
    sVt = storage.sV.get_tensor(sVt_layout.outer, swizzle=sVt_layout.inner)   # (D, TILE_N): B of P V
    sP = storage.sP.get_tensor(sP_layout.outer, swizzle=sP_layout.inner)
    q_full = storage.q_full.data_ptr()
    kv_full = storage.kv_full.data_ptr()

    # TMA partitions: each whole smem tile is one TMA destination; the global side keeps the
    # tile index (for K and V, which tile of the sequence).
    def tma_partition(atom, smem, gmem):
        return cpasync.tma_partition(atom, 0, cute.make_layout(1), cute.group_modes(smem, 0, 2),
                                     cute.group_modes(gmem, 0, 2))
    tQsQ, tQgQ = tma_partition(tma_Q, sQ, gQ)
    tKsK, tKgK = tma_partition(tma_K, sK, gK)
    tVsV, tVgV = tma_partition(tma_V, sVt, gVt)
    q_bytes = cute.size_in_bytes(dtype, sQ_layout)
    kv_bytes = cute.size_in_bytes(dtype, sK_layout) + cute.size_in_bytes(dtype, sVt_layout)

    # One thread initializes both mbarriers with an arrival count of 1 (the expect-tx arrive);
    # the fence + barrier make the initialized barriers visible to every thread and to the TMA.
    if warp_idx == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(q_full, 1)
            cute.arch.mbarrier_init(kv_full, 1)
    cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()

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

    # Q once: one elected thread arrives on q_full announcing q_bytes; warp 0 issues the TMA
    # (cute.copy of a TMA atom elects its own single issuing thread, so it sits outside elect_one).
    if warp_idx == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(q_full, q_bytes)
        cute.copy(tma_Q, tQgQ, tQsQ, tma_bar_ptr=q_full)
    # wait: Q landed (pairs with the expect-tx arrive just above; q_full's first phase, parity 0).
    cute.arch.mbarrier_wait(q_full, 0)

    for n_block in range(n_blocks):
        # barrier: every warp is done reading sK/sV/sP of the previous iteration (its wgmmas
        # waited on) before the TMA overwrites them.
        cute.arch.sync_threads()
        if warp_idx == 0:
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(kv_full, kv_bytes)
            cute.copy(tma_K, tKgK[None, n_block], tKsK, tma_bar_ptr=kv_full)
            cute.copy(tma_V, tVgV[None, n_block], tVsV, tma_bar_ptr=kv_full)
        # wait: K_j and V_j landed (pairs with the expect-tx arrive above). kv_full completes
        # one phase per tile, so tile j waits for parity j % 2.
        cute.arch.mbarrier_wait(kv_full, n_block % 2)

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
    id="h04",
    slug="tma",
    title="TMA loads on mbarriers",
    change="Q/K/V loaded by TMA from one elected thread, completion on mbarriers (expect-tx)",
    archs=("sm_90a",),
    enabler=True,
    threads=THREADS,
    tile_m=TILE_M,
    tile_n=TILE_N,
    smem_bytes=SMEM_BYTES,
    predecessor="h03",
    sass_present=("HGMMA", "UTMALDG", "SYNCS", "MUFU.EX2"),
    sass_absent=("HMMA", "LDSM", "LDG", "LDGSTS"),
    # For the bound model (harness/model/bound.py): how this kernel's roles overlap, and whether a tile's
    # loads are waited for. A fact about the kernel, not read by it (not part of its code hash).
    extra={"bound": {"overlap": "serial", "loads": "exposed"}}
)


attention = contract.make_attention(INFO, host)
