"""The references themselves: the online-softmax mirror equals exact attention, and FA4's numerics
rule accepts a correct output and rejects wrong ones."""

import math

import pytest
import torch

from harness.core.workloads import make_qkv
from reference.numerics import check_output, fa4_bound
from reference.torch_attention import attention_online, attention_online_mirror, attention_ref


@pytest.mark.parametrize("shape,magnitude,block_n", [
    ((1, 128, 1, 128), 1.0, 128),
    ((2, 384, 3, 128), 1.0, 64),
    ((2, 256, 2, 128), 4.0, 128),     # large scores: the running max and rescale matter
])
def test_online_softmax_equals_exact(shape, magnitude, block_n):
    q, k, v = make_qkv(shape, seed=7, device="cpu", magnitude=magnitude)
    exact = attention_ref(q, k, v)
    online = attention_online(q, k, v, block_n=block_n)
    assert (exact - online).abs().max().item() < 1e-5


def test_reference_chunks_and_rows_agree_with_one_shot():
    q, k, v = make_qkv((2, 256, 3, 128), seed=3, device="cpu")
    whole = attention_ref(q, k, v, max_chunk_elems=1 << 30)
    chunked = attention_ref(q, k, v, max_chunk_elems=2 * 3 * 256 * 16)   # 16 query rows a chunk
    assert torch.equal(whole, chunked)
    rows = torch.tensor([0, 17, 255])
    assert torch.allclose(attention_ref(q, k, v, rows=rows), whole[:, rows], atol=1e-6)


def test_scale_is_applied():
    q, k, v = make_qkv((1, 128, 1, 128), seed=5, device="cpu")
    default = attention_ref(q, k, v)
    explicit = attention_ref(q, k, v, softmax_scale=1 / math.sqrt(128))
    other = attention_ref(q, k, v, softmax_scale=0.5)
    assert torch.equal(default, explicit)
    assert (default - other).abs().max().item() > 1e-3


def test_rule_accepts_a_correct_bf16_output():
    q, k, v = make_qkv((2, 256, 3, 128), seed=11, device="cpu")
    out = attention_online(q, k, v).to(torch.bfloat16)
    assert check_output(out, q, k, v).passed


@pytest.mark.parametrize("damage", ["offset", "one_element", "nan", "wrong_scale", "stale_row"])
def test_rule_rejects_wrong_outputs(damage):
    q, k, v = make_qkv((2, 256, 3, 128), seed=13, device="cpu")
    out = attention_online(q, k, v).to(torch.bfloat16)
    if damage == "offset":
        out = out + 0.05
    elif damage == "one_element":
        out[1, 100, 2, 64] += 0.25
    elif damage == "nan":
        out[0, 0, 0, 0] = float("nan")
    elif damage == "wrong_scale":
        out = attention_online(q, k, v, softmax_scale=0.2).to(torch.bfloat16)
    elif damage == "stale_row":              # a tile the kernel never wrote
        out[0, 128:256] = 0
    assert not check_output(out, q, k, v).passed


def test_bound_formula():
    ref32 = torch.tensor([1.0, -2.0, 0.5])
    ref16 = torch.tensor([1.0, -2.0 + 2 ** -7, 0.5])
    noise = ((ref32 + 0.3 - 0.3) - ref32).abs().max().item()
    assert fa4_bound(ref32, ref16) == pytest.approx(2 * 2 ** -7 + 2 * noise)


# --- FA4's conditional rescaling (SoftmaxSm100, rescale_threshold = 8 for bf16) in the kernel mirror ---

SCALE_LOG2 = math.log2(math.e) / math.sqrt(128)     # default softmax scale at head_dim 128, in log2 units


def _bf16(*tensors):
    return tuple(t.to(torch.bfloat16) for t in tensors)


def _peaked(shape, jump_log2, seed):
    """Every row of head h has one key ``jump_log2`` (log2 units) above zero, (h+1) tiles from the end, so
    the row max jumps late; the other scores are N(0, 1.4 log2 units)."""
    q, k, v = (t.float() for t in make_qkv(shape, seed=seed, device="cpu"))
    q[..., 0], k[..., 0] = 8.0, 0.0
    for head in range(shape[2]):
        k[:, shape[1] - 60 - 128 * head, head, 0] = jump_log2 / (8.0 * SCALE_LOG2)
    return _bf16(q, k, v)


def _growing(shape, step_log2, seed, block_n=128):
    """Scores ramp up along the key axis (q[..., 0] = 4, k[j, 0] linear in j), so each ``block_n`` tile's
    max beats the previous one by about ``step_log2`` log2 units."""
    q, k, v = (t.float() for t in make_qkv(shape, seed=seed, device="cpu"))
    q[..., 0] = 4.0
    k[..., 0] = (torch.arange(shape[1]) * (step_log2 / (4.0 * SCALE_LOG2 * block_n)))[None, :, None]
    return _bf16(q, k, v)


INPUTS = {
    "ordinary": lambda: make_qkv((2, 1024, 2, 128), seed=21, device="cpu"),
    "magnitude 3": lambda: make_qkv((2, 512, 2, 128), seed=22, device="cpu", magnitude=3.0),
    "magnitude 4": lambda: make_qkv((2, 512, 1, 128), seed=23, device="cpu", magnitude=4.0),
    "peaked": lambda: _peaked((2, 1024, 2, 128), 40.0, seed=24),             # jump > threshold: rescaled
    "growing": lambda: _growing((1, 1024, 2, 128), 6.0, seed=25),            # 6 < 8 per tile, ~46 in all
}


def _kernel_mirror(q, k, v, threshold):
    return attention_online_mirror(q, k, v, rescale_threshold=threshold, p_dtype=torch.bfloat16,
                                   return_stats=True)


@pytest.mark.parametrize("threshold", [0.0, 8.0])
@pytest.mark.parametrize("name", INPUTS)
def test_conditional_rescaling_passes_fa4_rule(name, threshold):
    q, k, v = INPUTS[name]()
    out, stats = _kernel_mirror(q, k, v, threshold)
    assert out.dtype == torch.bfloat16
    result = check_output(out, q, k, v)
    assert result.passed, str(result)
    assert stats.p_max <= 2 ** threshold * 1.001        # the lag never exceeds the threshold


def test_growing_maxima_lag_stays_bounded():
    """The max grows ~6 log2 units a tile, ~46 over 8 tiles. Threshold 8 skips every other rescale yet
    catches up, so P stays <= 2^8; an unbounded lag (threshold 200) lets P reach ~2^46."""
    q, k, v = INPUTS["growing"]()
    _, lagged = _kernel_mirror(q, k, v, 8.0)
    _, unbounded = _kernel_mirror(q, k, v, 200.0)
    assert 0 < lagged.applied < 0.75 * lagged.max_grew
    assert lagged.p_max <= 2 ** 8 * 1.001
    assert unbounded.applied == 0 and unbounded.p_max > 2 ** 40


def test_threshold_skips_most_rescales_and_zero_is_the_old_loop():
    q, k, v = INPUTS["ordinary"]()
    out0, every = attention_online_mirror(q, k, v, return_stats=True)
    out8, lagged = attention_online_mirror(q, k, v, rescale_threshold=8.0, return_stats=True)
    assert torch.equal(out0, attention_online(q, k, v))               # fp32, threshold 0: the plain loop
    assert every.applied == every.max_grew == lagged.max_grew > 0     # threshold 0 rescales whenever m grows
    assert lagged.applied < every.applied / 4
    assert (out8 - out0).abs().max().item() < 1e-5                    # in fp32 the lag is exact math
    _, kernel0 = _kernel_mirror(q, k, v, 0.0)
    _, kernel8 = _kernel_mirror(q, k, v, 8.0)
    assert kernel8.applied < kernel0.applied / 4


@pytest.mark.parametrize("name,finite", [
    ("peaked", True),                                                  # the "peaked" input above
    ("steep ramp", False),
])
def test_absurd_threshold_fails_the_rule(name, finite):
    """Threshold 200 lets m lag by up to 200 log2 units. The lag alone is exact math: on the 6-a-tile ramp P
    reaches only ~2^46 and the output still passes. It breaks in two ways, threshold 8 in neither:
    - peaked (late key 40 log2 units up): P ~ 2^40 is no power of two, so its bf16 rounding (relative
      <= 2^-8) enters O but not the fp32 row sum: out = v*(1 +- 2^-9) where the bf16 reference is v*
      exactly (bound ~1e-7). Threshold 8 rescales and P = 2^0 = 1 exactly. From ~28 log2 units up it fails.
    - steep ramp (18 log2 units a tile, ~130 over 8 tiles): P passes 2^128 and overflows fp32 (inf/NaN);
      16 a tile (~2^115) still passes.
    """
    q, k, v = _peaked((2, 1024, 2, 128), 40.0, seed=24) if name == "peaked" else \
        _growing((1, 1024, 1, 128), 18.0, seed=26)
    out, stats = _kernel_mirror(q, k, v, 200.0)
    result = check_output(out, q, k, v)
    assert not result.passed and result.finite == finite, str(result)
    assert stats.applied == 0
    sane, _ = _kernel_mirror(q, k, v, 8.0)
    assert check_output(sane, q, k, v).passed


def test_threshold_8_can_fail_the_rule_when_a_dominant_key_arrives_under_it():
    """A limit of FA4's own scheme, found writing these tests: each row is two keys, A in tile 0 and B in the
    last tile 7 log2 units higher (everything else negligible). 7 < 8, so m stays at A and B's P ~ 2^7
    is rounded to bf16 (relative <= 2^-8) for P V while the row sum keeps it in fp32: the output's error
    reaches ~2^-8 |v_B|, 1.14-1.2x the rule's bound for these seeds. Rescaling (threshold 0) makes
    P_B = 1 exact and stays at 0.5x the bound."""
    broken = 0
    for seed in range(3):
        q, k, v = (t.float() for t in make_qkv((1, 512, 2, 128), seed=seed, device="cpu"))
        q[..., 1:], k[..., 1:] = q[..., 1:] * 0.05, k[..., 1:] * 0.05
        q[..., 0], k[..., 0] = 8.0, 0.0
        k[:, 5, :, 0] = 16.0
        k[:, 512 - 60, :, 0] = 16.0 + 7.0 / (8.0 * SCALE_LOG2)
        q, k, v = _bf16(q, k, v)
        assert check_output(_kernel_mirror(q, k, v, 0.0)[0], q, k, v).passed
        broken += not check_output(_kernel_mirror(q, k, v, 8.0)[0], q, k, v).passed
    assert broken >= 2
