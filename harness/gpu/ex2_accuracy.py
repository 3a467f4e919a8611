"""How accurate is a step's FMA-pipe exponential (``ex2_emulated_pair`` of b11, FA4's degree-3
recipe) on a real GPU? An element-wise kernel runs the step's own function over every region of
its input range; the answer is compared with float64 2^x and, bit for bit, with the CPU model of
the same arithmetic (harness/model/ex2_model.py). ``ladder accuracy`` runs ``measure`` in a child process.

The function is imported from the step's module, never copied: what is measured is what the
kernel calls. On an H200 (sm_90a, no FFMA2) it runs one lane at a time (``packed=False``), the same
arithmetic as the packed FADD2/FFMA2 path a B200 runs (``packed=True``).
"""

from __future__ import annotations

import ast
import functools
import tempfile
from pathlib import Path

import cutlass
import cutlass.cute as cute
import numpy as np

from harness.core.steps import Step, code_sha256, cutlass_dsl_version, resolve
from harness.model import ex2_model

DEFAULT_STEP = "b11"
# The emulation block of the step's module: its constants and functions, by name.
EMULATION = ("EX2_POLY", "EX2_CLAMP", "ROUND_DOWN_MAGIC", "_asm_f32", "_exponent_add", "ex2_emulated_pair")
# Compute capability -> (arch, packed): which of the function's paths that GPU runs.
PATHS = {(9, 0): ("sm_90a", False), (10, 0): ("sm_100a", True)}
THREADS = 128                 # threads per CTA; each thread computes one pair of elements


def path_name(packed: bool) -> str:
    return "packed (FADD2/FFMA2)" if packed else "scalar (one lane per instruction)"


# ------------------------------------------------------------------------------ the step's function
def constants(step: Step) -> dict:
    """The step's polynomial, round-down constant and clamp, as ex2_model.ex2_fma_pipe takes them."""
    m = step.module
    return {"poly": m.EX2_POLY, "magic": m.ROUND_DOWN_MAGIC, "clamp": m.EX2_CLAMP}


def model(step: Step, x, *, packed: bool = False, **broken) -> np.ndarray:
    """The CPU model of the step's path. Both paths floor with an add that keeps denormals
    (add.rm.f32 one lane at a time, add.rm.f32x2 packed), so ``packed`` changes nothing here; it is
    kept so that a path that diverged would be modelled by its own flag."""
    del packed
    return ex2_model.ex2_fma_pipe(x, **{**constants(step), **broken}, ftz=False)


def fingerprint(step: Step) -> dict:
    """What a recorded accuracy depends on: the code of the emulation block alone (its constants and
    functions, docstrings and comments left out) and the CuTe DSL release. The rest of the step's
    kernel may change without making the number stale."""
    tree = ast.parse(step.path.read_text())
    nodes = {}
    for node in tree.body:
        names = ([t.id for t in node.targets if isinstance(t, ast.Name)] if isinstance(node, ast.Assign)
                 else [node.name] if isinstance(node, ast.FunctionDef) else [])
        nodes.update({n: node for n in names if n in EMULATION})
    missing = [n for n in EMULATION if n not in nodes]
    if missing:
        raise ValueError(f"{step.id} has no FMA-pipe exponential: {', '.join(missing)} missing from "
                         f"{step.path.name}")
    block = ast.unparse(ast.Module(body=[nodes[n] for n in EMULATION], type_ignores=[]))
    return {"emulation": code_sha256(block), "cutlass_dsl": cutlass_dsl_version()}


def stale_reason(step: Step, entry: dict) -> str | None:
    """Why a recorded accuracy no longer describes the step's emulation, or None if it does."""
    recorded, now = entry.get("fingerprint") or {}, fingerprint(step)
    if recorded.get("emulation") != now["emulation"]:
        return "the emulation's code changed"
    if recorded.get("cutlass_dsl") != now["cutlass_dsl"]:
        return f"measured with nvidia-cutlass-dsl {recorded.get('cutlass_dsl')}, now {now['cutlass_dsl']}"
    return None


# ------------------------------------------------------------------------------------- the inputs
def inputs() -> np.ndarray:
    """float32 x over the whole input range, an even count: a dense grid over [-127, 0], the
    integers (frac = 0) and their float32 neighbours on both sides (frac a hair from 1 or 0), the
    clamp region down to -200, huge negatives (what a masked score becomes) and 0."""
    f32 = np.float32
    integers = -np.arange(0, 128, dtype=f32)
    x = np.concatenate([
        np.linspace(-127.0, 0.0, (1 << 22) + 1, dtype=f32),
        integers,
        np.nextafter(integers, f32(-np.inf)),
        np.nextafter(integers[1:], f32(np.inf)),
        np.linspace(-200.0, -127.0, 73_001, dtype=f32),
        np.array([-1e4, -1e10, -1e30, -3.4e38, -np.inf, 0.0, -0.0], dtype=f32),
    ])
    return np.concatenate([x, np.zeros(x.size % 2, dtype=f32)])


# ------------------------------------------------------------------------------------- the kernel
@cute.kernel
def kernel(mX: cute.Tensor, mY: cute.Tensor, ex2_pair: cutlass.Constexpr):
    """Thread t of CTA b: elements 2i and 2i+1, i = b * THREADS + t, through ``ex2_pair``."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = (bidx * THREADS + tidx) * 2
    if i < cute.size(mX):
        mY[i], mY[i + 1] = ex2_pair(mX[i], mX[i + 1])


@cute.jit
def host(mX: cute.Tensor, mY: cute.Tensor, ex2_pair: cutlass.Constexpr, stream):
    """2^x of every element of the float32 vector mX (even length) into mY."""
    pairs = cute.size(mX) // 2
    kernel(mX, mY, ex2_pair).launch(grid=[(pairs + THREADS - 1) // THREADS, 1, 1], block=[THREADS, 1, 1],
                                    stream=stream)


def _compile(step: Step, arch: str, packed: bool, args, options: str = ""):
    from ladder import contract
    ex2_pair = functools.partial(step.module.ex2_emulated_pair, packed=packed)
    return contract.compile_host(host, arch, options, args=(args[0], args[1], ex2_pair, args[2]))


def compile_sass(step: Step, arch: str, packed: bool):
    """Compile the element-wise kernel for ``arch`` on any machine (fake tensors) and read its SASS."""
    from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

    from harness.compiler import sass

    def vector():
        return make_fake_compact_tensor(cutlass.Float32, (cute.sym_int(),), assumed_align=16)

    with tempfile.TemporaryDirectory() as tmp:       # the DSL writes nothing into a missing dump dir
        _compile(step, arch, packed, (vector(), vector(), make_fake_stream()),
                 f"--keep-cubin --dump-dir {tmp}")
        (cubin,) = Path(tmp).glob("*.cubin")
        return sass.read_cubin(cubin)


# --------------------------------------------------------------------------------- on the GPU
def measure(step_id: str = DEFAULT_STEP) -> dict:
    """Run the step's emulation on this GPU over ``inputs()``: its errors against float64 2^x, and
    how many results differ in any bit from the CPU model. Needs a GPU listed in PATHS."""
    import time

    import torch
    from cuda.bindings import driver as cuda
    from cutlass.cute.runtime import from_dlpack

    from harness.core.provenance import collect

    step = resolve(step_id)
    cap = tuple(torch.cuda.get_device_capability())
    if cap not in PATHS:
        raise ValueError(f"no path of {step.id}'s emulation runs on sm_{cap[0]}{cap[1]}")
    arch, packed = PATHS[cap]
    x = inputs()
    x_gpu = torch.from_numpy(x).cuda()
    y_gpu = torch.full_like(x_gpu, float("nan"))
    vectors = [from_dlpack(t, assumed_align=16).mark_layout_dynamic() for t in (x_gpu, y_gpu)]
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    start = time.perf_counter()
    compiled = _compile(step, arch, packed, (*vectors, stream))
    compile_seconds = time.perf_counter() - start
    compiled(*vectors, stream)                         # a compiled function takes no Constexpr arguments
    torch.cuda.synchronize()
    got = y_gpu.cpu().numpy()
    differs = got.view(np.uint32) != model(step, x, packed=packed).view(np.uint32)
    return {"step": step.id, "arch": arch, "path": path_name(packed), "provenance": collect(),
            "fingerprint": fingerprint(step), "bound": ex2_model.BF16_ROUNDING,
            **ex2_model.errors(x, got), "model_mismatches": int(differs.sum()),
            "first_mismatch_x": float(x[differs][0]) if differs.any() else None,
            "compile_seconds": compile_seconds}
