"""The problems the ladder is judged on: benchmark shapes, numerics cases, inputs, FLOP counts."""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

from ladder.contract import HEAD_DIM

BENCH_SEQLENS = (4096, 8192, 16384)
BENCH_TOKENS = 16384            # batch * seqlen, the same work at every seqlen
BENCH_HEADS = 16
SAMPLED_ROWS = 512              # query rows checked per benchmark shape (every batch and head)


def bench_shape(seqlen: int) -> tuple[int, int, int, int]:
    return (BENCH_TOKENS // seqlen, seqlen, BENCH_HEADS, HEAD_DIM)


def attention_flops(shape) -> float:
    """Two GEMMs of 2*s*s*d FLOPs per (batch, head): the convention FA papers and FA4's benchmarks use."""
    b, s, h, d = shape
    return 4.0 * b * h * s * s * d


def rows_per_cluster(info) -> int:
    """Query rows one cluster of CTAs covers (a 2-CTA step, INFO.extra["cta_group"] = 2, or a
    cluster launch, INFO.extra["cluster_ctas"]: that many CTAs' tile_m): the unit a seqlen must be
    a multiple of."""
    return info.tile_m * info.extra.get("cluster_ctas", info.extra.get("cta_group", 1))


@dataclass(frozen=True)
class NumericsCase:
    name: str
    batch: int
    seqlen_tiles: int            # seqlen = seqlen_tiles * lcm(step tiles)
    heads: int
    magnitude: float = 1.0       # q and k are scaled by this: scores grow with its square

    def shape_for(self, info) -> tuple[int, int, int, int]:
        unit = math.lcm(rows_per_cluster(info), info.tile_n)
        return (self.batch, self.seqlen_tiles * unit, self.heads, HEAD_DIM)


NUMERICS_CASES = (
    NumericsCase("smallest", batch=1, seqlen_tiles=1, heads=1),
    NumericsCase("odd batch/heads", batch=3, seqlen_tiles=3, heads=5),
    NumericsCase("large-magnitude scores", batch=2, seqlen_tiles=4, heads=3, magnitude=3.0),
    # More work tiles than the H200's 132 SMs, with an odd K/V tile count: a persistent kernel's
    # CTAs walk two or three tiles each, and the ring's stages wrap differently per tile. (b14:
    # 300 tiles of 512 rows over 74 clusters, four or five each; a b14 shape's K/V count is always
    # a multiple of 4, so odd counts are the CPU replay's: tests/test_barrier_protocol.py.)
    NumericsCase("more tiles than SMs", batch=1, seqlen_tiles=3, heads=100),
)
# selfcheck (and the sanitizers, which run it): fast, and still more than one work tile per CTA
# or cluster of a persistent step (150 heads of one query block: 150 tiles over the H200's 132
# CTAs, 150 pairs over 66 clusters, 150 cluster tiles over a B200's 74), so the paths from one
# work tile to the next run under the sanitizers too.
TINY_CASES = (*NUMERICS_CASES[:2], NumericsCase("a few tiles per CTA", batch=1, seqlen_tiles=1, heads=150))


def stable_seed(name: str) -> int:
    """A seed named by a string, the same in every process (``hash()`` is salted per process)."""
    return zlib.crc32(name.encode()) % 1000


def sampled_rows(seqlen: int, count: int, *, seed: int):
    """``count`` distinct query rows of ``seqlen``, sorted, from a seeded generator (CPU tensor)."""
    import torch
    return torch.randperm(seqlen, generator=torch.Generator().manual_seed(seed))[:count].sort().values


def make_qkv(shape, *, seed: int, device="cuda", magnitude: float = 1.0):
    """Fresh random bf16 q, k, v (never zeros: they hide unwritten outputs)."""
    import torch
    gen = torch.Generator(device="cpu").manual_seed(seed)
    q, k, v = (torch.randn(shape, generator=gen, dtype=torch.float32) for _ in range(3))
    q, k = q * magnitude, k * magnitude
    return tuple(t.to(device=device, dtype=torch.bfloat16) for t in (q, k, v))
