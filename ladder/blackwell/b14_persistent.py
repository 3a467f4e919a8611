"""b14 — persistent clusters and an epilogue warp: one cluster per SM pair walks the work tiles; O leaves by TMA store.

Change from b13: the grid is GRID_CTAS = 148 CTAs (a B200's SMs, as 74 pairs), not one cluster
per 512 query rows. Cluster c takes work tiles c, c + 74, c + 148, ... of the m_blocks x heads x
batch tiles (the query block fastest, then the head, then the batch: FA4's
StaticPersistentTileScheduler), and every role runs its b13 loop once per tile, its barrier
phases and ring positions counted across tiles, so the load warp fetches the next tile's K, Q
and V while the current tile's last MMAs, softmax and output run. O no longer goes from the
softmax threads' registers to global memory: they write it (bf16, after the 1/rowsum) into a
shared-memory tile sO[g] and an epilogue warp (warp 14) stores it with one TMA store per Q tile,
overlapping the next tile. New barriers: q_empty (the tile's last S MMA has read Q: the load warp
may bring the next tile's Q; a multicast commit), o_epi_full[g] (sO[g] written, 128 softmax
threads) and o_epi_empty[g] (the TMA store has read sO[g]).

Why: with one cluster per 512 rows every cluster pays its start (barrier init, the cluster
barrier, TMEM alloc, setmaxnreg, a K/V ring that starts empty) and its end (the last tile's P V,
the O drain from TMEM and the stores, the TMEM handshake), with the SMs idle between a CTA's exit
and the next one's start. A persistent cluster pays them once; the next tile's loads overlap this
tile's tail, and its first S MMA can start while this tile's O is still on its way out. At 4k
(16 heads, batch 4: 512 work tiles over 74 clusters, 7 rounds) the start and end are a larger
part of each cluster's work than at 16k (1 batch: 32 m-blocks x 16 heads, 512 tiles, each 4x
longer).

Expect (model): the bound model has no prologue or epilogue term, so it predicts b14 level with
b13 (``ladder bound b14 --gpu b200``); what persistence saves is per work tile, a larger share at
4k than at 16k, and only a B200 run measures it. On Hopper the same change (h14 against h13)
measured no gain: there the loop's scheduling moved more than the saved starts and ends. Against
it here: the softmax also writes O into shared memory (thread stores that share the SM's
bandwidth with the tensor cores' reads), and a work tile's O drain still sits on the softmax
warps' path (FA4 moves it to the correction warps).

Evidence: ``ladder sass b14 --against b13`` (UTMASTG, no STG); tests/test_blackwell_steps.py (the
grid and cluster in the IR's launch facts, the scheduler's tile order for shapes that do not
divide the clusters, the PTX's bulk-store groups and proxy fence); tests/test_barrier_protocol.py
(the pair's barriers replayed over 0-3 work tiles per cluster); writeups/blackwell/14-persistent.md.
Compiled, not yet run on a B200.
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
EPILOGUE_WARP = LOAD_WARP + 1      # warp 14: the TMA stores of O
NUM_WARPS = 16                     # warp 15 completes the fourth warpgroup (setmaxnreg acts per warpgroup)
THREADS = NUM_WARPS * 32
# Registers per thread after setmaxnreg, per warpgroup: 2 x 128 x 192 + 128 x 80 + 128 x 48 = 65,536,
# the whole register file (b12's split; FA4's 2-CTA build moves a few from the softmax to the others).
SOFTMAX_REGISTERS = 192
CORRECTION_REGISTERS = 80
OTHER_REGISTERS = 48
# Conditional rescaling (FA4's rescale_threshold for 16-bit inputs): the running max moves only when
# the new one is more than this many log2 units above it, so P <= 2^RESCALE_THRESHOLD before bf16.
RESCALE_THRESHOLD = 8.0
# Named barriers (0 is sync_threads): one per softmax warp and the correction warp of its TMEM
# lanes, "this tile's factors are in sScale": STATS_BARRIER + 4 g + i for Q tile g, lane quarter i.
# Named barriers are per CTA: the pair does not share them.
STATS_BARRIER = 1
STATS_THREADS = 2 * 32
KV_EMPTY_ARRIVALS = 1              # kv_empty completes on the leader's tcgen05.commit alone (in each CTA)
# Hand-offs to the leader's MMA warp count the threads of both CTAs.
P_FULL_ARRIVALS = CLUSTER_CTAS * TILE_M                  # every softmax thread of Q tile g, both CTAs
O_READY_ARRIVALS = CLUSTER_CTAS * CORRECTION_WARPS * 32  # every correction thread, both CTAs
TMEM_FREE_ARRIVALS = 32            # the other CTA's MMA warp, one arrival per lane, before the pair frees TMEM
O_EPI_FULL_ARRIVALS = TILE_M       # sO[g] written: every softmax thread of Q tile g (this CTA)
O_EPI_EMPTY_ARRIVALS = 1           # sO[g] read by the TMA store: one thread of the epilogue warp
# Persistent grid: one CTA per SM of a B200, in pairs (clusters); the kernel walks the work tiles.
SM_COUNT = 148
GRID_CTAS = SM_COUNT // CLUSTER_CTAS * CLUSTER_CTAS
# K/V ring: slots of half a tile (this CTA's half of one K or one V tile, 16 KB). K_j takes ring
# position 2j and V_j 2j + 1; KV_SLOTS = 4 keeps b12's two K/V tiles in flight.
KV_SLOTS = 4
# Columns per tcgen05.ld/st of S or O (16, as in b02-b11; a register-allocation knob, not part of
# the algorithm). S, O and P all go by TMEM_CHUNK (b10-b11 loaded S whole; see the softmax below for
# why b12 on cannot).
TMEM_CHUNK = 16
LOG2_E = math.log2(math.e)   # exp(x) = 2^(x * log2(e))

# TMEM (each CTA: its own 128 rows of every accumulator): fp32 S0, S1 (TILE_N columns each),
# then fp32 O0, O1 (HEAD_DIM columns each): all 512, at the same addresses in both CTAs.
TMEM_S_COL = (0, TILE_N)                                   # S of Q tile 0, 1
TMEM_O_COL = (2 * TILE_N, 2 * TILE_N + HEAD_DIM)           # O of Q tile 0, 1
TMEM_COLS = 512

# smem per CTA: 2 Q tiles + KV_SLOTS half tiles + 2 O tiles for the TMA store (128-byte swizzled),
# all bf16. P lives in TMEM.
SMEM_ALIGN = 1024      # the 128B swizzle repeats every 8 rows x 128 B; descriptors assume this base
SLOT_ELEMS = (TILE_N // CLUSTER_CTAS) * HEAD_DIM           # = (HEAD_DIM // 2) * TILE_N: a K half or a V half
SMEM_BYTES = 2 * (2 * NUM_Q_TILES * TILE_M * HEAD_DIM + KV_SLOTS * SLOT_ELEMS)
# P_g (bf16, TILE_N keys = TILE_N / 2 columns) aliases the first columns of S_g.
P_COLS = TILE_N * 16 // 32

# Exponentials on the FMA pipe (FA4's utils.ex2_emulation_2, degree 3): 2^x = 2^floor(x) * 2^frac(x),
# floor(x) written into the exponent bits, 2^frac by a polynomial fitted on [0, 1) (FA4's POLY_EX2[3],
# a relative minimax fit). Valid for x < 128; softmax arguments s*scale_log2 - max_scaled are at most
# RESCALE_THRESHOLD (the max may lag by that much), up to the rounding of the fold.
EX2_POLY = (1.0, 0.695146143436431884765625, 0.227564394474029541015625, 0.077119089663028717041015625)
EX2_CLAMP = -127.0                         # below it every x gives 2^-127's value: < 2^-126, nothing next to a row sum >= 1
ROUND_DOWN_MAGIC = float(2**23 + 2**22)    # x + 1.5*2^23 rounded down keeps floor(x) in the low mantissa bits
# Which exponentials: FA4's 2-CTA setting for head dim 128 (ex2_emu_freq 10, ex2_emu_res 4,
# ex2_emu_start_frg 1; b11-b12 had its 1-CTA 16). In each EMU_FRAGMENT of a row (FA4's fragment: 32 scores),
# the last EMU_SPAN of every EMU_PERIOD elements (elements 6-9, 16-19, 26-29), in every fragment
# but the first and the last: 2 fragments x 3 periods x 4 = 24 of 128 elements, 18.75%. FA4 keeps
# the first and the last fragment of a row on the MUFU; so does this kernel.
EMU_FRAGMENT = 32
EMU_PERIOD = 10
EMU_SPAN = 4
EMU_FIRST_FRAGMENT = 1

EX2_EMULATED_PER_TILE = ((TILE_N // EMU_FRAGMENT - 1 - EMU_FIRST_FRAGMENT) * (EMU_FRAGMENT // EMU_PERIOD)
                         * EMU_SPAN)        # per thread (= row) and K/V tile: 24 of 128


def make_smem_layouts(tiled_mma, tiled_mma_pv):
    """(sQ, sK, sVt), this CTA's part of each 2-CTA MMA operand, in the 128B-swizzle layouts
    (atoms of 8 rows x 128 bytes, the 16-byte chunks of each row permuted by XOR with the row
    index; the UMMA descriptors carry the same mode). The shapes are those a cta_group::2 MMA
    takes from one CTA, already split into (MMA atom, M or N blocks, k-blocks, stage): sQ is this
    CTA's 128 rows of Q tile g (of the MMA's 256); sK is its 64 keys of a K tile (the MMA's B,
    N = 128, split along N between the two CTAs), K-major; sVt its 64 head dims of a V tile (B of
    O += P V, N = HEAD_DIM split alike), MN-major. K and V halves take turns in the same ring
    slots, so both have KV_SLOTS stages of SLOT_ELEMS elements. sO (make_epilogue_layout) comes
    last. P is not in shared memory."""
    sQ = sm100.make_smem_layout_a(tiled_mma, (MMA_M, TILE_N, HEAD_DIM), cutlass.BFloat16, NUM_Q_TILES)
    sK = sm100.make_smem_layout_b(tiled_mma, (MMA_M, TILE_N, HEAD_DIM), cutlass.BFloat16, KV_SLOTS)
    sVt = sm100.make_smem_layout_b(tiled_mma_pv, (MMA_M, HEAD_DIM, TILE_N), cutlass.BFloat16, KV_SLOTS)
    return sQ, sK, sVt, make_epilogue_layout()


def make_epilogue_layout():
    """sO: (TILE_M, D, Q tile), bf16, K-major with the 128B swizzle (Q's layout in b12): what one
    TMA store reads per Q tile. Each softmax thread writes its row, 16 bytes at a time."""
    atom = tcgen05.make_smem_layout_atom(tcgen05.SmemLayoutAtomKind.K_SW128, cutlass.BFloat16)
    return cute.tile_to_shape(atom, (TILE_M, HEAD_DIM, NUM_Q_TILES), (0, 1, 2))


def make_tmem_p_layout(tiled_mma_pv):
    """P as the A operand of O += P V: this CTA's (TILE_M, TILE_N) bf16 of the MMA's 256 rows,
    K-major. Read from TMEM, where a row of P is one lane, two bf16 per column; this layout only
    gives the MMA the operand's logical shape and K-major order (no smem address, no swizzle)."""
    return sm100.make_smem_layout_a(tiled_mma_pv, (MMA_M, HEAD_DIM, TILE_N), cutlass.BFloat16, 1).outer


def make_shared_storage(dtype, sQ_layout, sK_layout, sVt_layout, sO_layout):
    """The CTA's shared memory, as a struct (its size is the launch's dynamic smem). sK and sVt
    are two views of one ring (a slot holds a K half or a V half), so they must span the same."""
    assert cute.cosize(sK_layout) == cute.cosize(sVt_layout) == KV_SLOTS * SLOT_ELEMS
    @cute.struct
    class SharedStorage:
        sQ: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sQ_layout)], SMEM_ALIGN]
        # The K/V ring: KV_SLOTS slots of SLOT_ELEMS, each holding a K half or a V half.
        sKV: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sK_layout)], SMEM_ALIGN]
        sO: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sO_layout)], SMEM_ALIGN]
        # mbarriers, one per hand-off between two roles (see the module docstring). The leader's
        # q_full, kv_full, p_full and o_ready count both CTAs; the peer's stay unused.
        q_full: cute.struct.MemRange[cutlass.Int64, 1]
        q_empty: cute.struct.MemRange[cutlass.Int64, 1]             # the tile's last S has read Q
        kv_full: cute.struct.MemRange[cutlass.Int64, KV_SLOTS]
        kv_empty: cute.struct.MemRange[cutlass.Int64, KV_SLOTS]
        s_full: cute.struct.MemRange[cutlass.Int64, NUM_Q_TILES]
        p_full: cute.struct.MemRange[cutlass.Int64, NUM_Q_TILES]
        o_ready: cute.struct.MemRange[cutlass.Int64, NUM_Q_TILES]   # O_g rescaled (correction warps)
        o_full: cute.struct.MemRange[cutlass.Int64, NUM_Q_TILES]    # O_g final for the work tile
        tmem_free: cute.struct.MemRange[cutlass.Int64, 1]           # the other CTA's MMA warp is done with TMEM
        o_epi_full: cute.struct.MemRange[cutlass.Int64, NUM_Q_TILES]    # sO[g] written (softmax g)
        o_epi_empty: cute.struct.MemRange[cutlass.Int64, NUM_Q_TILES]   # sO[g] read by the TMA store
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


@dsl_user_op
def opaque_i32(x, *, loc=None, ip=None):
    """``x`` through an inline-PTX move the compiler may not hoist or merge (it has side effects):
    address arithmetic derived from it stays where it is written."""
    return cutlass.Int32(llvm.inline_asm(
        T.i32(), [cutlass.Int32(x).ir_value(loc=loc, ip=ip)], "mov.b32 $0, $1;", "=r,r",
        has_side_effects=True, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT))


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


def make_tma_store(mO, sO_layout):
    """The TMA store of one O tile, (TILE_M, D) from sO[g] to global memory, O viewed as (seqlen,
    d, heads, batch) as Q is for its load. A plain (cta_group::1) bulk copy: each CTA stores its
    own rows."""
    o = cute.make_tensor(mO.iterator, cute.select(mO.layout, mode=[1, 3, 2, 0]))
    return cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), o, cute.select(sO_layout, mode=[0, 1]),
                                       (TILE_M, HEAD_DIM))


def tile_coords(tile, m_blocks, heads):
    """Work tile -> (m_block, head, batch): the cluster's 512-row query block fastest, then the
    head, then the batch (FA4's static persistent order), so consecutive tiles of neighbouring
    clusters share K and V (one (batch, head)) in L2."""
    return tile % m_blocks, (tile // m_blocks) % heads, tile // (m_blocks * heads)


def tile_views(tma_mQ, tma_mK, tma_mVt, tma_mO, head, batch):
    """One (batch, head)'s tensors as TMA coordinates: gQ (MMA_M, D, 256-row tiles of the
    sequence; the cluster's Q tile g of m-block m is tile 2 m + g), gK (TILE_N, D, n_blocks), gVt
    (D, TILE_N, n_blocks), gO (TILE_M, D, 128-row tiles; this CTA's rows of Q tile g are tile
    o_row_tile(m, g, rank)). The MMA's split (slice cta_rank) gives a CTA its part of Q, K, V."""
    gQ = cute.local_tile(tma_mQ[None, None, head, batch], (MMA_M, HEAD_DIM), (None, 0))
    gK = cute.local_tile(tma_mK[None, None, head, batch], (TILE_N, HEAD_DIM), (None, 0))
    gVt = cute.local_tile(tma_mVt[None, None, head, batch], (HEAD_DIM, TILE_N), (0, None))
    gO = cute.local_tile(tma_mO[None, None, head, batch], (TILE_M, HEAD_DIM), (None, 0))
    return gQ, gK, gVt, gO


def tiles_of(cluster, n_clusters, n_work):
    """How many of the work tiles cluster, cluster + n_clusters, ... exist (< n_work)."""
    return (n_work - cluster + n_clusters - 1) // n_clusters


def ring_position(position):
    """(slot, parity) of ring position p: K_j is position 2j, V_j position 2j + 1 (k_position,
    v_position). Position p goes to slot p % KV_SLOTS, in round p // KV_SLOTS of that slot; a
    slot's kv_full completes one phase per round, so position p waits with the round's parity.
    The load warp waits for the *previous* round of kv_empty: the other parity.
    (tests/test_pipeline_protocol.py replays this bookkeeping against a model of the mbarriers.)"""
    return position % KV_SLOTS, (position // KV_SLOTS) % 2


def k_position(n_block):
    return 2 * n_block


def v_position(n_block):
    return 2 * n_block + 1


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
    thread stores per chunk of its row (O into sO)."""
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
    """Build layouts, copies and the tiled MMAs; launch GRID_CTAS CTAs in clusters of two, which
    walk the work tiles."""
    dtype = mQ.element_type
    mQ, mK, mV, mO = (contract.aligned(t) for t in (mQ, mK, mV, mO))
    tiled_mma, tiled_mma_pv = make_tiled_mmas(dtype)
    sQ_layout, sK_layout, sVt_layout, sO_layout = make_smem_layouts(tiled_mma, tiled_mma_pv)

    SharedStorage = make_shared_storage(dtype, sQ_layout, sK_layout, sVt_layout, sO_layout)
    (tma_Q, tma_mQ), (tma_K, tma_mK), (tma_V, tma_mVt) = make_tma_loads(
        mQ, mK, mV, sQ_layout, sK_layout, sVt_layout, tiled_mma, tiled_mma_pv)
    tma_O, tma_mO = make_tma_store(mO, sO_layout)
    # Persistent: one CTA per SM, in pairs (a cluster per SM pair); the kernel walks the work tiles.
    grid = (GRID_CTAS, 1, 1)
    kernel(tma_Q, tma_mQ, tma_K, tma_mK, tma_V, tma_mVt, tma_O, tma_mO, mO, softmax_scale,
           sQ_layout, sK_layout, sVt_layout, sO_layout, make_tmem_p_layout(tiled_mma_pv), tiled_mma, tiled_mma_pv,
           SharedStorage).launch(
        grid=grid, block=[THREADS, 1, 1], cluster=[CLUSTER_CTAS, 1, 1], smem=SharedStorage.size_in_bytes(),
        stream=stream,
        # .minnctapersm 1 with .reqntid 512: ptxas can then fix the entry register count (65,536 /
        # 512 = 128), which it needs to honour setmaxnreg (without it, it ignores them: C7508).
        min_blocks_per_mp=1)


@cute.kernel
def kernel(tma_Q: cute.CopyAtom, tma_mQ: cute.Tensor, tma_K: cute.CopyAtom, tma_mK: cute.Tensor,
           tma_V: cute.CopyAtom, tma_mVt: cute.Tensor, tma_O: cute.CopyAtom, tma_mO: cute.Tensor,
           mO: cute.Tensor, softmax_scale: cutlass.Float32,
           sQ_layout: cute.ComposedLayout, sK_layout: cute.ComposedLayout,
           sVt_layout: cute.ComposedLayout, sO_layout: cute.ComposedLayout, tP_layout: cute.Layout,
           tiled_mma: cute.TiledMma, tiled_mma_pv: cute.TiledMma, SharedStorage: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    # The pair: CTA rank 0 of the cluster is the leader (it issues the MMAs); rank 1 the peer.
    cta_rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
    leader = 0
    peer = 1 - cta_rank          # the other CTA of the pair, from either side
    n_blocks = cute.size(tma_mK.shape[0]) // TILE_N
    # The work: m_blocks x heads x batch tiles of 512 query rows (one cluster's), taken by cluster
    # c as tiles c, c + n_clusters, ...; both CTAs of a cluster walk the same tiles.
    heads = cute.size(tma_mQ.shape[2])
    m_blocks = cute.size(tma_mQ.shape[0]) // (CLUSTER_CTAS * NUM_Q_TILES * TILE_M)
    cluster, _, _ = cute.arch.cluster_idx()            # %clusterid.x: this pair's index
    n_clusters, _, _ = cute.arch.cluster_dim()         # %nclusterid.x: GRID_CTAS / 2 pairs
    n_tiles = tiles_of(cluster, n_clusters, m_blocks * heads * cute.size(tma_mQ.shape[3]))

    smem = cutlass.memory.SmemAllocator()
    storage = smem.allocate(SharedStorage)
    # The swizzle (the layouts' inner function) goes with the smem pointer; the descriptors and
    # the copies then see plain (outer) layouts. sK and sVt are two views of the same ring.
    sQ = storage.sQ.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)     # (MMA, 1, k-blocks, Q tile)
    sK = storage.sKV.get_tensor(sK_layout.outer, swizzle=sK_layout.inner)    # (MMA, 1, k-blocks, slot)
    sVt = cute.make_tensor(cute.recast_ptr(sK.iterator, sVt_layout.inner), sVt_layout.outer)   # B of P V
    sO = storage.sO.get_tensor(sO_layout.outer, swizzle=sO_layout.inner)     # (TILE_M, D, Q tile)
    q_full, q_empty = storage.q_full.data_ptr(), storage.q_empty.data_ptr()
    o_epi_full, o_epi_empty = storage.o_epi_full.data_ptr(), storage.o_epi_empty.data_ptr()
    kv_full, kv_empty = storage.kv_full.data_ptr(), storage.kv_empty.data_ptr()   # slot s: base + s
    s_full, p_full, o_full = storage.s_full.data_ptr(), storage.p_full.data_ptr(), storage.o_full.data_ptr()
    o_ready, tmem_free = storage.o_ready.data_ptr(), storage.tmem_free.data_ptr()
    s_scale = storage.s_scale.get_tensor(cute.make_layout(NUM_Q_TILES * TILE_M))    # [g * TILE_M + row]

    # One thread of each CTA initializes its mbarriers, the same in both (only the leader's
    # q_full, kv_full, p_full and o_ready will be used). Arrival counts: one for those completed
    # by an expect-tx arrive or a tcgen05.commit (and for o_epi_empty: one epilogue thread); for
    # p_full and o_ready the softmax and the correction threads of both CTAs; for o_epi_full the
    # 128 softmax threads of Q tile g in this CTA; 32 for tmem_free (the other CTA's MMA warp).
    if warp_idx == MMA_WARP:
        with cute.arch.elect_one():
            for bar in (q_full, q_empty):
                cute.arch.mbarrier_init(bar, 1)
            for slot in cutlass.range_constexpr(KV_SLOTS):
                cute.arch.mbarrier_init(kv_full + slot, 1)
                cute.arch.mbarrier_init(kv_empty + slot, KV_EMPTY_ARRIVALS)
            for g in cutlass.range_constexpr(NUM_Q_TILES):
                cute.arch.mbarrier_init(s_full + g, 1)
                cute.arch.mbarrier_init(p_full + g, P_FULL_ARRIVALS)
                cute.arch.mbarrier_init(o_ready + g, O_READY_ARRIVALS)
                cute.arch.mbarrier_init(o_full + g, 1)
                cute.arch.mbarrier_init(o_epi_full + g, O_EPI_FULL_ARRIVALS)
                cute.arch.mbarrier_init(o_epi_empty + g, O_EPI_EMPTY_ARRIVALS)
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

    # The fourth warpgroup (the MMA, load and epilogue warps, warp 15) gives registers back: one
    # setmaxnreg, which every warp of a warpgroup must execute, before its warps part ways. The
    # other warpgroups take theirs below, right before their roles.
    if warp_idx >= MMA_WARP:
        cute.arch.setmaxregister_decrease(OTHER_REGISTERS)

    if warp_idx == LOAD_WARP:
        load_warp(tma_Q, tma_K, tma_V, sQ, sK, sVt, tma_mQ, tma_mK, tma_mVt, tma_mO, thr_mma, thr_mma_pv,
                  q_full, q_empty, kv_full, kv_empty, cluster, n_clusters, m_blocks, heads, n_tiles, n_blocks,
                  cta_rank, leader)
    elif warp_idx == MMA_WARP and cta_rank == leader:
        mma_warp(tiled_mma, tiled_mma_pv, sQ, sK, sVt, tStS, tOtO, tP_layout, tmem_base, storage.tmem_base,
                 q_full, q_empty, kv_full, kv_empty, s_full, p_full, o_ready, o_full, n_tiles, n_blocks)
    elif warp_idx == MMA_WARP:
        # The peer's MMA warp issues no MMAs: the leader's issues every MMA of the pair; this one
        # allocated TMEM with it and frees it with it below.
        pass
    elif warp_idx == EPILOGUE_WARP:
        epilogue_warp(tma_O, sO, tma_mQ, tma_mK, tma_mVt, tma_mO, o_epi_full, o_epi_empty,
                      cluster, n_clusters, m_blocks, heads, n_tiles, cta_rank)
    elif warp_idx > EPILOGUE_WARP:
        # Warp 15 has no role: it completes the fourth warpgroup (its setmaxnreg above); it waits at
        # the exit barrier.
        pass
    elif warp_idx >= CORRECTION_WARP:
        cute.arch.setmaxregister_decrease(CORRECTION_REGISTERS)
        correction_warpgroup(tOtO, s_scale, o_ready, n_tiles, n_blocks, leader)
    else:
        cute.arch.setmaxregister_increase(SOFTMAX_REGISTERS)
        softmax_warpgroup(tStS, tOtO, sO, s_scale, s_full, p_full, o_full, softmax_scale, o_epi_full, o_epi_empty,
                          n_tiles, n_blocks, leader)

    # Free TMEM: every softmax and correction thread's TMEM loads and stores are complete (their
    # wait::ld / wait::st above), fenced before the barrier all 512 threads of this CTA reach at
    # the end. The pair frees its TMEM together (tcgen05.dealloc.cta_group::2), so each MMA warp
    # first tells the other CTA that this one is done with it and waits for the same news.
    tcgen05_fence_before_thread_sync()
    cute.arch.sync_threads()
    if warp_idx == MMA_WARP:
        # arrive: this CTA is done with TMEM (the other CTA's tmem_free, its only phase; every lane
        # arrives, TMEM_FREE_ARRIVALS = 32).
        cute.arch.mbarrier_arrive(tmem_free, peer)
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
              tma_mQ: cute.Tensor, tma_mK: cute.Tensor, tma_mVt: cute.Tensor, tma_mO: cute.Tensor,
              thr_mma, thr_mma_pv, q_full, q_empty, kv_full, kv_empty,
              cluster, n_clusters, m_blocks, heads, n_tiles, n_blocks, cta_rank, leader):
    """TMA producer, in both CTAs, per work tile: K_0, then both Q tiles once the previous work tile
    has freed Q, then the rest of K_j and V_j (this CTA's halves) into the ring's slots."""
    dtype = sQ.element_type
    # In both CTAs: this CTA's part of every tile, into its own smem. TMA partitions: each
    # smem tile (one Q tile, one ring slot) is one TMA destination; the global side keeps the
    # tile index. The MMA's slice picks this CTA's rows of Q and its halves of K and V.
    def tma_partition(atom, smem_tile, gmem_part):
        return cpasync.tma_partition(atom, 0, cute.make_layout(1), cute.group_modes(smem_tile, 0, 3),
                                     cute.group_modes(gmem_part, 0, 3))
    # The leader's expect-tx counts the pair's bytes: its own part and the peer's, whose
    # cta_group::2 copies complete on the leader's barrier (the peer's own is never used).
    q_bytes = CLUSTER_CTAS * cute.size_in_bytes(dtype, sQ.layout)      # both Q tiles, both CTAs
    slot_bytes = CLUSTER_CTAS * cute.size_in_bytes(dtype, cute.select(sK.layout, mode=[0, 1, 2]))
    for tile_iter in range(n_tiles):
        m_block, head, batch = tile_coords(cluster + tile_iter * n_clusters, m_blocks, heads)
        gQ, gK, gVt, _ = tile_views(tma_mQ, tma_mK, tma_mVt, tma_mO, head, batch)
        tQsQ, tQgQ = tma_partition(tma_Q, sQ, thr_mma.partition_A(gQ))
        tKsK, tKgK = tma_partition(tma_K, sK, thr_mma.partition_B(gK))
        tVsV, tVgV = tma_partition(tma_V, sVt, thr_mma_pv.partition_B(gVt))
        first = tile_iter * n_blocks          # K/V tiles of the earlier work tiles: the ring runs on
        for n_block in range(n_blocks):
            # K_j, then V_j, each into the next slot of the ring.
            for kv in cutlass.range_constexpr(2):
                slot, parity = ring_position(2 * (first + n_block) + kv)
                # wait: slot s is free in this CTA. Pairs with the leader's tcgen05.commit (its
                # arrive, multicast to both CTAs) on kv_empty[s] after the last MMA that read the
                # slot's previous round: parity ^ 1. In round 0 the fresh barrier's "previous
                # phase" (parity 1) counts as complete, so the load warp fills every slot at once.
                # timeline: slot wait begin
                cute.arch.mbarrier_wait(kv_empty + slot, parity ^ 1)
                # timeline: slot wait end
                if cta_rank == leader:
                    with cute.arch.elect_one():
                        cute.arch.mbarrier_arrive_and_expect_tx(kv_full + slot, slot_bytes)
                if kv == 0:
                    cute.copy(tma_K, tKgK[None, n_block], tKsK[None, slot], tma_bar_ptr=kv_full + slot)
                else:
                    cute.copy(tma_V, tVgV[None, n_block], tVsV[None, slot], tma_bar_ptr=kv_full + slot)
                if n_block == 0 and kv == 0:
                    # After K_0 (FA4's order: it lands while the Q buffer drains), this tile's Q.
                    # wait: the previous work tile's last S MMA has read Q. Pairs with the
                    # leader's tcgen05.commit (its arrive, multicast) on q_empty: one phase per
                    # work tile, the previous one's, parity (i % 2) ^ 1 (the first passes at once).
                    cute.arch.mbarrier_wait(q_empty, (tile_iter % 2) ^ 1)
                    if cta_rank == leader:
                        with cute.arch.elect_one():
                            cute.arch.mbarrier_arrive_and_expect_tx(q_full, q_bytes)
                    for g in cutlass.range_constexpr(NUM_Q_TILES):
                        cute.copy(tma_Q, tQgQ[None, NUM_Q_TILES * m_block + g], tQsQ[None, g],
                                  tma_bar_ptr=q_full)
    # Producer tail: drain the ring and Q before the exit barrier. The kv_empty and q_empty
    # arrives come from the leader's commits, not from a thread, so no thread's exit orders
    # them: without these waits one could land after the CTA has exited, in shared memory that
    # already belongs to the next CTA. Positions 2 N .. 2 N + KV_SLOTS - 1 (N: all K/V tiles of
    # all work tiles) are the next round of each slot, so their waits are each slot's last phase.
    total = n_tiles * n_blocks
    for i in cutlass.range_constexpr(KV_SLOTS):
        slot, parity = ring_position(2 * total + i)
        # wait: the last MMAs that read slot s are done. Pairs with the leader's last
        # tcgen05.commit (its arrive) on kv_empty[s]: parity ^ 1, as in the loop; a slot no
        # position used (2 N < KV_SLOTS) passes at once, as in round 0.
        cute.arch.mbarrier_wait(kv_empty + slot, parity ^ 1)
    # wait: the last work tile's last S has read Q. Pairs with the leader's last commit (its
    # arrive) on q_empty: work tile n_tiles - 1's phase, parity (n_tiles - 1) % 2, the next
    # tile's wait parity; with no work tile, the fresh barrier's previous phase passes at once.
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
    # Smem operands as UMMA descriptors, one per 16-wide k-block (and Q tile or ring slot);
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
        # They overwrite S/P of the previous work tile's last P V, issued just before: issue
        # order protects it, as inside the loop.
        k_slot, k_parity = ring_position(k_position(first))
        # wait: K_0's halves landed in slot k (here and in the peer). Pairs with the load warp's
        # expect-tx arrive (and both CTAs' TMA bytes) on kv_full[k]: the round's parity.
        # timeline(0): K/V wait begin
        cute.arch.mbarrier_wait(kv_full + k_slot, k_parity)
        # timeline(0): K/V wait end
        tcgen05_fence_after_thread_sync()
        for g in cutlass.range_constexpr(NUM_Q_TILES):
            # timeline(0): S{g} begin
            for kb in cutlass.range_constexpr(cute.size(tSrQ, mode=[2])):
                tiled_mma.set(tcgen05.Field.ACCUMULATE, kb != 0)
                cute.gemm(tiled_mma, tStS[g], tSrQ[None, None, kb, g], tSrK[None, None, kb, k_slot], tStS[g])
            with cute.arch.elect_one():
                tcgen05.commit(s_full + g, PAIR_MASK, tcgen05.CtaGroup.TWO)
            # timeline(0): S{g} end
        # K_0's slot is free once both S MMAs complete: tell both CTAs' load warps.
        with cute.arch.elect_one():
            tcgen05.commit(kv_empty + k_slot, PAIR_MASK, tcgen05.CtaGroup.TWO)
        if n_blocks == 1:
            # The work tile's last S is issued: Q is free once it completes (both CTAs' load
            # warps may bring the next work tile's Q).
            with cute.arch.elect_one():
                tcgen05.commit(q_empty, PAIR_MASK, tcgen05.CtaGroup.TWO)

        # Steady state, iteration j: P_0 V(j-1) -> S_0(j) -> P_1 V(j-1) -> S_1(j), as b13; the
        # barrier phases count K/V tiles across work tiles (first + j).
        for n_block in range(1, n_blocks):
            v_slot, v_parity = ring_position(v_position(first + n_block - 1))
            k_slot, k_parity = ring_position(k_position(first + n_block))
            for g in cutlass.range_constexpr(NUM_Q_TILES):
                # wait: P_g of tile j-1 in TMEM, in both CTAs. Pairs with the arrives of the 256
                # softmax threads of Q tile g (128 per CTA, the peer's remote) on p_full[g]: one
                # phase per K/V tile, parity (first + j - 1) % 2.
                # timeline(n_block - 1): P{g} wait begin
                cute.arch.mbarrier_wait(p_full + g, (first + n_block - 1) % 2)
                # wait: O_g rescaled to tile j-1's max (or left alone), in both CTAs. Pairs with
                # the arrives of the 256 correction threads on o_ready[g]: the same parity.
                cute.arch.mbarrier_wait(o_ready + g, (first + n_block - 1) % 2)
                if g == 0:
                    # wait: V_{j-1}'s halves landed in slot v. Pairs with the load warp's
                    # expect-tx arrive (and both CTAs' bytes) on kv_full[v]: the round's parity.
                    cute.arch.mbarrier_wait(kv_full + v_slot, v_parity)
                # timeline(n_block - 1): P{g} wait end
                tcgen05_fence_after_thread_sync()
                # timeline(n_block - 1): O{g} begin
                for kb in cutlass.range_constexpr(cute.size(tOrP[0], mode=[2])):
                    tiled_mma_pv.set(tcgen05.Field.ACCUMULATE, n_block > 1 or kb != 0)
                    cute.gemm(tiled_mma_pv, tOtO[g], tOrP[g][None, None, kb], tOrVt[None, None, kb, v_slot],
                              tOtO[g])
                # timeline(n_block - 1): O{g} end
                if g == NUM_Q_TILES - 1:
                    # V_{j-1}'s last MMAs are issued: slot v is free once they complete.
                    with cute.arch.elect_one():
                        tcgen05.commit(kv_empty + v_slot, PAIR_MASK, tcgen05.CtaGroup.TWO)
                if g == 0:
                    # wait: K_j's halves landed in slot k. Pairs with the load warp's expect-tx
                    # arrive (and both CTAs' bytes) on kv_full[k]: the round's parity. Taken after
                    # P_0 V(j-1) is issued, so that MMA does not wait for the load.
                    # timeline: K/V wait begin
                    cute.arch.mbarrier_wait(kv_full + k_slot, k_parity)
                    # timeline: K/V wait end
                    tcgen05_fence_after_thread_sync()
                # S_g(j) = Q_g K_j^T overwrites the columns P_g V(j-1), issued just before, reads
                # P_g from. Nothing waits in between: only the issue order of one thread's
                # tcgen05.mma keeps the read first (as in FA4; see the writeup). The commit
                # covers both MMAs, so softmax g also learns that O_g's last P V is done.
                # timeline: S{g} begin
                for kb in cutlass.range_constexpr(cute.size(tSrQ, mode=[2])):
                    tiled_mma.set(tcgen05.Field.ACCUMULATE, kb != 0)
                    cute.gemm(tiled_mma, tStS[g], tSrQ[None, None, kb, g], tSrK[None, None, kb, k_slot], tStS[g])
                with cute.arch.elect_one():
                    tcgen05.commit(s_full + g, PAIR_MASK, tcgen05.CtaGroup.TWO)
                # timeline: S{g} end
                if g == NUM_Q_TILES - 1:
                    # K_j's last MMAs are issued: slot k is free once they complete.
                    with cute.arch.elect_one():
                        tcgen05.commit(kv_empty + k_slot, PAIR_MASK, tcgen05.CtaGroup.TWO)
                    if n_block == n_blocks - 1:
                        # The work tile's last S is issued: Q is free once it completes.
                        with cute.arch.elect_one():
                            tcgen05.commit(q_empty, PAIR_MASK, tcgen05.CtaGroup.TWO)

        # Tail: the work tile's last P V for both Q tiles.
        last = first + n_blocks - 1
        v_slot, v_parity = ring_position(v_position(last))
        for g in cutlass.range_constexpr(NUM_Q_TILES):
            # wait: P_g of the last K/V tile in TMEM, in both CTAs (p_full[g], parity last % 2).
            # Pairs with the 256 softmax threads' arrives.
            # timeline(n_blocks - 1): P{g} wait begin
            cute.arch.mbarrier_wait(p_full + g, last % 2)
            # wait: O_g rescaled for the last K/V tile. Pairs with the 256 correction threads'
            # arrives on o_ready[g]: parity last % 2.
            cute.arch.mbarrier_wait(o_ready + g, last % 2)
            if g == 0:
                # wait: the last V's halves landed in slot v. Pairs with the load warp's expect-tx
                # arrive (and both CTAs' bytes) on kv_full[v]: the round's parity.
                cute.arch.mbarrier_wait(kv_full + v_slot, v_parity)
            # timeline(n_blocks - 1): P{g} wait end
            tcgen05_fence_after_thread_sync()
            # timeline(n_blocks - 1): O{g} begin
            for kb in cutlass.range_constexpr(cute.size(tOrP[0], mode=[2])):
                tiled_mma_pv.set(tcgen05.Field.ACCUMULATE, n_blocks > 1 or kb != 0)
                cute.gemm(tiled_mma_pv, tOtO[g], tOrP[g][None, None, kb], tOrVt[None, None, kb, v_slot],
                          tOtO[g])
            # timeline(n_blocks - 1): O{g} end
            # O_g is final once these MMAs complete: softmax g may drain it while P_1 V runs
            # (one commit per Q tile, as FA4's per-stage o_acc). The next work tile's first
            # P_g V (no accumulate) overwrites O_g: it waits for p_full of that tile, which
            # softmax g arrives only after it has drained O_g (below).
            with cute.arch.elect_one():
                tcgen05.commit(o_full + g, PAIR_MASK, tcgen05.CtaGroup.TWO)
        # The last V slot is free once the last MMAs complete: tell both CTAs' load warps.
        with cute.arch.elect_one():
            tcgen05.commit(kv_empty + v_slot, PAIR_MASK, tcgen05.CtaGroup.TWO)


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
                # A work tile's first K/V tile: its P V overwrites O_g (the previous work tile's
                # O, which softmax g has drained before the arrive this bar.sync pairs with).
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
def softmax_warpgroup(tStS, tOtO, sO: cute.Tensor, s_scale, s_full, p_full, o_full, softmax_scale: cutlass.Float32,
                      o_epi_full, o_epi_empty, n_tiles, n_blocks, leader):
    """Softmax warpgroup g (warps 4g .. 4g+3), per work tile: P_g from S_g in TMEM, O_g's factor for
    the correction warps, O_g / rowsum into sO[g] for the epilogue warp."""
    tidx, _, _ = cute.arch.thread_idx()
    warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    dtype = sO.element_type
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
    # (4 x tcgen05.ld.32x32b.x32, as FA4): with 512 threads the launch allows 128 registers,
    # and ptxas compiles every instruction within that, setmaxnreg or not; b11's single x128
    # load would need more than 128 in one instruction. r_S[c] views chunk c, the piece the
    # P stores and the sums work on.
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
            # S is read from TMEM once: all TILE_N columns of the row into registers (4 loads, one
            # wait), then the row max, then the exponentials in place.
            for c in cutlass.range_constexpr(num_chunks_S):
                cute.copy(thr_load_s, chunk(tS_ld, c), r_S[c])
            cute.arch.fence_view_async_tmem_load()       # tcgen05.wait::ld: r_S is valid
            m_new = row_max
            for c in cutlass.range_constexpr(num_chunks_S):
                m_new = cute.arch.fmax(r_S[c].load().reduce(cute.ReductionOp.MAX, -cutlass.Float32.inf, 0), m_new)
            # Conditional rescaling: the max moves only if it grows by more than RESCALE_THRESHOLD
            # in log2 units; otherwise the old max stays (P up to 2^8 this tile) and O's factor is
            # 1. The first tile has m_old = -inf: the max moves, factor 2^-inf = 0 (unused).
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
            # stores before the arrive.
            tcgen05_fence_before_thread_sync()
            # timeline: softmax end
            cute.arch.mbarrier_arrive(p_full + q_tile, leader)

        # wait: O_g is final. Pairs with the leader's MMA warp's tcgen05.commit (its arrive,
        # multicast to both CTAs' o_full[g]) after the work tile's last P_g V MMAs: one phase
        # per work tile, parity i % 2.
        cute.arch.mbarrier_wait(o_full + q_tile, tile_iter % 2)
        tcgen05_fence_after_thread_sync()
        # wait: sO[g] is free: the TMA store of the previous work tile's O_g has read it. Pairs
        # with the epilogue warp's arrive on o_epi_empty[g]: parity (i % 2) ^ 1 (the first work
        # tile's passes at once).
        cute.arch.mbarrier_wait(o_epi_empty + q_tile, (tile_iter % 2) ^ 1)
        # O / rowsum, chunk by chunk from TMEM, to bf16, into this thread's row of sO[g]. The
        # row's 16 swizzled addresses are computed here, from an opaque copy of the row index:
        # otherwise the compiler hoists them out of the work-tile loop, where they stay live
        # through the softmax (under ptxas 12.9 they spilled; under 13.4 they fit).
        o_row = opaque_i32(row)
        inv_sum = cute.arch.rcp_approx(row_sum)
        for c in cutlass.range_constexpr(num_chunks_O):
            cute.copy(thr_load, chunk(tO_ld, c), r_chunk)
            cute.arch.fence_view_async_tmem_load()
            r_chunk_bf16.store((r_chunk.load() * inv_sum).to(dtype))
            cute.autovec_copy(r_chunk_bf16, row_piece(sO[None, None, q_tile], o_row, c))
        # fence: this thread's smem writes (generic proxy) become visible to the TMA (async proxy).
        cute.arch.fence_view_async_shared()
        # arrive: sO[g] written (o_epi_full[g], this work tile's phase; the epilogue warp's wait
        # pairs with it). O_g's TMEM reads are complete (wait::ld above) before our next p_full
        # arrive lets the next work tile's first P V overwrite O_g.
        cute.arch.mbarrier_arrive(o_epi_full + q_tile)


@cute.jit
def epilogue_warp(tma_O: cute.CopyAtom, sO: cute.Tensor, tma_mQ: cute.Tensor, tma_mK: cute.Tensor,
                  tma_mVt: cute.Tensor, tma_mO: cute.Tensor, o_epi_full, o_epi_empty,
                  cluster, n_clusters, m_blocks, heads, n_tiles, cta_rank):
    """The epilogue warp: per work tile, each Q tile's O from sO to global memory by one TMA store."""
    # Per work tile and Q tile g: wait until the softmax warpgroup g has written O_g (bf16) to
    # sO[g], store it with one TMA store, and free sO[g] once the TMA has read it. The stores
    # of a work tile run while the next work tile's MMAs and softmax do.
    for tile_iter in range(n_tiles):
        m_block, head, batch = tile_coords(cluster + tile_iter * n_clusters, m_blocks, heads)
        _, _, _, gO = tile_views(tma_mQ, tma_mK, tma_mVt, tma_mO, head, batch)
        tOsO, tOgO = cpasync.tma_partition(tma_O, 0, cute.make_layout(1), cute.group_modes(sO, 0, 2),
                                           cute.group_modes(gO, 0, 2))
        for g in cutlass.range_constexpr(NUM_Q_TILES):
            # wait: sO[g] holds this work tile's O_g. Pairs with the 128 arrives of softmax
            # warpgroup g on o_epi_full[g] (after their proxy fence): one phase per work tile,
            # parity i % 2.
            cute.arch.mbarrier_wait(o_epi_full + g, tile_iter % 2)
            # The TMA store of this CTA's rows of Q tile g: one copy, two UTMASTG (64-column
            # boxes of the 128B swizzle); the whole warp executes it, a warp-uniform
            # instruction (as h14's). One bulk-async group per Q tile.
            cute.copy(tma_O, tOsO[None, g], tOgO[None, o_row_tile(m_block, g, cta_rank)])
            cute.arch.cp_async_bulk_commit_group()
        for g in cutlass.range_constexpr(NUM_Q_TILES):
            # wait_group.read(1 - g): at most 1 - g groups still reading, so group g has read
            # sO[g] out (the global writes complete on their own).
            cute.arch.cp_async_bulk_wait_group(NUM_Q_TILES - 1 - g, read=True)
            # arrive: sO[g] is free for the next work tile's O_g (o_epi_empty[g]; the softmax's
            # wait pairs with it). sync_warp first: every lane has passed its wait.
            cute.arch.sync_warp()
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive(o_epi_empty + g)


# ------------------------------------------------------------------------------ step facts
# What the harness reads about this step (ladder/contract.py StepInfo): not part of the kernel.
INFO = contract.StepInfo(
    id="b14",
    slug="persistent",
    title="Persistent clusters, epilogue warp",
    change="148 CTAs (74 pairs) walk the work tiles (m-block fastest, then head, batch), each role's barrier phases and ring positions running on across tiles; O goes through shared memory to one TMA store per Q tile by an epilogue warp",
    archs=("sm_100a",),
    enabler=False,
    threads=THREADS,
    tile_m=NUM_Q_TILES * TILE_M,
    tile_n=TILE_N,
    smem_bytes=SMEM_BYTES,
    predecessor="b13",
    sass_present=("UTCHMMA", "UTCHMMA.TS", "UTCBAR", "LDTM", "STTM", "UTMALDG", "MUFU.EX2", "FFMA2",
                  "USETMAXREG", "VOTE", "BAR.ARV", "UTCHMMA.2CTA", "UTCBAR.2CTA", "UTMALDG.2CTA", "UCGABAR",
                  "UTMASTG"),
    sass_absent=("HMMA", "HGMMA", "LDSM", "LDG", "LDGSTS", "STG"),
    tmem_cols=TMEM_COLS,
    extra={"bound": {"overlap": "pipelined", "loads": "hidden"},
           "tmem_map": {"S0": (TMEM_S_COL[0], TILE_N), "S1": (TMEM_S_COL[1], TILE_N),
                        "O0": (TMEM_O_COL[0], HEAD_DIM), "O1": (TMEM_O_COL[1], HEAD_DIM)},
           "tmem_aliases": {"P0": ("S0", 0, P_COLS), "P1": ("S1", 0, P_COLS)},
           "q_tiles": NUM_Q_TILES,
           "warp_roles": {"softmax0": tuple(range(0, 4)), "softmax1": tuple(range(4, 8)),
                          "correction": tuple(range(CORRECTION_WARP, CORRECTION_WARP + CORRECTION_WARPS)),
                          "mma": (MMA_WARP,), "load": (LOAD_WARP,), "epilogue": (EPILOGUE_WARP,),
                          "idle": (EPILOGUE_WARP + 1,)},
           "tmem_warps": tuple(range(CORRECTION_WARP + CORRECTION_WARPS)),
           "registers": {"softmax": SOFTMAX_REGISTERS, "correction": CORRECTION_REGISTERS, "other": OTHER_REGISTERS},
           "rescale_threshold": RESCALE_THRESHOLD,
           "cta_group": CLUSTER_CTAS,
           "kv_slots": KV_SLOTS,
           "kv_slot_bytes": 2 * SLOT_ELEMS,
           "sm_count": SM_COUNT,
           "spills_at_register_cap": "the warps at 48 registers (MMA, load, epilogue) store and reload some "
                                     "of their loops' values in local memory (ptxas 13.4; the writeup's roles "
                                     "block counts them per role); the softmax, at 192, stores nothing",
           "ex2_emulated_per_tile": EX2_EMULATED_PER_TILE},
)


_attention = contract.make_attention(INFO, host)
# A cluster covers CLUSTER_CTAS x tile_m query rows: the input checks hold seqlen to that unit.
_CLUSTER_INFO = contract.StepInfo(**{**vars(INFO), "tile_m": CLUSTER_CTAS * INFO.tile_m})


def attention(q, k, v, softmax_scale=None):
    contract.validate_inputs(_CLUSTER_INFO, q, k, v, softmax_scale)
    return _attention(q, k, v, softmax_scale)


attention.__doc__ = _attention.__doc__ + (f" seqlen: a multiple of {CLUSTER_CTAS * INFO.tile_m}, the query "
                                          "rows of one cluster of two CTAs.")
