"""The ``ladder`` CLI on a CPU machine: every command answers, and says plainly what it did not run."""

import pytest

from harness import cli
from harness.cli import common as cli_common
from harness.core.steps import discover, resolve

pytestmark = pytest.mark.skipif(cli_common.gpu()[0] is not None, reason="CPU-machine behaviour of the CLI")


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


def test_accuracy_needs_a_gpu_but_compiles_and_models_first(capsys):
    code, out = run(capsys, "accuracy")
    assert code == 2 and "needs an sm_90 or sm_100 GPU" in out and "nothing recorded" in out
    assert "compiled for sm_90a" in out and "FFMA 6" in out and "FFMA2 3" in out and "MUFU.EX2 0" in out
    assert "CPU float32 model" in out and "max relative error" in out


def test_accuracy_of_a_step_without_the_emulation_is_a_clean_error(capsys):
    code, out = run(capsys, "accuracy", "b08")
    assert code == 2 and "no FMA-pipe exponential" in out


def test_unknown_step_is_a_clean_error(capsys):
    code, out = run(capsys, "sass", "h99")
    assert code == 2 and "no step" in out


def test_writeups_check_reports_stale_blocks_and_fails(capsys, monkeypatch):
    """The wiring of ``ladder writeups --check`` (whether the committed blocks are current is
    tests/test_generate.py's test)."""
    from harness.core.paths import ROOT
    from harness.report import writeups
    monkeypatch.setattr(writeups, "stale", lambda: [ROOT / "README.md"])
    code, out = run(capsys, "writeups", "--check")
    assert code == 1 and "stale generated block in README.md" in out
    monkeypatch.setattr(writeups, "stale", lambda: [])
    assert run(capsys, "writeups", "--check")[0] == 0


def test_a_variant_file_runs_like_a_step_but_is_never_recorded(capsys, tmp_path):
    import shutil

    from harness.core.steps import resolve
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

    from harness.core import workloads
    from harness.core.steps import resolve
    from harness.gpu import measure
    copy = tmp_path / "my_01.py"
    shutil.copy(resolve("01").path, copy)
    monkeypatch.setattr(workloads, "TINY_CASES", ())       # nothing to run on this CPU
    assert measure.selfcheck_step(str(copy)) == {"step": "my_01", "guard": False, "numerics": []}


def test_sass_b11_against_b08_shows_the_mma_order_the_ex2_count_and_ffma2(capsys, monkeypatch):
    """The three mechanisms of b09-b11 in one table: the MMA issue order (b09), MUFU.EX2 per kernel
    and FFMA2 (b10, b11)."""
    monkeypatch.setenv("COLUMNS", "250")
    code, out = run(capsys, "sass", "b11", "--against", "b08")
    assert code == 0
    assert "loop: S0 S1 O0 O1" in out and "S0 S1 | loop: O0 S0 O1 S1 | O0 O1" in out
    ex2 = next(line for line in out.splitlines() if "MUFU.EX2" in line)
    assert "129" in ex2 and "113" in ex2 and "-16" in ex2
    assert any("FFMA2" in line and "88" in line for line in out.splitlines())


def test_selfcheck_of_steps_this_gpu_cannot_run_fails_and_records_nothing(capsys, monkeypatch, tmp_path):
    """Named steps none of which runs on the GPU: nothing was checked, so no "all pass" and no record."""
    monkeypatch.setattr(cli_common, "gpu", lambda: ((9, 0), "a fake H200"))
    record = tmp_path / "results.json"
    code, out = run(capsys, "selfcheck", "--steps", "b12,b13", "--record", str(record))
    assert code == 1 and "nothing was checked" in out and "pass" not in out
    assert not record.exists()


def test_selfcheck_runs_an_experiment_named_with_steps(capsys, monkeypatch):
    """An experiment named with --steps is checked like a step (the default, every step, skips them)."""
    from harness.cli import measure as cli_measure
    monkeypatch.setattr(cli_common, "gpu", lambda: ((9, 0), "a fake H200"))
    ran = []

    class _Ok:
        status, payload, seconds, error = "ok", {"numerics": [{"case": "tiny", "passed": True, "max_error": 0.0,
                                                               "bound": 1.0}]}, 0.0, None

    monkeypatch.setattr(cli_measure, "_measure", lambda step, *a, **k: ran.append(step.id) or _Ok())
    code, out = run(capsys, "selfcheck", "--steps", "exp:h14-cluster-multicast")
    assert code == 0 and ran == [resolve("exp:h14-cluster-multicast").id]


def test_sass_of_a_cluster_kernel_shows_its_register_split_and_cluster_audit(capsys):
    code, out = run(capsys, "sass", "exp:h14-cluster-multicast")
    assert code == 0 and "[24, 240, 240] x 128 threads = 64,512 of 65,536" in out
    assert "cluster (PTX audit): barriers initialised, fenced" in out
