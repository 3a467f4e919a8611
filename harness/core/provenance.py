"""Where a number came from: GPU, driver, library versions, date, command. Every recorded row carries it."""

from __future__ import annotations

import datetime
import os
import shlex
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version

from harness.core import toolchain


def version_of(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def gpu_capability() -> tuple[int, int] | None:
    """The current GPU's compute capability, or None without a usable CUDA GPU."""
    try:
        import torch
        if torch.cuda.is_available():
            return tuple(torch.cuda.get_device_capability())
    except Exception:
        pass
    return None


def driver_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except Exception:
        return None


def collect(command: list[str] | None = None) -> dict:
    import torch
    cap = gpu_capability()
    return {
        "gpu": torch.cuda.get_device_name() if cap else None,
        "capability": list(cap) if cap else None,
        "driver": driver_version() if cap else None,
        "cuda_runtime": torch.version.cuda,
        "torch": torch.__version__,
        "cutlass_dsl": version_of("nvidia-cutlass-dsl"),
        # the compiler that built what ran (harness/core/toolchain.py): its machine code depends on it
        "ptxas": toolchain.ptxas_version(),
        "cutlass_dsl_libs": toolchain.dsl_flavor(),
        "flash_attn_4": version_of("flash-attn-4"),
        "python": sys.version.split()[0],
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": shlex.join(command) if command is not None else os.environ.get(
            "LADDER_COMMAND", shlex.join(["ladder", *sys.argv[1:]])),
    }
