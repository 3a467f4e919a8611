"""Cells and tables: how a measured fraction, a range over processes, a ladder row and a Markdown
table are written. One home for the formatting that the CLI (harness/cli/), the plot
(harness/report/plot.py) and the generated blocks of the writeups (harness/report/blocks_*.py) share.
"""

from __future__ import annotations

from tabulate import tabulate

from harness.core import results
from harness.core.paths import ROOT
from reference.stock import fa4_config_label

NOT_RUN_B200 = "compiled, not yet run on a B200"
STALE = "to be re-measured"    # a record whose fingerprint differs from the kernel's now
SEQ_LABEL = {"4096": "4k", "8192": "8k", "16384": "16k"}


def markdown_table(rows, headers) -> str:
    """A GitHub Markdown table; cells are shown exactly as formatted here."""
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def fmt(x, digits=3):
    return "—" if x is None else f"{x:.{digits}f}"


def with_range(value, span, digits=3) -> str:
    """'0.618 (0.611-0.627)': a median and its min-max over processes; a single process shows
    its value alone."""
    if value is None:
        return "—"
    if not span or span[0] == span[1]:
        return fmt(value, digits)
    # An h-mean of the columns' medians can fall outside the single processes' h-means (the medians at
    # 4k, 8k and 16k may come from different processes): marked, and the footnotes say why. Compared
    # as printed, so that a mark is never beside a value that reads as inside its range.
    shown, low, high = fmt(value, digits), fmt(span[0], digits), fmt(span[1], digits)
    outside = "*" if not float(low) <= float(shown) <= float(high) else ""
    return f"{shown}{outside} ({low}-{high})"


def ladder_cells(summary: dict, prev: dict | None) -> list[str]:
    """The measured cells of one ladder row (results.summarize of it): the median fraction at each
    bench seqlen, the h-mean with its range over processes, and the change from the previous
    row, marked when the two rows' ranges overlap."""
    fr, h = summary["fractions"], summary["hmean"]
    vs = ""
    if prev and prev.get("hmean") and h:
        vs = f"{(h / prev['hmean'] - 1) * 100:+.0f}%"
        if results.within_noise(summary, prev):
            vs += " (within noise)"
    return [*(fmt(fr.get(s)) for s in SEQ_LABEL), with_range(h, summary.get("hmean_range")), vs]


def gpu_label(row):
    p = row.get("provenance", {})
    return f"{p.get('gpu', '?')}, {p.get('date', '?')[:10]}"


def measured_on(rows: dict, capability) -> bool:
    return any(tuple(r.get("provenance", {}).get("capability") or ()) == capability for r in rows.values())


LADDER_HEADERS = ["step", "change", "4k", "8k", "16k", "h-mean", "vs prev"]


def step_link(step) -> str:
    return f"[{step.id}]({step.writeup.relative_to(ROOT).as_posix()})"


def change_cell(step) -> str:
    return step.info.change + (" *(enabler)*" if step.info.enabler else "")


def fa4_ran(rows) -> str:
    """Which FA4 kernel the rows were compared against (the configuration each process recorded at
    each seqlen, reference.stock.fa4_config), or that they did not record it."""
    labels = sorted({fa4_config_label(b["fa4_config"]) for r in rows for b in r.get("bench", []) if b.get("fa4_config")})
    return "; ".join(labels) if labels else "FA4's configuration was not recorded by this run"


def built_with(rows) -> str:
    """The ptxas (and CuTe DSL build) the rows' kernels were compiled by, from their provenance."""
    found = sorted({f"ptxas {p['ptxas']} ({p.get('cutlass_dsl_libs', '?')})" for r in rows
                    if (p := r.get("provenance", {})).get("ptxas")})
    missing = sum(1 for r in rows if not r.get("provenance", {}).get("ptxas"))
    inferred = any(r.get("provenance", {}).get("ptxas_from") for r in rows)
    return (", ".join(found + ([f"ptxas not recorded ({missing} rows)"] if missing else []))
            + (" (inferred for records older than the GPU machine's `ladder toolchain --record`: ptxas_from)"
               if inferred else ""))
