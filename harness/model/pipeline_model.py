"""A host-side model of a step's producer/consumer mbarrier protocol, replayed under random schedules.

A kernel whose barrier bookkeeping is wrong either hangs (a wait whose phase never completes) or
reads a buffer the producer is already overwriting. On a GPU the first shows up as a timeout and
the second, at best, as a numerics failure; on a CPU neither shows up at all. This model makes
both visible without a GPU, for the protocol the warp-specialized steps use:

- a ring of ``stages`` K/V buffers, each with a *full* mbarrier (arrival count 1: the producer's
  expect-tx arrive; the TMA's bytes count its transaction down) and an *empty* one (arrival count
  ``consumers``: one arrive per consumer warp when it is done reading the stage);
- the step's own ``ring_position(j) -> (stage, parity)``: the consumers wait on full[stage] with
  ``parity``, the producer on empty[stage] with ``parity ^ 1``.

mbarrier semantics modelled (PTX ISA, mbarrier): a barrier starts in phase 0 with ``count``
pending arrivals; a phase completes when the pending arrivals and the transaction count both reach
zero, and the barrier moves to the next phase with ``count`` pending arrivals again;
``try_wait.parity(p)`` succeeds once the phase with parity p has completed, i.e. when the current
phase's parity is not p. Every actor (the producer, each consumer warp, each copy in flight) takes
one step at a time in a random order; the model reports a deadlock (nobody can move and someone
is not done), a read of the wrong tile, or a copy into a stage that a consumer is still reading.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable


class ProtocolError(AssertionError):
    pass


@dataclass
class MBarrier:
    count: int
    phase: int = 0
    pending: int = field(init=False)
    tx: int = 0
    # phases (1-based completion numbers) to which an asynchronous agent contributed: a
    # tcgen05.commit's arrive or a copy's bytes, which no thread's exit orders
    async_completions: set = field(default_factory=set)
    _async_now: bool = field(default=False, repr=False)

    def __post_init__(self):
        self.pending = self.count

    def _maybe_complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count
            if self._async_now:
                self.async_completions.add(self.phase)
            self._async_now = False

    def arrive(self, expect_tx: int = 0, asynchronous: bool = False):
        if self.pending == 0:
            raise ProtocolError("arrive on a barrier with no pending arrivals")
        self.tx += expect_tx
        self.pending -= 1
        self._async_now |= asynchronous
        self._maybe_complete()

    def arrive_many(self, n: int, expect_tx: int = 0, asynchronous: bool = False):
        """``n`` calls of ``arrive`` (a warp's 32 threads), in chunks that end where a phase completes."""
        while n:
            if self.pending == 0:
                raise ProtocolError("arrive on a barrier with no pending arrivals")
            k = min(n, self.pending)
            self.tx += expect_tx * k
            self.pending -= k
            self._async_now |= asynchronous
            self._maybe_complete()
            n -= k

    def complete_tx(self, nbytes: int):
        self.tx -= nbytes
        if self.tx < 0:
            raise ProtocolError("a copy delivered more bytes than were announced")
        self._async_now = True
        self._maybe_complete()

    def try_wait(self, parity: int) -> bool:
        return self.phase % 2 != parity


def replay(ring_position: Callable[[int], tuple[int, int]], stages: int, n_blocks: int, *,
           consumers: int = 8, tile_bytes: int = 65536, announced_bytes: int | None = None,
           producer_flip: int = 1, seed: int = 0, max_steps: int = 1_000_000) -> int:
    """Run the protocol for ``n_blocks`` tiles under one random schedule; return the steps taken.

    ``announced_bytes`` is what the producer's expect-tx announces (default: ``tile_bytes``, what
    one stage's copies deliver); the producer waits on empty[stage] with ``parity ^ producer_flip``
    (the kernels' rule is 1; the knobs exist so tests can show the model catching the bugs)."""
    announced = tile_bytes if announced_bytes is None else announced_bytes
    rng = random.Random(seed)
    full = [MBarrier(1) for _ in range(stages)]
    empty = [MBarrier(consumers) for _ in range(stages)]
    holds = [None] * stages                  # which tile each stage holds once its copy landed
    readers = [set() for _ in range(stages)]  # consumers between their full-wait and empty-arrive
    in_flight = []                           # [stage, tile] copies issued, not yet landed
    producer = {"j": 0}
    consumer = [{"j": 0, "reading": False} for _ in range(consumers)]

    def position(j):
        stage, parity = ring_position(j)
        stage, parity = int(stage), int(parity)
        if not (0 <= stage < stages and parity in (0, 1)):
            raise ProtocolError(f"ring_position({j}) = {(stage, parity)} is out of range")
        return stage, parity

    def producer_step():
        j = producer["j"]
        stage, parity = position(j)
        if not empty[stage].try_wait(parity ^ producer_flip):
            return False
        if readers[stage]:
            raise ProtocolError(f"tile {j}: copy into stage {stage} while consumers {sorted(readers[stage])} read it")
        full[stage].arrive(expect_tx=announced)
        in_flight.append([stage, j])
        producer["j"] += 1
        return True

    def land(i):
        stage, j = in_flight.pop(i)
        if readers[stage]:
            raise ProtocolError(f"tile {j} landed in stage {stage} while consumers {sorted(readers[stage])} read it")
        holds[stage] = j
        full[stage].complete_tx(tile_bytes)

    def consumer_step(c):
        state = consumer[c]
        j = state["j"]
        stage, parity = position(j)
        if not state["reading"]:
            if not full[stage].try_wait(parity):
                return False
            if holds[stage] != j:
                raise ProtocolError(f"consumer {c} read tile {j} from stage {stage}, which holds {holds[stage]}")
            state["reading"] = True
            readers[stage].add(c)
        else:
            readers[stage].discard(c)
            state["reading"] = False
            empty[stage].arrive()
            state["j"] += 1
        return True

    for steps in range(max_steps):
        actors = []
        if producer["j"] < n_blocks:
            actors.append(producer_step)
        actors += [lambda i=i: (land(i), True)[1] for i in range(len(in_flight))]
        actors += [lambda c=c: consumer_step(c) for c in range(consumers) if consumer[c]["j"] < n_blocks]
        if not actors:
            return steps
        rng.shuffle(actors)
        if not any(actor() for actor in actors):
            waiting = {"producer tile": producer["j"], "consumer tiles": [s["j"] for s in consumer],
                       "full phases": [b.phase for b in full], "empty phases": [b.phase for b in empty]}
            raise ProtocolError(f"deadlock: nobody can move ({waiting})")
    raise ProtocolError("no end within max_steps")


def replay_many(ring_position, stages: int, *, n_blocks=range(1, 8), seeds=range(40), **kw) -> None:
    """Every tile count in ``n_blocks`` under every schedule seed."""
    for n in n_blocks:
        for seed in seeds:
            replay(ring_position, stages, n, seed=seed, **kw)
