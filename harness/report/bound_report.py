"""The bound model (harness/model/bound.py) against the measurements: generated Markdown blocks.

``bound hopper`` (rendered by blocks_model.py): every Hopper step measured on an H200, its predicted and measured fraction of FA4,
the unit the model says binds next to the profile's tensor-pipe and issue-slot activity, and the
rank correlation and median relative error over the measured steps. ``bound blackwell``: the
model's prediction for every b-step on a B200, always labelled a model, next to the measured
fraction where a B200 results file has one.

Predicted numbers are written as ``0.47 (model)``: ptxas's register allocation (and the moves around
it) can differ between two compiles of the same PTX, which moves an issue count by a few
instructions; writeups.py's staleness check ignores the model's numbers for that reason.
"""

from __future__ import annotations

import statistics

from harness.core import results
from harness.core.steps import track_steps
from harness.model import bound

TENSOR = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
ISSUE = "smsp__issue_active.avg.pct_of_peak_sustained_active"


def _measured(gpu_name_part: str) -> dict:
    """step id -> (h-mean fraction of FA4, row) for the rows of the GPU's results file."""
    for data in results.all_recorded().values():
        rows = data.get("rows", {})
        if rows and gpu_name_part in next(iter(rows.values()))["provenance"]["gpu"]:
            return {sid: (results.summarize(r)["hmean"], r) for sid, r in rows.items()}
    return {}


def _profile(step_id: str) -> dict:
    for data in results.all_recorded().values():
        if step_id in data.get("profiles", {}):
            return data["profiles"][step_id]["metrics"]
    return {}


def _pct(value) -> str:
    return f"{value:.0f}%" if value is not None else "n/a"


def hopper_check() -> tuple[list[list[str]], dict]:
    """Rows (step, measured, predicted, binding, tensor active, issue busy) and the summary. A row
    measured on an earlier version of the step is left out: the model reads today's SASS."""
    measured = _measured("H200")
    ref = bound.fa4_bound("h200")
    rows, pred, meas = [], [], []
    steps = [s for s in track_steps("hopper") if s.id in measured]
    stale = [s.id for s in steps if results.is_stale(s, measured[s.id][1])]
    for step in [s for s in steps if s.id not in stale]:
        b = bound.bound(step, "h200")
        f = bound.fraction_of(b, ref)
        m = measured[step.id][0]
        prof = _profile(step.id)
        rows.append([step.id, f"{m:.3f}", f"{f:.2f} (model)", b.binding, _pct(prof.get(TENSOR)), _pct(prof.get(ISSUE))])
        pred.append(f)
        meas.append(m)
    summary = {"n": len(pred), "spearman": bound.spearman(pred, meas) if len(pred) > 1 else float("nan"),
               "median_rel_error": statistics.median(abs(p - m) / m for p, m in zip(pred, meas, strict=True))
               if pred else float("nan"), "fa4_binding": ref.binding, "stale": stale}
    return rows, summary


HOPPER_HEADERS = ["step", "measured fraction of FA4 (h-mean)", "predicted", "binds (model)",
                  "tensor pipe active (profile)", "issue slots busy (profile)"]


def hopper_note(s: dict) -> str:
    """The line under the check's table: the agreement over the measured steps, and the constants."""
    left_out = (f" ({', '.join(s['stale'])} left out: measured before their code changed, to be re-measured)"
                if s.get("stale") else "")
    return (f"Model check: over the {s['n']} measured steps{left_out}, Spearman rank correlation "
            f"{s['spearman']:.2f} (model), median relative error {s['median_rel_error']:.2f} (model). FA4 through "
            f"the same model binds on: {s['fa4_binding']}. Constants, the same for every step and GPU: "
            f"IPC_ONE_WARP {bound.IPC_ONE_WARP}, HANDOFF {bound.HANDOFF} cycles, LOAD_LATENCY "
            f"{bound.LOAD_LATENCY} cycles (harness/model/bound.py); unit rates with their sources in harness/model/units.py. "
            "Per step: `ladder bound <step>`.\n")


def blackwell_cells() -> dict[str, str]:
    """step id -> "0.47 (model; binds)" for every step of the Blackwell table, on a B200."""
    ref = bound.fa4_bound("b200")
    return {step.id: f"{bound.fraction_of(b, ref):.2f} (model; {b.binding})"
            for step in track_steps("blackwell") for b in [bound.bound(step, "b200")]}
