"""The SM clock and the power cap while kernels are timed, sampled by ``nvidia-smi`` in the background.

At full tensor-core load an H200 reaches its board power limit (700 W): the driver then lowers the
SM clock below its maximum and reports the clock event reason ``sw_power_cap``. A kernel timed
there runs as fast as its energy per tile allows, not only as its stalls allow, so two kernels
with the same tensor work can differ by what else they spend power on. The samples are attributed
to the kernel whose timing window (host time, from its first launch to the synchronize after its
last) contains them; the windows of a side-by-side comparison do not overlap (timing.Timer).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import time
from datetime import datetime

QUERY = "timestamp,clocks.sm,clocks.max.sm,clocks_event_reasons.sw_power_cap"
PERIOD_MS = 20                 # nvidia-smi's loop; a timing window lasts 50-100 ms


def parse_samples(text: str) -> list[tuple[float, float, float, bool]]:
    """nvidia-smi's CSV (noheader, nounits) -> (epoch seconds, SM MHz, max SM MHz, power-capped).
    Lines it cannot read (a partial last line, "[N/A]") are skipped."""
    samples = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            continue
        try:
            t = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            samples.append((t, float(parts[1]), float(parts[2]), parts[3] == "Active"))
        except ValueError:
            continue
    return samples


def per_window(samples, windows) -> dict[str, dict]:
    """Each name's samples inside its windows [(name, t0, t1)]: the median SM clock, the highest
    clock the GPU allows, the share of samples under the power cap, and how many there were."""
    out = {}
    for name in dict.fromkeys(w[0] for w in windows):
        inside = [s for s in samples if any(n == name and t0 <= s[0] <= t1 for n, t0, t1 in windows)]
        if inside:
            out[name] = {"sm_mhz": statistics.median(s[1] for s in inside), "sm_max_mhz": max(s[2] for s in inside),
                         "power_capped": sum(s[3] for s in inside) / len(inside), "samples": len(inside)}
    return out


class ClockLog:
    """``with ClockLog(gpu_uuid) as log: ...`` then ``log.samples``; no samples (and no error)
    where nvidia-smi is absent, so timing never depends on it."""

    def __init__(self, gpu_uuid: str | None = None):
        self.gpu_uuid, self.samples, self._proc = gpu_uuid, [], None

    def __enter__(self):
        exe = shutil.which("nvidia-smi")
        if exe:
            cmd = [exe, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", f"--loop-ms={PERIOD_MS}"]
            cmd += [f"--id={self.gpu_uuid}"] if self.gpu_uuid else []
            self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            time.sleep(0.2)            # its first sample comes before the first window opens
        return self

    def __exit__(self, *exc):
        if self._proc:
            time.sleep(2 * PERIOD_MS / 1000)
            self._proc.terminate()
            out, _ = self._proc.communicate(timeout=10)
            self.samples = parse_samples(out)
        return False


def gpu_uuid() -> str | None:
    """The torch device's UUID as nvidia-smi names it, where torch exposes it."""
    import torch
    uuid = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", None)
    return f"GPU-{uuid}" if uuid else None
