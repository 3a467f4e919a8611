"""The life-of-a-tile picture drawn from its data (harness/report/tile_life.py): lanes top to bottom,
time left to right, a bar per phase, copy and wait, an arrow per hand-off, bands for the start-up,
the steady state and the drain. Same data, same bytes (harness/report/figures.py)."""

from __future__ import annotations

from pathlib import Path

from harness.model.bound import HANDOFF, LOAD_LATENCY
from harness.report.figures import DPI, MISSING, RC

COLOURS = {"qk": "#1f77b4", "pv": "#2ca02c", "softmax": "#ff7f0e", "work": "#9467bd", "wait": "#d0d0d0",
           "copy": "#9ecae1", "transfer": "#08519c", "epilogue": "#8c564b"}
LEGEND = {"qk": "S = Q K^T", "pv": "O += P V", "softmax": "softmax",
          "work": "work the model does not time (O rescale, correction, P to bf16): a tick",
          "wait": "waiting on a barrier", "copy": "TMA copy in flight (dark: its bytes landing)",
          "epilogue": "epilogue (O / row sum, store)"}
ARROWS = {"copy": ("#08519c", "a copy's bytes land"), "arrive": ("#d62728", "a warp arrives"),
          "commit": ("#2ca02c", "a tcgen05.commit arrives (the GEMMs issued before it are done)")}
GEMMS = {False: "wgmma: issue to wait_group", True: "MMA warp: a tick at its issue; tensor pipe: its run"}
ROW = {1: 0.8, 3: 0.42}        # a lane's row height by its row count; TMA rows: COPY_ROW
COPY_ROW = 0.3
GAP = 0.3


def _layout(lanes) -> tuple[list[list[float]], list[float], float]:
    """Each row's centre (y grows downwards), each lane's centre, the total height."""
    y, centres, mids = 0.0, [], []
    for lane in lanes:
        h = COPY_ROW if lane["name"].startswith("TMA") else ROW.get(len(lane["rows"]), 0.42)
        rows = [y + h * (i + 0.5) for i in range(len(lane["rows"]))]
        centres.append(rows)
        mids.append(y + h * len(lane["rows"]) / 2)
        y += h * len(lane["rows"]) + GAP
    return centres, mids, y - GAP


def _bands(data: dict, end: float) -> list[tuple[str, float, float]]:
    """Start-up (until the first S is computed), steady state (until the last S is), drain."""
    qk = [b for lane in data["lanes"] if lane["name"] != "TMA copies (in flight)" for b in lane["bars"]
          if b[1] == "qk"]
    first, last = min(b[3] for b in qk), max(b[4] for b in qk)
    return [("start-up", 0, first), ("steady state", first, last), ("drain", last, end)]


def draw(data: dict, svg: Path, png: Path) -> None:
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
    except ImportError as e:
        raise ValueError(MISSING) from e
    svg.parent.mkdir(parents=True, exist_ok=True)
    lanes = data["lanes"]
    centres, mids, height = _layout(lanes)
    end = max(b[4] for lane in lanes for b in lane["bars"])
    k = 1000.0
    tick = end * 0.003                           # an instantaneous phase stays visible
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(15.0, 2.2 + 0.78 * height), dpi=DPI)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        for name, b, e in _bands(data, end):
            ax.axvspan(b / k, e / k, color={"steady state": "#f4f4f4"}.get(name, "#fbf3e4"), zorder=0)
            ax.text((b + e) / 2 / k, -0.18, name, ha="center", va="bottom", fontsize=9, color="0.3")
        kinds = set()
        for lane, rows in zip(lanes, centres, strict=True):
            h = COPY_ROW if lane["name"].startswith("TMA") else ROW.get(len(rows), 0.42)
            for row, kind, text, b, e in lane["bars"]:
                kinds.add(kind)
                y, bh = rows[row], h * 0.8
                width = max(e - b, tick)
                if kind == "copy":
                    transfer = min(data["durations"]["copy"], e - b)
                    ax.broken_barh([(b / k, (e - b - transfer) / k)], (y - bh / 4, bh / 2), facecolors=COLOURS["copy"])
                    ax.broken_barh([((e - transfer) / k, transfer / k)], (y - bh / 2, bh),
                                   facecolors=COLOURS["transfer"])
                    ax.text((e - transfer) / k, y, text + " ", ha="right", va="center", fontsize=6.5)
                    continue
                if e == b and kind == "wait":
                    continue            # passed at once: its barrier's phase had completed
                if e == b:              # an instantaneous phase (an issue, untimed work): a tick on top
                    ax.plot([b / k, b / k], [y - bh / 2, y + bh / 2], color=COLOURS[kind], lw=2.2, zorder=5,
                            solid_capstyle="butt")
                    continue
                ax.broken_barh([(b / k, width / k)], (y - bh / 2, bh), facecolors=COLOURS[kind],
                               edgecolors="white", linewidth=0.5, zorder=2)
                size = 6.5 if kind == "wait" else 7
                if width > end * 0.0065 * size / 7 * len(text):
                    ax.text((b + width / 2) / k, y, text, ha="center", va="center", fontsize=size, zorder=3,
                            color="white" if kind in ("qk", "pv", "epilogue") else "black")
                elif kind == "epilogue":
                    ax.text(e / k, y, " epilogue", ha="left", va="center", fontsize=7, zorder=3)
            if len(rows) > 1:
                for name, y in zip(lane["rows"], rows, strict=True):
                    ax.text(1.004, y, name, ha="left", va="center", fontsize=6.5, color="0.35",
                            transform=ax.get_yaxis_transform())
        for kind, lane0, row0, t0, lane1, row1, t1, _ in waited_for(data):
            ax.annotate("", xy=(t1 / k, centres[lane1][row1]), xytext=(t0 / k, centres[lane0][row0]),
                        arrowprops={"arrowstyle": "-|>", "color": ARROWS[kind][0], "lw": 0.9, "alpha": 0.85,
                                    "mutation_scale": 7, "shrinkA": 0, "shrinkB": 0}, zorder=4)
        ax.set_yticks(mids)
        ax.set_yticklabels([lane["name"] for lane in lanes], fontsize=9)
        ax.set_ylim(height + 0.1, -0.3)
        ax.set_xlim(0, end / k * 1.05)
        ax.set_xlabel("thousands of SM cycles from the roles' start (after the barrier init and the CTA barrier)")
        ax.grid(axis="x", color="0.9", zorder=0)
        d = data["durations"]
        fig.suptitle(f"{data['step']}: {data['title']}: the life of one work tile (one CTA's query tile) "
                     f"over {data['n_blocks']} K/V tiles; (j) = K/V tile j", fontsize=11)
        ax.set_title(f"{data['label']}.\nUnit cycles ({data['gpu'].upper()}): one Q tile's GEMM {d['gemm']:,.0f}, "
                     f"a softmax tile {d['softmax']:,.0f}, a 32 KB copy {d['copy']:,.0f} after "
                     f"{LOAD_LATENCY} of latency, a hand-off {HANDOFF}. Arrows: the hand-offs a warp waited for.",
                     fontsize=8.5, style="italic", color="#b00000", pad=16)
        gemm = GEMMS[any(lane["name"] == "tensor pipe" for lane in lanes)]
        handles = [Patch(facecolor=COLOURS[c], label=LEGEND[c] + (f" ({gemm})" if c in ("qk", "pv") else ""))
                   for c in LEGEND if c in kinds]
        handles += [Line2D([], [], color=c, lw=1, label=f"hand-off: {text}") for kind, (c, text) in ARROWS.items()
                    if any(h[0] == kind for h in waited_for(data))]
        fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=7.5, frameon=False)
        fig.tight_layout(rect=(0, 0.12 * 8 / (height + 3), 1, 1))
        fig.savefig(svg, format="svg", metadata={"Date": None})
        fig.savefig(png, format="png", metadata={"Date": None})


def waited_for(data: dict) -> list:
    """The hand-offs drawn: those completed while their warp was waiting. One completed before the
    wait began (a K/V tile that landed ahead of its use: the pipeline doing its job) has no arrow."""
    out = []
    for h in data["handoffs"]:
        t0, begin = h[3], h[6]
        if t0 >= begin:
            out.append(h[:6] + h[7:])
    return out
