"""Which compiler builds the kernels: the CuTe DSL's CUDA-toolkit flavour and the ptxas inside it.

nvidia-cutlass-dsl 4.8.1 ships two builds of its compiler, ``libs-cu12`` (ptxas 12.9) and ``libs-cu13``
(ptxas 13.x); the project installs both (``nvidia-cutlass-dsl[cu13]``) and the DSL loads the newest one
the driver allows (with no driver, the newest). The two make different machine code from the same
kernel (registers, spills, instruction order), so every SASS table, every CPU proof and every measured
row says which ptxas built it, and a test holds the CPU's to the one the GPU rows were measured with.
"""

from __future__ import annotations

import re
from functools import lru_cache

# ptxas stamps its version into every cubin it writes: "Cuda compilation tools, release 13.4, V13.4.59".
CUBIN_STAMP = re.compile(rb"Cuda compilation tools, release (\d+)\.(\d+), V(\d+\.\d+\.\d+)")


@lru_cache(maxsize=1)
def dsl_flavor() -> str:
    """The CUDA-toolkit flavour of the compiler this process's CuTe DSL loaded: "cu12" or "cu13"."""
    import cutlass  # noqa: F401  (loads the flavour the driver allows)
    from cutlass._mlir._mlir_libs import _cutlass_ir
    found = re.search(r"_cutlass_ir\.(cu\d+)\.", getattr(_cutlass_ir, "__file__", "") or "")
    return found.group(1) if found else "unknown"


@lru_cache(maxsize=1)
def ptxas_version() -> str:
    """major.minor of the ptxas this process's CuTe DSL compiles with (the toolkit it was built with)."""
    from cutlass.base_dsl.version_info import CUDA_VERSION
    return f"{CUDA_VERSION.major}.{CUDA_VERSION.minor}"


def major(version: str | None) -> int | None:
    return int(version.split(".")[0]) if version else None


def cubin_ptxas(data: bytes) -> str | None:
    """The full ptxas version (``13.4.59``) stamped into a cubin, or None if it carries no stamp."""
    found = CUBIN_STAMP.search(data)
    return found.group(3).decode() if found else None


def describe() -> dict:
    """What builds and reads the kernels in this process, for provenance and ``ladder toolchain``."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(dist):
        try:
            return version(dist)
        except PackageNotFoundError:
            return None

    return {"ptxas": ptxas_version(), "cutlass_dsl_libs": dsl_flavor(),
            "flavours_installed": [f for f in ("cu12", "cu13") if installed(f"nvidia-cutlass-dsl-libs-{f}")],
            "nvdisasm": installed("nvidia-cuda-nvdisasm")}
