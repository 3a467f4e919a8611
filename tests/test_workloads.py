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
