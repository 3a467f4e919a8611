"""Recorded results: summaries, merging with provenance, regression detection, and the committed files."""

import json

import pytest

from harness import results
from harness.steps import discover

PROV = {"gpu": "NVIDIA H200", "date": "2026-11-29T00:00:00Z", "command": "ladder table", "torch": "2.11",
        "cutlass_dsl": "4.8.1", "flash_attn_4": "4.0.0b36"}


def row(fractions, passed=True):
    return {"provenance": PROV, "numerics": [{"passed": passed}],
            "bench": [{"seqlen": s, "fraction": f} for s, f in zip((4096, 8192, 16384), fractions)]}


def test_harmonic_mean():
    assert results.harmonic_mean([0.5, 0.5, 0.5]) == pytest.approx(0.5)
    assert results.harmonic_mean([0.25, 0.5, 1.0]) == pytest.approx(3 / (4 + 2 + 1))
    assert results.harmonic_mean([]) is None


def test_summarize_and_numerics_flag():
    s = results.summarize(row([0.2, 0.4, 0.4]))
    assert s["fractions"] == {"4096": 0.2, "8192": 0.4, "16384": 0.4}
    assert s["hmean"] == pytest.approx(0.3) and s["numerics_passed"]
    assert not results.summarize(row([0.2, 0.4, 0.4], passed=False))["numerics_passed"]


def test_record_merges_and_requires_provenance(tmp_path):
    path = tmp_path / "x.json"
    results.record(path, {"01": row([0.1, 0.1, 0.1])})
    results.record(path, {"h02": row([0.2, 0.2, 0.2])})
    data = json.loads(path.read_text())
    assert set(data["rows"]) == {"01", "h02"}
    bad = row([0.1] * 3)
    bad["provenance"] = {"gpu": "x"}
    with pytest.raises(ValueError, match="provenance"):
        results.record(path, {"01": bad})


def test_regressions_beyond_tolerance():
    baseline = {"rows": {"01": {"hmean": 0.50}}}
    assert results.regressions({"01": row([0.48] * 3)}, baseline, 0.05) == []
    assert len(results.regressions({"01": row([0.40] * 3)}, baseline, 0.05)) == 1


def test_gpu_key():
    assert results.gpu_key("NVIDIA H200") == "h200"
    assert results.gpu_key("NVIDIA B200") == "b200"


@pytest.mark.parametrize("gpu", sorted(results.all_recorded()))
def test_committed_results_carry_provenance_and_pass(gpu):
    """Every committed row names its GPU, versions, date and command, and passed numerics."""
    data = results.all_recorded()[gpu]
    known = {s.id for s in discover()}
    for step_id, r in data["rows"].items():
        assert step_id in known
        for key in ("gpu", "driver", "torch", "cutlass_dsl", "flash_attn_4", "date", "command"):
            assert r["provenance"].get(key), f"{gpu}/{step_id}: no {key}"
        assert r["numerics_passed"] and len(r["bench"]) == 3
        assert results.gpu_key(r["provenance"]["gpu"]) == gpu


def test_every_committed_row_names_the_kernel_version_it_measured():
    """Rows recorded from now on carry the step file's hash; the committed ones must match the
    files in the tree (or the generated tables say "changed since measured")."""
    from harness.steps import resolve
    for gpu, data in results.all_recorded().items():
        for step_id, row in data.get("rows", {}).items():
            assert row.get("code_sha256"), f"{gpu} {step_id}: no code hash"
            assert len(row["code_sha256"]) == 64
            resolve(step_id)          # still a step
