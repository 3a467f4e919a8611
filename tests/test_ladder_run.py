"""``ladder table`` on a GPU, decided by harness.gpu.ladder_run and run here on a stand-in child
(tests/child_stub.py) that returns measured-looking rows: what is filed where, when the table
fails, and what a first run on a GPU with no baseline does."""

import functools
import json
import shutil

import pytest

from harness import cli
from harness.cli import common as cli_common
from harness.core import results
from harness.core.steps import resolve
from harness.gpu import ladder_run
from harness.gpu.isolate import run_job

STUB = functools.partial(run_job, module="tests.child_stub")


@pytest.fixture
def told(monkeypatch):
    """Tell the stand-in child which fraction of FA4 each step spec measures."""
    def tell(**fractions):
        monkeypatch.setenv("LADDER_STUB_FRACTIONS", json.dumps(fractions))
    return tell


def _run(steps, **kw):
    return ladder_run.run_ladder([resolve(s) for s in steps], gpu="NVIDIA H200", timeout=120, runner=STUB, **kw)


def test_rows_experiments_and_variants_are_filed_apart(tmp_path, told):
    variant = tmp_path / "my_01.py"
    shutil.copy(resolve("01").path, variant)
    told(**{"01": 0.06, "exp:h05-loads-free": "fail-numerics"})
    path = tmp_path / "h200.json"
    run = _run(["01", "exp:h05-loads-free", str(variant)], record=path, repeat=2)
    assert run.exit_code == 0, run.failures
    data = results.load(path)
    assert set(data["rows"]) == {"01"} and set(data["experiments"]) == {"h05-loads-free"}
    assert data["experiments"]["h05-loads-free"]["diagnostic"]          # wrong answers by design: filed
    assert [o.numerics for o in run.outcomes] == ["pass", "wrong by design", "pass"]
    assert "my_01" not in json.dumps(data)                                  # a variant is never recorded
    row = data["rows"]["01"]
    assert len(row["runs"]) == 2 and row["hmean"] == pytest.approx(0.06) and row["repeats"] == 2


def test_failed_numerics_fail_the_table_and_are_not_recorded(tmp_path, told):
    told(h02="fail-numerics")
    run = _run(["h02"], record=tmp_path / "h200.json")
    assert run.exit_code == 1 and run.failures == ["h02: numerics failed"]
    assert results.load(tmp_path / "h200.json")["rows"] == {}


def test_a_regression_against_the_baseline_exits_1(tmp_path, told):
    baseline = tmp_path / "h200.json"
    told(**{"01": 0.06, "h02": 0.19})
    _run(["01", "h02"], record=baseline)
    told(**{"01": 0.06, "h02": 0.15})                    # h02 fell 21%: beyond the 5% tolerance
    run = _run(["01", "h02"], baseline=baseline)
    assert run.exit_code == 1 and len(run.failures) == 1 and run.failures[0].startswith("regression h02")
    told(**{"01": 0.059, "h02": 0.186})                  # within 5%
    assert _run(["01", "h02"], baseline=baseline).exit_code == 0


@pytest.mark.parametrize("baseline_gpu", [None, "NVIDIA H200"], ids=["no file", "another GPU's file"])
def test_no_baseline_for_this_gpu_is_said_and_the_table_stands(tmp_path, told, monkeypatch, baseline_gpu):
    baseline = tmp_path / "b200.json"
    if baseline_gpu:
        told(**{"01": 0.9})
        _run(["01"], record=baseline)
    told(**{"01": 0.01})              # far below that file's row: it must not count as a regression
    monkeypatch.setenv("LADDER_STUB_GPU", "NVIDIA B200")
    run = ladder_run.run_ladder([resolve("01")], gpu="NVIDIA B200", timeout=120, runner=STUB, baseline=baseline)
    assert run.exit_code == 0 and run.notes and run.notes[0].startswith("no baseline for NVIDIA B200")


def test_the_cli_prints_and_writes_markdown_from_the_same_run(tmp_path, told, monkeypatch, capsys):
    """The GPU branch of ``ladder table`` as a GPU runner calls it (gpu-ladder.yml)."""
    monkeypatch.setattr(cli_common, "gpu", lambda: ((9, 0), "NVIDIA H200"))
    monkeypatch.setattr(ladder_run, "run_job", STUB)
    told(**{"01": 0.06, "h02": 0.19})
    summary, rows = tmp_path / "summary.md", tmp_path / "rows.json"
    code = cli.main(["table", "--steps", "01,h02", "--repeat", "2", "--baseline", str(tmp_path / "none.json"),
                     "--markdown", str(summary), "--json", str(rows)])
    out = capsys.readouterr().out
    assert code == 0 and "no baseline for NVIDIA H200" in out and "h02" in out
    md = summary.read_text()
    assert "| h02 " in md and "+217%" in md and "no baseline for NVIDIA H200" in md
    assert set(json.loads(rows.read_text())) == {"01", "h02"}


def test_repeat_must_be_positive():
    with pytest.raises(ValueError, match="repeat"):
        _run(["01"], repeat=0)


def test_recording_a_variant_is_refused_before_anything_runs(tmp_path, capsys, monkeypatch):
    """On any machine, GPU or not: the refusal comes before the GPU check, compile or child."""
    monkeypatch.setattr(cli_common, "gpu", lambda: pytest.fail("looked for a GPU before refusing"))
    copy = tmp_path / "my_01.py"
    shutil.copy(resolve("01").path, copy)
    code = cli.main(["run", str(copy), "--record", str(tmp_path / "x.json")])
    assert code == 2 and "variant file" in capsys.readouterr().out
    assert not (tmp_path / "x.json").exists()


def test_a_variant_named_like_a_step_does_not_bring_that_step_along(tmp_path, told, monkeypatch, capsys):
    """A copy of h02 saved as h03.py is measured as itself: step h03 is neither run nor recorded."""
    monkeypatch.setattr(cli_common, "gpu", lambda: ((9, 0), "NVIDIA H200"))
    monkeypatch.setattr(ladder_run, "run_job", STUB)
    copy = tmp_path / "h03.py"
    shutil.copy(resolve("h02").path, copy)
    told(**{str(copy): 0.19})
    rows, record = tmp_path / "rows.json", tmp_path / "h200.json"
    assert cli.main(["table", "--steps", str(copy), "--json", str(rows), "--record", str(record)]) == 0
    assert list(json.loads(rows.read_text())) == [str(copy)]
    assert results.load(record)["rows"] == {}


def test_the_baseline_is_read_before_the_new_rows_are_recorded_into_it(tmp_path, told):
    """--record and --baseline naming one file: the new rows are judged against the old ones."""
    path = tmp_path / "h200.json"
    told(h02=0.19)
    _run(["h02"], record=path)
    told(h02=0.10)
    run = _run(["h02"], record=path, baseline=path)
    assert run.exit_code == 1 and run.failures[0].startswith("regression h02")


def test_a_broken_baseline_fails_before_anything_is_measured(tmp_path):
    bad = tmp_path / "h200.json"
    bad.write_text('{"schema": 99}')
    def runner(*args, **kwargs):
        raise AssertionError("measured before reading the baseline")
    with pytest.raises(ValueError, match="schema"):
        ladder_run.run_ladder([resolve("01")], gpu="NVIDIA H200", timeout=1, runner=runner, baseline=bad)


def test_ladder_run_of_a_diagnostic_experiment_records_it_and_passes(tmp_path, told, monkeypatch, capsys):
    """Wrong answers by design are the point of a diagnostic experiment: `run` agrees with `table`."""
    monkeypatch.setattr(cli_common, "gpu", lambda: ((9, 0), "NVIDIA H200"))
    monkeypatch.setattr(ladder_run, "run_job", STUB)
    told(**{"exp:h05-loads-free": "fail-numerics"})
    path = tmp_path / "h200.json"
    assert cli.main(["run", "exp:h05-loads-free", "--record", str(path)]) == 0
    assert set(results.load(path)["experiments"]) == {"h05-loads-free"}
