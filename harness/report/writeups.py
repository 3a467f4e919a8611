"""Generated blocks in the writeups and the README: numbers come from results/*.json and from the
compiler, never from a hand. ``ladder writeups`` refreshes them; a CPU test fails when one is stale.
This module finds the blocks, renders each by its kind and tells a stale one; the kinds live in
harness/report/blocks_*.py, each module's ``BLOCKS`` naming its own.

    <!-- ladder:begin results 01 -->   ...generated...   <!-- ladder:end -->

Kinds: ``results <step>``, ``sass <step> [<against>]``, ``table <track>``, ``stock``,
``profile <step>``, ``experiments <base step>``, ``compare <a> <b>`` (steps or exp:names), ``checks``, ``check <step>`` (one step's recorded selfchecks),
``code <step> [<against>]`` (the code diff against the predecessor, docstrings and comments stripped),
``excerpt <step> <function>...`` (the hunks of that diff inside the named functions),
``smem <step> ...`` (the smem store model against ncu's counters, per recorded profile),
``stores <step> ...`` (the model's cost of each thread-issued smem store, per warp instruction),
``banks <step> <store>`` (which banks one warp store hits, per quarter-warp), ``tmem <step>`` (TMEM columns),
``budget <step> ...`` (the softmax's main-loop instructions per score element, by class, from the SASS),
``accuracy <step>`` (the measured error of the step's FMA-pipe exp2 emulation, ``ladder accuracy``),
``bound hopper`` (the bound model against every measured Hopper step), ``timeline <step>`` (the
step's measured timeline, or for a Blackwell step without a B200 run its simulation),
``timeline-check hopper`` (measured against simulated cycles per tile), ``roles <step>``
(registers, spills and telling instructions of each setmaxnreg region of the SASS), ``figure <name>``
(a picture drawn from a step's own layouts, with its caption: harness/report/blocks_figures.py) and
``life <step>`` (the life of one work tile, simulated, lane by lane: harness/report/tile_life.py).
"""

from __future__ import annotations

import re
from pathlib import Path

from harness.core.paths import ROOT
from harness.report import blocks_compiled, blocks_figures, blocks_measured, blocks_model, blocks_profile, tile_life

# Every kind of block, by the module that renders it: a new kind is a function in one of them and a
# line in its BLOCKS.
BLOCKS = {**blocks_measured.BLOCKS, **blocks_profile.BLOCKS, **blocks_compiled.BLOCKS, **blocks_model.BLOCKS,
          **blocks_figures.BLOCKS, **tile_life.BLOCKS}
BLOCK = re.compile(r"(<!-- ladder:begin ([^>]*?) -->\n)(.*?)(<!-- ladder:end -->)", re.S)


def render(spec: str) -> str:
    """One generated block from its spec: the kind, then its arguments (``sass b03 b02``)."""
    kind, *args = spec.split()
    if kind not in BLOCKS:
        raise ValueError(f"unknown generated block kind {kind!r}")
    return BLOCKS[kind](*args)


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "writeups").rglob("*.md"))]


# ptxas does not always allocate the same number of registers for the same PTX (seen on this
# machine: b05's identical PTX compiled to 186 or 196 registers from run to run, every mechanism
# count of its SASS table unchanged). With the registers, the moves and address instructions around
# them move too: in the softmax budget, the "other" class, the totals built on it and the loop's
# length. A block that differs only in those lines is not stale, and is not rewritten: otherwise
# every `ladder writeups` would flip them and CI would flake. The floating-point and MUFU classes
# of the budget, and every other row, are compared exactly.
VOLATILE_ROW = re.compile(r"^\|\s*(registers / thread|other|\*\*total\*\*[^|]*|of which in conditional blocks|"
                           r"largest 'other' opcodes|main loop \(instructions\))\s*\|.*$"
                           r"|^\w+ \(compiled, not yet run on a B200\): issue .*$", re.M)


# The bound model's numbers (harness/report/bound_report.py) rest on issue counts, which move with the
# registers for the reason above: a model number, its binding unit and the check's summary are not
# compared either. In a row of the bound check (step | measured | predicted | binds | profile
# columns) only the predicted and binds cells are: the measured and profiled ones are compared.
VOLATILE_MODEL = re.compile(r"\d+\.\d+ \(model[^|\n]*|binds on: [^.]*"
                             r"|^\|[^\n]*\(simulated\)[^\n]*$|^Simulated \(B200 unit rates[^\n]*$", re.M)
BOUND_ROW = re.compile(r"^(\| \w+ +\| [0-9.]+ +\| )[^|\n]*\(model\)[^|\n]*\|[^|\n]*\|(.*)$", re.M)


def settled(text: str) -> str:
    text = VOLATILE_ROW.sub("(as compiled)", text)
    text = BOUND_ROW.sub(lambda m: m.group(1) + "(model) | (model) |" + m.group(2), text)
    return VOLATILE_MODEL.sub("(model)", text)


def refresh(path: Path, write: bool = True) -> bool:
    """Regenerate every block in ``path``; return True if anything changed (beyond the volatile
    registers row, see VOLATILE_ROW)."""
    text = path.read_text()
    new = BLOCK.sub(lambda m: m.group(1) + render(m.group(2)) + m.group(4), text)
    changed = settled(new) != settled(text)
    if changed and write:
        path.write_text(new)
    return changed


def stale() -> list[Path]:
    return [p for p in documents() if p.exists() and refresh(p, write=False)]
