"""The stock kernels every step is scored against, called exactly as their users call them.

FlashAttention-4 (``flash-attn-4``): ``flash_attn.cute.flash_attn_func`` returns ``(out, lse)``.
cuDNN: PyTorch's SDPA restricted to its cuDNN backend (a context column only).
"""

from __future__ import annotations


def fa4_available() -> str | None:
    """None if FA4 imports, else the reason it does not."""
    try:
        import flash_attn.cute  # noqa: F401
    except Exception as e:   # ImportError, or a CuTe DSL / driver error at import
        return f"flash-attn-4 not importable: {type(e).__name__}: {e}"
    return None


def fa4_attention(q, k, v, softmax_scale=None):
    from flash_attn.cute import flash_attn_func
    out = flash_attn_func(q, k, v, softmax_scale=softmax_scale, causal=False)
    return out[0] if isinstance(out, tuple) else out


def fa4_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("flash-attn-4")
    except PackageNotFoundError:
        return None


def _sdpa(backend_name: str, q, k, v, softmax_scale=None):
    """torch SDPA pinned to one backend, on (batch, seqlen, heads, dim) tensors."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([getattr(SDPBackend, backend_name)]):
        out = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=softmax_scale)
    return out.transpose(1, 2)


def cudnn_attention(q, k, v, softmax_scale=None):
    return _sdpa("CUDNN_ATTENTION", q, k, v, softmax_scale)


def fa2_attention(q, k, v, softmax_scale=None):
    """FlashAttention-2 as bundled in torch (SDPA's FLASH_ATTENTION backend): no wgmma, no TMA."""
    return _sdpa("FLASH_ATTENTION", q, k, v, softmax_scale)
