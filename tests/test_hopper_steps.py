"""What the Hopper steps claim, proven on the CPU from layouts, PTX and launch metadata."""

import re

import pytest

from harness.compile import compile_step
from harness.sass import wgmma_descriptor_layout_types
from harness.smem_model import store_costs
from harness.steps import resolve, track_steps

HOPPER = [s for s in track_steps("hopper") if s.id.startswith("h")]
SWIZZLE_128B, INTERLEAVE = 1, 0


def _have(step_id):
    return any(s.id == step_id for s in HOPPER)


def _costs(step_id):
    return {c.name: c for c in store_costs(resolve(step_id))}


@pytest.mark.skipif(not _have("h03"), reason="h03 not written yet")
def test_h03_swizzle_makes_every_thread_store_minimal_where_h02_is_not():
    h02, h03 = _costs("h02"), _costs("h03")
    for name in ("Q", "K", "V"):
        assert not h02[name].is_minimal, f"h02 {name}: {h02[name]}"
        assert h02[name].wavefronts == 4 * h02[name].minimal     # 16-way on 4 bank groups
        assert h03[name].is_minimal, f"h03 {name}: {h03[name]}"
    # P's stores come from the accumulator fragment: whole 128-byte rows per warp, both steps.
    assert h02["P"].is_minimal and h03["P"].is_minimal


def test_step01_p_store_is_conflicted_as_its_writeup_says():
    costs = _costs("01")
    assert costs["P"].wavefronts == 8 and costs["P"].minimal == 1
    assert all(costs[n].is_minimal for n in ("Q", "K", "V"))


@pytest.mark.parametrize("step", [s for s in HOPPER if s.number >= 4], ids=lambda s: s.id)
def test_tma_steps_issue_no_thread_stores_of_qkv(step):
    assert set(_costs(step.id)) <= {"P"}


def _descriptor_pairs(step_id):
    report = compile_step(resolve(step_id), "sm_90a")
    types = wgmma_descriptor_layout_types(report.ptx.read_text())
    return list(zip(types[0::2], types[1::2]))      # (A, B) per wgmma, in program order


def test_h02_descriptors_are_unswizzled():
    pairs = _descriptor_pairs("h02")
    assert len(pairs) == 16 and set(pairs) == {(INTERLEAVE, INTERLEAVE)}


@pytest.mark.parametrize("step", [s for s in HOPPER if s.number >= 3], ids=lambda s: s.id)
def test_descriptors_use_the_128b_swizzle_for_q_k_v(step):
    pairs = _descriptor_pairs(step.id)
    s_gemm, pv_gemm = pairs[:8], pairs[8:]
    assert set(s_gemm) == {(SWIZZLE_128B, SWIZZLE_128B)}      # Q and K
    assert set(pv_gemm) == {(INTERLEAVE, SWIZZLE_128B)}       # P interleaved, V swizzled


@pytest.mark.skipif(not _have("h05"), reason="h05 not written yet")
def test_h05_two_warpgroups_share_each_kv_tile():
    h04, h05 = resolve("h04"), resolve("h05")
    r04, r05 = compile_step(h04, "sm_90a"), compile_step(h05, "sm_90a")
    assert r04.threads_per_cta == 128 and r05.threads_per_cta == 256    # from the PTX .reqntid
    assert h05.info.tile_m == 2 * h04.info.tile_m == 128
    assert h05.module.NUM_WARPGROUPS * h05.module.WGMMA_M == h05.info.tile_m

    def kv_bytes_per_query_row(info):
        return 2 * info.tile_n * info.head_dim * 2 / info.tile_m      # K and V tile, bf16

    assert kv_bytes_per_query_row(h05.info) == kv_bytes_per_query_row(h04.info) / 2
    # The same instruction mix per thread: each warpgroup runs h04's loop on its own rows.
    assert r05.sass.mechanisms["HGMMA"] == r04.sass.mechanisms["HGMMA"]
    # P's barrier spans one warpgroup (a named barrier of 128 threads); h04's spans the CTA.
    named = re.compile(r"\bbar(?:rier)?\.sync(?:\.aligned)?\s+\S+,\s*128;")
    assert named.search(r05.ptx.read_text()) and not named.search(r04.ptx.read_text())


@pytest.mark.parametrize("step", HOPPER, ids=lambda s: s.id)
def test_smem_budget_from_the_shared_storage(step):
    info = step.info
    m = step.module
    tiles = m.TILE_M * m.HEAD_DIM + 2 * m.TILE_N * m.HEAD_DIM + m.TILE_M * m.TILE_N
    assert info.smem_bytes == 2 * tiles <= 227 * 1024
