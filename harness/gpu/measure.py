"""What runs on the GPU, inside one child process per step: numerics first, then the step and stock
FA4 timed side by side on the same inputs. Returns plain dicts (JSON) for the parent."""

from __future__ import annotations

import time

from harness.core import workloads
from harness.core.steps import Step, resolve


def _numerics_row(case_name, shape, result, rows_checked) -> dict:
    return {"case": case_name, "shape": list(shape), "rows_checked": rows_checked,
            "max_error": result.max_error, "bound": result.bound, "passed": result.passed}


def check_numerics(step: Step, cases=workloads.NUMERICS_CASES, seed: int = 0) -> list[dict]:
    """Takes the resolved Step, not its id: a variant's id is only its file stem."""
    import torch

    from reference.numerics import check_output
    rows = []
    for i, case in enumerate(cases):
        shape = case.shape_for(step.info)
        q, k, v = workloads.make_qkv(shape, seed=seed + i, magnitude=case.magnitude)
        out = step.module.attention(q, k, v)
        torch.cuda.synchronize()
        rows.append(_numerics_row(case.name, shape, check_output(out, q, k, v), "all"))
    return rows


def clock_fields(seen: dict[str, dict]) -> dict:
    """step_sm_mhz, fa4_power_capped, ... (floats, so --repeat takes their median) of what each
    kernel ran at while timed; nothing where no clock was sampled."""
    return {f"{who}_{key}": float(v[key]) for who, v in seen.items()
            for key in ("sm_mhz", "sm_max_mhz", "power_capped")}


def measure_step(step_id: str, seqlens=workloads.BENCH_SEQLENS, *, seed: int = 1234) -> dict:
    import torch

    from harness.core.provenance import collect
    from harness.gpu import clocks
    from harness.gpu.timing import Timer
    from reference.numerics import check_output
    from reference.stock import fa4_attention, fa4_available, fa4_config

    step = resolve(step_id)
    result = {"step": step.id, "provenance": collect(), "numerics": [], "bench": [],
              "fingerprint": step.fingerprint}
    start = time.perf_counter()
    q, k, v = workloads.make_qkv(workloads.NUMERICS_CASES[0].shape_for(step.info), seed=seed)
    step.module.attention(q, k, v)                 # first call compiles
    torch.cuda.synchronize()
    result["first_call_seconds"] = time.perf_counter() - start
    result["numerics"] = check_numerics(step, seed=seed)
    missing = fa4_available()
    if missing:
        result["error"] = missing
        return result
    timer = Timer()
    for seqlen in seqlens:
        shape = workloads.bench_shape(seqlen)
        q, k, v = workloads.make_qkv(shape, seed=seed + seqlen)
        out = step.module.attention(q, k, v)
        # Every batch and head, a random subset of query rows: each row depends on all of K/V.
        rows = workloads.sampled_rows(seqlen, workloads.SAMPLED_ROWS, seed=seqlen).to(q.device)
        check = check_output(out, q, k, v, rows=rows)
        result["numerics"].append(_numerics_row(f"bench {seqlen}", shape, check, workloads.SAMPLED_ROWS))
        del out
        config = fa4_config(q, k, v)               # which FA4 kernel this seqlen runs (and a first call)
        with clocks.ClockLog(clocks.gpu_uuid()) as log:
            ms = timer.compare({"step": lambda q=q, k=k, v=v: step.module.attention(q, k, v),
                                "fa4": lambda q=q, k=k, v=v: fa4_attention(q, k, v)})
        flops = workloads.attention_flops(shape)
        result["bench"].append({
            "seqlen": seqlen, "shape": list(shape),
            "step_ms": ms["step"], "fa4_ms": ms["fa4"],
            "step_tflops": flops / ms["step"] / 1e9, "fa4_tflops": flops / ms["fa4"] / 1e9,
            "fraction": ms["fa4"] / ms["step"], "fa4_config": config,
            **clock_fields(clocks.per_window(log.samples, timer.windows)),
        })
    return result


def measure_stock(seqlens=workloads.BENCH_SEQLENS, seed: int = 99) -> dict:
    """FA4, cuDNN and FA2 side by side: the context rows of the table."""
    from harness.core.provenance import collect
    from harness.gpu.timing import Timer
    from reference.stock import cudnn_attention, fa2_attention, fa4_attention, fa4_config

    timer = Timer()
    rows = []
    for seqlen in seqlens:
        shape = workloads.bench_shape(seqlen)
        q, k, v = workloads.make_qkv(shape, seed=seed + seqlen)
        config = fa4_config(q, k, v)
        ms = timer.compare({"fa4": lambda q=q, k=k, v=v: fa4_attention(q, k, v),
                            "cudnn": lambda q=q, k=k, v=v: cudnn_attention(q, k, v),
                            "fa2": lambda q=q, k=k, v=v: fa2_attention(q, k, v)})
        flops = workloads.attention_flops(shape)
        rows.append({"seqlen": seqlen, "fa4_tflops": flops / ms["fa4"] / 1e9,
                     "cudnn_tflops": flops / ms["cudnn"] / 1e9, "cudnn_fraction": ms["fa4"] / ms["cudnn"],
                     "fa2_tflops": flops / ms["fa2"] / 1e9, "fa2_fraction": ms["fa4"] / ms["fa2"],
                     "fa4_config": config})
    return {"provenance": collect(), "bench": rows}


def selfcheck_step(step_id: str, guard: bool = False) -> dict:
    """Tiny shapes only: does the step run, finish and agree with the reference on this GPU?
    ``guard``: compile with ptxas's TMEM guardrails where the step targets sm_100a (a TMEM access
    outside the allocation or the warp's lanes then traps instead of corrupting quietly)."""
    step = resolve(step_id)
    # A step that declares it cannot be built with guardrails (``no_tmem_guard``) runs without them.
    guard = guard and not step.info.extra.get("no_tmem_guard")
    if guard:
        from harness.compiler.compile import guard_every_compile
        guard_every_compile()
    return {"step": step.id, "guard": guard, "numerics": check_numerics(step, cases=workloads.TINY_CASES)}
