"""Tests that must check: a test whose every assert sits in a loop body passes, having checked nothing,
when the loop finds nothing to iterate over. An AST scan of tests/test_*.py flags such a test.

The rule, per ``def test_*`` (nested functions and lambdas are not looked into):

- an assert *can be skipped by an empty iteration* when it sits in the body of a ``while`` loop or of a
  ``for`` loop over anything but a literal that cannot be empty (a tuple, list or set display with an
  element that is not starred, or ``range`` of integer constants that holds a value), or when it is of
  the form ``assert all(...)``, ``assert not any(...)``, ``assert not [...]`` or ``assert [...] == []``
  over a comprehension that iterates such a thing;
- a test is flagged when it has asserts and every one of them can be skipped so, unless it also calls
  ``pytest.raises`` or ``pytest.fail`` outside any such loop (those fail when nothing happens).

``pytest.skip`` does not exempt a test: a skip is not a check. A test with no assert at all is not
flagged: it checks by calling code that raises (``replay_many``, ``pytest.raises``, ...)."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent

LOOPS = (ast.For, ast.AsyncFor, ast.While)
COMPREHENSIONS = (ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _never_empty(iterable: ast.expr) -> bool:
    """A literal the iteration cannot find empty, whatever the project's data says."""
    if isinstance(iterable, (ast.Tuple, ast.List, ast.Set)):
        return any(not isinstance(e, ast.Starred) for e in iterable.elts)
    if (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "range"
            and iterable.args and not iterable.keywords
            and all(isinstance(a, ast.Constant) and type(a.value) is int for a in iterable.args)):
        return len(range(*(a.value for a in iterable.args))) > 0
    return False


def _may_run_zero_times(loop: ast.stmt) -> bool:
    return isinstance(loop, ast.While) or not _never_empty(loop.iter)


def _over_possibly_empty(node: ast.expr) -> bool:
    return isinstance(node, COMPREHENSIONS) and any(not _never_empty(g.iter) for g in node.generators)


def _vacuous_on_empty(test: ast.expr) -> bool:
    """``all(<comp>)``, ``not any(<comp>)``, ``not [<comp>]``, ``[<comp>] == []``: true when the comprehension is
    empty."""
    def call_of(node, name):
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
                and len(node.args) == 1 and _over_possibly_empty(node.args[0]))
    if call_of(test, "all"):
        return True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return call_of(test.operand, "any") or _over_possibly_empty(test.operand)
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
            and isinstance(test.comparators[0], ast.List) and not test.comparators[0].elts):
        return _over_possibly_empty(test.left)
    return False


def _is_pytest_check(node: ast.AST) -> bool:
    """A call of pytest.raises or pytest.fail."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("raises", "fail")
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "pytest")


def _checks(fn: ast.AST):
    """(asserts that can be skipped by an empty iteration, checks that cannot) in ``fn``'s own body."""
    skippable, unconditional = [], []

    def walk(node, in_loop):
        if isinstance(node, SCOPES):
            return
        if isinstance(node, ast.Assert):
            (skippable if in_loop or _vacuous_on_empty(node.test) else unconditional).append(node)
        elif _is_pytest_check(node) and not in_loop:
            unconditional.append(node)
        # Only a loop's body may run zero times: its iterable, test and else clause always run.
        body = node.body if isinstance(node, LOOPS) and _may_run_zero_times(node) else []
        for child in ast.iter_child_nodes(node):
            walk(child, in_loop or any(child is stmt for stmt in body))

    for child in ast.iter_child_nodes(fn):
        walk(child, False)
    return skippable, unconditional


def loop_only_tests(source: str) -> list[str]:
    """The test functions in ``source`` whose every assert can be skipped by an empty iteration."""
    flagged = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            skippable, unconditional = _checks(node)
            if skippable and not unconditional:
                flagged.append(f"{node.name} (line {node.lineno})")
    return flagged


def test_no_test_passes_by_iterating_over_nothing():
    files = sorted(TESTS.glob("test_*.py"))
    assert len(files) > 1, f"no test files found in {TESTS}"
    flagged = {p.name: found for p in files if (found := loop_only_tests(p.read_text()))}
    assert not flagged, ("tests that assert only inside loops (they pass when the loop finds nothing): add an "
                         f"assert outside the loop that it ran, e.g. on the count of what it found: {flagged}")


LOOP_ONLY = '''
import pytest

def test_every_found_item_is_fine():
    for item in find_items():
        assert item.ok, item

def test_all_fine():
    assert all(item.ok for item in find_items())

def test_in_a_while():
    while queue:
        assert queue.pop()

def test_a_skip_is_not_a_check():
    if nothing_to_do():
        pytest.skip("nothing")
    assert not any(item.bad for item in find_items())

def helper_is_not_a_test():
    for item in find_items():
        assert item.ok
'''

CHECKED = '''
import pytest

def test_count_then_loop():
    items = find_items()
    assert len(items) == len(expected_items())
    for item in items:
        assert item.ok, item

def test_found_and_all():
    items = find_items()
    assert items and all(item.ok for item in items)

def test_a_literal_cannot_be_empty():
    for name in ("Q", "K", "V"):
        for n in range(1, 6):
            assert check(name, n)
    assert all(check(name) for name in ("Q", "K"))

def test_raises_checks_on_its_own():
    for edit in edits():
        assert edit
    with pytest.raises(ValueError):
        apply(edits())

def test_no_assert_checks_by_raising():
    replay_many(steps())
'''


def test_the_scan_flags_a_test_that_asserts_only_inside_loops():
    assert loop_only_tests(LOOP_ONLY) == ["test_every_found_item_is_fine (line 4)", "test_all_fine (line 8)",
                                          "test_in_a_while (line 11)", "test_a_skip_is_not_a_check (line 15)"]


def test_the_scan_passes_a_test_that_asserts_its_loop_ran():
    assert loop_only_tests(CHECKED) == []
