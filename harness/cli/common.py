"""What every command shares: the console, the GPU this machine has (if any), which steps a
command was asked for, a step's last recorded result, and a child process's payload."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console

from harness.core import results
from harness.core.paths import ROOT
from harness.core.provenance import gpu_capability
from harness.core.steps import Step, discover, resolve, track_steps
from harness.gpu.isolate import run_job
from harness.report.tables import NOT_RUN_B200, measured_on
from ladder.contract import ARCH_CAPABILITY

console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)
DEFAULT_TIMEOUT = 900.0


def gpu() -> tuple[tuple[int, int] | None, str | None]:
    cap = gpu_capability()
    if cap is None:
        return None, None
    import torch
    return cap, torch.cuda.get_device_name()


def arch_to_run(step: Step, cap) -> str | None:
    return step.info.arch_for_capability(cap) if cap else None


def recorded_summary(step: Step) -> str:
    if step.variant and not step.experiment:
        return "(variant: never recorded)"
    rows = results.latest_for(step.id, section="experiments" if step.experiment else "rows")
    parts = []
    for gpu_key, row in rows.items():
        if row.get("hmean") is None:
            continue
        reason = results.stale_reason(step, row)
        s = results.summarize(row)
        span = f" ({s['hmean_range'][0]:.3f}-{s['hmean_range'][1]:.3f})" if s["repeats"] > 1 else ""
        parts.append(f"{gpu_key}: {s['hmean']:.3f}{span}" + (f" (stale: {reason})" if reason else ""))
    if "sm_100a" in step.info.archs and not measured_on(rows, ARCH_CAPABILITY["sm_100a"]) and not step.variant:
        parts.append(NOT_RUN_B200)
    return ", ".join(parts) or "—"


def select_steps(args) -> list[Step]:
    track = getattr(args, "track", None)
    steps = track_steps(track) if track else discover()
    if args.steps:
        wanted = [resolve(s) for s in args.steps.split(",")]
        # Ladder steps by file, never by id: a variant saved as "h03.py" is not step h03.
        paths = {w.path for w in wanted if not w.variant}
        steps = [s for s in steps if s.path in paths] + [w for w in wanted if w.variant]
    return steps


def shown(path: Path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def child_payload(job: str, step: Step, what: str, timeout: float) -> dict | None:
    """Run ``job`` for ``step`` in a child process; its payload, or None after printing why not."""
    with console.status(f"{step.id}: {what} in a child process (timeout {timeout:.0f} s)..."):
        res = run_job(job, step.spec, timeout=timeout)
    if res.status != "ok":
        console.print(f"[red]{step.id}: {res.error}[/red]")
        return None
    return res.payload
