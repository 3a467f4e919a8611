"""h08 — load pipeline: a ring of 2 K/V stages; the producer runs a tile ahead of the consumers.

Change from h07: shared memory holds NUM_STAGES = 2 (K, V) tile pairs. Tile j goes to stage
j % 2, and each stage has its own full and empty mbarriers. The producer refills a stage as soon
as the consumers have released what was in it, two tiles ago, so while the consumers compute on
tile j, tile j+1 is already landing in the other stage. Barrier phases now count *rounds* of the
ring: tile j is round j // 2 of its stage, so its full barrier completes with parity (j // 2) % 2.

Why: with one buffer (h07) the producer cannot load tile j+1 until every consumer warp has
finished P_j V_j, so each tile's load latency sits between two tiles of compute. With two stages
the load of tile j+1 overlaps the compute of tile j. (A warpgroup that runs ahead may also start a
tile before the other has finished the previous one, loosening h05's lock-step a little.)

Expect (arithmetic): hiding the loads is worth +31% to h05 (its free-loads experiment). The same
fraction gives h08 +31% over h07; if all of h07's gain over h05 was on the load path, h08 only
reaches that experiment's level, +19% over h07. So +19-31%, the drift in neither (measured: +36%).
smem: Q 32 KB + 2 x (K 32 KB + V 32 KB) = 160 KB of the 227 KB a CTA may use.

Evidence: ``ladder sass h08 --against h07``; tests/test_hopper_steps.py (stages > 1, smem budget
from the shared-storage struct, expect-tx counts); results/h200.json;
writeups/hopper/08-kv-pipeline.md.
"""

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync, warpgroup

from ladder import contract

# Tile shapes (named, not magic): one CTA = two 64-row query tiles (one per consumer warpgroup),
# walking K/V in 128-row tiles.
NUM_WARPGROUPS = 2     # consumer warpgroups, each with its own 64 query rows
WGMMA_M = 64           # rows of one wgmma.m64nNk16: one warpgroup's share
TILE_M = NUM_WARPGROUPS * WGMMA_M    # query rows per CTA
TILE_N = 128           # key/value rows per iteration
HEAD_DIM = 128
NUM_STAGES = 2         # K/V ring depth: tiles in flight ahead of the consumers
WARPGROUP_THREADS = 128
NUM_CONSUMER_WARPS = 4 * NUM_WARPGROUPS
THREADS = WARPGROUP_THREADS * (1 + NUM_WARPGROUPS)    # warpgroup 0 produces, 1 and 2 consume

# setmaxnreg: registers per thread after the role split (multiples of 8, 24..256). The producer needs
# few; the consumers hold S, O, P. 128 x 24 + 256 x 240 = 64,512 <= the CTA's pool, 168 per thread at launch x 384.
PRODUCER_REGISTERS = 24
CONSUMER_REGISTERS = 240

# smem: Q + NUM_STAGES x (K + V) (128-byte swizzled), all bf16. P lives in registers.
SMEM_ALIGN = 1024      # the 128B swizzle repeats every 8 rows x 128 B; descriptors assume this base
SMEM_BYTES = 2 * (TILE_M * HEAD_DIM + NUM_STAGES * 2 * TILE_N * HEAD_DIM)


def _wgmma_layout(kind, shape, mn_major=False):
    """Tile a wgmma smem layout atom over ``shape`` (a third mode, if any, is the stage, outermost);
    an MN-major operand is tiled along its contiguous (first) mode first."""
    atom = warpgroup.make_smem_layout_atom(kind, cutlass.BFloat16)
    order = (1, 0) if mn_major else (0, 1)
    return cute.tile_to_shape(atom, shape, order + (2,) if len(shape) == 3 else order)


def make_smem_layouts():
    """(sQ, sK, sVt). Q, K and V in wgmma's 128-byte swizzle mode: atoms of 8 rows x 128 bytes
    (64 bf16) in which 16-byte chunk c of row r is stored at chunk c ^ (r % 8). Q and K are K-major;
    V, the B operand of O += P V shaped (D, keys), has the head dim contiguous in memory, so it is
    MN-major. K and V have a third mode, the ring stage: (TILE_N, D, NUM_STAGES) and
    (D, TILE_N, NUM_STAGES), each stage a whole swizzled tile. No P buffer."""
    swizzle_k = warpgroup.SmemLayoutAtomKind.K_SW128
    swizzle_mn = warpgroup.SmemLayoutAtomKind.MN_SW128
    sQ = _wgmma_layout(swizzle_k, (TILE_M, HEAD_DIM))
    sK = _wgmma_layout(swizzle_k, (TILE_N, HEAD_DIM, NUM_STAGES))
    sVt = _wgmma_layout(swizzle_mn, (HEAD_DIM, TILE_N, NUM_STAGES), mn_major=True)
    return sQ, sK, sVt


def make_shared_storage(dtype, sQ_layout, sK_layout, sVt_layout):
    """The CTA's shared memory, as a struct (its size is the launch's dynamic smem)."""
    @cute.struct
    class SharedStorage:
        sQ: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sQ_layout)], SMEM_ALIGN]
        sK: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sK_layout)], SMEM_ALIGN]
        sV: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sVt_layout)], SMEM_ALIGN]
        # mbarriers, one pair per ring stage. full: the TMA's bytes landed (1 arrival: the
        # producer's expect-tx). empty: the consumers are done reading the stage's K and V (one
        # arrival per consumer warp). Q is loaded once.
        q_full: cute.struct.MemRange[cutlass.Int64, 1]
        kv_full: cute.struct.MemRange[cutlass.Int64, NUM_STAGES]
        kv_empty: cute.struct.MemRange[cutlass.Int64, NUM_STAGES]
    return SharedStorage


def make_tma_loads(mQ, mK, mV, sQ_layout, sK_layout, sVt_layout):
    """TMA atoms (descriptor + smem layout, swizzle included) and the coordinate tensors they
    index. A TMA box is described with the contiguous mode first, so Q and K are viewed as
    (seqlen, d, heads, batch) and V as (d, seqlen, heads, batch): V's smem tile is (D, keys).
    A K or V copy fills one ring stage: its atom is built on one stage of the layout."""
    q = cute.make_tensor(mQ.iterator, cute.select(mQ.layout, mode=[1, 3, 2, 0]))
    k = cute.make_tensor(mK.iterator, cute.select(mK.layout, mode=[1, 3, 2, 0]))
    vt = cute.make_tensor(mV.iterator, cute.select(mV.layout, mode=[3, 1, 2, 0]))
    load = cpasync.CopyBulkTensorTileG2SOp()
    return (cpasync.make_tiled_tma_atom(load, q, sQ_layout, (TILE_M, HEAD_DIM)),
            cpasync.make_tiled_tma_atom(load, k, cute.select(sK_layout, mode=[0, 1]), (TILE_N, HEAD_DIM)),
            cpasync.make_tiled_tma_atom(load, vt, cute.select(sVt_layout, mode=[0, 1]), (HEAD_DIM, TILE_N)))


def ring_position(n_block):
    """(stage, parity) of K/V tile j. Tile j goes to stage j % NUM_STAGES, in round
    j // NUM_STAGES of that stage; a stage's kv_full completes one phase per round, so tile j waits
    with the round's parity. The producer waits for the *previous* round of kv_empty: the other
    parity. (tests/test_pipeline_protocol.py replays this bookkeeping against a model of the
    mbarriers.)"""
    return n_block % NUM_STAGES, (n_block // NUM_STAGES) % 2


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
    sVt = storage.sV.get_tensor(sVt_layout.outer, swizzle=sVt_layout.inner)   # (D, TILE_N, stage): B of P V
    q_full = storage.q_full.data_ptr()
    kv_full, kv_empty = storage.kv_full.data_ptr(), storage.kv_empty.data_ptr()   # stage s: base + s

    # One thread initializes the mbarriers: full ones expect 1 arrival (the producer's expect-tx
    # arrive; the TMA's bytes complete the phase), empty ones one arrival per consumer warp. The
    # fence + CTA barrier (the last one all 384 threads take) make them visible to all and to the TMA.
    if warp_idx == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(q_full, 1)
            for stage in cutlass.range_constexpr(NUM_STAGES):
                cute.arch.mbarrier_init(kv_full + stage, 1)
                cute.arch.mbarrier_init(kv_empty + stage, NUM_CONSUMER_WARPS)
    cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()

    if warp_idx < 4:
        # Producer warpgroup. setmaxnreg applies to the whole warpgroup (all 4 warps execute it);
        # then warp 0 alone issues the loads and warps 1-3 are done.
        cute.arch.setmaxregister_decrease(PRODUCER_REGISTERS)
        if warp_idx == 0:
            producer(tma_Q, tma_K, tma_V, sQ, sK, sVt, gQ, gK, gVt, q_full, kv_full, kv_empty, n_blocks)
    else:
        # Consumer warpgroups: they take the registers the producer gave back.
        cute.arch.setmaxregister_increase(CONSUMER_REGISTERS)
        consumer(tiled_mma, tiled_mma_pv, sQ, sK, sVt, gO, q_full, kv_full, kv_empty, softmax_scale, n_blocks)


# ------------------------------------------------------------------------------------ warp roles
# One function per role; kernel() above sets up what they share and dispatches by warpgroup. Each
# is a @cute.jit function, traced inline into the kernel (no call in the compiled code).

@cute.jit
def producer(tma_Q: cute.CopyAtom, tma_K: cute.CopyAtom, tma_V: cute.CopyAtom,
             sQ: cute.Tensor, sK: cute.Tensor, sVt: cute.Tensor,
             gQ: cute.Tensor, gK: cute.Tensor, gVt: cute.Tensor, q_full, kv_full, kv_empty, n_blocks):
    """TMA producer (warp 0): Q once, then K_j and V_j into ring stage j % NUM_STAGES per tile."""
    dtype = sQ.element_type
    # TMA partitions: each whole smem tile (one ring stage) is one TMA destination; the
    # global side keeps the tile index (for K and V, which tile of the sequence).
    def tma_partition(atom, smem, gmem):
        return cpasync.tma_partition(atom, 0, cute.make_layout(1), cute.group_modes(smem, 0, 2),
                                     cute.group_modes(gmem, 0, 2))
    tQsQ, tQgQ = tma_partition(tma_Q, sQ, gQ)
    tKsK, tKgK = tma_partition(tma_K, sK, gK)
    tVsV, tVgV = tma_partition(tma_V, sVt, gVt)
    q_bytes = cute.size_in_bytes(dtype, sQ.layout)
    # expect-tx counts one stage's bytes: what one K copy plus one V copy deliver.
    kv_bytes = (cute.size_in_bytes(dtype, cute.select(sK.layout, mode=[0, 1]))
                + cute.size_in_bytes(dtype, cute.select(sVt.layout, mode=[0, 1])))

    # Q once, on q_full's phase 0 (cute.copy of a TMA atom elects its own issuing thread,
    # so it sits outside elect_one; only the expect-tx arrive is inside).
    with cute.arch.elect_one():
        cute.arch.mbarrier_arrive_and_expect_tx(q_full, q_bytes)
    cute.copy(tma_Q, tQgQ, tQsQ, tma_bar_ptr=q_full)
    for n_block in range(n_blocks):
        # Tile j goes to stage s = j % NUM_STAGES, in round j // NUM_STAGES of that stage.
        stage, parity = ring_position(n_block)
        # wait: stage s is free, i.e. kv_empty[s] completed the previous round (the 8
        # consumer warps' arrives after P V on tile j - NUM_STAGES): parity ^ 1. In round
        # 0 the fresh barrier's "previous phase" (parity 1) counts as complete, so the
        # producer fills every stage without waiting.
        # timeline: slot wait begin
        cute.arch.mbarrier_wait(kv_empty + stage, parity ^ 1)
        # timeline: slot wait end
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(kv_full + stage, kv_bytes)
        cute.copy(tma_K, tKgK[None, n_block], tKsK[None, stage], tma_bar_ptr=kv_full + stage)
        cute.copy(tma_V, tVgV[None, n_block], tVsV[None, stage], tma_bar_ptr=kv_full + stage)


@cute.jit
def consumer(tiled_mma: cute.TiledMma, tiled_mma_pv: cute.TiledMma, sQ: cute.Tensor, sK: cute.Tensor,
             sVt: cute.Tensor, gO: cute.Tensor, q_full, kv_full, kv_empty, softmax_scale: cutlass.Float32,
             n_blocks):
    """Consumer warpgroups 1-2: S = Q K^T, the online softmax, O += P V per tile, the epilogue."""
    tidx, _, _ = cute.arch.thread_idx()
    dtype = gO.element_type
    mma_tidx = tidx - WARPGROUP_THREADS      # 0..255 over the two consumer warpgroups

    # MMA operands: "fragments" of smem operands are wgmma matrix descriptors (address +
    # layout), one per 16-wide k-block. S and O accumulate in fp32 registers; consumer
    # warpgroup g owns rows 64g..64g+63, each of its warps 16 of them. P, the A operand of
    # P V, is a register fragment.
    thr_mma = tiled_mma.get_slice(mma_tidx)
    thr_mma_pv = tiled_mma_pv.get_slice(mma_tidx)
    # The smem operands' descriptors are the same for every thread of a warpgroup (one wgmma
    # reads the whole tile): slice them by the warpgroup's first thread, a warp-uniform value, as
    # FA4 does, so they can stay in the uniform registers wgmma reads (no R2UR move per wgmma).
    wg_first = cute.arch.make_warp_uniform(mma_tidx // WARPGROUP_THREADS) * WARPGROUP_THREADS
    wg_mma, wg_mma_pv = tiled_mma.get_slice(wg_first), tiled_mma_pv.get_slice(wg_first)
    tSrQ = wg_mma.make_fragment_A(wg_mma.partition_A(sQ))
    tSrK = wg_mma.make_fragment_B(wg_mma.partition_B(sK))
    tOrVt = wg_mma_pv.make_fragment_B(wg_mma_pv.partition_B(sVt))
    acc_S = cute.make_rmem_tensor(thr_mma.partition_shape_C((TILE_M, TILE_N)), cutlass.Float32)
    acc_O = cute.make_rmem_tensor(thr_mma_pv.partition_shape_C((TILE_M, HEAD_DIM)), cutlass.Float32)
    acc_O.fill(0.0)

    # P: acc_S's registers viewed as 8 A fragments (one per 16 keys), then converted to bf16.
    tOrP = cute.make_rmem_tensor_like(_acc_as_a_fragment(acc_S), dtype)

    # Row statistics of the online softmax. Within its warp's 16 rows a thread holds rows r
    # and r+8 (as in mma.sync's m16n8 fragment), so 2 rows here.
    S_mn = _mn_view(acc_S)
    O_mn = _mn_view(acc_O)
    rows_per_thread = cute.size(S_mn, mode=[0])
    row_max = cute.make_rmem_tensor(rows_per_thread, cutlass.Float32)
    row_sum = cute.make_rmem_tensor(rows_per_thread, cutlass.Float32)
    row_max.fill(-cutlass.Float32.inf)
    row_sum.fill(0.0)

    # wait: Q landed (the producer's expect-tx arrive on q_full; its only phase, parity 0).
    cute.arch.mbarrier_wait(q_full, 0)

    for n_block in range(n_blocks):
        stage, parity = ring_position(n_block)
        # wait: K_j and V_j landed in stage s (kv_full[s] completes once per round: the
        # producer's expect-tx arrive for tile j plus the TMA's bytes): the round's parity.
        # timeline: K/V wait begin
        cute.arch.mbarrier_wait(kv_full + stage, parity)
        # timeline: K/V wait end

        # S = Q K^T: 8 wgmmas (one per 16 of the head dim), the first overwriting the
        # accumulator. fence: our register accesses before the async MMAs; commit + wait(0):
        # the group has finished, so acc_S may be read.
        # timeline: QK^T begin
        warpgroup.fence()
        for kb in cutlass.range_constexpr(cute.size(tSrQ, mode=[2])):
            tiled_mma.set(warpgroup.Field.ACCUMULATE, kb != 0)
            cute.gemm(tiled_mma, acc_S, tSrQ[None, None, kb], tSrK[None, None, kb, stage], acc_S)
        warpgroup.commit_group()
        warpgroup.wait_group(0)
        # timeline: QK^T end

        # timeline: softmax begin
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

        # P (bf16) stays in this thread's registers, already in the A-fragment layout.
        tOrP.store(_acc_as_a_fragment(acc_S).load().to(dtype))
        # timeline: softmax end

        # timeline: PV begin
        # O += P V: 8 wgmmas (one per 16 keys), accumulating onto the rescaled O. The fence
        # also orders our register writes of P and O before the async MMAs read them.
        warpgroup.fence()
        tiled_mma_pv.set(warpgroup.Field.ACCUMULATE, True)
        for kb in cutlass.range_constexpr(cute.size(tOrP, mode=[2])):
            cute.gemm(tiled_mma_pv, acc_O, tOrP[None, None, kb], tOrVt[None, None, kb, stage], acc_O)
        warpgroup.commit_group()
        warpgroup.wait_group(0)
        # timeline: PV end
        # arrive: this warp is done reading stage s (kv_empty[s], this round; the producer's
        # wait before tile j + NUM_STAGES pairs with it). One lane per warp: it counts warps.
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive(kv_empty + stage)

    # Epilogue: O / rowsum, to bf16, stored straight from registers to global memory.
    for r in cutlass.range_constexpr(rows_per_thread):
        total = _quad_allreduce(row_sum[r], lambda a, b: a + b)
        O_mn[r, None] = O_mn[r, None].load() * cute.arch.rcp_approx(total)
    rO = cute.make_fragment_like(acc_O, dtype)
    rO.store(acc_O.load().to(dtype))
    store_O = make_fragment_store(dtype, tiled_mma_pv).get_slice(mma_tidx)
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
    id="h08",
    slug="kv_pipeline",
    title="K/V load pipeline",
    change="K/V ring of 2 stages with full/empty mbarriers; the producer runs ahead of the consumers",
    archs=("sm_90a",),
    enabler=False,
    threads=THREADS,
    tile_m=TILE_M,
    tile_n=TILE_N,
    smem_bytes=SMEM_BYTES,
    predecessor="h07",
    sass_present=("HGMMA", "HGMMA.RS", "UTMALDG", "SYNCS", "MUFU.EX2", "USETMAXREG"),
    sass_absent=("HMMA", "LDSM", "LDG", "LDGSTS", "STS"),
    extra={"bound": {"overlap": "lockstep", "loads": "hidden"},
           "kv_stages": NUM_STAGES},
)


attention = contract.make_attention(INFO, host)
