"""The generated parts of the writeups: ``ladder writeups`` (every block, the plot, the timeline
pictures, the figures drawn from the steps' layouts, the life-of-a-tile pictures) and ``ladder plot``."""

from __future__ import annotations

from harness.cli.common import console, shown
from harness.core.paths import ROOT
from harness.report import figure_draw, plot, tile_life, timeline_draw, writeups


def cmd_writeups(args) -> int:
    stale_timelines = [s for s in timeline_draw.drawable() if timeline_draw.stale(s)]
    stale_figures = [name for name in figure_draw.names() if figure_draw.stale(name)]
    stale_lives = [s for s in tile_life.drawable() if tile_life.stale(s)]
    if args.check:
        stale = writeups.stale()
        for p in stale:
            console.print(f"[red]stale generated block in {p.relative_to(ROOT)}[/red]")
        plot_stale = plot.stale()
        if plot_stale:
            console.print(f"[red]stale plot: {shown(plot.IMG)}/{plot.NAME}.json differs from results/*.json "
                          "(`ladder plot` redraws it)[/red]")
        for s in stale_timelines:
            console.print(f"[red]stale timeline picture of {s.id} (`ladder timeline {s.id}` redraws it)[/red]")
        for name in stale_figures:
            console.print(f"[red]stale figure {shown(figure_draw.paths(name)[0])} (`ladder writeups` redraws it)[/red]")
        for s in stale_lives:
            console.print(f"[red]stale life-of-a-tile picture {shown(tile_life.paths(s.id)[0])} "
                          "(`ladder writeups` redraws it)[/red]")
        return 1 if stale or plot_stale or stale_timelines or stale_figures or stale_lives else 0
    for path in writeups.documents():
        if path.exists() and writeups.refresh(path):
            console.print(f"refreshed {path.relative_to(ROOT)}")
    if plot.stale():
        for path in plot.draw(plot.plot_data()):
            console.print(f"redrew {shown(path)}")
    for step in stale_timelines:
        for path in timeline_draw.draw(step, *timeline_draw.source_for(step)):
            console.print(f"redrew {shown(path)}")
    for name in stale_figures:
        for path in figure_draw.draw(name):
            console.print(f"redrew {shown(path)}")
    for step in stale_lives:
        for path in tile_life.draw(step):
            console.print(f"redrew {shown(path)}")
    return 0


def cmd_plot(args) -> int:
    for path in plot.draw(plot.plot_data(), args.out):
        console.print(f"wrote {shown(path)}")
    return 0


def add_commands(sub) -> None:
    s = sub.add_parser("writeups", help="refresh the generated result blocks in writeups/ and README.md, "
                                        "and redraw the ladder plot if its data changed")
    s.add_argument("--check", action="store_true", help="only report stale blocks and plot (exit 1 if any)")
    s.set_defaults(fn=cmd_writeups)
    s = sub.add_parser("plot", help="draw writeups/img/ladder.svg/.png (+ .json, its data) from results/*.json")
    s.add_argument("--out", metavar="DIR", help="write here instead of writeups/img")
    s.set_defaults(fn=cmd_plot)
