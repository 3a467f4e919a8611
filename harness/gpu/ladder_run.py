"""``ladder table`` on a GPU, without the printing: measure each step in child processes (``repeat``
of them, so the table can show the spread between processes), decide what each outcome is, file
rows and experiments apart, compare with a baseline. ``harness.cli`` parses and prints; this
module decides, and its tests run it on a stand-in child (tests/child_stub.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness.core import experiments, results
from harness.core.steps import Step
from harness.gpu.isolate import ChildResult, run_job


@dataclass
class StepOutcome:
    step: Step
    runs: list[ChildResult]              # one per child process
    row: dict | None = None              # the processes' payloads combined (results.combine_runs)
    error: str | None = None             # why no row: a child's error, TIMEOUT, CRASH

    @property
    def summary(self) -> dict | None:
        return results.summarize(self.row) if self.row else None

    @property
    def wrong_by_design(self) -> bool:
        """A diagnostic experiment computes wrong answers on purpose (harness/core/experiments.py)."""
        return bool(self.step.experiment) and experiments.get(self.step.experiment).diagnostic

    @property
    def numerics(self) -> str:
        if not self.summary:
            return "none"
        if self.summary["numerics_passed"]:
            return "pass"
        return "wrong by design" if self.wrong_by_design else "FAIL"

    @property
    def kind(self) -> str:
        """Where a result may be filed: a ladder "row", an "experiment", or a "variant" (never)."""
        if self.step.experiment:
            return "experiment"
        return "variant" if self.step.variant else "row"

    @property
    def recordable(self) -> bool:
        return self.row is not None and self.numerics in ("pass", "wrong by design")


@dataclass
class LadderRun:
    gpu: str
    outcomes: list[StepOutcome] = field(default_factory=list)
    stock: dict | None = None
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    recorded: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 1 if self.failures else 0

    def measured_rows(self) -> dict[str, dict]:
        """What ``--json`` writes: step spec (a step id, ``exp:<name>`` or a variant's path) ->
        combined row, for every step that produced one."""
        return {o.step.spec: o.row for o in self.outcomes if o.row}


Runner = Callable[..., ChildResult]


def measure(step: Step, *, timeout: float, repeat: int = 1, runner: Runner | None = None) -> StepOutcome:
    """``repeat`` child processes of the "measure" job; any failed process fails the step."""
    runner = runner or run_job
    runs = []
    for _ in range(repeat):
        res = runner("measure", step.spec, timeout=timeout)
        runs.append(res)
        if res.error or not res.payload:
            return StepOutcome(step, runs, error=res.error or "no result")
    return StepOutcome(step, runs, row=results.combine_runs([r.payload for r in runs]))


def check_recordable(step: Step) -> None:
    """A variant file (your own copy of a step) is measured like a step and never recorded."""
    if step.variant and not step.experiment:
        raise ValueError(f"{step.id} is a variant file, not a ladder step: its results are not recorded")


def file_outcome(path: Path, outcome: StepOutcome) -> str | None:
    """Record a measured step where it belongs: a ladder row under "rows", an experiment under
    "experiments"; a failed one or a variant nowhere. Returns what was recorded."""
    if not outcome.recordable or outcome.kind == "variant":
        return None
    if outcome.kind == "experiment":
        results.record_experiment(path, experiments.get(outcome.step.experiment), outcome.row)
        return f"exp:{outcome.step.experiment}"
    results.record(path, {outcome.step.id: outcome.row})
    return outcome.step.id


def run_ladder(steps: list[Step], *, gpu: str, timeout: float, repeat: int = 1, record: Path | None = None,
               baseline: Path | None = None, tolerance: float = 0.05, stock: bool = False,
               runner: Runner | None = None, on_step: Callable[[str], None] = lambda what: None) -> LadderRun:
    """Measure ``steps`` on this machine's GPU (named ``gpu``); record each row as soon as it is
    measured (a long run cut short keeps what it finished)."""
    if repeat < 1:
        raise ValueError(f"--repeat must be >= 1, got {repeat}")
    run = LadderRun(gpu=gpu)
    # The baseline is read before anything is measured or recorded: a bad file fails at once, and
    # a baseline that is also the --record file is compared as it was, not with the new rows.
    reference = _baseline_rows(run, Path(baseline)) if baseline is not None else None
    for step in steps:
        on_step(f"{step.id}: compile, numerics, timing" + (f" x{repeat} processes" if repeat > 1 else ""))
        outcome = measure(step, timeout=timeout, repeat=repeat, runner=runner)
        run.outcomes.append(outcome)
        if outcome.error:
            run.failures.append(f"{step.id}: {outcome.error}")
            continue
        if outcome.numerics == "FAIL":
            run.failures.append(f"{step.id}: numerics failed")
        if record and (label := file_outcome(record, outcome)):
            run.recorded.append(label)
    if stock:
        on_step("stock FA4 vs cuDNN and FA2")
        res = (runner or run_job)("stock", "-", timeout=timeout)
        run.stock = res.payload if res.status == "ok" else None
        if run.stock is None:
            run.failures.append(f"stock: {res.error}")
        elif record:
            results.record(record, {}, run.stock)
            run.recorded.append("stock")
    if reference is not None:
        rows = {o.step.id: o.row for o in run.outcomes if o.row and o.kind == "row"}
        run.failures += [f"regression {r}" for r in results.regressions(rows, reference, tolerance)]
    return run


def _baseline_rows(run: LadderRun, path: Path) -> dict | None:
    """The baseline's contents if it holds rows measured on this kind of GPU; else None, and a
    note: a first run on a new GPU has nothing to regress from, and its table stands."""
    data = results.load(path) if path.exists() else None
    if data and any(results.gpu_key(r["provenance"]["gpu"]) == results.gpu_key(run.gpu)
                    for r in data.get("rows", {}).values()):
        return data
    run.notes.append(f"no baseline for {run.gpu} in {path}: nothing to compare with; "
                     f"record one with --record {path}")
    return None
