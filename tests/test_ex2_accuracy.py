"""b11's FMA-pipe exponential (``ex2_emulated_pair``): its constants and arithmetic checked in float32
on the CPU against float64 2^x (harness/model/ex2_model.py, constants read from the b11 module), shown
able to fail; the element-wise kernel that measures it on a GPU (harness/gpu/ex2_accuracy.py) compiled
here for sm_90a (scalar path) and sm_100a (packed path), its SASS all FMA pipe and no MUFU.EX2;
and, on an sm_90 or sm_100 GPU, the measurement itself.

Bound: P is rounded to bf16 before P V, a relative error of up to 2^-9. FA4's degree-3 fit is
good to 8.8e-5 (2^-13.5) on [0, 1); the float32 arithmetic around it adds next to nothing, so the
test holds b11 to 2^-13 where 2^x is normal (x >= -126)."""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from harness.core.steps import resolve
from harness.gpu import ex2_accuracy
from harness.model import ex2_model
from harness.model.ex2_model import BF16_ROUNDING, errors, fma_f32

FIT_BOUND = 2.0 ** -13
STEP = resolve(ex2_accuracy.DEFAULT_STEP)
f32 = np.float32


def test_constants_are_fa4s_degree_3_fit_and_the_round_down_magic():
    c = ex2_accuracy.constants(STEP)
    assert c["magic"] == 2.0 ** 23 + 2.0 ** 22 and c["clamp"] == -127.0
    assert len(c["poly"]) == 4 and c["poly"][0] == 1.0
    assert abs(np.polyval(np.array(c["poly"])[::-1], 1.0) - 2.0) < 1e-3      # 2^frac runs from 1 to 2


def test_fma_rounds_once():
    """a*b + c = 1 + 2^-24 + 2^-70: float64 rounds it onto the tie between 1 and 1 + 2^-23, so a
    second rounding to float32 gives 1 (ties to even); one rounding gives 1 + 2^-23, as FFMA does."""
    a, b, c = f32(-2.0 ** -12 * (1 + 2.0 ** -23)), f32(2.0 ** -12 * (1 - 2.0 ** -23)), f32(1 + 2.0 ** -23)
    assert f32(np.float64(a) * np.float64(b) + np.float64(c)) == 1.0
    assert fma_f32(a, b, c) == f32(1 + 2.0 ** -23)
    assert fma_f32(f32(1.5), f32(2.0), f32(0.25)) == 3.25


def test_relative_error_is_far_below_bf16_rounding_over_the_whole_input_range():
    x = ex2_accuracy.inputs()
    e = errors(x, ex2_accuracy.model(STEP, x))
    assert e["max_rel_error"] < FIT_BOUND < BF16_ROUNDING, e
    assert e["max_abs_error_below_normal"] <= 2.0 ** -127, e            # what is left below: 2^x itself


@pytest.mark.parametrize("x, want", [(0.0, 1.0), (-0.0, 1.0), (-1.0, 0.5), (-126.0, 2.0 ** -126),
                                     (-127.0, 0.0), (-200.0, 0.0), (-1e30, 0.0), (-np.inf, 0.0)])
def test_exact_points(x, want):
    """At an integer the fraction is 0 and the polynomial exactly 1; at and below the clamp the
    exponent field becomes 0 and so does the result."""
    assert ex2_accuracy.model(STEP, np.array([x], dtype=f32))[0] == f32(want)


@pytest.mark.parametrize("broken", [
    {"poly": (1.0, 0.6657850742340087890625, 0.227564394474029541015625, 0.077119089663028717041015625)},
    {"round_down": False},
    {"magic": 2.0 ** 23},
], ids=["degree-2 fit's linear coefficient", "round to nearest", "magic 2^23"])
def test_the_check_can_fail(broken):
    """A wrong coefficient; rounding to nearest (the fraction falls in [-0.5, 0.5), outside the fit's
    interval); a magic constant where float32's step is 0.5, not 1. Each breaks even bf16's bound."""
    x = np.linspace(-20.0, 0.0, 20_001, dtype=f32)
    assert errors(x, ex2_accuracy.model(STEP, x))["max_rel_error"] < FIT_BOUND
    assert errors(x, ex2_accuracy.model(STEP, x, **broken))["max_rel_error"] > BF16_ROUNDING


def test_a_flushing_floor_add_would_change_only_denormal_inputs():
    """The step's floor add keeps denormals on both paths. Had one path used add.rm.ftz, it would
    differ from the other only where x itself is a denormal (and stay accurate there)."""
    x = np.concatenate([np.linspace(-3.0, 0.0, 30_001, dtype=f32), [-1e-45, -1e-40, -2.0 ** -126]]).astype(f32)
    kept = ex2_accuracy.model(STEP, x).view(np.uint32)
    flushed = ex2_model.ex2_fma_pipe(x, **ex2_accuracy.constants(STEP), ftz=True).view(np.uint32)
    assert set(x[kept != flushed]) == {f32(-1e-45), f32(-1e-40)}


def test_fingerprint_covers_the_emulation_and_nothing_else(tmp_path):
    text = STEP.path.read_text()
    elsewhere = tmp_path / "kernel_edited.py"
    elsewhere.write_text(text + "\n\ndef unrelated():\n    return TMEM_COLS\n")
    coefficient = tmp_path / "clamp_edited.py"
    coefficient.write_text(text + "\nEX2_CLAMP = -126.0\n")            # the last assignment is the one used
    now = ex2_accuracy.fingerprint(STEP)
    assert ex2_accuracy.fingerprint(dataclasses.replace(STEP, path=elsewhere)) == now
    assert ex2_accuracy.fingerprint(dataclasses.replace(STEP, path=coefficient))["emulation"] != now["emulation"]
    with pytest.raises(ValueError, match="no FMA-pipe exponential"):
        ex2_accuracy.fingerprint(resolve("b08"))


@pytest.mark.parametrize("arch, packed, present, absent", [
    ("sm_90a", False, {"FFMA": 6, "FADD.RM": 2, "FMNMX": 2}, ("FFMA2", "FADD2", "FADD2.RM")),
    ("sm_100a", True, {"FFMA2": 3, "FADD2.RM": 1, "FADD2": 2, "FMNMX": 2}, ("FFMA", "FADD", "FADD.RM")),
], ids=["sm_90a scalar", "sm_100a packed"])
def test_the_elementwise_kernel_is_all_fma_pipe(arch, packed, present, absent):
    """One pair per thread: per pair the Horner steps are 3 FFMA2 (packed) or 6 FFMA (scalar), the
    floor a round-down add (FADD2.RM / FADD.RM), and no MUFU.EX2 anywhere."""
    sass = ex2_accuracy.compile_sass(STEP, arch, packed)
    assert sass.target == arch
    assert {op: sass.opcodes.get(op, 0) for op in present} == present
    assert not [op for op in (*absent, "MUFU.EX2") if sass.opcodes.get(op)]


def test_the_sass_check_sees_a_hardware_exp2():
    """The same kernel around the SFU's exp2 instead: the check above would see MUFU.EX2."""
    import cutlass.cute as cute

    def hardware_pair(x, y, packed):
        return cute.math.exp2(x, fastmath=True), cute.math.exp2(y, fastmath=True)

    fake = SimpleNamespace(module=SimpleNamespace(ex2_emulated_pair=hardware_pair))
    assert ex2_accuracy.compile_sass(fake, "sm_90a", False).opcodes.get("MUFU.EX2") == 2


@pytest.mark.gpu
def test_measured_on_the_gpu_is_below_bf16_rounding_and_bit_identical_to_the_model(capability):
    if capability not in ex2_accuracy.PATHS:
        pytest.skip("no CUDA GPU here" if capability is None else
                    f"GPU is sm_{capability[0]}{capability[1]}; the emulation runs on sm_90 (scalar) or sm_100 (packed)")
    m = ex2_accuracy.measure(STEP.id)
    assert m["max_rel_error"] < FIT_BOUND, m
    assert m["model_mismatches"] == 0, m
