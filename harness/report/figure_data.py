"""What the explanatory figures show, read from the steps' own layouts, never typed by hand: CuTe's
layout algebra runs on the CPU in a host-side ``@cute.jit`` function (no GPU), over the tiled MMAs,
smem layouts and TMEM copies the kernels themselves build.

Each figure's data is a plain JSON-able dict with a ``kind`` (how it is drawn) and its sources;
harness/report/figure_draw.py draws it and keeps it beside the picture, so a picture is stale when
its step's layouts change. Traced values are kept per step version (harness/core/memo.py).
"""

from __future__ import annotations

import copy
import json

from harness.core.memo import remembered
from harness.core.steps import resolve
from harness.model.smem_model import ELEMENT_BYTES, static_coordinates, swizzle, swizzle_params

WGMMA_STEP, WGMMA_COLS = "h02", 16       # the fragment's first 16 columns: two 8-column repeats
SWIZZLE_STEPS = ("h03", "b03")           # the Hopper and Blackwell steps that introduce the 128B swizzle
SWIZZLE_ROWS, ROW_BYTES, CHUNK_BYTES = 8, 128, 16
TWO_CTA_STEP = "b13"
LANES_PER_WARP = 32


_seen: dict[str, object] = {}


def _traced(kind: str, step_ids: tuple[str, ...], compute):
    """``compute()`` once per version of the steps it reads (and of this module)."""
    steps = [resolve(s) for s in step_ids]
    key = {s.id: {"file": str(s.path.resolve()), **s.fingerprint} for s in steps}
    name = json.dumps([kind, key], sort_keys=True)
    if name not in _seen:
        _seen[name] = remembered(f"figure-{kind}", key, compute)
    return copy.deepcopy(_seen[name])


def _target(step):
    from ladder.contract import set_target_arch
    set_target_arch(step.info.archs[0])          # MMA atoms check the target arch when built
    return step.module


def wgmma_owners(step_id: str = WGMMA_STEP) -> dict:
    """Who holds each element of S = Q K^T: ``owner[row][col] = [thread, register]`` for the step's
    S tiled MMA (one warpgroup, wgmma.m64nNk16), from ``tiled_mma.get_slice(t).partition_C`` of a
    coordinate tensor; the register is the element's index in the thread's accumulator fragment."""
    def compute():
        import cutlass
        import cutlass.cute as cute
        step = resolve(step_id)
        module = _target(step)
        found = {}

        @cute.jit
        def read():
            tiled_mma, _ = module.make_tiled_mmas(cutlass.BFloat16)
            coords = cute.make_identity_tensor((module.TILE_M, module.TILE_N))
            # a comprehension, not a for statement: @cute.jit would turn the loop into a traced one
            found.update({t: static_coordinates(tiled_mma.get_slice(t).partition_C(coords))
                          for t in range(module.WARPGROUP_THREADS)})

        read()
        owner = [[None] * module.TILE_N for _ in range(module.TILE_M)]
        for t, cells in found.items():
            for register, (row, col) in enumerate(cells):
                if owner[row][col] is not None:
                    raise ValueError(f"{step_id}: S[{row}, {col}] held by threads {owner[row][col][0]} and {t}")
                owner[row][col] = [t, register]
        if any(None in row for row in owner):
            raise ValueError(f"{step_id}: an element of S is held by no thread")
        return {"step": step_id, "tile": [module.TILE_M, module.TILE_N], "threads": module.WARPGROUP_THREADS,
                "owner": owner}
    return _traced("wgmma", (step_id,), compute)


def wgmma_fragment() -> dict:
    full = wgmma_owners()
    return {"kind": "wgmma", "step": full["step"], "tile": full["tile"], "threads": full["threads"],
            "registers": sum(1 for row in full["owner"] for t, _ in row if t == 0),
            "owner": [row[:WGMMA_COLS] for row in full["owner"]]}


def _swizzle_layouts(step_id: str) -> dict:
    """The step's sQ and sK smem layouts: their text, their swizzle (B, M, S), and the element
    offset (swizzle not applied) of each 16-byte chunk of the first rows."""
    def compute():
        import cutlass.cute as cute
        module = _target(resolve(step_id))
        per = CHUNK_BYTES // ELEMENT_BYTES
        found = {}

        @cute.jit
        def read():
            sQ, sK, *_ = module.make_smem_layouts()
            for name, layout in (("sQ", sQ), ("sK", sK)):
                found[name] = {"layout": str(layout), "swizzle": list(swizzle_params(layout)),
                               "offsets": [[layout.outer((r, c * per)) for c in range(ROW_BYTES // CHUNK_BYTES)]
                                           for r in range(SWIZZLE_ROWS)]}

        read()
        return found
    return _traced("swizzle", (step_id,), compute)


def swizzle_chunks(step_ids: tuple[str, ...] = SWIZZLE_STEPS) -> dict:
    """The 16-byte slot (0-7, = bank group: banks 4s..4s+3) that chunk c (columns 8c..8c+7) of rows
    0-7 lands in, without and with the layout's swizzle. The swizzle rides on the smem pointer
    (``get_tensor(layout.outer, swizzle=layout.inner)``), so it acts on byte addresses: evaluating
    the composed layout itself would XOR element offsets instead."""
    grids, layouts = {}, {}
    for step_id in step_ids:
        for name, found in _swizzle_layouts(step_id).items():
            source = f"{step_id} {name}"
            layouts[source] = found["layout"]
            byte = [[e * ELEMENT_BYTES for e in row] for row in found["offsets"]]
            slots = ROW_BYTES // CHUNK_BYTES
            grids[source] = {"swizzle": found["swizzle"],
                             "before": [[b // CHUNK_BYTES % slots for b in row] for row in byte],
                             "after": [[swizzle(b, tuple(found["swizzle"])) // CHUNK_BYTES % slots for b in row]
                                       for row in byte]}
    first = next(iter(grids.values()))
    differ = [s for s, g in grids.items() if g != first]
    if differ:
        raise ValueError(f"the swizzle figure draws one grid, but {differ} differ from {next(iter(grids))}")
    return {"kind": "swizzle", "layouts": layouts, "element_bytes": ELEMENT_BYTES, "row_bytes": ROW_BYTES,
            "chunk_bytes": CHUNK_BYTES, **first}


def _warp_lanes(step_id: str) -> dict:
    """TMEM lanes each warp's tcgen05.ld touches, from the step's own row copy (``make_row_copies``)
    on its S accumulator, slice t % TILE_M as the kernel takes it (a second Q tile's warps reuse it)."""
    def compute():
        import cutlass
        import cutlass.cute as cute
        module = _target(resolve(step_id))
        found = {}

        @cute.jit
        def read():
            tiled_mma, _ = module.make_tiled_mmas(cutlass.BFloat16)
            acc = tiled_mma.make_fragment_C(tiled_mma.partition_shape_C((module.TILE_M, module.TILE_N)))
            chunk = cute.composition(acc[(None, None), 0, 0], cute.make_layout((module.TILE_M, module.TMEM_CHUNK)))
            load, _ = module.make_row_copies(chunk, module.TMEM_CHUNK)
            coords = cute.make_identity_tensor((module.TILE_M, module.TMEM_CHUNK))
            for w in cutlass.range_constexpr(module.NUM_WARPS):
                cells = static_coordinates(load.get_slice(w * LANES_PER_WARP % module.TILE_M).partition_S(coords))
                found[w] = sorted({row for row, _ in cells})

        read()
        if any(lanes != list(range(lanes[0], lanes[-1] + 1)) for lanes in found.values()):
            raise ValueError(f"{step_id}: a warp's TMEM lanes are not one contiguous range")
        return {"lanes": module.TILE_M, "warps": [[w, lanes[0], lanes[-1] + 1] for w, lanes in sorted(found.items())]}
    return _traced("tmem-lanes", (step_id,), compute)


def tmem_map(step_id: str) -> dict:
    """A Blackwell step's TMEM: 128 lanes (query rows) x its allocated columns, its regions
    (INFO.extra["tmem_map"], held to the kernel's offsets by tests/test_blackwell_steps.py), bf16 P
    aliased inside S, and the lanes each softmax warp reads. Region ``S<g>``/``O<g>`` is Q tile g's,
    read by warpgroup g (the kernel's ``q_tile = warp_idx // 4``)."""
    step = resolve(step_id)
    extra = step.info.extra
    traced = _warp_lanes(step_id)
    return {"kind": "tmem", "step": step_id, "title": step.info.title, "lanes": traced["lanes"],
            "columns": step.info.tmem_cols,
            "regions": {k: list(v) for k, v in extra["tmem_map"].items()},
            "aliases": {k: [inside, extra["tmem_map"][inside][0] + offset, width]
                        for k, (inside, offset, width) in extra.get("tmem_aliases", {}).items()},
            "warps": [{"warp": w, "lanes": [first, end], "q_tile": w // 4} for w, first, end in traced["warps"]]}


# The operands of b13's two MMAs, as (name, MMA, A/B/C, coordinate shape, memory, axes as drawn);
# the MMA's B of O += P V is V^T, (head dim, key): drawn as V, (key, head dim).
TWO_CTA_OPERANDS = (("Q", "qk", "A", ("MMA_M", "HEAD_DIM"), "smem", ("query row", "head dim")),
                    ("K", "qk", "B", ("TILE_N", "HEAD_DIM"), "smem", ("key", "head dim")),
                    ("S", "qk", "C", ("MMA_M", "TILE_N"), "TMEM", ("query row", "key")),
                    ("P", "pv", "A", ("MMA_M", "TILE_N"), "TMEM", ("query row", "key")),
                    ("V", "pv", "B", ("HEAD_DIM", "TILE_N"), "smem", ("key", "head dim")),
                    ("O", "pv", "C", ("MMA_M", "HEAD_DIM"), "TMEM", ("query row", "head dim")))


def two_cta_split(step_id: str = TWO_CTA_STEP) -> dict:
    """Which CTA of the pair holds which block of each operand of the 2-CTA MMAs: slice v of the
    step's tiled MMAs (the atom's "threads" are the two CTAs) partitioning a coordinate tensor of
    each operand's shape. Each part must be one rectangle, recorded as [row0, row1, col0, col1)."""
    def compute():
        import cutlass
        import cutlass.cute as cute
        module = _target(resolve(step_id))
        found = {}

        @cute.jit
        def read():
            mmas = dict(zip(("qk", "pv"), module.make_tiled_mmas(cutlass.BFloat16), strict=True))
            for name, mma, role, shape, _, _ in TWO_CTA_OPERANDS:
                coords = cute.make_identity_tensor(tuple(getattr(module, s) for s in shape))
                for v in cutlass.range_constexpr(module.CLUSTER_CTAS):
                    part = getattr(mmas[mma].get_slice(v), f"partition_{role}")(coords)
                    found[(name, v)] = static_coordinates(part)

        read()
        operands = []
        for name, mma, role, shape, memory, axes in TWO_CTA_OPERANDS:
            parts = []
            for v in range(module.CLUSTER_CTAS):
                cells = {(c, r) if name == "V" else (r, c) for r, c in found[(name, v)]}
                rows, cols = [r for r, _ in cells], [c for _, c in cells]
                box = [min(rows), max(rows) + 1, min(cols), max(cols) + 1]
                if len(cells) != (box[1] - box[0]) * (box[3] - box[2]):
                    raise ValueError(f"{step_id}: CTA {v}'s part of {name} is not one rectangle")
                parts.append(box)
            size = [getattr(module, s) for s in shape]
            operands.append({"name": name, "mma": mma, "role": role, "memory": memory, "axes": list(axes),
                             "shape": size[::-1] if name == "V" else size, "parts": parts})
        return {"kind": "two-cta", "step": step_id, "ctas": module.CLUSTER_CTAS, "mma_m": module.MMA_M,
                "tile_m": module.TILE_M, "operands": operands}
    return _traced("two-cta", (step_id,), compute)


def split_axes(operand: dict, box: list[int]) -> list[tuple[str, int, int]]:
    """The axes along which ``box`` (one CTA's part of a two-cta operand) is a piece, not the whole:
    (axis name, first, last)."""
    r0, r1, c0, c1 = box
    return [(axis, a, b - 1) for axis, (a, b), n in zip(operand["axes"], ((r0, r1), (c0, c1)), operand["shape"], strict=True)
            if b - a < n]


# Every figure, by the name its block and its files carry (writeups/img/fig-<name>.*).
FIGURES = {"wgmma-fragment": wgmma_fragment, "swizzle": swizzle_chunks,
           "tmem-b05": lambda: tmem_map("b05"), "tmem-b06": lambda: tmem_map("b06"), "two-cta": two_cta_split}


def figure_data(name: str) -> dict:
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; figures: {', '.join(FIGURES)}")
    return FIGURES[name]()
