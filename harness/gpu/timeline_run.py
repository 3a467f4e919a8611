"""A step's timeline measured on the GPU: the instrumented copy (harness/timeline/probes.py) run
once at a benchmark shape (seqlen 8k, or the step's ``extra["timeline_seqlen"]``), in a child
process (``python -m harness.gpu.child timeline``).
"""

from __future__ import annotations

from harness.timeline import probes, records

SEQLEN = 8192             # the middle benchmark shape: many tiles per CTA, a full GPU of CTAs


def seqlen_of(info) -> int:
    """The benchmark seqlen a step's timeline is measured at: 8k, or a shorter one a step asks for
    (h14: work tiles of a few K/V tiles, so that the kept tiles cross a work tile's boundary)."""
    return info.extra.get("timeline_seqlen", SEQLEN)


def measure(step_id: str) -> dict:
    """Run the instrumented step once at its timeline shape (``seqlen_of``) and return its intervals."""
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
    seqlen = seqlen_of(step.info)
    shape = workloads.bench_shape(seqlen)
    q, k, v = workloads.make_qkv(shape, seed=7)
    scale = contract.validate_inputs(info, q, k, v)
    arch = info.arch_for_capability(torch.cuda.get_device_capability())
    if arch is None:
        raise ValueError(f"{step.id} targets {', '.join(info.archs)}; this GPU is not one")
    names = probes.phase_names(step.module, step.path.read_text())
    n_blocks = seqlen // info.tile_n
    # tile slots: a probe's tile is the CTA's K/V tile count, which crosses work tiles in a
    # persistent step; the record keeps the first KEPT_TILES of them
    slots = max(n_blocks, records.KEPT_TILES)
    buf = torch.zeros((info.threads // 32, slots, len(names), 2), dtype=torch.int64, device="cuda")
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
    rows = workloads.sampled_rows(seqlen, workloads.SAMPLED_ROWS, seed=seqlen).to(q.device)
    numerics = check_output(out, q, k, v, rows=rows)
    ms = Timer().compare({"step": lambda: step.module.attention(q, k, v), "instrumented": run_probe},
                         budget_ms=200.0)
    return {"step": step.id, "provenance": collect(), "fingerprint": probes.fingerprint(step),
            "shape": list(shape), "sampled_block": [0, 0, 0], "n_blocks": n_blocks,
            "compile_seconds": compile_seconds, "numerics_passed": bool(numerics.passed),
            "step_ms": ms["step"], "instrumented_ms": ms["instrumented"],
            **records.reduce(step.module, names, raw.tolist())}


