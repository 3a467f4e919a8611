"""The references themselves: the online-softmax mirror equals exact attention, and FA4's numerics
rule accepts a correct output and rejects wrong ones."""

import math

import pytest
import torch

from harness.workloads import make_qkv
from reference.numerics import check_output, fa4_bound
from reference.torch_attention import attention_online, attention_ref


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
