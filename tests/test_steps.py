"""The step contract, statically: discovery by file name, metadata, docstrings, writeups, budgets."""

import ast
import re

import pytest
from conftest import STEPS, step_id

from harness.compiler.smem_budget import SMEM_PER_CTA_LIMIT
from harness.core.paths import ROOT
from harness.core.steps import code_sha256, predecessor, resolve, track_steps
from harness.model import protocol_source
from ladder.contract import ARCH_CAPABILITY


def test_step_01_exists_and_is_shared_by_both_tracks():
    step = resolve("01")
    assert step.tracks == ("hopper", "blackwell")
    assert resolve("h01") is not None and resolve("b01").id == "01" and resolve("s01").id == "01"
    assert track_steps("hopper")[0].id == "01" and track_steps("blackwell")[0].id == "01"


def test_unknown_step_names_are_rejected():
    with pytest.raises(ValueError):
        resolve("h99")
    with pytest.raises(ValueError):
        resolve("zz")


@pytest.mark.parametrize("step", STEPS, ids=step_id)
def test_metadata_is_consistent(step):
    info = step.info
    assert info.id == step.id and info.slug == step.slug
    assert info.archs and all(a in ARCH_CAPABILITY for a in info.archs)
    if step.id.startswith("h"):
        assert info.archs == ("sm_90a",)
    if step.id.startswith("b"):
        assert info.archs == ("sm_100a",)
    assert info.threads % 32 == 0 and info.threads <= 1024
    assert info.smem_bytes <= SMEM_PER_CTA_LIMIT, f"{info.smem_bytes} B of smem > {SMEM_PER_CTA_LIMIT}"
    assert info.change and info.title
    assert info.sass_present, "a step must claim the SASS its mechanism produces"
    if step.id != "01":
        assert predecessor(step) is not None
        assert predecessor(step).number == step.number - 1
    if info.tmem_cols is not None:
        assert 32 <= info.tmem_cols <= 512 and info.tmem_cols & (info.tmem_cols - 1) == 0


@pytest.mark.parametrize("step", STEPS, ids=step_id)
def test_step_module_is_self_contained(step):
    """Its kernel is in its own file: it imports only cutlass and the shared contract."""
    tree = ast.parse(step.path.read_text())
    imported = {n.module.split(".")[0] if isinstance(n, ast.ImportFrom) else a.name.split(".")[0]
                for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in (n.names if isinstance(n, ast.Import) else [n])}
    assert imported <= {"cutlass", "ladder", "math", "operator"}, imported
    assert any(isinstance(n, ast.FunctionDef) and n.name == "kernel" for n in tree.body), \
        "the device function is named `kernel` (the profiler selects it by name)"


@pytest.mark.parametrize("step", STEPS, ids=step_id)
def test_docstring_states_change_why_expect_evidence(step):
    doc = step.module.__doc__ or ""
    for word in ("Change", "Why", "Expect", "Evidence"):
        assert re.search(rf"\b{word}", doc), f"{step.id}'s docstring lacks '{word}'"


@pytest.mark.parametrize("step", STEPS, ids=step_id)
def test_writeup_exists_with_generated_blocks(step):
    assert step.writeup.exists(), f"missing {step.writeup.relative_to(ROOT)}"
    text = step.writeup.read_text()
    assert f"<!-- ladder:begin results {step.id} -->" in text
    assert f"<!-- ladder:begin sass {step.id}" in text
    exercises = re.split(r"\n(?:## Exercises|<details><summary><b>Exercises</b>.*)\n", text, maxsplit=1)
    assert len(exercises) == 2 and "`ladder " in exercises[1], "a step writeup has predict-then-run exercises"


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.id)
def test_every_barrier_wait_names_its_arrive_and_phase(step):
    """The comment right above each mbarrier wait says what it waits for, which arrive it pairs
    with and which phase (parity) it expects: the first thing to read when a kernel hangs."""
    lines = step.path.read_text().splitlines()
    checked = 0
    for i, line in enumerate(lines):
        if "mbarrier_wait(" not in line or line.lstrip().startswith("#"):
            continue
        above, k = [], i - 1
        while k >= 0 and (lines[k].lstrip().startswith("#") or " = " in lines[k] and not above):
            if lines[k].lstrip().startswith("#"):
                above.append(lines[k].lower())
            k -= 1
        text = " ".join(above)
        where = f"{step.path.name}:{i + 1}"
        assert "wait" in text, f"{where}: no 'wait:' comment above the mbarrier wait"
        assert "parity" in text or "phase" in text, f"{where}: the comment does not name the phase/parity"
        assert "arrive" in text or "expect-tx" in text, f"{where}: the comment does not name the arrive it pairs with"
        checked += 1
    # every step with an mbarrier (in the barrier model, harness/model/protocol_source.py) waits on one: 01, h02, h03 have none
    barriers = protocol_source.extract(step.module, 2).counts
    assert bool(checked) == bool(barriers), f"{step.id}: {checked} waits checked, barriers {sorted(b.name for b in barriers)}"


_KERNEL_SOURCE = '''"""Module docstring."""
import cutlass


class Kernel:
    """Class docstring."""

    def __call__(self, x):
        """Method docstring."""
        return x + 1  # a comment
'''


def test_code_hash_ignores_prose_and_follows_code():
    base = code_sha256(_KERNEL_SOURCE)
    assert code_sha256(_KERNEL_SOURCE.replace("Method docstring.", "Reworded.")) == base
    assert code_sha256(_KERNEL_SOURCE.replace("# a comment", "# another")) == base
    assert code_sha256(_KERNEL_SOURCE.replace("x + 1", "x + 2")) != base


def test_code_hash_does_not_depend_on_the_python_version(monkeypatch):
    """The GPU machine runs Python 3.12, whose syntax trees carry fields 3.11's lack (an empty
    ``type_params`` on every def and class): the hash recorded there must match the one here."""
    base = code_sha256(_KERNEL_SOURCE)
    parse = ast.parse

    def parse_as_312(*args, **kwargs):
        tree = parse(*args, **kwargs)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                node.type_params = []
        return tree

    for cls in (ast.FunctionDef, ast.ClassDef):
        if "type_params" not in cls._fields:
            monkeypatch.setattr(cls, "_fields", cls._fields + ("type_params",))
    monkeypatch.setattr(ast, "parse", parse_as_312)
    assert code_sha256(_KERNEL_SOURCE) == base
