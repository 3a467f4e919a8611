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
