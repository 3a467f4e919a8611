"""The explanatory figures (harness/report/figure_*.py, ``figure <name>`` blocks): their data is read
from the steps' own layouts and states documented facts (the PTX ISA's wgmma accumulator fragment,
the 128B swizzle's XOR, TMEM's warp-to-lane rule, the 2-CTA MMA's operand split), and the committed
pictures were drawn from the data the steps give now."""

import importlib.util
import json
from pathlib import Path

import pytest

from harness.core.paths import ROOT
from harness.core.steps import resolve
from harness.report import figure_data, figure_draw, writeups

needs_mpl = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                               reason="matplotlib is not installed (the `plot` extra: pip install -e '.[plot]')")


@pytest.mark.parametrize("name", figure_draw.names())
def test_the_committed_picture_was_drawn_from_the_steps_as_they_are(name):
    """If not, `ladder writeups` redraws it: commit writeups/img/fig-<name>.*"""
    svg, png, _ = figure_draw.paths(name)
    assert figure_draw.recorded(name) == figure_data.figure_data(name), f"stale: run `ladder writeups` ({name})"
    assert svg.exists() and png.exists()


def test_wgmma_owners_follow_the_ptx_isa_fragment_of_d():
    """PTX ISA, wgmma .m64nNk16 register fragment of the accumulator D: in warp w of the
    warpgroup, lane l's register d(4k + 2i + j) holds row 16w + l/4 + 8i, column 8k + 2(l%4) + j."""
    owners = figure_data.wgmma_owners()
    m, n = owners["tile"]
    assert (m, n) == (resolve("h02").module.TILE_M, resolve("h02").module.TILE_N) == (64, 128)
    seen = 0
    for t in range(owners["threads"]):
        w, lane = divmod(t, 32)
        for r in range(n // 2):
            k, i, j = r // 4, r // 2 % 2, r % 2
            assert owners["owner"][16 * w + lane // 4 + 8 * i][8 * k + 2 * (lane % 4) + j] == [t, r]
            seen += 1
    assert seen == m * n                     # every element checked: each held once


def test_the_drawn_fragment_is_the_corner_of_the_full_one():
    data, owners = figure_data.figure_data("wgmma-fragment"), figure_data.wgmma_owners()
    assert data["owner"] == [row[:figure_data.WGMMA_COLS] for row in owners["owner"]]
    assert data["registers"] == 64 and data["step"] == "h02"


def test_the_swizzle_moves_chunk_c_of_row_r_to_slot_c_xor_r():
    data = figure_data.figure_data("swizzle")
    assert set(data["layouts"]) == {"h03 sQ", "h03 sK", "b03 sQ", "b03 sK"}
    assert all(text.startswith("S<3,4,3> o ") for text in data["layouts"].values())
    assert data["before"] == [list(range(8))] * 8                          # plain 128-byte rows
    assert data["after"] == [[c ^ r for c in range(8)] for r in range(8)]
    assert sorted(row[0] for row in data["after"]) == list(range(8))       # a column: 8 bank groups


def test_the_swizzle_data_is_read_from_the_step(monkeypatch):
    """Give h03 h02's unswizzled layouts: the figure's data follows (untraced: the cache is keyed
    on the step file, which did not change)."""
    swizzled = figure_data.figure_data("swizzle")["after"]
    monkeypatch.setattr(figure_data, "_traced", lambda kind, step_ids, compute: compute())
    monkeypatch.setattr(resolve("h03").module, "make_smem_layouts", resolve("h02").module.make_smem_layouts)
    changed = figure_data.swizzle_chunks(("h03",))
    assert changed["swizzle"] == [0, 4, 3] and changed["after"] == changed["before"] != swizzled
    with pytest.raises(ValueError, match="differ"):           # h03's grid no longer b03's
        figure_data.swizzle_chunks()


@pytest.mark.parametrize("name", ["tmem-b05", "tmem-b06"])
def test_tmem_regions_are_disjoint_and_each_warp_reads_its_lane_quarter(name):
    data = figure_data.figure_data(name)
    step = resolve(data["step"])
    assert data["columns"] == step.info.tmem_cols == 512 and data["lanes"] == 128
    columns = [c for start, width in data["regions"].values() for c in range(start, start + width)]
    assert len(columns) == len(set(columns)) and min(columns) >= 0 and max(columns) < data["columns"]
    for inside, start, width in data["aliases"].values():
        host, host_width = data["regions"][inside]
        assert host <= start and start + width <= host + host_width
    assert [w["warp"] for w in data["warps"]] == list(range(step.module.NUM_WARPS))
    for w in data["warps"]:
        assert w["lanes"] == [32 * (w["warp"] % 4), 32 * (w["warp"] % 4) + 32] and w["q_tile"] == w["warp"] // 4
        assert {f"S{w['q_tile']}", f"O{w['q_tile']}"} <= set(data["regions"])


def test_a_changed_tmem_map_makes_its_picture_stale(monkeypatch):
    extra = resolve("b05").info.extra
    monkeypatch.setitem(extra, "tmem_map", {**extra["tmem_map"], "O1": (448, 64)})
    assert figure_draw.stale("tmem-b05") and not figure_draw.stale("tmem-b06")


def test_each_cta_of_the_pair_holds_its_rows_and_half_of_k_and_v():
    data = figure_data.figure_data("two-cta")
    module = resolve("b13").module
    assert data["ctas"] == module.CLUSTER_CTAS == 2 and data["mma_m"] == module.MMA_M == 256
    ops = {op["name"]: op for op in data["operands"]}
    for name in ("Q", "S", "P", "O"):                          # A and accumulators: 128 rows each
        assert ops[name]["parts"] == [[0, 128, 0, 128], [128, 256, 0, 128]], name
    assert ops["K"]["parts"] == [[0, 64, 0, 128], [64, 128, 0, 128]]         # keys split
    assert ops["V"]["parts"] == [[0, 128, 0, 64], [0, 128, 64, 128]]         # head dims split
    for op in ops.values():                                    # the parts tile the operand
        cells = [(r, c) for r0, r1, c0, c1 in op["parts"] for r in range(r0, r1) for c in range(c0, c1)]
        assert len(cells) == len(set(cells)) == op["shape"][0] * op["shape"][1]


def test_every_figure_block_links_a_picture_beside_its_page(tmp_path):
    assert figure_draw.names(), "no figures registered"
    for name in figure_draw.names():
        block = writeups.render(f"figure {name}")
        link = block.split("](", 1)[1].split(")", 1)[0]
        for page_dir in (ROOT / "writeups" / "hopper", ROOT / "writeups" / "blackwell"):
            assert (page_dir / link).resolve() == figure_draw.paths(name)[0]
        assert "Read from" in block
    used = [(page, spec) for page in writeups.documents() if page.exists()
            for _, spec, _, _ in writeups.BLOCK.findall(page.read_text()) if spec.startswith("figure ")]
    assert used, "no page uses a figure block"
    for page, spec in used:
        link = writeups.render(spec).split("](", 1)[1].split(")", 1)[0]
        assert (page.parent / link).exists(), f"{page.relative_to(ROOT)}: {spec} links {link}, not there"


@needs_mpl
def test_drawing_twice_gives_identical_bytes(tmp_path):
    first, second = figure_draw.draw("tmem-b06", tmp_path / "a"), figure_draw.draw("tmem-b06", tmp_path / "b")
    assert [p.name for p in first] == ["fig-tmem-b06.svg", "fig-tmem-b06.png", "fig-tmem-b06.json"]
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes(), f"{a.name} differs between two draws of the same data"
    assert json.loads(first[2].read_text()) == figure_data.figure_data("tmem-b06")
    assert not figure_draw.stale("tmem-b06", tmp_path / "a")


@pytest.fixture
def only_figures(monkeypatch):
    """`ladder writeups` with no page, plot or other picture to look at (none redrawn for real): only
    the figures."""
    from harness.cli import docs
    from harness.report import plot
    monkeypatch.setattr(writeups, "documents", lambda: [])
    monkeypatch.setattr(writeups, "stale", lambda: [])
    monkeypatch.setattr(plot, "stale", lambda out_dir=None: False)
    for module in vars(docs).values():          # the timelines, the life-of-a-tile pictures
        if module is not figure_draw and hasattr(module, "drawable"):
            monkeypatch.setattr(module, "drawable", lambda: [])


def test_writeups_check_reports_a_stale_figure(only_figures, monkeypatch, capsys):
    from harness import cli
    recorded = figure_draw.recorded
    monkeypatch.setattr(figure_draw, "recorded", lambda name, out_dir=None: None if name == "swizzle" else recorded(name))
    assert cli.main(["writeups", "--check"]) == 1
    assert "stale figure writeups/img/fig-swizzle.svg" in capsys.readouterr().out
    monkeypatch.setattr(figure_draw, "recorded", recorded)
    assert cli.main(["writeups", "--check"]) == 0


@needs_mpl
def test_writeups_redraws_only_the_stale_figures(only_figures, monkeypatch, tmp_path, capsys):
    from harness import cli
    monkeypatch.setattr(figure_draw, "IMG", tmp_path)
    monkeypatch.setattr(figure_draw, "names", lambda: ["tmem-b05", "two-cta"])
    assert cli.main(["writeups"]) == 0
    assert capsys.readouterr().out.count("redrew") == 6
    assert sorted(p.name for p in Path(tmp_path).iterdir())[:3] == ["fig-tmem-b05.json", "fig-tmem-b05.png",
                                                                    "fig-tmem-b05.svg"]
    assert cli.main(["writeups"]) == 0
    assert "redrew" not in capsys.readouterr().out
