"""Timelines: the markers in the kernels, the instrumented copies (compiled on the CPU for both
archs), the reduction of raw probes, the simulation (its pipe, its ordering, its agreement with
the protocol), the pictures and blocks drawn from them, and the H200 rate re-derived from the
recording. The GPU run itself is in test_gpu_timeline below (skips without a GPU of the arch)."""

import json
import statistics

import pytest
from conftest import STEPS, require_gpu_for, step_id

from harness import cli
from harness.core import markers, results
from harness.core.steps import code_sha256, resolve
from harness.gpu import timeline_run
from harness.model import mma_pipe, protocol_source, units
from harness.model.pipeline_model import ProtocolError
from harness.report import tables, timeline_draw, writeups
from harness.timeline import probes, records
from harness.timeline import simulate as timeline_sim

MARKED = [s for s in STEPS if markers.markers(s.path.read_text())]
MARKED_IDS = {"h07", "h08", "h09", "h10", "h11", "b07", "b08", "b09", "b10", "b11"}


def _names(step):
    return probes.phase_names(step.module, step.path.read_text())


def test_the_steps_whose_overlap_is_the_lesson_carry_markers():
    assert MARKED_IDS <= {s.id for s in MARKED}
    assert "turn wait" in _names(resolve("h09")) and "turn wait" not in _names(resolve("h08"))
    assert {"S0", "S1", "O0", "O1", "P0 wait", "P1 wait", "softmax", "slot wait"} <= set(_names(resolve("b09")))


@pytest.mark.parametrize("step", MARKED, ids=step_id)
def test_markers_pair_up_and_are_comments_only(step):
    source = step.path.read_text()
    probes.check_markers(step.module, source)
    assert code_sha256(markers.without_markers(source)) == step.code_sha256          # recorded rows never go stale for a marker
    assert code_sha256(probes.instrumented_source(step.module, source)) != step.code_sha256


def test_broken_markers_are_refused():
    step = resolve("h08")
    source = step.path.read_text()
    with pytest.raises(ValueError, match="want begin, end pairs"):
        probes.check_markers(step.module, source.replace("# timeline: softmax end", "# nothing", 1))
    with pytest.raises(ValueError, match="not in the same block"):
        probes.check_markers(step.module, source.replace("# timeline: softmax end", "    # timeline: softmax end", 1))
    with pytest.raises(ValueError, match="no `# timeline"):
        probes.check_markers(step.module, "x = 1\n")


@pytest.mark.parametrize("step_name,arch", [("h08", "sm_90a"), ("h09", "sm_90a"), ("b09", "sm_100a")])
def test_instrumented_copy_compiles_and_reads_the_clock(step_name, arch):
    from harness.compiler.compile import compile_step
    step = resolve(step_name)
    sass = probes.compile_sass(step, arch)
    clock_reads = sass.text.count("SR_CLOCKLO")
    assert clock_reads >= len(markers.markers(step.path.read_text())) // 2
    assert "SR_CLOCKLO" not in compile_step(step, arch).sass.text       # the measured step has no probe
    if arch == "sm_90a":
        # a probe after wait_group(0) reads the clock after the wgmma wait, not before it
        lines = sass.text.splitlines()
        depbar = [i for i, line in enumerate(lines) if "WARPGROUP.DEPBAR" in line]
        assert any("SR_CLOCKLO" in "".join(lines[i + 1:i + 4]) for i in depbar)


def test_reduce_keeps_one_warp_per_role_and_refuses_half_phases():
    module = resolve("h08").module
    names = ["slot wait", "K/V wait"]
    raw = [[[[0, 0], [0, 0]] for _ in range(3)] for _ in range(12)]
    for j in range(3):
        raw[0][j][0] = [100 + 10 * j, 105 + 10 * j]
        for w in (4, 5):
            raw[w][j][1] = [200 + 10 * j, 203 + 10 * j]
    out = records.reduce(module, names, raw)
    assert [(w["warp"], w["role"]) for w in out["warps"]] == [(0, "producer warpgroup 0"), (4, "warpgroup 1")]
    assert out["warps"][0]["intervals"][0] == [0, 0, 0, 5]
    raw[4][1][1] = [250, 0]
    with pytest.raises(ValueError, match="not both"):
        records.reduce(module, names, raw)


def test_shared_tensor_pipe_splits_its_rate_and_the_ordered_one_queues():
    shared = timeline_sim._TensorPipe(shared=True)
    shared.add("a", 512, 0.0)
    shared.add("b", 512, 0.0)
    assert shared.next_completion() == 1024
    assert set(shared.advance(1024)) == {"a", "b"} and shared.done == {"a": 1024, "b": 1024}
    ordered = timeline_sim._TensorPipe(shared=False)
    ordered.add((8, 0, 0), 512, 0.0)
    ordered.add((8, 1, 0), 512, 100.0)
    assert ordered.done == {(8, 0, 0): 512, (8, 1, 0): 1024} and ordered.drained(0) == 1024


def _by_phase(lane, record, name):
    return {iv[0]: iv for iv in lane["intervals"] if record["phases"][iv[1]] == name}


def test_simulation_respects_the_protocol_on_hopper():
    step = resolve("h08")
    sim = timeline_sim.simulate(step)
    producer, consumer = sim["warps"][0], sim["warps"][1]
    issued, landed = _by_phase(producer, sim, "slot wait"), _by_phase(consumer, sim, "K/V wait")
    qk = _by_phase(consumer, sim, "QK^T")
    assert len(issued) == len(landed) == len(qk) == records.KEPT_TILES
    for j in range(2, records.KEPT_TILES):
        # a tile is waited for at least the load latency after the producer issued it
        assert landed[j][3] >= issued[j][3] + timeline_sim.bound.LOAD_LATENCY
    gemm = timeline_sim.durations(step, "h200")["gemm"]
    assert all(iv[3] - iv[2] >= gemm for iv in qk.values())


def test_simulated_tensor_pipe_follows_the_mma_warps_issue_order():
    for name in ("b08", "b09"):
        step = resolve(name)
        sim = timeline_sim.simulate(step)
        order = " ".join(sim["phases"][p] for _, p, _, _ in sim["tensor"])
        # the loop's order, as the MMA-pipe model reads it from the PTX (harness/model/mma_pipe.py)
        loop = mma_pipe.issue_order(step).split("loop: ")[1].split(" |")[0]
        assert f"{loop} {loop} {loop}" in order, (name, loop, order)


def test_a_broken_protocol_deadlocks_the_simulation():
    step = resolve("h08")
    source = probes.instrumented_source(step.module, step.path.read_text())
    broken = source.replace("cute.arch.mbarrier_arrive(kv_empty + stage)", "pass", 1)
    proto = protocol_source.extract(step.module, 4, source=broken)
    with pytest.raises(ProtocolError, match="deadlocked"):
        timeline_sim._run(proto, _names(step), timeline_sim.durations(step, "h200"), waits_for_gemm=True)


def _h07_record():
    entry = results.latest_for("h07", section="timelines").get("h200")
    if not entry or probes.stale_reason(resolve("h07"), entry):
        pytest.skip("no current H200 timeline of h07 recorded")
    return entry


def test_h200_load_rate_is_the_one_h07s_timeline_shows():
    rec = _h07_record()
    producer, consumer = rec["warps"][0], rec["warps"][1]
    issued, landed = _by_phase(producer, rec, "slot wait"), _by_phase(consumer, rec, "K/V wait")
    waited = statistics.median(landed[j][3] - issued[j][3] for j in range(2, records.KEPT_TILES))
    transfer = waited - timeline_sim.bound.HANDOFF - timeline_sim.bound.LOAD_LATENCY
    derived = 2 * timeline_sim.COPY_BYTES / transfer
    assert units.gpu("h200").l2.value == pytest.approx(derived, rel=0.15)


def test_recorded_timelines_are_whole_and_passed_numerics():
    recorded = [rec for data in results.all_recorded().values() for rec in data.get("timelines", {}).values()]
    assert recorded, "no timeline recorded in results/*.json (a Hopper step's picture is drawn only from one)"
    for data in results.all_recorded().values():
        for step_name, rec in data.get("timelines", {}).items():
            assert rec["numerics_passed"], step_name
            assert {"gpu", "date", "command", "cutlass_dsl"} <= set(rec["provenance"])
            assert rec["warps"], step_name
            for lane in rec["warps"]:
                tiles = {iv[0] for iv in lane["intervals"]}
                assert tiles == set(range(records.KEPT_TILES)) or len(tiles) >= records.KEPT_TILES - 1, step_name
                assert all(iv[3] >= iv[2] >= 0 for iv in lane["intervals"])


def test_picture_is_drawn_and_then_current(tmp_path):
    step = resolve("b09")
    record, label = timeline_draw.source_for(step)
    assert record["simulated"] and label == timeline_draw.SIMULATED
    svg, png, data = timeline_draw.draw(step, record, label, tmp_path)
    assert svg.stat().st_size > 0 and png.stat().st_size > 0
    drawn = json.loads(data.read_text())
    assert drawn["simulated"] and drawn["lanes"][-1]["name"] == "tensor pipe (simulated)"
    assert not timeline_draw.stale(step, tmp_path)
    (tmp_path / "timeline-b09.json").write_text(json.dumps({**drawn, "phases": []}))
    assert timeline_draw.stale(step, tmp_path)


def test_hopper_step_without_a_recording_says_how_to_measure(monkeypatch):
    monkeypatch.setattr(results, "all_recorded", lambda: {})
    with pytest.raises(ValueError, match="--measure --record"):
        timeline_draw.source_for(resolve("h08"))


def test_cli_measure_without_a_gpu_measures_nothing(capability):
    if capability == (9, 0):
        pytest.skip("an H200 is here: --measure would run")
    assert cli.main(["timeline", "h08", "--measure"]) == 2


def test_timeline_blocks_render():
    b10 = writeups.render("timeline b10")
    assert "(simulated)" in b10 and tables.NOT_RUN_B200 in b10 and "timeline-b10.svg" in b10
    check = writeups.render("timeline-check hopper")
    assert check.startswith("No measured timeline") or "(simulated)" in check


@pytest.mark.gpu
@pytest.mark.parametrize("step", [s for s in MARKED if s.track == "hopper"][:1], ids=step_id)
def test_gpu_timeline(step, capability):
    require_gpu_for(step, capability)
    rec = timeline_run.measure(step.id)
    assert rec["numerics_passed"] and rec["phases"] == _names(step)
    assert len(rec["warps"]) == 3 and records.period(rec) > 0
