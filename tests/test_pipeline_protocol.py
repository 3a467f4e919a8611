"""The warp-specialized steps' mbarrier bookkeeping, replayed on the CPU against a model of the
mbarriers (harness/model/pipeline_model.py) under many random schedules: no deadlock, no read of the
wrong tile, no copy into a stage that is still being read. The kernels call the same
``ring_position`` the model replays."""

import pytest

from harness.core.steps import discover
from harness.model.pipeline_model import ProtocolError, replay, replay_many

PIPELINED = [s for s in discover() if hasattr(s.module, "ring_position")]


def _protocol(step):
    """The step's own ring bookkeeping and the arrivals that free a stage: one per consumer warp
    on Hopper, the MMA warp's single tcgen05.commit on Blackwell. A stage's bytes are a K and a V
    tile (b13-b14: both CTAs' halves, which land on the leader's barrier)."""
    m = step.module
    stages, tile_bytes = getattr(m, "NUM_STAGES", 1), 2 * 2 * m.TILE_N * m.HEAD_DIM
    consumers = getattr(m, "NUM_CONSUMER_WARPS", None) or m.KV_EMPTY_ARRIVALS
    return m.ring_position, stages, dict(consumers=consumers, tile_bytes=tile_bytes)


def test_the_warp_specialized_steps_are_covered():
    assert {"h07", "h08", "b07", "b08"} <= {s.id for s in PIPELINED}


@pytest.mark.parametrize("step", PIPELINED, ids=lambda s: s.id)
def test_protocol_never_deadlocks_or_races(step):
    position, stages, kw = _protocol(step)
    replay_many(position, stages, **kw)


# The model must be able to fail: each of these is a bug a kernel could have.

def test_a_producer_waiting_on_the_wrong_parity_deadlocks():
    """Waiting for empty's *current* round instead of the previous one: a release that never comes."""
    with pytest.raises(ProtocolError, match="deadlock"):
        replay(lambda j: (0, j % 2), 1, 3, consumers=2, producer_flip=0)


def test_consumers_waiting_on_the_wrong_parity_read_before_the_data_landed():
    """A fresh barrier's "previous phase" counts as complete: parity 1 passes at once."""
    with pytest.raises(ProtocolError, match="holds None"):
        replay(lambda j: (0, (j + 1) % 2), 1, 3, consumers=2)


def test_single_buffer_parity_on_a_two_stage_ring_is_caught():
    """h07's parity (j % 2) with h08's two stages: a consumer passes a phase meant for another round."""
    with pytest.raises(ProtocolError):
        replay_many(lambda j: (j % 2, j % 2), 2, n_blocks=range(3, 6), seeds=range(20), consumers=2)


def test_announcing_more_bytes_than_a_stage_delivers_deadlocks():
    """h08's first version: expect-tx of both stages' bytes for one stage's copy."""
    with pytest.raises(ProtocolError, match="deadlock"):
        replay(lambda j: (j % 2, (j // 2) % 2), 2, 2, consumers=2, tile_bytes=100, announced_bytes=200)


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_the_ring_bookkeeping_holds_for_any_depth(stages):
    replay_many(lambda j: (j % stages, (j // stages) % 2), stages, n_blocks=range(1, 3 * stages + 2),
                seeds=range(10), consumers=3)
