"""Hardware counters for one step at one benchmark shape, read by Nsight Compute (``ncu``).

The evidence behind a writeup's "what limited this step": shared-memory bank conflicts, tensor-pipe
activity, occupancy. Runs ``ncu`` on a child that calls the step at the shape; needs a GPU and ncu.
With ``with_fa4`` the same child then calls stock FA4 on the same inputs, and the same ncu run
profiles both kernels: the step's column and FA4's (key ``FA4``) come from one process.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
import sys

from harness.core.paths import ROOT
from harness.gpu.isolate import child_env

METRICS = {
    "gpu__time_duration.sum": "kernel time (ns)",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM throughput (% of peak)",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy (% of max warps)",
    # On sm_90 this counter covers both mma.sync and wgmma (a wgmma-only counter does not exist).
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor pipe active %",
    # Warp-level instructions beside their wavefronts: wavefronts per instruction is what the smem
    # model (harness/model/smem_model.py) predicts, per instruction and for the whole kernel.
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


FA4 = "FA4"        # stock FA4's key among the recorded profiles, and its column's name
# Both the steps' kernels and FA4's are CuTe DSL kernels named after their @cute.kernel method.
KERNEL_NAME = "regex:kernel_cutlass_kernel"


def fa4_fingerprint() -> dict:
    """What a recorded FA4 profile depends on besides the GPU (compare Step.fingerprint)."""
    from harness.core.steps import cutlass_dsl_version
    from reference.stock import fa4_version
    return {"flash_attn_4": fa4_version(), "cutlass_dsl": cutlass_dsl_version()}


def run_target(step_id: str, seqlen: int, with_fa4: bool = False) -> None:
    """The profiled program: compile (first call), then one timed-by-ncu call at the bench shape;
    with ``with_fa4``, FA4 on the same inputs after it (ncu profiles each kernel's first launch)."""
    import torch

    from harness.core import workloads
    from harness.core.steps import resolve
    step = resolve(step_id)
    q, k, v = workloads.make_qkv(workloads.bench_shape(seqlen), seed=seqlen)
    step.module.attention(q, k, v)
    if with_fa4:
        from reference.stock import fa4_attention
        torch.cuda.synchronize()
        fa4_attention(q, k, v)
    torch.cuda.synchronize()


def parse_csv(stdout: str) -> list[dict]:
    """ncu's raw CSV page -> one {metric: value} per profiled kernel launch, in launch order."""
    lines = [line for line in stdout.splitlines() if line.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if len(rows) < 3:
        return []
    header = rows[0]                          # rows[1] holds units
    launches = []
    for values in rows[2:]:
        metrics = {}
        for name in [*METRICS, *(h for h in header if STALL_METRIC.match(h))]:
            if name in header:
                raw = values[header.index(name)].replace(",", "")
                try:
                    metrics[name] = float(raw)
                except ValueError:
                    metrics[name] = None
        launches.append(metrics)
    return launches


def profile(step_spec: str, seqlen: int = 4096, timeout: float = 600, with_fa4: bool = False) -> list[dict]:
    """``step_spec``: a step id, 'exp:<name>' or a variant path (Step.spec). One payload per
    profiled kernel: the step's, then (``with_fa4``) FA4's from the same process."""
    ncu = shutil.which("ncu")
    if not ncu:
        raise RuntimeError("ncu (Nsight Compute) not found on PATH")
    launches = 2 if with_fa4 else 1
    cmd = [ncu, "--clock-control", "none", "--csv", "--page", "raw", "--kernel-name", KERNEL_NAME,
           "--launch-count", str(launches), "--metrics", ",".join(METRICS), "--section", STALL_SECTION,
           sys.executable, "-m", "harness.gpu.profile", step_spec, str(seqlen), *(["--with-fa4"] if with_fa4 else [])]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=child_env(), timeout=timeout)
    found = parse_csv(out.stdout)
    if out.returncode != 0 or len(found) != launches:
        raise RuntimeError(f"ncu failed ({out.returncode}, {len(found)} of {launches} kernels profiled): "
                           f"{(out.stdout + out.stderr)[-2000:]}")
    from harness.core.provenance import collect
    from harness.core.steps import resolve
    step, prov = resolve(step_spec), collect()
    payloads = [{"step": step.id, "seqlen": seqlen, "metrics": found[0], "provenance": prov,
                 "fingerprint": step.fingerprint}]
    if with_fa4:
        payloads.append({"step": FA4, "seqlen": seqlen, "metrics": found[1], "provenance": prov,
                         "fingerprint": fa4_fingerprint(), "beside": step.id})
    return payloads


def stall_reasons(metrics: dict, top: int = 6) -> list[tuple[str, float]]:
    """The largest warp stall reasons (warps stalled per issued instruction), largest first."""
    found = [(m.group(1), v) for name, v in metrics.items()
             if (m := STALL_METRIC.match(name)) and v is not None and m.group(1) not in ("selected", "not_selected")]
    return sorted(found, key=lambda kv: -kv[1])[:top]


if __name__ == "__main__":
    run_target(sys.argv[1], int(sys.argv[2]), with_fa4="--with-fa4" in sys.argv[3:])
