"""Per-SM unit rates of the GPUs the bound model (harness/model/bound.py) knows, with their sources.

Every rate is per streaming multiprocessor per clock, so that a step's cycles per K/V tile on one
GPU do not depend on the clock it happens to run at; fractions of FA4 are ratios of cycles at the
same clock. A rate we measured is marked as such, with the measurement.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rate:
    value: float
    unit: str
    source: str


@dataclass(frozen=True)
class Gpu:
    name: str
    arch: str                  # the sm_XXa the ladder compiles its steps for
    sms: int
    tensor: Rate               # dense bf16 FLOP per clock per SM
    mufu: Rate                 # MUFU (ex2, rcp, ...) results per clock per SM
    schedulers: Rate           # warp instructions issued per clock per SM
    smem: Rate                 # shared-memory bytes per clock per SM
    l2: Rate                   # how fast one SM's K/V tile loads land, bytes per clock per SM
    registers: int = 65536     # 32-bit registers per SM
    smem_per_sm: int = 228 * 1024
    max_threads: int = 2048


_SCHEDULERS = Rate(4, "warp instr/clk/SM", "4 sub-partitions per SM, one issue per clock each (NVIDIA Hopper and "
                   "Blackwell tuning guides)")
_SMEM = Rate(128, "B/clk/SM", "32 banks x 4 B per clock (CUDA C++ Programming Guide, shared memory)")
_MUFU = Rate(16, "ex2/clk/SM", "16 SFU results per clock per SM (CUDA C++ Programming Guide, arithmetic "
             "instruction throughput, compute capability 9.0 and 10.0); measured on the H200: 4.16e12 ex2/s = "
             "132 SMs x 16 x 1.98 GHz (../shared/device/README.md)")

GPUS = {
    "h200": Gpu(
        name="NVIDIA H200", arch="sm_90a", sms=132,
        tensor=Rate(4096, "FLOP/clk/SM", "989 TFLOP/s dense bf16 over 132 SMs at 1.83 GHz (H100/H200 SXM "
                    "datasheet); measured bf16 matmul 656-790 TFLOP/s on the H200 (../shared/device/README.md)"),
        mufu=_MUFU, schedulers=_SCHEDULERS, smem=_SMEM,
        l2=Rate(186, "B/clk/SM", "measured in h07's timeline (results/h200.json, timelines.h07): a K+V tile pair "
                "(64 KB) is waited for 1,302 cycles after its TMA issue (median over tiles 2-15, spread 1,018-1,596), "
                "= HANDOFF (150) + LOAD_LATENCY (800) + 64 KB at 186 B/clk; earlier recordings' medians, 1,627 and "
                "1,449 cycles, gave 97 and 131: the rate is sensitive, 950 of those cycles being the model's "
                "constants; tests/test_timeline.py re-derives it from the recording")),
    "b200": Gpu(
        name="NVIDIA B200", arch="sm_100a", sms=148,
        tensor=Rate(8192, "FLOP/clk/SM", "2.25 PFLOP/s dense bf16 over 148 SMs at ~1.85 GHz (B200 datasheet); "
                    "FA4 paper: tensor rate doubles per SM from Hopper"),
        mufu=_MUFU, schedulers=_SCHEDULERS, smem=_SMEM,
        l2=Rate(186, "B/clk/SM", "assumed as the H200's (no public figure used here); not measured")),
}


def gpu(key: str) -> Gpu:
    if key not in GPUS:
        raise ValueError(f"no unit rates for GPU {key!r}; known: {', '.join(GPUS)}")
    return GPUS[key]
