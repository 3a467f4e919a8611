"""CPU-side proof of every step: it compiles for each arch it targets (no GPU), the binary targets
that arch, its SASS shows the mechanism it claims, and nothing spills. Each (step, arch) compiles
once per test process (harness.compiler.compile memoizes); compile times are reported, not asserted."""

import collections
import shutil
import subprocess
import sys

import pytest
from conftest import STEP_ARCHS

from harness.compiler.compile import compile_step
from harness.core.paths import ROOT
from harness.core.steps import resolve
from harness.gpu.isolate import child_env


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
    assert step.info.sass_present, f"{step.id} claims no mechanism in its SASS"
    for name in step.info.sass_present:
        assert report.sass.mechanisms.get(name, 0) > 0, f"{step.id}: no {name} in its SASS"
    for name in step.info.sass_absent:
        assert report.sass.mechanisms.get(name, 0) == 0, f"{step.id}: {name} should be gone"


def _register_cap(threads: int) -> int:
    """Registers per thread ptxas may use for a CTA of ``threads``: the 64K register file over the
    warps rounded up to a multiple of 4 (one per scheduler), rounded down to a multiple of 8."""
    warps = -(-threads // 32)
    return min(255, 65536 // (-(-warps // 4) * 4 * 32) // 8 * 8)


def test_no_register_spills(compiled):
    """No spills, except in a step that declares them (``spills_at_register_cap``, with the reason):
    there the kernel must be at the register cap its thread count allows, and must really spill (a
    declaration that stopped being true is removed)."""
    step, report = compiled
    detail = f"{step.id}: {report.sass.local_bytes} B local, {report.sass.mechanisms.get('LDL/STL')} LDL/STL"
    if step.info.extra.get("spills_at_register_cap"):
        assert report.sass.spills > 0, f"{step.id} declares spills but has none: drop the declaration"
        assert report.sass.registers == _register_cap(step.info.threads), detail
    else:
        assert report.sass.spills == 0, detail


def test_register_cap_of_a_cta():
    assert _register_cap(320) == _register_cap(384) == 168      # 10 warps take 12 warps' share
    assert _register_cap(128) == 255 and _register_cap(256) == 255 and _register_cap(512) == 128


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

    from harness.compiler.sass import read_cubin
    from ladder import contract
    step = resolve("01")
    t = torch.zeros(2, 256, 3, 128, dtype=torch.bfloat16)
    args = (*(contract.runtime_tensor(t) for _ in range(4)), cutlass.Float32(0.1), make_fake_stream())
    contract.compile_host(step.module.host, "sm_90a", f"--keep-cubin --dump-dir {tmp_path}", args=args)
    real = read_cubin(next(tmp_path.glob("*.cubin")))
    fake = compile_step(step, "sm_90a").sass
    assert collections.Counter(real.opcodes) == collections.Counter(fake.opcodes)
    assert real.registers == fake.registers


_COMPILE_IN_STEP = """
import sys, time
from pathlib import Path
from harness.compiler.compile import compile_step
from harness.core.steps import resolve
from ladder import contract

role, signals = sys.argv[1], Path(sys.argv[2])

def signal(name):
    (signals / name).touch()

def wait_for(name, seconds=120):
    end = time.time() + seconds
    while not (signals / name).exists() and time.time() < end:
        time.sleep(0.02)

compile_host = contract.compile_host

def interleaved(*args, **kwargs):
    if role == "b":
        signal("b-compiled")             # must not happen: A's compile is B's too
    out = compile_host(*args, **kwargs)
    if role == "a":                      # B asks for the same step while A is still compiling
        signal("a-compiling")
        wait_for("b-asking")
        time.sleep(1.0)                  # B is at the lock by now
    return out

contract.compile_host = interleaved
if role == "b":
    wait_for("a-compiling")
    signal("b-asking")
report = compile_step(resolve("h02"), "sm_90a")
print(report.sass.mechanisms["HGMMA"], report.threads_per_cta, report.cubin.parent.name)
"""


def test_a_process_asking_for_a_step_another_is_compiling_waits_and_reads_its_compile(tmp_path):
    """Two pytest workers need the same step at once. Forced into that order: A is compiling h02;
    B asks for h02 meanwhile. B waits on the compile's lock, then reads A's published directory; it
    never compiles (no CPU spent twice) and never reads a half-written directory."""
    env = {**child_env(), "LADDER_BUILD": str(tmp_path / "build")}        # nothing published yet
    procs = {role: subprocess.Popen([sys.executable, "-c", _COMPILE_IN_STEP, role, str(tmp_path)], cwd=ROOT,
                                    env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for role in ("a", "b")}
    outs = {role: p.communicate(timeout=600) for role, p in procs.items()}
    for role, p in procs.items():
        assert p.returncode == 0, f"{role}: {outs[role][1][-3000:]}"
    assert outs["a"][0] == outs["b"][0] and outs["a"][0].split()[1] == str(resolve("h02").info.threads)
    assert (tmp_path / "b-asking").exists()              # B asked while A compiled
    assert not (tmp_path / "b-compiled").exists()        # and did not compile it again


_REUSE = """
import sys
from harness.compiler.compile import compile_step
from harness.core import toolchain
from harness.core.steps import resolve
from ladder import contract
if sys.argv[1] == "reuse":
    def refuse(*args, **kwargs):
        raise AssertionError("compiled again: the published directory was not reused")
    contract.compile_host = refuse
report = compile_step(resolve("01"), "sm_90a")
assert report.sass.ptxas.startswith(toolchain.ptxas_version() + "."), (report.sass.ptxas, toolchain.ptxas_version())
print(report.cubin.parent.name, report.compile_seconds, sorted(report.sass.opcodes.items()))
"""


def test_a_later_process_reads_a_published_compile_instead_of_compiling(tmp_path):
    """One compile per step per build directory: a second process (another pytest worker, the next
    run) finds the first one's directory and reads it, with the first compile's time and the ptxas
    stamp of its cubin."""
    env = {**child_env(), "LADDER_BUILD": str(tmp_path / "build")}
    outs = [subprocess.run([sys.executable, "-c", _REUSE, mode], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=600) for mode in ("compile", "reuse")]
    for out in outs:
        assert out.returncode == 0, out.stderr[-3000:]
    assert outs[0].stdout == outs[1].stdout
    assert len([d for d in (tmp_path / "build" / "compile").iterdir() if not d.name.startswith(".")]) == 1


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


def test_launch_facts_of_a_variant_outside_the_repository(tmp_path):
    """`ladder sass /tmp/my_h05.py` reads the launch facts of a file that is no module of the
    repository: the child compile loads it from its path."""
    from harness.compiler.compile import launch_facts
    copy = tmp_path / "my_h05.py"
    shutil.copy(resolve("h05").path, copy)
    assert launch_facts(resolve(str(copy)), "sm_90a") == launch_facts(resolve("h05"), "sm_90a")
