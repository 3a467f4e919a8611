"""Generated figure blocks: ``figure <name>`` links writeups/img/fig-<name>.svg (drawn by
harness/report/figure_draw.py from the step's own layouts, harness/report/figure_data.py) and says
in a caption what the data was read from and what rule the picture shows. The link is relative to
a page in writeups/hopper/ or writeups/blackwell/, where the figures are used (as timeline blocks)."""

from __future__ import annotations

from harness.report import figure_draw
from harness.report.figure_data import SWIZZLE_ROWS, figure_data, split_axes


def _wgmma(d: dict) -> tuple[str, str]:
    m, n = d["tile"]
    return (f"{d['step']}: which thread and register holds each element of S = Q K^T",
            f"Read from {d['step']}'s own S tiled MMA (`make_tiled_mmas`: one wgmma m{m}n{n}k16 atom for the "
            f"warpgroup's {d['threads']} threads), evaluated on the CPU: `tiled_mma.get_slice(t).partition_C` of a "
            f"({m}, {n}) coordinate tensor lists the elements of thread t's {d['registers']} fp32 accumulator registers, "
            f"in register order; the first {len(d['owner'][0])} columns are drawn. Warp w owns rows 16w..16w+15; its "
            "lane l holds rows 16w + l/4 and 16w + l/4 + 8, columns 2(l%4) and 2(l%4)+1 of every 8 (register "
            "d(4k + 2i + j) is S[16w + l/4 + 8i, 8k + 2(l%4) + j]), so a row of S is spread over the 4 threads of a "
            "quad: why the row max and sum end with two butterfly shuffles (`_quad_allreduce`).")


def _wavefronts(slots: list[int]) -> str:
    """What 8 threads reading 16 bytes each at these slots cost: the busiest bank group's reads."""
    n = max(slots.count(x) for x in slots)
    return f"{len(set(slots))} bank group{'s' * (len(set(slots)) > 1)}, {n} wavefront{'s' * (n > 1)}"


def _swizzle(d: dict) -> tuple[str, str]:
    b, m, s = d["swizzle"]
    sources = list(dict.fromkeys(source.split()[0] for source in d["layouts"]))
    layout = d["layouts"][f"{sources[0]} sK"]
    before, after = ([row[0] for row in d[key]] for key in ("before", "after"))
    rows_spread = all(len(set(row)) == len(row) for row in d["after"])
    return (f"16-byte chunks of {SWIZZLE_ROWS} smem rows without and with the 128-byte swizzle",
            f"Read from the Q and K smem layouts that {' and '.join(sources)} build (`make_smem_layouts`, e.g. "
            f"`{layout}`): the outer layout gives each {d['chunk_bytes']}-byte chunk's address, and the swizzle, which "
            f"the kernel attaches to the smem pointer, XORs byte-address bits {m}-{m + b - 1} (the chunk) with bits "
            f"{m + s}-{m + s + b - 1} (the row within 8): chunk c of row r lands in slot c ^ (r % 8). Left, the same "
            "layout with the swizzle dropped (plain row-major 128-byte rows, not h02's INTERLEAVE layout): "
            f"{SWIZZLE_ROWS} threads reading chunk 0 of {SWIZZLE_ROWS} rows hit {_wavefronts(before)}. Right: "
            f"{_wavefronts(after)}" + ("; and each row's chunks stay on 8 bank groups, so a quarter-warp storing one "
                                       f"row's 128 bytes (the Q/K/V copies of {' and '.join(sources)}) costs 1 wavefront "
                                       "too." if rows_spread
                                       else "."))


def _tmem(d: dict) -> tuple[str, str]:
    over = [f"columns {start}-{start + width - 1} of {inside}" for inside, start, width in d["aliases"].values()]
    aliases = (f" {' and '.join(d['aliases'])} (bf16 P, two per 32-bit column) lie over {' and '.join(over)}: the "
               "softmax writes them there and the P V MMA reads them as its A operand." if over else "")
    source = 'INFO.extra["tmem_map"]' + (' and ["tmem_aliases"]' if d["aliases"] else "")
    return (f"{d['step']}: its TMEM, {d['lanes']} lanes x {d['columns']} columns",
            f"Read from {d['step']}'s {source} (the regions, held to the kernel's column offsets by "
            "tests/test_blackwell_steps.py) and its own TMEM load (`make_row_copies`, tcgen05.ld 32x32b) sliced per "
            "warp (the lanes). Lane i is row i of a Q tile. Warp w reaches only lanes 32(w%4)..32(w%4)+31, so warps w and "
            "w+4 share lanes and split the columns: S_g and O_g belong to Q tile g and are read by warpgroup g "
            f"(warps 4g..4g+3).{aliases}")


def _two_cta(d: dict) -> tuple[str, str]:
    by_split = {}
    for op in d["operands"]:
        spans = [split_axes(op, box) for box in op["parts"]]
        key = " / ".join(", ".join(f"{axis}s {a}-{b}" for axis, a, b in span) for span in spans)
        by_split.setdefault(key, []).append(op["name"])
    split = "; ".join(f"{', '.join(names)}: {key}" for key, names in by_split.items())
    return (f"{d['step']}: which CTA of the pair holds which part of each operand of one 2-CTA MMA",
            f"Read from {d['step']}'s two tiled MMAs (`make_tiled_mmas`: tcgen05 cta_group::2, M = {d['mma_m']}), "
            f"evaluated on the CPU: slice v of each (the atom's \"threads\" are the {d['ctas']} CTAs) partitioning a "
            f"coordinate tensor of each operand gives CTA v's part. CTA 0 / CTA 1: {split}. The leader (CTA 0) issues "
            "every MMA; each SM's tensor core computes its own 128 rows and reads the K and V halves from both SMs. "
            "FA4's 2-CTA kernel splits alike (flash_attn/cute/flash_fwd_sm100.py: mma_tiler_qk = (2 x m_block_size, "
            "n_block_size, d), K/V smem per stage halved).")


CAPTIONS = {"wgmma": _wgmma, "swizzle": _swizzle, "tmem": _tmem, "two-cta": _two_cta}


def figure_block(name: str) -> str:
    """``figure <name>``: the picture and its caption, both from the figure's data."""
    data = figure_data(name)
    alt, caption = CAPTIONS[data["kind"]](data)
    return f"![{alt}](../img/{figure_draw.paths(name)[0].name})\n\n{caption}\n"


BLOCKS = {"figure": figure_block}
