"""FA4's own pass/fail rule for a forward output (flash-attention tests/cute/test_flash_attn.py):

    max|out - ref32| <= 2 * max|ref_bf16 - ref32| + 2 * max|(ref32 + 0.3 - 0.3) - ref32|

The first term is twice the error that bf16 operands alone cost a straightforward implementation;
the second is twice the fp32 rounding noise at the output's magnitude.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from reference import CPU_REFERENCE_ENV
from reference.torch_attention import attention_ref


@dataclass(frozen=True)
class NumericsResult:
    max_error: float      # max|out - ref32|
    bound: float          # the rule's right-hand side
    finite: bool          # no NaN/Inf in out

    @property
    def passed(self) -> bool:
        return self.finite and self.max_error <= self.bound

    def __str__(self) -> str:
        verdict = "ok" if self.passed else "FAIL"
        return f"{verdict}: max err {self.max_error:.3e} <= bound {self.bound:.3e}" if self.passed \
            else f"{verdict}: max err {self.max_error:.3e} > bound {self.bound:.3e} (finite={self.finite})"


def fa4_bound(ref32: torch.Tensor, ref_bf16: torch.Tensor) -> float:
    ref32 = ref32.float()
    bf16_error = (ref_bf16.float() - ref32).abs().max().item()
    fp32_noise = ((ref32 + 0.3 - 0.3) - ref32).abs().max().item()
    return 2 * bf16_error + 2 * fp32_noise


def reference_on_cpu() -> bool:
    """Under compute-sanitizer (CPU_REFERENCE_ENV = "1"): the sanitizer then sees no reference GEMMs
    (racecheck reports hazards inside cuBLAS's TMA GEMMs on some shapes, and its kernel filters
    break its handling of the steps'); the inputs are still drawn and cast by torch's own small GPU
    kernels. Any value but "1" or unset is an error, not "off"."""
    value = os.environ.get(CPU_REFERENCE_ENV, "")
    if value not in ("", "1"):
        raise ValueError(f"{CPU_REFERENCE_ENV} must be 1 (reference on the CPU) or unset, got {value!r}")
    return value == "1"


def check_output(out, q, k, v, softmax_scale=None, rows=None) -> NumericsResult:
    """Judge ``out`` (b, s, h, d) by FA4's rule; with ``rows``, only those query rows."""
    if reference_on_cpu():
        out, q, k, v = (t.cpu() for t in (out, q, k, v))
    ref32 = attention_ref(q, k, v, softmax_scale, dtype=torch.float32, rows=rows)
    ref16 = attention_ref(q, k, v, softmax_scale, dtype=torch.bfloat16, rows=rows)
    got = (out if rows is None else out[:, rows]).float()
    finite = bool(torch.isfinite(got).all().item())
    err = (got - ref32).abs().max().item() if finite else float("inf")
    return NumericsResult(max_error=err, bound=fa4_bound(ref32, ref16), finite=finite)
