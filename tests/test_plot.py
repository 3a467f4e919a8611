"""``ladder plot``: the picture's data comes from results/*.json only (stale and unmeasured steps
absent, never zero; a new GPU's file adds its line), the committed picture was drawn from the data
the files hold now, and drawing is deterministic."""

import importlib.util
import json

import pytest

from harness.core import results
from harness.core.steps import resolve
from harness.report import plot

HAS_MPL = importlib.util.find_spec("matplotlib") is not None
needs_mpl = pytest.mark.skipif(not HAS_MPL, reason="matplotlib is not installed (the `plot` extra: pip install -e '.[plot]')")


def row(step_id, gpu, capability, fraction, fingerprint=None):
    prov = {"gpu": gpu, "capability": capability, "date": "2026-01-01T00:00:00Z", "command": "ladder table",
            "torch": "t", "cutlass_dsl": "4.8.1", "ptxas": "13.4", "flash_attn_4": "f", "driver": "d"}
    bench = [{"seqlen": s, "fraction": fraction, "step_tflops": 1.0, "fa4_tflops": 2.0} for s in (4096, 8192, 16384)]
    return {"provenance": prov, "numerics": [{"passed": True}], "bench": bench,
            "fingerprint": fingerprint or resolve(step_id).fingerprint}


STOCK = {"provenance": {"gpu": "NVIDIA H200", "capability": [9, 0], "date": "2026-01-01T00:00:00Z"},
         "bench": [{"seqlen": s, "fa4_tflops": 2.0, "cudnn_tflops": 1.0, "fa2_tflops": 0.5,
                    "cudnn_fraction": c, "fa2_fraction": 0.5} for s, c in ((4096, 0.8), (8192, 0.9), (16384, 1.0))]}


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    """A results dir of its own: H200 rows for 01 (current), h02 (stale), h04 (an enabler);
    h03 never measured; and the stock context."""
    folder = tmp_path / "results"
    monkeypatch.setattr(results, "RESULTS", folder)
    stale = {**resolve("h02").fingerprint, "step": "0" * 64}
    results.record(folder / "h200.json", {"01": row("01", "NVIDIA H200", [9, 0], 0.1),
                                          "h02": row("h02", "NVIDIA H200", [9, 0], 0.2, fingerprint=stale),
                                          "h04": row("h04", "NVIDIA H200", [9, 0], 0.4)}, stock=STOCK)
    return folder


def _line(data, gpu):
    return next(line for line in data["lines"] if line["gpu"] == gpu)


def test_the_committed_plot_was_drawn_from_the_recorded_results():
    """The data beside the committed picture equals what results/*.json give now; if not, run
    `ladder plot` (or `ladder writeups`) and commit writeups/img/."""
    assert plot.recorded() is not None, "writeups/img/ladder.json is missing: run `ladder plot`"
    assert plot.recorded() == plot.plot_data()


def test_stale_and_unmeasured_steps_are_absent_not_zero(recorded):
    data = plot.plot_data()
    hopper = _line(data, "NVIDIA H200")
    assert hopper["track"] == "hopper" and hopper["file"] == "results/h200.json"
    assert [p["step"] for p in hopper["points"]] == ["01", "h04"]      # h02 stale, h03 never measured
    assert [p["number"] for p in hopper["points"]] == [1, 4]
    assert hopper["points"][0]["hmean"] == pytest.approx(0.1) and hopper["points"][0]["range"] == pytest.approx([0.1, 0.1])
    assert all(p["hmean"] > 0 for p in hopper["points"])
    assert data["unmeasured"] == {"blackwell": "compiled, not yet run on a B200"}
    assert [a["ids"] for a in data["axis"]][:2] == [["01"], ["h02", "b02"]]


def test_enabler_flags_are_carried(recorded):
    points = {p["step"]: p for p in _line(plot.plot_data(), "NVIDIA H200")["points"]}
    assert points["h04"]["enabler"] is resolve("h04").info.enabler is True
    assert points["01"]["enabler"] is resolve("01").info.enabler is False


def test_stock_lines_are_the_hmean_over_seqlens(recorded):
    (stock,) = plot.plot_data()["stock"]
    assert stock["gpu"] == "NVIDIA H200" and stock["file"] == "results/h200.json"
    assert stock["cudnn"] == pytest.approx(3 / (1 / 0.8 + 1 / 0.9 + 1 / 1.0))
    assert stock["fa2"] == pytest.approx(0.5)


def test_an_h100_file_adds_a_second_hopper_line_and_a_b200_file_a_blackwell_line(recorded):
    results.record(recorded / "h100-80gb-hbm3.json", {"h02": row("h02", "NVIDIA H100 80GB HBM3", [9, 0], 0.3)})
    data = plot.plot_data()
    assert [(line["track"], line["gpu"]) for line in data["lines"]] == [
        ("hopper", "NVIDIA H100 80GB HBM3"), ("hopper", "NVIDIA H200")]
    assert [p["step"] for p in _line(data, "NVIDIA H100 80GB HBM3")["points"]] == ["h02"]
    assert len(data["stock"]) == 1                          # the H100 file has no stock context
    results.record(recorded / "b200.json", {"b02": row("b02", "NVIDIA B200", [10, 0], 0.5)})
    data = plot.plot_data()
    assert ("blackwell", "NVIDIA B200") in [(line["track"], line["gpu"]) for line in data["lines"]]
    assert data["unmeasured"] == {}


def test_the_data_is_plain_json(recorded):
    data = plot.plot_data()
    assert json.loads(json.dumps(data)) == data        # lists, not tuples; str keys: ladder.json compares equal


@needs_mpl
def test_drawing_twice_gives_identical_bytes(recorded, tmp_path):
    data = plot.plot_data()
    first = plot.draw(data, tmp_path / "a")
    second = plot.draw(data, tmp_path / "b")
    assert [p.name for p in first] == ["ladder.svg", "ladder.png", "ladder.json"]
    assert first[0].read_text().lstrip().startswith("<?xml") and "<svg" in first[0].read_text()
    assert first[1].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes(), f"{a.name} differs between two draws of the same data"
    assert json.loads(first[2].read_text()) == data
    assert first[2].read_text() == json.dumps(data, indent=1, sort_keys=True) + "\n"


@needs_mpl
def test_the_picture_changes_when_the_data_does(recorded, tmp_path):
    data = plot.plot_data()
    before = plot.draw(data, tmp_path / "a")[0].read_bytes()
    data["lines"][0]["points"][0]["hmean"] = 0.7
    assert plot.draw(data, tmp_path / "b")[0].read_bytes() != before


def test_stale_compares_data_not_bytes(recorded, tmp_path):
    out = tmp_path / "img"
    out.mkdir()
    assert plot.stale(out)                                   # never drawn
    (out / "ladder.json").write_text(json.dumps(plot.plot_data(), indent=1, sort_keys=True))
    assert not plot.stale(out)
    results.record(recorded / "h200.json", {"h03": row("h03", "NVIDIA H200", [9, 0], 0.3)})
    assert plot.stale(out)


@needs_mpl
def test_ladder_plot_writes_and_prints_the_paths(recorded, tmp_path, capsys):
    from harness import cli
    out = tmp_path / "img"
    assert cli.main(["plot", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for name in ("ladder.svg", "ladder.png", "ladder.json"):
        assert (out / name).exists() and name in printed
    assert not plot.stale(out)


def test_writeups_check_reports_a_stale_plot(monkeypatch, capsys):
    from harness import cli
    from harness.report import writeups
    monkeypatch.setattr(writeups, "stale", lambda: [])
    monkeypatch.setattr(plot, "plot_data", lambda: {"lines": [], "stock": [], "unmeasured": {}, "axis": []})
    assert cli.main(["writeups", "--check"]) == 1
    assert "stale plot" in capsys.readouterr().out
    monkeypatch.setattr(plot, "plot_data", plot.recorded)
    assert cli.main(["writeups", "--check"]) == 0


@needs_mpl
def test_writeups_redraws_the_plot_only_when_its_data_changed(recorded, tmp_path, monkeypatch, capsys):
    from harness import cli
    from harness.report import writeups
    monkeypatch.setattr(writeups, "documents", lambda: [])
    monkeypatch.setattr(plot, "IMG", tmp_path / "img")
    assert cli.main(["writeups"]) == 0
    assert "redrew" in capsys.readouterr().out and not plot.stale()
    assert (tmp_path / "img" / "ladder.png").exists()
    assert cli.main(["writeups"]) == 0
    assert "redrew" not in capsys.readouterr().out                 # same data: nothing redrawn
    results.record(recorded / "h200.json", {"h03": row("h03", "NVIDIA H200", [9, 0], 0.3)})
    assert cli.main(["writeups"]) == 0
    assert "redrew" in capsys.readouterr().out and not plot.stale()
