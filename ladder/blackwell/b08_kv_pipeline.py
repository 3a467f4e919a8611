"""b08 — load pipeline: a ring of 2 K/V stages; the load warp runs a tile ahead of the MMA warp.

Change from b07: shared memory holds NUM_STAGES = 2 (K, V) tile pairs instead of one, each stage
with its own kv_full and kv_empty mbarriers. Tile j goes to stage j % 2, so while the MMA warp
and the softmax warpgroups work on tile j, the load warp is already loading tile j+1 into the
other stage. Barrier phases now count *rounds* of the ring: tile j is round j // 2 of its stage,
so its kv_full completes with parity (j // 2) % 2, and the load warp waits for kv_empty of the
previous round. The expect-tx announces one stage's bytes.

Why: with one buffer (b07) the load warp can issue K_{j+1}, V_{j+1} only after the P V MMAs of
tile j have completed, so every tile pays a whole load latency between the last P V of one tile
and the first S MMA of the next, while the tensor cores idle. With two stages that load overlaps
tile j's MMAs and softmax.

Expect (arithmetic): per K/V tile the CTA's MMAs are 2 Q tiles x 2 GEMMs x 2 x 128^3 = 16.8 MFLOP,
about 1.1 us at a B200 SM's share of its dense bf16 rate (~2.25 PFLOP/s over 148 SMs), and a
64 KB TMA load has a latency of the same order. In b07 that latency sits between every two tiles;
with two stages it overlaps the previous tile's MMAs and softmax. But the load is not most of a b07
tile: on the bound model's terms its chain is ~2,048 tensor + ~3,160 softmax + ~1,150 exposed load
cycles, and taking the load out leaves ~5,200 of ~6,360: expect a clear gain, about 1.2x (more if a
b07 load wait costs more than the model's constants say; the Hopper twin gained about a third, h08's
writeup). smem: Q 64 KB + 2 x (K 32 KB + V 32 KB) = 192 KB of the 227 KB a CTA may use.

Evidence: ``ladder sass b08 --against b07`` (smem grows by one stage; the waits address a stage);
tests/test_blackwell_steps.py (stage count > 1, smem from the shared-storage struct <= 227 KB,
expect-tx = one stage); tests/test_pipeline_protocol.py (the ring's parities replayed against a
model of the mbarriers); writeups/blackwell/08-kv-pipeline.md. Compiled, not yet run on a B200.
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
SOFTMAX_WARPS = 4 * NUM_Q_TILES    # per Q tile 4 warps x 32 lanes = the 128 TMEM lanes, one per row
MMA_WARP = SOFTMAX_WARPS           # warp 8: issues every tcgen05.mma and commit; owns TMEM
LOAD_WARP = SOFTMAX_WARPS + 1      # warp 9: issues every TMA copy
NUM_WARPS = SOFTMAX_WARPS + 2
THREADS = NUM_WARPS * 32
KV_EMPTY_ARRIVALS = 1              # kv_empty completes on the MMA warp's tcgen05.commit alone
NUM_STAGES = 2                     # K/V ring depth: tiles in flight ahead of the MMA warp
# Columns per tcgen05.ld/st of S or O (16, as in b02-b06). A register-allocation knob, not part of
# the algorithm: 32 makes ptxas 13.4 hold this 320-thread kernel at 64 registers and spill; 16
# spills nothing. From b07 on the CTA has 320 threads, which caps every thread at 168 registers.
TMEM_CHUNK = 16

# TMEM: fp32 S0, S1 (TILE_N columns each), then fp32 O0, O1 (HEAD_DIM columns each): all 512.
TMEM_S_COL = (0, TILE_N)                                   # S of Q tile 0, 1
TMEM_O_COL = (2 * TILE_N, 2 * TILE_N + HEAD_DIM)           # O of Q tile 0, 1
TMEM_COLS = 512

# smem: 2 Q tiles + NUM_STAGES x (K + V) (128-byte swizzled), all bf16. P lives in TMEM.
SMEM_ALIGN = 1024      # the 128B swizzle repeats every 8 rows x 128 B; descriptors assume this base
SMEM_BYTES = 2 * (NUM_Q_TILES * TILE_M * HEAD_DIM + NUM_STAGES * 2 * TILE_N * HEAD_DIM)
# P_g (bf16, TILE_N keys = TILE_N / 2 columns) aliases the first columns of S_g.
P_COLS = TILE_N * 16 // 32


def _umma_layout(kind, shape, mn_major=False):
    """Tile a tcgen05 smem layout atom over ``shape``; an MN-major operand is tiled along its
    contiguous (first) mode first. A third mode (the Q tile) is tiled last: whole tiles."""
    atom = tcgen05.make_smem_layout_atom(kind, cutlass.BFloat16)
    order = ((1, 0) if mn_major else (0, 1)) + tuple(range(2, len(shape)))
    return cute.tile_to_shape(atom, shape, order)


def make_smem_layouts():
    """(sQ, sK, sVt). Q, K, V in the 128B-swizzle layouts: atoms of 8 rows x 128 bytes with
    the 16-byte chunks of each row permuted by XOR with the row index, tiled over the tile; the
    UMMA descriptors carry the same mode. Q and K (A/B of S) are K-major; V, the B operand of
    O += P V shaped (D, keys), is MN-major. Q has a third mode, the Q tile: (TILE_M, D,
    NUM_Q_TILES); K and V one, the ring stage: (TILE_N, D, NUM_STAGES) and (D, TILE_N,
    NUM_STAGES); each a whole swizzled tile. P is not in shared memory."""
    sQ = _umma_layout(tcgen05.SmemLayoutAtomKind.K_SW128, (TILE_M, HEAD_DIM, NUM_Q_TILES))
    sK = _umma_layout(tcgen05.SmemLayoutAtomKind.K_SW128, (TILE_N, HEAD_DIM, NUM_STAGES))
    sVt = _umma_layout(tcgen05.SmemLayoutAtomKind.MN_SW128, (HEAD_DIM, TILE_N, NUM_STAGES), mn_major=True)
    return sQ, sK, sVt


def make_tmem_p_layout():
    """P as the A operand of O += P V: (TILE_M, TILE_N) bf16, K-major. Read from TMEM, where a
    row of P is one lane, two bf16 per column; this layout only gives the MMA the operand's
    logical shape and K-major order (no smem address, no swizzle)."""
    return _umma_layout(tcgen05.SmemLayoutAtomKind.K_INTER, (TILE_M, TILE_N)).outer


def make_shared_storage(dtype, sQ_layout, sK_layout, sVt_layout):
    """The CTA's shared memory, as a struct (its size is the launch's dynamic smem)."""
    @cute.struct
    class SharedStorage:
        sQ: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sQ_layout)], SMEM_ALIGN]
        sK: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sK_layout)], SMEM_ALIGN]
        sV: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sVt_layout)], SMEM_ALIGN]
        # mbarriers, one per hand-off between two roles (see the module docstring).
        q_full: cute.struct.MemRange[cutlass.Int64, 1]
        kv_full: cute.struct.MemRange[cutlass.Int64, NUM_STAGES]
        kv_empty: cute.struct.MemRange[cutlass.Int64, NUM_STAGES]
        s_full: cute.struct.MemRange[cutlass.Int64, NUM_Q_TILES]
        p_full: cute.struct.MemRange[cutlass.Int64, NUM_Q_TILES]
        o_full: cute.struct.MemRange[cutlass.Int64, 1]
        # tcgen05.alloc writes the TMEM base address here.
        tmem_base: cutlass.Int32
    return SharedStorage


def make_tma_loads(mQ, mK, mV, sQ_layout, sK_layout, sVt_layout):
    """TMA atoms (descriptor + smem layout, swizzle included) and the coordinate tensors they
    index; each atom loads one tile (one Q tile, one ring stage of K or V). A TMA box is
    described with the contiguous mode first, so Q and K are viewed as (seqlen, d, heads, batch)
    and V as (d, seqlen, heads, batch): V's smem tile is (D, keys)."""
    q = cute.make_tensor(mQ.iterator, cute.select(mQ.layout, mode=[1, 3, 2, 0]))
    k = cute.make_tensor(mK.iterator, cute.select(mK.layout, mode=[1, 3, 2, 0]))
    vt = cute.make_tensor(mV.iterator, cute.select(mV.layout, mode=[3, 1, 2, 0]))
    load = cpasync.CopyBulkTensorTileG2SOp()
    return (cpasync.make_tiled_tma_atom(load, q, cute.select(sQ_layout, mode=[0, 1]), (TILE_M, HEAD_DIM)),
            cpasync.make_tiled_tma_atom(load, k, cute.select(sK_layout, mode=[0, 1]), (TILE_N, HEAD_DIM)),
            cpasync.make_tiled_tma_atom(load, vt, cute.select(sVt_layout, mode=[0, 1]), (HEAD_DIM, TILE_N)))


def ring_position(n_block):
    """(stage, parity) of K/V tile j. Tile j goes to stage j % NUM_STAGES, in round
    j // NUM_STAGES of that stage; a stage's kv_full completes one phase per round, so tile j waits
    with the round's parity. The load warp waits for the *previous* round of kv_empty: the other
    parity. (tests/test_pipeline_protocol.py replays this bookkeeping against a model of the
    mbarriers.)"""
    return n_block % NUM_STAGES, (n_block // NUM_STAGES) % 2


def make_tiled_mmas(dtype):
    """(for S = Q K^T, for O += P V). One tcgen05.mma.cta_group::1 atom each, M = 128, fp32
    accumulators in TMEM. S: A (Q) and B (K) from smem, K-major. O: A (P) from TMEM (a TS-MMA;
    a TMEM A operand is always K-major), B (V) from smem, MN-major."""
    K, MN = cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.MN
    tiled_mma = cute.make_tiled_mma(tcgen05.MmaF16BF16Op(
        dtype, cutlass.Float32, (TILE_M, TILE_N, MMA_K), tcgen05.CtaGroup.ONE,
        tcgen05.OperandSource.SMEM, K, K))
    tiled_mma_pv = cute.make_tiled_mma(tcgen05.MmaF16BF16Op(
        dtype, cutlass.Float32, (TILE_M, HEAD_DIM, MMA_K), tcgen05.CtaGroup.ONE,
        tcgen05.OperandSource.TMEM, K, MN))
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
    thread stores per chunk of its row (O to global memory)."""
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
    sQ_layout, sK_layout, sVt_layout = make_smem_layouts()

    SharedStorage = make_shared_storage(dtype, sQ_layout, sK_layout, sVt_layout)
    (tma_Q, tma_mQ), (tma_K, tma_mK), (tma_V, tma_mVt) = make_tma_loads(
        mQ, mK, mV, sQ_layout, sK_layout, sVt_layout)
    tiled_mma, tiled_mma_pv = make_tiled_mmas(dtype)
    grid = (cute.size(mQ.shape[1]) // (NUM_Q_TILES * TILE_M), cute.size(mQ.shape[0]), cute.size(mQ.shape[2]))
    kernel(tma_Q, tma_mQ, tma_K, tma_mK, tma_V, tma_mVt, mO, softmax_scale,
           sQ_layout, sK_layout, sVt_layout, make_tmem_p_layout(), tiled_mma, tiled_mma_pv,
           SharedStorage).launch(
        grid=grid, block=[THREADS, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream)


@cute.kernel
def kernel(tma_Q: cute.CopyAtom, tma_mQ: cute.Tensor, tma_K: cute.CopyAtom, tma_mK: cute.Tensor,
           tma_V: cute.CopyAtom, tma_mVt: cute.Tensor, mO: cute.Tensor,
           softmax_scale: cutlass.Float32,
           sQ_layout: cute.ComposedLayout, sK_layout: cute.ComposedLayout,
           sVt_layout: cute.ComposedLayout, tP_layout: cute.Layout,
           tiled_mma: cute.TiledMma, tiled_mma_pv: cute.TiledMma, SharedStorage: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    # Prefetch the TMA descriptors (kernel parameters, built on the host) into the descriptor cache
    # now, so that the first copies do not wait to fetch them, as FA4 does: one warp, once per CTA.
    if warp_idx == 0:
        for atom in (tma_Q, tma_K, tma_V):
            cpasync.prefetch_descriptor(atom)
    m_block, batch, head = cute.arch.block_idx()
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
    sK = storage.sK.get_tensor(sK_layout.outer, swizzle=sK_layout.inner)      # (TILE_N, D, stage)
    sVt = storage.sV.get_tensor(sVt_layout.outer, swizzle=sVt_layout.inner)   # (D, TILE_N, stage): B of P V
    q_full = storage.q_full.data_ptr()
    kv_full, kv_empty = storage.kv_full.data_ptr(), storage.kv_empty.data_ptr()   # stage s: base + s
    s_full, p_full, o_full = storage.s_full.data_ptr(), storage.p_full.data_ptr(), storage.o_full.data_ptr()

    # The MMA warp allocates TMEM (a warp-wide instruction; the base address lands in smem) and
    # gives up the right to allocate more; one thread initializes the mbarriers. Arrival counts:
    # one for those completed by an expect-tx arrive or a tcgen05.commit, one per softmax thread
    # for p_full. The fence + CTA barrier (the last one all 320 threads take before the roles
    # split) publish them to every thread and to the TMA.
    if warp_idx == MMA_WARP:
        cute.arch.alloc_tmem(TMEM_COLS, storage.tmem_base)
        cute.arch.relinquish_tmem_alloc_permit()
        with cute.arch.elect_one():
            for bar in (q_full, o_full):
                cute.arch.mbarrier_init(bar, 1)
            for stage in cutlass.range_constexpr(NUM_STAGES):
                cute.arch.mbarrier_init(kv_full + stage, 1)
                cute.arch.mbarrier_init(kv_empty + stage, KV_EMPTY_ARRIVALS)
            for g in cutlass.range_constexpr(NUM_Q_TILES):
                cute.arch.mbarrier_init(s_full + g, 1)
                cute.arch.mbarrier_init(p_full + g, TILE_M)
    cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()
    tmem_base = cute.arch.retrieve_tmem_ptr(cutlass.Float32, 16, storage.tmem_base)

    # The accumulators are TMEM tensors: S_g at column TMEM_S_COL[g], O_g at TMEM_O_COL[g], lane
    # i = row i of Q tile g; P_g (bf16) over S_g's first P_COLS columns. One CTA is one MMA
    # "thread" (cta_group::1): the MMA warp slices at 0.
    tStS = tiled_mma.make_fragment_C(tiled_mma.partition_shape_C((TILE_M, TILE_N)))
    tOtO = tiled_mma_pv.make_fragment_C(tiled_mma_pv.partition_shape_C((TILE_M, HEAD_DIM)))
    tStS = [cute.make_tensor(tmem_base + TMEM_S_COL[g], tStS.layout) for g in range(NUM_Q_TILES)]
    tOtO = [cute.make_tensor(tmem_base + TMEM_O_COL[g], tOtO.layout) for g in range(NUM_Q_TILES)]

    if warp_idx == LOAD_WARP:
        load_warp(tma_Q, tma_K, tma_V, sQ, sK, sVt, gQ, gK, gVt, q_full, kv_full, kv_empty, m_block, n_blocks)
    elif warp_idx == MMA_WARP:
        mma_warp(tiled_mma, tiled_mma_pv, sQ, sK, sVt, tStS, tOtO, tP_layout, tmem_base, storage.tmem_base,
                 q_full, kv_full, kv_empty, s_full, p_full, o_full, n_blocks)
    else:
        softmax_warpgroup(tStS, tOtO, gO, s_full, p_full, o_full, softmax_scale, m_block, n_blocks)

    # Free TMEM: every softmax thread's loads are complete (wait::ld above), fenced before the
    # barrier all 320 threads reach at the end; then the allocating warp deallocates.
    tcgen05_fence_before_thread_sync()
    cute.arch.sync_threads()
    if warp_idx == MMA_WARP:
        tcgen05_fence_after_thread_sync()
        cute.arch.dealloc_tmem(tmem_base, TMEM_COLS)


# ------------------------------------------------------------------------------------ warp roles
# One function per role; kernel() above sets up what they share and dispatches by warp. Each is
# a @cute.jit function, traced inline into the kernel (no call in the compiled code).

@cute.jit
def load_warp(tma_Q: cute.CopyAtom, tma_K: cute.CopyAtom, tma_V: cute.CopyAtom,
              sQ: cute.Tensor, sK: cute.Tensor, sVt: cute.Tensor,
              gQ: cute.Tensor, gK: cute.Tensor, gVt: cute.Tensor,
              q_full, kv_full, kv_empty, m_block, n_blocks):
    """TMA producer: both Q tiles once, then K_j and V_j into stage j % NUM_STAGES of the K/V ring."""
    dtype = sQ.element_type
    # TMA partitions: each whole smem tile is one TMA destination; the global side keeps the
    # tile index (for K and V, which tile of the sequence).
    def tma_partition(atom, smem_tile, gmem_tile):
        return cpasync.tma_partition(atom, 0, cute.make_layout(1), cute.group_modes(smem_tile, 0, 2),
                                     cute.group_modes(gmem_tile, 0, 2))
    tQsQ, tQgQ = tma_partition(tma_Q, sQ, gQ)
    tKsK, tKgK = tma_partition(tma_K, sK, gK)
    tVsV, tVgV = tma_partition(tma_V, sVt, gVt)
    q_bytes = cute.size_in_bytes(dtype, sQ.layout)         # both Q tiles, on one barrier phase
    # expect-tx counts one stage's bytes: what one K copy plus one V copy deliver.
    kv_bytes = (cute.size_in_bytes(dtype, cute.select(sK.layout, mode=[0, 1]))
                + cute.size_in_bytes(dtype, cute.select(sVt.layout, mode=[0, 1])))
    # Both Q tiles once (cute.copy of a TMA atom elects its own issuing thread, so it sits
    # outside elect_one; only the expect-tx arrive is inside).
    with cute.arch.elect_one():
        cute.arch.mbarrier_arrive_and_expect_tx(q_full, q_bytes)
    for g in cutlass.range_constexpr(NUM_Q_TILES):
        cute.copy(tma_Q, tQgQ[None, NUM_Q_TILES * m_block + g], tQsQ[None, g], tma_bar_ptr=q_full)
    for n_block in range(n_blocks):
        # Tile j goes to stage s = j % NUM_STAGES, in round j // NUM_STAGES of that stage.
        stage, parity = ring_position(n_block)
        # wait: stage s is free. Pairs with the MMA warp's tcgen05.commit (its arrive) on
        # kv_empty[s] after the P V MMAs of tile j - NUM_STAGES, the previous round: parity ^ 1.
        # In round 0 the fresh barrier's "previous phase" (parity 1) counts as complete, so
        # the load warp fills every stage without waiting.
        # timeline: slot wait begin
        cute.arch.mbarrier_wait(kv_empty + stage, parity ^ 1)
        # timeline: slot wait end
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(kv_full + stage, kv_bytes)
        cute.copy(tma_K, tKgK[None, n_block], tKsK[None, stage], tma_bar_ptr=kv_full + stage)
        cute.copy(tma_V, tVgV[None, n_block], tVsV[None, stage], tma_bar_ptr=kv_full + stage)
    # Producer tail: drain the ring before the exit barrier. The kv_empty arrives come from the
    # tensor core's commits, not from a thread, so no thread's exit orders them: without these
    # waits one could land after the CTA has exited, in shared memory that already belongs to
    # the next CTA. Positions n_blocks .. n_blocks + NUM_STAGES - 1 are the next round of each
    # stage, so their waits are each stage's last phase.
    for i in cutlass.range_constexpr(NUM_STAGES):
        stage, parity = ring_position(n_blocks + i)
        # wait: the last MMAs that read stage s are done. Pairs with the MMA warp's last
        # tcgen05.commit (its arrive) on kv_empty[s]: parity ^ 1, as in the loop; a stage no
        # tile used (n_blocks < NUM_STAGES) passes at once, as in round 0.
        cute.arch.mbarrier_wait(kv_empty + stage, parity ^ 1)


@cute.jit
def mma_warp(tiled_mma: cute.TiledMma, tiled_mma_pv: cute.TiledMma, sQ: cute.Tensor, sK: cute.Tensor,
             sVt: cute.Tensor, tStS, tOtO, tP_layout: cute.Layout, tmem_base, tmem_base_slot,
             q_full, kv_full, kv_empty, s_full, p_full, o_full, n_blocks):
    """One thread issues every tcgen05.mma: S_g = Q_g K^T, then O_g += P_g V once softmax g has
    written P_g."""
    dtype = sQ.element_type
    thr_mma = tiled_mma.get_slice(0)
    thr_mma_pv = tiled_mma_pv.get_slice(0)
    # Smem operands as UMMA descriptors, one per 16-wide k-block (and Q tile); P from TMEM.
    tSrQ = tiled_mma.make_fragment_A(thr_mma.partition_A(sQ))
    tSrK = tiled_mma.make_fragment_B(thr_mma.partition_B(sK))
    tOrVt = tiled_mma_pv.make_fragment_B(thr_mma_pv.partition_B(sVt))
    # P_g, the A operand of O_g += P_g V, in TMEM over S_g's first P_COLS columns. make_fragment_A
    # gives the operand's layout but a tensor at TMEM address 0, so it is re-based on the
    # allocated base, viewed as bf16: the pointer then counts bf16 elements, two per column.
    tOrP = tiled_mma_pv.make_fragment_A(thr_mma_pv.partition_A(cute.make_tensor(tmem_base, tP_layout)))
    p_base = cute.arch.retrieve_tmem_ptr(dtype, 16, tmem_base_slot)
    bf16_per_col = cutlass.Float32.width // dtype.width
    tOrP = [cute.make_tensor(p_base + TMEM_S_COL[g] * bf16_per_col, tOrP.layout)
            for g in range(NUM_Q_TILES)]

    # wait: both Q tiles landed (pairs with the load warp's expect-tx arrive; phase 0, parity 0).
    cute.arch.mbarrier_wait(q_full, 0)
    for n_block in range(n_blocks):
        stage, parity = ring_position(n_block)
        # wait: K_j, V_j landed in stage s. Pairs with the load warp's expect-tx arrive (and
        # the TMA's bytes) on kv_full[s]: one phase per round of the ring, the round's parity.
        # timeline: K/V wait begin
        cute.arch.mbarrier_wait(kv_full + stage, parity)
        # timeline: K/V wait end
        tcgen05_fence_after_thread_sync()
        # S_g = Q_g K^T, then a commit to s_full[g]. A commit covers every MMA this thread
        # issued before it, so it also tells softmax g that tile j-1's P_g V is done.
        # With the ring, K_j may already be here while tile j-1's P_g V MMAs are still
        # running: S_g then overwrites the columns they read P_g from, and only the issue
        # order of one thread's tcgen05.mma keeps the read first (as in FA4; see the writeup).
        for g in cutlass.range_constexpr(NUM_Q_TILES):
            # timeline: S{g} begin
            for kb in cutlass.range_constexpr(cute.size(tSrQ, mode=[2])):
                tiled_mma.set(tcgen05.Field.ACCUMULATE, kb != 0)
                cute.gemm(tiled_mma, tStS[g], tSrQ[None, None, kb, g], tSrK[None, None, kb, stage],
                          tStS[g])
            with cute.arch.elect_one():
                tcgen05.commit(s_full + g)
            # timeline: S{g} end
        # O_g += P_g V (TS-MMA), once softmax g has written P_g and rescaled O_g.
        for g in cutlass.range_constexpr(NUM_Q_TILES):
            # wait: P_g of tile j in TMEM, O_g rescaled. Pairs with the arrives of all 128
            # threads of softmax warpgroup g on p_full[g]: one phase per tile, parity j % 2.
            # timeline: P{g} wait begin
            cute.arch.mbarrier_wait(p_full + g, n_block % 2)
            # timeline: P{g} wait end
            tcgen05_fence_after_thread_sync()
            # timeline: O{g} begin
            for kb in cutlass.range_constexpr(cute.size(tOrP[0], mode=[2])):
                tiled_mma_pv.set(tcgen05.Field.ACCUMULATE, n_block > 0 or kb != 0)
                cute.gemm(tiled_mma_pv, tOtO[g], tOrP[g][None, None, kb], tOrVt[None, None, kb, stage],
                          tOtO[g])
            # timeline: O{g} end
        # Stage s (K_j, V_j) is free once these MMAs complete: tell the load warp.
        with cute.arch.elect_one():
            tcgen05.commit(kv_empty + stage)
    # O final once the last P V MMAs complete: tell the softmax warpgroups.
    with cute.arch.elect_one():
        tcgen05.commit(o_full)


@cute.jit
def softmax_warpgroup(tStS, tOtO, gO: cute.Tensor, s_full, p_full, o_full, softmax_scale: cutlass.Float32,
                      m_block, n_blocks):
    """Softmax warpgroup g (warps 4g .. 4g+3): P_g from S_g in TMEM, O_g's rescale, the epilogue."""
    tidx, _, _ = cute.arch.thread_idx()
    warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    dtype = gO.element_type
    # Warps 4g .. 4g+3 run the softmax of Q tile g; thread `row` owns row (= TMEM lane) `row`
    # of S_g, P_g and O_g. Warp w touches lanes 32 (w % 4) .. +31: its own quarter.
    q_tile = warp_idx // 4
    row = tidx % TILE_M

    # TMEM <-> registers, TMEM_CHUNK columns of this thread's row per tcgen05.ld/st, for S and
    # O alike. Chunk c is the first chunk's view moved c * TMEM_CHUNK columns along (a TMEM
    # address counts 32-bit columns). The copies are built for the 128 threads of one Q tile
    # (slice `row`); this thread's Q tile picks the columns.
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
    gO_mine = gO[None, None, NUM_Q_TILES * m_block + q_tile]
    r_chunk = cute.make_rmem_tensor(thr_load.partition_D(O_chunk0).shape, cutlass.Float32)
    r_chunk_bf16 = cute.make_rmem_tensor(r_chunk.shape, dtype)
    # P: TMEM_CHUNK keys of P (bf16) fill TMEM_CHUNK / 2 columns. The registers are fp32-typed
    # for the 32-bit tcgen05.st; the same registers viewed as bf16 receive the converted values.
    P_chunk0 = cute.composition(tStS[0][(None, None), 0, 0], cute.make_layout((TILE_M, TMEM_CHUNK // 2)))
    _, store_p = make_row_copies(P_chunk0, TMEM_CHUNK // 2)
    thr_store_p = store_p.get_slice(row)
    tP_st = thr_store_p.partition_D(P_chunk0)
    tP_st = cute.make_tensor(tP_st.iterator + s_shift, tP_st.layout)
    r_p_cols = cute.make_rmem_tensor(thr_store_p.partition_S(P_chunk0).shape, cutlass.Float32)
    r_p = cute.make_tensor(cute.recast_ptr(r_p_cols.iterator, dtype=dtype), r_chunk.layout)
    num_chunks_S, num_chunks_O = TILE_N // TMEM_CHUNK, HEAD_DIM // TMEM_CHUNK

    def chunk(t, c, width=TMEM_CHUNK):
        return cute.make_tensor(t.iterator + c * width, t.layout)

    row_max = -cutlass.Float32.inf
    row_sum = cutlass.Float32(0.0)
    for n_block in range(n_blocks):
        # wait: S_g of tile j is in TMEM (and tile j-1's P_g V done). Pairs with the MMA
        # warp's tcgen05.commit (its arrive) on s_full[g]: one phase per tile, parity j % 2.
        # timeline: S wait begin
        cute.arch.mbarrier_wait(s_full + q_tile, n_block % 2)
        # timeline: S wait end
        # timeline: softmax begin
        tcgen05_fence_after_thread_sync()

        # Online softmax on this thread's row, same formulas as h02; the row is whole in one
        # thread, so no shuffles. Pass 1: the new row max, chunk by chunk.
        m_new = row_max
        for c in cutlass.range_constexpr(num_chunks_S):
            cute.copy(thr_load, chunk(tS_ld, c), r_chunk)
            cute.arch.fence_view_async_tmem_load()   # tcgen05.wait::ld: r_chunk is valid
            chunk_max = r_chunk.load().reduce(cute.ReductionOp.MAX, -cutlass.Float32.inf, 0)
            m_new = cute.arch.fmax(chunk_max, m_new)
        # exp(scale * (m_old - m_new)); the first tile has m_old = -inf, so this is 0.
        rescale = cute.math.exp((row_max - m_new) * softmax_scale)
        row_max = m_new
        # Pass 2: P = exp(scale * (S - m_new)), summed, and stored (bf16, two per column) over
        # the first half of this thread's row of S_g. Chunk c of P lands in columns of S
        # chunks <= c, all already read.
        tile_sum = cutlass.Float32(0.0)
        for c in cutlass.range_constexpr(num_chunks_S):
            cute.copy(thr_load, chunk(tS_ld, c), r_chunk)
            cute.arch.fence_view_async_tmem_load()
            p = cute.math.exp((r_chunk.load() - m_new) * softmax_scale)
            tile_sum += p.reduce(cute.ReductionOp.ADD, 0.0, 0)
            r_p.store(p.to(dtype))
            cute.copy(thr_store_p, r_p_cols, chunk(tP_st, c, TMEM_CHUNK // 2))
        row_sum = row_sum * rescale + tile_sum

        # O *= rescale in TMEM, one chunk at a time (load, scale, store). On the first tile O
        # holds nothing yet: the first P V MMA overwrites it instead, so skip the rescale.
        if n_block > 0:
            for c in cutlass.range_constexpr(num_chunks_O):
                cute.copy(thr_load, chunk(tO_ld, c), r_chunk)
                cute.arch.fence_view_async_tmem_load()
                r_chunk.store(r_chunk.load() * rescale)
                cute.copy(thr_store, r_chunk, chunk(tO_st, c))
        cute.arch.fence_view_async_tmem_store()      # tcgen05.wait::st: P and O in TMEM
        # arrive: P_g written, O_g rescaled (p_full[g], this tile's phase; the MMA warp's wait
        # pairs with it). The tcgen05 fence orders our TMEM stores before the arrive.
        tcgen05_fence_before_thread_sync()
        # timeline: softmax end
        cute.arch.mbarrier_arrive(p_full + q_tile)

    # wait: O is final. Pairs with the MMA warp's tcgen05.commit (its arrive) on o_full after
    # the last P V MMAs: its only phase, parity 0.
    cute.arch.mbarrier_wait(o_full, 0)
    tcgen05_fence_after_thread_sync()
    # Epilogue: O / rowsum, chunk by chunk from TMEM, to bf16, stored from registers to this
    # thread's row of global memory.
    inv_sum = cute.arch.rcp_approx(row_sum)
    for c in cutlass.range_constexpr(num_chunks_O):
        cute.copy(thr_load, chunk(tO_ld, c), r_chunk)
        cute.arch.fence_view_async_tmem_load()
        r_chunk_bf16.store((r_chunk.load() * inv_sum).to(dtype))
        cute.autovec_copy(r_chunk_bf16, row_piece(gO_mine, row, c))


# ------------------------------------------------------------------------------ step facts
# What the harness reads about this step (ladder/contract.py StepInfo): not part of the kernel.
INFO = contract.StepInfo(
    id="b08",
    slug="kv_pipeline",
    title="K/V load pipeline",
    change="K/V ring of 2 stages with full/empty mbarriers; the load warp runs ahead of the MMA warp",
    archs=("sm_100a",),
    enabler=False,
    threads=THREADS,
    tile_m=NUM_Q_TILES * TILE_M,
    tile_n=TILE_N,
    smem_bytes=SMEM_BYTES,
    predecessor="b07",
    sass_present=("UTCHMMA", "UTCHMMA.TS", "UTCBAR", "LDTM", "STTM", "UTMALDG", "MUFU.EX2"),
    sass_absent=("HMMA", "HGMMA", "LDSM", "LDG", "LDGSTS"),
    tmem_cols=TMEM_COLS,
    extra={"bound": {"overlap": "lockstep", "loads": "hidden"},
           "tmem_map": {"S0": (TMEM_S_COL[0], TILE_N), "S1": (TMEM_S_COL[1], TILE_N),
                        "O0": (TMEM_O_COL[0], HEAD_DIM), "O1": (TMEM_O_COL[1], HEAD_DIM)},
           "tmem_aliases": {"P0": ("S0", 0, P_COLS), "P1": ("S1", 0, P_COLS)},
           "warp_roles": {"softmax0": tuple(range(0, 4)), "softmax1": tuple(range(4, 8)),
                          "mma": (MMA_WARP,), "load": (LOAD_WARP,)},
           "tmem_warps": tuple(range(SOFTMAX_WARPS)),
           "kv_stages": NUM_STAGES},
)


attention = contract.make_attention(INFO, host)
