"""Hardware counters for one step at one benchmark shape, read by Nsight Compute (``ncu``).

The evidence behind a writeup's "what limited this step": shared-memory bank conflicts, tensor-pipe
activity, occupancy. Runs ``ncu`` on a child that calls the step at the shape; needs a GPU and ncu.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
import sys

from harness.isolate import child_env
from harness.paths import ROOT

METRICS = {
    "gpu__time_duration.sum": "kernel time (ns)",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM throughput (% of peak)",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy (% of max warps)",
    # On sm_90 this counter covers both mma.sync and wgmma (a wgmma-only counter does not exist).
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor pipe active %",
    # Warp-level instructions beside their wavefronts: wavefronts per instruction is what the smem
    # model (harness/smem_model.py) predicts, per instruction and for the whole kernel.
    "smsp__sass_inst_executed_op_shared_st.sum": "smem store instructions (warp-level)",
    "smsp__sass_inst_executed_op_shared_ld.sum": "smem load instructions (warp-level)",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": "smem load wavefronts",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "smem load bank conflicts",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum": "smem store wavefronts",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": "smem store bank conflicts",
    "dram__bytes_read.sum": "DRAM bytes read",
    # The schedulers: how often each issued an instruction, and how many warps were ready to. A
    # kernel bound by instruction latency issues rarely while few warps are eligible.
    "smsp__issue_active.avg.pct_of_peak_sustained_active": "issue slots busy % (per scheduler)",
    "smsp__warps_eligible.avg.per_cycle_active": "eligible warps per scheduler per cycle",
    "smsp__inst_executed.sum": "warp instructions executed",
}
# Warp stall reasons come from ncu's WarpStateStats section: per issued instruction, how many warps
# were stalled for each reason (the "where did the time go" of a latency-bound kernel).
STALL_SECTION = "WarpStateStats"
STALL_METRIC = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")


def run_target(step_id: str, seqlen: int) -> None:
    """The profiled program: compile (first call), then one timed-by-ncu call at the bench shape."""
    import torch

    from harness import workloads
    from harness.steps import resolve
    step = resolve(step_id)
    q, k, v = workloads.make_qkv(workloads.bench_shape(seqlen), seed=seqlen)
    step.module.attention(q, k, v)
    torch.cuda.synchronize()


def profile(step_spec: str, seqlen: int = 4096, timeout: float = 600) -> dict:
    """``step_spec``: a step id, 'exp:<name>' or a variant path (Step.spec)."""
    ncu = shutil.which("ncu")
    if not ncu:
        raise RuntimeError("ncu (Nsight Compute) not found on PATH")
    cmd = [ncu, "--clock-control", "none", "--csv", "--page", "raw", "--kernel-name", "regex:kernel_cutlass_kernel",
           "--launch-count", "1", "--metrics", ",".join(METRICS), "--section", STALL_SECTION,
           sys.executable, "-m", "harness.profile", step_spec, str(seqlen)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=child_env(), timeout=timeout)
    lines = [line for line in out.stdout.splitlines() if line.startswith('"')]
    if out.returncode != 0 or len(lines) < 3:
        raise RuntimeError(f"ncu failed ({out.returncode}): {(out.stdout + out.stderr)[-2000:]}")
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header, values = rows[0], rows[-1]        # rows[1] holds units
    metrics = {}
    for name in [*METRICS, *(h for h in header if STALL_METRIC.match(h))]:
        if name in header:
            raw = values[header.index(name)].replace(",", "")
            try:
                metrics[name] = float(raw)
            except ValueError:
                metrics[name] = None
    from harness.provenance import collect
    from harness.steps import resolve
    step = resolve(step_spec)
    return {"step": step.id, "seqlen": seqlen, "metrics": metrics, "provenance": collect(),
            "fingerprint": step.fingerprint}


def stall_reasons(metrics: dict, top: int = 6) -> list[tuple[str, float]]:
    """The largest warp stall reasons (warps stalled per issued instruction), largest first."""
    found = [(m.group(1), v) for name, v in metrics.items()
             if (m := STALL_METRIC.match(name)) and v is not None and m.group(1) not in ("selected", "not_selected")]
    return sorted(found, key=lambda kv: -kv[1])[:top]


if __name__ == "__main__":
    run_target(sys.argv[1], int(sys.argv[2]))
