"""Work kept once per build directory (harness/core/memo.py): computed once, errors remembered,
and the computing module's text part of the key."""

import pytest

from harness.core import memo


@pytest.fixture
def memo_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(memo, "MEMO", tmp_path)
    return tmp_path


def test_a_value_is_computed_once_and_read_back(memo_dir):
    calls = []

    def compute():
        calls.append(1)
        return {"wavefronts": [4, 4, 4]}

    assert memo.remembered("kind", {"step": "h02"}, compute) == {"wavefronts": [4, 4, 4]}
    assert memo.remembered("kind", {"step": "h02"}, compute) == {"wavefronts": [4, 4, 4]}
    assert len(calls) == 1
    memo.remembered("kind", {"step": "h03"}, compute)
    assert len(calls) == 2 and len(list((memo_dir / "kind").glob("*.json"))) == 2


def test_an_error_is_remembered_and_raised_again_without_recomputing(memo_dir):
    calls = []

    def compute():
        calls.append(1)
        raise ValueError("no thread-issued stores")

    for _ in range(2):
        with pytest.raises((ValueError, memo.Remembered), match="no thread-issued stores"):
            memo.remembered("kind", {"step": "h08"}, compute)
    assert len(calls) == 1


def test_the_computing_modules_text_is_part_of_the_key(memo_dir, monkeypatch):
    memo.remembered("kind", {"step": "h02"}, lambda: 1)
    monkeypatch.setattr(memo.Path, "read_bytes", lambda self: b"an edited model")
    assert memo.remembered("kind", {"step": "h02"}, lambda: 2) == 2


def test_a_step_model_is_memoized_per_version_of_the_file(tmp_path):
    calls = []

    @memo.per_step_version
    def model(step, arch):
        calls.append(arch)
        return {"arch": arch}

    class Step:
        path = tmp_path / "h02.py"

    Step.path.write_text("x = 1\n")
    assert model(Step, "sm_90a") == model(Step, "sm_90a") == {"arch": "sm_90a"} and calls == ["sm_90a"]
    model(Step, "sm_90a")["arch"] = "changed by a caller"
    assert model(Step, "sm_90a") == {"arch": "sm_90a"}                  # each caller its own copy
    Step.path.write_text("x = 2\n")
    model(Step, "sm_90a")
    assert calls == ["sm_90a", "sm_90a"]
