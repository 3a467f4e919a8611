"""Simulated timelines: a step's barrier protocol replayed in time, each phase taking the cycles the
bound model gives it.

The warps' programs are the protocol model's (harness/model/protocol.py: every barrier operation in
program order, from the kernel's source) with the step's timeline markers in them (the instrumented
copy of harness/timeline/probes.py). The replay is a discrete-event simulation of one CTA alone on its SM
(a 2-CTA step: of its cluster, each CTA loading on its own SM, the leader's warps drawn):

- a phase named like a GEMM (``QK^T``, ``S0``, ``S1``: Q K^T; ``PV``, ``O0``, ``O1``: P V) puts one
  GEMM of one Q tile, tensor / (2 x Q tiles) cycles of harness/model/bound.py, on the tensor pipe, which
  runs them one after another in the order they were issued. On Hopper (wgmma) the warpgroup waits
  for it inside the phase; on Blackwell (tcgen05) the MMA warp only issues it, and a
  ``tcgen05.commit`` arrives when the pipe has finished everything issued before it;
- a ``softmax`` phase takes the bound model's softmax time of one Q tile's group, one warp per
  scheduler (``bound.softmax_cycles``);
- any other phase (a wait, or other work such as h12's P conversion) takes the time its barrier
  waits take: the simulation gives such work no cycles of its own;
- a TMA copy lands LOAD_LATENCY after its issue plus its bytes at the L2 rate, copies one after
  another; a warp woken by a barrier completion runs HANDOFF cycles later (bound.py's constants).

What it leaves out: contention between warps for issue slots and the MUFU (two softmax groups run
at full speed side by side, as the bound model's ``pipelined`` structure assumes), other CTAs on
the SM, the prologue and the epilogue's work. So it draws what the protocol and the unit cycles
imply, labelled "simulated"; ``check`` compares its cycles per tile with the measured timelines
of the Hopper steps.

Beside the marked phases the replay keeps its hand-offs (``events``, for the life-of-a-tile
picture, harness/report/tile_life.py): every copy and commit (issued, landed), every wait on an
mbarrier or a named barrier (begun, passed) with what completed the phase it passed on (a copy's
bytes, a commit, or a warp's arrive).
"""

from __future__ import annotations

import heapq

from harness.core.markers import phase_kind
from harness.core.memo import per_step_version
from harness.core.steps import Step
from harness.model import bound, protocol
from harness.model.pipeline_model import MBarrier, ProtocolError
from harness.model.protocol_replay import PairBarrier
from harness.model.protocol_source import extract
from harness.timeline import probes, records

COPY_BYTES = 128 * 128 * 2          # every TMA copy in the ladder moves one 128 x 128 bf16 tile
MMA_LATENCY = 100                   # cycles from a GEMM's last MMA leaving the tensor pipe to its
                                    # completion being visible (wgmma.wait_group / the commit's arrive)


def durations(step: Step, gpu_key: str) -> dict:
    """Cycles of one GEMM of one Q tile, one softmax tile of one group, one copy's transfer."""
    unit_cycles, facts = bound.demands(step, gpu_key)
    return {"gemm": unit_cycles["tensor"] / (2 * facts["groups"]),
            "softmax": bound.softmax_cycles(facts["instructions_per_warp"], facts["mufu_per_warp"], 1, facts["mufu_rate"]),
            "copy": unit_cycles["l2"] * COPY_BYTES / (2 * step.info.tile_n * step.info.head_dim * 2)}


@per_step_version
def simulate(step: Step, gpu_key: str | None = None, n_blocks: int = records.KEPT_TILES) -> dict:
    """The step's simulated timeline, in the record format of ``harness.gpu.timeline_run.measure``, plus the
    tensor pipe's own lane (``tensor``) and the hand-offs (``events``, see the module docstring)."""
    gpu_key = gpu_key or ("b200" if step.track == "blackwell" else "h200")
    source = step.path.read_text()
    names = probes.phase_names(step.module, source)
    proto = extract(step.module, n_blocks, source=probes.instrumented_source(step.module, source),
                             step=step.id)
    d = durations(step, gpu_key)
    result = _run(proto, names, d, waits_for_gemm=step.track != "blackwell")
    # A cluster (b13) is simulated whole; the picture shows the leader CTA's warps (the peer's
    # differ only in having no MMAs to issue).
    warps = [{"warp": w, "role": records.role_of(step.module, w, {names[p] for _, p, _, _ in iv}), "intervals": iv}
             for w, iv in enumerate(result["intervals"][:proto.warps_per_cta]) if iv]
    return {"step": step.id, "simulated": True, "gpu": gpu_key, "n_blocks": n_blocks, "phases": names,
            "warps": records.lanes({"warps": warps}), "tensor": result["tensor"],
            "durations": {k: round(v, 1) for k, v in d.items()},
            "events": result["events"]}


def _run(proto: protocol.Protocol, names: list[str], d: dict, *, waits_for_gemm: bool) -> dict:
    n = len(proto.warps)
    pc, t = [0] * n, [0.0] * n
    blocked: list = [None] * n
    cluster = proto.ctas > 1
    bars = {b: (PairBarrier if cluster else MBarrier)(c) for b, c in proto.counts.items()}
    events: list = []                 # (time, seq, kind, bar, arrivals): copies, commits, GEMM completions
    seq = 0
    l2_free = [0.0] * proto.ctas      # each CTA's SM loads its own copies
    cluster_bar = {"arrived": 0, "waiting": []}
    pipe = _TensorPipe(shared=waits_for_gemm)
    open_phase: dict = {}
    intervals: list = [[] for _ in range(n)]
    named: dict = {}
    log: list = []                    # the hand-offs: copies, commits, waits (see the docstring)
    completions: dict = {}            # bar -> what completed each of its phases, in order
    waiting: dict = {}                # warp -> its wait's entry in log while it is blocked

    def passed(entry, w, bar):
        """A wait's entry once its warp runs on, with the completion it passed on (none: a fresh
        barrier's "previous phase")."""
        done = completions.get(bar, [])
        entry.update(end=round(t[w]), by=done[bars[bar].phase - 1] if bars[bar].phase else None)

    def resume(w, when):
        blocked[w] = None
        t[w] = max(t[w], when) + bound.HANDOFF
        pc[w] += 1

    def wake_bar(bar, when):
        for w in range(n):
            if blocked[w] and blocked[w][0] == "bar" and blocked[w][1] == bar and bars[bar].try_wait(blocked[w][2]):
                resume(w, when)
                passed(waiting.pop(w), w, bar)

    def completing(bar, when, source, change):
        """Apply ``change`` to ``bar``; if a phase completes, note ``source`` as what completed it."""
        before = bars[bar].phase
        change()
        if bars[bar].phase > before:
            completions.setdefault(bar, []).append({**source, "time": round(when)})
        wake_bar(bar, when)

    def arrive(bar, arrivals, when, expect=0, source=None):
        def change():
            for _ in range(arrivals):
                bars[bar].arrive(expect_tx=expect)
        completing(bar, when, source or {}, change)

    def push(when, kind, bar=None, arrivals=0, ref=None):
        nonlocal seq
        seq += 1
        heapq.heappush(events, (when, seq, kind, bar, arrivals, ref))

    def gemm_key(w, op):
        return (w // 4 if waits_for_gemm else w, op.value, op.tile)

    def step_warp(w):
        nonlocal l2_free
        op = proto.warps[w][pc[w]]
        now = t[w]
        if op.kind == "wait":
            entry = {"kind": "wait", "warp": w, "bar": str(op.bar), "line": op.line, "begin": round(now)}
            log.append(entry)
            if not bars[op.bar].try_wait(op.value):
                blocked[w] = ("bar", op.bar, op.value)
                waiting[w] = entry
                return
            passed(entry, w, op.bar)
        elif op.kind in ("arrive", "expect"):
            arrive(op.bar, op.value, now, expect=op.copies if op.kind == "expect" else 0,
                   source={"kind": "arrive", "warp": w})
        elif op.kind == "copy":
            cta = proto.cta_of(w)
            l2_free[cta] = max(now + bound.LOAD_LATENCY, l2_free[cta]) + d["copy"]
            log.append({"kind": "copy", "warp": w, "bar": str(op.bar), "text": op.text, "line": op.line,
                        "issue": round(now), "land": round(l2_free[cta])})
            push(l2_free[cta], "copy", op.bar, ref=len(log) - 1)
        elif op.kind == "commit":
            for bar in protocol.lands_on(op):          # a multicast commit: each CTA of its mask
                land = pipe.drained(now) + MMA_LATENCY
                log.append({"kind": "commit", "warp": w, "bar": str(bar), "line": op.line,
                            "issue": round(now), "land": round(land)})
                push(land, "commit", bar, op.value, ref=len(log) - 1)
        elif op.kind in ("sync", "bar_arrive"):
            key = (proto.cta_of(w), op.value)          # named barriers are per CTA
            st = named.setdefault(key, {"arrived": 0, "waiting": [], "by": []})
            st["arrived"] += protocol.WARP
            st["by"].append((w, round(now)))
            if op.kind == "sync":
                st["waiting"].append(w)
                waiting[w] = {"kind": "wait", "warp": w, "bar": f"barrier {op.value}", "named": op.value,
                              "line": op.line, "begin": round(now)}
                log.append(waiting[w])
            if st["arrived"] == op.threads:
                # what released a waiter: the last arrival of a warp that does not wait here (a
                # bar.arrive), else of another warp
                for x in st["waiting"]:
                    if x != w:
                        resume(x, now)
                    others = [a for a in st["by"] if a[0] not in st["waiting"]] or [a for a in st["by"] if a[0] != x]
                    src = others[-1] if others else st["by"][-1]
                    waiting.pop(x).update(end=round(t[x]), by={"kind": "arrive", "warp": src[0], "time": src[1]})
                named[key] = {"arrived": 0, "waiting": [], "by": []}
            elif op.kind == "sync":
                blocked[w] = ("named", key)
                return
        elif op.kind in ("cluster_arrive", "cluster_wait"):
            # the cluster barrier: every warp of every CTA arrives once per generation
            if op.kind == "cluster_arrive":
                cluster_bar["arrived"] += 1
            else:
                cluster_bar["waiting"].append(w)
            if cluster_bar["arrived"] == n and len(cluster_bar["waiting"]) == n:
                for x in cluster_bar["waiting"]:
                    if x != w:
                        resume(x, now)
                cluster_bar.update(arrived=0, waiting=[])
            elif op.kind == "cluster_wait":
                blocked[w] = ("cluster",)
                return
        elif op.kind == "mark":
            phase = names[op.value]
            kind = {"qk": "gemm", "pv": "gemm"}.get(phase_kind(phase), phase_kind(phase))
            if op.edge == 0:
                open_phase[(w, op.value)] = now
                if kind == "gemm" and gemm_key(w, op) not in pipe.jobs:
                    pipe.add(gemm_key(w, op), d["gemm"], now)
                    if pipe.next_completion() is not None:
                        push(pipe.next_completion(), "gemm")
            else:
                begin = open_phase[(w, op.value)]
                if kind == "gemm" and waits_for_gemm:
                    done = pipe.done.get(gemm_key(w, op))
                    if done is None:
                        blocked[w] = ("gemm", gemm_key(w, op))
                        return
                    t[w] = max(now, done + MMA_LATENCY)
                elif kind == "softmax":
                    t[w] = max(now, begin + d["softmax"])
                del open_phase[(w, op.value)]
                intervals[w].append([op.tile, op.value, round(begin), round(t[w])])
        pc[w] += 1

    while True:
        ready = [w for w in range(n) if pc[w] < len(proto.warps[w]) and blocked[w] is None]
        warp = min(ready, key=lambda w: (t[w], w)) if ready else None
        if events and (warp is None or events[0][0] <= t[warp]):
            when, _, kind, bar, arrivals, ref = heapq.heappop(events)
            if kind == "copy":
                completing(bar, when, {"kind": "copy", "event": ref}, lambda bar=bar: bars[bar].complete_tx(1))
            elif kind == "commit":
                arrive(bar, arrivals, when, source={"kind": "commit", "event": ref})
            elif when == pipe.next_completion():          # a GEMM finishes (a later prediction wins)
                for key in pipe.advance(when):
                    for w in range(n):
                        if blocked[w] == ("gemm", key):
                            blocked[w] = None
                            t[w] = max(t[w], when + MMA_LATENCY)  # the end marker runs again, now done
                if pipe.next_completion() is not None:
                    push(pipe.next_completion(), "gemm")
            continue
        if warp is None:
            stuck = [w for w in range(n) if pc[w] < len(proto.warps[w])]
            if stuck:
                raise ProtocolError(f"{proto.step}: the simulation deadlocked (warps {stuck})")
            break
        step_warp(warp)
    return {"intervals": intervals, "tensor": pipe.lane, "events": log}


class _TensorPipe:
    """The SM's tensor cores. ``shared``: the GEMMs in flight share them equally (wgmma: every
    warpgroup's GEMM runs on all four sub-partitions' tensor cores at once); otherwise one after
    another in issue order (tcgen05.mma from one thread)."""

    def __init__(self, shared: bool):
        self.shared = shared
        self.jobs: dict = {}        # key -> remaining cycles of work (shared) or its end (in order)
        self.done: dict = {}        # key -> time its last MMA finished
        self.now = 0.0
        self.free = 0.0             # in order: when the last issued GEMM finishes
        self.lane: list = []        # in order: [tile, phase, start, end] per GEMM

    def add(self, key, work: float, when: float) -> None:
        if self.shared:
            self.advance(when)
            self.jobs[key] = work
        else:
            start = max(when, self.free)
            self.free = start + work
            self.jobs[key] = self.free
            self.done[key] = self.free
            self.lane.append([key[2], key[1], round(start), round(self.free)])

    def drained(self, when: float) -> float:
        """When everything issued so far has finished (a tcgen05.commit's arrival)."""
        return max(when, self.free)

    def next_completion(self) -> float | None:
        live = {k: v for k, v in self.jobs.items() if k not in self.done}
        if not self.shared or not live:
            return None
        return self.now + min(live.values()) * len(live)

    def advance(self, when: float) -> list:
        """Run the shared pipe up to ``when``; return the GEMMs that finished."""
        finished = []
        while True:
            live = {k: v for k, v in self.jobs.items() if k not in self.done}
            if not live:
                break
            first = min(live.values())
            if self.now + first * len(live) > when + 1e-6:
                for k in live:
                    self.jobs[k] -= (when - self.now) / len(live)
                break
            self.now += first * len(live)
            for k in live:
                self.jobs[k] -= first
                if self.jobs[k] <= 1e-6:
                    self.done[k] = self.now
                    finished.append(k)
        self.now = max(self.now, when)
        return finished


def check(steps) -> list[dict]:
    """For each step with a measured timeline: measured and simulated cycles per K/V tile."""
    from harness.core import results
    out = []
    for step in steps:
        for gpu, data in results.all_recorded().items():
            record = data.get("timelines", {}).get(step.id)
            if not record or probes.stale_reason(step, record):
                continue
            measured = records.period(record)
            simulated = records.period(simulate(step, gpu if gpu in ("h200", "b200") else None))
            out.append({"step": step.id, "gpu": gpu, "measured": measured, "simulated": simulated,
                        "seqlen": record["shape"][1], "probe_cost": record["instrumented_ms"] / record["step_ms"] - 1})
    return out
