"""CPU-side proof of every step: it compiles for each arch it targets (no GPU), the binary targets
that arch, its SASS shows the mechanism it claims, and nothing spills. Each (step, arch) compiles
once per test process (harness.compile memoizes); compile times are reported, not asserted."""

import collections
import shutil
import subprocess
import sys
import time

import pytest
from conftest import STEP_ARCHS

from harness.compile import compile_step
from harness.isolate import child_env
from harness.paths import ROOT
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
    import cutlass
    import torch
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


_COMPILE_WHEN_TOLD = """
import sys, time
from pathlib import Path
from harness.compile import compile_step
from harness.steps import resolve
step = resolve("b05")
step.module                                   # imports done: only the compiles race
go = Path(sys.argv[1])
while not go.exists():
    time.sleep(0.01)
report = compile_step(step, "sm_100a")
print(report.sass.mechanisms["UTCHMMA"], report.threads_per_cta)
"""


def test_two_processes_compiling_the_same_step_at_once_both_succeed(tmp_path):
    """Two pytest runs (or ``pytest -n``) compile the same step at the same moment: each compiles
    into its own directory and publishes it with one rename, so neither deletes the other's
    files mid-compile. Both start compiling on the same signal."""
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", _COMPILE_WHEN_TOLD, str(go)], cwd=ROOT, env=child_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    time.sleep(8)                                    # both have imported the DSL and the step
    go.touch()
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    assert outs[0][0] == outs[1][0] and outs[0][0].split()[1] == str(resolve("b05").info.threads)


def test_a_variant_named_like_a_ladder_step_gets_its_own_compile(tmp_path):
    """A copy of h02 saved as h03.py has the id "h03" but h02's kernel: the compile is keyed by
    the file and its fingerprint, never by the id."""
    copy = tmp_path / "h03.py"
    shutil.copy(resolve("h02").path, copy)
    variant = resolve(str(copy))
    assert variant.id == "h03"
    mine, h02, h03 = (compile_step(s, "sm_90a") for s in (variant, resolve("h02"), resolve("h03")))
    assert mine.cubin.parent != h03.cubin.parent
    assert collections.Counter(mine.sass.opcodes) == collections.Counter(h02.sass.opcodes)
    assert collections.Counter(mine.sass.opcodes) != collections.Counter(h03.sass.opcodes)
