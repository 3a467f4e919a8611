"""The stock kernels every step is scored against, called exactly as their users call them.

FlashAttention-4 (``flash-attn-4``): ``flash_attn.cute.flash_attn_func`` returns ``(out, lse)``.
cuDNN: PyTorch's SDPA restricted to its cuDNN backend (a context column only).
"""

from __future__ import annotations

import contextlib


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


# The fields of FA4's forward compile key that say which kernel ran (flash_attn/cute/interface.py,
# ``_flash_attn_fwd``), per architecture: the ones its SM90 or SM100 kernel object is built from (the
# key holds others that the architecture's kernel ignores). Read by name from the key's source, so a
# reordered key in another release still reads.
FA4_CONFIG_FIELDS = {
    9: ("arch", "tile_m", "tile_n", "num_threads", "mma_pv_is_rs", "intra_wg_overlap", "pack_gqa"),
    10: ("arch", "tile_m", "tile_n", "q_stage", "use_2cta_instrs", "is_static_persistent",
         "use_clc_scheduler", "use_s_ping_pong", "is_split_kv", "pack_gqa"),
}


class _KeySpy:
    """Stands in for FA4's forward compile cache during one call and notes the keys it is asked for."""

    def __init__(self, inner):
        self.inner, self.keys = inner, []

    def __contains__(self, key):
        self.keys.append(key)
        return key in self.inner

    def __getitem__(self, key):
        return self.inner[key]

    def __setitem__(self, key, fn):
        self.inner[key] = fn


def _key_fields() -> list[str]:
    """The source text of each element of ``compile_key = (...)`` in FA4's ``_flash_attn_fwd``."""
    import ast
    import inspect

    from flash_attn.cute import interface
    tree = ast.parse(inspect.getsource(interface._flash_attn_fwd).lstrip())
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple)
                and any(isinstance(t, ast.Name) and t.id == "compile_key" for t in node.targets)):
            return [ast.unparse(e) for e in node.value.elts]
    raise RuntimeError("FA4's _flash_attn_fwd has no `compile_key = (...)`")


@contextlib.contextmanager
def fa4_compile_keys():
    """Within the block, every forward compile key FA4 looks up is appended to the list yielded."""
    from flash_attn.cute import interface
    fwd = interface._flash_attn_fwd
    spy = fwd.compile_cache = _KeySpy(fwd.compile_cache)
    try:
        yield spy.keys
    finally:
        fwd.compile_cache = spy.inner


def config_of_key(key: tuple) -> dict:
    """The FA4_CONFIG_FIELDS of one forward compile key, for the architecture it names."""
    names = _key_fields()
    if len(names) != len(key):
        raise RuntimeError(f"FA4's compile key has {len(key)} fields, its source names {len(names)}")
    values = dict(zip(names, key, strict=True))
    fields = FA4_CONFIG_FIELDS.get(values.get("arch", 0) // 10, tuple(values))
    return {f: values[f] for f in fields if f in values}


def fa4_config(q, k, v, softmax_scale=None) -> dict:
    """The configuration of the forward kernel FA4 runs for these inputs: one call to
    ``fa4_attention``, with the compile-cache key it looks up read back by field name."""
    with fa4_compile_keys() as keys:
        fa4_attention(q, k, v, softmax_scale)
    if not keys:
        raise RuntimeError("FA4's forward looked up no compile key")
    return config_of_key(keys[-1])


def fa4_config_label(config: dict) -> str:
    """``sm100, 2-CTA, 2 x 128x128 Q tiles per CTA, static persistent``: what a table
    names next to FA4's TFLOP/s."""
    if not config:
        return "configuration not recorded"
    parts = [f"sm{config.get('arch', '?')}", "2-CTA" if config.get("use_2cta_instrs") else "1-CTA"]
    tile = f"{config.get('tile_m')}x{config.get('tile_n')}"
    stages = config.get("q_stage") or 1
    parts.append(f"{stages} x {tile} Q tiles per CTA" if stages > 1 else f"{tile} tile")
    if config.get("num_threads"):
        parts.append(f"{config['num_threads']} threads")
    parts += [label for flag, label in (("mma_pv_is_rs", "P from registers"), ("intra_wg_overlap", "intra-warpgroup overlap"),
                                        ("is_static_persistent", "static persistent"), ("use_clc_scheduler", "CLC scheduler"),
                                        ("use_s_ping_pong", "S ping-pong"), ("is_split_kv", "split KV"))
              if config.get(flag)]
    return ", ".join(parts)


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
