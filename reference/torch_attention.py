"""Attention in plain PyTorch, in the ladder's layout (batch, seqlen, heads, head_dim).

``attention_ref`` is the exact softmax(QK^T * scale) V, in fp32 (the ground truth) or with bf16
operands (FA4's yardstick for how much error bf16 itself costs). ``attention_online`` computes the
same thing the way every ladder kernel does: one pass over K/V tiles with a running max and sum;
``attention_online_mirror`` is that loop as the kernels round it (bf16 P) with FA4's Blackwell
conditional rescaling.
Both run on CPU or GPU; long sequences are processed in query chunks to bound memory.
"""

from __future__ import annotations

import math
from typing import NamedTuple

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


class RescaleStats(NamedTuple):
    """What ``attention_online_mirror(..., return_stats=True)`` counted over (row, K/V tile) pairs after the first tile."""
    applied: int      # O and the row sum were rescaled (the running max moved)
    max_grew: int     # the tile's row max exceeded every earlier score (threshold 0 rescales exactly these)
    p_max: float      # largest P value (fp32, before rounding): at most 2**rescale_threshold unless it overflowed


def attention_online_mirror(q, k, v, softmax_scale=None, *, block_n=128, rescale_threshold: float = 0.0,
                            p_dtype=None, return_stats: bool = False):
    """``attention_online`` as the kernels round it: the same walk, O and l rescaled when m moves.

    ``rescale_threshold`` (log2 units) mirrors FA4's conditional rescaling (SoftmaxSm100, 8.0 for 16-bit
    inputs) and the b12 kernel: if a tile's row max m_cand gives d = (m - m_cand) * scale * log2(e) >=
    -threshold, m is kept and nothing is rescaled (P then reaches up to 2**threshold); otherwise m = m_cand
    and O, l are scaled by 2**d. The default 0 rescales whenever the max grows.
    ``p_dtype``: None (default) keeps everything fp32, bit for bit ``attention_online``. torch.bfloat16 mirrors
    the kernels: q, k, v rounded to it; P = exp2(s*c - m*c) with c = scale * log2(e) is added to l in fp32
    but rounded to it before P V (fp32 accumulate); the output is returned in it.
    ``return_stats=True`` also returns a ``RescaleStats``.
    """
    scale = default_scale(q.shape[-1]) if softmax_scale is None else softmax_scale
    scale_log2 = scale * math.log2(math.e)
    qh, kh, vh = (_heads_first(x if p_dtype is None else x.to(p_dtype)).float() for x in (q, k, v))
    b, h, sq, d = qh.shape
    m = m_seen = row_sum = None
    o = torch.zeros((b, h, sq, d), device=q.device)
    applied = grew = 0
    p_max = 0.0
    for start in range(0, kh.shape[2], block_n):
        s = torch.matmul(qh, kh[:, :, start:start + block_n].transpose(-1, -2))
        m_tile = s.amax(dim=-1, keepdim=True)
        if m is None:                                     # first tile: nothing to rescale
            m = m_seen = m_tile
            alpha = torch.zeros_like(m)
        else:
            grew += int((m_tile > m_seen).sum())          # the true running max grew
            m_seen = torch.maximum(m_seen, m_tile)
            m_cand = torch.maximum(m, m_tile)
            dlog2 = (m - m_cand) * scale_log2             # <= 0
            keep = dlog2 >= -rescale_threshold
            alpha = torch.exp(scale * (m - m_cand)) if p_dtype is None else torch.exp2(dlog2)
            alpha = torch.where(keep, 1.0, alpha)
            applied += int((~keep).sum())
            m = torch.where(keep, m, m_cand)
            row_sum = row_sum * alpha
        p = torch.exp(scale * (s - m)) if p_dtype is None else torch.exp2(s * scale_log2 - m * scale_log2)
        p_max = max(p_max, p.max().item())
        row_sum = p.sum(dim=-1, keepdim=True) + (0.0 if row_sum is None else row_sum)
        p_mma = p if p_dtype is None else p.to(p_dtype).float()
        o = o * alpha + torch.matmul(p_mma, vh[:, :, start:start + block_n])
    out = _heads_first(o / row_sum)
    out = out if p_dtype is None else out.to(p_dtype)
    return (out, RescaleStats(applied, grew, p_max)) if return_stats else out
