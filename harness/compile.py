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
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from harness import sass as sass_mod
from harness.paths import BUILD
from harness.steps import Step

COMPILE_DIR = BUILD / "compile"

# ptxas's tensor-memory guardrails (sm_100a): every TMEM access checks that its columns are
# allocated, in bounds and touched by the warp that owns those lanes, and traps if not.
TMEM_GUARD = "--ptxas-options=--g-tensor-memory-access-check"


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


def compile_key(step: Step, arch: str, guard: bool = False) -> tuple[str, ...]:
    """What makes two compiles the same: the file (resolved path), what it and the contract
    contain, the DSL release, and the arch; never the step's id, which a variant file may share.
    A guarded build (TMEM guardrails) is another kernel: its own key, never in a SASS table."""
    fingerprint = json.dumps(step.fingerprint, sort_keys=True)
    return (str(step.path.resolve()), fingerprint, arch) + (("tmem-guard",) if guard else ())


def compile_step(step: Step, arch: str, guard: bool = False) -> CompileReport:
    """Compile ``step`` for ``arch`` on any machine; ``guard``: with ptxas's TMEM guardrails
    (sm_100a), for ``ladder selfcheck --guard`` only."""
    key = compile_key(step, arch, guard)
    if key in _memo:
        return _memo[key]
    if arch not in step.info.archs:
        raise ValueError(f"step {step.id} targets {', '.join(step.info.archs)}, not {arch}")
    if guard and arch != "sm_100a":
        raise ValueError(f"TMEM guardrails exist on sm_100a only, not {arch}")
    from ladder import contract

    COMPILE_DIR.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256("\0".join(key).encode()).hexdigest()[:16]
    final = COMPILE_DIR / f"{step.path.stem}-{arch}{'-guard' if guard else ''}-{digest}"
    # The DSL writes nothing (and says nothing) if the dump dir is missing: mkdtemp creates it.
    work = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=COMPILE_DIR))
    try:
        start = time.perf_counter()
        options = f"--keep-cubin --keep-ptx --dump-dir {work}" + (f" {TMEM_GUARD}" if guard else "")
        contract.compile_host(step.module.host, arch, options)
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


_launch_memo: dict[tuple[str, ...], dict] = {}
_LAUNCH_FACTS = re.compile(r"cutlass_launch_facts = \{([^}]*)\}")
_FACT = re.compile(r"(\w+) = (?:array<i64: ([\d, ]+)>|(true|false)|(\d+))")


def launch_facts(step: Step, arch: str) -> dict:
    """What the DSL records about the kernel's launch in its IR (``cutlass_launch_facts``): the
    fixed block, cluster and grid shapes (tuples) and flags, e.g. ``exact_cluster_dim: (2, 1,
    1)``. A cluster shape is a launch attribute, not in the PTX: only the IR shows it. The DSL
    reads its keep-IR setting at import, so the compile runs in a child process (a few seconds)."""
    key = compile_key(step, arch)
    if key in _launch_memo:
        return _launch_memo[key]
    with tempfile.TemporaryDirectory() as out:
        code = ("import importlib, sys; from ladder import contract; "
                "contract.compile_host(importlib.import_module(sys.argv[1]).host, sys.argv[2])")
        env = {**os.environ, "CUTE_DSL_KEEP": "ir", "CUTE_DSL_DUMP_DIR": out}
        subprocess.run([sys.executable, "-c", code, step.module_name, arch], env=env, check=True,
                       capture_output=True, cwd=Path(__file__).resolve().parents[1])
        found = [m.group(1) for f in sorted(Path(out).glob("*_clean.mlir"))
                 for m in _LAUNCH_FACTS.finditer(f.read_text())]
    if len(found) != 1:
        raise RuntimeError(f"{step.id}: expected one cutlass_launch_facts in the IR, found {len(found)}")
    facts = {}
    for name, dims, flag, number in _FACT.findall(found[0]):
        facts[name] = (tuple(int(d) for d in dims.split(",")) if dims else flag == "true" if flag else int(number))
    _launch_memo[key] = facts
    return facts


def guard_every_compile() -> None:
    """From now on, in this process, compile every sm_100a kernel with TMEM guardrails: the switch
    in the contract's compile path that ``ladder selfcheck --guard`` turns on in its own child.
    It wraps ``contract.compile_host`` (which every run compiles through) instead of living in
    ladder/contract.py, whose text is part of every recorded result's fingerprint; measured and
    recorded runs never call it."""
    from ladder import contract
    plain = contract.compile_host
    if getattr(plain, "guarded", False):
        return

    def compile_host(host, arch, options="", args=None):
        extra = TMEM_GUARD if arch == "sm_100a" else ""
        return plain(host, arch, " ".join(o for o in (options, extra) if o), args=args)

    compile_host.guarded = True
    contract.compile_host = compile_host
