"""Generated blocks: numbers in writeups and the README come from results files and the compiler."""

import re

from harness import generate
from harness.steps import ROOT, discover


def test_no_generated_block_is_stale():
    stale = generate.stale()
    assert not stale, f"run `ladder writeups`: stale blocks in {[str(p.relative_to(ROOT)) for p in stale]}"


def test_readme_has_both_track_tables():
    text = (ROOT / "README.md").read_text()
    assert "<!-- ladder:begin table hopper -->" in text
    assert "<!-- ladder:begin table blackwell -->" in text


def test_blackwell_numbers_are_never_presented_as_measured_without_a_b200_file():
    if (ROOT / "results" / "b200.json").exists():
        return
    block = generate.table_block("blackwell")
    for line in block.splitlines():
        if line.startswith("| ["):
            assert generate.NOT_RUN_B200 in line, line
    for step in discover():
        if "sm_100a" in step.info.archs:
            assert generate.NOT_RUN_B200 in generate.results_block(step.id)


def test_results_block_reflects_the_file(tmp_path, monkeypatch):
    """Change the recorded number and the generated block changes with it."""
    from harness import results
    prov = {"gpu": "NVIDIA H200", "date": "2026-01-01T00:00:00Z", "command": "ladder table", "torch": "t",
            "cutlass_dsl": "4.8.1", "flash_attn_4": "f", "driver": "d"}
    bench = [{"seqlen": s, "fraction": 0.123, "step_tflops": 1.0, "fa4_tflops": 2.0} for s in (4096, 8192, 16384)]
    results.record(tmp_path / "h200.json", {"01": {"provenance": prov, "numerics": [{"passed": True}], "bench": bench}})
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    assert re.search(r"0\.123", generate.results_block("01"))


def test_checks_block_reflects_recorded_selfchecks(tmp_path, monkeypatch):
    from harness import results
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    assert "No recorded selfcheck" in generate.checks_block()
    monkeypatch.setattr("harness.provenance.collect", lambda command=None: {
        "gpu": "NVIDIA H200", "date": "2026-01-01T00:00:00Z", "command": "ladder selfcheck --sanitize racecheck"})
    from harness.steps import resolve
    results.record_selfcheck(tmp_path / "h200.json", "racecheck", [resolve("01")])
    results.record_selfcheck(tmp_path / "h200.json", "racecheck", [resolve("h02")])   # merges
    block = generate.checks_block()
    assert "compute-sanitizer racecheck clean for 01, h02" in block
    data = results.load(tmp_path / "h200.json")
    data["selfcheck"]["racecheck"]["h02"]["code_sha256"] = "0" * 64       # h02 edited since
    (tmp_path / "h200.json").write_text(__import__("json").dumps(data))
    block = generate.checks_block()
    assert "clean for 01 (" in block and "h02 changed since checked" in block


def test_a_result_measured_on_another_version_of_the_kernel_is_not_shown_as_current(tmp_path, monkeypatch):
    from harness import results
    from harness.steps import resolve
    step = resolve("01")
    prov = {"gpu": "NVIDIA H200", "date": "2026-01-01T00:00:00Z", "command": "ladder table", "torch": "t",
            "cutlass_dsl": "4.8.1", "flash_attn_4": "f", "driver": "d"}
    bench = [{"seqlen": s, "fraction": 0.123, "step_tflops": 1.0, "fa4_tflops": 2.0} for s in (4096, 8192, 16384)]
    row = {"provenance": prov, "numerics": [{"passed": True}], "bench": bench, "code_sha256": "0" * 64}
    results.record(tmp_path / "h200.json", {"01": row})
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    assert results.is_stale(step, results.load(tmp_path / "h200.json")["rows"]["01"])
    assert generate.STALE in generate.results_block("01") and "0.123" not in generate.results_block("01")
    assert generate.STALE in generate.table_block("hopper")
    row["code_sha256"] = step.code_sha256
    results.record(tmp_path / "h200.json", {"01": row})
    assert "0.123" in generate.results_block("01") and generate.STALE not in generate.table_block("hopper")


def test_compare_blocks_do_not_quote_a_stale_row(tmp_path, monkeypatch):
    from harness import results
    from harness.steps import resolve
    prov = {"gpu": "NVIDIA H200", "date": "2026-01-01T00:00:00Z", "command": "ladder table", "torch": "t",
            "cutlass_dsl": "4.8.1", "flash_attn_4": "f", "driver": "d"}
    bench = [{"seqlen": s, "fraction": 0.5, "step_tflops": 1.0, "fa4_tflops": 2.0} for s in (4096, 8192, 16384)]
    current = {"provenance": prov, "numerics": [{"passed": True}], "bench": bench,
               "code_sha256": resolve("01").code_sha256}
    stale = dict(current, code_sha256="0" * 64)
    results.record(tmp_path / "h200.json", {"01": current, "h02": stale})
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    block = generate.compare_block("h02", "01")
    assert "not both recorded" in block and "changed since measured" in block
