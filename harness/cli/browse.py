"""Reading the ladder: ``ladder list``, ``ladder explain``, ``ladder diff``."""

from __future__ import annotations

import difflib
import sys

from rich.markdown import Markdown
from rich.syntax import Syntax
from rich.table import Table

from harness.cli.common import console, recorded_summary
from harness.core.paths import ROOT
from harness.core.steps import discover, predecessor, resolve, track_steps
from harness.report.code_diff import changed_lines, code_diff, display_path


# ---------------------------------------------------------------------------------------- list
def cmd_list(args) -> int:
    table = Table(title="attention-ladder steps (fraction of FA4 = harmonic mean over 4k/8k/16k)")
    for col in ("step", "track", "change", "enabler", "archs", "last recorded"):
        table.add_column(col)
    for step in track_steps(args.track) if args.track else discover():
        info = step.info
        table.add_row(step.id, "/".join(step.tracks), info.change, "yes" if info.enabler else "",
                      ", ".join(info.archs), recorded_summary(step))
    console.print(table)
    return 0


# ----------------------------------------------------------------------------------------- diff
def cmd_diff_stat(args) -> int:
    """Each consecutive pair's code-only diff size: what a reader of ``ladder diff --code`` faces."""
    table = Table(title="code lines changed, step against its predecessor (docstrings and comments stripped)")
    for col in ("step", "against", "changed lines", "with re-indentation"):
        table.add_column(col, justify="right" if col != "step" and col != "against" else "left")
    for step in track_steps(args.track) if args.track else discover():
        prev = predecessor(step)
        if prev is None:
            continue
        table.add_row(step.id, prev.id, str(changed_lines(code_diff(prev.path, step.path))),
                      str(changed_lines(code_diff(prev.path, step.path, whitespace=True))))
    console.print(table)
    return 0


def cmd_diff(args) -> int:
    if args.stat:
        return cmd_diff_stat(args)
    if not args.a:
        console.print("[red]ladder diff: name a step (or use --stat)[/red]")
        return 2
    if args.b:
        a, b = resolve(args.a), resolve(args.b)
    else:
        b = resolve(args.a)
        a = predecessor(b)
        if a is None:
            code = " --code" if args.code else ""
            console.print(f"{b.id} has no predecessor: it is where the ladder starts. "
                          f"Try `ladder diff{code} {b.id} <step>`.")
            return 0
    if args.code:
        text = code_diff(a.path, b.path, whitespace=args.whitespace, within=args.within or ())
    else:
        lines = difflib.unified_diff(a.path.read_text().splitlines(keepends=True),
                                     b.path.read_text().splitlines(keepends=True),
                                     fromfile=display_path(a.path), tofile=display_path(b.path))
        text = "".join(lines)
    if not text:
        console.print("(identical code: the two files differ at most in docstrings and comments)" if args.code
                      else "(identical)")
    elif sys.stdout.isatty():
        console.print(Syntax(text, "diff", theme="ansi_dark", word_wrap=False))
    else:
        sys.stdout.write(text)
    return 0


# -------------------------------------------------------------------------------------- explain
def cmd_explain(args) -> int:
    step = resolve(args.step)
    if not step.writeup.exists():
        console.print(f"[red]no writeup for {step.id} at {step.writeup.relative_to(ROOT)}[/red]")
        return 1
    console.print(Markdown(step.writeup.read_text()))
    return 0


def add_commands(sub) -> None:
    s = sub.add_parser("list", help="every step, its change, enabler flag, last recorded fraction of FA4")
    s.add_argument("--track", choices=("hopper", "blackwell"))
    s.set_defaults(fn=cmd_list)
    s = sub.add_parser("diff", help="unified diff of a step against its predecessor (or any other step)")
    s.add_argument("a", nargs="?")
    s.add_argument("b", nargs="?")
    s.add_argument("--stat", action="store_true",
                   help="every step's code-only diff size against its predecessor (with --track: one track)")
    s.add_argument("--track", choices=("hopper", "blackwell"))
    s.add_argument("--code", action="store_true",
                   help="code lines only: docstrings and comments stripped, re-indentation ignored")
    s.add_argument("--in", dest="within", nargs="+", metavar="FUNCTION",
                   help="with --code: only the hunks that change a line inside these functions")
    s.add_argument("--whitespace", action="store_true",
                   help="with --code: show lines whose indentation or spacing changed as changes too")
    s.set_defaults(fn=cmd_diff)
    s = sub.add_parser("explain", help="render a step's writeup in the terminal")
    s.add_argument("step")
    s.set_defaults(fn=cmd_explain)
