"""Compile a step for an arch with no GPU (fake tensors) and read back what the compiler made.

One compile per (step, arch) per process; the cubin and PTX are kept under build/compile/.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from harness import sass as sass_mod
from harness.steps import ROOT, Step

BUILD = ROOT / "build" / "compile"


@dataclass
class CompileReport:
    step_id: str
    arch: str
    compile_seconds: float
    cubin: Path
    ptx: Path
    sass: sass_mod.Sass
    threads_per_cta: int          # from the PTX .reqntid the DSL emits from launch(block=...)

    @property
    def registers(self) -> int:
        return self.sass.registers


_memo: dict[tuple[str, str], CompileReport] = {}


def compile_step(step: Step, arch: str) -> CompileReport:
    key = (step.id, arch)
    if key in _memo:
        return _memo[key]
    if arch not in step.info.archs:
        raise ValueError(f"step {step.id} targets {', '.join(step.info.archs)}, not {arch}")
    from ladder import contract

    out = BUILD / f"{step.id}-{arch}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)          # the DSL writes nothing (and says nothing) if it is missing
    module = step.module
    start = time.perf_counter()
    contract.compile_host(module.host, arch, f"--keep-cubin --keep-ptx --dump-dir {out}")
    seconds = time.perf_counter() - start
    cubins, ptxs = sorted(out.glob("*.cubin")), sorted(out.glob("*.ptx"))
    if len(cubins) != 1 or len(ptxs) != 1:
        raise RuntimeError(f"expected one cubin and one PTX in {out}, found {cubins + ptxs}")
    ptx_text = ptxs[0].read_text()
    m = re.search(r"\.reqntid\s+(\d+)(?:,\s*(\d+))?(?:,\s*(\d+))?", ptx_text)
    threads = 1
    for g in (m.groups() if m else ()):
        threads *= int(g or 1)
    report = CompileReport(step_id=step.id, arch=arch, compile_seconds=seconds, cubin=cubins[0],
                           ptx=ptxs[0], sass=sass_mod.read_cubin(cubins[0]), threads_per_cta=threads)
    _memo[key] = report
    return report
