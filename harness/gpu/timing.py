"""GPU timing: CUDA events around each call, L2 flushed before each, median of many.

Side-by-side comparisons interleave the kernels in rounds, so a clock or thermal drift during the
measurement hits both alike. Each measured round's host-time window is kept (``windows``), so the
clock samples of harness/gpu/clocks.py can be attributed to the kernel that ran.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

L2_FLUSH_BYTES = 256 << 20      # well over the H200's 60 MB (and B200's 126 MB) L2


class Timer:
    def __init__(self):
        import torch
        self.torch = torch
        self.flush_buffer = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        self.windows: list[tuple[str, float, float]] = []     # (name, host start, host end) per round

    def samples_ms(self, fn: Callable[[], object], reps: int) -> list[float]:
        torch = self.torch
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            self.flush_buffer.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]

    def compare(self, fns: dict[str, Callable[[], object]], *, rounds: int = 5,
                budget_ms: float = 400.0) -> dict[str, float]:
        """Median ms of each fn, measured in interleaved rounds after a warm-up."""
        estimate = {}
        for name, fn in fns.items():
            fn()                                              # warm-up (and any lazy compile)
            estimate[name] = statistics.median(self.samples_ms(fn, 3))
        reps = {name: max(5, min(100, int(budget_ms / rounds / max(ms, 1e-3)))) for name, ms in estimate.items()}
        samples: dict[str, list[float]] = {name: [] for name in fns}
        self.windows = []
        for _ in range(rounds):
            for name, fn in fns.items():
                start = time.time()
                samples[name] += self.samples_ms(fn, reps[name])    # ends in a synchronize
                self.windows.append((name, start, time.time()))
        return {name: statistics.median(s) for name, s in samples.items()}
