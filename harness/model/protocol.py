"""Every step's barrier protocol, read from its kernel's source and replayed under random schedules:
the operations and the protocol they make up. harness/model/protocol_source.py reads them from a
kernel (``extract``); harness/model/protocol_replay.py replays them (``replay``, ``replay_many``),
describes them for a hang report (``describe``) and reads their counterpart in the PTX.

The kernel function is walked as Python syntax, warp by warp: ``warp_idx``, ``cta_rank`` and
``n_blocks`` are given, the step module's own constants and functions (``ring_position``,
``NUM_STAGES``, ...) are used as they are, and every branch and loop that contains a barrier
operation is decided. What comes out is, per warp, the list of its barrier operations in program
order:

=====================================  ==========================================================
``mbarrier_init(bar, n)``              the barrier and its arrival count
``mbarrier_wait(bar, parity)``         a wait (per warp)
``mbarrier_arrive(bar)``               one arrival per thread: 32 per warp, 1 inside ``elect_one``
``mbarrier_arrive_and_expect_tx``      an arrival that announces the bytes of the copies the same
                                       warp then issues on that barrier (counted in copies)
``cute.copy(..., tma_bar_ptr=bar)``    a TMA copy; it lands later and counts its bytes down
``tcgen05.commit(bar)``                an arrival made later by the tensor core, after the MMAs
                                       the thread issued before it (in any order with the same
                                       thread's other commits: the PTX ISA promises no order)
``sync_threads`` / ``barrier``         a CTA or named barrier (``bar.sync``)
``barrier_arrive``                     a named-barrier arrival that does not wait (``bar.arrive``)
``cluster_arrive`` / ``cluster_wait``  the cluster barrier (a cluster step only, below)
``dealloc_tmem(is_two_cta=True)``      the pair's TMEM freed (a cluster step only, below)
``_timeline_probe(buf, tile, p, edge)`` in an instrumented copy only (harness/timeline/probes.py): a
                                       phase begins or ends (``mark``; the replay ignores it, the
                                       timeline simulation times it)
=====================================  ==========================================================

The replay runs the warps and the asynchronous agents (copies in flight, commits not yet landed)
one step at a time in a random order, on the mbarrier model of harness/model/pipeline_model.py, and
fails on:

- a deadlock: nobody can move and a warp is not done (the report names each waiting warp, its
  line and the barrier's phase);
- a wait that passes on the wrong phase: each warp's successive waits on one barrier must observe
  successive completions of it; passing on a completion it already observed (two hand-offs
  sharing a barrier), or two completions further on (an arrival count too small), is an error;
- a completion made by an asynchronous agent that no warp waits for: a commit's arrive or a
  copy's bytes is not ordered by any thread's exit, so it could land after the CTA has exited in
  shared memory that belongs to the next CTA (a load warp without a producer tail). Completions
  made only of threads' own arrivals need no waiter: the arriving thread is still in the CTA;
- a barrier that is arrived on but never waited for, or used without being initialised.

A warp's first wait on a barrier must observe the barrier's first completion (parity 0) or, for a
producer's wait on a fresh "empty" barrier, the phase before it (parity 1).

Clusters. A step with ``CLUSTER_CTAS = 2`` (b13) is replayed as one system of both CTAs, warp w of
CTA c being the protocol's warp ``c * warps_per_cta + w``, interleaved at random like any warps.
A barrier is then (field, index, CTA), and every CTA runs the same kernel with its own
``cta_rank``:

- waits, inits, arrivals with one argument, expect-tx and the named barriers (keyed by CTA and
  id) act on the warp's own CTA; ``mbarrier_arrive(bar, target)`` arrives on CTA ``target``'s;
- ``tcgen05.commit(bar, mask, ...)`` lands one asynchronous arrival on the barrier in every CTA
  whose bit is set in ``mask`` (each landing at its own time); without a mask, on its own CTA;
- TMA copies are cta_group::2 loads: their bytes complete on the pair leader's barrier (CTA
  ``c & ~1``), whichever CTA issues them. Only the leader issues the expect-tx, and it is taken
  to announce its own following copies on that barrier twice (the pair's bytes: the peer's
  matching copies); the bytes themselves are compared with the PTX elsewhere
  (tests/test_blackwell_steps.py). A copy needs an expect-tx on its barrier before the leader's
  copy of the same rank in the leader's warp. The peer's bytes may land before the leader's
  expect-tx (the tx-count goes below zero, as the PTX ISA allows). Bytes are counted, not tiles:
  that a peer's copy lands in the phase it is meant for is not checked;
- a multicast copy (``mcast_mask``, the Hopper cluster experiment) writes its stage in every CTA of
  its mask: for each, every warp there that reads the phase it overwrites (waits on that CTA's full
  barrier) must have released it (arrived on the stage's empty barrier, the one the issuing warp
  last waited on) before the copy is issued, as far as the issuing warp knows; otherwise a race
  (``MulticastStages``: a CTA's consumers releasing only their own CTA's stage);
- ``cluster_arrive[_relaxed]`` / ``cluster_wait``: the cluster barrier, which a warp passes once
  every warp of every CTA has arrived for that generation. The relaxed arrive
  (barrier.cluster.arrive.relaxed) orders no memory access before it: it publishes only the inits
  (the kernel's ``fence.mbarrier_init`` before it does) and orders no remote arrive before exit;
- a remote arrive is, for the CTA it lands in, like an asynchronous agent: its completion needs a
  waiter there (the arriving thread is not in that CTA, which could exit first), or a cluster
  barrier after it (a release arrive) that every warp of that CTA waits on; that exempts the
  remote arrive only, not a commit's or copy's arrival in the same phase;
- the work-tile count ``n_tiles`` of a persistent cluster step, and the K/V tile count ``n_blocks``,
  are given, the same for every CTA of the cluster: no assignment of either in the source (kernel
  or role function) may depend on the CTA's rank (checked on the source);
- inits stay in the warp's program, and the replay follows what each warp knows to have happened
  (through mbarrier phases, commits, copies, named and cluster barriers): using a barrier (a wait,
  an arrive, an expect-tx, issuing a copy or a commit on it) that nothing orders after its
  ``mbarrier_init`` is an error, whatever the schedule (the cluster barrier after the init is
  what orders the other CTA's uses);
- ``dealloc_tmem(..., is_two_cta=True)`` frees the pair's TMEM: it must be ordered after every
  warp of both CTAs has reached its last ``sync_threads`` (done with TMEM), which in b13 is the
  MMA warps' handshake on each other's ``tmem_free``.

In a 1-CTA step (no ``CLUSTER_CTAS``, or 1) inits are hoisted before everything (each step follows
them with ``sync_threads``), and an arrive with a target CTA or a commit with a mask is refused.
Clusters of more than a pair are not modelled.

What it does not check: what a barrier protects. That a commit comes after the MMAs that read a
stage, or that an MMA's TMEM operands are not overwritten while it runs, is the business of the
K/V ring replay (harness/model/pipeline_model.py: which tile a stage holds, who reads it) and of the
MMA-pipe model (harness/model/mma_pipe.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.model.pipeline_model import ProtocolError

PROBE = "_timeline_probe"   # a timeline marker in an instrumented copy (harness/timeline/probes.py): an op "mark"

WARP = 32
RELAXED = 1         # a cluster_arrive's value: barrier.cluster.arrive.relaxed (0: the release arrive)


class ExtractionError(ValueError):
    """The kernel does something with barriers that the walk cannot decide."""


@dataclass(frozen=True)
class Bar:
    """One mbarrier: a shared-storage field and an index into it (``kv_full + stage``), and in a
    cluster the CTA whose shared memory holds it (None in a 1-CTA step)."""
    name: str
    index: int = 0
    cta: int | None = None

    def __post_init__(self):
        # The replay looks a barrier up millions of times: its hash is computed once.
        object.__setattr__(self, "_hash", hash((self.name, self.index, self.cta)))

    def __hash__(self):
        return self._hash

    def __add__(self, k):
        if not isinstance(k, int):
            return NotImplemented
        return Bar(self.name, self.index + k, self.cta)

    __radd__ = __add__

    def __str__(self):
        bar = f"{self.name}[{self.index}]"
        return bar if self.cta is None else f"cta {self.cta}'s {bar}"


@dataclass(frozen=True)
class Op:
    kind: str          # init, wait, arrive, expect, copy, commit, sync, bar_arrive, mark,
                       # cluster_arrive, cluster_wait, dealloc
    line: int          # line in the step file
    text: str          # the call as written
    bar: Bar | None = None
    value: int = 0     # init: count; wait: parity; arrive/expect/commit: arrivals; sync: barrier id;
                       # cluster_arrive: RELAXED or 0
    threads: int = 0   # sync / bar_arrive: the barrier's thread count
    copies: int = 0    # expect: copies announced
    tile: int = 0      # mark: the K/V tile of a timeline phase (harness/timeline/probes.py); value: its phase
    edge: int = 0      # mark: 0 begin, 1 end
    ctas: tuple = ()   # commit with a mask: the CTAs it lands in (bar: in the first of them);
                       # multicast copy: the CTAs its bytes land in (bar: in the issuing CTA)


def lands_on(op: Op) -> tuple:
    """The barriers an operation arrives on: a multicast commit's or copy's in each CTA of its mask."""
    return tuple(Bar(op.bar.name, op.bar.index, c) for c in op.ctas) or (op.bar,)


@dataclass
class Protocol:
    step: str
    warps: list          # warps[w] = [Op, ...]; in a cluster, warp w of CTA c is c * warps_per_cta + w
    counts: dict         # Bar -> arrival count
    roles: dict = field(default_factory=dict)   # warp (of one CTA) -> role name
    ctas: int = 1

    @property
    def warps_per_cta(self) -> int:
        return len(self.warps) // self.ctas

    def cta_of(self, w: int) -> int:
        return w // self.warps_per_cta

    def role(self, w: int) -> str:
        local = w % self.warps_per_cta
        name = self.roles.get(local, f"warp {local}")
        return name if self.ctas == 1 else f"{name} (cta {self.cta_of(w)})"

    def cta_counts(self) -> dict:
        """Each barrier's arrival count in one CTA's code (all CTAs run the same code: the counts the
        PTX initialises)."""
        return {Bar(b.name, b.index): n for b, n in self.counts.items()}


def cluster_warps(proto: Protocol, warps) -> list[int]:
    """The protocol's warps that are the given warps of one CTA (``warp_roles``), in every CTA."""
    return [c * proto.warps_per_cta + w for c in range(proto.ctas) for w in warps]


class MulticastStages:
    """The stages multicast copies write (a cluster replay's helper). A multicast copy writes its stage
    in every CTA of its mask, so for each target CTA c, every reader there of the phase it overwrites
    (a warp of c that waits on c's full barrier) must have released it (arrived on the stage's empty
    barrier, in any CTA) before the copy is issued, as far as the issuing warp knows: through the
    empty barrier it waited on, to which the release must be carried (a remote arrive, through mapa).
    The stage's empty barrier is the issuing warp's last wait before the copy; the phase a copy
    fills is the issuer's count of expect-tx on its own full barrier. Each release is a knowledge bit
    of the replay's (``know``), from ``first_bit`` on."""

    def __init__(self, proto: Protocol, first_bit: int):
        self.proto, self.next_bit = proto, first_bit
        self.empty_of: dict = {}      # a multicast full barrier's (name, index) -> its empty barrier's
        for w, ops in enumerate(proto.warps):
            last = None
            for op in ops:
                if op.kind == "wait":
                    last = (op.bar.name, op.bar.index)
                elif op.kind == "copy" and op.ctas and (
                        last is None or self.empty_of.setdefault((op.bar.name, op.bar.index), last) != last):
                    raise ProtocolError(f"{proto.step}: {proto.role(w)} line {op.line} `{op.text}`: a multicast copy "
                                        "whose stage no single barrier frees (the issuing warp's last wait before it)")
        self.readers: dict = {}       # a full barrier (of its CTA) -> {warp of that CTA: its waits on it}
        for w, ops in enumerate(proto.warps):
            for op in ops:
                if op.kind == "wait" and (op.bar.name, op.bar.index) in self.empty_of:
                    self.readers.setdefault(op.bar, {}).setdefault(w, 0)
                    self.readers[op.bar][w] += 1
        self.unreleased: dict = {}    # warp -> [(full barrier, completion it read)]
        self.bits: dict = {}          # (warp, full barrier, completion) -> its release's knowledge bit
        self.announced: dict = {}     # (warp, its own full barrier) -> its expect-tx there so far

    def read(self, w: int, bar: Bar, completion: int):
        if (bar.name, bar.index) in self.empty_of:
            self.unreleased.setdefault(w, []).append((bar, completion))

    def release(self, w: int, bar: Bar) -> int:
        """The knowledge bits of the reads warp w releases by arriving (or committing) on ``bar``."""
        new, keep = 0, []
        for full, c in self.unreleased.get(w, ()):
            if self.empty_of[(full.name, full.index)] == (bar.name, bar.index):
                self.bits[(w, full, c)] = 1 << self.next_bit
                new |= 1 << self.next_bit
                self.next_bit += 1
            else:
                keep.append((full, c))
        self.unreleased[w] = keep
        return new

    def announce(self, w: int, bar: Bar):
        self.announced[(w, bar)] = self.announced.get((w, bar), 0) + 1

    def check_issue(self, w: int, op: Op, know: int):
        """Warp w issues multicast copy ``op`` knowing ``know``: a race if a reader of the phase it
        overwrites, in any CTA it writes, may still be reading."""
        over = self.announced.get((w, op.bar), 0) - 1         # the completion the stage holds
        for c in op.ctas:
            full = Bar(op.bar.name, op.bar.index, c)
            for r, n in sorted(self.readers.get(full, {}).items()):
                if 1 <= over <= n and not know & self.bits.get((r, full, over), 0):
                    p = self.proto
                    empty = Bar(*self.empty_of[(full.name, full.index)], p.cta_of(w))
                    raise ProtocolError(
                        f"{p.step}: race: {p.role(w)} line {op.line} `{op.text}` multicasts into {full}'s stage "
                        f"(its completion {over + 1}) while nothing orders the copy after {p.role(r)}'s release of "
                        f"completion {over}: that release must reach {empty}, which the issuing warp waited on "
                        "(through a remote arrive, mapa, where it is another CTA's)")
