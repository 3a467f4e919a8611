"""The timeline markers of a kernel: comment lines that name where each phase of a K/V tile begins
and ends, and what kind of work a phase name stands for.

    # timeline: softmax begin
    ...
    # timeline: softmax end

harness/timeline/probes.py turns them into cycle-counter probes, harness/timeline/simulate.py into the events
of a simulation; harness/core/experiments.py drops them before applying its text edits. They are
comments, so the compiled step and its code hash never see them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MARKER = re.compile(r"^(?P<indent>[ \t]*)# timeline(?:\((?P<tile>[^)]+)\))?: (?P<phase>\S.*?) (?P<edge>begin|end)[ \t]*$")
QK = re.compile(r"^(QK\^T|S\d+)$")        # S = Q K^T of one Q tile (Hopper: QK^T; Blackwell: S0, S1)
PV = re.compile(r"^(PV|O\d+)$")           # O += P V of one Q tile


@dataclass(frozen=True)
class Marker:
    line: int             # 1-based, in the step file
    indent: str
    phase: str            # as written, possibly with {g}
    edge: int             # 0 begin, 1 end
    tile: str = "n_block"  # the K/V tile the phase belongs to, an expression in the kernel


def markers(source: str) -> list[Marker]:
    found = []
    for i, text in enumerate(source.splitlines(), 1):
        m = MARKER.match(text)
        if m:
            found.append(Marker(i, m["indent"], m["phase"], 0 if m["edge"] == "begin" else 1,
                                m["tile"] or "n_block"))
    return found


def without_markers(source: str) -> str:
    """The source with its marker lines removed (the same code: markers are comments)."""
    return "".join(line for line in source.splitlines(keepends=True) if not MARKER.match(line))


def phase_kind(name: str) -> str:
    """``qk``, ``pv`` (a GEMM of one Q tile), ``softmax``, ``wait`` (a name with "wait": time spent
    on a barrier) or ``work`` (anything else the warps do, such as h12's P conversion and O rescale)."""
    if QK.match(name):
        return "qk"
    if PV.match(name):
        return "pv"
    if name == "softmax":
        return "softmax"
    return "wait" if "wait" in name else "work"
