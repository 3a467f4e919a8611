"""Attention in plain PyTorch, in the ladder's layout (batch, seqlen, heads, head_dim).

``attention_ref`` is the exact softmax(QK^T * scale) V, in fp32 (the ground truth) or with bf16
operands (FA4's yardstick for how much error bf16 itself costs). ``attention_online`` computes the
same thing the way every ladder kernel does: one pass over K/V tiles with a running max and sum.
Both run on CPU or GPU; long sequences are processed in query chunks to bound memory.
"""

from __future__ import annotations

import math

import torch


def _heads_first(x: torch.Tensor) -> torch.Tensor:
    return x.permute(0, 2, 1, 3)          # (b, s, h, d) -> (b, h, s, d)


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)


def attention_ref(q, k, v, softmax_scale=None, *, dtype=torch.float32, rows=None,
                  max_chunk_elems=1 << 28):
    """softmax(Q K^T * scale) V with operands cast to ``dtype``; softmax itself in fp32.

    ``rows``: optional 1-D index tensor of query positions; only those output rows are computed
    (every row depends on all of K and V, so a subset is an exact check of those rows).
    Returns (b, len(rows) or s, h, d) in ``dtype``.
    """
    scale = default_scale(q.shape[-1]) if softmax_scale is None else softmax_scale
    if dtype == torch.float32 and q.is_cuda:
        torch.backends.cuda.matmul.allow_tf32 = False   # TF32 would make "fp32" a 10-bit mantissa
    qh = _heads_first(q if rows is None else q[:, rows]).to(dtype)
    kh, vh = _heads_first(k).to(dtype), _heads_first(v).to(dtype)
    b, h, sq, _ = qh.shape
    sk = kh.shape[2]
    chunk = max(1, min(sq, max_chunk_elems // max(1, b * h * sk)))
    out = torch.empty(b, h, sq, v.shape[-1], dtype=dtype, device=q.device)
    for start in range(0, sq, chunk):
        s = torch.matmul(qh[:, :, start:start + chunk], kh.transpose(-1, -2))
        p = torch.softmax(s.float() * scale, dim=-1).to(dtype)
        out[:, :, start:start + chunk] = torch.matmul(p, vh)
    return _heads_first(out)


def attention_online(q, k, v, softmax_scale=None, *, block_n=128):
    """fp32 FlashAttention forward: walk K/V in ``block_n`` tiles with a running row max m and
    row sum; O is rescaled by exp(scale * (m_old - m_new)) whenever the max grows."""
    scale = default_scale(q.shape[-1]) if softmax_scale is None else softmax_scale
    qh, kh, vh = (_heads_first(x).float() for x in (q, k, v))
    b, h, sq, d = qh.shape
    m = torch.full((b, h, sq, 1), -math.inf, device=q.device)
    row_sum = torch.zeros((b, h, sq, 1), device=q.device)
    o = torch.zeros((b, h, sq, d), device=q.device)
    for start in range(0, kh.shape[2], block_n):
        s = torch.matmul(qh, kh[:, :, start:start + block_n].transpose(-1, -2))
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        rescale = torch.exp(scale * (m - m_new))
        p = torch.exp(scale * (s - m_new))
        row_sum = row_sum * rescale + p.sum(dim=-1, keepdim=True)
        o = o * rescale + torch.matmul(p, vh[:, :, start:start + block_n])
        m = m_new
    return _heads_first(o / row_sum)
