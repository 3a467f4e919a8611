"""The CI workflows: valid YAML, and every ``ladder`` command they run is one the real CLI accepts."""

import re
import shlex
from pathlib import Path

import pytest
import yaml

from harness.cli import build_parser
from harness.core.steps import TRACKS

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
SUMMARY = "/tmp/step-summary.md"


def load(name):
    doc = yaml.safe_load((WORKFLOWS / name).read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # PyYAML reads the key `on` as the boolean True
    return doc


GPU = load("gpu-ladder.yml")
JOB = GPU["jobs"]["ladder"]
MATRIX = JOB["strategy"]["matrix"]["include"]


def substitute(text, entry):
    text = re.sub(r"\$\{\{\s*matrix\.(\w+)\s*\}\}", lambda m: entry[m.group(1)], text)
    return text.replace("${GITHUB_STEP_SUMMARY}", SUMMARY).replace("$GITHUB_STEP_SUMMARY", SUMMARY)


def parse_ladder(command):
    """The arguments after the ``ladder`` token, parsed by the real parser; fails the test if it rejects them."""
    argv = shlex.split(command)
    start = next(i for i, tok in enumerate(argv) if Path(tok).name == "ladder") + 1
    try:
        return build_parser().parse_args(argv[start:])
    except SystemExit:
        pytest.fail(f"ladder rejects: {command}")


def ladder_commands(entry):
    lines = [line for step in JOB["steps"] if "run" in step
             for line in substitute(step["run"], entry).replace("\\\n", " ").splitlines()]
    return {line: parse_ladder(line) for line in lines if any(Path(t).name == "ladder" for t in shlex.split(line))}


def test_gpu_workflow_triggers_and_runners():
    assert GPU["on"]["push"]["branches"] == ["main"] and "workflow_dispatch" in GPU["on"]
    assert JOB["runs-on"] == ["self-hosted", "linux", "${{ matrix.gpu }}"]
    assert JOB["timeout-minutes"] == 90 and JOB["strategy"]["fail-fast"] is False
    assert JOB["steps"][0]["uses"] == "actions/checkout@v4"
    # READY=no: a venv even where python3 has every pinned package, so .venv/bin/ladder exists
    assert [s["run"] for s in JOB["steps"] if "run" in s][0] == "make install READY=no"


def test_gpu_matrix_pairs_gpu_with_track():
    assert {e["gpu"]: e["track"] for e in MATRIX} == {"b200": "blackwell", "h200": "hopper"}


@pytest.mark.parametrize("entry", MATRIX, ids=lambda e: e["gpu"])
def test_ladder_commands_parse(entry):
    commands = ladder_commands(entry)
    assert {args.command for args in commands.values()} >= {"toolchain", "selfcheck", "table"}


@pytest.mark.parametrize("entry", MATRIX, ids=lambda e: e["gpu"])
def test_table_track_baseline_and_artifact(entry):
    (table,) = [args for args in ladder_commands(entry).values() if args.command == "table"]
    assert table.track in TRACKS and table.track == entry["track"]
    assert table.baseline == f"results/{entry['gpu']}.json"
    assert table.repeat == 3 and table.markdown == SUMMARY
    (upload,) = [s for s in JOB["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["if"] == "always()"
    assert substitute(upload["with"]["path"], entry) == table.json
    assert substitute(upload["with"]["name"], entry) == f"ladder-{entry['gpu']}"


def test_parse_check_rejects_a_misspelled_option():
    with pytest.raises(pytest.fail.Exception, match="--trak"):
        parse_ladder(".venv/bin/ladder table --trak hopper")


def test_cpu_workflow_runs_ci_script():
    cpu = load("cpu.yml")
    assert "push" in cpu["on"] and "pull_request" in cpu["on"]
    (job,) = cpu["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest" and job["timeout-minutes"] == 90
    python = [s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python@")]
    assert python and str(python[0]["with"]["python-version"]) == "3.11"
    assert any(shlex.split(s.get("run", "")) == ["bash", ".ci/run"] for s in job["steps"])


def test_ci_script_lints_then_tests():
    code = "\n".join(line for line in (ROOT / ".ci" / "run").read_text().splitlines()
                     if not line.lstrip().startswith("#"))
    assert 0 <= code.find("make lint") < code.find("make test"), ".ci/run must run `make lint`, then `make test`"


def test_pre_commit_runs_the_ruff_the_project_pins():
    hooks = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())["repos"]
    (ruff,) = [r for r in hooks if r["repo"].endswith("/ruff-pre-commit")]
    pinned = re.search(r'"ruff==([\d.]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert ruff["rev"] == f"v{pinned}" and [h["id"] for h in ruff["hooks"]] == ["ruff"]


def test_make_help_lists_every_target_with_what_it_does():
    makefile = (ROOT / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:(.*)$", makefile, re.M).group(1).split()
    described = dict(re.findall(r"^([a-z-]+):[^\n#]*## (.+)$", makefile, re.M))
    assert phony and set(phony) == set(described), set(phony) ^ set(described)
    import subprocess
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert all(re.search(rf"^  {target}\s", out, re.M) for target in phony), out


def test_the_project_says_its_license():
    assert (ROOT / "LICENSE").read_text().startswith("BSD 3-Clause License")
    assert 'license = { text = "BSD-3-Clause" }' in (ROOT / "pyproject.toml").read_text()
