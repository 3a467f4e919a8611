"""Compile a step for an arch with no GPU (fake tensors) and read back what the compiler made.

Each compile writes into its own fresh directory, disassembles its cubin there, and publishes it
under build/compile/<file stem>-<arch>-<key>/ with one rename, where <key> hashes the step file's
resolved path and text, its fingerprint (step code, contract code, CuTe DSL release), the compiler
flavour and ptxas version the DSL loaded, and the arch. A process that finds the directory reads it
instead of compiling; one that finds another process compiling the same key (a lock file beside it)
waits for it. So a step compiles once per build/ directory and toolchain, whatever the number of
pytest workers; a half-written directory is never read; and a copy of h02 saved as ``h03.py``
elsewhere is never mistaken for h03.
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

from harness.compiler import sass as sass_mod
from harness.core import toolchain
from harness.core.memo import exclusive
from harness.core.paths import BUILD, ROOT
from harness.core.steps import Step

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

    @property
    def machine_code(self) -> str:
        """Digest of the kernel's instructions (``sass.machine_code_digest``): equal across machines
        exactly when the same compiler made the same code."""
        return sass_mod.machine_code_digest(self.cubin.read_bytes())


_memo: dict[tuple[str, str, str], CompileReport] = {}


def compile_key(step: Step, arch: str, guard: bool = False) -> tuple[str, ...]:
    """What makes two compiles the same: the file (resolved path), what it and the contract
    contain, the DSL release, the compiler flavour and ptxas the DSL loaded, and the arch; never the
    step's id, which a variant file may share.
    A guarded build (TMEM guardrails) is another kernel: its own key, never in a SASS table."""
    fingerprint = json.dumps(step.fingerprint, sort_keys=True)
    compiler = f"{toolchain.dsl_flavor()}-ptxas-{toolchain.ptxas_version()}"     # cu12 and cu13 builds differ
    text = hashlib.sha256(step.path.read_bytes()).hexdigest()     # comments move the PTX's line info
    return (str(step.path.resolve()), text, fingerprint, compiler, arch) + (("tmem-guard",) if guard else ())


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
    COMPILE_DIR.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256("\0".join(key).encode()).hexdigest()[:16]
    final = COMPILE_DIR / f"{step.path.stem}-{arch}{'-guard' if guard else ''}-{digest}"
    if not (final / FACTS).is_file():        # published by an earlier compile (this run, another worker, a warm build/)
        with exclusive(COMPILE_DIR / f".{final.name}.lock"):     # a second process waits, then reads
            if not (final / FACTS).is_file():
                _compile_into(step, arch, guard, final)
    report = _read_published(step, arch, final)
    _memo[key] = report
    return report


FACTS = "compile.json"      # written last into a compile's directory: what the report needs beyond the files


def _compile_into(step: Step, arch: str, guard: bool, final: Path) -> None:
    """Compile into a fresh private directory, disassemble, then publish it under ``final``."""
    from ladder import contract
    # The DSL writes nothing (and says nothing) if the dump dir is missing: mkdtemp creates it.
    work = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=COMPILE_DIR))
    try:
        start = time.perf_counter()
        options = f"--keep-cubin --keep-ptx --dump-dir {work}" + (f" {TMEM_GUARD}" if guard else "")
        contract.compile_host(step.module.host, arch, options)
        seconds = time.perf_counter() - start
        (cubin,), _ = _expect_one_cubin_and_ptx(work)   # before publishing: a final directory is always whole
        text, usage = sass_mod.disassemble(cubin)
        (work / SASS_TEXT).write_text(text)
        (work / USAGE_TEXT).write_text(usage)
        (work / FACTS).write_text(json.dumps({"compile_seconds": seconds,
                                              "ptxas": toolchain.cubin_ptxas(cubin.read_bytes())}))
        _publish(work, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # gone already if it was published


SASS_TEXT, USAGE_TEXT = "sass.txt", "resource-usage.txt"


def _read_published(step: Step, arch: str, folder: Path) -> CompileReport:
    cubins, ptxs = _expect_one_cubin_and_ptx(folder)
    facts = json.loads((folder / FACTS).read_text())
    sass = sass_mod.parse((folder / SASS_TEXT).read_text(), (folder / USAGE_TEXT).read_text(), ptxas=facts["ptxas"])
    return CompileReport(step_id=step.id, arch=arch, compile_seconds=facts["compile_seconds"], cubin=cubins[0],
                         ptx=ptxs[0], sass=sass, threads_per_cta=threads_per_cta(ptxs[0].read_text()))


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
        # A variant (a step file anywhere, e.g. /tmp/my_h05.py) is loaded from its path, a ladder step by name.
        code = ("import importlib, importlib.util, sys\nfrom ladder import contract\nname = sys.argv[1]\n"
                "if name.endswith('.py'):\n"
                "    spec = importlib.util.spec_from_file_location('ladder_variant', name)\n"
                "    module = importlib.util.module_from_spec(spec)\n    spec.loader.exec_module(module)\n"
                "else:\n    module = importlib.import_module(name)\n"
                "contract.compile_host(module.host, sys.argv[2])")
        env = {**os.environ, "CUTE_DSL_KEEP": "ir", "CUTE_DSL_DUMP_DIR": out}
        subprocess.run([sys.executable, "-c", code, str(step.path) if step.variant else step.module_name, arch],
                       env=env, check=True, capture_output=True, cwd=ROOT)
        found = [m.group(1) for f in sorted(Path(out).glob("*_clean.mlir"))
                 for m in _LAUNCH_FACTS.finditer(f.read_text())]
    if len(found) != 1:
        raise RuntimeError(f"{step.id}: expected one cutlass_launch_facts in the IR, found {len(found)}")
    facts = {}
    for name, dims, flag, number in _FACT.findall(found[0]):
        facts[name] = (tuple(int(d) for d in dims.split(",")) if dims else flag == "true" if flag else int(number))
    _launch_memo[key] = facts
    return facts


def cubin_facts(step: Step, arch: str) -> dict:
    """What the compiler made of ``step`` here, compiled now into a scratch directory without a
    disassembler (``ladder toolchain --record`` on a GPU machine): the ptxas stamped into its cubin
    and the digest of its machine code (``sass.machine_code_digest``)."""
    from ladder import contract
    with tempfile.TemporaryDirectory() as out:
        contract.compile_host(step.module.host, arch, f"--keep-cubin --dump-dir {out}")
        (cubin,) = Path(out).glob("*.cubin")
        data = cubin.read_bytes()
    return {"ptxas": toolchain.cubin_ptxas(data), "machine_code": sass_mod.machine_code_digest(data)}


_FRESH = ("import json, sys; from harness.compiler.compile import cubin_facts; from harness.core.steps import resolve; "
          "print(json.dumps(cubin_facts(resolve(sys.argv[1]), sys.argv[2])))")


def fresh_cubin_facts(step: Step, arch: str) -> dict:
    """``cubin_facts`` of a compile that is the first of a fresh process, as in a GPU job's child.
    ptxas's code for the same PTX can depend on what the process compiled before (seen for b02-b06:
    the same instructions and registers in another order), so machines are compared on compiles made
    this way."""
    out = subprocess.run([sys.executable, "-c", _FRESH, step.spec, arch], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


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
