"""The life of one work tile: one CTA's query tile from its first TMA copy to its epilogue, one lane
per warp role, with the barrier hand-offs between them (``ladder writeups`` draws
writeups/img/life-<step>.svg and .png; the block ``life <step>`` shows it in a writeup).

The data is the pipeline model's, never typed in: harness/timeline/simulate.py replays the barrier
protocol read from the step's source (harness/model/protocol_source.py) for a short sequence of
``N_BLOCKS`` K/V tiles, each phase taking the bound model's unit cycles, and keeps its hand-offs
(every copy, commit and wait, and what completed the barrier phase each wait passed on). What is
drawn from it:

- the phases the step's timeline markers name (S = Q K^T, P V, the softmax, O's rescale, the
  correction), in the lanes of the warps that run them; on Blackwell the MMA warp only issues, and
  a lane of its own shows the tensor pipe running the GEMMs;
- every TMA copy, one row per tensor and barrier (the ring stage it fills), from its issue to its
  landing (the last part of the bar: its bytes at the L2 rate);
- every wait on an mbarrier or a named barrier (the CTA-wide ``sync_threads`` left out), and a
  hand-off from what completed the barrier's phase (a copy's bytes, a warp's arrive, a
  ``tcgen05.commit``) to the wait it released;
- the epilogue (O / row sum, to bf16, stored), which the simulation does not time: drawn after
  the last thing the lanes that own O wait for, as long as O's bytes take at the model's L2 rate.

The simulation leaves out what harness/timeline/simulate.py says it leaves out (issue contention,
other CTAs, the prologue's barrier init and TMEM allocation, the work of phases it gives no cycles:
O's rescale, the correction, the P conversion, drawn as ticks). The picture is labelled simulated;
a Blackwell one also "compiled, not yet run on a B200".
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness.core.markers import phase_kind
from harness.core.steps import Step, resolve
from harness.report.figures import IMG
from harness.report.tables import NOT_RUN_B200
from harness.timeline import records
from harness.timeline import simulate as timeline_sim

STEPS = ("h12", "b12")      # one picture per track
N_BLOCKS = 4                # K/V tiles: the ring (2 stages) fills, turns over once, and drains
SHORT = {"QK^T": "S"}        # a phase's name in its bar (Hopper's QK^T of tile j is S(j))


def label(step: Step) -> str:
    gpu = "B200" if step.track == "blackwell" else "H200"
    text = (f"simulated: harness/timeline/simulate.py replays the barrier protocol of {step.id}'s source "
            f"with the bound model's {gpu} unit cycles; not a measurement")
    return text + (f" ({NOT_RUN_B200})" if step.track == "blackwell" else "")


def _lanes(step: Step, sim: dict) -> list[dict]:
    """One lane per role: its name, its warps, the warp drawn (the lowest that did anything)."""
    roles = step.info.extra.get("warp_roles")
    active = {e["warp"] for e in sim["events"] if e.get("named") != 0}
    if roles:
        groups = [(role, list(ws)) for role, ws in roles.items() if active & set(ws)]
    else:                        # Hopper: by warpgroup
        groups = [(None, [w for w in range(g, g + 4)]) for g in sorted({w // 4 * 4 for w in active})]
    out = []
    for role, warps in groups:
        mine = sorted(active & set(warps))
        rep = mine[0]
        phases = {sim["phases"][p] for lane in sim["warps"] if lane["warp"] == rep for _, p, _, _ in lane["intervals"]}
        name = _role_name(role, len(warps)) if role else records.role_of(step.module, rep, phases)
        if len(mine) == 1:
            name = re.sub(r" warpgroup \d+$", " warp", name)
            name += f" (warp {rep})"
        else:
            name += f" (warps {warps[0]}-{warps[-1]})"
        out.append({"name": name, "warps": warps, "rep": rep, "phases": phases})
    return out


def _role_name(role: str, warps: int) -> str:
    named = {"mma": "MMA warp", "load": "load warp"}
    if role in named:
        return named[role]
    m = re.fullmatch(r"([a-z]+)(\d*)", role)
    base, g = (m[1], m[2]) if m else (role, "")
    return f"{base} {'warpgroup' if warps == 4 else 'warp'}{' ' + g if g else ''}"


def named_barrier(module, barrier: int) -> str:
    """A named barrier by the step's constant for it (PINGPONG_BARRIER = 1: barrier 2 is "pingpong 2")."""
    consts = [(v, k) for k, v in vars(module).items()
              if k.endswith("_BARRIER") and isinstance(v, int) and not isinstance(v, bool) and 0 < v <= barrier]
    return f"{max(consts)[1].removesuffix('_BARRIER').lower()} {barrier}" if consts else f"barrier {barrier}"


def _copy_rows(copies: list[dict]) -> list[tuple[str, int]]:
    """Each copy's row: one per tensor and barrier (the ring stage it fills), and another where two
    copies of them are in flight at once (b12's two Q tiles)."""
    ends: dict = {}
    out = []
    for e in copies:
        key = f"{_copy_name(e)} -> {e['bar']}"
        k = 0
        while ends.get((key, k), -1) > e["issue"]:
            k += 1
        ends[(key, k)] = e["land"]
        out.append((key, k))
    return out


def _copy_name(event: dict) -> str:
    m = re.search(r"\btma_(\w+?)\b", event["text"])
    return m[1] if m else "copy"


def life_data(step: Step) -> dict:
    """What the picture shows, and nothing else (see the module docstring). Each lane holds its
    ``rows`` and its ``bars`` [row, kind, text, begin, end] (kind: a phase kind of
    harness/core/markers.py, "copy" or "epilogue"); each hand-off is [source kind ("copy", "arrive",
    "commit"), lane, row, time, waiting lane, row, wait begin, wait end, barrier]. Cycles from the
    roles' start."""
    sim = timeline_sim.simulate(step, n_blocks=N_BLOCKS)
    events = sim["events"]
    lanes = _lanes(step, sim)
    # top to bottom: the lane that loads, the copies, the lane that commits GEMMs (Blackwell's MMA
    # warp) and the tensor pipe, the rest in warp order
    issuers = [{e["warp"] for e in events if e["kind"] == kind} for kind in ("copy", "commit")]
    lanes.sort(key=lambda lane: ([not set(lane["warps"]) & ws for ws in issuers], lane["rep"]))
    for lane in lanes:
        split = step.track != "blackwell" and any(phase_kind(p) == "qk" for p in lane["phases"])
        lane.update(rows=["S = Q K^T", "O += P V", "softmax, the rest"] if split else [""], bars=[])
        _phase_bars(lane, sim)
    copies = [i for i, e in enumerate(events) if e["kind"] == "copy"]
    tma = _copy_lane([events[i] for i in copies])
    drawn = [lanes[0], tma, *lanes[1:]]
    if sim["tensor"]:                         # Blackwell: the MMA warp issues, the pipe runs
        tensor = {"name": "tensor pipe", "rows": [""],
                  "bars": [[0, phase_kind(sim["phases"][p]), f"{sim['phases'][p]}({tile})", b, e]
                           for tile, p, b, e in sim["tensor"]]}
        drawn.insert(next(i for i, lane in enumerate(drawn) if set(lane.get("warps", ())) & issuers[1]) + 1, tensor)
    lane_of = {w: i for i, lane in enumerate(drawn) for w in lane.get("warps", ())}
    copy_row = {i: tma["bars"][k][0] for k, i in enumerate(copies)}
    tma_lane = drawn.index(tma)
    tensor_lane = next((i for i, lane in enumerate(drawn) if lane["name"] == "tensor pipe"), None)
    handoffs = []
    for e in events:
        if e["kind"] != "wait" or e.get("named") == 0 or e["warp"] not in lane_of:
            continue                          # the CTA-wide barrier (sync_threads) is left out
        lane = drawn[lane_of[e["warp"]]]
        if lane["rep"] != e["warp"]:
            continue                          # one warp per role is drawn
        bar = named_barrier(step.module, e["named"]) if "named" in e else e["bar"]
        row = len(lane["rows"]) - 1
        lane["bars"].append([row, "wait", bar, e["begin"], e["end"]])
        by = e["by"]
        if not by:                            # a fresh barrier's "previous phase": nobody hands over
            continue
        if by["kind"] == "copy":
            src = [tma_lane, copy_row[by["event"]]]
        elif by["kind"] == "commit":
            src = [tensor_lane, 0]
        elif by["warp"] in lane_of:
            src = [lane_of[by["warp"]], len(drawn[lane_of[by["warp"]]]["rows"]) - 1]
        else:
            continue
        handoffs.append([by["kind"], *src, by["time"], lane_of[e["warp"]], row, e["begin"], e["end"], bar])
    _epilogue(step, sim, drawn)
    for lane in drawn:
        for key in ("warps", "rep", "phases"):
            lane.pop(key, None)
    return {"step": step.id, "title": step.info.title, "label": label(step), "simulated": True,
            "n_blocks": N_BLOCKS, "gpu": sim["gpu"], "durations": sim["durations"],
            "lanes": drawn, "handoffs": handoffs}


def _phase_bars(lane: dict, sim: dict) -> None:
    """The phases the markers name, of the lane's drawn warp; its waits come from the hand-offs,
    barrier by barrier, not from the marked wait phases."""
    names = sim["phases"]
    for tile, p, b, e in next(x["intervals"] for x in sim["warps"] if x["warp"] == lane["rep"]):
        kind = phase_kind(names[p])
        if kind != "wait":
            row = {"qk": 0, "pv": 1}.get(kind, 2) if len(lane["rows"]) == 3 else 0
            lane["bars"].append([row, kind, f"{SHORT.get(names[p], names[p])}({tile})", b, e])


def _copy_lane(copies: list[dict]) -> dict:
    """The TMA copies in flight, one row per tensor and barrier (see _copy_rows), each copy named by
    its tensor and its count among that tensor's copies (K2: the third K tile)."""
    slots = _copy_rows(copies)
    rows = list(dict.fromkeys(slots))
    names = [_copy_name(e) for e in copies]
    bars = [[rows.index(slot), "copy", name if names.count(name) == 1 else f"{name}{names[:i].count(name)}",
             e["issue"], e["land"]] for i, (e, slot, name) in enumerate(zip(copies, slots, names, strict=True))]
    return {"name": "TMA copies (in flight)", "rows": [key for key, _ in rows], "bars": bars}


def _epilogue(step: Step, sim: dict, drawn: list) -> None:
    """The epilogue's bar in each lane that owns O (Hopper: the consumers, which run P V; Blackwell:
    the softmax warpgroups): after the last thing it waits for, O's bytes at the model's L2 rate."""
    kind = "pv" if step.track != "blackwell" else "softmax"
    owners = [lane for lane in drawn if any(b[1] == kind for b in lane["bars"])]
    rows = step.info.tile_m // len(owners)
    cycles = sim["durations"]["copy"] * rows * step.info.head_dim * 2 / timeline_sim.COPY_BYTES
    for lane in owners:
        begin = max(b[4] for b in lane["bars"])
        lane["bars"].append([len(lane["rows"]) - 1, "epilogue", "epilogue", begin, round(begin + cycles)])


def paths(step_id: str, out_dir: Path | None = None) -> tuple[Path, Path, Path]:
    base = Path(out_dir or IMG) / f"life-{step_id}"
    return base.with_suffix(".svg"), base.with_suffix(".png"), base.with_suffix(".json")


def comparable(data: dict) -> dict:
    """The picture's structure: its cycles follow ptxas's issue counts, which move between compiles
    of the same code (harness/report/writeups.py, VOLATILE_ROW), so they are left out (as
    harness/report/timeline_draw.py leaves out a simulated timeline's). What remains: every lane,
    row and bar in program order, every hand-off (from where to where, on which barrier)."""
    return {**{k: v for k, v in data.items() if k != "durations"},
            "lanes": [{**lane, "bars": [b[:3] for b in lane["bars"]]} for lane in data["lanes"]],
            "handoffs": [[*h[:3], *h[4:6], h[8]] for h in data["handoffs"]]}


def stale(step: Step, out_dir: Path | None = None) -> bool:
    json_path = paths(step.id, out_dir)[2]
    if not json_path.exists():
        return True
    return comparable(json.loads(json_path.read_text())) != comparable(life_data(step))


def drawable() -> list[Step]:
    return [resolve(s) for s in STEPS]


def dumps(data: dict) -> str:
    """The data as JSON, a bar or a hand-off (a list of plain values) to a line."""
    leaves: list[str] = []

    def mark(v):
        if isinstance(v, dict):
            return {k: mark(x) for k, x in v.items()}
        if isinstance(v, list) and any(isinstance(x, list | dict) for x in v):
            return [mark(x) for x in v]
        if isinstance(v, list):
            leaves.append(json.dumps(v))
            return f"\0{len(leaves) - 1}"
        return v
    text = json.dumps(mark(data), indent=1, sort_keys=True)
    return re.sub(r'"\\u0000(\d+)"', lambda m: leaves[int(m[1])], text) + "\n"


def draw(step: Step, out_dir: Path | None = None) -> list[Path]:
    from harness.report import tile_life_draw
    data = life_data(step)
    svg, png, json_path = paths(step.id, out_dir)
    tile_life_draw.draw(data, svg, png)
    json_path.write_text(dumps(data))
    return [svg, png, json_path]


def life_block(step_id: str) -> str:
    """``life <step>``: the picture of one work tile's life, and how to read it."""
    step = resolve(step_id)
    if step.id not in STEPS:
        raise ValueError(f"life block: drawn for {', '.join(STEPS)}, not {step.id}")
    blackwell = step.track == "blackwell"
    gpu = "B200" if blackwell else "H200"
    commit = ", a `tcgen05.commit` of the MMA warp's GEMMs" if blackwell else ""
    return (f"![{step.id}: the life of one work tile over {N_BLOCKS} K/V tiles, simulated]"
            f"(../img/life-{step.id}.svg)\n\n"
            f"The life of one work tile of {step.id} (one CTA's {step.info.tile_m} query rows) in a sequence of "
            f"{N_BLOCKS} K/V tiles, from the first TMA copy to the epilogue's store: one lane per warp role, time "
            f"left to right, a bar's (j) its K/V tile. Simulated, not measured"
            + (f" ({NOT_RUN_B200})" if blackwell else "")
            + f": the barrier protocol read from {step.id}'s source, replayed with the bound model's {gpu} unit "
            "cycles (`harness/timeline/simulate.py`, `harness/report/tile_life.py`); the epilogue is not timed by "
            "the model and is drawn as long as O's bytes take at its L2 rate. Grey bars are waits, each labelled "
            "with its barrier; an arrow runs from what completed the barrier's phase (a copy landing, a warp's "
            f"arrive{commit}) to the wait it released, and the bands mark the start-up, the steady state and the "
            "drain. Work is drawn where the source puts it: the compiled code may run it later (ptxas moves "
            "instructions across a wait; the step's SASS says where they ended up).\n")


BLOCKS = {"life": life_block}
