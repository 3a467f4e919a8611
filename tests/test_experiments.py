"""What-if experiments (harness/core/experiments.py): every one still applies to its base step and
compiles; recording and the generated block keep them apart from the ladder's rows."""

import pytest

from harness.compiler.compile import compile_step
from harness.core import experiments, results
from harness.core.steps import resolve
from harness.report import blocks_measured

PROV = {"gpu": "NVIDIA H200", "capability": [9, 0], "date": "2026-01-01T00:00:00Z", "command": "ladder table --steps exp:x",
        "torch": "t", "cutlass_dsl": "4.8.1", "ptxas": "13.4", "flash_attn_4": "f"}


def _row(fraction, passed=True, step="h05"):
    return {"provenance": PROV, "numerics": [{"passed": passed}], "fingerprint": resolve(step).fingerprint,
            "bench": [{"seqlen": s, "fraction": fraction, "step_tflops": 1.0, "fa4_tflops": 2.0}
                      for s in (4096, 8192, 16384)]}


@pytest.mark.parametrize("name", sorted(experiments.EXPERIMENTS))
def test_each_experiment_applies_to_its_base_and_compiles(name):
    step = resolve(f"exp:{name}")
    exp = experiments.get(name)
    assert step.variant and step.experiment == name and step.id == name
    assert step.spec == f"exp:{name}" and resolve(step.spec).path == step.path
    base = resolve(exp.base).path.read_text()
    assert step.path.read_text() != base
    arch = step.info.archs[0]
    report = compile_step(step, arch)
    # spill-free unless the base step declares where and why it spills
    assert report.sass.spills == 0 or "spills_at_register_cap" in step.info.extra
    assert report.sass.mechanisms["HGMMA" if arch == "sm_90a" else "UTCHMMA"] > 0


def test_an_edit_that_no_longer_applies_fails_loudly():
    with pytest.raises(ValueError, match="occurs 0 times"):
        experiments.apply_edits("abc", (("xyz", "q"),), "demo")
    with pytest.raises(ValueError, match="occurs 2 times"):
        experiments.apply_edits("ab ab", (("ab", "q"),), "demo")
    with pytest.raises(ValueError, match="no experiment"):
        experiments.get("exp:nope")


def test_experiments_are_recorded_apart_from_the_ladder(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    path = tmp_path / "h200.json"
    assert "No recorded experiments" in blocks_measured.experiments_block("h05")
    results.record(path, {"h05": _row(0.4)})
    results.record_experiment(path, experiments.get("h05-loads-free"),
                              _row(0.5, passed=False, step="exp:h05-loads-free"))
    data = results.load(path)
    assert set(data["rows"]) == {"h05"} and set(data["experiments"]) == {"h05-loads-free"}
    block = blocks_measured.experiments_block("h05")
    assert "exp:h05-loads-free" in block and "0.500" in block and "+25%" in block
    assert "wrong by design" in block
    bad = _row(0.5)
    bad["provenance"] = {"gpu": "x"}
    with pytest.raises(ValueError, match="provenance"):
        results.record_experiment(path, experiments.get("h05-prefetch-k"), bad)
