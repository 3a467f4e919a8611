"""A step's timeline measured on the GPU: the instrumented copy (harness/timeline/probes.py) run
once at the seqlen-8k benchmark shape, in a child process (``python -m harness.gpu.child timeline``).
"""

from __future__ import annotations

from harness.timeline import probes, records

SEQLEN = 8192             # the middle benchmark shape: many tiles per CTA, a full GPU of CTAs


def measure(step_id: str) -> dict:
    """Run the instrumented step once at the seqlen-8k benchmark shape and return its intervals."""
    import time

    import torch
    from cuda.bindings import driver as cuda

    from harness.core import workloads
    from harness.core.provenance import collect
    from harness.core.steps import resolve
    from harness.gpu.timing import Timer
    from ladder import contract
    from reference.numerics import check_output

    step = resolve(step_id)
    probe = probes.instrumented_step(step)
    info = step.info
    shape = workloads.bench_shape(SEQLEN)
    q, k, v = workloads.make_qkv(shape, seed=7)
    scale = contract.validate_inputs(info, q, k, v)
    arch = info.arch_for_capability(torch.cuda.get_device_capability())
    if arch is None:
        raise ValueError(f"{step.id} targets {', '.join(info.archs)}; this GPU is not one")
    names = probes.phase_names(step.module, step.path.read_text())
    n_blocks = SEQLEN // info.tile_n
    buf = torch.zeros((info.threads // 32, n_blocks, len(names), 2), dtype=torch.int64, device="cuda")
    out = torch.empty_like(q)
    from cutlass.cute.runtime import from_dlpack
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    args = [contract.runtime_tensor(t) for t in (q, k, v, out)]
    args.append(from_dlpack(buf, assumed_align=16).mark_layout_dynamic(leading_dim=3))
    import cutlass
    start = time.perf_counter()
    compiled = contract.compile_host(probe.module.host, arch, args=(*args, cutlass.Float32(scale), stream))
    compile_seconds = time.perf_counter() - start

    def run_probe():
        compiled(*args, cutlass.Float32(scale), stream)

    for _ in range(3):                       # warm: the recorded run is not the first
        buf.zero_()
        run_probe()
    torch.cuda.synchronize()
    raw = buf.cpu()
    rows = workloads.sampled_rows(SEQLEN, workloads.SAMPLED_ROWS, seed=SEQLEN).to(q.device)
    numerics = check_output(out, q, k, v, rows=rows)
    ms = Timer().compare({"step": lambda: step.module.attention(q, k, v), "instrumented": run_probe},
                         budget_ms=200.0)
    return {"step": step.id, "provenance": collect(), "fingerprint": probes.fingerprint(step),
            "shape": list(shape), "sampled_block": [0, 0, 0], "n_blocks": n_blocks,
            "compile_seconds": compile_seconds, "numerics_passed": bool(numerics.passed),
            "step_ms": ms["step"], "instrumented_ms": ms["instrumented"],
            **records.reduce(step.module, names, raw.tolist())}


