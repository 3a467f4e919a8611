"""The ``ladder`` CLI on a CPU machine: every command answers, and says plainly what it did not run."""

import pytest

from harness import cli
from harness.steps import discover

pytestmark = pytest.mark.skipif(cli._gpu()[0] is not None, reason="CPU-machine behaviour of the CLI")


def run(capsys, *argv):
    code = cli.main(list(argv))
    return code, capsys.readouterr().out


def test_list_shows_every_step(capsys):
    code, out = run(capsys, "list")
    assert code == 0
    for step in discover():
        assert step.id in out


def test_run_without_gpu_compiles_and_says_it_did_not_run(capsys):
    code, out = run(capsys, "run", "01")
    assert code == 0
    assert "did NOT run" in out and "HMMA" in out and "fingerprint claim holds" in out
    assert "last recorded" in out


def test_sass_against_shows_deltas(capsys):
    code, out = run(capsys, "sass", "01", "--against", "01", "--arch", "sm_90a")
    assert code == 0 and "delta" in out and "HMMA" in out


def test_diff_of_the_first_step_explains_itself(capsys):
    code, out = run(capsys, "diff", "01")
    assert code == 0 and "no predecessor" in out


def test_diff_between_two_steps(capsys):
    steps = discover()
    other = steps[1].id if len(steps) > 1 else steps[0].id
    code, out = run(capsys, "diff", steps[0].id, other)
    assert code == 0 and ("identical" in out or out.startswith("---"))


def test_explain_renders_the_writeup(capsys):
    code, out = run(capsys, "explain", "01")
    assert code == 0 and "mma.sync" in out


def test_table_on_cpu_is_the_compile_table(capsys):
    code, out = run(capsys, "table", "--steps", "01")
    assert code == 0 and "nothing was run" in out and "holds" in out


def test_selfcheck_needs_a_gpu(capsys):
    code, out = run(capsys, "selfcheck")
    assert code == 2 and "needs a CUDA GPU" in out


def test_unknown_step_is_a_clean_error(capsys):
    code, out = run(capsys, "sass", "h99")
    assert code == 2 and "no step" in out


def test_writeups_check_reports_stale_blocks_and_fails(capsys, monkeypatch):
    """The wiring of ``ladder writeups --check`` (whether the committed blocks are current is
    tests/test_generate.py's test)."""
    from harness import generate
    from harness.paths import ROOT
    monkeypatch.setattr(generate, "stale", lambda: [ROOT / "README.md"])
    code, out = run(capsys, "writeups", "--check")
    assert code == 1 and "stale generated block in README.md" in out
    monkeypatch.setattr(generate, "stale", lambda: [])
    assert run(capsys, "writeups", "--check")[0] == 0


def test_a_variant_file_runs_like_a_step_but_is_never_recorded(capsys, tmp_path):
    import shutil

    from harness.steps import resolve
    copy = tmp_path / "my_01.py"
    shutil.copy(resolve("01").path, copy)
    variant = resolve(str(copy))
    assert variant.variant and variant.id == "my_01" and variant.info.id == "01"
    code, out = run(capsys, "table", "--steps", f"01,{copy}")
    assert code == 0 and "my_01" in out and "never recorded" in out


def test_the_child_jobs_accept_a_variant_path(monkeypatch, tmp_path):
    """The child resolves what the parent passes (a variant's path) and never re-resolves its id
    (a variant's id is its file stem, which names no step)."""
    import shutil

    from harness import measure, workloads
    from harness.steps import resolve
    copy = tmp_path / "my_01.py"
    shutil.copy(resolve("01").path, copy)
    monkeypatch.setattr(workloads, "TINY_CASES", ())       # nothing to run on this CPU
    assert measure.selfcheck_step(str(copy)) == {"step": "my_01", "guard": False, "numerics": []}
