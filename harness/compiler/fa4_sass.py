"""Stock FlashAttention-4's forward kernel, compiled on a machine with no GPU, and its softmax budget.

The per-unit performance model needs FA4's SASS (its softmax loop's instructions per score element,
``MUFU.EX2`` count, registers, threads, tiles, shared memory, 2-CTA or not) for the ladder's
workload: bf16, head dim 128, non-causal, (batch, seqlen, heads, dim) = (4, 4096, 16, 128).

How it is built. ``flash_attn.cute.interface._flash_attn_fwd`` picks a configuration, builds a
``FlashAttentionForwardSm90`` / ``FlashAttentionForwardSm100`` object and passes it to
``cute.compile`` with the tensors. This module builds the same object with the same arguments
(:func:`_kernel`, each choice with the interface's reason) and compiles it with symbolic fake
tensors (every extent and stride dynamic but the head dim's, 16-byte aligned, as the interface's
``to_cute_tensor`` marks them) for ``--gpu-arch sm_90a`` / ``sm_100a``. Then it checks the choice
against the interface itself: ``flash_attn_func`` is called on fake CUDA tensors (torch's
``FakeTensorMode``, no GPU) with ``cute.compile`` intercepted, and the object it would have compiled
must equal ours attribute by attribute (``meta["interface_check"]``); a disagreement is an error.
Compiling the intercepted object instead gives SASS identical to ours (checked by hand once, FA4
4.0.0b36: same instructions, names aside).

It all runs in a child process (``python -m harness.compiler.fa4_build build ARCH DIR``, harness/compiler/fa4_build.py): importing
flash_attn imports quack, which patches CuTe's tensor classes process-wide; the build sets the
DSL's target arch and replaces ``cutlass.utils.HardwareInfo`` (FA4's persistent scheduler asks the
device for its SM count while tracing: B200's 148, H100/H200's 132 are given; they only size the
grid); none of that may leak into a process that compiles ladder steps. The child's environment
drops every ``CUTE_DSL_*``, ``FA_*`` and ``FLASH_ATTENTION_*`` variable of the parent (FA_CLC,
FA_DISABLE_2CTA, a system ptxas, ...): the build is FA4's default path.

Cache: build/fa4/<arch>-<fingerprint>/ (kernel.cubin, kernel.ptx, meta.json), published with one
rename; the fingerprint hashes the versions of flash-attn-4, nvidia-cutlass-dsl and quack-kernels
and the text of this file, fa4_build.py and reference/stock.py. Memoized per process.

Configurations chosen (FA4 4.0.0b36, this workload; ``Fa4Build.notes`` lists them):

* sm_90a: 128 x 128 tiles, 2 K/V stages, 384 threads (a producer warpgroup and two consumer
  warpgroups of 64 query rows each), P @ V with P from registers (RS), intra-warpgroup overlap,
  not persistent, 1 CTA per cluster.
* sm_100a: 128 x 128 tiles, two Q tiles per CTA (``q_stage`` 2: 256 query rows per CTA),
  2-CTA tcgen05 MMAs (cluster of 2), static persistent scheduler, 512 threads (softmax warps 0-7,
  one warpgroup per Q tile; correction 8-11; MMA 12; epilogue 13; load 14; one idle), no S
  ping-pong (it needs one Q tile), exp2 emulated on the FMA pipe for part of each tile
  (``ex2_emu_freq`` 10 with 2-CTA, FA4's tuning table).
  2-CTA is FA4's choice only where torch's CUDA is not 12.x: ``FA_DISABLE_2CTA`` is on by default
  under a CUDA-12 torch (a ptxas regression, FA4 says). The CPU torch (no CUDA) and the device
  machines' CUDA-13 torch both give 2-CTA, so it is what is built here; ``two_cta=False`` builds
  the 1-CTA kernel (``ex2_emu_freq`` 16) for comparison.
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
from dataclasses import dataclass, field
from pathlib import Path

from harness.compiler import sass as sass_mod
from harness.compiler import softmax_budget as sb
from harness.core import toolchain
from harness.core.memo import exclusive
from harness.core.paths import BUILD, ROOT

FA4_PIN = "flash-attn-4==4.0.0b36"
INSTALL_HINT = (f"pip install {FA4_PIN} (on a CPU machine also triton, which quack imports: "
                "pip install -e '.[model]' installs both)")
FA4_DIR = BUILD / "fa4"
ARCHS = ("sm_90a", "sm_100a")
# The ladder's workload (shapes only matter symbolically: the kernel is compiled for any extents).
WORKLOAD = {"batch": 4, "seqlen": 4096, "heads": 16, "head_dim": 128, "dtype": "bfloat16", "causal": False}
SM_COUNT = {"sm_90a": 132, "sm_100a": 148}   # H100/H200 SXM, B200: what FA4 is told (grid size only)
EX2_EMU_RES = 4          # apply_exp2_convert's default ex2_emu_res (FA4 does not pass one)
EX2_FRAGMENT = 32        # apply_exp2_convert's frg_tile
_ENV_DROP = re.compile(r"^(CUTE_DSL_|FA_|FLASH_ATTENTION_)")


class Fa4Missing(RuntimeError):
    pass


@dataclass
class Fa4Build:
    arch: str
    sass: sass_mod.Sass
    compile_seconds: float         # cute.compile alone, in the child that built it (cached: as recorded)
    threads_per_cta: int           # from the PTX .reqntid
    tile_m: int                    # query rows per CTA, all its Q tiles together (softmax_budget's tile_m)
    tile_n: int                    # key/value rows per K/V tile
    head_dim: int
    two_cta: bool                  # tcgen05 MMAs over a cluster of 2 CTAs (UTCHMMA.2CTA)
    smem_bytes: int | None         # dynamic shared memory per CTA: the kernel's SharedStorage struct
    notes: list[str]               # the configuration choices, each with its reason
    m_block_size: int = 0          # query rows per Q tile (FA4's tile_m / m_block_size)
    q_stage: int = 1               # Q tiles per CTA (sm_100: 2, one per softmax warpgroup)
    num_stages: int = 0            # K/V pipeline stages
    cluster_size: int = 1
    softmax_threads: int = 0       # threads that run the softmax
    rows_per_thread: int = 1       # query rows a softmax thread owns
    ex2_emulated_per_tile: int = 0 # exponentials per softmax thread per K/V tile on the FMA pipe
    setmaxnreg: dict = field(default_factory=dict)   # role -> registers after setmaxnreg (kernel object)
    config: dict = field(default_factory=dict)       # the kernel object's configuration attributes
    fa4_config: dict = field(default_factory=dict)   # FA4's compile key, as a GPU run records it (reference.stock)
    child_seconds: float = 0.0     # the whole child process: imports, interface check, compile
    directory: Path | None = None
    cached: bool = False

    @property
    def registers(self) -> int:
        """Registers per thread at launch (cuobjdump REG); warps then move to ``setmaxnreg``."""
        return self.sass.registers

    @property
    def elements_per_thread(self) -> int:
        """Score elements one softmax thread handles per K/V tile."""
        return self.tile_m * self.tile_n // self.softmax_threads


# ----------------------------------------------------------------------------------------------
# Parent side: versions, cache, child process.
# ----------------------------------------------------------------------------------------------

def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def versions() -> dict:
    """The versions a build depends on; raises :class:`Fa4Missing` without FA4 (or triton)."""
    from importlib.util import find_spec
    fa4 = _version("flash-attn-4")
    if fa4 is None or find_spec("flash_attn") is None:
        raise Fa4Missing(f"FlashAttention-4 is not installed: {INSTALL_HINT}")
    if find_spec("triton") is None:
        raise Fa4Missing(f"flash_attn.cute imports quack, which imports triton, not installed: {INSTALL_HINT}")
    return {"flash-attn-4": fa4, "nvidia-cutlass-dsl": _version("nvidia-cutlass-dsl"),
            "quack-kernels": _version("quack-kernels"),
            # cu12 and cu13 builds of the DSL compile FA4 to different SASS
            "ptxas": toolchain.ptxas_version(), "cutlass_dsl_libs": toolchain.dsl_flavor()}


def fingerprint() -> str:
    recipe = b"".join(f.read_bytes() for f in (Path(__file__), Path(__file__).parent / "fa4_build.py",
                                              ROOT / "reference" / "stock.py"))
    data = json.dumps(versions(), sort_keys=True).encode() + b"\0" + recipe
    return hashlib.sha256(data).hexdigest()[:16]


def build_dir(arch: str, two_cta: bool | None = None) -> Path:
    variant = "" if two_cta is None else ("-2cta" if two_cta else "-1cta")
    return FA4_DIR / f"{arch}{variant}-{fingerprint()}"


_memo: dict[tuple, Fa4Build] = {}


def compile_fa4(arch: str, *, two_cta: bool | None = None, timeout: float = 600) -> Fa4Build:
    """FA4's forward kernel for the ladder's workload on ``arch`` (``sm_90a`` or ``sm_100a``), as
    ``flash_attn_func`` would compile it; ``two_cta`` (sm_100a only) forces the 2-CTA choice
    (None: FA4's own). No GPU needed."""
    if arch not in ARCHS:
        raise ValueError(f"FA4 builds here for {', '.join(ARCHS)}, not {arch}")
    if two_cta is not None and arch != "sm_100a":
        raise ValueError("two_cta is a choice on sm_100a only")
    final = build_dir(arch, two_cta)
    key = (str(final),)
    if key in _memo:
        return _memo[key]
    cached = (final / "meta.json").is_file()
    if not cached:
        FA4_DIR.mkdir(parents=True, exist_ok=True)
        with exclusive(FA4_DIR / f".{final.name}.lock"):     # another process building it: wait, then read
            cached = (final / "meta.json").is_file()
            if not cached:
                work = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=FA4_DIR))
                try:
                    _run_child(arch, two_cta, work, timeout)
                    _publish(work, final)
                finally:
                    shutil.rmtree(work, ignore_errors=True)
    build = _load(final, cached)
    _memo[key] = build
    return build


def _child_env(arch: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not _ENV_DROP.match(k)}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               CUTE_DSL_ARCH=arch, FLASH_ATTENTION_ARCH=arch, FLASH_ATTENTION_NUM_SMS=str(SM_COUNT[arch]),
               FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED="0", PYTHONWARNINGS="ignore")
    return env


def _run_child(arch: str, two_cta: bool | None, work: Path, timeout: float) -> None:
    cmd = [sys.executable, "-m", "harness.compiler.fa4_build", "build", arch, str(work)]
    if two_cta is not None:
        cmd.append("--two-cta" if two_cta else "--one-cta")
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=_child_env(arch), cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    meta_path = work / "meta.json"
    if proc.returncode != 0 or not meta_path.is_file():
        tail = (proc.stdout + proc.stderr)[-4000:]
        raise RuntimeError(f"FA4 build for {arch} failed (exit {proc.returncode}):\n{tail}")
    meta = json.loads(meta_path.read_text())
    meta["child_seconds"] = time.perf_counter() - start    # imports, interface check and compile
    meta_path.write_text(json.dumps(meta, indent=1, default=str))


def _publish(work: Path, final: Path) -> None:
    """One rename: a directory under the final name is always whole. If another process published
    the same build first, its directory stays and this one is dropped."""
    try:
        os.rename(work, final)
    except OSError:
        if not (final / "meta.json").is_file():
            raise


def _load(folder: Path, cached: bool) -> Fa4Build:
    meta = json.loads((folder / "meta.json").read_text())
    if meta["interface_check"] not in ("agrees", "forced"):
        raise RuntimeError(f"FA4 build in {folder}: {meta['interface_check']}")
    from harness.compiler.compile import threads_per_cta
    ptx = (folder / "kernel.ptx").read_text()
    fields = {k: meta[k] for k in ("arch", "compile_seconds", "tile_m", "tile_n", "head_dim", "two_cta",
                                   "smem_bytes", "notes", "m_block_size", "q_stage", "num_stages",
                                   "cluster_size", "softmax_threads", "rows_per_thread",
                                   "ex2_emulated_per_tile", "setmaxnreg", "config", "child_seconds")}
    fields["fa4_config"] = meta.get("fa4_config") or {}
    return Fa4Build(sass=sass_mod.read_cubin(folder / "kernel.cubin"), threads_per_cta=threads_per_cta(ptx),
                    directory=folder, cached=cached, **fields)


# ----------------------------------------------------------------------------------------------
# The softmax budget of FA4's SASS.
# ----------------------------------------------------------------------------------------------

def ex2_emulated(elements: int, freq: int, start_frg: int, res: int = EX2_EMU_RES,
                 frg_tile: int = EX2_FRAGMENT) -> int:
    """Exponentials per row of ``elements`` that FA4's ``SoftmaxSm100.apply_exp2_convert`` computes
    with ``ex2_emulation_2`` (FMA pipe) instead of ``MUFU.EX2``: its loop, counted. Pairs (k, k+1)
    of each 32-element fragment j are emulated unless ``k % freq < freq - res``, j is the last
    fragment or ``j < start_frg``."""
    if freq == 0:
        return 0
    fragments = elements // frg_tile
    return sum(2 for j in range(fragments) for k in range(0, frg_tile, 2)
               if not (k % freq < freq - res or j >= fragments - 1 or j < start_frg))


def fa4_budget(arch: str, *, two_cta: bool | None = None) -> dict:
    """The softmax budget of FA4's forward kernel on ``arch``, in ``softmax_budget.budget``'s
    format (so ``softmax_budget.table`` and ``tile_cycles`` take it), with FA4's metadata.

    E (score elements per softmax thread per K/V tile) = tile_m * tile_n / softmax threads:
    sm_90a: 128 * 128 / 256 (two consumer warpgroups) = 64, 2 rows per thread (the wgmma
    accumulator holds rows r and r + 8); sm_100a: 256 * 128 / 256 (softmax warps 0-7, a TMEM lane
    is a row) = 128, 1 row per thread, of which ``ex2_emulated_per_tile`` on the FMA pipe.

    ``generic``: what ``softmax_budget.budget_from_sass`` makes of the same SASS (its loop and its
    ambiguity notes); the numbers here come from :func:`softmax_budget.kv_loop`'s loop."""
    build = compile_fa4(arch, two_cta=two_cta)
    elements, rows, emulated = build.elements_per_thread, build.rows_per_thread, build.ex2_emulated_per_tile
    generic = sb.budget_from_sass(build.sass.text, elements, rows, emulated)
    out = {"step": "FA4", "arch": arch, "tile_m": build.tile_m, "tile_n": build.tile_n,
           "head_dim": build.head_dim, "softmax_threads": build.softmax_threads}
    out.update(sb.peeled_budget_from_sass(build.sass.text, elements, rows, emulated))
    out["generic"] = {"loop": generic["loop"] and generic["loop"]["label"],
                      "loop_instructions": generic["loop"] and generic["loop"]["instructions"],
                      "total_per_element": generic.get("total_per_element"),
                      "ambiguous": generic["ambiguous"]}
    out["fa4"] = {"registers": build.registers, "threads_per_cta": build.threads_per_cta,
                  "m_block_size": build.m_block_size, "q_stage": build.q_stage, "num_stages": build.num_stages,
                  "two_cta": build.two_cta, "cluster_size": build.cluster_size, "smem_bytes": build.smem_bytes,
                  "setmaxnreg": build.setmaxnreg, "compile_seconds": build.compile_seconds,
                  "child_seconds": build.child_seconds,
                  "mufu_ex2_in_kernel": build.sass.mechanisms.get("MUFU.EX2", 0),
                  "ffma2_in_kernel": build.sass.mechanisms.get("FFMA2", 0),
                  "spills": build.sass.spills, "notes": build.notes, "directory": str(build.directory)}
    return out
