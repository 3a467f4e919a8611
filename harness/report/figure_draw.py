"""The explanatory figures as pictures: writeups/img/fig-<name>.svg and .png, drawn from the data
harness/report/figure_data.py reads off the steps' layouts, and that data kept beside them as .json,
so ``ladder writeups`` can tell a stale picture by its data (as harness/report/plot.py does).
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.report.figure_data import FIGURES, figure_data, split_axes
from harness.report.figures import DPI, IMG, MISSING, RC

WARP = 32
WARP_COLOURS = ("#aec7e8", "#ffbb78", "#98df8a", "#ff9896")
SLOT_COLOURS = ("#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5")
CTA_COLOURS = ("#9ecae1", "#fdae6b")
Q_TILE_COLOURS = (("#c6dbef", "#6baed6"), ("#fdd0a2", "#fd8d3c"))    # per Q tile: (S, O)


def names() -> list[str]:
    return list(FIGURES)


def paths(name: str, out_dir: Path | None = None) -> tuple[Path, Path, Path]:
    base = Path(out_dir or IMG) / f"fig-{name}"
    return base.with_suffix(".svg"), base.with_suffix(".png"), base.with_suffix(".json")


def recorded(name: str, out_dir: Path | None = None) -> dict | None:
    """The data the committed picture was drawn from (None if never drawn)."""
    path = paths(name, out_dir)[2]
    return json.loads(path.read_text()) if path.exists() else None


def stale(name: str, out_dir: Path | None = None) -> bool:
    return recorded(name, out_dir) != figure_data(name)


def _cells(ax, grid, colour, text, fontsize):
    """A grid of labelled cells, row 0 at the top: ``colour(i, j)`` and ``text(i, j)`` per cell. The
    colours are one image, not a patch per cell: the SVG stays small."""
    from matplotlib.colors import to_rgb
    rows, cols = len(grid), len(grid[0])
    ax.imshow([[to_rgb(colour(i, j)) for j in range(cols)] for i in range(rows)], extent=(0, cols, rows, 0),
              interpolation="none", aspect="auto")
    ax.hlines(range(1, rows), 0, cols, colors="white", linewidth=0.5)
    ax.vlines(range(1, cols), 0, rows, colors="white", linewidth=0.5)
    for i in range(rows):
        for j in range(cols):
            ax.text(j + 0.5, i + 0.5, text(i, j), ha="center", va="center", fontsize=fontsize)
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.tick_params(length=0)


def _wgmma(fig, data):
    owner = data["owner"]
    rows, cols = len(owner), len(owner[0])
    ax = fig.add_axes((0.08, 0.065, 0.75, 0.855))
    _cells(ax, owner, lambda i, j: WARP_COLOURS[owner[i][j][0] // WARP % len(WARP_COLOURS)],
           lambda i, j: f"T{owner[i][j][0]} d{owner[i][j][1]}", 5.8)
    ax.set_xticks([c + 0.5 for c in range(cols)], [str(c) for c in range(cols)], fontsize=7)
    ax.set_yticks([r + 0.5 for r in range(rows)], [str(r) for r in range(rows)], fontsize=5.5)
    ax.xaxis.tick_top()
    ax.set_xlabel(f"column of S (key), 0-{cols - 1} of {data['tile'][1]}", fontsize=9)
    ax.xaxis.set_label_position("top")
    ax.set_ylabel("row of S (query)", fontsize=9)
    from matplotlib.patches import Rectangle
    for i, row in enumerate(owner):          # thread 0's registers, framed
        for j, (t, _) in enumerate(row):
            if t == 0:
                ax.add_patch(Rectangle((j, i), 1, 1, fill=False, edgecolor="black", linewidth=1.6))
    for w in range(data["threads"] // WARP):
        first = next(i for i, row in enumerate(owner) if row[0][0] // WARP == w)
        last = max(i for i, row in enumerate(owner) if row[0][0] // WARP == w)
        ax.axhline(first, color="black", linewidth=1.2)
        ax.text(cols + 0.4, (first + last + 1) / 2, f"warp {w}\nthreads {WARP * w}-{WARP * w + WARP - 1}\nrows {first}-{last}",
                va="center", fontsize=8.5)
    fig.suptitle(f"{data['step']}: which thread (T) and which of its accumulator registers (d) holds each element "
                 f"of S = Q K^T\n(one warpgroup, wgmma m{data['tile'][0]}n{data['tile'][1]}k16, fp32; "
                 f"{data['registers']} registers per thread; the first {cols} of {data['tile'][1]} columns)",
                 fontsize=9.5)
    fig.text(0.08, 0.012, f"Thread 0's registers framed. Thread t = 32 w + l (warp w, lane l), register d(4 k + 2 i + j) "
             f"with i, j in {{0, 1}}, k = 0..{data['tile'][1] // 8 - 1},\nholds S[16 w + l / 4 + 8 i, 8 k + 2 (l % 4) + j] "
             "(l / 4 rounded down): the PTX ISA's wgmma accumulator (D) fragment.", fontsize=8)


def _swizzle(fig, data):
    rows, slots = len(data["before"]), len(data["before"][0])
    for k, (key, title) in enumerate((("before", "without the swizzle: plain 128-byte rows (the layout's outer part)"),
                                      ("after", f"with Swizzle<{','.join(map(str, data['swizzle']))}> on the byte address"))):
        grid = data[key]
        ax = fig.add_axes((0.07 + 0.47 * k, 0.22, 0.42, 0.62))
        _cells(ax, grid, lambda i, j, g=grid: SLOT_COLOURS[g[i][j] % len(SLOT_COLOURS)],
               lambda i, j, g=grid: f"slot {g[i][j]}\nbanks {4 * g[i][j]}-{4 * g[i][j] + 3}", 6.5)
        from matplotlib.patches import Rectangle
        ax.add_patch(Rectangle((0, 0), 1, rows, fill=False, edgecolor="black", linewidth=2.2))
        ax.set_xticks([c + 0.5 for c in range(slots)], [f"{8 * c}-{8 * c + 7}" for c in range(slots)], fontsize=7)
        ax.set_yticks([r + 0.5 for r in range(rows)], [str(r) for r in range(rows)], fontsize=8)
        ax.set_xlabel(f"{data['chunk_bytes']}-byte chunk of the row: columns (bf16)", fontsize=8.5)
        ax.set_ylabel("row", fontsize=8.5)
        ax.set_title(title, fontsize=9.5)
        column = [row[0] for row in grid]
        busiest = max(column.count(s) for s in column)
        ax.text(0, rows + 1.5, f"8 threads reading columns 0-7 of rows 0-{rows - 1} (framed) hit {len(set(column))} bank "
                f"group{'s' * (len(set(column)) > 1)}: {busiest} wavefront{'s' * (busiest > 1)}", fontsize=8.5, va="top")
    fig.suptitle(f"Where each {data['chunk_bytes']}-byte chunk of a {data['row_bytes']}-byte smem row lands "
                 f"(slot s = banks 4s..4s+3), from {', '.join(data['layouts'])}", fontsize=10)


def _tmem(fig, data):
    from matplotlib.patches import Rectangle
    ax = fig.add_axes((0.16, 0.16, 0.81, 0.66))
    lanes, cols = data["lanes"], data["columns"]
    quarters = sorted({tuple(w["lanes"]) for w in data["warps"]})
    box = {"boxstyle": "round,pad=0.25", "facecolor": "white", "edgecolor": "none", "alpha": 0.85}
    for label, (start, width) in data["regions"].items():
        tile = int(label[1:])
        colour = Q_TILE_COLOURS[tile % len(Q_TILE_COLOURS)][label[0] == "O"]
        ax.add_patch(Rectangle((start, 0), width, lanes, facecolor=colour, edgecolor="black", linewidth=1))
        readers = [w["warp"] for w in data["warps"] if w["q_tile"] == tile]
        ax.text(start + width / 2, sum(quarters[-2]) / 2, f"{label}: {label[0]} of Q tile {tile}, fp32\ncolumns "
                f"{start}-{start + width - 1}\nread by warps {readers[0]}-{readers[-1]}", ha="center", va="center",
                fontsize=8, bbox=box, zorder=4)
    for label, (inside, start, width) in data["aliases"].items():
        ax.add_patch(Rectangle((start, 0), width, lanes, fill=False, hatch="//", edgecolor="0.3", linewidth=1))
        ax.text(start + width / 2, sum(quarters[0]) / 2, f"{label}: bf16 P\nover {inside} (2 per\ncolumn), cols "
                f"{start}-{start + width - 1}:\nA operand of P V", ha="center", va="center", fontsize=7, bbox=box,
                zorder=4)
    for first, end in quarters:
        ax.axhline(first, color="black", linewidth=0.8, linestyle="--", zorder=3)
        warps = [str(w["warp"]) for w in data["warps"] if tuple(w["lanes"]) == (first, end)]
        ax.text(-8, (first + end) / 2, f"lanes {first}-{end - 1}\nwarps {', '.join(warps)}", ha="right", va="center",
                fontsize=8)
    ax.set_xlim(0, cols)
    ax.set_ylim(lanes, 0)
    ax.set_xticks(range(0, cols + 1, 64))
    ax.set_yticks([])
    ax.set_xlabel("TMEM column (32 bits each)", fontsize=9)
    fig.suptitle(f"{data['step']}: {data['title']}. Tensor memory: {lanes} lanes (lane i = row i of a Q tile) x {cols} "
                 f"columns.\nA warp's tcgen05.ld reaches only its lane quarter: warp w reads lanes 32 (w % 4)..+31; "
                 f"the regions of Q tile g are read by warpgroup g.", fontsize=9.5)


def _part_label(op, box) -> str:
    return "\n".join(f"{axis}s\n{a}-{b}" for axis, a, b in split_axes(op, box)) or "all"


def _two_cta(fig, data):
    from matplotlib.patches import Rectangle
    ax = fig.add_axes((0.01, 0.02, 0.98, 0.84))
    ops, gap, x = data["operands"], 64, 0
    roles = {"A": "A", "B": "B", "C": "accumulator"}
    gemm = {"qk": "S = Q K^T", "pv": "O += P V"}
    for op in ops:
        name = op["name"]
        rows, cols = op["shape"]
        for v, (r0, r1, c0, c1) in enumerate(op["parts"]):
            ax.add_patch(Rectangle((x + c0, r0), c1 - c0, r1 - r0, facecolor=CTA_COLOURS[v], edgecolor="black",
                                   linewidth=1))
            ax.text(x + (c0 + c1) / 2, (r0 + r1) / 2, f"CTA {v}\n{_part_label(op, (r0, r1, c0, c1))}",
                    ha="center", va="center", fontsize=8)
        ax.text(x + cols / 2, -10, f"{name}: {roles[op['role']]} of {gemm[op['mma']]}\n{rows} {op['axes'][0]}s x {cols} "
                f"{op['axes'][1]}s\nin each CTA's {op['memory']}", ha="center", va="bottom", fontsize=8)
        x += cols + gap
    ax.set_xlim(-32, x - gap + 32)
    ax.set_ylim(data["mma_m"] + 4, -70)
    ax.set_axis_off()
    fig.suptitle(f"{data['step']}: one 2-CTA MMA (tcgen05.mma.cta_group::2, M = {data['mma_m']}) split between the "
                 f"pair. Each CTA holds its own {data['tile_m']} rows of Q, S, P and O and half of K and V;\nthe "
                 "leader (CTA 0) issues the MMA, and each SM's tensor core reads the K/V halves from both SMs.",
                 fontsize=9.5)


DRAW = {"wgmma": (_wgmma, (9.6, 12.0)), "swizzle": (_swizzle, (11.0, 5.0)), "tmem": (_tmem, (11.0, 4.2)),
        "two-cta": (_two_cta, (12.0, 4.6))}


def draw(name: str, out_dir: Path | None = None) -> list[Path]:
    """Write fig-<name>.svg, .png and .json (the data) into ``out_dir``; return their paths."""
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ValueError(MISSING) from e
    data = figure_data(name)
    svg, png, json_path = paths(name, out_dir)
    svg.parent.mkdir(parents=True, exist_ok=True)
    painter, size = DRAW[data["kind"]]
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=size, dpi=DPI)
        FigureCanvasAgg(fig)
        painter(fig, data)
        fig.savefig(svg, format="svg", metadata={"Date": None})
        fig.savefig(png, format="png", metadata={"Date": None})
    json_path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return [svg, png, json_path]
