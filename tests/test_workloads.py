"""The inputs the GPU tests and the harness draw are the same in every process, so a failure
found once can be run again."""

import subprocess
import sys

from harness.core import workloads
from harness.core.paths import ROOT
from harness.gpu.isolate import child_env

_DRAW = ("from harness.core import workloads as w; "
         "print([w.stable_seed(c.name) for c in w.NUMERICS_CASES], w.sampled_rows(4096, 8, seed=4096).tolist())")


def test_seeds_and_sampled_rows_do_not_depend_on_the_process():
    """``hash()`` of a string changes with PYTHONHASHSEED (a new value per process by default);
    the seeds must not."""
    draws = {subprocess.run([sys.executable, "-c", _DRAW], cwd=ROOT, capture_output=True, text=True, check=True,
                            env=dict(child_env(), PYTHONHASHSEED=str(salt))).stdout for salt in (1, 2)}
    assert len(draws) == 1, draws
    seeds = [workloads.stable_seed(c.name) for c in workloads.NUMERICS_CASES]
    assert len(set(seeds)) == len(seeds)          # each case its own inputs


def test_b14s_selfcheck_shapes_launch_one_cluster_per_tile_then_walk_several_tiles():
    """README "Running on a B200": b14's grid is clamped to the work, so its first selfcheck cases,
    with fewer work tiles than a B200 holds clusters, launch one cluster per tile (one cluster, then
    45: no cluster starts without a tile), and the last has more tiles than clusters (clusters walk
    several tiles, the cross-tile path, under the sanitizers too)."""
    from harness.core.steps import resolve
    step = resolve("b14")
    mod = step.module
    clusters = mod.FALLBACK_CLUSTERS            # a B200's SM pairs: the most it can hold at once

    def work_tiles(case):
        batch, seqlen, heads, _ = case.shape_for(step.info)
        return batch * heads * seqlen // workloads.rows_per_cluster(step.info)

    tiny = [work_tiles(case) for case in workloads.TINY_CASES]
    assert tiny[0] == 1 and max(tiny[:-1]) < clusters < tiny[-1]
    for n_work in tiny[:-1]:
        assert mod.grid_clusters(clusters, n_work) == n_work
        assert all(mod.tiles_of(c, n_work, n_work) == 1 for c in range(n_work))
    assert mod.grid_clusters(clusters, tiny[-1]) == clusters and mod.tiles_of(0, clusters, tiny[-1]) >= 2
    assert max(work_tiles(case) for case in workloads.NUMERICS_CASES) > clusters


def test_selfcheck_gives_every_persistent_hopper_kernel_more_than_one_tile_per_cta():
    """h14 (132 CTAs) and exp:h14-cluster-multicast (66 clusters of two): the last selfcheck case
    has more work tiles than CTAs or clusters, so some walk two."""
    from harness.core.steps import resolve
    for spec in ("h14", "exp:h14-cluster-multicast"):
        step = resolve(spec)
        batch, seqlen, heads, _ = workloads.TINY_CASES[-1].shape_for(step.info)
        per_cluster = step.info.extra.get("cluster_ctas", 1)
        units = batch * heads * seqlen // workloads.rows_per_cluster(step.info)
        assert units > step.module.SM_COUNT // per_cluster, (spec, units)
