"""The ladder as a picture: each step's h-mean fraction of stock FA4, one line per (track, GPU),
drawn from results/*.json only (``ladder plot``; ``ladder writeups`` redraws it when the data
changed).

``plot_data()`` is a plain dict: what the picture shows and nothing else. ``draw()`` writes it as
writeups/img/ladder.svg and .png (matplotlib, the ``plot`` extra, imported only there) and keeps
the dict beside them as ladder.json, so a test can tell a stale picture by its data, not its bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.core import results
from harness.core.steps import TRACKS, track_steps
from harness.report.figures import DPI, IMG, MISSING, RC  # noqa: F401  (IMG, MISSING: part of this module's interface)
from harness.report.tables import NOT_RUN_B200

NAME = "ladder"

# Fixed so that redrawing unchanged data gives identical bytes.
FIGSIZE = (10.0, 6.0)
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def _points(track: str, data: dict) -> list[dict]:
    """A track's steps in ladder order, as measured in one results file: the current rows only
    (a stale or unmeasured step is absent, never zero)."""
    points = []
    for step in track_steps(track):
        row = data.get("rows", {}).get(step.id)
        if not row or results.is_stale(step, row):
            continue
        s = results.summarize(row)
        if s["hmean"] is None:
            continue
        points.append({"step": step.id, "number": step.number, "hmean": s["hmean"],
                       "range": list(s["hmean_range"]) if s["hmean_range"] else [s["hmean"], s["hmean"]],
                       "enabler": bool(step.info.enabler)})
    return points


def _gpu_name(data: dict, key: str) -> str:
    for record in [*data.get("rows", {}).values(), data.get("stock") or {}]:
        name = (record.get("provenance") or {}).get("gpu")
        if name:
            return name
    return key


def _stock(key: str, data: dict) -> dict | None:
    """The h-mean over seqlens of cuDNN's and FA2's fractions of FA4 in one file (``--stock``);
    a file recorded before FA2 was timed has no "fa2"."""
    bench = (data.get("stock") or {}).get("bench") or []
    if not bench:
        return None
    ref = {"gpu": _gpu_name(data, key), "file": f"results/{key}.json"}
    for name, field in (("cudnn", "cudnn_fraction"), ("fa2", "fa2_fraction")):
        if all(b.get(field) for b in bench):
            ref[name] = results.harmonic_mean(b[field] for b in bench)
    return ref


def plot_data() -> dict:
    """What ``draw`` draws, from results/*.json: per (track, results file that runs the track's
    own steps) the GPU and its measured points; the stock reference lines per file; the x axis
    (every step number of every track, with the ids at that number); the tracks with no file."""
    lines, unmeasured = [], {}
    for track in TRACKS:
        files = results.track_files(track)
        if not files:
            unmeasured[track] = NOT_RUN_B200 if track == "blackwell" else "not yet measured"
        for key, data in files.items():
            points = _points(track, data)
            if points:
                lines.append({"track": track, "gpu": _gpu_name(data, key), "file": f"results/{key}.json",
                              "points": points})
    stock = [ref for key, data in results.all_recorded().items() if (ref := _stock(key, data))]
    axis = {}
    for track in TRACKS:
        for step in track_steps(track):
            ids = axis.setdefault(step.number, [])
            if step.id not in ids:
                ids.append(step.id)
    return {"lines": lines, "stock": stock, "unmeasured": unmeasured,
            "axis": [{"number": n, "ids": ids} for n, ids in sorted(axis.items())]}


def recorded(out_dir: Path | None = None) -> dict | None:
    """The data the committed picture was drawn from (None if never drawn)."""
    path = Path(out_dir or IMG) / f"{NAME}.json"
    return json.loads(path.read_text()) if path.exists() else None


def stale(out_dir: Path | None = None) -> bool:
    """Whether the picture in ``out_dir`` was drawn from other data than results/*.json hold now."""
    return recorded(out_dir) != plot_data()


def draw(data: dict, out_dir: Path | None = None) -> list[Path]:
    """Write <out_dir>/ladder.svg, ladder.png and ladder.json (the data); return their paths."""
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.ticker import MultipleLocator
    except ImportError as e:
        raise ValueError(MISSING) from e
    out_dir = Path(out_dir or IMG)
    out_dir.mkdir(parents=True, exist_ok=True)
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=FIGSIZE, dpi=DPI)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        for i, line in enumerate(data["lines"]):
            c = COLOURS[i % len(COLOURS)]
            pts = line["points"]
            x, y = [], []
            for prev, p in zip([None, *pts[:-1]], pts, strict=True):
                if prev and p["number"] - prev["number"] > 1:       # an unmeasured step: the line breaks
                    x.append(float("nan"))
                    y.append(float("nan"))
                x.append(p["number"])
                y.append(p["hmean"])
            ax.plot(x, y, color=c, linewidth=1.8, zorder=3, label=f"{line['track'].capitalize()} track on {line['gpu']}")
            # The bar spans the processes' own h-means; the marker (h-mean of the per-seqlen medians)
            # may sit just outside it, so the bar is drawn about its own middle, not about the marker.
            mid = [(p["range"][0] + p["range"][1]) / 2 for p in pts]
            half = [(p["range"][1] - p["range"][0]) / 2 for p in pts]
            ax.errorbar([p["number"] for p in pts], mid, yerr=half, fmt="none", ecolor=c, capsize=4,
                        elinewidth=1.2, zorder=3)
            for p in pts:
                ax.plot([p["number"]], [p["hmean"]], marker="o", markersize=7, linestyle="none", zorder=6,
                        markeredgecolor=c, markeredgewidth=1.8, markerfacecolor="white" if p["enabler"] else c)
                if len(data["lines"]) > 1:            # values would sit on other lines' markers
                    continue
                ax.annotate(f"{p['hmean']:.2f}", (p["number"], max(p["range"][1], p["hmean"])), xytext=(0, 7),
                            textcoords="offset points", ha="center", fontsize=8.5, color=c, zorder=5,
                            bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none"})
        numbers = [a["number"] for a in data["axis"]] or [1]
        left, right = min(numbers) - 0.5, max(numbers) + 0.5
        ax.axhline(1.0, color="black", linewidth=1.4, zorder=2)
        ax.text(left + 0.1, 1.0, "FA4 (stock FlashAttention-4) = 1.0", va="bottom", fontsize=9)
        for ref in data["stock"]:
            c = "0.35"          # reference lines in grey: the GPU is in their label
            gpu = ref["gpu"].removeprefix("NVIDIA ")
            for name, label in (("cudnn", "cuDNN"), ("fa2", "FA2")):
                if name in ref:
                    ax.axhline(ref[name], color=c, linestyle="--", linewidth=1.1, alpha=0.8, zorder=1)
                    ax.text(left + 0.1, ref[name], f"{label} on {gpu}: {ref[name]:.2f}", va="bottom",
                            fontsize=9, color=c)
        top = max([1.0, *(p["range"][1] for line in data["lines"] for p in line["points"])])
        ax.set_ylim(0, top * 1.08)
        ax.set_xlim(left, right)
        ax.yaxis.set_major_locator(MultipleLocator(0.1))
        ax.set_xticks(numbers)
        ax.set_xticklabels([" / ".join(a["ids"]) for a in data["axis"]] or ["01"], fontsize=9)
        ax.grid(axis="y", color="0.9", zorder=0)
        unmeasured = sorted(data["unmeasured"])
        ax.set_xlabel("ladder step" + (f" (no line for the {' and '.join(t.capitalize() for t in unmeasured)} track: not measured)"
                                        if unmeasured else ""))
        ax.set_ylabel("fraction of stock FA4 (harmonic mean over seqlen 4k/8k/16k)")
        ax.set_title("attention-ladder: each step's speed as a fraction of stock FlashAttention-4")
        handles, labels = ax.get_legend_handles_labels()
        handles += [Line2D([], [], marker="o", linestyle="none", color="0.3", markerfacecolor="0.3"),
                    Line2D([], [], marker="o", linestyle="none", color="0.3", markerfacecolor="white"),
                    Line2D([], [], color="0.3", marker="|", markersize=12, linestyle="none")]
        labels += ["step (filled marker)", "enabler step (hollow marker): may stay flat",
                   "bar: lowest to highest h-mean of a single process"]
        ax.legend(handles, labels, loc="lower right", fontsize=9, framealpha=0.95)
        if data["unmeasured"]:
            note = "; ".join(f"{t.capitalize()} track: {why}" for t, why in sorted(data["unmeasured"].items()))
            ax.text(0.99, 0.985, note, transform=ax.transAxes, ha="right", va="top", fontsize=8.5,
                    style="italic", color="0.35")
        fig.tight_layout()
        svg, png = out_dir / f"{NAME}.svg", out_dir / f"{NAME}.png"
        fig.savefig(svg, format="svg", metadata={"Date": None})
        fig.savefig(png, format="png", metadata={"Date": None})
    path = out_dir / f"{NAME}.json"
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return [svg, png, path]
