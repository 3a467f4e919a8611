"""Every mbarrier of every step, read from the kernel's source (harness/model/protocol.py) and replayed
under random schedules: no deadlock, every wait passes on the completion it is meant for, every
asynchronous arrive (tcgen05.commit, a copy's bytes, another CTA's arrive) is waited for, or ordered
by a cluster barrier, before the CTA it lands in exits; b13's two CTAs, and the Hopper cluster
experiment's, are replayed together as one cluster. The arrival counts the model reads from the source
are the ones the compiled PTX initialises.

The model must be able to fail: each broken copy below is a bug a kernel could have (three of
them are bugs these kernels had)."""

import ast
import inspect

import pytest
from conftest import STEPS, step_id

from harness.compiler.compile import compile_step
from harness.core import experiments
from harness.core.steps import resolve
from harness.model import protocol, protocol_replay, protocol_source
from harness.model.pipeline_model import ProtocolError


def _arch(step):
    return "sm_100a" if step.track == "blackwell" else step.info.archs[0]


@pytest.mark.parametrize("step", STEPS, ids=step_id)
def test_protocol_never_deadlocks_and_every_wait_observes_its_own_phase(step):
    protocol_replay.replay_many(step.module)


@pytest.mark.parametrize("name", sorted(n for n in experiments.EXPERIMENTS if not experiments.get(n).diagnostic))
def test_each_experiment_replays_like_a_step(name):
    """An experiment's edits may move barrier operations (the second P buffer releases V a turn
    later; the per-warpgroup epilogue splits its barrier): its source replays as a step's does, on
    fewer schedules. (Diagnostic experiments, wrong by design, are left out.)"""
    step = resolve(f"exp:{name}")       # its own module: an edit may add constants (CLUSTER_CTAS)
    protocol_replay.replay_many(step.module, source=step.path.read_text(), n_blocks=range(1, 5), seeds=range(4))


# exp:h14-cluster-multicast: a Hopper cluster (K and V multicast into both CTAs, releases on both
# CTAs' empty barriers through mapa), each broken the way a cluster kernel can be.
_CLUSTER_EXIT = "    cute.arch.cluster_arrive()\n    cute.arch.cluster_wait()\n"
_EMPTY_INIT = "cute.arch.mbarrier_init(empty + stage, CLUSTER_CTAS * NUM_CONSUMER_WARPS)"
_ONE_CTA_EMPTY_INIT = "cute.arch.mbarrier_init(empty + stage, NUM_CONSUMER_WARPS)"
_CLUSTER_TILES = "n_tiles = tiles_of(cluster, n_clusters, m_blocks // CLUSTER_CTAS * heads"
# case -> ([(old, new), ...], what the error says)
_CLUSTER_BROKEN = {
    "no cluster barrier before exit": ([(_CLUSTER_EXIT, "")], "nothing orders it before that CTA's exit"),
    "V multicast to its own CTA only": ([("tma_bar_ptr=v_full + stage, mcast_mask=cutlass.Int16(BOTH_CTAS)",
                                          "tma_bar_ptr=v_full + stage, mcast_mask=cutlass.Int16(1)")], "deadlock"),
    # (a phase completes on half the releases: a race, or a hang when the phases drift apart)
    "empty barriers count one CTA's consumers": ([(_EMPTY_INIT, _ONE_CTA_EMPTY_INIT)], "deadlock|race: "),
    "a CTA barrier where the cluster barrier belongs": (
        [("    cute.arch.cluster_arrive_relaxed()\n    cute.arch.cluster_wait()\n", "    cute.arch.sync_threads()\n")],
        "may not be initialised yet"),
    # each CTA's consumers release only their own CTA's stage (no mapa arrive; the count adjusted so
    # nothing hangs): the peer's multicast may overwrite a stage this CTA's consumers still read
    "consumers release only their own CTA's stage": (
        [("    for rank in range(CLUSTER_CTAS):\n        cute.arch.mbarrier_arrive(empty, rank)\n",
          "    cute.arch.mbarrier_arrive(empty)\n"), (_EMPTY_INIT, _ONE_CTA_EMPTY_INIT)],
        r"race: .* multicasts into cta [01]'s [kv]_full\[\d\]'s stage .* nothing orders the copy after"),
    # barrier.cluster.arrive.relaxed orders no memory access before it: not the remote arrives
    "a relaxed cluster arrive before exit": (
        [(_CLUSTER_EXIT, _CLUSTER_EXIT.replace("cluster_arrive()", "cluster_arrive_relaxed()"))],
        r"nothing orders it before that CTA's exit.*no cluster barrier with a release arrive \(not \.relaxed\)"),
}


@pytest.mark.parametrize("case", sorted(_CLUSTER_BROKEN))
def test_the_cluster_model_fails_on_a_broken_cluster(case):
    """The multicast copies land on both CTAs' barriers, remote arrives must be ordered before the
    target CTA's exit, and remote traffic before the cluster barrier after init is caught."""
    step = resolve("exp:h14-cluster-multicast")
    source = step.path.read_text()
    protocol_replay.replay_many(step.module, source=source, n_blocks=range(1, 4), seeds=range(3))
    edits, message = _CLUSTER_BROKEN[case]
    for old, new in edits:
        assert source.count(old) == 1, f"exp:h14-cluster-multicast no longer contains {old!r}: update this test"
        source = source.replace(old, new)
    with pytest.raises(ProtocolError, match=message):
        protocol_replay.replay_many(step.module, source=source, n_blocks=range(1, 4), seeds=range(3))


# case -> [(old, new), ...]: n_tiles or n_blocks computed per CTA of the cluster (in the kernel, a role)
_TILES_LINE = _CLUSTER_TILES + " * cute.size(tma_mQ.shape[3]))\n"
_MINE = "def cta_index():\n    return cute.arch.block_idx()[0]\n\n\ndef mine():\n    return cta_index()\n\n\n"
_PER_CTA_COUNTS = {
    "n_tiles": [(_CLUSTER_TILES, "n_tiles = tiles_of(cluster * CLUSTER_CTAS + cta_rank, n_clusters * CLUSTER_CTAS, "
                 "m_blocks * heads")],
    "n_blocks": [("n_blocks = cute.size(tma_mK.shape[0]) // TILE_N",
                  "n_blocks = cute.size(tma_mK.shape[0]) // TILE_N - cta_rank")],
    "n_tiles in the producer": [("    q_bytes = cute.size_in_bytes(dtype, sQ.layout)\n",
                                 "    n_tiles = tiles_of(cluster * CLUSTER_CTAS + cta_rank, n_clusters * CLUSTER_CTAS, "
                                 "m_blocks)\n    q_bytes = cute.size_in_bytes(dtype, sQ.layout)\n")],
    # the rank decides whether, or how often, n_tiles changes; a helper reads block_idx() through another
    "n_tiles under a rank test": [(_TILES_LINE, _TILES_LINE + "    if cta_rank == 1:\n        n_tiles -= 1\n")],
    "n_tiles in a rank-bounded loop": [(_TILES_LINE, _TILES_LINE + "    for r in range(cta_rank + 1):\n        n_tiles += 1\n")],
    "n_tiles from a rank-reading helper": [("def tiles_of(", _MINE + "def tiles_of("),
                                           (_CLUSTER_TILES, "n_tiles = tiles_of(mine(), n_clusters, m_blocks * heads")],
}


@pytest.mark.parametrize("case", sorted(_PER_CTA_COUNTS))
def test_a_cluster_whose_ctas_may_walk_different_tile_counts_is_refused(case):
    """The replay gives a cluster's CTAs one n_tiles and n_blocks: computing either per CTA is refused."""
    step = resolve("exp:h14-cluster-multicast")
    source = step.path.read_text()
    for old, new in _PER_CTA_COUNTS[case]:
        assert source.count(old) == 1, f"exp:h14-cluster-multicast no longer contains {old!r}: update this test"
        source = source.replace(old, new)
    with pytest.raises(protocol.ExtractionError, match=f"{case.split()[0]} depends on the CTA's rank"):
        protocol_source.extract(step.module, 2, source=source, n_tiles=2)


def test_the_model_sees_every_handoff_of_the_warp_specialized_steps():
    names = {sid: {b.name for b in protocol_source.extract(resolve(sid).module, 2).counts}
             for sid in ("b02", "b04", "b07", "b08", "h08")}
    assert names["b02"] == {"mma_done"}
    assert names["b04"] == {"q_full", "kv_full", "s_done", "o_done"}
    assert names["b07"] == names["b08"] == {"q_full", "kv_full", "kv_empty", "s_full", "p_full", "o_full"}
    assert names["h08"] == {"q_full", "kv_full", "kv_empty"}


@pytest.mark.parametrize("step", STEPS, ids=step_id)
def test_arrival_counts_are_the_ones_the_ptx_initialises(step):
    ptx = compile_step(step, _arch(step)).ptx.read_text()
    model = sorted(protocol_source.extract(step.module, 2).cta_counts().values())   # a cluster: one CTA's code
    assert protocol_replay.ptx_init_counts(ptx) == model


def test_ptx_init_counts_reads_registers_and_immediates():
    ptx = "mov.b32 \t%r85, 1;\nmov.u32 %r86, 128;\nmbarrier.init.shared.b64 \t[%r9], %r85;\n" \
          "mbarrier.init.shared::cta.b64 [%r1+16], %r86;\nmbarrier.init.shared.b64 [%r2], 8;\n" \
          "fence.mbarrier_init.release.cluster;"
    assert protocol_replay.ptx_init_counts(ptx) == [1, 8, 128]


def test_the_blackwell_load_warp_waits_out_every_commit_before_exit():
    """b07/b08's producer tail: the load warp's last waits observe the last kv_empty phase of every
    stage, for any tile count (including fewer tiles than stages)."""
    for sid, stages in (("b07", 1), ("b08", 2)):
        for n in range(1, 6):
            proto = protocol_source.extract(resolve(sid).module, n)
            load = proto.warps[resolve(sid).module.LOAD_WARP]
            waits = [op for op in load if op.kind == "wait" and op.bar.name == "kv_empty"]
            assert len(waits) == n + stages


def test_describe_names_each_barrier_its_waiters_and_arrivers():
    text = "\n".join(protocol_replay.describe(resolve("b08").module))
    assert "p_full[0..1] (arrival count 128)" in text
    assert "mma warp 8: wait" in text and "warps 0-7: arrive" in text
    assert "load warp 9: wait" in text and "tcgen05.commit arrives" in text


# ---- broken copies --------------------------------------------------------------------------------

def _broken(step_id_, *edits):
    module = resolve(step_id_).module
    source = inspect.getsource(module)
    for old, new in edits:
        assert old in source, f"{step_id_} no longer contains {old!r}: update this test"
        source = source.replace(old, new)
    return module, source


def _replay(module, source):
    protocol_replay.replay_many(module, source=source, n_blocks=range(1, 5), seeds=range(10))


B08_TAIL = """        cute.arch.mbarrier_wait(kv_empty + stage, parity ^ 1)


@cute.jit
def mma_warp("""
B07_TAIL = """    _, parity = ring_position(n_blocks)
    cute.arch.mbarrier_wait(kv_empty, parity ^ 1)
"""
_P_FULL = "mbarrier_init(p_full + g, TILE_M)"
_KV_EMPTY = "mbarrier_init(kv_empty + stage, NUM_CONSUMER_WARPS)"
_KV_FULL_WAIT = "cute.arch.mbarrier_wait(kv_full + stage, parity)"
# b13 (a cluster of two CTAs): the deadlock reports name the warp and the CTA of the barrier
_B13_KV_FULL_EXPECT = """        if cta_rank == leader:
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(kv_full + stage, kv_bytes)"""
_B14_LOAD_FIRST = """        first = tile_iter * n_blocks          # K/V tiles of the earlier work tiles: the ring runs on
        for n_block in range(n_blocks):
            # Tile j goes to stage s"""
_B13_MMA_STUCK_ON_P_FULL = r"(?s)deadlock.*mma warp 12 \(cta 0\): [^\n]*waits on cta 0's p_full"

# (id, step, edits, what the error says). Each is a bug a kernel could have; the first three are
# bugs these kernels had.
BROKEN = [
    # b07/b08 before the producer tail: the last kv_empty commit is never waited for
    ("b07-no-producer-tail", "b07", [(B07_TAIL, "")], "kv_empty.*asynchronous arrive .* no warp waits for"),
    ("b08-no-producer-tail", "b08", [(B08_TAIL, B08_TAIL.replace(
        "cute.arch.mbarrier_wait(kv_empty + stage, parity ^ 1)", "pass"))],
     "kv_empty.*asynchronous arrive .* no warp waits for"),
    # b04's S and O hand-offs on one barrier, each waited with parity j % 2
    ("b04-one-barrier-for-s-and-o", "b04", [("tcgen05.commit(o_done)", "tcgen05.commit(s_done)"),
                                            ("mbarrier_wait(o_done, n_block % 2)", "mbarrier_wait(s_done, n_block % 2)")],
     "deadlock|already observed"),
    # b02's mma_done completes twice per tile; waiting both times with parity 0 re-reads phase 1
    ("b02-two-phases-one-parity", "b02", [("mbarrier_wait(mma_done, 1)", "mbarrier_wait(mma_done, 0)")],
     "already observed"),
    *[(f"b08-p_full-count-{name}", "b08", [(_P_FULL, _P_FULL.replace("TILE_M", count))],
       "deadlock|half done|later than")
      for name, count in (("half", "TILE_M // 2"), ("double", "2 * TILE_M"), ("one-short", "TILE_M - 1"))],
    *[(f"h08-kv_empty-count-{name}", "h08", [(_KV_EMPTY, _KV_EMPTY.replace("NUM_CONSUMER_WARPS", count))],
       "half done|deadlock|later than")
      for name, count in (("one-short", "NUM_CONSUMER_WARPS - 1"), ("one-over", "NUM_CONSUMER_WARPS + 1"))],
    ("h08-producer-never-waits", "h08", [("cute.arch.mbarrier_wait(kv_empty + stage, parity ^ 1)", "pass")],
     "no warp ever waits"),
    # kv_full waited with the other parity passes on the fresh barrier before any data landed;
    # the last copy's bytes are then never waited for
    ("b08-consumer-one-phase-behind", "b08", [(_KV_FULL_WAIT, _KV_FULL_WAIT.replace("parity)", "parity ^ 1)"))],
     "kv_full"),
    # (a wait on the wrong phase of a 2-stage ring: a hang, or a copy's bytes nobody waits for, by schedule)
    ("h08-single-buffer-parity", "h08", [(_KV_FULL_WAIT, _KV_FULL_WAIT.replace("parity)", "n_block % 2)"))],
     "deadlock|no warp waits for"),
    # h09: both warpgroups hand over after the loop (one arrive left on a barrier at exit), or both
    # hand the first turn away (one arrive too many)
    ("h09-both-hand-over-at-the-end", "h09", [("    if wg == 0:\n        cute.arch.barrier_arrive(",
                                               "    if wg >= 0:\n        cute.arch.barrier_arrive(")],
     "no generation completed"),
    ("h09-both-pre-arrive", "h09", [("    if wg == 1:\n        cute.arch.barrier_arrive(",
                                     "    if wg >= 0:\n        cute.arch.barrier_arrive(")],
     "twice in one generation|deadlock|no generation completed"),
    # b13: the leader's commit that frees the last K/V stage lands in its own CTA only; the peer's
    # load warp waits for that stage forever (in its producer tail)
    ("b13-commit-without-the-peer-bit", "b13", [("tcgen05.commit(kv_empty + last_stage, PAIR_MASK,",
                                                 "tcgen05.commit(kv_empty + last_stage, 0b01,")],
     r"(?s)deadlock.*load warp 13 \(cta 1\): [^\n]*waits on cta 1's kv_empty"),
    # p_full counting one CTA's softmax threads: two completions per tile, the parity aliases
    ("b13-p_full-count-of-one-cta", "b13", [("mbarrier_init(p_full + g, P_FULL_ARRIVALS)",
                                             "mbarrier_init(p_full + g, TILE_M)")],
     _B13_MMA_STUCK_ON_P_FULL + r"|p_full.*(later than|half done)"),
    # nothing orders the other CTA's first remote arrive, copy or commit after this CTA's inits
    ("b13-no-cluster-barrier-after-init", "b13", [("    cute.arch.cluster_arrive_relaxed()\n", ""),
                                                  ("    cute.arch.cluster_wait()\n", "")],
     "may not be initialised yet.*before the cluster barrier"),
    # the peer's softmax arrives on its own p_full: the leader's gets half its arrivals
    ("b13-peer-arrives-on-its-own-p_full", "b13", [("mbarrier_arrive(p_full + q_tile, leader)",
                                                    "mbarrier_arrive(p_full + q_tile)")],
     _B13_MMA_STUCK_ON_P_FULL + r"[^\n]*128 of 256 arrivals"),
    # the TMEM handshake: each MMA warp arrives on its own tmem_free (then frees the pair's TMEM
    # while the other CTA may still use it), or on none (both wait forever)
    ("b13-tmem-handshake-on-its-own-cta", "b13", [("mbarrier_arrive(tmem_free, peer,",
                                                   "mbarrier_arrive(tmem_free, cta_rank,")],
     r"frees the pair's TMEM while nothing orders it after warps 0-15 \(cta [01]\)"),
    ("b13-no-tmem-handshake", "b13", [("        cute.arch.mbarrier_arrive(tmem_free, peer, scope=nvvm.MemScopeKind.CLUSTER)\n", "")],
     r"(?s)deadlock.*mma warp 12 \(cta 0\): [^\n]*cta 0's tmem_free.*mma warp 12 \(cta 1\): [^\n]*cta 1's tmem_free"),
    # the peer announces the K/V bytes on its own kv_full: the leader's, where they land, has none
    ("b13-peer-expects-instead-of-the-leader", "b13", [(_B13_KV_FULL_EXPECT, _B13_KV_FULL_EXPECT.replace(
        "cta_rank == leader", "cta_rank != leader"))],
     r"TMA copy on cta 0's kv_full\[0\] by load warp 13 \(cta 0\) with no expect-tx"),
    # b14 (persistent): the load warp restarts the ring at every work tile while the MMA warp's
    # positions run on: the second work tile's loads wait on phases that already passed
    ("b14-ring-restarts-per-work-tile", "b14", [(_B14_LOAD_FIRST, _B14_LOAD_FIRST.replace(
        "first = tile_iter * n_blocks", "first = 0"))],
     "deadlock|already observed|later than|first wait"),
    # the softmax's s_full parity counted per work tile, not per K/V tile of the whole walk
    ("b14-softmax-parity-per-work-tile", "b14", [("mbarrier_wait(s_full + q_tile, (first + n_block) % 2)",
                                                  "mbarrier_wait(s_full + q_tile, n_block % 2)")],
     "deadlock|already observed|later than"),
    # q_empty freed in the leader only: the peer's load warp never loads the next work tile's Q
    ("b14-q_empty-without-the-peer-bit", "b14", [("tcgen05.commit(q_empty, PAIR_MASK,", "tcgen05.commit(q_empty, 0b01,")],
     r"(?s)deadlock.*\(cta 1\)[^\n]*cta 1's q_empty"),
    # o_full waited with b13's parity (0) at every work tile: from the second on, the softmax
    # passes on the first tile's completion and drains O before the last P V has written it
    ("b14-o_full-parity-of-one-work-tile", "b14", [("mbarrier_wait(o_full, tile_iter % 2)",
                                                    "mbarrier_wait(o_full, 0)")],
     "already observed|deadlock"),
    # no producer tail for Q: the last work tile's q_empty commit may land after the CTA has exited
    ("b14-no-q_empty-drain", "b14", [("    cute.arch.mbarrier_wait(q_empty, (n_tiles % 2) ^ 1)\n", "")],
     "q_empty.*asynchronous arrive .* no warp waits for"),
    # named barriers: every use of an id must agree on its thread count (bar.sync and bar.arrive
    # of one generation count the same threads); one side's count wrong is a hang or a pass too soon
    ("h14-pingpong-arrive-counts-one-warpgroup", "h14", [(
        "            cute.arch.barrier_arrive(barrier_id=other_turn, number_of_threads=PINGPONG_THREADS)\n"
        "            # wait_group(1)",
        "            cute.arch.barrier_arrive(barrier_id=other_turn, number_of_threads=WARPGROUP_THREADS)\n"
        "            # wait_group(1)")], "used with 128 and 256 threads|used with 256 and 128 threads"),
    ("b14-stats-arrive-counts-one-warp", "b14", [(
        "            cute.arch.barrier_arrive(barrier_id=STATS_BARRIER + 4 * q_tile + warp_idx % 4,\n"
        "                                     number_of_threads=STATS_THREADS)",
        "            cute.arch.barrier_arrive(barrier_id=STATS_BARRIER + 4 * q_tile + warp_idx % 4,\n"
        "                                     number_of_threads=32)")], r"used with \d+ and \d+ threads"),
]


@pytest.mark.parametrize("sid,edits,match", [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_a_broken_copy_is_caught(sid, edits, match):
    with pytest.raises(ProtocolError, match=match):
        _replay(*_broken(sid, *edits))


def test_barrier_operations_the_walk_cannot_decide_are_refused():
    module, source = _broken("b08", ("    for n_block in range(n_blocks):\n        # Tile j goes",
                                     "    while n_blocks > 0:\n        # Tile j goes"))
    with pytest.raises(protocol.ExtractionError, match="while"):
        protocol_source.extract(module, 2, source=source)


def _fails_under_some_schedule(proto, match):
    with pytest.raises(ProtocolError, match=match):
        for seed in range(40):
            protocol_replay.replay(proto, seed)


def test_a_first_wait_that_passes_on_a_later_completion_is_caught():
    """A waiter that arrives late to a barrier already two phases on (hand-built protocol: one warp
    arrives three times, another waits once with parity 0)."""
    bar = protocol.Bar("b")
    arrive = protocol.Op("arrive", 1, "arrive", bar, 1)
    proto = protocol.Protocol("toy", [[arrive] * 3, [protocol.Op("wait", 2, "wait", bar, 0)]], {bar: 1})
    _fails_under_some_schedule(proto, "first wait .* passed on completion 3")


def test_an_arrive_on_another_ctas_barrier_is_refused():
    module, source = _broken("b08", ("cute.arch.mbarrier_arrive(p_full + q_tile)",
                                     "cute.arch.mbarrier_arrive(p_full + q_tile, 1)"))
    with pytest.raises(protocol.ExtractionError, match="another CTA's barrier is not modelled: the step has no cluster"):
        protocol_source.extract(module, 2, source=source)


def test_pingpong_turns_are_one_sync_and_one_arrive_per_generation():
    """h09: named barriers 1 and 2 each complete with one warpgroup's bar.sync and the other's
    bar.arrive, and none is left half-arrived at exit."""
    n = 3
    proto = protocol_source.extract(resolve("h09").module, n)
    ids = {op.value for ops in proto.warps for op in ops if op.kind in ("sync", "bar_arrive")}
    assert ids == {0, 1, 2}
    for barrier, syncing, arriving in ((1, range(4, 8), range(8, 12)), (2, range(8, 12), range(4, 8))):
        for w, ops in enumerate(proto.warps):
            syncs = sum(op.kind == "sync" and op.value == barrier for op in ops)
            arrives = sum(op.kind == "bar_arrive" and op.value == barrier for op in ops)
            assert (syncs, arrives) == ((n + 1, 0) if w in syncing else (0, n + 1) if w in arriving else (0, 0))


def test_a_warp_arriving_twice_in_one_generation_is_caught():
    """Hand-built: warp 0 arrives on named barrier 1 (64 threads) twice before warp 1 syncs."""
    arv = protocol.Op("bar_arrive", 1, "bar.arrive 1, 64", value=1, threads=64)
    sync = protocol.Op("sync", 2, "bar.sync 1, 64", value=1, threads=64)
    proto = protocol.Protocol("toy", [[arv, arv], [sync, sync]], {})
    _fails_under_some_schedule(proto, "twice in one generation")


def _softmax_cross_waits(step, n_blocks=3, source=None):
    """A group is its warps in every CTA (b13: both CTAs' softmax g feed the leader's p_full[g]); the
    issuer is the MMA warp of CTA 0 (the leader's, in a cluster)."""
    roles = step.info.extra["warp_roles"]
    proto = protocol_source.extract(step.module, n_blocks, source=source)
    groups = {name: protocol.cluster_warps(proto, warps) for name, warps in roles.items() if name.startswith("softmax")}
    return protocol_replay.cross_waits(proto, groups, roles["mma"][0])


WARP_ROLE_STEPS = [s for s in STEPS if s.track == "blackwell" and "mma" in s.info.extra.get("warp_roles", {})]


@pytest.mark.parametrize("step", WARP_ROLE_STEPS, ids=step_id)
def test_from_b09_on_no_softmax_warpgroup_waits_for_the_other(step):
    """b07/b08: S_0(j+1) is issued after the MMA warp waited for softmax 1's P(j), so softmax 0's next
    tile waits for softmax 1. From b09 on (P_0 V(j-1), S_0(j), P_1 V(j-1), S_1(j)) each softmax
    warpgroup's next S follows only its own P."""
    found = _softmax_cross_waits(step)
    if step.id >= "b09":
        assert found == []
    else:
        assert found and all(f.startswith("softmax0 waits for softmax1") for f in found)


def test_waiting_for_the_other_warpgroups_p_first_brings_the_coupling_back():
    """A copy of b09 whose MMA warp, before P_g V(j-1), waits for the *other* warpgroup's P: S_0(j)
    then follows softmax 1's output, and the check reports it."""
    step = resolve("b09")
    source = inspect.getsource(step.module)
    pv_wait = "cute.arch.mbarrier_wait(p_full + g, (n_block - 1) % 2)"
    assert source.count(pv_wait) == 1
    broken = source.replace(pv_wait, "cute.arch.mbarrier_wait(p_full + (NUM_Q_TILES - 1 - g), (n_block - 1) % 2)")
    assert any(f.startswith("softmax0 waits for softmax1") for f in _softmax_cross_waits(step, source=broken))


def test_b12_pairs_each_softmax_warp_with_the_correction_warp_of_its_lanes():
    """Named barrier 1 + 4g + i: softmax warp 4g + i arrives (bar.arrive) once per tile, correction
    warp 8 + i waits (bar.sync) once per tile; nobody else touches it."""
    n = 3
    proto = protocol_source.extract(resolve("b12").module, n)
    assert len(proto.warps) == resolve("b12").info.threads // 32
    for g in range(2):
        for i in range(4):
            barrier = 1 + 4 * g + i
            for w, ops in enumerate(proto.warps):
                syncs = sum(op.kind == "sync" and op.value == barrier for op in ops)
                arrives = sum(op.kind == "bar_arrive" and op.value == barrier for op in ops)
                expected = (0, n) if w == 4 * g + i else (n, 0) if w == 8 + i else (0, 0)
                assert (syncs, arrives) == expected, (barrier, w)


def test_b12_without_the_mma_waiting_for_o_ready_a_softmax_warp_can_overtake_its_correction():
    """The chain that keeps a softmax warp from arriving twice before its correction warp waits
    runs through the MMA warp's wait on o_ready: without it the replay finds the double arrive
    (or o_ready completing with nobody waiting)."""
    module, source = _broken("b12", ("            cute.arch.mbarrier_wait(o_ready + g, (n_block - 1) % 2)\n", ""),
                             ("        cute.arch.mbarrier_wait(o_ready + g, (n_blocks - 1) % 2)\n", ""))
    with pytest.raises(ProtocolError):
        _replay(module, source)


def test_an_element_store_the_walk_cannot_evaluate_keeps_its_index_names():
    """`s_scale[q_tile * TILE_M + row] = rescale` (a value the walk cannot know) must not make
    q_tile unknown to the barrier ids after it (b12's softmax)."""
    walk = protocol_source._Walk(resolve("b12").module, [], warp=5, n_blocks=1, threads=512)
    walk.block(ast.parse("q_tile = warp_idx // 4\ns[q_tile * 128 + row] = unknown\nt, u = unknown").body)
    assert walk.env["q_tile"] == 1 and "t" not in walk.env


def test_a_cluster_lands_the_pairs_copies_on_the_leaders_barrier_and_multicast_commits_in_both_ctas():
    """b13: both load warps' cta_group::2 copies complete on CTA 0's q_full / kv_full, whose expect-tx
    (the leader's only) counts the pair's copies; the leader's commits land in both CTAs; both CTAs'
    softmax threads arrive on the leader's p_full. A 1-CTA step's barriers name no CTA."""
    module = resolve("b13").module
    proto = protocol_source.extract(module, 2)
    per = proto.warps_per_cta
    assert (proto.ctas, per) == (2, module.NUM_WARPS)
    leader, peer = proto.warps[module.LOAD_WARP], proto.warps[per + module.LOAD_WARP]
    for cta, load in enumerate((leader, peer)):
        assert {op.bar.cta for op in load if op.kind == "copy"} == {0}
        assert {op.bar.cta for op in load if op.kind == "wait"} == {cta}     # its own kv_empty
    assert not any(op.kind == "expect" for op in peer)
    q_expect = next(op for op in leader if op.kind == "expect" and op.bar.name == "q_full")
    assert q_expect.copies == 2 * module.NUM_Q_TILES
    commits = [op for op in proto.warps[module.MMA_WARP] if op.kind == "commit"]
    assert commits and all(op.ctas == (0, 1) for op in commits)
    assert not any(op.kind == "commit" for op in proto.warps[per + module.MMA_WARP])
    assert {op.bar for op in proto.warps[per] if op.kind == "arrive"} == {protocol.Bar("p_full", 0, 0)}
    text = "\n".join(protocol_replay.describe(module))
    assert "load warp 13 (cta 0 and 1): TMA copy lands in cta 0" in text
    assert "mma warp 12 (cta 0): tcgen05.commit arrives in cta 0 and 1" in text
    assert "warps 0-7 (cta 0 and 1): arrive in cta 0  `cute.arch.mbarrier_arrive(p_full + q_tile, leader)`" in text
    assert "mma warp 12 (cta 1): arrive in cta 0  `cute.arch.mbarrier_arrive(tmem_free, peer, scope=nvvm.MemScopeKind.CLUSTER)`" in text
    one = protocol_source.extract(resolve("b12").module, 2)
    assert one.ctas == 1 and {b.cta for b in one.counts} == {None} and not any(
        op.kind == "init" for ops in one.warps for op in ops)


def test_only_the_cluster_barrier_orders_a_remote_arrive_after_the_other_ctas_init():
    """Hand-built pair: CTA 0's warp inits a barrier and waits on it, CTA 1's warp arrives on it
    remotely. With both at the cluster barrier in between every schedule passes; without it every
    schedule is refused, whether the arrive comes before the init or after it in time."""
    bar = protocol.Bar("b", 0, 0)
    init = protocol.Op("init", 1, "init", bar, 1)
    arrive = protocol.Op("arrive", 2, "arrive(b, 0)", bar, 1)
    wait = protocol.Op("wait", 3, "wait", bar, 0)
    ca, cw = protocol.Op("cluster_arrive", 4, "arrive"), protocol.Op("cluster_wait", 5, "wait")
    ordered = protocol.Protocol("toy", [[init, ca, cw, wait], [ca, cw, arrive]], {bar: 1}, ctas=2)
    for seed in range(40):
        protocol_replay.replay(ordered, seed)
    racy = protocol.Protocol("toy", [[init, wait], [arrive]], {bar: 1}, ctas=2)
    for seed in range(40):
        with pytest.raises(ProtocolError, match="warp 0 \\(cta 1\\) .* may not be initialised yet"):
            protocol_replay.replay(racy, seed)


def test_a_cluster_barrier_exempts_only_the_remote_arrive_it_orders():
    """Hand-built pair: completion 2 of CTA 0's barrier is CTA 1's remote arrive (ordered by the exit
    cluster barrier) and CTA 0's tcgen05.commit, which nothing orders: no warp waits for the
    completion, so the commit may land after CTA 0 exits. The exemption is the remote arrive's, not
    the phase's."""
    bar = protocol.Bar("b", 0, 0)
    op = protocol.Op
    ca, cw = op("cluster_arrive", 4, "cluster_arrive()"), op("cluster_wait", 5, "cluster_wait()")
    cta0 = [op("init", 1, "init", bar, 2), op("arrive", 2, "arrive(b)", bar, 2), op("wait", 3, "wait(b, 0)", bar, 0),
            ca, cw, op("commit", 6, "commit(b)", bar, 1), ca, cw]
    cta1 = [ca, cw, op("arrive", 7, "arrive(b, 0)", bar, 1), ca, cw]
    proto = protocol.Protocol("toy", [cta0, cta1], {bar: 2}, ctas=2)
    _fails_under_some_schedule(proto, "completion 2 of cta 0's b\\[0\\] is made by an asynchronous arrive")
    without_commit = protocol.Protocol("toy", [cta0[:5] + cta0[6:], [*cta1[:3], cta1[2], *cta1[3:]]], {bar: 2},
                                       ctas=2)
    for seed in range(20):                       # two ordered remote arrives: exit-safe
        protocol_replay.replay(without_commit, seed)


def test_b14_replays_clusters_with_no_work_tile_and_odd_kv_counts():
    """A persistent cluster may get no work tile at all (fewer work tiles than clusters) and every
    K/V count; no valid shape gives an odd one (seqlen is a multiple of 512: n_blocks of 4, 8, ...,
    so the ring and the per-K/V-tile parities repeat from one work tile to the next and a GPU run
    cannot tell a per-tile reset from a running count), so the replay takes odd ones."""
    module = resolve("b14").module
    for n_tiles in (0, 1, 2, 3):
        for n_blocks in (1, 3, 5):
            proto = protocol_source.extract(module, n_blocks, n_tiles=n_tiles)
            for seed in range(6):
                protocol_replay.replay(proto, seed)
    proto = protocol_source.extract(module, 3, n_tiles=3)
    load = proto.warps[module.LOAD_WARP]                       # CTA 0's load warp
    assert [op.value for op in load if op.kind == "wait" and op.bar.name == "q_empty"] == [1, 0, 1, 0]
