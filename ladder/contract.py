"""The step contract: what every ladder step exposes, and the host plumbing all steps share.

A step module (``ladder/s01_*.py``, ``ladder/hopper/hNN_*.py``, ``ladder/blackwell/bNN_*.py``)
holds its whole kernel and defines:

* ``INFO``: a :class:`StepInfo` (id, change, arch, enabler flag, tile sizes, budgets, and the SASS
  fingerprint its writeup claims);
* ``host(mQ, mK, mV, mO, softmax_scale, stream)``: a ``@cute.jit`` function that launches the kernel;
* ``attention = contract.make_attention(INFO, host)``: the user-facing call.

Everything here is the same for every step, so it lives once, outside the lesson: input checks,
the fake tensors used to compile on a machine without a GPU, and the per-process compile cache.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Callable

HEAD_DIM = 128
ARCH_CAPABILITY = {"sm_90a": (9, 0), "sm_100a": (10, 0)}


@dataclass(frozen=True)
class StepInfo:
    id: str                       # "01", "h02", "b02"
    slug: str                     # file-name slug, e.g. "naive_mma_sync"
    title: str
    change: str                   # the one change from the predecessor, in one line
    archs: tuple[str, ...]        # targets it compiles for, e.g. ("sm_90a", "sm_100a")
    enabler: bool                 # an enabler step may stay flat; every other step must climb
    threads: int                  # threads per CTA
    tile_m: int                   # query rows per CTA
    tile_n: int                   # key/value rows per inner iteration
    smem_bytes: int               # dynamic shared memory per CTA, from the shared-storage struct
    predecessor: str | None       # the step this one is one change away from
    sass_present: tuple[str, ...] = ()   # SASS opcodes the mechanism must produce
    sass_absent: tuple[str, ...] = ()    # SASS opcodes the mechanism must have removed
    tmem_cols: int | None = None  # Blackwell tensor-memory columns allocated per CTA
    head_dim: int = HEAD_DIM
    extra: dict = field(default_factory=dict)   # step-specific facts (stages, warp roles, ...)

    @property
    def track(self) -> str:
        return {"h": "hopper", "b": "blackwell"}.get(self.id[0], "shared")

    @property
    def capabilities(self) -> tuple[tuple[int, int], ...]:
        return tuple(ARCH_CAPABILITY[a] for a in self.archs)

    def arch_for_capability(self, capability: tuple[int, int]) -> str | None:
        for arch in self.archs:
            if ARCH_CAPABILITY[arch] == tuple(capability):
                return arch
        return None


# ----------------------------------------------------------------------------------------------
# Input validation: every violated constraint is a ValueError that names it.
# ----------------------------------------------------------------------------------------------

def validate_inputs(info: StepInfo, q, k, v, softmax_scale=None) -> float:
    """Check q, k, v against the step's constraints; return the softmax scale to use.

    The device check comes last so that every other constraint can be tested on a CPU.
    """
    import torch

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype != torch.bfloat16:
            raise ValueError(f"dtype: {name} must be torch.bfloat16, got {t.dtype}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(
                f"rank: {name} must be 4-D (batch, seqlen, heads, head_dim), got shape {tuple(t.shape)}")
        if t.shape[3] != info.head_dim:
            raise ValueError(f"head dim: {name}.shape[3] must be {info.head_dim}, got {t.shape[3]}")
    if not (q.shape == k.shape == v.shape):
        raise ValueError(
            "shape mismatch: q, k and v must have the same (batch, seqlen, heads, head_dim); "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    batch, seqlen, heads, _ = q.shape
    if batch < 1 or heads < 1 or seqlen < 1:
        raise ValueError(f"shape: batch, seqlen and heads must be >= 1, got {tuple(q.shape)}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.stride(3) != 1:
            raise ValueError(f"strides: {name} must be contiguous in head_dim (stride 1), "
                             f"got strides {t.stride()}")
        if any(s % 8 for s in t.stride()[:3]) or t.data_ptr() % 16:
            raise ValueError(f"alignment: {name} must be 16-byte aligned with strides that are "
                             f"multiples of 8 elements, got strides {t.stride()}")
    if seqlen % info.tile_m:
        raise ValueError(f"seqlen: step {info.id} needs seqlen to be a multiple of its query tile "
                         f"TILE_M={info.tile_m} (no masking of partial tiles), got {seqlen}")
    if seqlen % info.tile_n:
        raise ValueError(f"seqlen: step {info.id} needs seqlen to be a multiple of its key tile "
                         f"TILE_N={info.tile_n} (no masking of partial tiles), got {seqlen}")
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(info.head_dim)
    softmax_scale = float(softmax_scale)
    if not math.isfinite(softmax_scale) or softmax_scale <= 0:
        raise ValueError(f"softmax_scale must be a finite positive number, got {softmax_scale}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.device.type != "cuda":
            raise ValueError(f"device: {name} must be a CUDA tensor, got device {t.device}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"device: q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    import torch.cuda
    capability = torch.cuda.get_device_capability(q.device)
    if info.arch_for_capability(capability) is None:
        raise ValueError(
            f"arch: step {info.id} targets {', '.join(info.archs)}; this GPU is sm_{capability[0]}{capability[1]}")
    return softmax_scale


# ----------------------------------------------------------------------------------------------
# Compile-time arguments. The same fake tensors serve a CPU-only compile (no driver) and the
# real compile on a GPU: dynamic batch, seqlen and heads, head_dim fixed at 128, 16-byte aligned.
# ----------------------------------------------------------------------------------------------

def fake_arguments():
    """Compile-time stand-ins with exactly the type a real call passes (see ``runtime_tensor``)."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    def qkvo():
        shape = (cute.sym_int(), cute.sym_int(), cute.sym_int(), cute.sym_int())
        stride = (cute.sym_int64(), cute.sym_int64(), cute.sym_int64(), 1)
        return make_fake_tensor(cutlass.BFloat16, shape, stride, assumed_align=16)

    return (qkvo(), qkvo(), qkvo(), qkvo(), cutlass.Float32(1.0), make_fake_stream())


def runtime_tensor(t):
    """A (batch, seqlen, heads, dim) torch tensor as the kernel sees it: all extents and strides
    dynamic, head_dim stride 1, base 16-byte aligned (``validate_inputs`` checked all of that)."""
    from cutlass.cute.runtime import from_dlpack
    return from_dlpack(t, assumed_align=16).mark_layout_dynamic(leading_dim=3)


def aligned(t):
    """Inside ``host``: restate what ``validate_inputs`` guarantees, so the compiler may use 16-byte
    vector accesses: every stride but the last is a multiple of 8 elements."""
    import cutlass.cute as cute
    stride = tuple(cute.assume(s, divby=8) for s in t.stride[:-1]) + (t.stride[-1],)
    return cute.make_tensor(t.iterator, cute.make_layout(t.shape, stride=stride))


def set_target_arch(arch: str) -> None:
    """Make ``arch`` the DSL's target for code traced from now on (MMA atoms check it when they
    are built), also where no ``--gpu-arch`` option is in play (host-side layout tests)."""
    import os

    from cutlass.cutlass_dsl import CuTeDSL

    os.environ["CUTE_DSL_ARCH"] = arch
    CuTeDSL._get_dsl().envar.arch = arch


def compile_host(host: Callable, arch: str, options: str = "", args=None):
    """Compile a step's ``host`` for ``arch``. With no ``args`` it uses ``fake_arguments()`` and
    needs no GPU (no device is queried while tracing); a test checks both give the same SASS."""
    import os  # noqa: F401  (unused; deleting it changes the contract fingerprint of every recorded result)

    import cutlass.cute as cute

    set_target_arch(arch)
    args = fake_arguments() if args is None else args
    return cute.compile(host, *args, options=f"--gpu-arch {arch} {options}".strip())


# ----------------------------------------------------------------------------------------------
# Running: one compile per (step, arch) per process.
# ----------------------------------------------------------------------------------------------

_compiled: dict = {}
_lock = threading.Lock()


def compiled_for(info: StepInfo, host: Callable, arch: str, args):
    key = (info.id, id(host), arch)     # id(host): a variant file may reuse its step's id
    with _lock:
        if key not in _compiled:
            _compiled[key] = compile_host(host, arch, args=args)
        return _compiled[key]


def make_attention(info: StepInfo, host: Callable) -> Callable:
    """The step's public call: ``attention(q, k, v, softmax_scale=None) -> o``."""

    def attention(q, k, v, softmax_scale=None):
        import cutlass
        import torch
        from cuda.bindings import driver as cuda

        scale = validate_inputs(info, q, k, v, softmax_scale)
        arch = info.arch_for_capability(torch.cuda.get_device_capability(q.device))
        o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        with torch.cuda.device(q.device):
            stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
            args = (*(runtime_tensor(t) for t in (q, k, v, o)), cutlass.Float32(scale), stream)
            compiled_for(info, host, arch, args)(*args)
        return o

    attention.__doc__ = (f"Step {info.id}: {info.title}. q, k, v: (batch, seqlen, heads, {info.head_dim}) "
                         "bf16 CUDA tensors of equal shape; returns o of the same shape.")
    return attention
