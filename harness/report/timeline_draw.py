"""Timelines as pictures: one lane per warp role of one CTA over four K/V tiles of the steady state,
each phase a bar, drawn from a measured record (results/*.json, "timelines") or, for a step no GPU
of ours can run, from the simulation (harness/timeline/simulate.py), labelled as such.

``draw`` writes writeups/img/timeline-<step>.svg and .png and keeps the drawn data beside them as
.json, so ``ladder writeups`` can tell a stale picture by its data (as harness/report/plot.py does).
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.core import results
from harness.core.markers import markers, phase_kind
from harness.core.steps import Step
from harness.report.figures import DPI, IMG, MISSING, RC
from harness.timeline import probes, records

WINDOW = range(6, 10)          # the tiles drawn: past the prologue, well inside the kept 16
SIMULATED = "simulated from the protocol model and the bound model's unit cycles; not a measurement"
COLOURS = {"qk": "#1f77b4", "pv": "#2ca02c", "softmax": "#ff7f0e", "work": "#9467bd", "wait": "#d0d0d0"}
LEGEND = {"qk": "S = Q K^T", "pv": "O += P V", "softmax": "softmax", "work": "other work (P to bf16, O rescale)",
          "wait": "waiting on a barrier"}
# What a GEMM bar spans: a wgmma from its issue to its wait_group; a tcgen05.mma is issued by one thread and
# completes on its own (the simulation draws its issue only).
GEMM_SPAN = {"hopper": " (wgmma: issue to done)", "blackwell": " (tcgen05: issue only)"}


def recorded(step: Step) -> tuple[dict, str] | None:
    """The step's measured timeline that still describes its kernel, with its label, or None."""
    for data in results.all_recorded().values():
        record = data.get("timelines", {}).get(step.id)
        if record and not probes.stale_reason(step, record):
            p = record["provenance"]
            return record, f"measured on {p['gpu']}, {p['date'][:10]} (clock64 probes, block (0, 0, 0), seqlen {record['shape'][1] // 1024}k)"
    return None


def source_for(step: Step) -> tuple[dict, str]:
    """What to draw for ``step``: its measurement, else (Blackwell) its simulation."""
    found = recorded(step)
    if found:
        return found
    if step.track == "blackwell":
        from harness.timeline import simulate as timeline_sim
        return timeline_sim.simulate(step), SIMULATED
    raise ValueError(f"no measured timeline of {step.id} that matches its code; on an H200: "
                     f"`ladder timeline {step.id} --measure --record results/h200.json`")


def picture_data(step: Step, record: dict, label: str) -> dict:
    """What the picture shows, and nothing else: the window's bars per lane."""
    lanes = [(f"{lane['role']} (warp {lane['warp']})", lane["intervals"]) for lane in records.lanes(record)]
    if record.get("tensor"):
        lanes.append(("tensor pipe (simulated)", record["tensor"]))
    shown = [(name, [iv for iv in ivs if iv[0] in WINDOW]) for name, ivs in lanes]
    starts = [iv[2] for _, ivs in shown for iv in ivs]
    if not starts:
        raise ValueError(f"{step.id}: no phase in tiles {WINDOW.start}-{WINDOW.stop - 1}")
    origin = min(starts)
    names = record["phases"]
    return {"step": step.id, "title": step.info.title, "label": label, "simulated": bool(record.get("simulated")),
            "phases": names,
            "lanes": [{"name": name, "bars": [[iv[0], iv[1], iv[2] - origin, iv[3] - origin] for iv in ivs],
                       # a lane whose GEMMs and other work overlap in time is drawn in two halves
                       "split": _overlapping(ivs, names)}
                      for name, ivs in shown]}


def _overlapping(intervals, names) -> bool:
    gemms = [(b, e) for _, p, b, e in intervals if phase_kind(names[p]) in ("qk", "pv")]
    other = [(b, e) for _, p, b, e in intervals if phase_kind(names[p]) not in ("qk", "pv")]
    return bool(gemms) and any(b < oe and ob < e for b, e in gemms for ob, oe in other)


def paths(step_id: str, out_dir: Path | None = None) -> tuple[Path, Path, Path]:
    base = Path(out_dir or IMG) / f"timeline-{step_id}"
    return base.with_suffix(".svg"), base.with_suffix(".png"), base.with_suffix(".json")


def _comparable(data: dict) -> dict:
    """A simulated picture's cycles follow ptxas's issue counts, which move between compiles of the
    same code (see harness/report/writeups.py, VOLATILE_ROW): only its structure counts for staleness."""
    if not data.get("simulated"):
        return data
    return {**data, "lanes": [{"name": lane["name"], "bars": [b[:2] for b in lane["bars"]]} for lane in data["lanes"]]}


def stale(step: Step, out_dir: Path | None = None) -> bool:
    json_path = paths(step.id, out_dir)[2]
    if not json_path.exists():
        return True
    return _comparable(json.loads(json_path.read_text())) != _comparable(picture_data(step, *source_for(step)))


def drawable() -> list[Step]:
    """Steps with timeline markers and something to draw: a current measurement, or a simulation."""
    from harness.core.steps import discover
    out = []
    for step in discover():
        if not markers(step.path.read_text()):
            continue
        if step.track == "blackwell" or recorded(step):
            out.append(step)
    return out


def draw(step: Step, record: dict, label: str, out_dir: Path | None = None) -> list[Path]:
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
    except ImportError as e:
        raise ValueError(MISSING) from e
    data = picture_data(step, record, label)
    svg, png, json_path = paths(step.id, out_dir)
    svg.parent.mkdir(parents=True, exist_ok=True)
    lanes = data["lanes"]
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(11.0, 1.6 + 0.62 * len(lanes)), dpi=DPI)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        end = max(b[3] for lane in lanes for b in lane["bars"])
        kinds = set()
        for y, lane in enumerate(reversed(lanes)):
            for tile, p, b, e in lane["bars"]:
                kind = phase_kind(data["phases"][p])
                kinds.add(kind)
                width = max(e - b, end * 0.002)            # an instantaneous issue stays visible
                # Where a warpgroup's GEMMs are in flight while it runs its softmax (h12 on), the
                # lane is drawn in three rows: its QK^T, its P V, and the rest.
                if lane["split"]:       # three rows: QK^T, P V, the rest
                    y0, height = {"qk": y + 0.13, "pv": y - 0.12}.get(kind, y - 0.37), 0.24
                else:
                    y0, height = y - 0.36, 0.72
                ax.broken_barh([(b / 1000, width / 1000)], (y0, height), facecolors=COLOURS[kind],
                               edgecolors="white", linewidth=0.6)
                text = f"{data['phases'][p]} j={tile}" if kind == "softmax" else f"j={tile}"
                if kind not in ("wait", "work") and width > end * 0.012 * len(text):
                    ax.text((b + width / 2) / 1000, y0 + height / 2, text, ha="center", va="center", fontsize=7,
                            color="white" if kind != "softmax" else "black")
        ax.set_yticks(range(len(lanes)))
        ax.set_yticklabels([lane["name"] for lane in reversed(lanes)], fontsize=9)
        ax.set_xlim(0, end / 1000 * 1.01)
        ax.set_ylim(-0.6, len(lanes) - 0.4)
        ax.set_xlabel("thousands of SM cycles from the window's first phase")
        ax.grid(axis="x", color="0.92", zorder=0)
        ax.set_axisbelow(True)
        fig.suptitle(f"{data['step']}: {data['title']} (one CTA, K/V tiles j = {WINDOW.start}-{WINDOW.stop - 1})",
                     fontsize=11)
        ax.set_title(data["label"], fontsize=8.5, style="italic", color="#b00000" if data["simulated"] else "0.35")
        span = GEMM_SPAN.get(step.track, "")
        fig.legend(handles=[Patch(facecolor=COLOURS[k], label=LEGEND[k] + (span if k in ("qk", "pv") else ""))
                            for k in COLOURS if k in kinds],
                   loc="lower center", ncol=len(kinds), fontsize=8, frameon=False)
        fig.tight_layout(rect=(0, 0.07 * 4 / (len(lanes) + 1), 1, 1))
        fig.savefig(svg, format="svg", metadata={"Date": None})
        fig.savefig(png, format="png", metadata={"Date": None})
    json_path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return [svg, png, json_path]
