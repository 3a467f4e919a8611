"""Recorded results: summaries, merging with provenance, regression detection, and the committed files."""

import json
import re
from importlib.metadata import version

import pytest

from harness.core import results
from harness.core.paths import ROOT
from harness.core.steps import code_sha256, discover, resolve
from harness.report import blocks_measured, tables

PROV = {"gpu": "NVIDIA H200", "capability": [9, 0], "date": "2026-11-29T00:00:00Z", "command": "ladder table", "torch": "2.11",
        "cutlass_dsl": "4.8.1", "ptxas": "13.4", "flash_attn_4": "4.0.0b36"}


def row(fractions, passed=True):
    return {"provenance": PROV, "numerics": [{"passed": passed}],
            "bench": [{"seqlen": s, "fraction": f} for s, f in zip((4096, 8192, 16384), fractions, strict=True)]}


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
    assert data["rows"], f"results/{gpu}.json has no measured rows"
    for step_id, r in data["rows"].items():
        assert step_id in known
        for key in ("gpu", "driver", "torch", "cutlass_dsl", "flash_attn_4", "date", "command"):
            assert r["provenance"].get(key), f"{gpu}/{step_id}: no {key}"
        assert r["numerics_passed"] and len(r["bench"]) == 3
        assert results.gpu_key(r["provenance"]["gpu"]) == gpu


@pytest.mark.parametrize("gpu", sorted(results.all_recorded()))
def test_recorded_results_were_built_by_the_ptxas_major_version_this_machine_builds_with(gpu):
    """One toolchain: the SASS tables, budgets and models computed here describe the kernels a GPU
    timed only if the same ptxas built both. Every record carries the ptxas its process compiled with."""
    from harness.core import toolchain
    data = results.all_recorded()[gpu]
    assert results.provenances(data), f"results/{gpu}.json has no records"
    wrong = results.ptxas_mismatches(data, toolchain.ptxas_version())
    assert not wrong, (f"results/{gpu}.json: records built by another ptxas than this machine's "
                       f"{toolchain.ptxas_version()}: { {v: w[:3] for v, w in wrong.items()} }")


def test_provenance_names_the_compiler_that_built_what_ran():
    """Every GPU job's provenance (harness/core/provenance.py) carries the ptxas and CuTe DSL build of
    its process; here, on any machine, the one this process loaded."""
    from harness.core import toolchain
    from harness.core.provenance import collect
    prov = collect(["ladder", "table"])
    assert prov["ptxas"] == toolchain.ptxas_version() and prov["cutlass_dsl_libs"] == toolchain.dsl_flavor()
    assert re.fullmatch(r"\d+\.\d+", prov["ptxas"]) and prov["command"] == "ladder table"


# Compared in a fresh process each (as the GPU machine compiled them): the baseline and the last step of
# each track. Not b02-b06: ptxas makes their same PTX into more than one instruction order from run to
# run, on one machine too (same registers and counts; CONTRIBUTING.md).
MACHINE_CODE_SAMPLE = ("01 sm_90a", "h14 sm_90a", "b14 sm_100a")


def recorded_machine_code() -> list[tuple[str, str, dict]]:
    """(gpu, "<step> <arch>", entry) for each sampled build a GPU machine recorded with ``ladder
    toolchain --record``."""
    return [(gpu, key, entry) for gpu, data in sorted(results.all_recorded().items())
            for key, entry in sorted(data.get("toolchain", {}).get("machine_code", {}).items())
            if key in MACHINE_CODE_SAMPLE]


def test_a_gpu_machine_recorded_the_machine_code_it_builds():
    assert len(recorded_machine_code()) == len(MACHINE_CODE_SAMPLE), "`ladder toolchain --record` builds missing"


@pytest.mark.parametrize("gpu,build,entry", recorded_machine_code(), ids=lambda v: v if isinstance(v, str) else "")
def test_the_gpu_machine_builds_the_same_machine_code_as_this_one(gpu, build, entry):
    """The CPU's SASS describes the kernels the GPU ran: compiled first in a fresh process (as the
    GPU machine compiled every step for ``ladder toolchain --record``, and as a GPU job's child does),
    this machine's ptxas makes the same instructions, byte for byte (a digest of the cubin's .text
    sections). A step changed since then is not compared."""
    from harness.compiler.compile import fresh_cubin_facts
    step_id, arch = build.split()
    step = resolve(step_id)
    if entry["fingerprint"] != step.fingerprint:
        pytest.skip(f"{step_id} changed since results/{gpu}.json recorded its build")
    here = fresh_cubin_facts(step, arch)
    assert here["ptxas"] == entry["ptxas"]
    assert here["machine_code"] == entry["machine_code"], (
        f"{build}: this machine's ptxas makes other code than the {gpu} machine's ({entry['ptxas']})")


def test_the_ptxas_check_fails_on_a_record_of_another_major_version_or_none():
    data = {"rows": {"h02": {"provenance": {**PROV, "ptxas": "12.9"}}, "h03": {"provenance": PROV}},
            "stock": {"provenance": {"gpu": "NVIDIA H200"}}}
    assert results.ptxas_mismatches(data, "13.4") == {"12.9": ["rows/h02"], "not recorded": ["stock"]}
    assert results.ptxas_mismatches(data, "12.9") == {"13.4": ["rows/h03"], "not recorded": ["stock"]}


def test_runs_of_several_processes_keep_each_fraction_and_show_median_and_range():
    runs = [row([0.20, 0.40, 0.40]), row([0.22, 0.44, 0.44]), row([0.30, 0.30, 0.30])]
    combined = results.combine_runs(runs)
    assert len(combined["runs"]) == 3
    assert [r["fractions"]["4096"] for r in combined["runs"]] == [0.20, 0.22, 0.30]
    s = results.summarize(combined)
    assert s["repeats"] == 3 and s["fractions"]["4096"] == pytest.approx(0.22)
    assert s["fraction_ranges"]["8192"] == [0.30, 0.44]
    hmeans = sorted(results.harmonic_mean(f) for f in ([0.2, 0.4, 0.4], [0.22, 0.44, 0.44], [0.3] * 3))
    assert s["hmean"] == pytest.approx(results.harmonic_mean([0.22, 0.40, 0.40]))      # of the medians shown
    assert s["hmean_range"] == pytest.approx([hmeans[0], hmeans[2]])
    single = results.summarize(row([0.2, 0.4, 0.4]))
    assert single["repeats"] == 1 and single["hmean_range"][0] == single["hmean_range"][1]


def test_within_noise_is_overlap_of_the_ranges_over_processes():
    a = results.summarize(results.combine_runs([row([0.50] * 3), row([0.54] * 3)]))
    b = results.summarize(results.combine_runs([row([0.53] * 3), row([0.60] * 3)]))
    c = results.summarize(results.combine_runs([row([0.56] * 3), row([0.60] * 3)]))
    assert results.within_noise(a, b) and results.within_noise(b, a)
    assert not results.within_noise(a, c)


def test_a_record_is_stale_when_any_part_of_its_fingerprint_changed():
    step = resolve("h02")
    now = step.fingerprint
    assert set(now) == {"step", "contract", "cutlass_dsl"} and now["cutlass_dsl"] == "4.8.1"
    assert results.stale_reason(step, {"fingerprint": now}) is None
    for part, reason in (("step", "the step's code changed"), ("contract", "ladder/contract.py changed"),
                         ("cutlass_dsl", "measured with nvidia-cutlass-dsl 4.7.0, now 4.8.1")):
        changed = dict(now, **{part: "4.7.0" if part == "cutlass_dsl" else "0" * 64})
        assert results.stale_reason(step, {"fingerprint": changed}) == reason
    assert results.stale_reason(step, {}) == "recorded without a fingerprint"


@pytest.mark.parametrize("gpu", sorted(results.all_recorded()))
def test_every_committed_row_is_shown_as_current_only_if_it_measured_this_kernel(gpu):
    """A committed row names the kernel it measured (its fingerprint). Compared here directly with
    the checkout's step, contract and CuTe DSL, and with what that GPU's table in the README shows:
    the row's h-mean if it measured this kernel, "to be re-measured" if anything it depends on
    changed."""
    readme = (ROOT / "README.md").read_text()
    data = results.all_recorded()[gpu]
    assert data["rows"], f"results/{gpu}.json has no measured rows"
    for step_id, r in data["rows"].items():
        step = resolve(step_id)
        fp = r["fingerprint"]
        assert re.fullmatch(r"[0-9a-f]{64}", fp["step"]) and fp["cutlass_dsl"] == r["provenance"]["cutlass_dsl"]
        current = (fp["step"] == code_sha256(step.path.read_text())
                   and fp["contract"] == code_sha256((ROOT / "ladder" / "contract.py").read_text())
                   and fp["cutlass_dsl"] == version("nvidia-cutlass-dsl"))
        tracks = [t for t in step.tracks if gpu in results.track_files(t)]
        assert tracks, f"{gpu} {step_id}: in no README table"
        for track in tracks:
            block = blocks_measured._gpu_table(track, data)
            assert block in readme, f"{gpu}: the README's {track} table is not this file's"
            line = next(line for line in block.splitlines() if line.startswith(f"| [{step_id}]("))
            cells = [c.strip() for c in line.split("|")[1:-1]]
            if current:
                assert cells[5].split()[0].rstrip("*") == f"{results.summarize(r)['hmean']:.3f}", f"{gpu} {step_id}: {line}"
            else:
                assert cells[2].startswith(tables.STALE), f"{gpu} {step_id}: measured another kernel: {line}"


def _carried():
    from harness.cli.carry import records
    return [(label, sid, rec) for data in results.all_recorded().values()
            for label, sid, rec in records(data) if "carried" in rec]


def test_a_carried_record_names_the_code_as_it_is():
    """A record re-stamped by `ladder carry` names today's code (a later edit makes it stale as any)."""
    carried = _carried()
    if not carried:
        pytest.skip("no carried record in results/")
    for label, sid, rec in carried:
        assert rec["fingerprint"]["step"] == resolve(sid).code_sha256, f"{label}: carried, then the code changed"
    assert {rec["carried"]["arch"] for _, _, rec in carried} <= {"sm_90a", "sm_100a"}


@pytest.mark.parametrize("key", ["01 sm_90a", "h14 sm_90a", "b09 sm_100a"])
def test_a_carried_record_names_the_machine_code_of_the_step_as_it_is(key):
    """The GPU ran the machine code the carried note names; the step as it is, compiled first in a
    fresh process (as ``carry`` compared them), must compile to exactly that. A sample of steps: each
    fresh compile takes seconds."""
    from harness.compiler.compile import fresh_cubin_facts
    sid, arch = key.split()
    digests = {rec["carried"]["machine_code"] for _, s, rec in _carried() if s == sid and rec["carried"]["arch"] == arch}
    if not digests:
        pytest.skip(f"no carried record of {key}")
    assert digests == {fresh_cubin_facts(resolve(sid), arch)["machine_code"]}, f"{key}: the machine code moved"


def test_carry_leaves_a_record_stale_when_its_code_cannot_be_found(tmp_path):
    from harness.cli.carry import carry
    data = results.load(ROOT / "results" / "h200.json")
    row = dict(data["rows"]["h05"], fingerprint={**data["rows"]["h05"]["fingerprint"], "step": "0" * 64})
    path = tmp_path / "h200.json"
    results.save(path, {"schema": data["schema"], "rows": {"h05": row}})
    assert carry(path) == ["rows/h05: stays stale (its recorded code is not in git history)"]
    assert results.load(path)["rows"]["h05"]["fingerprint"]["step"] == "0" * 64


def test_carry_drops_an_earlier_carried_note_once_the_record_is_stale(tmp_path):
    """A record carried once, whose code then changed in a way carry cannot prove harmless, is stale:
    its old note (naming the code as it was) goes, so nothing reads it as current."""
    from harness.cli.carry import carry
    data = results.load(ROOT / "results" / "h200.json")
    row = dict(data["rows"]["h05"], fingerprint={**data["rows"]["h05"]["fingerprint"], "step": "0" * 64},
               carried={"from": "1" * 64, "machine_code": "2" * 64, "arch": "sm_90a", "date": "2026-12-01"})
    path = tmp_path / "h200.json"
    results.save(path, {"schema": data["schema"], "rows": {"h05": row}})
    assert carry(path) == ["rows/h05: stays stale (its recorded code is not in git history); "
                           "its earlier carried note dropped"]
    assert "carried" not in results.load(path)["rows"]["h05"]


def test_an_h_mean_outside_its_process_range_is_marked():
    from harness.report.tables import with_range
    assert with_range(0.439, [0.441, 0.444]) == "0.439* (0.441-0.444)"
    assert with_range(0.442, [0.441, 0.444]) == "0.442 (0.441-0.444)"
    assert with_range(0.9016, [0.9019, 0.904]) == "0.902 (0.902-0.904)"     # inside, as printed
