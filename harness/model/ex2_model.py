"""FA4's exponential on the FMA pipe, 2^x = 2^floor(x) * 2^frac(x), in float32 on the CPU, one
operation at a time as the GPU rounds it, and its error against float64 2^x. The constants are
arguments: each caller reads them from the kernel it checks (b11's module, the Hopper experiment's
text), so this is the arithmetic those kernels run, not a copy of their numbers.

The operations, as the PTX has them:
  1. clamp       max.f32(x, clamp)                      (a NaN or -inf becomes the clamp)
  2. floor       add.rm(.ftz) x + magic: with magic = 1.5 * 2^23 the float32 step there is 1.0,
                 so the sum rounded down is magic + floor(x), exactly
  3. back        (magic + floor(x)) - magic, exact
  4. fraction    x - floor(x), round to nearest, in [0, 1] (1 when x is a hair below an integer)
  5. Horner      p = fma(p, frac, c) from the top coefficient down: one rounding per step
  6. exponent    bits(magic + floor(x)) << 23 added to bits(p) as integers: floor(x) lands in the
                 exponent field (the high bits of magic shift out of the 32-bit word)
"""

from __future__ import annotations

import numpy as np

BF16_ROUNDING = 2.0 ** -9     # P is rounded to bf16 before P V: the error the emulation must stay well inside
NORMAL_MIN_X = -126.0         # 2^x is a normal float32 for x >= -126; below, only its absolute size matters

f32, f64 = np.float32, np.float64


def fma_f32(a, b, c) -> np.ndarray:
    """a * b + c rounded once to float32 (an FFMA), for float32 arrays. The product is exact in
    float64; the float64 sum may round, and rounding that to float32 again is wrong exactly when
    the sum landed on a float32 tie: there the sum's rounding error (two-sum) picks the side."""
    a, b, c = (np.asarray(v, dtype=f32).astype(f64) for v in (a, b, c))
    prod = a * b
    s = prod + c
    t = s - prod
    err = (prod - (s - t)) + (c - t)                  # s + err == prod + c exactly
    r = s.astype(f32)
    towards = np.nextafter(r, np.where(s > r.astype(f64), f32(np.inf), f32(-np.inf)).astype(f32))
    tie = ((r.astype(f64) + towards.astype(f64)) / 2 == s) & (s != r.astype(f64)) & (err != 0)
    # at a tie the exact value lies on err's side of s: keep r if it is on that side, else its neighbour
    wrong_side = tie & ((err > 0) != (r.astype(f64) > s))
    return np.where(wrong_side, towards, r).astype(f32)


def ex2_fma_pipe(x, poly, magic, clamp, *, round_down: bool = True, ftz: bool = True) -> np.ndarray:
    """float32 2^x by the six operations above. ``ftz``: the floor add flushes a denormal x to 0
    (add.rm.ftz, the scalar path; the packed add.rm.f32x2 does not). ``round_down=False`` rounds
    the floor add to nearest: a way to get the recipe wrong on purpose."""
    poly = np.asarray(poly, dtype=f32)
    magic = f32(magic)
    x = np.fmax(np.asarray(x, dtype=f32), f32(clamp))                          # 1
    x_add = np.where(np.abs(x) < f32(2.0 ** NORMAL_MIN_X), f32(0), x) if ftz else x
    # 2: magic + floor(x) is an integer below 2^24, so float32 holds it exactly
    floor_bits = (magic + (np.floor(x_add) if round_down else np.rint(x_add))).astype(f32)
    frac = (x - (floor_bits - magic)).astype(f32)                              # 3, 4
    p = np.full_like(x, poly[-1])
    for c in poly[-2::-1]:                                                     # 5
        p = fma_f32(p, frac, c)
    bits = (floor_bits.view(np.uint32) << np.uint32(23)) + p.view(np.uint32)   # 6 (wraps, as add.s32 does)
    return bits.view(f32)


def errors(x, got) -> dict:
    """``got`` (float32 2^x) against float64 2^x: the largest relative error where 2^x is a normal
    float (x >= -126) and the x it occurs at; the largest absolute error below that; counts."""
    x, got = np.asarray(x, dtype=f32), np.asarray(got, dtype=f32).astype(f64)
    want = np.exp2(x.astype(f64))
    normal = x >= f32(NORMAL_MIN_X)
    rel = np.abs(got[normal] - want[normal]) / want[normal]
    worst = int(np.argmax(rel))
    below = np.abs(got[~normal] - want[~normal])
    return {"elements": int(x.size), "normal_elements": int(normal.sum()),
            "max_rel_error": float(rel[worst]), "max_rel_error_log2": float(np.log2(rel[worst])),
            "argmax_x": float(x[normal][worst]),
            "max_abs_error_below_normal": float(below.max()) if below.size else 0.0}
