"""The FMA-pipe exponential of exp:h10-exp2-emulation (FA4's Blackwell recipe), checked in float32
on the CPU: clamp at -127, floor by adding 1.5 * 2^23 with round-down, the fraction, a degree-3
polynomial for 2^frac, and the floor added into the exponent bits. The constants are read from
the experiment's own text, so this is the arithmetic the kernel runs; the float32 operations are
harness/model/ex2_model.py's, shared with b11's check (tests/test_ex2_accuracy.py).

Bound: P is rounded to bf16 before P V, a relative error of up to 2^-9; the emulation must stay
well inside it wherever 2^x is a normal float (x >= -126). Below that the kernel's result is a
denormal or zero, and only its absolute size matters (it is < 2^-125, nothing next to a row sum
that is at least 1)."""

import ast

import numpy as np
import pytest

from harness.core import experiment_edits
from harness.model.ex2_model import BF16_ROUNDING, errors, ex2_fma_pipe


def _constants():
    tree = ast.parse(experiment_edits.EX2_EMULATION_HELPER)
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = node.value
    poly = ast.literal_eval(found["POLY_EX2_DEG3"])
    magic = eval(compile(ast.Expression(found["ROUND_DOWN_MAGIC"]), "<helper>", "eval"), {"float": float})
    return np.array(poly, dtype=np.float32), np.float32(magic)


def _clamp():
    """The clamp of ``_ex2_on_fma_pipe``: the constant its ``cute.arch.fmax`` call takes."""
    tree = ast.parse(experiment_edits.EX2_EMULATION_HELPER)
    (call,) = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "fmax"]
    return ast.literal_eval(call.args[1])


def ex2_on_fma_pipe(x: np.ndarray, poly=None, round_down: bool = True) -> np.ndarray:
    """The experiment's ``_ex2_on_fma_pipe`` in float32, operation by operation (harness/model/ex2_model.py;
    ``poly`` and ``round_down`` exist to break it on purpose)."""
    fitted, magic = _constants()
    return ex2_fma_pipe(x, fitted if poly is None else poly, magic, _clamp(), round_down=round_down)


def test_constants_are_the_fitted_polynomial_and_the_round_down_magic():
    poly, magic = _constants()
    assert magic == 2.0 ** 23 + 2.0 ** 22
    assert poly[0] == 1.0 and len(poly) == 4
    # 2^f at the ends of [0, 1): the polynomial starts at 1 and stays below 2
    assert abs(float(np.polyval(poly[::-1], 1.0)) - 2.0) < 1e-3


def test_relative_error_is_far_below_bf16_rounding_where_the_result_is_normal():
    x = np.concatenate([np.linspace(-126.0, 0.0, 400_001, dtype=np.float32),
                        -np.arange(0, 127, dtype=np.float32),               # integers: frac = 0
                        -np.arange(0, 126, dtype=np.float32) - np.float32(2 ** -20)])   # just below
    worst = errors(x, ex2_on_fma_pipe(x))["max_rel_error"]
    assert worst < BF16_ROUNDING / 16, worst


def test_below_the_normal_range_the_result_is_negligible_and_minus_infinity_gives_zero_or_tiny():
    x = np.array([-126.5, -127.0, -130.0, -1e4, -np.inf], dtype=np.float32)
    got = ex2_on_fma_pipe(x).astype(np.float64)
    assert np.all(got >= 0) and np.all(got < 2.0 ** -125)


def _max_rel_error(**broken):
    x = np.linspace(-20.0, 0.0, 20_001, dtype=np.float32)
    return errors(x, ex2_on_fma_pipe(x, **broken))["max_rel_error"]


def test_the_check_can_fail():
    """Two ways to get the recipe wrong, each caught by the same bound: the degree-2 fit's linear
    coefficient in the degree-3 polynomial, and rounding to nearest instead of down (the fraction
    then falls in [-0.5, 0.5), outside the interval the polynomial was fitted on)."""
    poly, _ = _constants()
    wrong = poly.copy()
    wrong[1] = np.float32(0.6657850742340087890625)
    assert _max_rel_error() < BF16_ROUNDING / 16
    assert _max_rel_error(poly=wrong) > BF16_ROUNDING / 16
    assert _max_rel_error(round_down=False) > BF16_ROUNDING / 16


@pytest.mark.parametrize("x", [0.0, -1.0, -0.5, -7.25, -100.0])
def test_exact_points(x):
    got = float(ex2_on_fma_pipe(np.array([x], dtype=np.float32))[0])
    assert got == pytest.approx(2.0 ** x, rel=BF16_ROUNDING / 16)
