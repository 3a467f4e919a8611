"""h06 — P stays in registers: O += P V as an RS-wgmma, its A operand read from registers.

Change from h05: the softmax's output P (bf16) no longer goes through shared memory. wgmma can take
its A operand from registers (``OperandSource.RMEM``, the "RS" form) when each thread holds the
A fragment in the layout the instruction expects; for 16-bit types the fp32 accumulator layout of
S = Q K^T already is that layout, up to how its values are grouped: a thread's S values for keys
16k..16k+15 are exactly its A-fragment values for the k-th 16-wide slice of P V. So P is S
converted to bf16 in place, viewed as 8 A fragments (``_acc_as_a_fragment``), and fed straight to
wgmma. Gone: the P buffer (32 KB of smem), its 32 STS per thread per tile, the proxy fence and the
warpgroup barrier that made those stores visible to the tensor cores. This is an *enabler*.

Why: the P round trip costs each warpgroup 16 KB of smem stores and a barrier per tile, and its
32 KB of smem leave room for a deeper K/V ring (h08's two stages fit with or without P; a third
stage only without it). FA3 and FA4's SM90 path keep P in registers.

Expect (arithmetic): per tile and warpgroup, h05 stores 64 x 128 x 2 B = 16 KB of P (32 four-byte
STS per thread, 32 store wavefronts per warp); both warpgroups' 32 KB at 128 B/clk is 256 cycles of
store bandwidth, then a fence and a barrier. Fully exposed, that is an eighth of the ~2,050 cycles
of MMA per tile but about 5% of h05's whole tile (its count: ~5,570 cycles with the load and the
issue), and part of it overlaps the exponentials: expect +0-5%. The smem drops from 128 KB to 96 KB,
but registers still allow one CTA per SM (256 threads x ~170 registers), and the lock-step between
the two warpgroups (h05's writeup) is untouched.

Evidence: ``ladder sass h06 --against h05`` (the P V HGMMA reads A from registers; no STS);
tests/test_hopper_steps.py; results/h200.json; writeups/hopper/06-register-p.md.
"""

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync, warpgroup

from ladder import contract

# Tile shapes (named, not magic): one CTA = two 64-row query tiles (one per warpgroup), walking
# K/V in 128-row tiles.
NUM_WARPGROUPS = 2     # consumer warpgroups, each with its own 64 query rows
WGMMA_M = 64           # rows of one wgmma.m64nNk16: one warpgroup's share
TILE_M = NUM_WARPGROUPS * WGMMA_M    # query rows per CTA
TILE_N = 128           # key/value rows per iteration
HEAD_DIM = 128
NUM_WARPS = 4 * NUM_WARPGROUPS
THREADS = NUM_WARPS * 32
WARPGROUP_THREADS = 128          # threads that issue one wgmma together: 4 warps

# smem: Q + K + V (128-byte swizzled), all bf16. P lives in registers.
SMEM_ALIGN = 1024      # the 128B swizzle repeats every 8 rows x 128 B; descriptors assume this base
SMEM_BYTES = 2 * (TILE_M * HEAD_DIM + 2 * TILE_N * HEAD_DIM)


def _wgmma_layout(kind, shape, mn_major=False):
    """Tile a wgmma smem layout atom over ``shape``; an MN-major operand is tiled along its
    contiguous (first) mode first."""
    atom = warpgroup.make_smem_layout_atom(kind, cutlass.BFloat16)
    return cute.tile_to_shape(atom, shape, (1, 0) if mn_major else (0, 1))


def make_smem_layouts():
    """(sQ, sK, sVt). Q, K and V in wgmma's 128-byte swizzle mode: atoms of 8 rows x 128 bytes
    (64 bf16) in which 16-byte chunk c of row r is stored at chunk c ^ (r % 8). Q and K are K-major;
    V, the B operand of O += P V shaped (D, keys), has the head dim contiguous in memory, so it is
    MN-major. No P buffer: P never leaves the registers."""
    swizzle_k = warpgroup.SmemLayoutAtomKind.K_SW128
    swizzle_mn = warpgroup.SmemLayoutAtomKind.MN_SW128
    sQ = _wgmma_layout(swizzle_k, (TILE_M, HEAD_DIM))
    sK = _wgmma_layout(swizzle_k, (TILE_N, HEAD_DIM))
    sVt = _wgmma_layout(swizzle_mn, (HEAD_DIM, TILE_N), mn_major=True)
    return sQ, sK, sVt


def make_shared_storage(dtype, sQ_layout, sK_layout, sVt_layout):
    """The CTA's shared memory, as a struct (its size is the launch's dynamic smem)."""
    @cute.struct
    class SharedStorage:
        sQ: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sQ_layout)], SMEM_ALIGN]
        sK: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sK_layout)], SMEM_ALIGN]
        sV: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sVt_layout)], SMEM_ALIGN]
        # mbarriers: Q landed (used once, phase 0); K and V of the current tile landed.
        q_full: cute.struct.MemRange[cutlass.Int64, 1]
        kv_full: cute.struct.MemRange[cutlass.Int64, 1]
    return SharedStorage


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
    """(for S = Q K^T, for O += P V). Tensor cores: one wgmma.m64n128k16 atom per warpgroup, two
    warpgroups stacked along M. S: both operands from smem (SS), A (Q) and B (K) K-major.
    O: A (P) from registers (RS), B (V) from smem, MN-major. Both warpgroups read the whole B
    operand (K, V)."""
    K, MN = cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.MN
    tiled_mma = cute.make_tiled_mma(warpgroup.MmaF16BF16Op(
        dtype, cutlass.Float32, (WGMMA_M, TILE_N, 16), warpgroup.OperandSource.SMEM, K, K),
        (NUM_WARPGROUPS, 1, 1))
    tiled_mma_pv = cute.make_tiled_mma(warpgroup.MmaF16BF16Op(
        dtype, cutlass.Float32, (WGMMA_M, HEAD_DIM, 16), warpgroup.OperandSource.RMEM, K, MN),
        (NUM_WARPGROUPS, 1, 1))
    return tiled_mma, tiled_mma_pv


def make_fragment_store(dtype, tiled_mma):
    """Registers -> memory (O to global): each thread stores its accumulator-shaped values as they
    lie in its registers."""
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
    sQ_layout, sK_layout, sVt_layout = make_smem_layouts()
    SharedStorage = make_shared_storage(dtype, sQ_layout, sK_layout, sVt_layout)

    tiled_mma, tiled_mma_pv = make_tiled_mmas(dtype)
    (tma_Q, tma_mQ), (tma_K, tma_mK), (tma_V, tma_mVt) = make_tma_loads(
        mQ, mK, mV, sQ_layout, sK_layout, sVt_layout)
    grid = (cute.size(mQ.shape[1]) // TILE_M, cute.size(mQ.shape[0]), cute.size(mQ.shape[2]))
    kernel(tma_Q, tma_mQ, tma_K, tma_mK, tma_V, tma_mVt, mO, softmax_scale,
           sQ_layout, sK_layout, sVt_layout, tiled_mma, tiled_mma_pv,
           SharedStorage).launch(
        grid=grid, block=[THREADS, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream)


@cute.kernel
def kernel(tma_Q: cute.CopyAtom, tma_mQ: cute.Tensor, tma_K: cute.CopyAtom, tma_mK: cute.Tensor,
           tma_V: cute.CopyAtom, tma_mVt: cute.Tensor, mO: cute.Tensor,
           softmax_scale: cutlass.Float32,
           sQ_layout: cute.ComposedLayout, sK_layout: cute.ComposedLayout,
           sVt_layout: cute.ComposedLayout,
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
    # one per 16-wide k-block. S and O accumulate in fp32 registers; warpgroup g owns rows
    # 64g..64g+63, each of its warps 16 of them. P, the A operand of P V, is a register fragment.
    thr_mma = tiled_mma.get_slice(tidx)
    thr_mma_pv = tiled_mma_pv.get_slice(tidx)
    # The smem operands' descriptors are the same for every thread of a warpgroup (one wgmma
    # reads the whole tile): slice them by the warpgroup's first thread, a warp-uniform value, as
    # FA4 does, so they can stay in the uniform registers wgmma reads (no R2UR move per wgmma).
    wg_first = cute.arch.make_warp_uniform(tidx // WARPGROUP_THREADS) * WARPGROUP_THREADS
    wg_mma, wg_mma_pv = tiled_mma.get_slice(wg_first), tiled_mma_pv.get_slice(wg_first)
    tSrQ = wg_mma.make_fragment_A(wg_mma.partition_A(sQ))
    tSrK = wg_mma.make_fragment_B(wg_mma.partition_B(sK))
    tOrVt = wg_mma_pv.make_fragment_B(wg_mma_pv.partition_B(sVt))
    acc_S = cute.make_rmem_tensor(thr_mma.partition_shape_C((TILE_M, TILE_N)), cutlass.Float32)
    acc_O = cute.make_rmem_tensor(thr_mma_pv.partition_shape_C((TILE_M, HEAD_DIM)), cutlass.Float32)
    acc_O.fill(0.0)

    # P: acc_S's registers viewed as 8 A fragments (one per 16 keys), then converted to bf16.
    tOrP = cute.make_rmem_tensor_like(_acc_as_a_fragment(acc_S), dtype)

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
        # barrier: every warp is done reading sK/sV of the previous iteration (its wgmmas
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

        # P (bf16) stays in this thread's registers, already in the A-fragment layout. No smem, no
        # proxy fence, no barrier: no other thread reads it.
        tOrP.store(_acc_as_a_fragment(acc_S).load().to(dtype))

        # O += P V: 8 wgmmas (one per 16 keys), accumulating onto the rescaled O. The fence also
        # orders our register writes of P (and of the rescaled O) before the async MMAs read them.
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


def _acc_as_a_fragment(acc: cute.Tensor) -> cute.Tensor:
    """View an S accumulator fragment ((2, 2, N/8), MMA_M, MMA_N) as wgmma A-operand fragments
    ((2, 2, 2), MMA_M, (N/16, MMA_N)): one 8-value A fragment per 16 keys.

    A 16-bit A fragment of m64k16 holds, per thread, rows r and r+8 at columns 2t, 2t+1 and
    2t+8, 2t+9 of its 16 columns; the accumulator holds the same rows at those columns of every
    8-column group. So the A fragment for keys 16k..16k+15 is 8-column groups 2k and 2k+1: split
    the N/8 groups into (2, N/16) and move the N/16 to the k mode. No data moves.
    """
    layout = cute.make_layout(acc.layout.shape)
    v, dv = layout.shape[0], layout.stride[0]
    as_a = cute.make_layout(
        ((v[0], v[1], 2), layout.shape[1], (v[2] // 2, layout.shape[2])),
        stride=((dv[0], dv[1], dv[2]), layout.stride[1], (2 * dv[2], layout.stride[2])),
    )
    return cute.make_tensor(acc.iterator, cute.composition(acc.layout, as_a))


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
    id="h06",
    slug="register_p",
    title="P stays in registers",
    change="P stays in registers; O += P V as an RS-wgmma (A operand from registers)",
    archs=("sm_90a",),
    enabler=True,
    threads=THREADS,
    tile_m=TILE_M,
    tile_n=TILE_N,
    smem_bytes=SMEM_BYTES,
    predecessor="h05",
    sass_present=("HGMMA", "HGMMA.RS", "UTMALDG", "SYNCS", "MUFU.EX2"),
    sass_absent=("HMMA", "LDSM", "LDG", "LDGSTS", "STS"),
    # For the bound model (harness/model/bound.py): how this kernel's roles overlap, and whether a tile's
    # loads are waited for. A fact about the kernel, not read by it (not part of its code hash).
    extra={"bound": {"overlap": "lockstep", "loads": "exposed"}}
)


attention = contract.make_attention(INFO, host)
