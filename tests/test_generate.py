"""Generated blocks: numbers in writeups and the README come from results files and the compiler."""

import re

import pytest

from harness.core import results
from harness.core.paths import ROOT
from harness.core.steps import discover, track_steps
from harness.report import blocks_measured, blocks_profile, tables, writeups


def test_no_generated_block_is_stale():
    stale = writeups.stale()
    assert not stale, f"run `ladder writeups`: stale blocks in {[str(p.relative_to(ROOT)) for p in stale]}"


def test_readme_has_both_track_tables():
    text = (ROOT / "README.md").read_text()
    assert "<!-- ladder:begin table hopper -->" in text
    assert "<!-- ladder:begin table blackwell -->" in text


def test_blackwell_numbers_are_never_presented_as_measured_without_a_b200_file():
    if any(results.capability(data) == (10, 0) for data in results.all_recorded().values()):
        pytest.skip("a results file measured on a compute-capability-10.0 GPU exists")
    block = blocks_measured.table_block("blackwell")
    rows = [line for line in block.splitlines() if line.startswith("| [")]
    assert len(rows) == len(track_steps("blackwell")), block
    for line in rows:
        assert tables.NOT_RUN_B200 in line, line
    blackwell = [step for step in discover() if "sm_100a" in step.info.archs]
    assert blackwell, "no step targets sm_100a"
    for step in blackwell:
        assert tables.NOT_RUN_B200 in blocks_measured.results_block(step.id)


@pytest.mark.parametrize("empty,match", [("table", r"\| step \| change \|"), ("steps", "no step targets sm_100a")])
def test_the_blackwell_check_fails_when_it_finds_nothing_to_check(empty, match, monkeypatch):
    """The test above on a table without step rows, or with no sm_100a step discovered: it must fail,
    not pass having looked at nothing."""
    monkeypatch.setattr(results, "all_recorded", lambda: {})
    if empty == "table":
        monkeypatch.setattr(blocks_measured, "table_block", lambda track: "| step | change |\n|---|---|\n")
    else:
        monkeypatch.setitem(globals(), "discover", lambda: [])
    with pytest.raises(AssertionError, match=match):
        test_blackwell_numbers_are_never_presented_as_measured_without_a_b200_file()


def test_results_block_reflects_the_file(tmp_path, monkeypatch):
    """Change the recorded number and the generated block changes with it."""
    from harness.core import results
    prov = {"gpu": "NVIDIA H200", "capability": [9, 0], "date": "2026-01-01T00:00:00Z", "command": "ladder table", "torch": "t",
            "cutlass_dsl": "4.8.1", "ptxas": "13.4", "flash_attn_4": "f", "driver": "d"}
    bench = [{"seqlen": s, "fraction": 0.123, "step_tflops": 1.0, "fa4_tflops": 2.0} for s in (4096, 8192, 16384)]
    from harness.core.steps import resolve
    row = {"provenance": prov, "numerics": [{"passed": True}], "bench": bench, "fingerprint": resolve("01").fingerprint}
    results.record(tmp_path / "h200.json", {"01": row})
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    assert re.search(r"0\.123", blocks_measured.results_block("01"))


def test_checks_block_reflects_recorded_selfchecks(tmp_path, monkeypatch):
    from harness.core import results
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    assert "No recorded selfcheck" in blocks_measured.checks_block()
    monkeypatch.setattr("harness.core.provenance.collect", lambda command=None: {
        "gpu": "NVIDIA H200", "date": "2026-01-01T00:00:00Z", "command": "ladder selfcheck --sanitize racecheck"})
    from harness.core.steps import resolve
    results.record_selfcheck(tmp_path / "h200.json", "racecheck", [resolve("01")])
    results.record_selfcheck(tmp_path / "h200.json", "racecheck", [resolve("h02")])   # merges
    block = blocks_measured.checks_block()
    assert "compute-sanitizer racecheck clean for 01, h02" in block
    data = results.load(tmp_path / "h200.json")
    data["selfcheck"]["racecheck"]["h02"]["fingerprint"]["step"] = "0" * 64       # h02 edited since
    (tmp_path / "h200.json").write_text(__import__("json").dumps(data))
    block = blocks_measured.checks_block()
    assert "clean for 01 (" in block and "h02 changed since checked" in block


def test_a_result_measured_on_another_version_of_the_kernel_is_not_shown_as_current(tmp_path, monkeypatch):
    from harness.core import results
    from harness.core.steps import resolve
    step = resolve("01")
    prov = {"gpu": "NVIDIA H200", "capability": [9, 0], "date": "2026-01-01T00:00:00Z", "command": "ladder table", "torch": "t",
            "cutlass_dsl": "4.8.1", "ptxas": "13.4", "flash_attn_4": "f", "driver": "d"}
    bench = [{"seqlen": s, "fraction": 0.123, "step_tflops": 1.0, "fa4_tflops": 2.0} for s in (4096, 8192, 16384)]
    row = {"provenance": prov, "numerics": [{"passed": True}], "bench": bench,
           "fingerprint": dict(step.fingerprint, step="0" * 64)}
    results.record(tmp_path / "h200.json", {"01": row})
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    assert results.is_stale(step, results.load(tmp_path / "h200.json")["rows"]["01"])
    assert tables.STALE in blocks_measured.results_block("01") and "0.123" not in blocks_measured.results_block("01")
    assert tables.STALE in blocks_measured.table_block("hopper")
    row["fingerprint"] = step.fingerprint
    results.record(tmp_path / "h200.json", {"01": row})
    assert "0.123" in blocks_measured.results_block("01") and tables.STALE not in blocks_measured.table_block("hopper")


def test_compare_blocks_do_not_quote_a_stale_row(tmp_path, monkeypatch):
    from harness.core import results
    from harness.core.steps import resolve
    prov = {"gpu": "NVIDIA H200", "capability": [9, 0], "date": "2026-01-01T00:00:00Z", "command": "ladder table", "torch": "t",
            "cutlass_dsl": "4.8.1", "ptxas": "13.4", "flash_attn_4": "f", "driver": "d"}
    bench = [{"seqlen": s, "fraction": 0.5, "step_tflops": 1.0, "fa4_tflops": 2.0} for s in (4096, 8192, 16384)]
    current = {"provenance": prov, "numerics": [{"passed": True}], "bench": bench,
               "fingerprint": resolve("01").fingerprint}
    stale = dict(current, fingerprint=dict(resolve("h02").fingerprint, contract="0" * 64))
    results.record(tmp_path / "h200.json", {"01": current, "h02": stale})
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    block = blocks_measured.compare_block("h02", "01")
    assert "not both recorded" in block and "`h02` (to be re-measured)" in block
    # never one side from one GPU's file and the other from another's
    results.record(tmp_path / "h100.json", {"h02": dict(current, fingerprint=resolve("h02").fingerprint)})
    assert "not both recorded" in blocks_measured.compare_block("h02", "01")


def test_profiles_block_lines_up_recorded_profiles_and_skips_stale_ones(tmp_path, monkeypatch):
    from harness.core import results
    from harness.core.steps import resolve
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    prov = {"gpu": "NVIDIA H200", "capability": [9, 0], "date": "2026-01-01T00:00:00Z", "command": "ladder profile", "ptxas": "13.4"}

    def profile(step_id, kernel_ns, stalls):
        metrics = {"gpu__time_duration.sum": kernel_ns,
                   **{f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio": v for r, v in stalls.items()}}
        return {"step": step_id, "seqlen": 4096, "provenance": prov, "metrics": metrics,
                "fingerprint": resolve(step_id).fingerprint}

    results.record_profile(tmp_path / "h200.json", profile("01", 1234.0, {"barrier": 1.5, "wait": 0.25}))
    assert "no current profile of h02" in blocks_profile.profiles_block("01", "h02")
    results.record_profile(tmp_path / "h200.json", profile("h02", 987.0, {"long_scoreboard": 2.0}))
    block = blocks_profile.profiles_block("01", "h02")
    header, *rows = [line for line in block.splitlines() if line.startswith("| ")]
    assert header.split("|")[2].strip() == "01" and header.split("|")[3].strip() == "h02"
    cells = {row.split("|")[1].strip(): [c.strip() for c in row.split("|")[2:4]] for row in rows}
    assert cells["kernel time (ns)"] == ["1,234.0", "987.0"]
    # each column shows every stall reason that is large in any column
    assert cells["warps stalled on long_scoreboard per issued instruction"] == ["n/a", "2.00"]
    assert cells["warps stalled on barrier per issued instruction"] == ["1.50", "n/a"]
    data = results.load(tmp_path / "h200.json")
    data["profiles"]["h02"]["fingerprint"]["cutlass_dsl"] = "4.7.0"       # measured with another DSL
    (tmp_path / "h200.json").write_text(__import__("json").dumps(data))
    assert "no current profile of h02" in blocks_profile.profiles_block("01", "h02")


def test_fa4_profile_from_the_same_run_is_a_column_and_goes_stale_with_the_release(tmp_path, monkeypatch):
    from harness.core import results
    from harness.core.steps import resolve
    from harness.gpu.profile import FA4, fa4_fingerprint
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    prov = {"gpu": "NVIDIA H200", "capability": [9, 0], "date": "2026-01-01T00:00:00Z", "command": "ladder profile", "ptxas": "13.4"}
    results.record_profile(tmp_path / "h200.json", {"step": "h14", "seqlen": 4096, "provenance": prov,
                                                    "metrics": {"gpu__time_duration.sum": 800.0},
                                                    "fingerprint": resolve("h14").fingerprint})
    assert "no current profile of FA4" in blocks_profile.profiles_block("h14", FA4)
    results.record_profile(tmp_path / "h200.json", {"step": FA4, "seqlen": 4096, "provenance": prov, "beside": "h14",
                                                    "metrics": {"gpu__time_duration.sum": 760.0},
                                                    "fingerprint": fa4_fingerprint()})
    block = blocks_profile.profiles_block("h14", FA4)
    header, *rows = [line for line in block.splitlines() if line.startswith("| ")]
    assert [c.strip() for c in header.split("|")[2:4]] == ["h14", "FA4"]
    assert "760.0" in rows[0] and "same process and ncu run as h14's" in block
    data = results.load(tmp_path / "h200.json")
    data["profiles"][FA4]["fingerprint"]["flash_attn_4"] = "4.0.0b1"     # another FA4 release
    (tmp_path / "h200.json").write_text(__import__("json").dumps(data))
    assert "no current profile of FA4" in blocks_profile.profiles_block("h14", FA4)


def test_ncu_csv_gives_one_metric_set_per_profiled_launch():
    from harness.gpu.profile import parse_csv
    stall = "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"
    text = "\n".join(['==PROF== Connected to process 1',
                      f'"ID","Kernel Name","gpu__time_duration.sum","{stall}"',
                      '"","","nsecond","ratio"',
                      '"0","kernel_cutlass_kernel_ladder_h14","802,176","1.55"',
                      '"1","kernel_cutlass_kernel_flash_attn","760,000","1.20"'])
    first, second = parse_csv(text)
    assert first["gpu__time_duration.sum"] == 802176.0 and second["gpu__time_duration.sum"] == 760000.0
    assert second[stall] == 1.2
    assert parse_csv("==PROF== no kernels were profiled") == []


def test_a_registers_only_difference_is_not_stale_but_any_other_is(tmp_path):
    """ptxas may allocate a different register count for the same PTX from run to run: the
    registers row alone must not make a writeup stale (or CI would flake); any other row must."""
    doc = tmp_path / "doc.md"
    block = "<!-- ladder:begin sass b03 b02 -->\n" + writeups.render("sass b03 b02") + "<!-- ladder:end -->\n"
    doc.write_text(block)
    assert not writeups.refresh(doc, write=False)
    regs = re.sub(r"(\| registers / thread\s*\|\s*)(\d+)", lambda m: m.group(1) + str(int(m.group(2)) + 10), block)
    assert regs != block
    doc.write_text(regs)
    assert not writeups.refresh(doc, write=False)
    mma = re.sub(r"(\| `UTCHMMA` [^|]*\|\s*)(\d+)", lambda m: m.group(1) + str(int(m.group(2)) + 1), block)
    assert mma != block
    doc.write_text(mma)
    assert writeups.refresh(doc, write=False)


def test_every_gpu_with_a_results_file_gets_its_table(tmp_path, monkeypatch):
    """Results files are found by listing results/, not named: an H100's file adds an H100 table to
    the Hopper track the day it is recorded, and a B200's replaces "not yet run" by its numbers."""
    from harness.core import results
    from harness.core.steps import resolve
    monkeypatch.setattr(results, "RESULTS", tmp_path)

    def row(step_id, gpu, capability, fraction):
        prov = {"gpu": gpu, "capability": capability, "date": "2026-01-01T00:00:00Z", "command": "ladder table",
                "torch": "t", "cutlass_dsl": "4.8.1", "ptxas": "13.4", "flash_attn_4": "f", "driver": "d"}
        bench = [{"seqlen": s, "fraction": fraction, "step_tflops": 1.0, "fa4_tflops": 2.0} for s in (4096, 8192, 16384)]
        return {"provenance": prov, "numerics": [{"passed": True}], "bench": bench,
                "fingerprint": resolve(step_id).fingerprint}

    results.record(tmp_path / "h200.json", {"h02": row("h02", "NVIDIA H200", [9, 0], 0.111)})
    results.record(tmp_path / "h100-80gb-hbm3.json", {"h02": row("h02", "NVIDIA H100 80GB HBM3", [9, 0], 0.222)})
    hopper = blocks_measured.table_block("hopper")
    assert "NVIDIA H200" in hopper and "NVIDIA H100 80GB HBM3" in hopper and "0.111" in hopper and "0.222" in hopper
    assert tables.NOT_RUN_B200 in blocks_measured.table_block("blackwell")
    results.record(tmp_path / "b200.json", {"b02": row("b02", "NVIDIA B200", [10, 0], 0.333)})
    blackwell = blocks_measured.table_block("blackwell")
    assert "0.333" in blackwell and "NVIDIA H200" not in blackwell
    assert tables.NOT_RUN_B200 not in blocks_measured.results_block("b02")


def test_bank_and_tmem_pictures_are_drawn_from_the_steps():
    """The swizzle bank picture comes from the step's own copy and layout (8 threads of a quarter
    on one bank group in h02, on 8 in h03); the TMEM picture from the step's map and aliases."""
    h02, h03 = writeups.render("banks h02 K"), writeups.render("banks h03 K")
    assert h02.count("-> 8 wavefronts") == 4 and "total 32 wavefronts" in h02
    assert h03.count("-> 1 wavefront\n") == 4 and "total 4 wavefronts" in h03
    b06 = writeups.render("tmem b06")
    from harness.core.steps import resolve
    info = resolve("b06").info
    for label in [*info.extra["tmem_map"], *info.extra["tmem_aliases"]]:
        assert f"|{label}-" in b06
    assert b06.index("|O0") - b06.index("|S0") == info.extra["tmem_map"]["O0"][0] // 8


def test_a_budget_block_is_stale_for_its_float_classes_but_not_for_what_register_allocation_moves(tmp_path):
    """ptxas may schedule the same PTX differently from run to run (b05: 186 or 196 registers): the
    budget's "other" class, the totals on it and the loop length move with it; its floating-point
    and MUFU classes must not."""
    doc = tmp_path / "doc.md"
    block = "<!-- ladder:begin budget b04 -->\n" + writeups.render("budget b04") + "<!-- ladder:end -->\n"
    doc.write_text(block)
    assert not writeups.refresh(doc, write=False)
    moved = re.sub(r"(\| other\s*\|\s*)(\d+\.\d+)", lambda m: m.group(1) + "9.99", block)
    moved = re.sub(r"(\| \*\*total\*\*[^|]*\|\s*)\*\*(\d+\.\d+)\*\*", lambda m: m.group(1) + "**99.99**", moved)
    assert moved != block
    doc.write_text(moved)
    assert not writeups.refresh(doc, write=False)
    ffma = re.sub(r"(\| FFMA\s*\|\s*)(\d+\.\d+)", lambda m: m.group(1) + "9.99", block)
    assert ffma != block
    doc.write_text(ffma)
    assert writeups.refresh(doc, write=False)


def test_check_names_say_what_ran():
    from harness.report.blocks_measured import _check_name
    assert _check_name("none") == "selfcheck"
    assert _check_name("racecheck") == "compute-sanitizer racecheck"
    assert _check_name("guard").startswith("selfcheck --guard")
    assert _check_name("guard+racecheck").endswith("+ compute-sanitizer racecheck")


def test_accuracy_block_renders_the_recorded_entry_and_marks_a_stale_one(tmp_path, monkeypatch):
    from harness.core import results
    from harness.core.steps import resolve
    from harness.gpu import ex2_accuracy
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    assert "not yet recorded" in writeups.render("accuracy b11")
    step = resolve("b11")
    entry = {"step": "b11", "arch": "sm_90a", "path": ex2_accuracy.path_name(False), "bound": 2.0 ** -9,
             "provenance": {"gpu": "NVIDIA H200", "date": "2026-01-01T00:00:00Z", "cutlass_dsl": "4.8.1", "ptxas": "13.4",
                            "command": "ladder accuracy --record results/h200.json", "driver": "d"},
             "fingerprint": ex2_accuracy.fingerprint(step), "elements": 4_267_696, "normal_elements": 4_161_660,
             "max_rel_error": 8.768e-05, "max_rel_error_log2": -13.477, "argmax_x": -39.8994255065918,
             "max_abs_error_below_normal": 5.9e-39, "model_mismatches": 0, "first_mismatch_x": None}
    with pytest.raises(ValueError, match="provenance lacks gpu"):
        results.record_accuracy(tmp_path / "h200.json", {**entry, "provenance": {}})
    results.record_accuracy(tmp_path / "h200.json", entry)
    block = writeups.render("accuracy b11")
    assert "8.77e-05 = 2^-13.5" in block and "1.95e-03 = 2^-9" in block and "-39.89943" in block
    assert "NVIDIA H200, 2026-01-01" in block and "`ladder accuracy --record results/h200.json`" in block
    assert "| yes " in block and "not yet recorded" not in block
    results.record_accuracy(tmp_path / "h200.json", {**entry, "fingerprint": dict(entry["fingerprint"], emulation="0")})
    block = writeups.render("accuracy b11")
    assert tables.STALE in block and "emulation's code changed" in block and "8.77e-05" not in block


def test_a_bound_rows_measured_cells_are_compared_and_its_model_cells_are_not():
    """The staleness check ignores the model's predicted and binds cells (they move with ptxas's
    register allocation) but must see a new measurement in the same row."""
    row = "| h14    | {measured}                               | {predicted} (model) | {binds} | 77%  | 39%  |"
    base = writeups.settled(row.format(measured="0.945", predicted="1.00", binds="tensor"))
    assert writeups.settled(row.format(measured="0.945", predicted="0.98", binds="chain: x")) == base
    assert writeups.settled(row.format(measured="0.953", predicted="1.00", binds="tensor")) != base


def test_check_block_lists_one_steps_recorded_selfchecks_and_drops_a_stale_one(tmp_path, monkeypatch):
    from harness.core import results
    from harness.core.steps import resolve
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    assert "No recorded selfcheck of `h13`" in writeups.render("check h13")
    prov = {"gpu": "NVIDIA H200", "date": "2026-01-01T00:00:00Z", "command": "ladder selfcheck --steps h13 --sanitize "
            "racecheck --record results/h200.json", "ptxas": "13.4"}
    monkeypatch.setattr("harness.core.provenance.collect", lambda: prov)
    results.record_selfcheck(tmp_path / "h200.json", "racecheck", [resolve("h13")])
    block = writeups.render("check h13")
    assert "NVIDIA H200, 2026-01-01: compute-sanitizer racecheck passed" in block and "`ladder selfcheck" in block
    assert "No recorded selfcheck" in writeups.render("check h12")
    data = results.load(tmp_path / "h200.json")
    data["selfcheck"]["racecheck"]["h13"]["fingerprint"]["step"] = "0" * 64
    (tmp_path / "h200.json").write_text(__import__("json").dumps(data))
    assert "No recorded selfcheck of `h13`" in writeups.render("check h13")
