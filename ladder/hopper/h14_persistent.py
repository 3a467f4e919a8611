"""h14 — persistent CTAs: one CTA per SM walks a static list of tiles; the next tile's Q, K and V
load while this tile's last P V and epilogue run.

Change from h13: the grid is one CTA per SM (SM_COUNT), not one per (query tile, batch, head).
CTA c takes work tiles c, c + grid, c + 2 grid, ... of the m_blocks x heads x batch tiles, the
query block fastest, then the head, then the batch (a static tile scheduler, as FA4's
StaticPersistentTileScheduler), and runs h13's producer and consumers once per tile, with the K/V
ring's positions counted across tiles so the producer keeps going. O gets a smem tile of its own
(192 KB in all; h13 stores O through Q's tile): Q's buffer gets an empty barrier on which every
consumer warp arrives after its last QK^T of the tile, so the producer loads the next tile's Q
while the consumers still run the last P V and the epilogue. The O store is committed without a
wait; the next epilogue (or the exit) waits for its read of sO.

Why: with one CTA per tile, every tile pays the CTA's start (barrier init, setmaxnreg, the first
loads: Q and the K/V pipeline start empty) and its end (the epilogue, the store's read of smem),
and the SM idles between a CTA's exit and the next CTA's start. A persistent CTA pays the start
once, but only if the next tile's loads do not wait for this tile's epilogue: with O stored
through Q's tile (as in h13), the next Q could load only after the store had read O, and the
tile boundary cost as much as a new CTA (``exp:h14-o-in-q-tile`` measures that version). FA4's
Hopper kernel is not persistent for this problem; this is the step that goes beyond it.

Expect (arithmetic): at 4k a work tile is 32 K/V tiles of ~2,700 cycles (8.4 MFLOP per K/V tile;
h13's 668 TFLOP/s at 8k at 1,680 MHz, 16 tiles on the busiest SMs), ~86,000 cycles. What
persistence hides per work tile: the start, Q's and K_0's loads (800 cycles of latency + 64 KB at
186 B/clk = ~1,150) after the launch and setup, and the end, the wait for the store's read and the
exit: ~2,000 cycles in all, the 1,150 and a guess. That is 2.3% at 4k, 1.2% at 8k, 0.6% at
16k. The work does not even out: 2,048 tiles over 132 CTAs is 16 for 68
CTAs and 15 for 64, the same last-wave makespan (16 tiles) as h13's 2,048 CTAs.
Expect +1-3% over h13, most at 4k, least at 16k.

Evidence: ``ladder sass h14 --against h13``; tests/test_hopper_steps.py (grid = SM_COUNT, the
tile loop in the SASS, the scheduler's tile order covers every tile once for shapes that do not
divide the SM count, Q's empty barrier counts the consumer warps); tests/test_barrier_protocol.py
(the protocol replayed over several tiles per CTA); results/h200.json;
writeups/hopper/14-persistent.md.
"""

import math

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

# Ping-pong: named barrier PINGPONG_BARRIER + g is consumer warpgroup g's turn. Its 256 threads:
# warpgroup g's 128 sync on it, the other warpgroup's 128 arrive on it. Id 0 is the CTA barrier.
PINGPONG_BARRIER = 1
PINGPONG_THREADS = 2 * WARPGROUP_THREADS
# Epilogue: named barrier EPILOGUE_BARRIER gathers the 256 consumer threads once their O is in smem.
EPILOGUE_BARRIER = PINGPONG_BARRIER + NUM_WARPGROUPS
EPILOGUE_THREADS = WARPGROUP_THREADS * NUM_WARPGROUPS
STORE_WARP = 4         # the first consumer warp: one of its threads issues the TMA store
# Persistent grid: one CTA per SM of the H200 (132), the GPU this step is measured on. On a part
# with fewer SMs the extra CTAs wait for a free SM: slower, still correct.
SM_COUNT = 132

# setmaxnreg: registers per thread after the role split (multiples of 8, 24..256). The producer needs
# few; the consumers hold S, O, P. 128 x 24 + 256 x 240 = 64,512 <= the CTA's pool, 168 per thread at launch x 384.
PRODUCER_REGISTERS = 24
CONSUMER_REGISTERS = 240

# smem: Q + O + NUM_STAGES x (K + V) (128-byte swizzled), all bf16: 192 KB. P lives in registers.
# O has a tile of its own (h13 stores it through Q's), so the next work tile's Q can load
# while this one's last P V and epilogue run.
SMEM_ALIGN = 1024      # the 128B swizzle repeats every 8 rows x 128 B; descriptors assume this base
SMEM_BYTES = 2 * (2 * TILE_M * HEAD_DIM + NUM_STAGES * 2 * TILE_N * HEAD_DIM)


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
        sO: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sQ_layout)], SMEM_ALIGN]
        # mbarriers, two pairs per ring stage, one for its K tile and one for its V tile. full:
        # the TMA's bytes landed (1 arrival: the producer's expect-tx). empty: the consumers are
        # done reading that tile (one arrival per consumer warp). Q: once per work tile.
        q_full: cute.struct.MemRange[cutlass.Int64, 1]
        q_empty: cute.struct.MemRange[cutlass.Int64, 1]   # sQ free again: the tile's last QK^T is done
        k_full: cute.struct.MemRange[cutlass.Int64, NUM_STAGES]
        k_empty: cute.struct.MemRange[cutlass.Int64, NUM_STAGES]
        v_full: cute.struct.MemRange[cutlass.Int64, NUM_STAGES]
        v_empty: cute.struct.MemRange[cutlass.Int64, NUM_STAGES]
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


def tile_coords(tile, m_blocks, heads):
    """Work tile -> (m_block, head, batch): the query block fastest, then the head, then the batch,
    so consecutive tiles of one CTA's neighbours share K and V (one (batch, head)) in L2."""
    return tile % m_blocks, (tile // m_blocks) % heads, tile // (m_blocks * heads)


def tile_views(tma_mQ, tma_mK, tma_mVt, tma_mO, m_block, head, batch):
    """One work tile's pieces as TMA coordinates: gQ and gO (TILE_M, D), gK (TILE_N, D, n_blocks),
    gVt (D, TILE_N, n_blocks)."""
    gQ = cute.local_tile(tma_mQ[None, None, head, batch], (TILE_M, HEAD_DIM), (m_block, 0))
    gK = cute.local_tile(tma_mK[None, None, head, batch], (TILE_N, HEAD_DIM), (None, 0))
    gVt = cute.local_tile(tma_mVt[None, None, head, batch], (HEAD_DIM, TILE_N), (0, None))
    gO = cute.local_tile(tma_mO[None, None, head, batch], (TILE_M, HEAD_DIM), (m_block, 0))
    return gQ, gK, gVt, gO


def tiles_of(cta, n_ctas, n_work):
    """How many of the work tiles cta, cta + n_ctas, ... exist (< n_work)."""
    return (n_work - cta + n_ctas - 1) // n_ctas


def ring_position(n_block):
    """(stage, parity) of K/V tile j. Tile j goes to stage j % NUM_STAGES, in round
    j // NUM_STAGES of that stage; a stage's full barrier completes one phase per round, so tile j waits
    with the round's parity. The producer waits for the *previous* round of the empty barrier: the other
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


def make_tma_store(mO, sO_layout):
    """The TMA store of one O tile, (TILE_M, D) from smem in ``sO_layout`` (Q's) to global memory,
    O viewed as (seqlen, d, heads, batch) as Q is for its load."""
    o = cute.make_tensor(mO.iterator, cute.select(mO.layout, mode=[1, 3, 2, 0]))
    return cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), o, sO_layout, (TILE_M, HEAD_DIM))


def make_smem_store(dtype, tiled_mma):
    """Registers -> smem (O): stmatrix, each warp storing four 8x8 bf16 matrices per instruction from
    the accumulator fragment as it lies in its registers."""
    atom = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(transpose=False, num_matrices=4), dtype)
    return cute.make_tiled_copy_C(atom, tiled_mma)


def transpose_view(t):
    """The same smem with its two modes swapped: (i, j) -> t(j, i)."""
    rows, cols = cute.size(t, mode=[0]), cute.size(t, mode=[1])
    return cute.composition(t, cute.make_layout((cols, rows), stride=(rows, 1)))


@cute.jit
def host(mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
         softmax_scale: cutlass.Float32, stream):
    """Build layouts, copies and the tiled MMAs; launch one persistent CTA per SM."""
    dtype = mQ.element_type
    mQ, mK, mV, mO = (contract.aligned(t) for t in (mQ, mK, mV, mO))
    sQ_layout, sK_layout, sVt_layout = make_smem_layouts()
    SharedStorage = make_shared_storage(dtype, sQ_layout, sK_layout, sVt_layout)

    tiled_mma, tiled_mma_pv = make_tiled_mmas(dtype)
    (tma_Q, tma_mQ), (tma_K, tma_mK), (tma_V, tma_mVt) = make_tma_loads(
        mQ, mK, mV, sQ_layout, sK_layout, sVt_layout)
    tma_O, tma_mO = make_tma_store(mO, sQ_layout)
    grid = (SM_COUNT, 1, 1)       # persistent: one CTA per SM; the kernel walks the work tiles
    kernel(tma_Q, tma_mQ, tma_K, tma_mK, tma_V, tma_mVt, tma_O, tma_mO, mO, softmax_scale,
           sQ_layout, sK_layout, sVt_layout, tiled_mma, tiled_mma_pv,
           SharedStorage).launch(
        grid=grid, block=[THREADS, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream)


@cute.kernel
def kernel(tma_Q: cute.CopyAtom, tma_mQ: cute.Tensor, tma_K: cute.CopyAtom, tma_mK: cute.Tensor,
           tma_V: cute.CopyAtom, tma_mVt: cute.Tensor, tma_O: cute.CopyAtom, tma_mO: cute.Tensor,
           mO: cute.Tensor, softmax_scale: cutlass.Float32,
           sQ_layout: cute.ComposedLayout, sK_layout: cute.ComposedLayout,
           sVt_layout: cute.ComposedLayout,
           tiled_mma: cute.TiledMma, tiled_mma_pv: cute.TiledMma, SharedStorage: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    cta, _, _ = cute.arch.block_idx()
    n_ctas, _, _ = cute.arch.grid_dim()
    n_blocks = cute.size(tma_mK.shape[0]) // TILE_N
    # The work: m_blocks x heads x batch tiles; this CTA's are cta, cta + n_ctas, ...
    m_blocks = cute.size(tma_mQ.shape[0]) // TILE_M
    heads = cute.size(tma_mQ.shape[2])
    n_tiles = tiles_of(cta, n_ctas, m_blocks * heads * cute.size(tma_mQ.shape[3]))

    smem = cutlass.memory.SmemAllocator()
    storage = smem.allocate(SharedStorage)
    # The swizzle (the layouts' inner function) goes with the smem pointer; wgmma descriptors
    # and the copies then see plain (outer) layouts.
    sQ = storage.sQ.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)
    sO = storage.sO.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)     # O's tile: Q's layout
    sK = storage.sK.get_tensor(sK_layout.outer, swizzle=sK_layout.inner)
    sVt = storage.sV.get_tensor(sVt_layout.outer, swizzle=sVt_layout.inner)   # (D, TILE_N, stage): B of P V
    q_full, q_empty = storage.q_full.data_ptr(), storage.q_empty.data_ptr()
    k_full, k_empty = storage.k_full.data_ptr(), storage.k_empty.data_ptr()   # stage s: base + s
    v_full, v_empty = storage.v_full.data_ptr(), storage.v_empty.data_ptr()

    # One thread initializes the mbarriers: full ones expect 1 arrival (the producer's expect-tx
    # arrive; the TMA's bytes complete the phase), empty ones one arrival per consumer warp. The
    # fence + CTA barrier (the last one all 384 threads take) make them visible to all and to the TMA.
    if warp_idx == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(q_full, 1)
            cute.arch.mbarrier_init(q_empty, NUM_CONSUMER_WARPS)   # one arrival per consumer warp
            for stage in cutlass.range_constexpr(NUM_STAGES):
                for full, empty in ((k_full, k_empty), (v_full, v_empty)):
                    cute.arch.mbarrier_init(full + stage, 1)
                    cute.arch.mbarrier_init(empty + stage, NUM_CONSUMER_WARPS)
    cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()

    if warp_idx < 4:
        # Producer warpgroup. setmaxnreg applies to the whole warpgroup (all 4 warps execute it);
        # then warp 0 alone issues the loads and warps 1-3 are done.
        cute.arch.setmaxregister_decrease(PRODUCER_REGISTERS)
        if warp_idx == 0:
            producer(tma_Q, tma_K, tma_V, sQ, sK, sVt, tma_mQ, tma_mK, tma_mVt, tma_mO,
                     q_full, q_empty, k_full, k_empty, v_full, v_empty, cta, n_ctas, m_blocks, heads, n_tiles,
                     n_blocks)
    else:
        # Consumer warpgroups: they take the registers the producer gave back.
        cute.arch.setmaxregister_increase(CONSUMER_REGISTERS)
        consumer(tiled_mma, tiled_mma_pv, sQ, sO, sK, sVt, tma_mQ, tma_mK, tma_mVt, tma_mO, tma_O,
                 q_full, q_empty, k_full, k_empty, v_full, v_empty,
                 softmax_scale, cta, n_ctas, m_blocks, heads, n_tiles, n_blocks, warp_idx)


# ------------------------------------------------------------------------------------ warp roles
# One function per role; kernel() above sets up what they share and dispatches by warpgroup. Each
# is a @cute.jit function, traced inline into the kernel (no call in the compiled code).

@cute.jit
def producer(tma_Q: cute.CopyAtom, tma_K: cute.CopyAtom, tma_V: cute.CopyAtom,
             sQ: cute.Tensor, sK: cute.Tensor, sVt: cute.Tensor,
             tma_mQ: cute.Tensor, tma_mK: cute.Tensor, tma_mVt: cute.Tensor, tma_mO: cute.Tensor,
             q_full, q_empty, k_full, k_empty, v_full, v_empty, cta, n_ctas, m_blocks, heads, n_tiles,
             n_blocks):
    """TMA producer (warp 0), per work tile of this CTA: K_0, Q once sQ is free, then per K/V tile
    K_{j+1} and V_j into the ring, whose count goes on across work tiles."""
    dtype = sQ.element_type
    # TMA partitions: each whole smem tile (one ring stage) is one TMA destination; the
    # global side keeps the tile index (for K and V, which tile of the sequence).
    def tma_partition(atom, smem, gmem):
        return cpasync.tma_partition(atom, 0, cute.make_layout(1), cute.group_modes(smem, 0, 2),
                                     cute.group_modes(gmem, 0, 2))
    q_bytes = cute.size_in_bytes(dtype, sQ.layout)
    # expect-tx counts one tile's bytes: what one K copy (or one V copy) delivers.
    k_bytes = cute.size_in_bytes(dtype, cute.select(sK.layout, mode=[0, 1]))
    v_bytes = cute.size_in_bytes(dtype, cute.select(sVt.layout, mode=[0, 1]))
    for tile_iter in range(n_tiles):
        m_block, head, batch = tile_coords(cta + tile_iter * n_ctas, m_blocks, heads)
        gQ, gK, gVt, _ = tile_views(tma_mQ, tma_mK, tma_mVt, tma_mO, m_block, head, batch)
        kv0 = tile_iter * n_blocks          # K/V tiles this CTA loaded before this work tile
        tQsQ, tQgQ = tma_partition(tma_Q, sQ, gQ)
        tKsK, tKgK = tma_partition(tma_K, sK, gK)
        tVsV, tVgV = tma_partition(tma_V, sVt, gVt)

        # K_0 first, before Q: its stage is free as soon as the QK^T of the K tile two ring
        # positions back (in the previous work tile) is done, so it loads while the consumers still run the previous
        # tile's epilogue (n_blocks >= 1: the contract requires seqlen to be a positive
        # multiple of TILE_N). Then each iteration loads K_{j+1} before V_j (h12's order).
        # K/V tile j of this work tile is ring position kv0 + j: the ring's count goes on
        # across work tiles, so the producer fills it without a break between them.
        stage, parity = ring_position(kv0)
        # wait: K's slot in that stage is free (pairs with the consumer warps' arrives on
        # k_empty, the previous round: parity ^ 1; in
        # round 0 the fresh barrier's "previous phase" counts as complete).
        cute.arch.mbarrier_wait(k_empty + stage, parity ^ 1)
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(k_full + stage, k_bytes)
        cute.copy(tma_K, tKgK[None, 0], tKsK[None, stage], tma_bar_ptr=k_full + stage)
        # wait: sQ is free: every consumer warp's last QK^T of the previous work tile is done
        # (pairs with their arrives on q_empty, that tile's phase: parity (i - 1) % 2 = (i % 2) ^ 1;
        # for the first the fresh barrier's "previous phase" counts as complete). So Q_{i+1} loads
        # while tile i's last P V and epilogue still run.
        # timeline(kv0): Q slot wait begin
        cute.arch.mbarrier_wait(q_empty, (tile_iter % 2) ^ 1)
        # timeline(kv0): Q slot wait end
        # Q of this work tile on q_full's phase i (cute.copy of a TMA atom elects its own
        # issuing thread, so it sits outside elect_one; only the expect-tx arrive is inside).
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(q_full, q_bytes)
        cute.copy(tma_Q, tQgQ, tQsQ, tma_bar_ptr=q_full)
        for n_block in range(n_blocks):
            if n_block + 1 < n_blocks:
                k_stage, k_parity = ring_position(kv0 + n_block + 1)
                # wait: K's slot in stage s' is free: k_empty[s'] completed the previous round
                # (the 8 consumer warps' arrives after QK^T of ring position p + 1 - NUM_STAGES,
                # p = kv0 + j, which may lie in an earlier work tile):
                # parity ^ 1; round 0 passes at once.
                # timeline(kv0 + n_block): K slot wait begin
                cute.arch.mbarrier_wait(k_empty + k_stage, k_parity ^ 1)
                # timeline(kv0 + n_block): K slot wait end
                with cute.arch.elect_one():
                    cute.arch.mbarrier_arrive_and_expect_tx(k_full + k_stage, k_bytes)
                cute.copy(tma_K, tKgK[None, n_block + 1], tKsK[None, k_stage], tma_bar_ptr=k_full + k_stage)
            stage, parity = ring_position(kv0 + n_block)
            # wait: V's slot in stage s is free: v_empty[s] completed the previous round (the
            # 8 consumer warps' arrives after P V of ring position p - NUM_STAGES): parity ^ 1; round
            # 0 passes at once.
            # timeline(kv0 + n_block): V slot wait begin
            cute.arch.mbarrier_wait(v_empty + stage, parity ^ 1)
            # timeline(kv0 + n_block): V slot wait end
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(v_full + stage, v_bytes)
            cute.copy(tma_V, tVgV[None, n_block], tVsV[None, stage], tma_bar_ptr=v_full + stage)


@cute.jit
def consumer(tiled_mma: cute.TiledMma, tiled_mma_pv: cute.TiledMma, sQ: cute.Tensor, sO: cute.Tensor,
             sK: cute.Tensor, sVt: cute.Tensor, tma_mQ: cute.Tensor, tma_mK: cute.Tensor, tma_mVt: cute.Tensor,
             tma_mO: cute.Tensor, tma_O: cute.CopyAtom, q_full, q_empty, k_full, k_empty, v_full, v_empty,
             softmax_scale: cutlass.Float32, cta, n_ctas, m_blocks, heads, n_tiles, n_blocks, warp_idx):
    """Consumer warpgroups 1-2, per work tile of this CTA: per K/V tile S_j = Q K_j^T and O += P_{j-1}
    V_{j-1} back to back, the softmax of tile j under that P V; after the tile's last QK^T each warp
    hands sQ back to the producer (q_empty); the epilogue (O through its own smem tile, one TMA store);
    the two warpgroups take turns (ping-pong)."""
    tidx, _, _ = cute.arch.thread_idx()
    dtype = sQ.element_type
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

    # P: acc_S's registers viewed as 8 A fragments (one per 16 keys), then converted to bf16.
    tOrP = cute.make_rmem_tensor_like(_acc_as_a_fragment(acc_S), dtype)

    # Row statistics of the online softmax. Within its warp's 16 rows a thread holds rows r
    # and r+8 (as in mma.sync's m16n8 fragment), so 2 rows here.
    S_mn = _mn_view(acc_S)
    O_mn = _mn_view(acc_O)
    rows_per_thread = cute.size(S_mn, mode=[0])
    row_max = cute.make_rmem_tensor(rows_per_thread, cutlass.Float32)
    row_sum = cute.make_rmem_tensor(rows_per_thread, cutlass.Float32)
    # exp(scale * x) = 2^(x * scale * log2(e)): the scale and the change of base in one factor.
    scale_log2 = softmax_scale * math.log2(math.e)

    row_scale = cute.make_rmem_tensor(rows_per_thread, cutlass.Float32)   # O's factor, applied late

    for tile_iter in range(n_tiles):
        m_block, head, batch = tile_coords(cta + tile_iter * n_ctas, m_blocks, heads)
        _, _, _, gO = tile_views(tma_mQ, tma_mK, tma_mVt, tma_mO, m_block, head, batch)
        kv0 = tile_iter * n_blocks              # K/V tiles this CTA consumed before this work tile
        acc_O.fill(0.0)
        row_max.fill(-cutlass.Float32.inf)
        row_sum.fill(0.0)

        # Turns at the tensor core, as in h09: warpgroup 1 hands warpgroup 0 the first turn. A turn
        # now issues QK^T of tile j and P V of tile j-1.
        wg = warp_idx // 4 - 1                     # consumer warpgroup 0 or 1
        my_turn, other_turn = PINGPONG_BARRIER + wg, PINGPONG_BARRIER + 1 - wg
        if wg == 1:
            cute.arch.barrier_arrive(barrier_id=other_turn, number_of_threads=PINGPONG_THREADS)

        # wait: this work tile's Q landed (pairs with the producer's expect-tx arrive on q_full,
        # phase i: parity i % 2).
        cute.arch.mbarrier_wait(q_full, tile_iter % 2)

        # ---- First half K/V tile: S_0 and its softmax; no P V yet.
        stage, parity = ring_position(kv0)
        # wait: K_0 landed (pairs with the producer's expect-tx arrive on k_full and the TMA's
        # bytes; ring position kv0: its round's parity).
        cute.arch.mbarrier_wait(k_full + stage, parity)
        # Take the first turn (warpgroup 0: the pre-arrive above; warpgroup 1: warpgroup 0's
        # hand-over after its first QK^T).
        cute.arch.barrier(barrier_id=my_turn, number_of_threads=PINGPONG_THREADS)
        # timeline(kv0): QK^T begin
        warpgroup.fence()
        for kb in cutlass.range_constexpr(cute.size(tSrQ, mode=[2])):
            tiled_mma.set(warpgroup.Field.ACCUMULATE, kb != 0)
            cute.gemm(tiled_mma, acc_S, tSrQ[None, None, kb], tSrK[None, None, kb, stage], acc_S)
        warpgroup.commit_group()
        cute.arch.barrier_arrive(barrier_id=other_turn, number_of_threads=PINGPONG_THREADS)
        warpgroup.wait_group(0)
        # timeline(kv0): QK^T end
        # arrive: this warp's QK^T is done reading K_0 (k_empty of ring position kv0). One lane: it
        # counts warps.
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive(k_empty + stage)
        # timeline(kv0): softmax begin
        online_softmax(S_mn, row_max, row_sum, row_scale, scale_log2)
        # P_0 (bf16) into the A-fragment registers. O is still zero (the first turn rescales it by
        # this tile's factors, 0: m_old was -inf).
        tOrP.store(_acc_as_a_fragment(acc_S).load().to(dtype))
        # timeline(kv0): softmax end

        # ---- Steady state, iteration j: QK^T(j) and P V(j-1) in one turn; softmax(j) under P V(j-1).
        for n_block in range(1, n_blocks):
            stage, parity = ring_position(kv0 + n_block)
            prev_stage, prev_parity = ring_position(kv0 + n_block - 1)
            # wait: K_j landed in stage s (pairs with the producer's expect-tx arrive on k_full[s];
            # the round's parity).
            cute.arch.mbarrier_wait(k_full + stage, parity)
            cute.arch.barrier(barrier_id=my_turn, number_of_threads=PINGPONG_THREADS)

            # S_j = Q K_j^T, issued and committed as its own group (group 1 of 2). fence: our
            # register writes of the last iteration (P_{j-1} in tOrP) before the async MMAs read them.
            # timeline(kv0 + n_block): QK^T begin
            warpgroup.fence()
            for kb in cutlass.range_constexpr(cute.size(tSrQ, mode=[2])):
                tiled_mma.set(warpgroup.Field.ACCUMULATE, kb != 0)
                cute.gemm(tiled_mma, acc_S, tSrQ[None, None, kb], tSrK[None, None, kb, stage], acc_S)
            warpgroup.commit_group()
            # O rescaled to tile j-1's max (softmax(j-1)'s factors) while S_j runs on the tensor core:
            # no wgmma uses acc_O now (P V(j-2) completed at the last wait_group(0)), and this work
            # is then off the path from the softmax to the next turn (FA4's rescale_O_before_gemm).
            # timeline(kv0 + n_block): O rescale begin
            for r in cutlass.range_constexpr(rows_per_thread):
                O_mn[r, None] = O_mn[r, None].load() * row_scale[r]
            # timeline(kv0 + n_block): O rescale end
            # wait: V_{j-1} landed (pairs with the producer's expect-tx arrive on v_full; tile
            # j-1's round parity). Taken after QK^T is issued, so S_j does not wait for V's bytes.
            cute.arch.mbarrier_wait(v_full + prev_stage, prev_parity)
            # O += P_{j-1} V_{j-1}, issued right behind S_j without waiting (group 2 of 2).
            # timeline(kv0 + n_block - 1): PV begin
            # fence: the rescale's register writes to acc_O before the async P V accumulates into it.
            warpgroup.fence()
            tiled_mma_pv.set(warpgroup.Field.ACCUMULATE, True)
            for kb in cutlass.range_constexpr(cute.size(tOrP, mode=[2])):
                cute.gemm(tiled_mma_pv, acc_O, tOrP[None, None, kb], tOrVt[None, None, kb, prev_stage], acc_O)
            warpgroup.commit_group()
            # Hand the turn over: the other warpgroup issues its two GEMMs next.
            cute.arch.barrier_arrive(barrier_id=other_turn, number_of_threads=PINGPONG_THREADS)
            # wait_group(1): at most one group still running, so the older one, S_j, is done and
            # acc_S may be read; P V (reading tOrP, writing acc_O) may still run.
            warpgroup.wait_group(1)
            # timeline(kv0 + n_block): QK^T end
            # arrive: this warp's QK^T is done reading K_j (k_empty[s], this round).
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive(k_empty + stage)

            # Softmax of tile j on acc_S only: tOrP and acc_O belong to the P V in flight.
            # timeline(kv0 + n_block): softmax begin
            online_softmax(S_mn, row_max, row_sum, row_scale, scale_log2)
            # timeline(kv0 + n_block): softmax end
            # wait_group(0): P V(j-1) is done: tOrP may be overwritten and acc_O read.
            warpgroup.wait_group(0)
            # timeline(kv0 + n_block - 1): PV end
            # arrive: this warp's P V is done reading V_{j-1} (v_empty, tile j-1's round).
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive(v_empty + prev_stage)
            # P_j (bf16) into the registers P V(j-1) has finished reading. O's rescale to the new max
            # waits for the next turn, under its QK^T.
            # timeline(kv0 + n_block): P begin
            tOrP.store(_acc_as_a_fragment(acc_S).load().to(dtype))
            # timeline(kv0 + n_block): P end

        # arrive: this warp's last QK^T is done reading sQ (its wait_group above): with all 8
        # warps' arrives the producer may load the next work tile's Q (q_empty).
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive(q_empty)

        # ---- Last half tile: O rescaled to the last tile's max, then P V of the last tile alone.
        for r in cutlass.range_constexpr(rows_per_thread):
            O_mn[r, None] = O_mn[r, None].load() * row_scale[r]
        # wait: the last V landed (pairs with the producer's expect-tx arrive on v_full; its round's
        # parity).
        last_stage, last_parity = ring_position(kv0 + n_blocks - 1)
        cute.arch.mbarrier_wait(v_full + last_stage, last_parity)
        cute.arch.barrier(barrier_id=my_turn, number_of_threads=PINGPONG_THREADS)
        # timeline(kv0 + n_blocks - 1): PV begin
        warpgroup.fence()
        tiled_mma_pv.set(warpgroup.Field.ACCUMULATE, True)
        for kb in cutlass.range_constexpr(cute.size(tOrP, mode=[2])):
            cute.gemm(tiled_mma_pv, acc_O, tOrP[None, None, kb], tOrVt[None, None, kb, last_stage], acc_O)
        warpgroup.commit_group()
        # Warpgroup 1's pre-arrive gave warpgroup 0 one turn more than its hand-overs do, so only
        # warpgroup 0 hands over after its last turn: every named-barrier generation then has one
        # sync side and one arrive side, none left half-arrived at exit.
        if wg == 0:
            cute.arch.barrier_arrive(barrier_id=other_turn, number_of_threads=PINGPONG_THREADS)
        warpgroup.wait_group(0)
        # timeline(kv0 + n_blocks - 1): PV end
        # arrive: the last P V is done reading its V (v_empty, the last tile's round).
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive(v_empty + last_stage)

        # Epilogue: O / rowsum, to bf16, into O's smem tile with stmatrix, then one TMA store.
        # timeline(kv0 + n_blocks - 1): epilogue begin
        for r in cutlass.range_constexpr(rows_per_thread):
            total = _quad_allreduce(row_sum[r], lambda a, b: a + b)
            O_mn[r, None] = O_mn[r, None].load() * cute.arch.rcp_approx(total)
        rO = cute.make_fragment_like(acc_O, dtype)
        rO.store(acc_O.load().to(dtype))
        smem_store = make_smem_store(dtype, tiled_mma_pv).get_slice(mma_tidx)
        # wait(read): the previous work tile's TMA store has read sO (long done: a whole tile ago);
        # then the barrier tells the other 224 consumer threads that sO may be written.
        if warp_idx == STORE_WARP:
            cute.arch.cp_async_bulk_wait_group(0, read=True)
        cute.arch.barrier(barrier_id=EPILOGUE_BARRIER, number_of_threads=EPILOGUE_THREADS)
        cute.copy(smem_store, smem_store.retile(rO), smem_store.partition_D(sO))
        # fence: this thread's smem writes (generic proxy) become visible to the TMA (async proxy).
        cute.arch.fence_view_async_shared()
        # barrier: all 256 consumer threads have written and fenced their part of the tile.
        cute.arch.barrier(barrier_id=EPILOGUE_BARRIER, number_of_threads=EPILOGUE_THREADS)
        if warp_idx == STORE_WARP:
            tOsO, tOgO = cpasync.tma_partition(tma_O, 0, cute.make_layout(1), cute.group_modes(sO, 0, 2),
                                               cute.group_modes(gO, 0, 2))
            # One TMA store of the whole tile. The whole warp executes the copy; the store is a
            # warp-level (uniform) instruction, one UTMASTG per box, as in FA4's epilogue.
            cute.copy(tma_O, tOsO, tOgO)
            # commit, no wait: the consumers go on to the next work tile; the next epilogue (or
            # the exit, below) waits for this store's read of sO.
            cute.arch.cp_async_bulk_commit_group()
        # timeline(kv0 + n_blocks - 1): epilogue end
    # wait(read): the last TMA store has read sO before the CTA exits and its smem goes away (the
    # global writes complete on their own).
    if warp_idx == STORE_WARP:
        cute.arch.cp_async_bulk_wait_group(0, read=True)


def online_softmax(S_mn, row_max, row_sum, row_scale, scale_log2):
    """One tile of the online softmax on this thread's rows of S (in place: S becomes P): the new
    row max, P = 2^(s * scale_log2 - m * scale_log2) (one FFMA and one MUFU.EX2 per score, as in
    h10), the running sum rescaled and extended. O's rescale factor per row goes to ``row_scale``
    for the caller to apply once O is no longer being accumulated."""
    for r in range(cute.size(S_mn, mode=[0])):      # a plain function: a Python loop, unrolled
        s_row = S_mn[r, None].load()
        m_new = _quad_allreduce(_row_max(S_mn[r, None], row_max[r]), cute.arch.fmax)
        # 2^((m_old - m_new) * scale_log2) = exp(scale * (m_old - m_new)); the first tile has
        # m_old = -inf, so this is 0 (ex2.approx of -inf is +0).
        rescale = cute.math.exp2((row_max[r] - m_new) * scale_log2, fastmath=True)
        m_scaled = m_new * scale_log2
        p_row = cute.math.exp2(s_row * scale_log2 - m_scaled, fastmath=True)
        row_sum[r] = row_sum[r] * rescale + p_row.reduce(cute.ReductionOp.ADD, 0.0, 0)
        row_max[r] = m_new
        row_scale[r] = rescale
        S_mn[r, None] = p_row


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
    id="h14",
    slug="persistent",
    title="Persistent CTAs",
    change="one CTA per SM walks a static tile list (m-block, head, batch); O gets its own smem tile, so the "
           "next tile's Q, K, V load under this tile's last P V and epilogue",
    archs=("sm_90a",),
    enabler=False,
    threads=THREADS,
    tile_m=TILE_M,
    tile_n=TILE_N,
    smem_bytes=SMEM_BYTES,
    predecessor="h13",
    sass_present=("HGMMA", "HGMMA.RS", "UTMALDG", "UTMASTG", "STSM", "SYNCS", "MUFU.EX2", "USETMAXREG", "BAR.ARV"),
    sass_absent=("HMMA", "LDSM", "LDG", "LDGSTS", "STS", "STG"),
    # softmax_peeled: the first half tile's softmax runs before the loop, a copy of the loop's.
    extra={"bound": {"overlap": "overlapped", "loads": "hidden"}, "softmax_peeled": 1,
           "kv_stages": NUM_STAGES, "pingpong_barriers": (PINGPONG_BARRIER, PINGPONG_BARRIER + 1),
           # the timeline at seqlen 1k: 8 K/V tiles per work tile, so its kept tiles cross a boundary
           "timeline_seqlen": 1024},
)


attention = contract.make_attention(INFO, host)
