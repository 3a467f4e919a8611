"""Bad input gets a ValueError that names the violated constraint, before anything runs.

These run on the CPU: every check but the device one comes first, so each constraint is reachable
with CPU tensors; a correct CPU input then fails on the device constraint.
"""

import pytest
import torch
from conftest import STEPS, step_id

from ladder.contract import validate_inputs


def qkv(shape=(2, 512, 3, 128), dtype=torch.bfloat16):
    return tuple(torch.randn(shape).to(dtype) for _ in range(3))


@pytest.mark.parametrize("step", STEPS, ids=step_id)
@pytest.mark.parametrize("make,message", [
    (lambda: qkv(dtype=torch.float16), "dtype"),
    (lambda: qkv(dtype=torch.float32), "dtype"),
    (lambda: tuple(t[0] for t in qkv()), "rank"),
    (lambda: qkv(shape=(2, 256, 3, 64)), "head dim"),
    (lambda: (qkv()[0], *qkv(shape=(2, 1024, 3, 128))[:2]), "shape mismatch"),
    (lambda: (qkv()[0], qkv()[1], qkv(shape=(1, 256, 3, 128))[2]), "shape mismatch"),
    (lambda: tuple(torch.randn(2, 256, 3, 256).to(torch.bfloat16)[..., ::2] for _ in range(3)), "strides"),
    (lambda: tuple(torch.randn(2, 256, 3, 129).to(torch.bfloat16)[..., 1:] for _ in range(3)), "alignment"),
    (lambda: qkv(shape=(2, 200, 3, 128)), "seqlen"),
    (lambda: qkv(shape=(2, 0, 3, 128)), "shape"),
    (lambda: ("q", "k", "v"), "torch.Tensor"),
    (lambda: qkv(), "device"),                         # everything right, but on the CPU (512: every step's unit)
])
def test_bad_input_is_a_value_error_naming_the_constraint(step, make, message):
    with pytest.raises(ValueError, match=message):
        step.module.attention(*make())


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_softmax_scale(scale):
    info = STEPS[0].info
    with pytest.raises(ValueError, match="softmax_scale"):
        validate_inputs(info, *qkv(), softmax_scale=scale)


def test_seqlen_message_names_the_tile():
    info = STEPS[0].info
    with pytest.raises(ValueError, match=f"TILE_M={info.tile_m}|TILE_N={info.tile_n}"):
        validate_inputs(info, *qkv(shape=(1, info.tile_n + info.tile_m // 2 + 8, 1, 128)))


def test_non_contiguous_but_aligned_strides_pass_the_layout_checks():
    # q as a (b, h, s, d) tensor transposed: strides are multiples of 8, head dim stride 1.
    base = torch.randn(2, 3, 256, 128).to(torch.bfloat16).transpose(1, 2)
    with pytest.raises(ValueError, match="device"):     # only the device constraint is left
        validate_inputs(STEPS[0].info, base, base, base)


def test_a_two_cta_step_needs_whole_clusters_of_query_rows():
    """b13 on: a cluster of two CTAs covers 2 x tile_m rows; a seqlen that fills one CTA but not a
    pair is refused, naming the cluster's rows."""
    from harness.core.workloads import rows_per_cluster
    pairs = [s for s in STEPS if s.info.extra.get("cta_group", 1) > 1]
    assert pairs, "no 2-CTA step"
    for step in pairs:
        rows = rows_per_cluster(step.info)
        assert rows == 2 * step.info.tile_m
        with pytest.raises(ValueError, match=f"seqlen: step {step.id} .*TILE_M={rows}"):
            step.module.attention(*qkv(shape=(1, step.info.tile_m, 1, 128)))
