"""Compile a step for an arch with no GPU (fake tensors) and read back what the compiler made.

Each compile writes into its own fresh directory and publishes it under
build/compile/<file stem>-<arch>-<key>/ with one rename, where <key> hashes the step file's resolved
path and its fingerprint (step code, contract code, CuTe DSL release). So two processes compiling
the same step at once (two pytest runs, ``pytest -n``) never write into each other's files, and a
copy of h02 saved as ``h03.py`` elsewhere is never mistaken for h03. Within a process, a (file,
fingerprint, arch) compiles once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from harness import sass as sass_mod
from harness.paths import BUILD
from harness.steps import Step

COMPILE_DIR = BUILD / "compile"


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


_memo: dict[tuple[str, str, str], CompileReport] = {}


def compile_key(step: Step, arch: str) -> tuple[str, str, str]:
    """What makes two compiles the same: the file (resolved path), what it and the contract
    contain, the DSL release, and the arch; never the step's id, which a variant file may share."""
    fingerprint = json.dumps(step.fingerprint, sort_keys=True)
    return str(step.path.resolve()), fingerprint, arch


def compile_step(step: Step, arch: str) -> CompileReport:
    key = compile_key(step, arch)
    if key in _memo:
        return _memo[key]
    if arch not in step.info.archs:
        raise ValueError(f"step {step.id} targets {', '.join(step.info.archs)}, not {arch}")
    from ladder import contract

    COMPILE_DIR.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256("\0".join(key).encode()).hexdigest()[:16]
    final = COMPILE_DIR / f"{step.path.stem}-{arch}-{digest}"
    # The DSL writes nothing (and says nothing) if the dump dir is missing: mkdtemp creates it.
    work = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=COMPILE_DIR))
    try:
        start = time.perf_counter()
        contract.compile_host(step.module.host, arch, f"--keep-cubin --keep-ptx --dump-dir {work}")
        seconds = time.perf_counter() - start
        _expect_one_cubin_and_ptx(work)          # before publishing: a final directory is always whole
        out = _publish(work, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # gone already if it was published
    cubins, ptxs = _expect_one_cubin_and_ptx(out)
    report = CompileReport(step_id=step.id, arch=arch, compile_seconds=seconds, cubin=cubins[0],
                           ptx=ptxs[0], sass=sass_mod.read_cubin(cubins[0]),
                           threads_per_cta=threads_per_cta(ptxs[0].read_text()))
    _memo[key] = report
    return report


def _expect_one_cubin_and_ptx(folder: Path) -> tuple[list[Path], list[Path]]:
    cubins, ptxs = sorted(folder.glob("*.cubin")), sorted(folder.glob("*.ptx"))
    if len(cubins) != 1 or len(ptxs) != 1:
        raise RuntimeError(f"expected one cubin and one PTX in {folder}, found {cubins + ptxs}")
    return cubins, ptxs


def _publish(work: Path, final: Path) -> Path:
    """Give a finished compile directory its final name with one rename (atomic: a directory under
    that name is always complete). If another process published the same key first, its directory
    stays (same inputs, same kernel; it may be reading it) and this one is dropped."""
    try:
        os.rename(work, final)
    except OSError:
        if not final.is_dir():
            raise
    return final


def threads_per_cta(ptx_text: str) -> int:
    m = re.search(r"\.reqntid\s+(\d+)(?:,\s*(\d+))?(?:,\s*(\d+))?", ptx_text)
    threads = 1
    for g in (m.groups() if m else ()):
        threads *= int(g or 1)
    return threads
