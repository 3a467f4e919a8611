"""On a GPU of the step's arch: numerics by FA4's rule at several shapes, one compile per process,
bad input still a ValueError. Skips with the reason elsewhere (Hopper: exactly (9, 0); Blackwell:
exactly (10, 0)). Timing lives in the harness (`ladder table`), not here."""

import pytest
from conftest import STEPS, require_gpu_for, step_id

from harness.core import workloads

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("step", STEPS, ids=step_id)
@pytest.mark.parametrize("case", workloads.NUMERICS_CASES, ids=lambda c: c.name)
def test_numerics(step, case, capability):
    require_gpu_for(step, capability)
    from reference.numerics import check_output
    shape = case.shape_for(step.info)
    q, k, v = workloads.make_qkv(shape, seed=workloads.stable_seed(case.name), magnitude=case.magnitude)
    result = check_output(step.module.attention(q, k, v), q, k, v)
    assert result.passed, f"{step.id} {case.name} {shape}: {result}"


@pytest.mark.parametrize("step", STEPS, ids=step_id)
def test_bench_shape_numerics_sampled_rows(step, capability):
    require_gpu_for(step, capability)
    from reference.numerics import check_output
    shape = workloads.bench_shape(4096)
    q, k, v = workloads.make_qkv(shape, seed=4096)
    rows = workloads.sampled_rows(4096, 256, seed=4096).cuda()
    result = check_output(step.module.attention(q, k, v), q, k, v, rows=rows)
    assert result.passed, f"{step.id} {shape}: {result}"


@pytest.mark.parametrize("step", STEPS, ids=step_id)
def test_one_compile_serves_every_shape(step, capability, monkeypatch):
    """Two calls with other batch, seqlen and heads compile once, and the second call's answer is
    right (a kernel specialised to the first call's shape would not be)."""
    require_gpu_for(step, capability)
    from ladder import contract
    from reference.numerics import check_output
    compiles, compile_host = [], contract.compile_host
    monkeypatch.setattr(contract, "compile_host", lambda *a, **kw: compiles.append(a) or compile_host(*a, **kw))
    monkeypatch.setattr(contract, "_compiled", {})           # this step's first call compiles, here
    q, k, v = workloads.make_qkv(workloads.NUMERICS_CASES[0].shape_for(step.info), seed=1)
    step.module.attention(q, k, v)
    q2, k2, v2 = workloads.make_qkv(workloads.NUMERICS_CASES[1].shape_for(step.info), seed=2)
    result = check_output(step.module.attention(q2, k2, v2), q2, k2, v2)
    assert len(compiles) == 1, f"{step.id} compiled {len(compiles)} times for two shapes"
    assert result.passed, f"{step.id} second shape: {result}"


@pytest.mark.parametrize("step", STEPS, ids=step_id)
def test_bad_seqlen_on_gpu_is_a_value_error(step, capability):
    require_gpu_for(step, capability)
    q, k, v = workloads.make_qkv((1, step.info.tile_n + 8, 1, 128), seed=3)
    with pytest.raises(ValueError, match="seqlen"):
        step.module.attention(q, k, v)


@pytest.mark.parametrize("step", STEPS, ids=step_id)
def test_fraction_of_fa4_is_measured_side_by_side(step, capability):
    """The step and stock FA4 timed in one process at the smallest bench seqlen, after its
    numerics: the harness yields a fraction of FA4. Its value is the table's business (recorded
    with provenance), not a pass/fail threshold in a unit test."""
    require_gpu_for(step, capability)
    from harness.gpu.measure import measure_step
    from reference.stock import fa4_available
    missing = fa4_available()
    if missing:
        pytest.skip(f"stock FA4 not importable here: {missing}")
    row = measure_step(step.id, seqlens=workloads.BENCH_SEQLENS[:1])
    assert row["numerics"] and all(n["passed"] for n in row["numerics"]), row["numerics"]
    (bench,) = row["bench"]
    assert bench["fraction"] > 0 and bench["step_tflops"] > 0 and bench["fa4_tflops"] > 0
