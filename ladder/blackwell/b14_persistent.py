"""b14 — persistent clusters: one cluster per SM pair walks the work tiles.

Change from b13: the grid is one cluster per SM pair the GPU holds at once (at most 74 on a
B200's 148 SMs), not one cluster per 512 query rows; the count is asked of the driver before
the first launch on a device (cuOccupancyMaxActiveClusters: resident_clusters, fixed in that
device's host by host_for) and clamped at launch to the work tiles (grid_clusters; FA4's
StaticPersistentTileScheduler clamps its SM count / 2 the same way). With n clusters, cluster c
takes work tiles c, c + n, c + 2n, ... of the m_blocks x heads x batch tiles (the query block
fastest, then the head, then the batch: FA4's order), and every role runs its b13 loop once per
tile, its barrier phases and ring positions counted across tiles (nothing is reset between work
tiles). One new barrier: q_empty (the work tile's last S MMA has read Q: the load warps may
bring the next tile's Q; a multicast commit). Everything else is b13's: the softmax warps still
store O from registers to global memory, once per work tile, and o_full still completes once
per work tile.

Why: with one cluster per 512 rows every cluster pays its start (barrier init, the cluster
barrier, TMEM alloc, setmaxnreg, a K/V ring that starts empty) and its end (the last tile's P V,
the O drain from TMEM and the stores, the TMEM handshake), with the SMs idle between a CTA's exit
and the next one's start. A persistent cluster pays them once; the next tile's loads start as
soon as the current tile's last S MMAs have read Q, and its first S MMAs follow this tile's last
P V on the tensor core while the softmax warps drain O. At 4k (16 heads, batch 4: 512 work tiles over a B200's 74 clusters, 7 rounds)
the start and end are a larger part of each cluster's work than at 16k (1 batch: 32 m-blocks x
16 heads, 512 tiles, each 4x longer).

Expect (model): the bound model has no prologue or epilogue term, so it predicts b14 level with
b13 (``ladder bound b14 --gpu b200``); what persistence saves is per work tile, a larger share at
4k than at 16k, and only a B200 run measures it. On Hopper the same change (h14 against h13)
measured no gain: there the loop's scheduling moved more than the saved starts and ends. Against
it here: a work tile's O drain (TMEM -> registers -> global memory) still sits on the softmax
warps' path, and the next work tile's first P V waits for it (FA4 moves the drain to the
correction warps and the store to an epilogue warp).

Evidence: ``ladder sass b14 --against b13``; tests/test_blackwell_steps.py (the cluster in the
IR's launch facts; the grid in the host's IR, 2 min(capacity, work tiles); the capacity for fake
drivers and the grid for fake capacities, fewer tiles than clusters and odd counts, and the
scheduler's tile order for each: every tile once; O still stored from registers);
tests/test_barrier_protocol.py (the pair's barriers replayed over 0-3 work tiles per cluster);
writeups/blackwell/14-persistent.md.
Compiled, not yet run on a B200 (nor the capacity query, which needs a GPU).
"""
import math

import cutlass
import cutlass.cute as cute
import cutlass.utils.blackwell_helpers as sm100
from cutlass._mlir.dialects import llvm, nvvm
from cutlass.cute.nvgpu import cpasync, tcgen05
from cutlass.cutlass_dsl import T, dsl_user_op

from ladder import contract

# Tile shapes (named, not magic): one cluster = two CTAs; one CTA = two 128-row query tiles,
# walking K/V in 128-row tiles. One MMA covers Q tile g of both CTAs: M = 256.
TILE_M = 128           # query rows per Q tile and CTA: one TMEM lane each
CLUSTER_CTAS = 2       # CTAs per cluster (a pair of SMs), the cta_group of every tcgen05 instruction
MMA_M = CLUSTER_CTAS * TILE_M      # rows of one tcgen05.mma.cta_group::2: the leader's 128, then the peer's
NUM_Q_TILES = 2        # Q tiles per CTA, sharing every K/V load; one softmax warpgroup each
TILE_N = 128           # key/value rows per iteration
HEAD_DIM = 128
MMA_K = 16             # bf16 tcgen05.mma consumes 16 of the reduction dim per instruction
PAIR_MASK = 0b11       # a leader's commit arrives on the barrier at the same address in CTA 0 and CTA 1
SOFTMAX_WARPS = 4 * NUM_Q_TILES    # per Q tile 4 warps x 32 lanes = the 128 TMEM lanes, one per row
CORRECTION_WARP = SOFTMAX_WARPS    # warps 8-11: O's rescale; warp 8 + i owns TMEM lanes 32i..32i+31
CORRECTION_WARPS = 4
MMA_WARP = CORRECTION_WARP + CORRECTION_WARPS   # warp 12: TMEM alloc in both CTAs; MMAs in the leader only
LOAD_WARP = MMA_WARP + 1           # warp 13: issues every TMA copy (its CTA's halves)
NUM_WARPS = 16                     # warps 14-15 complete the fourth warpgroup (setmaxnreg acts per warpgroup)
THREADS = NUM_WARPS * 32
# Registers per thread after setmaxnreg, per warpgroup: 2 x 128 x 192 + 128 x 80 + 128 x 48 = 65,536,
# the whole register file (b12's split; FA4's 2-CTA build moves a few from the softmax to the others).
SOFTMAX_REGISTERS = 192
CORRECTION_REGISTERS = 80
OTHER_REGISTERS = 48
# The running max moves when the new one is more than this many log2 units above it, so P <=
# 2^RESCALE_THRESHOLD before bf16. 0.0: exact rescaling, the max moves whenever it grows (a row's
# factor is below 1 only when its max grew). FA4 lets it lag by up to 8 for 16-bit inputs
# (exp:b12-rescale-threshold-8).
RESCALE_THRESHOLD = 0.0
# Named barriers (0 is sync_threads): one per softmax warp and the correction warp of its TMEM
# lanes, "this tile's factors are in s_scale": STATS_BARRIER + 4 g + i for Q tile g, lane quarter i.
# Named barriers are per CTA: the pair does not share them.
STATS_BARRIER = 1
STATS_THREADS = 2 * 32
KV_EMPTY_ARRIVALS = 1              # kv_empty completes on the leader's tcgen05.commit alone (in each CTA)
# Hand-offs to the leader's MMA warp count the threads of both CTAs.
P_FULL_ARRIVALS = CLUSTER_CTAS * TILE_M                  # every softmax thread of Q tile g, both CTAs
O_READY_ARRIVALS = CLUSTER_CTAS * CORRECTION_WARPS * 32  # every correction thread, both CTAs
TMEM_FREE_ARRIVALS = 32            # the other CTA's MMA warp, one arrival per lane, before the pair frees TMEM
# Persistent grid: one cluster per SM pair the GPU holds at once (asked of the driver once per
# device: resident_clusters), but no more clusters than work tiles; the kernel walks the work tiles.
# Where no GPU answers (the CPU compile) a B200's pairs stand in: 148 SMs, 74 clusters.
SM_COUNT = 148
FALLBACK_CLUSTERS = SM_COUNT // CLUSTER_CTAS
NUM_STAGES = 2                     # K/V ring depth: tiles in flight ahead of the MMA warp
# Columns per tcgen05.ld/st of S, O and P (16, as in b02-b11; a register-allocation knob, not part
# of the algorithm).
TMEM_CHUNK = 16
LOG2_E = math.log2(math.e)   # exp(x) = 2^(x * log2(e))

# TMEM (each CTA: its own 128 rows of every accumulator): fp32 S0, S1 (TILE_N columns each),
# then fp32 O0, O1 (HEAD_DIM columns each): all 512, at the same addresses in both CTAs.
TMEM_S_COL = (0, TILE_N)                                   # S of Q tile 0, 1
TMEM_O_COL = (2 * TILE_N, 2 * TILE_N + HEAD_DIM)           # O of Q tile 0, 1
TMEM_COLS = 512

# smem per CTA: 2 Q tiles + NUM_STAGES x (K half + V half) (128-byte swizzled), all bf16. P lives in TMEM.
SMEM_ALIGN = 1024      # the 128B swizzle repeats every 8 rows x 128 B; descriptors assume this base
SMEM_BYTES = 2 * (NUM_Q_TILES * TILE_M * HEAD_DIM + NUM_STAGES * 2 * (TILE_N // CLUSTER_CTAS) * HEAD_DIM)
# P_g (bf16, TILE_N keys = TILE_N / 2 columns) aliases the first columns of S_g.
P_COLS = TILE_N * 16 // 32

# Exponentials on the FMA pipe (FA4's utils.ex2_emulation_2, degree 3): 2^x = 2^floor(x) * 2^frac(x),
# floor(x) written into the exponent bits, 2^frac by a polynomial fitted on [0, 1) (FA4's POLY_EX2[3],
# a relative minimax fit). Valid for x < 128; softmax arguments s*scale_log2 - max_scaled are at most
# RESCALE_THRESHOLD (the max may lag by that much), up to the rounding of the fold.
EX2_POLY = (1.0, 0.695146143436431884765625, 0.227564394474029541015625, 0.077119089663028717041015625)
EX2_CLAMP = -127.0                         # below it every x gives 2^-127's value: < 2^-126, nothing next to a row sum >= 1
ROUND_DOWN_MAGIC = float(2**23 + 2**22)    # x + 1.5*2^23 rounded down keeps floor(x) in the low mantissa bits
# Which exponentials: FA4's 1-CTA default for head dim 128 (ex2_emu_freq 16, ex2_emu_res 4,
# ex2_emu_start_frg 1; its 2-CTA kernel, which FA4 picks for this shape, emulates 18.75%). In each
# EMU_FRAGMENT of a row (FA4's fragment: 32 scores), the last EMU_SPAN of every EMU_PERIOD elements, in every fragment but the first and the last: 2 fragments x 2 periods x 4 =
# 16 of 128 elements, 12.5%. FA4 keeps the first and the last fragment of a row on the MUFU; so
# does this kernel.
EMU_FRAGMENT = 32
EMU_PERIOD = 16
EMU_SPAN = 4
EMU_FIRST_FRAGMENT = 1

EX2_EMULATED_PER_TILE = ((TILE_N // EMU_FRAGMENT - 1 - EMU_FIRST_FRAGMENT) * (EMU_FRAGMENT // EMU_PERIOD)
                         * EMU_SPAN)        # per thread (= row) and K/V tile: 16 of 128


def make_smem_layouts(tiled_mma, tiled_mma_pv):
    """(sQ, sK, sVt), this CTA's part of each 2-CTA MMA operand, in the 128B-swizzle layouts
    (atoms of 8 rows x 128 bytes, the 16-byte chunks of each row permuted by XOR with the row
    index; the UMMA descriptors carry the same mode). The shapes are those a cta_group::2 MMA
    takes from one CTA, already split into (MMA atom, M or N blocks, k-blocks, stage): sQ is this
    CTA's 128 rows of Q tile g (of the MMA's 256); sK is its 64 keys of a K tile (the MMA's B,
    N = 128, split along N between the two CTAs), K-major; sVt its 64 head dims of a V tile (B of
    O += P V, N = HEAD_DIM split alike), MN-major; each with NUM_STAGES stages, as in b12. P is
    not in shared memory."""
    sQ = sm100.make_smem_layout_a(tiled_mma, (MMA_M, TILE_N, HEAD_DIM), cutlass.BFloat16, NUM_Q_TILES)
    sK = sm100.make_smem_layout_b(tiled_mma, (MMA_M, TILE_N, HEAD_DIM), cutlass.BFloat16, NUM_STAGES)
    sVt = sm100.make_smem_layout_b(tiled_mma_pv, (MMA_M, HEAD_DIM, TILE_N), cutlass.BFloat16, NUM_STAGES)
    return sQ, sK, sVt


def make_tmem_p_layout(tiled_mma_pv):
    """P as the A operand of O += P V: this CTA's (TILE_M, TILE_N) bf16 of the MMA's 256 rows,
    K-major. Read from TMEM, where a row of P is one lane, two bf16 per column; this layout only
    gives the MMA the operand's logical shape and K-major order (no smem address, no swizzle)."""
    return sm100.make_smem_layout_a(tiled_mma_pv, (MMA_M, HEAD_DIM, TILE_N), cutlass.BFloat16, 1).outer


def make_shared_storage(dtype, sQ_layout, sK_layout, sVt_layout):
    """The CTA's shared memory, as a struct (its size is the launch's dynamic smem)."""
    @cute.struct
    class SharedStorage:
        sQ: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sQ_layout)], SMEM_ALIGN]
        sK: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sK_layout)], SMEM_ALIGN]
        sV: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sVt_layout)], SMEM_ALIGN]
        # mbarriers, one per hand-off between two roles (see the module docstring). The leader's
        # q_full, kv_full, p_full and o_ready count both CTAs; the peer's stay unused.
        q_full: cute.struct.MemRange[cutlass.Int64, 1]
        q_empty: cute.struct.MemRange[cutlass.Int64, 1]             # the tile's last S has read Q
        kv_full: cute.struct.MemRange[cutlass.Int64, NUM_STAGES]
        kv_empty: cute.struct.MemRange[cutlass.Int64, NUM_STAGES]
        s_full: cute.struct.MemRange[cutlass.Int64, NUM_Q_TILES]
        p_full: cute.struct.MemRange[cutlass.Int64, NUM_Q_TILES]
        o_ready: cute.struct.MemRange[cutlass.Int64, NUM_Q_TILES]   # O_g rescaled (correction warps)
        o_full: cute.struct.MemRange[cutlass.Int64, 1]              # O final for the work tile
        tmem_free: cute.struct.MemRange[cutlass.Int64, 1]           # the other CTA's MMA warp is done with TMEM
        # Per Q tile and row, this tile's O factor (1.0: no rescale), softmax -> correction.
        s_scale: cute.struct.MemRange[cutlass.Float32, NUM_Q_TILES * TILE_M]
        # tcgen05.alloc writes the TMEM base address here.
        tmem_base: cutlass.Int32
    return SharedStorage


def make_tma_loads(mQ, mK, mV, sQ_layout, sK_layout, sVt_layout, tiled_mma, tiled_mma_pv):
    """TMA atoms (descriptor + smem layout, swizzle included) and the coordinate tensors they
    index; each atom loads this CTA's part of one 2-CTA MMA operand tile (its 128 rows of a Q
    tile, its half of a K or V tile), built from the MMA's own split (make_tiled_tma_atom_A/B).
    The copies are cta_group::2 loads: their bytes are counted on the leader's mbarrier. A TMA
    box is described with the contiguous mode first, so Q and K are viewed as (seqlen, d, heads,
    batch) and V as (d, seqlen, heads, batch): V's tile is (D, keys)."""
    q = cute.make_tensor(mQ.iterator, cute.select(mQ.layout, mode=[1, 3, 2, 0]))
    k = cute.make_tensor(mK.iterator, cute.select(mK.layout, mode=[1, 3, 2, 0]))
    vt = cute.make_tensor(mV.iterator, cute.select(mV.layout, mode=[3, 1, 2, 0]))
    load = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.TWO)
    cluster = cute.tiled_divide(cute.make_layout((CLUSTER_CTAS, 1, 1)), (tiled_mma.thr_id.shape,)).shape
    return (cute.nvgpu.make_tiled_tma_atom_A(load, q, cute.select(sQ_layout, mode=[0, 1, 2]),
                                             (MMA_M, TILE_N, HEAD_DIM), tiled_mma, cluster),
            cute.nvgpu.make_tiled_tma_atom_B(load, k, cute.select(sK_layout, mode=[0, 1, 2]),
                                             (MMA_M, TILE_N, HEAD_DIM), tiled_mma, cluster),
            cute.nvgpu.make_tiled_tma_atom_B(load, vt, cute.select(sVt_layout, mode=[0, 1, 2]),
                                             (MMA_M, HEAD_DIM, TILE_N), tiled_mma_pv, cluster))


@dsl_user_op
def _asm_f32(asm: str, *args, loc=None, ip=None):
    """One f32 result from inline PTX over f32 operands (for what the DSL has no operator for)."""
    return cutlass.Float32(llvm.inline_asm(
        T.f32(), [cutlass.Float32(a).ir_value(loc=loc, ip=ip) for a in args], asm, "=f" + ",f" * len(args),
        has_side_effects=False, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT))


def _exponent_add(floor_bits, mantissa):
    """floor(x) (the low bits of ``floor_bits``) shifted into the exponent field and added to the
    bits of 2^frac: an integer shift and add (an LEA on the ALU; ptxas may pick an IMAD, on the FMA
    pipe, for some of them)."""
    return _asm_f32("{ .reg .s32 e, m; mov.b32 e, $1; mov.b32 m, $2; shl.b32 e, e, 23; "
                    "add.s32 m, m, e; mov.b32 $0, m; }", floor_bits, mantissa)


def ex2_emulated_pair(x, y, packed=True):
    """(2^x, 2^y) for x, y <= RESCALE_THRESHOLD without the MUFU. ``packed``: two lanes per instruction (FADD2/FFMA2,
    sm_100a); ``packed=False`` is the same arithmetic one lane at a time (sm_90a has no FFMA2), for
    the accuracy check on the H200. Per pair: 2 FMNMX, 3 FADD2 (round-down add, subtract back,
    fraction), 3 FFMA2 (Horner), 2 shift-adds."""
    xy = (cute.arch.fmax(x, EX2_CLAMP), cute.arch.fmax(y, EX2_CLAMP))
    magic = (ROUND_DOWN_MAGIC, ROUND_DOWN_MAGIC)
    if packed:
        # add.rm: rounding down makes the low bits floor(x), so the fraction lies in [0, 1] (1 only
        # for -2^-25 < x < 0, where x - floor(x) rounds up; 2^1 is still within the fit).
        floor_bits = cute.arch.add_packed_f32x2(xy, magic, rnd="rm")
        floor_xy = cute.arch.sub_packed_f32x2(floor_bits, magic)       # exact: round to nearest
        frac = cute.arch.sub_packed_f32x2(xy, floor_xy)
        poly = (EX2_POLY[3], EX2_POLY[3])
        for c in EX2_POLY[2::-1]:
            poly = cute.arch.fma_packed_f32x2(poly, frac, (c, c))
    else:
        floor_bits = tuple(_asm_f32("add.rm.f32 $0, $1, $2;", v, ROUND_DOWN_MAGIC) for v in xy)
        frac = tuple(v - (b - ROUND_DOWN_MAGIC) for v, b in zip(xy, floor_bits, strict=True))
        poly = [cutlass.Float32(EX2_POLY[3]), cutlass.Float32(EX2_POLY[3])]
        for c in EX2_POLY[2::-1]:
            poly = [p * f + c for p, f in zip(poly, frac, strict=True)]
    return _exponent_add(floor_bits[0], poly[0]), _exponent_add(floor_bits[1], poly[1])


def ex2_is_emulated(fragment, element, fragments):
    """Is element ``element`` (even: the first of a pair) of fragment ``fragment`` emulated?"""
    return (element % EMU_PERIOD >= EMU_PERIOD - EMU_SPAN
            and EMU_FIRST_FRAGMENT <= fragment < fragments - 1)


def tile_coords(tile, m_blocks, heads):
    """Work tile -> (m_block, head, batch): the cluster's 512-row query block fastest, then the
    head, then the batch (FA4's static persistent order), so consecutive tiles of neighbouring
    clusters share K and V (one (batch, head)) in L2."""
    return tile % m_blocks, (tile // m_blocks) % heads, tile // (m_blocks * heads)


def grid_clusters(capacity, n_work):
    """Clusters to launch: as many as the GPU holds at once, but no more than there are work tiles
    (FA4's StaticPersistentTileScheduler.get_grid_shape), so no cluster starts only to find no tile.
    Python ints on the host (tests) or Int32s while tracing ``host``."""
    return cutlass.min(capacity, n_work)


def tiles_of(cluster, n_clusters, n_work):
    """How many of the work tiles cluster, cluster + n_clusters, ... exist (< n_work)."""
    return (n_work - cluster + n_clusters - 1) // n_clusters


def ring_position(n_block):
    """(stage, parity) of K/V tile j. Tile j goes to stage j % NUM_STAGES, in round
    j // NUM_STAGES of that stage; a stage's kv_full completes one phase per round, so tile j waits
    with the round's parity. The load warp waits for the *previous* round of kv_empty: the other
    parity. (tests/test_pipeline_protocol.py replays this bookkeeping against a model of the
    mbarriers.)"""
    return n_block % NUM_STAGES, (n_block // NUM_STAGES) % 2


def o_row_tile(m_block, q_tile, cta_rank):
    """The 128-row tile of the sequence that CTA ``cta_rank`` holds as its Q tile ``q_tile`` in
    work tile ``m_block`` (of 512 rows): Q tile 0 (leader, peer), then Q tile 1 (leader, peer), as
    the 2-CTA MMA splits each 256-row Q tile."""
    return (NUM_Q_TILES * m_block + q_tile) * CLUSTER_CTAS + cta_rank


def make_tiled_mmas(dtype):
    """(for S = Q K^T, for O += P V). One tcgen05.mma.cta_group::2 atom each, M = 256 (128 rows
    in each CTA of the pair), fp32 accumulators in TMEM. S: A (Q) and B (K) from smem, K-major.
    O: A (P) from TMEM (a TS-MMA; a TMEM A operand is always K-major), B (V) from smem, MN-major.
    The atom's "threads" are the two CTAs: slice v is CTA v's part of every operand."""
    K, MN = cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.MN
    tiled_mma = cute.make_tiled_mma(tcgen05.MmaF16BF16Op(
        dtype, cutlass.Float32, (MMA_M, TILE_N, MMA_K), tcgen05.CtaGroup.TWO,
        tcgen05.OperandSource.SMEM, K, K))
    tiled_mma_pv = cute.make_tiled_mma(tcgen05.MmaF16BF16Op(
        dtype, cutlass.Float32, (MMA_M, HEAD_DIM, MMA_K), tcgen05.CtaGroup.TWO,
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
         softmax_scale: cutlass.Float32, stream, max_clusters: cutlass.Constexpr = FALLBACK_CLUSTERS):
    """Build layouts, copies and the tiled MMAs; launch grid_clusters(max_clusters, work tiles)
    clusters of two CTAs, which walk the work tiles (the clamp runs on the host at launch: the
    work is the tensors' runtime shape). ``attention`` fixes max_clusters at the GPU's resident
    clusters (``host_for``); a call with the contract's six arguments (the CPU compile, the
    timeline probes) gets the default, FALLBACK_CLUSTERS."""
    dtype = mQ.element_type
    mQ, mK, mV, mO = (contract.aligned(t) for t in (mQ, mK, mV, mO))
    tiled_mma, tiled_mma_pv = make_tiled_mmas(dtype)
    sQ_layout, sK_layout, sVt_layout = make_smem_layouts(tiled_mma, tiled_mma_pv)

    SharedStorage = make_shared_storage(dtype, sQ_layout, sK_layout, sVt_layout)
    (tma_Q, tma_mQ), (tma_K, tma_mK), (tma_V, tma_mVt) = make_tma_loads(
        mQ, mK, mV, sQ_layout, sK_layout, sVt_layout, tiled_mma, tiled_mma_pv)
    # Persistent: one cluster per resident SM pair, at most one per work tile (a work tile: one
    # cluster's 512 query rows of one (batch, head)); the kernel walks the work tiles.
    n_work = (cute.size(mQ.shape[1]) // (CLUSTER_CTAS * NUM_Q_TILES * TILE_M)
              * cute.size(mQ.shape[2]) * cute.size(mQ.shape[0]))
    grid = (grid_clusters(max_clusters, n_work) * CLUSTER_CTAS, 1, 1)
    kernel(tma_Q, tma_mQ, tma_K, tma_mK, tma_V, tma_mVt, mO, softmax_scale,
           sQ_layout, sK_layout, sVt_layout, make_tmem_p_layout(tiled_mma_pv), tiled_mma, tiled_mma_pv,
           SharedStorage).launch(
        grid=grid, block=[THREADS, 1, 1], cluster=[CLUSTER_CTAS, 1, 1], smem=SharedStorage.size_in_bytes(),
        stream=stream,
        # .minnctapersm 1 with .reqntid 512: ptxas can then fix the entry register count (65,536 /
        # 512 = 128), which it needs to honour setmaxnreg (without it, it ignores them: C7508).
        min_blocks_per_mp=1)


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
    # The pair: CTA rank 0 of the cluster is the leader (it issues the MMAs); rank 1 the peer.
    cta_rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
    leader = 0
    peer = 1 - cta_rank          # the other CTA of the pair, from either side
    n_blocks = cute.size(tma_mK.shape[0]) // TILE_N
    # The work: m_blocks x heads x batch tiles of 512 query rows (one cluster's), taken by cluster
    # c as tiles c, c + n_clusters, ...; both CTAs of a cluster walk the same tiles (they must:
    # every MMA, hand-off to the leader and the TMEM handshake pairs one CTA's with the other's).
    # The roles that address memory (the load warp, the softmax's O store) work out each tile's
    # (m_block, head, batch) with tile_coords.
    heads = cute.size(tma_mQ.shape[2])
    m_blocks = cute.size(tma_mQ.shape[0]) // (CLUSTER_CTAS * NUM_Q_TILES * TILE_M)
    cluster, _, _ = cute.arch.cluster_idx()            # %clusterid.x: this pair's index
    n_clusters, _, _ = cute.arch.cluster_dim()         # %nclusterid.x: the launched pairs, any count
    n_tiles = tiles_of(cluster, n_clusters, m_blocks * heads * cute.size(tma_mQ.shape[3]))

    smem = cutlass.memory.SmemAllocator()
    storage = smem.allocate(SharedStorage)
    # The swizzle (the layouts' inner function) goes with the smem pointer; the descriptors and
    # the copies then see plain (outer) layouts.
    sQ = storage.sQ.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)     # (MMA, 1, k-blocks, Q tile)
    sK = storage.sK.get_tensor(sK_layout.outer, swizzle=sK_layout.inner)     # (MMA, 1, k-blocks, stage)
    sVt = storage.sV.get_tensor(sVt_layout.outer, swizzle=sVt_layout.inner)  # (MMA, 1, k-blocks, stage): B of P V
    q_full, q_empty = storage.q_full.data_ptr(), storage.q_empty.data_ptr()
    kv_full, kv_empty = storage.kv_full.data_ptr(), storage.kv_empty.data_ptr()   # stage s: base + s
    s_full, p_full, o_full = storage.s_full.data_ptr(), storage.p_full.data_ptr(), storage.o_full.data_ptr()
    o_ready, tmem_free = storage.o_ready.data_ptr(), storage.tmem_free.data_ptr()
    s_scale = storage.s_scale.get_tensor(cute.make_layout(NUM_Q_TILES * TILE_M))    # [g * TILE_M + row]

    # One thread of each CTA initializes its mbarriers, the same in both (only the leader's
    # q_full, kv_full, p_full and o_ready will be used). Arrival counts: one for those completed
    # by an expect-tx arrive or a tcgen05.commit; for p_full and o_ready the softmax and the
    # correction threads of both CTAs; 32 for tmem_free (the other CTA's MMA warp).
    if warp_idx == MMA_WARP:
        with cute.arch.elect_one():
            for bar in (q_full, q_empty, o_full):
                cute.arch.mbarrier_init(bar, 1)
            for stage in cutlass.range_constexpr(NUM_STAGES):
                cute.arch.mbarrier_init(kv_full + stage, 1)
                cute.arch.mbarrier_init(kv_empty + stage, KV_EMPTY_ARRIVALS)
            for g in cutlass.range_constexpr(NUM_Q_TILES):
                cute.arch.mbarrier_init(s_full + g, 1)
                cute.arch.mbarrier_init(p_full + g, P_FULL_ARRIVALS)
                cute.arch.mbarrier_init(o_ready + g, O_READY_ARRIVALS)
            cute.arch.mbarrier_init(tmem_free, TMEM_FREE_ARRIVALS)
    # barrier (cluster): the other CTA's barriers are initialised before anyone arrives on them
    # remotely, its TMA bytes land on them, or its MMA warp allocates TMEM with ours. The fence
    # makes the inits visible to the cluster; every thread of both CTAs arrives and waits.
    cute.arch.mbarrier_init_fence()
    cute.arch.cluster_arrive_relaxed()
    cute.arch.cluster_wait()
    # The MMA warps of both CTAs allocate TMEM together (tcgen05.alloc.cta_group::2: the same
    # columns in each CTA; the base address lands in each CTA's smem) and give up the right to
    # allocate more. The CTA barrier publishes the base address to every warp.
    if warp_idx == MMA_WARP:
        cute.arch.alloc_tmem(TMEM_COLS, storage.tmem_base, is_two_cta=True)
        cute.arch.relinquish_tmem_alloc_permit(is_two_cta=True)
    cute.arch.sync_threads()
    tmem_base = cute.arch.retrieve_tmem_ptr(cutlass.Float32, 16, storage.tmem_base)

    # The accumulators are TMEM tensors: S_g at column TMEM_S_COL[g], O_g at TMEM_O_COL[g], lane
    # i = row i of this CTA's part of Q tile g; P_g (bf16) over S_g's first P_COLS columns. This
    # CTA is slice cta_rank of the 2-CTA MMA: its accumulator part is 128 rows x N.
    thr_mma = tiled_mma.get_slice(cta_rank)
    thr_mma_pv = tiled_mma_pv.get_slice(cta_rank)
    tStS = thr_mma.make_fragment_C(thr_mma.partition_shape_C((MMA_M, TILE_N)))
    tOtO = thr_mma_pv.make_fragment_C(thr_mma_pv.partition_shape_C((MMA_M, HEAD_DIM)))
    tStS = [cute.make_tensor(tmem_base + TMEM_S_COL[g], tStS.layout) for g in range(NUM_Q_TILES)]
    tOtO = [cute.make_tensor(tmem_base + TMEM_O_COL[g], tOtO.layout) for g in range(NUM_Q_TILES)]

    # The fourth warpgroup (the MMA and load warps, warps 14-15) gives registers back: one
    # setmaxnreg, which every warp of a warpgroup must execute, before its warps part ways. The
    # other warpgroups take theirs below, right before their roles.
    if warp_idx >= MMA_WARP:
        cute.arch.setmaxregister_decrease(OTHER_REGISTERS)

    if warp_idx == LOAD_WARP:
        load_warp(tma_Q, tma_K, tma_V, sQ, sK, sVt, tma_mQ, tma_mK, tma_mVt, thr_mma, thr_mma_pv, q_full, q_empty,
                  kv_full, kv_empty, cluster, n_clusters, m_blocks, heads, n_tiles, n_blocks, cta_rank, leader)
    elif warp_idx == MMA_WARP and cta_rank == leader:
        mma_warp(tiled_mma, tiled_mma_pv, sQ, sK, sVt, tStS, tOtO, tP_layout, tmem_base, storage.tmem_base,
                 q_full, q_empty, kv_full, kv_empty, s_full, p_full, o_ready, o_full, n_tiles, n_blocks)
    elif warp_idx == MMA_WARP:
        # The peer's MMA warp issues no MMAs: the leader's issues every MMA of the pair; this one
        # allocated TMEM with it and frees it with it below.
        pass
    elif warp_idx > LOAD_WARP:
        # Warps 14-15 have no role: they complete the fourth warpgroup (its setmaxnreg above); they
        # wait at the exit barrier.
        pass
    elif warp_idx >= CORRECTION_WARP:
        cute.arch.setmaxregister_decrease(CORRECTION_REGISTERS)
        correction_warpgroup(tOtO, s_scale, o_ready, n_tiles, n_blocks, leader)
    else:
        cute.arch.setmaxregister_increase(SOFTMAX_REGISTERS)
        softmax_warpgroup(tStS, tOtO, mO, s_scale, s_full, p_full, o_full, softmax_scale,
                          cluster, n_clusters, m_blocks, heads, n_tiles, n_blocks, cta_rank, leader)

    # Free TMEM: every softmax and correction thread's TMEM loads and stores are complete (their
    # wait::ld / wait::st above), fenced before the barrier all 512 threads of this CTA reach at
    # the end. Every MMA of the pair is complete too: each CTA's softmax waited on o_full of the
    # last work tile, whose commit follows the leader's last MMA (a cluster with no work tile
    # issued none). The pair frees its TMEM together (tcgen05.dealloc.cta_group::2), so each MMA
    # warp first tells the other CTA that this one is done with it and waits for the same news.
    tcgen05_fence_before_thread_sync()
    cute.arch.sync_threads()
    if warp_idx == MMA_WARP:
        # arrive: this CTA is done with TMEM (the other CTA's tmem_free, its only phase; every lane
        # arrives, TMEM_FREE_ARRIVALS = 32). Cluster scope: a release the other CTA's wait
        # formally synchronizes with (the DSL's default is CTA scope, even for a remote arrive;
        # the per-tile remote arrives on p_full and o_ready keep it, as FA4's do).
        cute.arch.mbarrier_arrive(tmem_free, peer, scope=nvvm.MemScopeKind.CLUSTER)
        # wait: the other CTA is done with TMEM. Pairs with its MMA warp's 32 remote arrives on our
        # tmem_free: its only phase, parity 0.
        cute.arch.mbarrier_wait(tmem_free, 0)
        tcgen05_fence_after_thread_sync()
        cute.arch.dealloc_tmem(tmem_base, TMEM_COLS, is_two_cta=True)


# ------------------------------------------------------------------------------------ warp roles
# One function per role; kernel() above sets up what they share and dispatches by warp. Each is
# a @cute.jit function, traced inline into the kernel (no call in the compiled code).

@cute.jit
def load_warp(tma_Q: cute.CopyAtom, tma_K: cute.CopyAtom, tma_V: cute.CopyAtom,
              sQ: cute.Tensor, sK: cute.Tensor, sVt: cute.Tensor,
              tma_mQ: cute.Tensor, tma_mK: cute.Tensor, tma_mVt: cute.Tensor, thr_mma, thr_mma_pv,
              q_full, q_empty, kv_full, kv_empty, cluster, n_clusters, m_blocks, heads, n_tiles, n_blocks,
              cta_rank, leader):
    """TMA producer, in both CTAs, per work tile: both Q tiles once the previous work tile has freed
    Q, then K_j and V_j (this CTA's halves) into stage j % NUM_STAGES of the K/V ring (j counted
    over all of the CTA's work tiles), on the leader's kv_full."""
    dtype = sQ.element_type
    # In both CTAs: this CTA's part of every tile, into its own smem. TMA partitions: each
    # smem tile (one Q tile, one ring stage of K or V) is one TMA destination; the global side keeps the
    # tile index. The MMA's slice picks this CTA's rows of Q and its halves of K and V.
    def tma_partition(atom, smem_tile, gmem_part):
        return cpasync.tma_partition(atom, 0, cute.make_layout(1), cute.group_modes(smem_tile, 0, 3),
                                     cute.group_modes(gmem_part, 0, 3))
    for tile_iter in range(n_tiles):
        # The work tile's (batch, head) as TMA coordinates (b13's, per work tile): gQ (MMA_M, D,
        # 256-row tiles of the sequence; the cluster's Q tile g is tile 2 m + g), gK (TILE_N, D,
        # n_blocks), gVt (D, TILE_N, n_blocks).
        m_block, head, batch = tile_coords(cluster + tile_iter * n_clusters, m_blocks, heads)
        gQ = cute.local_tile(tma_mQ[None, None, head, batch], (MMA_M, HEAD_DIM), (None, 0))
        gK = cute.local_tile(tma_mK[None, None, head, batch], (TILE_N, HEAD_DIM), (None, 0))
        gVt = cute.local_tile(tma_mVt[None, None, head, batch], (HEAD_DIM, TILE_N), (0, None))
        tQsQ, tQgQ = tma_partition(tma_Q, sQ, thr_mma.partition_A(gQ))
        tKsK, tKgK = tma_partition(tma_K, sK, thr_mma.partition_B(gK))
        tVsV, tVgV = tma_partition(tma_V, sVt, thr_mma_pv.partition_B(gVt))
        # The leader's expect-tx counts the pair's bytes: its own part and the peer's, whose
        # cta_group::2 copies complete on the leader's barrier (the peer's own is never used).
        q_bytes = CLUSTER_CTAS * cute.size_in_bytes(dtype, sQ.layout)      # both Q tiles, both CTAs
        # expect-tx counts one stage's bytes of the pair: both CTAs' K and V halves.
        kv_bytes = CLUSTER_CTAS * (cute.size_in_bytes(dtype, cute.select(sK.layout, mode=[0, 1, 2]))
                                   + cute.size_in_bytes(dtype, cute.select(sVt.layout, mode=[0, 1, 2])))
        # wait: sQ is free: the previous work tile's last S MMAs (which read both CTAs' Q) are
        # done. Pairs with the leader's tcgen05.commit on q_empty (its arrive, multicast to both
        # CTAs) after that tile's last S: one phase per work tile, the previous one's, parity
        # (i % 2) ^ 1; the first work tile's passes at once (the fresh barrier's previous phase).
        # The MMA warp cannot run a tile ahead of it: work tile i + 1's S MMAs wait on q_full,
        # which only the Q copies below complete, so q_empty's phases and these waits alternate.
        cute.arch.mbarrier_wait(q_empty, (tile_iter % 2) ^ 1)
        # Both Q tiles of the work tile (cute.copy of a TMA atom elects its own issuing thread, so
        # it sits outside elect_one; only the expect-tx arrive is inside).
        if cta_rank == leader:
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(q_full, q_bytes)
        for g in cutlass.range_constexpr(NUM_Q_TILES):
            cute.copy(tma_Q, tQgQ[None, NUM_Q_TILES * m_block + g], tQsQ[None, g], tma_bar_ptr=q_full)
        first = tile_iter * n_blocks          # K/V tiles of the earlier work tiles: the ring runs on
        for n_block in range(n_blocks):
            # Tile j goes to stage s = j % NUM_STAGES, in round j // NUM_STAGES of that stage
            # (j = first + n_block: the ring runs on across work tiles).
            stage, parity = ring_position(first + n_block)
            # wait: stage s is free in this CTA. Pairs with the leader's tcgen05.commit (its arrive,
            # multicast to both CTAs) on kv_empty[s] after the P V MMAs of tile j - NUM_STAGES, the
            # previous round: parity ^ 1. In round 0 the fresh barrier's "previous phase" (parity
            # 1) counts as complete, so the load warp fills every stage without waiting.
            # timeline: slot wait begin
            cute.arch.mbarrier_wait(kv_empty + stage, parity ^ 1)
            # timeline: slot wait end
            if cta_rank == leader:
                with cute.arch.elect_one():
                    cute.arch.mbarrier_arrive_and_expect_tx(kv_full + stage, kv_bytes)
            cute.copy(tma_K, tKgK[None, n_block], tKsK[None, stage], tma_bar_ptr=kv_full + stage)
            cute.copy(tma_V, tVgV[None, n_block], tVsV[None, stage], tma_bar_ptr=kv_full + stage)
    # Producer tail: drain the ring and Q before the exit barrier. The kv_empty and q_empty
    # arrives come from the leader's commits, not from a thread, so no thread's exit orders
    # them: without these waits one could land after the CTA has exited, in shared memory that
    # already belongs to the next CTA. Positions N .. N + NUM_STAGES - 1 (N = n_tiles n_blocks,
    # all K/V tiles of all work tiles) are the next round of each stage, so their waits are each
    # stage's last phase.
    for i in cutlass.range_constexpr(NUM_STAGES):
        stage, parity = ring_position(n_tiles * n_blocks + i)
        # wait: the last MMAs that read stage s are done. Pairs with the leader's last
        # tcgen05.commit (its arrive) on kv_empty[s]: parity ^ 1, as in the loop; a stage no
        # tile used (N < NUM_STAGES) passes at once, as in round 0.
        cute.arch.mbarrier_wait(kv_empty + stage, parity ^ 1)
    # wait: the last work tile's last S has read Q. Pairs with the leader's last commit (its
    # arrive) on q_empty: work tile n_tiles - 1's phase, parity (n_tiles - 1) % 2, the parity a
    # next tile would wait with; with no work tile, the fresh barrier's previous phase passes at
    # once.
    cute.arch.mbarrier_wait(q_empty, (n_tiles % 2) ^ 1)

@cute.jit
def mma_warp(tiled_mma: cute.TiledMma, tiled_mma_pv: cute.TiledMma, sQ: cute.Tensor, sK: cute.Tensor,
             sVt: cute.Tensor, tStS, tOtO, tP_layout: cute.Layout, tmem_base, tmem_base_slot,
             q_full, q_empty, kv_full, kv_empty, s_full, p_full, o_ready, o_full, n_tiles, n_blocks):
    """The leader's MMA warp: one thread issues every tcgen05.mma of the pair, per work tile as in
    b13: S_0, S_1 of its first K/V tile; then per K/V tile, for each Q tile, O_g += P_g V(j-1) once
    both CTAs' softmax g and correction warps are done with tile j-1, at once followed by S_g(j)."""
    dtype = sQ.element_type
    # Every MMA below covers both CTAs: rows 0-127 from this CTA's smem and TMEM, rows
    # 128-255 from the peer's, B's two halves one from each. The peer's MMA warp only
    # allocates and frees TMEM with this one.
    # Smem operands as UMMA descriptors, one per 16-wide k-block (and Q tile or ring stage);
    # the layouts are already split per CTA, so the fragments are the MMA's operands as they
    # are. P from TMEM.
    tSrQ = tiled_mma.make_fragment_A(sQ)
    tSrK = tiled_mma.make_fragment_B(sK)
    tOrVt = tiled_mma_pv.make_fragment_B(sVt)
    # P_g, the A operand of O_g += P_g V, in TMEM over S_g's first P_COLS columns. make_fragment_A
    # gives the operand's layout but a tensor at TMEM address 0, so it is re-based on the
    # allocated base, viewed as bf16: the pointer then counts bf16 elements, two per column.
    tOrP = tiled_mma_pv.make_fragment_A(cute.make_tensor(tmem_base, tP_layout))[None, None, None, 0]
    p_base = cute.arch.retrieve_tmem_ptr(dtype, 16, tmem_base_slot)
    bf16_per_col = cutlass.Float32.width // dtype.width
    tOrP = [cute.make_tensor(p_base + TMEM_S_COL[g] * bf16_per_col, tOrP.layout)
            for g in range(NUM_Q_TILES)]

    for tile_iter in range(n_tiles):
        first = tile_iter * n_blocks          # K/V tiles of the earlier work tiles: the ring runs on
        # wait: both Q tiles of both CTAs landed for this work tile (pairs with this CTA's load
        # warp's expect-tx arrive, which counted the peer's bytes too; one phase per work
        # tile, parity i % 2).
        cute.arch.mbarrier_wait(q_full, tile_iter % 2)

        # Prologue: S_0(0) and S_1(0), so that both softmax warpgroups have a tile to start on.
        # S_g(0) overwrites S_g/P_g of the previous work tile: its last P_g V reads P_g there,
        # issued just before (issue order protects it, as inside the loop), and both CTAs'
        # softmax g are done reading its S_g and writing its P_g (that P V waited on their
        # p_full[g] arrives, which follow their tcgen05.wait::ld / wait::st and a tcgen05 fence).
        stage, parity = ring_position(first)
        # wait: K_0, V_0 (both CTAs' halves) landed in stage s. Pairs with the load warp's
        # expect-tx arrive (and both CTAs' TMA bytes) on kv_full[s]: the round's parity.
        # timeline(0): K/V wait begin
        cute.arch.mbarrier_wait(kv_full + stage, parity)
        # timeline(0): K/V wait end
        tcgen05_fence_after_thread_sync()
        for g in cutlass.range_constexpr(NUM_Q_TILES):
            # timeline(0): S{g} begin
            for kb in cutlass.range_constexpr(cute.size(tSrQ, mode=[2])):
                tiled_mma.set(tcgen05.Field.ACCUMULATE, kb != 0)
                cute.gemm(tiled_mma, tStS[g], tSrQ[None, None, kb, g], tSrK[None, None, kb, stage], tStS[g])
            with cute.arch.elect_one():
                tcgen05.commit(s_full + g, PAIR_MASK, tcgen05.CtaGroup.TWO)
            # timeline(0): S{g} end

        # Steady state, iteration j: P_0 V(j-1) -> S_0(j) -> P_1 V(j-1) -> S_1(j), as b13; the
        # barrier phases count K/V tiles across work tiles (first + j).
        for n_block in range(1, n_blocks):
            prev_stage, _ = ring_position(first + n_block - 1)
            stage, parity = ring_position(first + n_block)
            for g in cutlass.range_constexpr(NUM_Q_TILES):
                # wait: P_g of tile j-1 in TMEM, in both CTAs. Pairs with the arrives of the 256
                # softmax threads of Q tile g (128 per CTA, the peer's remote) on p_full[g]: one
                # phase per K/V tile, parity (first + j - 1) % 2. At a work tile's first P_g V
                # (j = 1, no accumulate: it overwrites O_g) this wait is also what orders the
                # overwrite after both CTAs' softmax g have drained the previous work tile's O_g:
                # they arrive for K/V tile 0 only after that drain's tcgen05.ld completed
                # (wait::ld) and a tcgen05 fence. (The correction warps leave O_g alone at K/V
                # tile 0; with n_blocks = 1 the tail's P V is the first, under the same wait.)
                # timeline(n_block - 1): P{g} wait begin
                cute.arch.mbarrier_wait(p_full + g, (first + n_block - 1) % 2)
                # wait: O_g rescaled to tile j-1's max (or left alone), in both CTAs. Pairs with
                # the arrives of the 256 correction threads on o_ready[g]: the same parity.
                cute.arch.mbarrier_wait(o_ready + g, (first + n_block - 1) % 2)
                # timeline(n_block - 1): P{g} wait end
                tcgen05_fence_after_thread_sync()
                # timeline(n_block - 1): O{g} begin
                for kb in cutlass.range_constexpr(cute.size(tOrP[0], mode=[2])):
                    tiled_mma_pv.set(tcgen05.Field.ACCUMULATE, n_block > 1 or kb != 0)
                    cute.gemm(tiled_mma_pv, tOtO[g], tOrP[g][None, None, kb], tOrVt[None, None, kb, prev_stage],
                              tOtO[g])
                # timeline(n_block - 1): O{g} end
                if g == NUM_Q_TILES - 1:
                    # Tile j-1's last MMAs are issued: stage s_{j-1} (K_{j-1}, V_{j-1}) is free once
                    # they complete. Tell both CTAs' load warps.
                    with cute.arch.elect_one():
                        tcgen05.commit(kv_empty + prev_stage, PAIR_MASK, tcgen05.CtaGroup.TWO)
                if g == 0:
                    # wait: K_j, V_j (both CTAs' halves) landed in stage s. Pairs with the load
                    # warp's expect-tx arrive (and both CTAs' bytes) on kv_full[s]: one phase per
                    # round, the round's parity. Taken after P_0 V(j-1) is issued, so that MMA
                    # does not wait for the load.
                    # timeline: K/V wait begin
                    cute.arch.mbarrier_wait(kv_full + stage, parity)
                    # timeline: K/V wait end
                    tcgen05_fence_after_thread_sync()
                # S_g(j) = Q_g K_j^T overwrites the columns P_g V(j-1), issued just before, reads
                # P_g from. Nothing waits in between: only the issue order of one thread's
                # tcgen05.mma keeps the read first (as in FA4; see the writeup). The commit
                # covers both MMAs, so softmax g also learns that O_g's last P V is done.
                # timeline: S{g} begin
                for kb in cutlass.range_constexpr(cute.size(tSrQ, mode=[2])):
                    tiled_mma.set(tcgen05.Field.ACCUMULATE, kb != 0)
                    cute.gemm(tiled_mma, tStS[g], tSrQ[None, None, kb, g], tSrK[None, None, kb, stage], tStS[g])
                with cute.arch.elect_one():
                    tcgen05.commit(s_full + g, PAIR_MASK, tcgen05.CtaGroup.TWO)
                # timeline: S{g} end
        # The work tile's last S MMAs are issued (in the loop, or in the prologue when n_blocks
        # is 1): sQ is free once they complete. Tell both CTAs' load warps (each overwrites its
        # own Q); the commit lands right after S_1(n-1), before the tail's P V.
        with cute.arch.elect_one():
            tcgen05.commit(q_empty, PAIR_MASK, tcgen05.CtaGroup.TWO)

        # Tail: the work tile's last P V for both Q tiles.
        last_stage, _ = ring_position(first + n_blocks - 1)
        for g in cutlass.range_constexpr(NUM_Q_TILES):
            # wait: P_g of the work tile's last K/V tile in TMEM, in both CTAs. Pairs with the 256
            # softmax threads' arrives on p_full[g]: that K/V tile's phase, parity
            # (first + n_blocks - 1) % 2.
            # timeline(n_blocks - 1): P{g} wait begin
            cute.arch.mbarrier_wait(p_full + g, (first + n_blocks - 1) % 2)
            # wait: O_g rescaled for the last K/V tile. Pairs with the 256 correction threads'
            # arrives on o_ready[g]: the same parity.
            cute.arch.mbarrier_wait(o_ready + g, (first + n_blocks - 1) % 2)
            # timeline(n_blocks - 1): P{g} wait end
            tcgen05_fence_after_thread_sync()
            # timeline(n_blocks - 1): O{g} begin
            for kb in cutlass.range_constexpr(cute.size(tOrP[0], mode=[2])):
                tiled_mma_pv.set(tcgen05.Field.ACCUMULATE, n_blocks > 1 or kb != 0)
                cute.gemm(tiled_mma_pv, tOtO[g], tOrP[g][None, None, kb], tOrVt[None, None, kb, last_stage],
                          tOtO[g])
            # timeline(n_blocks - 1): O{g} end
        # The last stage is free, and O final, once these MMAs complete: tell both CTAs' load
        # warps and softmax warpgroups (o_full: one phase per work tile, as b13's one). The next
        # work tile's S_0(0), S_1(0) may follow at once (they overwrite S/P, which these P V read:
        # issue order, as within a tile); its first P_g V, which overwrites O_g (no accumulate),
        # waits on p_full[g] of that tile's first K/V tile, which both CTAs' softmax g arrive on
        # only after draining this tile's O_g (see the softmax).
        with cute.arch.elect_one():
            tcgen05.commit(kv_empty + last_stage, PAIR_MASK, tcgen05.CtaGroup.TWO)
        with cute.arch.elect_one():
            tcgen05.commit(o_full, PAIR_MASK, tcgen05.CtaGroup.TWO)


@cute.jit
def correction_warpgroup(tOtO, s_scale, o_ready, n_tiles, n_blocks, leader):
    """Correction warpgroup (warps 8-11): per tile and Q tile, O_g's rescale by the softmax's
    factors, only in a warp where one of its rows needs it."""
    tidx, _, _ = cute.arch.thread_idx()
    warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    # Warp 8 + i owns TMEM lanes 32i .. 32i + 31 (its warp index mod 4), the same rows as
    # softmax warp i (Q tile 0) and softmax warp 4 + i (Q tile 1): thread `row` rescales row
    # `row` of O_0 and of O_1.
    quarter = warp_idx - CORRECTION_WARP
    row = tidx % TILE_M
    O_chunk0 = cute.composition(tOtO[0][(None, None), 0, 0], cute.make_layout((TILE_M, TMEM_CHUNK)))
    load_chunk, store_chunk = make_row_copies(O_chunk0, TMEM_CHUNK)
    thr_load, thr_store = load_chunk.get_slice(row), store_chunk.get_slice(row)
    tO_ld0, tO_st0 = thr_load.partition_S(O_chunk0), thr_store.partition_D(O_chunk0)
    o_shift = TMEM_O_COL[1] - TMEM_O_COL[0]
    tO_ld = [cute.make_tensor(tO_ld0.iterator + g * o_shift, tO_ld0.layout) for g in range(NUM_Q_TILES)]
    tO_st = [cute.make_tensor(tO_st0.iterator + g * o_shift, tO_st0.layout) for g in range(NUM_Q_TILES)]
    r_chunk = cute.make_rmem_tensor(thr_load.partition_D(O_chunk0).shape, cutlass.Float32)
    num_chunks_O = HEAD_DIM // TMEM_CHUNK

    for _tile_iter in range(n_tiles):          # every work tile: no per-tile state here
        for n_block in range(n_blocks):
            # The same order as the MMA warp's P V: Q tile 0, then 1.
            for g in cutlass.range_constexpr(NUM_Q_TILES):
                # barrier: softmax warp 4g + i has written tile j's factors of its 32 rows to
                # s_scale (pairs with its barrier_arrive on STATS_BARRIER + 4g + i; bar.sync makes
                # its shared-memory writes visible here). Its arrive for tile j + 1 cannot come
                # first: S_g(j + 1) is issued after P_g V(j), which waits for our o_ready below.
                # timeline: stats wait begin
                cute.arch.barrier(barrier_id=STATS_BARRIER + 4 * g + quarter, number_of_threads=STATS_THREADS)
                # timeline: stats wait end
                # O_g holds P V up to tile j - 1, complete: softmax g passed s_full[g] for S_g(j),
                # whose commit also covers the P_g V(j - 1) issued before it.
                tcgen05_fence_after_thread_sync()
                scale = s_scale[g * TILE_M + row]
                # timeline: correction begin
                # A work tile's first K/V tile: O_g is left alone. It may still hold the previous
                # work tile's O, which softmax g is draining; the first P_g V overwrites it (no
                # accumulate) once both CTAs' softmax g have drained it (their p_full arrives,
                # see the MMA warp). From K/V tile 1 on, O_g holds this work tile's P V, complete
                # (the s_full argument above), so the rescale below never meets the drain.
                if n_block > 0:
                    # Rescale this warp's 32 rows of O_g only if one of them needs it (a factor
                    # below 1: its max moved); rows with factor 1 are multiplied by 1.
                    if cute.arch.vote_ballot_sync(scale < 1.0) != 0:
                        for c in cutlass.range_constexpr(num_chunks_O):
                            cute.copy(thr_load, cute.make_tensor(tO_ld[g].iterator + c * TMEM_CHUNK, tO_ld0.layout),
                                      r_chunk)
                            cute.arch.fence_view_async_tmem_load()       # tcgen05.wait::ld
                            r_chunk.store(r_chunk.load() * scale)
                            cute.copy(thr_store, r_chunk,
                                      cute.make_tensor(tO_st[g].iterator + c * TMEM_CHUNK, tO_st0.layout))
                        cute.arch.fence_view_async_tmem_store()          # tcgen05.wait::st
                # timeline: correction end
                # arrive: O_g is ready for P_g V(j) (the leader's o_ready[g], tile j's phase; its
                # MMA warp's wait pairs with it; the peer's threads arrive remotely). The tcgen05
                # fence orders our TMEM stores before the arrive.
                tcgen05_fence_before_thread_sync()
                cute.arch.mbarrier_arrive(o_ready + g, leader)


@cute.jit
def softmax_warpgroup(tStS, tOtO, mO, s_scale, s_full, p_full, o_full, softmax_scale: cutlass.Float32,
                      cluster, n_clusters, m_blocks, heads, n_tiles, n_blocks, cta_rank, leader):
    """Softmax warpgroup g (warps 4g .. 4g+3), per work tile: P_g from S_g in TMEM, O_g's factor for
    the correction warps, the epilogue."""
    tidx, _, _ = cute.arch.thread_idx()
    warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    dtype = mO.element_type
    # Warps 4g .. 4g+3 run the softmax of Q tile g; thread `row` owns row (= TMEM lane) `row`
    # of S_g, P_g and O_g. Warp w touches lanes 32 (w % 4) .. +31: its own quarter.
    q_tile = warp_idx // 4
    row = tidx % TILE_M

    # TMEM -> registers, TMEM_CHUNK columns of this thread's row per tcgen05.ld, for S and O
    # (the epilogue) alike. Chunk c is the first chunk's view moved c * TMEM_CHUNK columns along
    # (a TMEM address counts 32-bit columns). The copies are built for the 128 threads of one Q
    # tile (slice `row`); this thread's Q tile picks the columns. O is only read here now: its
    # rescale is the correction warps'.
    O_chunk0 = cute.composition(tOtO[0][(None, None), 0, 0], cute.make_layout((TILE_M, TMEM_CHUNK)))
    load_chunk, _ = make_row_copies(O_chunk0, TMEM_CHUNK)
    thr_load = load_chunk.get_slice(row)
    s_shift = q_tile * (TMEM_S_COL[1] - TMEM_S_COL[0])
    o_shift = q_tile * (TMEM_O_COL[1] - TMEM_O_COL[0])
    tO_ld = thr_load.partition_S(O_chunk0)
    tO_ld = cute.make_tensor(tO_ld.iterator + o_shift, tO_ld.layout)
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
    # The whole row of S_g (TILE_N fp32 values) in registers, loaded in TMEM_CHUNK-column pieces
    # (num_chunks_S = 8 tcgen05.ld.32x32b.x16, all issued before one wait), as in b11. r_S[c]
    # views chunk c, the piece the loads fill and the P stores and the sums work on.
    S_chunk0 = cute.composition(tStS[0][(None, None), 0, 0], cute.make_layout((TILE_M, TMEM_CHUNK)))
    load_s, _ = make_row_copies(S_chunk0, TMEM_CHUNK)
    thr_load_s = load_s.get_slice(row)
    tS_ld = thr_load_s.partition_S(S_chunk0)
    tS_ld = cute.make_tensor(tS_ld.iterator + s_shift, tS_ld.layout)
    r_S_row = cute.make_rmem_tensor(TILE_N, cutlass.Float32)
    r_S = [cute.make_tensor(r_S_row.iterator + c * TMEM_CHUNK, r_chunk.layout) for c in range(num_chunks_S)]
    scale_log2 = softmax_scale * LOG2_E

    def chunk(t, c, width=TMEM_CHUNK):
        return cute.make_tensor(t.iterator + c * width, t.layout)

    for tile_iter in range(n_tiles):
        first = tile_iter * n_blocks            # K/V tiles of the earlier work tiles
        row_max = -cutlass.Float32.inf
        row_sum = cutlass.Float32(0.0)
        for n_block in range(n_blocks):
            # wait: S_g of tile j is in TMEM (and tile j-1's P_g V done). Pairs with the leader's
            # MMA warp's tcgen05.commit (its arrive, multicast to this CTA's s_full[g] too): one
            # phase per K/V tile, parity (first + j) % 2.
            # timeline: S wait begin
            cute.arch.mbarrier_wait(s_full + q_tile, (first + n_block) % 2)
            # timeline: S wait end
            # timeline: softmax begin
            tcgen05_fence_after_thread_sync()

            # Online softmax on this thread's row; the row is whole in one thread, so no shuffles.
            # S is read from TMEM once: all TILE_N columns of the row into registers (8 loads of
            # TMEM_CHUNK columns, one wait), then the row max, then the exponentials in place.
            for c in cutlass.range_constexpr(num_chunks_S):
                cute.copy(thr_load_s, chunk(tS_ld, c), r_S[c])
            cute.arch.fence_view_async_tmem_load()       # tcgen05.wait::ld: r_S is valid
            m_new = row_max
            for c in cutlass.range_constexpr(num_chunks_S):
                m_new = cute.arch.fmax(r_S[c].load().reduce(cute.ReductionOp.MAX, -cutlass.Float32.inf, 0), m_new)
            # The max moves only if it grows by more than RESCALE_THRESHOLD in log2 units (0: if
            # it grows at all; moved_log2 <= 0 always, and is 0 exactly when the max stayed);
            # otherwise the old max stays (P up to 2^RESCALE_THRESHOLD this tile) and O's factor
            # is exactly 1. The first tile has m_old = -inf: the max moves, factor 2^-inf = 0 (unused).
            moved_log2 = (row_max - m_new) * scale_log2
            rescale = cute.math.exp2(moved_log2, fastmath=True)
            if moved_log2 >= -RESCALE_THRESHOLD:
                m_new = row_max
                rescale = cutlass.Float32(1.0)
            row_max = m_new
            # This tile's factor for the correction warp of our rows; the arrive on our shared
            # named barrier (no wait) tells it the warp's 32 factors are there.
            s_scale[q_tile * TILE_M + row] = rescale
            cute.arch.barrier_arrive(barrier_id=STATS_BARRIER + 4 * q_tile + warp_idx % 4,
                                     number_of_threads=STATS_THREADS)
            # P = exp(scale * (S - m)) = 2^(S * scale_log2 - m * scale_log2): one packed FFMA2 per
            # pair of scores (the scale folded into the multiply, the max into the addend), then
            # one ex2.approx.ftz (MUFU.EX2) per score. Summed, and stored (bf16, two per column)
            # over the first half of this thread's row of S_g, whose values are all in registers.
            # The row sum is accumulated in pairs too (FADD2), one pair of partial sums per chunk
            # so that the additions form eight short chains rather than one long one.
            neg_max_scaled = -m_new * scale_log2
            tile_sum = cutlass.Float32(0.0)
            for c in cutlass.range_constexpr(num_chunks_S):
                for i in cutlass.range_constexpr(0, TMEM_CHUNK, 2):
                    r_S[c][i], r_S[c][i + 1] = cute.arch.fma_packed_f32x2(
                        (r_S[c][i], r_S[c][i + 1]), (scale_log2, scale_log2), (neg_max_scaled, neg_max_scaled))
                for i in cutlass.range_constexpr(0, TMEM_CHUNK, 2):
                    col = c * TMEM_CHUNK + i            # the score's column: the pattern goes by fragment
                    if ex2_is_emulated(col // EMU_FRAGMENT, col % EMU_FRAGMENT, TILE_N // EMU_FRAGMENT):
                        r_S[c][i], r_S[c][i + 1] = ex2_emulated_pair(r_S[c][i], r_S[c][i + 1])
                    else:
                        r_S[c][i] = cute.math.exp2(r_S[c][i], fastmath=True)
                        r_S[c][i + 1] = cute.math.exp2(r_S[c][i + 1], fastmath=True)
                pair_sum = (r_S[c][0], r_S[c][1])
                for i in cutlass.range_constexpr(2, TMEM_CHUNK, 2):
                    pair_sum = cute.arch.add_packed_f32x2(pair_sum, (r_S[c][i], r_S[c][i + 1]))
                tile_sum += pair_sum[0] + pair_sum[1]
                r_p.store(r_S[c].load().to(dtype))
                cute.copy(thr_store_p, r_p_cols, chunk(tP_st, c, TMEM_CHUNK // 2))
            row_sum = row_sum * rescale + tile_sum
            cute.arch.fence_view_async_tmem_store()      # tcgen05.wait::st: P in TMEM
            # arrive: P_g written (the leader's p_full[g], this tile's phase; its MMA warp's wait
            # pairs with it; the peer's threads arrive remotely). The tcgen05 fence orders our TMEM
            # stores before the arrive, and every earlier TMEM load too: at a work tile's first
            # K/V tile that includes the previous work tile's O_g drain (below, completed by its
            # wait::ld), which is what lets the first P_g V of this work tile overwrite O_g.
            tcgen05_fence_before_thread_sync()
            # timeline: softmax end
            cute.arch.mbarrier_arrive(p_full + q_tile, leader)

        # wait: O is final for this work tile. Pairs with the leader's MMA warp's tcgen05.commit
        # (its arrive, multicast to both CTAs' o_full) after the work tile's last P V MMAs: one
        # phase per work tile, parity i % 2. Phase i + 1 cannot complete before this wait: its
        # commit follows the next work tile's last P V, which waits for our p_full arrives of
        # that work tile, made after this wait.
        cute.arch.mbarrier_wait(o_full, tile_iter % 2)
        tcgen05_fence_after_thread_sync()
        # Epilogue: O / rowsum, chunk by chunk from TMEM, to bf16, stored from registers to this
        # thread's row of global memory, at this work tile's (m_block, head, batch).
        # (This CTA's rows of Q tile g, addressed only now: an address computed before the loop
        # stays live through it.)
        m_block, head, batch = tile_coords(cluster + tile_iter * n_clusters, m_blocks, heads)
        gO = cute.local_tile(mO[batch, None, head, None], (TILE_M, HEAD_DIM), (None, 0))
        gO_mine = gO[None, None, o_row_tile(m_block, q_tile, cta_rank)]
        inv_sum = cute.arch.rcp_approx(row_sum)
        for c in cutlass.range_constexpr(num_chunks_O):
            cute.copy(thr_load, chunk(tO_ld, c), r_chunk)
            cute.arch.fence_view_async_tmem_load()       # tcgen05.wait::ld: this chunk of O_g is read
            r_chunk_bf16.store((r_chunk.load() * inv_sum).to(dtype))
            cute.autovec_copy(r_chunk_bf16, row_piece(gO_mine, row, c))
        # O_g's TMEM is free for the next work tile once every chunk's load has completed (the
        # wait::ld above): the next work tile's first P_g V overwrites it, and it waits on our
        # p_full arrive for that tile's first K/V tile, made after the tcgen05 fence that orders
        # these loads before it (the softmax loop above). No barrier of its own is needed.


# ------------------------------------------------------------------------------ step facts
# What the harness reads about this step (ladder/contract.py StepInfo): not part of the kernel.
INFO = contract.StepInfo(
    id="b14",
    slug="persistent",
    title="Persistent clusters",
    change="one cluster per resident SM pair (queried at launch, clamped to the work) walks the work tiles (m-block fastest, then head, batch): every role loops over its cluster's tiles, its barrier phases and ring positions running on across them; q_empty lets the load warps refill Q",
    archs=("sm_100a",),
    enabler=False,
    threads=THREADS,
    tile_m=NUM_Q_TILES * TILE_M,
    tile_n=TILE_N,
    smem_bytes=SMEM_BYTES,
    predecessor="b13",
    sass_present=("UTCHMMA", "UTCHMMA.TS", "UTCBAR", "LDTM", "STTM", "UTMALDG", "MUFU.EX2", "FFMA2",
                  "USETMAXREG", "VOTE", "BAR.ARV", "UTCHMMA.2CTA", "UTCBAR.2CTA", "UTMALDG.2CTA", "UCGABAR"),
    sass_absent=("HMMA", "HGMMA", "LDSM", "LDG", "LDGSTS"),
    tmem_cols=TMEM_COLS,
    extra={"bound": {"overlap": "pipelined", "loads": "hidden"},
           "tmem_map": {"S0": (TMEM_S_COL[0], TILE_N), "S1": (TMEM_S_COL[1], TILE_N),
                        "O0": (TMEM_O_COL[0], HEAD_DIM), "O1": (TMEM_O_COL[1], HEAD_DIM)},
           "tmem_aliases": {"P0": ("S0", 0, P_COLS), "P1": ("S1", 0, P_COLS)},
           "warp_roles": {"softmax0": tuple(range(0, 4)), "softmax1": tuple(range(4, 8)),
                          "correction": tuple(range(CORRECTION_WARP, CORRECTION_WARP + CORRECTION_WARPS)),
                          "mma": (MMA_WARP,), "load": (LOAD_WARP,), "idle": (LOAD_WARP + 1, LOAD_WARP + 2)},
           "tmem_warps": tuple(range(CORRECTION_WARP + CORRECTION_WARPS)),
           "registers": {"softmax": SOFTMAX_REGISTERS, "correction": CORRECTION_REGISTERS, "other": OTHER_REGISTERS},
           "rescale_threshold": RESCALE_THRESHOLD,
           "cta_group": CLUSTER_CTAS,
           "kv_stages": NUM_STAGES,
           "spills_at_register_cap": "the warps at 48 registers (MMA, load) store and reload some "
                                     "of their loops' values in local memory (ptxas 13.4; the writeup's roles "
                                     "block counts them per role); the softmax, at 192, stores nothing",
           "ex2_emulated_per_tile": EX2_EMULATED_PER_TILE},
)


_attention = contract.make_attention(INFO, host)    # its docstring; ``attention`` below is the call
# A cluster covers CLUSTER_CTAS x tile_m query rows: the input checks hold seqlen to that unit.
_CLUSTER_INFO = contract.StepInfo(**{**vars(INFO), "tile_m": CLUSTER_CTAS * INFO.tile_m})


def check_capacity(capacity) -> int:
    """A resident-cluster count as the launch needs it: a positive int (0 would be an empty grid)."""
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ValueError(f"resident clusters: need a positive int, got {capacity!r}")
    return capacity


_resident: dict = {}


def resident_clusters(device_index: int) -> int:
    """Clusters of CLUSTER_CTAS CTAs the GPU ``device_index`` holds at once, asked of the driver
    once per device (cuOccupancyMaxActiveClusters, through cutlass.utils.HardwareInfo). With no
    such device (no driver, or the index past the count), FALLBACK_CLUSTERS (a B200's 74, not
    cached); where the driver cannot answer (a driver before 11.8; no CUDA context current in
    this thread), the GPU's SMs / 2: FA4's count, which assumes every pair can host a cluster
    (not cached either: only the driver's own answer is kept).

    The driver answers in the calling thread's current context: the device torch made current,
    where q is in a one-GPU process or one process per GPU (on a machine of one GPU model every
    device answers the same).
    HardwareInfo asks about a stand-in kernel that takes a whole SM (all its opt-in shared memory),
    not about this kernel; the count is the same because this kernel also fits one CTA per SM
    (512 threads x 128 registers: the whole register file; 128 KB of shared memory, two would not
    fit; all 512 TMEM columns), so it counts the SM pairs that can host a cluster at once, set by
    the GPU's layout (how its SMs split into GPCs), not by the kernel."""
    if device_index not in _resident:
        from cutlass.utils import HardwareInfo
        try:
            gpu = HardwareInfo(device_index)       # RuntimeError: no driver; ValueError: no such device
        except (RuntimeError, ValueError):
            return FALLBACK_CLUSTERS
        try:
            capacity = gpu.get_max_active_clusters(CLUSTER_CTAS)
        except RuntimeError:
            # CUDA errors, an old driver, no context current in this thread: SMs / 2 for this call,
            # not cached, so the next call asks the driver again.
            try:
                return check_capacity(gpu.get_device_multiprocessor_count() // CLUSTER_CTAS)
            except RuntimeError:
                return FALLBACK_CLUSTERS
        _resident[device_index] = check_capacity(capacity)
    return _resident[device_index]


_hosts: dict = {}


def host_for(capacity: int):
    """``host`` with max_clusters fixed at ``capacity``, a compile-time constant: the contract's
    launch passes six arguments, and its compile cache keys on the host function, so each capacity
    gets a host of its own and one compile (one per GPU model, in practice)."""
    if capacity not in _hosts:
        @cute.jit
        def host_for_capacity(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, o: cute.Tensor,
                              scale: cutlass.Float32, stream):
            host(q, k, v, o, scale, stream, capacity)

        _hosts[capacity] = host_for_capacity
    return _hosts[capacity]


def attention(q, k, v, softmax_scale=None):
    contract.validate_inputs(_CLUSTER_INFO, q, k, v, softmax_scale)    # the device check is last
    # Asked before the compile, outside traced code (the query compiles and loads a kernel of its own).
    capacity = resident_clusters(q.device.index)
    return contract.make_attention(INFO, host_for(capacity))(q, k, v, softmax_scale)


attention.__doc__ = _attention.__doc__ + (f" seqlen: a multiple of {CLUSTER_CTAS * INFO.tile_m}, the query "
                                          "rows of one cluster of two CTAs.")
