"""Named what-if experiments: a step file with a few exact text edits, measured like a step.

A writeup that says "h05 is limited by X, not Y" needs a measurement that changes only X. An
experiment is that measurement, written down: the base step, the question, and the edits (each
``old`` text must occur exactly once in the base file, so an edit that no longer applies fails
loudly instead of measuring something else). ``ladder table --steps exp:h05-loads-free`` builds it
under build/experiments/, runs it in a child like any step, and ``--record`` files the result under
"experiments" in the results file (never among the ladder's rows), where the writeups' generated
``experiments`` blocks read it. ``ladder diff h05 exp:h05-loads-free`` shows the edit.

A *diagnostic* experiment computes a wrong answer on purpose (say, K/V loaded once and reused):
it bounds what a mechanism could be worth; its numerics are expected to fail and are not a failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.core import experiment_edits as edit_texts
from harness.core import experiment_edits_blackwell as blackwell_edits
from harness.core import experiment_edits_cluster as cluster_edits
from harness.core import experiment_edits_h14 as h14_edits
from harness.core.markers import without_markers
from harness.core.paths import BUILD, ROOT, publish

BUILD = BUILD / "experiments"
PREFIX = "exp:"


@dataclass(frozen=True)
class Experiment:
    name: str
    base: str                                  # the step id whose file is edited
    question: str                              # what the measurement answers
    edits: tuple[tuple[str, str], ...]         # (old, new) exact texts, each old occurring once
    diagnostic: bool = False                   # wrong answers by design: a bound, not a kernel
    scratch_stores: bool = False               # adds thread smem stores harness/model/smem_model.py does not model


EXPERIMENTS = {e.name: e for e in (
    Experiment("h04-one-cta-per-sm", "h04",
               "h04 padded with 24 KB of unused smem, so one CTA fits per SM, not two",
               (("        kv_full: cute.struct.MemRange[cutlass.Int64, 1]\n",
                 "        kv_full: cute.struct.MemRange[cutlass.Int64, 1]\n"
                 "        pad: cute.struct.MemRange[cutlass.Int8, 24 * 1024]   # 120 KB: 1 CTA/SM\n"),)),
    Experiment("h04-loads-free", "h04", "h04 if K/V loads cost nothing (an upper bound)",
               edit_texts.LOADS_FREE, diagnostic=True),
    Experiment("h04-prefetch-k", "h04", "h04 with K_{j+1} issued as soon as S_j is done", edit_texts.PREFETCH_K),
    Experiment("h05-cta-barrier-for-p", "h05",
               "h05 with a CTA-wide barrier before P V (as h04 has) instead of the warpgroup's own",
               (("        cute.arch.barrier(barrier_id=1 + warpgroup_idx, number_of_threads=128)\n",
                 "        cute.arch.sync_threads()\n"),)),
    Experiment("h05-loads-free", "h05", "h05 if K/V loads cost nothing (an upper bound)",
               edit_texts.LOADS_FREE, diagnostic=True),
    Experiment("h05-prefetch-k", "h05", "h05 with K_{j+1} issued as soon as S_j is done", edit_texts.PREFETCH_K),
    Experiment("h07-split-kv", "h07",
               "h07 with K and V on separate full/empty barriers: K_{j+1} loads during softmax_j "
               "and P_j V_j, with one buffer each", edit_texts.split_kv_edits(staged=False)),
    Experiment("h08-three-stages", "h08", "h08 with a ring of 3 K/V stages (224 KB of smem) instead of 2",
               (("NUM_STAGES = 2         # K/V ring depth: tiles in flight ahead of the consumers\n",
                 "NUM_STAGES = 3         # K/V ring depth: tiles in flight ahead of the consumers\n"),)),
    Experiment("h10-no-pingpong", "h10",
               "h10 without h09's turns: h08's lock-step warpgroups with h10's ex2 softmax", edit_texts.NO_PINGPONG),
    Experiment("h10-exp2-emulation", "h10",
               "h10 with 1 exponential in 8 computed by a degree-3 FMA polynomial instead of MUFU.EX2 "
               "(FA4's Blackwell recipe, plain FFMA)", edit_texts.EX2_EMULATION),
    Experiment("h10-exp2-emulation-half", "h10",
               "h10 with 1 exponential in 2 computed by the degree-3 FMA polynomial (exp:h10-exp2-emulation's "
               "edit with EMU_EVERY = 2)", edit_texts.EX2_EMULATION_HALF),
    Experiment("h13-no-store-fence", "h13",
               "h13 without fence.proxy.async between the consumers' smem writes of O and the TMA store that "
               "reads them (a race the memory model allows; does a test or compute-sanitizer see it?)",
               edit_texts.NO_STORE_FENCE),
    Experiment("h14-one-tile-per-cta", "h14",
               "h14's persistent code with one CTA per work tile (the grid h13 launches): the loop's own "
               "cost, without the persistence",
               (("    grid = (SM_COUNT, 1, 1)       # persistent: one CTA per SM; the kernel walks the work tiles\n",
                 "    grid = (cute.size(mQ.shape[1]) // TILE_M * cute.size(mQ.shape[0]) * cute.size(mQ.shape[2]), 1, 1)\n"),)),
    Experiment("h12-pinned-exponentials", "h12",
               "h12 with all of the softmax's exponentials (and the row sums' adds) before wait_group(0), "
               "not after it as ptxas schedules them", edit_texts.pin_before_wait_edits(" " * 8, "row_sum"), scratch_stores=True),
    Experiment("h14-reduce-max", "h14", "h14 with the row max as one ReductionOp.MAX over the row "
               "(NaN-propagating FMNMX.NAN in the compiler's order) instead of four chains of max.f32", edit_texts.H14_REDUCE_MAX),
    Experiment("h14-one-max-chain", "h14", "h14 with the row max as one chain of max.f32 (each FMNMX waits for "
               "the one before) instead of four", edit_texts.H14_ONE_MAX_CHAIN),
    Experiment("h12-rescale-after-wait", "h12", "h12 with O's rescale after wait_group(0), behind P's conversion "
               "(on the way to the next turn), instead of under the next turn's QK^T", edit_texts.rescale_after_wait("    ")),
    Experiment("h14-pinned-max", "h14", "h14 with both rows' max reductions kept before wait_group(0) by a "
               "shared-memory store of the row maxima (ptxas leaves one row's shuffles after the wait)",
               edit_texts.pin_before_wait_edits(" " * 12, "row_max"), scratch_stores=True),
    Experiment("h14-o-in-q-tile", "h14", "h14 with O stored through Q's smem tile, as h13 stores it: the next "
               "work tile's Q loads only after the O store has read the tile, not under the last P V and the "
               "epilogue", h14_edits.H14_O_IN_Q_TILE),
    Experiment("h14-tile-n-176", "h14", "exp:h14-o-in-q-tile with FA3's 128 x 176 tile: 37% more keys per K/V "
               "tile, the last one partial and masked (walked first, in reverse order), P converted in pairs",
               h14_edits.H14_TILE_N_176),
    Experiment("h14-heads-first", "h14", "h14 with the work tiles ordered head fastest, then query block: a wave of "
               "132 CTAs spans every head of the batch instead of one or a few (batch, head) pairs, so more K/V "
               "bytes must stay in L2 at once",
               (("    return tile % m_blocks, (tile // m_blocks) % heads, tile // (m_blocks * heads)\n",
                 "    return (tile // heads) % m_blocks, tile % heads, tile // (m_blocks * heads)\n"),)),
    Experiment("h14-registers-40-232", "h14", "h14 with the register split 40 (producer) / 232 (consumers) per "
               "thread instead of FA4's 24 / 240 (128 x 40 + 256 x 232 = 64,512)",
               (("PRODUCER_REGISTERS = 24\n", "PRODUCER_REGISTERS = 40\n"),
                ("CONSUMER_REGISTERS = 240\n", "CONSUMER_REGISTERS = 232\n"))),
    Experiment("h14-balanced-tail", "h14", "h14 with the tiles of the last, partial round cut into 7 pieces along "
               "K/V, so that no SM idles for a whole tile at the end: what a balanced last wave would take, without "
               "combining the pieces' partial results", h14_edits.H14_BALANCED_TAIL, diagnostic=True),
    Experiment("h14-warpgroup-epilogue", "h14", "h14 with one epilogue per consumer warpgroup: each writes its "
               "64 rows of O into its own half of O's tile and stores them (a 64-row TMA store) behind its own "
               "barrier, and warpgroup 1 hands over the next tile's first turn right after its last turn, so "
               "warpgroup 0, a half turn ahead, starts the next work tile without waiting for warpgroup 1's epilogue",
               h14_edits.H14_WARPGROUP_EPILOGUE),
    Experiment("h14-per-thread-descriptors", "h14",
               "h14 with the wgmma operand fragments (smem descriptors) sliced by thread index, as the "
               "ladder sliced them before: a per-thread value that ptxas moves into a uniform register "
               "(R2UR) before each HGMMA", edit_texts.per_thread_descriptors("mma_tidx")),
    Experiment("h14-cluster-multicast", "h14",
               "h14 launched as clusters of two CTAs on neighbouring query blocks of one (batch, head): each "
               "CTA loads half of every K and V tile and multicasts it into both (K/V bytes from L2 halved); "
               "a stage is free once both CTAs' consumers released it (remote arrives through mapa)",
               cluster_edits.H14_CLUSTER_MULTICAST),
    Experiment("h14-stage-first-operands", "h14",
               "h14 with the staged wgmma operands (K, V) sliced by ring stage before k-block: each GEMM "
               "builds its stage's 64-bit descriptor once and adds an immediate per k-block (UIADD3.64), "
               "as FA4's loop does, instead of rebuilding it per HGMMA",
               edit_texts.stage_first_operands(
                   "            cute.gemm(tiled_mma, acc_S, tSrQ[None, None, kb], tSrK[None, None, kb, stage], acc_S)\n",
                   "                cute.gemm(tiled_mma, acc_S, tSrQ[None, None, kb], tSrK[None, None, kb, stage], acc_S)\n",
                   "                cute.gemm(tiled_mma_pv, acc_O, tOrP[None, None, kb], tOrVt[None, None, kb, prev_stage], "
                   "acc_O)\n",
                   "            cute.gemm(tiled_mma_pv, acc_O, tOrP[None, None, kb], tOrVt[None, None, kb, last_stage], "
                   "acc_O)\n")),
    Experiment("h08-stage-first-operands", "h08",
               "h08 with the staged wgmma operands (K, V) sliced by ring stage before k-block, the first "
               "step whose operands carry a stage: one 64-bit descriptor per GEMM plus an immediate per "
               "k-block (UIADD3.64) instead of one rebuilt per HGMMA",
               edit_texts.stage_first_operands(
                   "            cute.gemm(tiled_mma, acc_S, tSrQ[None, None, kb], tSrK[None, None, kb, stage], acc_S)\n",
                   "            cute.gemm(tiled_mma_pv, acc_O, tOrP[None, None, kb], tOrVt[None, None, kb, stage], acc_O)\n")),
    Experiment("h06-per-thread-descriptors", "h06",
               "h06 with the wgmma operand fragments sliced by thread index, as the ladder sliced them "
               "before: the first step where that costs an R2UR before each HGMMA",
               edit_texts.per_thread_descriptors("tidx")),
    Experiment("b10-one-s-load", "b10",
               "b10 with S read by one 128-column tcgen05.ld instead of eight 16-column loads: fewer "
               "load waits, more registers", edit_texts.B10_ONE_S_LOAD),
    Experiment("b12-rescale-threshold-8", "b12",
               "b12 with FA4's conditional rescaling: the running max may lag by up to 2^8 (8 in log2 units) "
               "before O is rescaled, so P reaches up to 2^8 before its bf16 cast and most tiles skip the rescale",
               (("RESCALE_THRESHOLD = 0.0\n", "RESCALE_THRESHOLD = 8.0\n"),)),
    Experiment("b12-no-setmaxnreg", "b12",
               "b12 without setmaxnreg (and without min_blocks_per_mp=1): every one of the 512 threads keeps "
               "the launch's 65,536 / 512 = 128 registers, the softmax included",
               edit_texts.B12_NO_SETMAXNREG),
    Experiment("b13-two-cta-emulation", "b13",
               "b13 with FA4's 2-CTA share of emulated exponentials (24 of 128, EMU_PERIOD 10) instead of "
               "b12's 16: what FA4's setting adds to the CTA pair",
               (("EMU_PERIOD = 16\n", "EMU_PERIOD = 10\n"),)),
    Experiment("b13-registers-184-80-64", "b13",
               "b13 with FA4's 2-CTA register split: setmaxnreg 184 for the softmax warpgroups, 80 for the "
               "correction warpgroup, 64 for the MMA/load warpgroup, instead of 192 / 80 / 48 (2 x 128 x 184 "
               "+ 128 x 80 + 128 x 64 = 65,536, the same pool)", blackwell_edits.REGISTERS_184_80_64),
    Experiment("b13-stage-first-operands", "b13",
               "b13 with the MMA warp's smem operands sliced by Q tile or ring stage before k-block "
               "(tSrK[None, None, None, stage][None, None, kb]): each GEMM builds its stage's descriptor once "
               "and each k-block adds an immediate, as FA4's MMA loop does", blackwell_edits.B13_STAGE_FIRST),
    Experiment("b13-registers-stage-first", "b13",
               "b13 with both: FA4's 184 / 80 / 64 register split and stage-first operand slicing",
               blackwell_edits.REGISTERS_184_80_64 + blackwell_edits.B13_STAGE_FIRST),
    Experiment("b14-registers-184-80-64", "b14",
               "b14 with FA4's 2-CTA register split: setmaxnreg 184 for the softmax warpgroups, 80 for the "
               "correction warpgroup, 64 for the MMA/load warpgroup, instead of 192 / 80 / 48 (the same "
               "65,536 registers)", blackwell_edits.REGISTERS_184_80_64),
    Experiment("b14-stage-first-operands", "b14",
               "b14 with the MMA warp's smem operands sliced by Q tile or ring stage before k-block: each GEMM "
               "builds its stage's descriptor once and each k-block adds an immediate, as FA4's MMA loop does",
               blackwell_edits.B14_STAGE_FIRST),
    Experiment("b14-registers-stage-first", "b14",
               "b14 with both: FA4's 184 / 80 / 64 register split and stage-first operand slicing",
               blackwell_edits.REGISTERS_184_80_64 + blackwell_edits.B14_STAGE_FIRST),
    Experiment("h08-split-kv", "h08",
               "h08's 2-stage ring with K and V on separate full/empty barriers: S_j starts once K_j "
               "has landed, and K's stage is refilled right after S_j", edit_texts.split_kv_edits(staged=True)),
)}


def get(name: str) -> Experiment:
    key = name[len(PREFIX):] if name.startswith(PREFIX) else name
    if key not in EXPERIMENTS:
        raise ValueError(f"no experiment {key!r}; known: {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[key]


def apply_edits(text: str, edits, label: str = "") -> str:
    for old, new in edits:
        count = text.count(old)
        if count != 1:
            raise ValueError(f"experiment {label}: edit anchor occurs {count} times, not once: {old[:70]!r}")
        text = text.replace(old, new)
    return text


def materialize(exp: Experiment, base_path: Path) -> Path:
    """Write ``base_path`` (the file of step ``exp.base``), without its timeline markers (comments
    that the edits' anchors do not contain), with the experiment's edits to
    build/experiments/<name>.py and return that path. (Name resolution is harness.core.steps's job: this
    module never imports it, so the two cannot import each other.)"""
    header = (f"# GENERATED by harness/core/experiments.py from {base_path.relative_to(ROOT)}: experiment "
              f"{exp.name!r}{' (diagnostic: wrong answers by design)' if exp.diagnostic else ''}.\n"
              f"# {exp.question}\n")
    text = header + apply_edits(without_markers(base_path.read_text()), exp.edits, exp.name)
    return publish(BUILD / f"{exp.name.replace('-', '_')}.py", text)
