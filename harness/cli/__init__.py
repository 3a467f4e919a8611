"""``ladder``: the one entry point. Each module of this package holds a few commands and the parser
lines that add them (``add_commands``); a new command goes into the module whose commands it is
like, or into a new module listed in ``COMMAND_MODULES``.

- browse: list, explain, diff (reading the ladder)
- compiled: sass, bound (what a CPU proves from the compiled kernels)
- measure: run, table, selfcheck (a GPU's numbers; on a CPU, the compile table)
- evidence: profile, accuracy, timeline (what a writeup's claims rest on)
- docs: writeups, plot (the generated parts of the writeups)
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from harness.cli import browse, carry, compiled, docs, evidence, measure
from harness.cli.common import console

COMMAND_MODULES = (browse, compiled, measure, evidence, carry, docs)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ladder", description="attention-ladder: read, compile, measure and "
                                "document the ladder's FlashAttention steps (`ladder <command> -h` for each).")
    sub = p.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.add_commands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    # Children record the command that asked for the numbers, not their own argv.
    os.environ.setdefault("LADDER_COMMAND", shlex.join(["ladder", *argv]))
    try:
        return args.fn(args)
    except ValueError as e:
        console.print(f"[red]{e}[/red]")
        return 2
