"""A deadlocked or crashing step must not hang or kill the harness."""

import time

from harness.gpu.isolate import run_job


def test_hang_becomes_timeout_quickly():
    start = time.perf_counter()
    res = run_job("hang", "01", timeout=3, module="tests.child_stub")
    assert res.status == "timeout" and res.error.startswith("TIMEOUT")
    assert time.perf_counter() - start < 30


def test_crash_is_reported():
    res = run_job("die", "01", timeout=60, module="tests.child_stub")
    assert res.status == "crash" and res.payload is None


def test_error_and_ok_are_told_apart():
    assert run_job("raise", "01", timeout=60, module="tests.child_stub").error == "ValueError: told to"
    ok = run_job("fine", "h02", timeout=60, module="tests.child_stub")
    assert ok.status == "ok" and ok.payload == {"step": "h02", "numerics": []}


def test_under_a_sanitizer_the_reference_runs_on_the_cpu(monkeypatch):
    """compute-sanitizer must see only the step's kernels: the child is told to compute the numerics
    reference on the CPU (reference/numerics.py), and no kernel filter is passed (with one,
    compute-sanitizer 2025.3 fails on the steps' kernels with an internal error)."""
    import subprocess

    from harness.gpu import isolate
    from reference import CPU_REFERENCE_ENV
    monkeypatch.setenv(CPU_REFERENCE_ENV, "1")      # left in the shell: must not reach a plain run
    seen = {}

    class _Proc:
        pid = 0

        def wait(self, timeout=None):
            return 3

    def popen(cmd, env=None, **_):
        seen[tuple(cmd[:2])] = (cmd, env)
        return _Proc()

    monkeypatch.setattr(subprocess, "Popen", popen)
    isolate.run_job("fine", "h02", timeout=5, sanitizer="racecheck")
    isolate.run_job("fine", "h02", timeout=5)
    (sanitized, env), = [v for k, v in seen.items() if k[0] == "compute-sanitizer"]
    (plain, plain_env), = [v for k, v in seen.items() if k[0] != "compute-sanitizer"]
    assert env[CPU_REFERENCE_ENV] == "1" and CPU_REFERENCE_ENV not in plain_env
    assert "--tool=racecheck" in sanitized and not any(a.startswith("--kernel-name") for a in sanitized)


def test_the_cpu_reference_switch_takes_only_1(monkeypatch):
    """A typo or "0" must not silently move (or keep) the reference: only "1" or unset are read."""
    import pytest

    from reference import CPU_REFERENCE_ENV
    from reference.numerics import reference_on_cpu
    monkeypatch.delenv(CPU_REFERENCE_ENV, raising=False)
    assert reference_on_cpu() is False
    monkeypatch.setenv(CPU_REFERENCE_ENV, "1")
    assert reference_on_cpu() is True
    for bad in ("0", "true", "yes"):
        monkeypatch.setenv(CPU_REFERENCE_ENV, bad)
        with pytest.raises(ValueError, match="must be 1"):
            reference_on_cpu()
