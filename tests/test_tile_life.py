"""The life-of-a-tile pictures (harness/report/tile_life.py): their data is the pipeline model's
simulation of the step (the committed picture is what it gives now; a change in what it gives makes
the picture stale), every role's work comes in an order the kernel's barriers allow, all the K/V
tiles of the short sequence are drawn, and the block links the picture from its page."""

import copy
import importlib.util
import json
import re

import pytest

from harness.core.paths import ROOT
from harness.core.steps import resolve
from harness.report import tile_life, writeups
from harness.report.tables import NOT_RUN_B200
from harness.timeline import simulate as timeline_sim

HAS_MPL = importlib.util.find_spec("matplotlib") is not None
N = tile_life.N_BLOCKS


@pytest.fixture(scope="module", params=tile_life.STEPS)
def life(request):
    step = resolve(request.param)
    return step, tile_life.life_data(step)


def _lane(data, prefix):
    found = [lane for lane in data["lanes"] if lane["name"].startswith(prefix)]
    assert found, (prefix, [lane["name"] for lane in data["lanes"]])
    return found


def _bars(lane, pattern):
    """{tile: (begin, end)} of the bars whose text is ``<pattern>(<tile>)``."""
    out = {}
    for _, _, text, b, e in lane["bars"]:
        m = re.fullmatch(rf"{pattern}\((\d+)\)", text)
        if m:
            assert int(m[1]) not in out, (pattern, text)
            out[int(m[1])] = (b, e)
    return out


def _copies(data, name):
    """{tile: (issue, land)} of the TMA copies of one tensor (K2: tile 2)."""
    tma = _lane(data, "TMA")[0]
    return {int(text[len(name):] or 0): (b, e) for _, kind, text, b, e in tma["bars"]
            if kind == "copy" and re.fullmatch(rf"{name}\d*", text)}


def test_committed_picture_is_the_models_data_now(life):
    step, data = life
    committed = json.loads(tile_life.paths(step.id)[2].read_text())
    assert tile_life.comparable(committed) == tile_life.comparable(data), "run `ladder writeups`"
    if committed["durations"] == data["durations"]:      # the same unit cycles: the same data, to the cycle
        assert committed == data
    assert json.loads(tile_life.dumps(data)) == data
    assert not tile_life.stale(step)


def test_a_change_in_the_models_output_makes_the_picture_stale(monkeypatch, tmp_path):
    step = resolve("h12")
    tile_life.paths(step.id, tmp_path)[2].write_text(tile_life.dumps(tile_life.life_data(step)))
    assert not tile_life.stale(step, tmp_path)
    real = timeline_sim.simulate

    def one_handoff_less(step, **kw):
        sim = real(step, **kw)
        wait = next(e for e in sim["events"] if e["kind"] == "wait" and e["warp"] == 4 and e["by"]
                    and e["by"]["kind"] == "copy")           # consumer warpgroup 1's first wait for a copy
        wait["by"] = None
        return sim
    monkeypatch.setattr(timeline_sim, "simulate", one_handoff_less)
    assert tile_life.stale(step, tmp_path)
    monkeypatch.setattr(timeline_sim, "simulate", real)
    monkeypatch.setattr(tile_life, "N_BLOCKS", N + 1)                  # another tile count
    assert tile_life.stale(step, tmp_path)
    monkeypatch.setattr(tile_life, "N_BLOCKS", N)
    assert not tile_life.stale(step, tmp_path)


def test_cycles_alone_do_not_make_it_stale():
    """ptxas's issue counts move the softmax's cycles between compiles of the same code: a picture
    whose every time moved, its structure unchanged, is current."""
    data = tile_life.life_data(resolve("b12"))
    moved = copy.deepcopy(data)
    moved["durations"]["softmax"] += 17
    for lane in moved["lanes"]:
        for bar in lane["bars"]:
            bar[3] += 7
            bar[4] += 7
    assert tile_life.comparable(moved) == tile_life.comparable(data)
    moved["lanes"][0]["bars"].reverse()
    assert tile_life.comparable(moved) != tile_life.comparable(data)


def test_every_kv_tile_of_the_sequence_is_drawn(life):
    step, data = life
    assert data["n_blocks"] == N
    for name in ("K", "V"):
        assert sorted(_copies(data, name)) == list(range(N)), name
    q = [text for _, kind, text, _, _ in _lane(data, "TMA")[0]["bars"] if text.startswith("Q")]
    assert len(q) == (2 if step.track == "blackwell" else 1)
    if step.track == "blackwell":
        tensor = _lane(data, "tensor pipe")[0]
        for g in range(2):
            assert sorted(_bars(tensor, f"S{g}")) == sorted(_bars(tensor, f"O{g}")) == list(range(N))
        for lane in _lane(data, "softmax warpgroup"):
            assert sorted(_bars(lane, "softmax")) == list(range(N))
    else:
        for lane in _lane(data, "consumer warpgroup"):
            assert sorted(_bars(lane, "S")) == sorted(_bars(lane, "PV")) == sorted(_bars(lane, "softmax")) \
                == list(range(N))


def test_hopper_roles_work_in_the_order_the_barriers_allow():
    data = tile_life.life_data(resolve("h12"))
    assert [lane["name"] for lane in data["lanes"]] == [
        "producer warp (warp 0)", "TMA copies (in flight)", "consumer warpgroup 1 (warps 4-7)",
        "consumer warpgroup 2 (warps 8-11)"]
    k, v = _copies(data, "K"), _copies(data, "V")
    q_land = _copies(data, "Q")[0][1]
    consumers = _lane(data, "consumer warpgroup")
    for lane in consumers:
        s, softmax, pv = _bars(lane, "S"), _bars(lane, "softmax"), _bars(lane, "PV")
        epilogue = [b for b in lane["bars"] if b[1] == "epilogue"]
        for j in range(N):
            assert s[j][0] >= max(k[j][1], q_land)        # S_j after Q and K_j landed
            assert softmax[j][0] >= s[j][1]               # its softmax once S_j is done
            assert pv[j][0] >= max(softmax[j][1], v[j][1])  # P_j V_j after the softmax made P_j, V_j landed
        assert len(epilogue) == 1 and epilogue[0][3] >= pv[N - 1][1]
    for j in range(2, N):                                 # a stage is refilled once both warpgroups read it
        assert k[j][0] >= max(_bars(lane, "S")[j - 2][1] for lane in consumers)
        assert v[j][0] >= max(_bars(lane, "PV")[j - 2][1] for lane in consumers)


def test_blackwell_roles_work_in_the_order_the_barriers_allow():
    data = tile_life.life_data(resolve("b12"))
    assert [lane["name"] for lane in data["lanes"]] == [
        "load warp (warp 13)", "TMA copies (in flight)", "MMA warp (warp 12)", "tensor pipe",
        "softmax warpgroup 0 (warps 0-3)", "softmax warpgroup 1 (warps 4-7)", "correction warpgroup (warps 8-11)"]
    k, v = _copies(data, "K"), _copies(data, "V")
    tensor = _lane(data, "tensor pipe")[0]
    for g, lane in enumerate(_lane(data, "softmax warpgroup")):
        s, o, softmax = _bars(tensor, f"S{g}"), _bars(tensor, f"O{g}"), _bars(lane, "softmax")
        for j in range(N):
            assert s[j][0] >= max(k[j][1], v[j][1])       # S_g(j) once K_j and V_j landed (one barrier)
            assert softmax[j][0] >= s[j][1]               # the softmax once S_g(j) is in TMEM
            assert o[j][0] >= softmax[j][1]               # P_g V(j) once P_g is written
        epilogue = [b for b in lane["bars"] if b[1] == "epilogue"]
        assert len(epilogue) == 1 and epilogue[0][3] >= o[N - 1][1]
    for j in range(2, N):                                 # the stage is refilled once its last P V is done
        assert k[j][0] >= _bars(tensor, "O1")[j - 2][1]


def test_every_handoff_comes_before_the_wait_it_releases(life):
    step, data = life
    kinds = {h[0] for h in data["handoffs"]}
    assert kinds == ({"copy", "arrive", "commit"} if step.track == "blackwell" else {"copy", "arrive"})
    for kind, lane0, row0, t0, lane1, row1, begin, end, bar in data["handoffs"]:
        assert t0 <= end and begin <= end, (kind, bar)
        assert [row1, "wait", bar, begin, end] in data["lanes"][lane1]["bars"]
        assert row0 < len(data["lanes"][lane0]["rows"])
    if step.track != "blackwell":          # the ping-pong turns and the ring's K, V barriers all hand over
        bars = {h[-1].split("[")[0] for h in data["handoffs"]}
        assert {"q_full", "k_full", "v_full", "k_empty", "v_empty", "pingpong 1", "pingpong 2"} <= bars


def test_the_simulation_logs_its_handoffs():
    sim = timeline_sim.simulate(resolve("b12"), n_blocks=N)
    copies = [e for e in sim["events"] if e["kind"] == "copy"]
    assert len(copies) == 2 + 2 * N                       # Q0, Q1, then K_j and V_j
    for e in copies:
        assert e["land"] >= e["issue"] + timeline_sim.bound.LOAD_LATENCY
    for e in sim["events"]:
        if e["kind"] == "commit":
            assert e["land"] >= e["issue"] + timeline_sim.MMA_LATENCY
        if e["kind"] == "wait" and e["by"]:
            assert e["by"]["time"] <= e["end"]
            if e["by"]["kind"] in ("copy", "commit"):
                assert sim["events"][e["by"]["event"]]["land"] == e["by"]["time"]


def test_the_block_links_the_picture_from_its_page(life):
    step, _ = life
    block = writeups.render(f"life {step.id}")
    link = re.search(r"\]\((\.\./img/life-\w+\.svg)\)", block)[1]
    page = ROOT / "writeups" / step.track
    assert (page / link).resolve() == tile_life.paths(step.id)[0]
    assert "Simulated, not measured" in block and f"{N} K/V tiles" in block
    assert (NOT_RUN_B200 in block) == (step.track == "blackwell")
    assert "simulated" in tile_life.label(step)
    with pytest.raises(ValueError, match="drawn for"):
        writeups.render("life h11")


def test_writeups_check_reports_a_stale_life_picture(monkeypatch, capsys, tmp_path):
    from harness import cli
    from harness.report import figure_draw, plot, timeline_draw
    monkeypatch.setattr(writeups, "stale", lambda: [])
    monkeypatch.setattr(plot, "stale", lambda *a: False)
    monkeypatch.setattr(timeline_draw, "drawable", lambda: [])
    monkeypatch.setattr(figure_draw, "names", lambda: [])
    assert cli.main(["writeups", "--check"]) == 0
    monkeypatch.setattr(tile_life, "IMG", tmp_path)                   # nothing drawn there
    assert cli.main(["writeups", "--check"]) == 1
    assert "stale life-of-a-tile picture" in capsys.readouterr().out


@pytest.mark.skipif(not HAS_MPL, reason="matplotlib is not installed (the `plot` extra)")
def test_drawing_is_deterministic(tmp_path):
    step = resolve("h12")
    first = [p.read_bytes() for p in tile_life.draw(step, tmp_path / "a")]
    second = [p.read_bytes() for p in tile_life.draw(step, tmp_path / "b")]
    assert first == second
    assert first[0].lstrip().startswith(b"<?xml") and b"<svg" in first[0]
    assert not tile_life.stale(step, tmp_path / "a")
