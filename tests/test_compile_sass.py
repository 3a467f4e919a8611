"""CPU-side proof of every step: it compiles for each arch it targets (no GPU), the binary targets
that arch, its SASS shows the mechanism it claims, and nothing spills. Each (step, arch) compiles
once per test session (harness.compile memoizes); compile times are reported, not asserted."""

import collections

import pytest

from conftest import STEP_ARCHS
from harness.compile import compile_step
from harness.steps import resolve


def _id(pair):
    return f"{pair[0].id}-{pair[1]}"


@pytest.fixture(scope="session", params=STEP_ARCHS, ids=_id)
def compiled(request):
    step, arch = request.param
    report = compile_step(step, arch)
    print(f"\ncompiled {step.id} for {arch} in {report.compile_seconds:.1f} s, {report.registers} registers")
    return step, report


def test_binary_targets_the_requested_arch(compiled):
    step, report = compiled
    assert report.sass.target == report.arch


def test_claimed_mechanism_is_in_the_sass(compiled):
    step, report = compiled
    for name in step.info.sass_present:
        assert report.sass.mechanisms.get(name, 0) > 0, f"{step.id}: no {name} in its SASS"
    for name in step.info.sass_absent:
        assert report.sass.mechanisms.get(name, 0) == 0, f"{step.id}: {name} should be gone"


def test_no_register_spills(compiled):
    step, report = compiled
    assert report.sass.spills == 0, f"{step.id}: {report.sass.local_bytes} B local, " \
                                    f"{report.sass.mechanisms.get('LDL/STL')} LDL/STL"


def test_launch_threads_match_metadata(compiled):
    step, report = compiled
    assert report.threads_per_cta == step.info.threads


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_step01_uses_mma_sync_and_hardware_ex2(arch):
    report = compile_step(resolve("01"), arch)
    ops = report.sass.opcodes
    assert ops["HMMA.16816.F32.BF16"] > 0           # mma.sync.m16n8k16, bf16 in, fp32 accumulate
    assert report.sass.mechanisms["MUFU.EX2"] > 0    # the library exp ends in ex2
    # Per 64x128 S tile and 64x128 O tile, per warp: (128/8) n-atoms x (128/16) k-steps each.
    assert ops["HMMA.16816.F32.BF16"] == 2 * (128 // 8) * (128 // 16)
    assert report.sass.mechanisms["HGMMA"] == 0 and report.sass.mechanisms["UTCHMMA"] == 0


def test_fake_tensor_compile_matches_a_real_call_signature(tmp_path):
    """The CPU proof compiles with fake tensors; a GPU call compiles with the caller's tensors.
    Compiling step 01 from real (CPU) torch tensors gives the same SASS, so the proof is of the
    kernel that runs."""
    import torch

    import cutlass
    from cutlass.cute.runtime import make_fake_stream
    from harness.sass import read_cubin
    from ladder import contract
    step = resolve("01")
    t = torch.zeros(2, 256, 3, 128, dtype=torch.bfloat16)
    args = (*(contract.runtime_tensor(t) for _ in range(4)), cutlass.Float32(0.1), make_fake_stream())
    contract.compile_host(step.module.host, "sm_90a", f"--keep-cubin --dump-dir {tmp_path}", args=args)
    real = read_cubin(next(tmp_path.glob("*.cubin")))
    fake = compile_step(step, "sm_90a").sass
    assert collections.Counter(real.opcodes) == collections.Counter(fake.opcodes)
    assert real.registers == fake.registers
