"""The bound model (harness/model/bound.py): every step of both tracks and FA4 go through it on the CPU;
its arithmetic on synthetic demands; the model facts stay out of the code hash; the generated check
against the H200 measurements."""

import pytest
from conftest import STEPS, step_id

from harness import cli
from harness.core.steps import code_sha256, resolve
from harness.model import bound, units
from harness.report import writeups

MODELLED = [s for s in STEPS if s.info.extra.get("bound")]


def test_every_step_of_both_tracks_declares_its_overlap_structure():
    assert {s.id for s in MODELLED} == {s.id for s in STEPS}
    for s in STEPS:
        decl = s.info.extra["bound"]
        assert decl["overlap"] in bound.STRUCTURES and decl["loads"] in ("exposed", "hidden"), s.id


@pytest.mark.parametrize("step", MODELLED, ids=step_id)
def test_bound_of_every_step_on_its_gpu(step):
    gpu = "b200" if step.track == "blackwell" else "h200"
    b = bound.bound(step, gpu)
    assert set(b.units) == {"tensor", "mufu", "issue", "smem", "l2"} and all(v >= 0 for v in b.units.values())
    assert b.cycles >= max(b.units.values()) and b.cycles >= b.chain / b.ctas_per_sm - 1e-9
    assert b.units["tensor"] == pytest.approx(b.flop / units.gpu(gpu).tensor.value)
    assert 0.0 < bound.fraction_of(b, bound.fa4_bound(gpu)) < 1.5


@pytest.mark.parametrize("gpu", ["h200", "b200"])
def test_fa4_goes_through_the_same_model(gpu):
    ref = bound.fa4_bound(gpu)
    assert ref.structure == bound.FA4_STRUCTURE[units.gpu(gpu).arch]
    # FA4 keeps the tensor cores close to busy: its time per tile is within 20% of the tensor floor
    assert ref.units["tensor"] <= ref.cycles <= 1.2 * ref.units["tensor"]


def _facts(groups=1, per_warp=1000, mufu=64, r=1):
    return {"flop": 4 * 128 * 128 * 128, "softmax_threads": 128 * groups, "instructions_per_warp": per_warp,
            "mufu_per_warp": mufu, "registers": 128, "ctas_per_sm": r, "groups": groups, "mufu_rate": 16}


def _units(tensor=1024, **over):
    return {"tensor": tensor, "mufu": 0, "issue": 0, "smem": 0, "l2": 0, **over}


def test_serial_adds_tensor_softmax_and_the_exposed_load():
    b = bound.combine("x", "h200", "serial", "exposed", _units(l2=500), _facts(per_warp=1000))
    softmax = 1000 / bound.IPC_ONE_WARP
    assert b.chain == pytest.approx(1024 + softmax + bound.LOAD_LATENCY + 500)
    assert b.binding == "chain: tensor + softmax + exposed load"
    hidden = bound.combine("x", "h200", "serial", "hidden", _units(l2=500), _facts(per_warp=1000))
    assert hidden.chain == pytest.approx(1024 + softmax)


def test_two_resident_ctas_share_the_units_and_overlap_their_chains():
    one = bound.combine("x", "h200", "serial", "hidden", _units(), _facts(r=1))
    two = bound.combine("x", "h200", "serial", "hidden", _units(), _facts(r=2))
    assert two.cycles == pytest.approx(max(one.chain / 2, 1024))
    busy = bound.combine("x", "h200", "serial", "hidden", _units(smem=99_999), _facts(r=2))
    assert busy.cycles == 99_999 and busy.binding == "smem"


def test_a_lone_softmax_warp_is_slower_than_two_per_scheduler():
    lock = bound.combine("x", "h200", "lockstep", "hidden", _units(2048), _facts(groups=2, per_warp=1000))
    assert lock.chain_terms["softmax (both groups)"] == pytest.approx(2 * 1000)      # two warps: full rate
    ping = bound.combine("x", "h200", "pingpong", "hidden", _units(2048), _facts(groups=2, per_warp=1000))
    assert ping.chain == pytest.approx(max(2048, 1024 + 1000 / bound.IPC_ONE_WARP + 2 * bound.HANDOFF))


def test_overlapped_hides_the_softmax_under_the_groups_own_gemms():
    short = bound.combine("x", "h200", "overlapped", "hidden", _units(2048), _facts(groups=2, per_warp=300))
    assert short.chain == 2048 and short.binding == "tensor"      # the chain is the tensor floor itself
    with pytest.raises(ValueError, match="unknown overlap structure"):
        bound.combine("x", "h200", "overlapping", "hidden", _units(), _facts())


def test_resident_ctas_follow_smem_threads_and_registers():
    h200 = units.gpu("h200")
    assert bound.ctas_per_sm(128, 96 * 1024, 168, h200) == 2          # smem: 2 x 97 KB
    assert bound.ctas_per_sm(384, 160 * 1024, 168, h200) == 1
    assert bound.ctas_per_sm(128, 16 * 1024, 255, h200) == 2          # registers: 256 x 128 x 2 = 64K


def test_spearman():
    assert bound.spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert bound.spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    assert bound.spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)


def test_the_model_facts_are_not_part_of_the_code_hash():
    """Declaring or editing INFO.extra["bound"] does not make a step's recorded results stale."""
    bare = 'INFO = contract.StepInfo(id="x")\n'
    declared = 'INFO = contract.StepInfo(id="x", extra={"bound": {"overlap": "serial"}})\n'
    kept = 'INFO = contract.StepInfo(id="x", extra={"k": 1, "bound": {"overlap": "pingpong"}})\n'
    assert code_sha256(bare) == code_sha256(declared)
    assert code_sha256(kept) == code_sha256('INFO = contract.StepInfo(id="x", extra={"k": 1})\n')
    assert code_sha256(kept) != code_sha256('INFO = contract.StepInfo(id="x", extra={"k": 2})\n')


def test_ladder_bound_runs_on_the_cpu(capsys):
    code = cli.main(["bound", "h10"])
    out = capsys.readouterr().out
    assert code == 0 and "predicted fraction of FA4 (model, not a measurement)" in out and "pingpong" in out
    assert cli.main(["bound", "b11", "--gpu", "b200"]) == 0


def test_the_check_block_compares_every_measured_hopper_step():
    """Each Hopper step with an H200 row is in the check if that row measured today's code, and is
    named as left out if its code changed since: the model reads today's SASS."""
    from harness.core import results
    from harness.core.steps import track_steps
    text = writeups.render("bound hopper")
    shown = {line.split("|")[1].strip() for line in text.splitlines() if line.startswith(("| h", "| 01"))}
    assert all("(model)" in line for line in text.splitlines() if line.startswith(("| h", "| 01")))
    rows = next(d["rows"] for d in results.all_recorded().values() if "H200" in next(iter(d["rows"].values()))["provenance"]["gpu"])
    steps = [s for s in track_steps("hopper") if s.id in rows]
    current = {s.id for s in steps if not results.is_stale(s, rows[s.id])}
    assert steps and shown == current
    if current:     # with no current row (every step changed since it was measured) there is nothing to correlate
        assert "Spearman rank correlation" in text and "median relative error" in text
    note = text.split("Model check:", 1)[1]
    assert all(s.id in note for s in steps if s.id not in current)


def test_the_blackwell_table_carries_the_model_column_labelled_as_such():
    text = writeups.render("table blackwell")
    assert "model: predicted fraction of FA4 (binds)" in text and "not a measurement" in text
    row = next(line for line in text.splitlines() if line.startswith("| [b10]"))
    assert "(model; " in row and "compiled, not yet run on a B200" in row


def test_model_numbers_are_volatile_for_the_staleness_check():
    a = "| h10    | 0.897 | 0.89 (model) | chain: x | 69% | 34% |\nModel check: ... 0.95 (model), ... binds on: tensor."
    b = "| h10    | 0.897 | 0.91 (model) | chain: y | 69% | 34% |\nModel check: ... 0.96 (model), ... binds on: chain."
    assert writeups.settled(a) == writeups.settled(b)
    assert resolve("h10").info.extra["bound"]["overlap"] == "pingpong"
