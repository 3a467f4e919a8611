"""Warp-specialized steps read as one function per warp role: kernel() sets up and dispatches, each
role is a function of its own, none too long to read; the barrier-protocol model follows the calls."""

import ast
import inspect

import pytest
from conftest import STEPS, step_id

from harness.model import protocol, protocol_source
from harness.report.code_diff import code_lines

ROLE_LINES = 120       # code lines (docstrings, comments, blank lines not counted) a function may hold


def _warp_specialized(step) -> bool:
    return step.track in ("hopper", "blackwell") and int(step.id[1:]) >= 7


SPECIALIZED = [s for s in STEPS if _warp_specialized(s)]


def _roles(step) -> set[str]:
    if step.track == "hopper":
        return {"producer", "consumer"}
    n = int(step.id[1:])
    return {"load_warp", "mma_warp", "softmax_warpgroup"} | ({"correction_warpgroup"} if n >= 12 else set())


def _functions(step) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(step.path.read_text())
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def test_the_warp_specialized_steps_are_found():
    assert [s.id for s in SPECIALIZED] == [f"{t}{n:02d}" for n in range(7, 15) for t in "bh"]


@pytest.mark.parametrize("step", SPECIALIZED, ids=step_id)
def test_kernel_dispatches_to_one_function_per_role(step):
    """kernel() calls each role function (as a statement, under a warp test) and holds no loop over
    K/V tiles itself: the roles' loops live in the roles."""
    functions = _functions(step)
    kernel = functions["kernel"]
    called = {c.func.id for c in ast.walk(kernel) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
    missing = _roles(step) - called
    assert not missing, f"{step.id}: kernel() does not call {sorted(missing)}"
    # and no role beyond the step's own (b14 is b13's roles, persistent: no epilogue warp)
    jit = {name for name, f in functions.items() if any(ast.unparse(d) == "cute.jit" for d in f.decorator_list)}
    extra = (called & jit) - _roles(step)
    assert not extra, f"{step.id}: kernel() calls roles this step does not have: {sorted(extra)}"
    for role in _roles(step):
        assert role in functions and functions[role].lineno > kernel.lineno, f"{step.id}: {role} after kernel()"
    loops = [n for n in ast.walk(kernel) if isinstance(n, ast.For) and "n_blocks" in ast.unparse(n.iter)]
    assert loops == [], f"{step.id}: kernel() loops over K/V tiles at line {loops[0].lineno if loops else 0}"


@pytest.mark.parametrize("step", SPECIALIZED, ids=step_id)
def test_no_function_is_too_long_to_read(step):
    source = step.path.read_text()
    lengths = {name: len(code_lines(ast.get_source_segment(source, node))) for name, node in _functions(step).items()}
    assert lengths, step.id
    long = {name: n for name, n in lengths.items() if n > ROLE_LINES}
    assert not long, f"{step.id}: {long} code lines (at most {ROLE_LINES})"


def test_the_protocol_follows_the_role_calls():
    """b07's load warp's barrier operations (but kernel()'s CTA-wide barriers) sit in load_warp,
    which kernel() calls: the walk finds them there."""
    step = next(s for s in STEPS if s.id == "b07")
    load = _functions(step)["load_warp"]
    proto = protocol_source.extract(step.module, 3)
    ops = [op for op in proto.warps[step.module.LOAD_WARP] if op.kind != "sync"]   # kernel()'s CTA barriers
    assert len(ops) >= 3 * 2
    assert all(load.lineno <= op.line <= load.end_lineno for op in ops)


def test_a_role_called_inside_an_expression_is_refused():
    step = next(s for s in STEPS if s.id == "b07")
    source = inspect.getsource(step.module)
    assert "        load_warp(" in source
    broken = source.replace("        load_warp(", "        _ = 0 or load_warp(", 1)
    with pytest.raises(protocol.ExtractionError, match="inside an expression is not modelled"):
        protocol_source.extract(step.module, 2, source=broken)
