"""The clock log of a timed comparison (harness/gpu/clocks.py): parsing nvidia-smi, attributing
samples to the kernel whose window holds them, and the sentence the results block writes. On a
GPU machine with nvidia-smi, a real log while a matmul runs."""

import os
import stat
from datetime import datetime

import pytest

from harness.gpu import clocks
from harness.gpu.measure import clock_fields
from harness.report.blocks_measured import clock_sentence


def _line(t: float, mhz: int, capped: bool) -> str:
    stamp = datetime.fromtimestamp(t).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    return f"{stamp}, {mhz}, 1980, {'Active' if capped else 'Not Active'}"


def test_parse_skips_what_it_cannot_read():
    text = "\n".join([_line(100.0, 1680, True), "[N/A], [N/A], 1980", _line(100.5, 1980, False), "2026/12/"])
    samples = clocks.parse_samples(text)
    assert [(round(t, 3), mhz, top, c) for t, mhz, top, c in samples] == [(100.0, 1680, 1980, True),
                                                                        (100.5, 1980, 1980, False)]


def test_samples_go_to_the_window_that_holds_them():
    samples = [(t, mhz, 1980.0, capped) for t, mhz, capped in
               [(1.0, 1500, True), (1.1, 1520, True), (2.0, 1900, False), (2.1, 1700, True), (3.0, 1000, False)]]
    windows = [("step", 0.9, 1.2), ("fa4", 1.9, 2.2), ("step", 5.0, 6.0)]
    seen = clocks.per_window(samples, windows)
    assert seen["step"] == {"sm_mhz": 1510, "sm_max_mhz": 1980, "power_capped": 1.0, "samples": 2}
    assert seen["fa4"]["sm_mhz"] == 1800 and seen["fa4"]["power_capped"] == 0.5
    fields = clock_fields(seen)
    assert fields["step_sm_mhz"] == 1510.0 and fields["fa4_power_capped"] == 0.5
    assert all(isinstance(v, float) for v in fields.values())      # --repeat takes medians of floats
    assert clocks.per_window(samples, [("step", 10, 11)]) == {} and clock_fields({}) == {}


def test_no_nvidia_smi_means_no_samples(monkeypatch):
    monkeypatch.setattr(clocks.shutil, "which", lambda name: None)
    with clocks.ClockLog() as log:
        pass
    assert log.samples == []


def test_the_log_reads_what_the_tool_prints(tmp_path, monkeypatch):
    """A stand-in nvidia-smi that prints two samples and then loops, as the real one does."""
    import time
    now = time.time()
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\necho '{_line(now, 1695, True)}'\necho '{_line(now, 1710, True)}'\n"
                    "while true; do sleep 0.05; done\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with clocks.ClockLog("GPU-x") as log:
        pass
    assert [s[1] for s in log.samples] == [1695, 1710]


def test_the_results_block_sentence_comes_from_the_row():
    bench = [{"seqlen": s, "step_sm_mhz": 1680.0 + i, "fa4_sm_mhz": 1690.0, "step_sm_max_mhz": 1980.0,
              "fa4_sm_max_mhz": 1980.0, "step_power_capped": 1.0, "fa4_power_capped": 0.75}
             for i, s in enumerate((4096, 8192, 16384))]
    text = clock_sentence({"bench": bench})
    assert "1,680 / 1,681 / 1,682 MHz" in text and "1,980 MHz" in text and "75% / 75% / 75%" in text
    assert clock_sentence({"bench": [{"seqlen": 4096}]}) is None


@pytest.mark.gpu
def test_a_real_log_while_a_matmul_runs():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or not clocks.shutil.which("nvidia-smi"):
        pytest.skip("needs a CUDA GPU and nvidia-smi")
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    with clocks.ClockLog(clocks.gpu_uuid()) as log:
        for _ in range(200):
            a @ a
        torch.cuda.synchronize()
    assert log.samples and all(0 < mhz <= top for _, mhz, top, _ in log.samples)
