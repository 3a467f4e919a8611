"""``ladder selfcheck --guard``: ptxas's TMEM guardrails on the Blackwell steps, a short timeout,
and on a hang the barriers each role waits on.

On a CPU: every b-step compiles with guardrails (and the guarded build is another kernel, never
the one the SASS tables read); the command compiles and says nothing ran. The timeout path is
driven with a fake child result, so the hang report is checked without a hang."""

import collections

import pytest
from conftest import STEPS, step_id

from harness import cli
from harness.cli import common as cli_common
from harness.cli import measure as cli_measure
from harness.compiler.compile import compile_step
from harness.core.steps import resolve
from harness.gpu.isolate import ChildResult
from ladder import contract

BLACKWELL = [s for s in STEPS if s.track == "blackwell"]


@pytest.mark.slow
@pytest.mark.parametrize("step", BLACKWELL, ids=step_id)
def test_every_blackwell_step_compiles_with_tmem_guardrails(step):
    """Every b-step but those that declare why not (``no_tmem_guard``); for those, the declaration
    is checked: the guarded build really fails at register allocation, and the plain one does not."""
    if step.info.extra.get("no_tmem_guard"):
        _check_no_guarded_build(step)
        return
    plain, guarded = compile_step(step, "sm_100a"), compile_step(step, "sm_100a", guard=True)
    assert guarded.cubin.parent != plain.cubin.parent
    # The guardrails are calls to ptxas's checking routine around TMEM accesses: many more calls.
    calls = [collections.Counter(r.sass.opcodes)["CALL.REL.NOINC"] for r in (plain, guarded)]
    assert calls[1] > calls[0] + 10, calls


def _check_no_guarded_build(step):
    """A declared ``no_tmem_guard`` holds: the plain build compiles, the guarded one fails at register
    allocation."""
    compile_step(step, "sm_100a")
    with pytest.raises(Exception, match="Register allocation failed"):
        compile_step(step, "sm_100a", guard=True)


@pytest.mark.slow
def test_b10_one_s_load_has_no_guarded_build():
    """b10 reads its row of S in 16-column loads and builds with guardrails (the test above);
    exp:b10-one-s-load, the same row by one 32x32b.x128 load, declares no_tmem_guard, and its
    guarded build does fail at the 168 registers of a 320-thread CTA."""
    assert "no_tmem_guard" not in resolve("b10").info.extra
    step = resolve("exp:b10-one-s-load")
    assert step.info.extra["no_tmem_guard"]
    _check_no_guarded_build(step)


def test_guardrails_exist_on_sm_100a_only():
    with pytest.raises(ValueError, match="sm_100a only"):
        compile_step(resolve("h08"), "sm_90a", guard=True)


def test_the_guard_switch_is_off_unless_turned_on(monkeypatch):
    """Every compile goes through contract.compile_host; guard_every_compile adds the guard option
    for sm_100a only, once (cute.compile is replaced: nothing is compiled here)."""
    import cutlass.cute as cute

    from harness.compiler.compile import TMEM_GUARD, guard_every_compile
    seen = []
    monkeypatch.setattr(cute, "compile", lambda host, *args, options: seen.append(options))
    monkeypatch.setattr(contract, "compile_host", contract.compile_host)   # restored after the test
    contract.compile_host(lambda *a: None, "sm_100a", args=())
    guard_every_compile()
    guard_every_compile()
    contract.compile_host(lambda *a: None, "sm_100a", args=())
    contract.compile_host(lambda *a: None, "sm_90a", args=())
    assert seen == ["--gpu-arch sm_100a", f"--gpu-arch sm_100a {TMEM_GUARD}", "--gpu-arch sm_90a"]


def _run(capsys, *argv):
    code = cli.main(list(argv))
    return code, capsys.readouterr().out


@pytest.mark.skipif(cli_common.gpu()[0] is not None, reason="CPU-machine behaviour")
def test_selfcheck_guard_on_a_cpu_compiles_and_says_nothing_ran(capsys):
    code, out = _run(capsys, "selfcheck", "--guard", "--steps", "b02,h02")
    assert code == 2
    assert "b02: compiled for sm_100a with TMEM guardrails" in out and "not run" in out
    assert "h02" not in out.replace("b02,h02", "")        # no guardrails to compile for a Hopper step
    assert "nothing ran" in out


def test_a_hang_names_the_barriers_each_role_waits_on(capsys, monkeypatch):
    """A B200 run whose b08 times out: the report lists b08's waits and arrivals by role."""
    seen = {}

    def fake_measure(step, job, timeout, sanitizer=None):
        seen.update(job=job, timeout=timeout)
        return ChildResult("timeout", None, timeout, "")

    monkeypatch.setattr(cli_common, "gpu", lambda: ((10, 0), "NVIDIA B200 (fake)"))
    monkeypatch.setattr(cli_measure, "_measure", fake_measure)
    code, out = _run(capsys, "selfcheck", "--guard", "--steps", "b08")
    assert code == 1 and seen == {"job": "selfcheck-guard", "timeout": cli_measure.GUARD_TIMEOUT}
    assert "did not finish: a hang" in out
    for expected in ("kv_empty[0..1]", "load warp 9: wait", "mma warp 8: wait", "warps 0-7: arrive",
                     "p_full[0..1] (arrival count 128)"):
        assert expected in out


def test_a_step_without_a_guarded_build_runs_unguarded_in_selfcheck_guard(monkeypatch):
    """selfcheck --guard's child: exp:b10-one-s-load declares no_tmem_guard, so the guard switch stays
    off for it (and its payload says so); b08 turns it on. Nothing is compiled: both calls are replaced."""
    from harness.compiler import compile as compile_mod
    from harness.gpu import measure
    turned_on = []
    monkeypatch.setattr(compile_mod, "guard_every_compile", lambda: turned_on.append(True))
    monkeypatch.setattr(measure, "check_numerics", lambda step, cases: [])
    assert resolve("exp:b10-one-s-load").info.extra["no_tmem_guard"]
    assert measure.selfcheck_step("exp:b10-one-s-load", guard=True)["guard"] is False and turned_on == []
    assert measure.selfcheck_step("b08", guard=True)["guard"] is True and turned_on == [True]
