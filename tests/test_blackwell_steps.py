"""CPU-side proof of the Blackwell steps (sm_100a): what each writeup claims about tensor memory,
UMMA descriptors and which warp may touch which TMEM lanes, checked on the compiled kernel (PTX,
SASS) and on the step's own layouts and copies (CuTe's layout algebra, evaluated on the host).
No Blackwell GPU runs here: these steps are compiled, not yet run on a B200."""

import re

import pytest
from conftest import STEPS, step_id

from harness.compiler import sass
from harness.compiler.compile import compile_step
from harness.core.steps import resolve

BLACKWELL = [s for s in STEPS if s.track == "blackwell"]
ARCH = "sm_100a"
TMEM_LANES = 128
LANES_PER_WARP = 32          # tcgen05.ld/st: warp w may access lanes 32*(w % 4) .. +31 only
# Tracing a copy partition per thread is slow; every warp's first and last lane, and a few inside.
SAMPLE_THREADS = (0, 1, 17, 31, 32, 45, 63, 64, 90, 95, 96, 113, 127,
                  128, 159, 160, 200, 224, 255)


def _ptx(step):
    return compile_step(step, ARCH).ptx.read_text()


@pytest.mark.parametrize("step", BLACKWELL, ids=step_id)
def test_tmem_allocation_is_a_power_of_two_between_32_and_512(step):
    cols = step.info.tmem_cols
    assert cols is not None, f"{step.id}: INFO.tmem_cols missing"
    assert 32 <= cols <= 512 and cols & (cols - 1) == 0, f"{step.id}: {cols} TMEM columns"
    # ... and the kernel allocates exactly that (tcgen05.alloc's column operand in the PTX)
    assert sass.tmem_alloc_columns(_ptx(step)) == [cols]
    assert "tcgen05.dealloc" in _ptx(step) and "tcgen05.relinquish_alloc_permit" in _ptx(step)


@pytest.mark.parametrize("step", BLACKWELL, ids=step_id)
def test_tmem_map_regions_are_disjoint_and_inside_the_allocation(step):
    regions = sorted(step.info.extra["tmem_map"].values())
    for (start, width), (next_start, _) in zip(regions, regions[1:], strict=False):
        assert start + width <= next_start, f"{step.id}: TMEM regions overlap: {regions}"
    start, width = regions[-1]
    assert start + width <= step.info.tmem_cols
    # an alias (P over its S columns) lies inside the region it reuses
    for name, (host, offset, cols) in step.info.extra.get("tmem_aliases", {}).items():
        host_start, host_width = step.info.extra["tmem_map"][host]
        assert 0 <= offset and offset + cols <= host_width, f"{step.id}: {name} leaves {host}"


def _rows(tensor, by_element=False):
    """The rows (first coordinate) a partition of an identity tensor touches."""
    import cutlass.cute as cute

    from harness.model.smem_model import static_coordinates
    coords = None if by_element else static_coordinates(tensor)
    if coords is None:                        # slow: one traced index per element
        return {tensor[i][0] for i in range(cute.size(tensor))}
    return {c[0] for c in coords}


def warp_lane_violations(step, warp_of=lambda thread: thread // 32, by_element=False, threads=SAMPLE_THREADS):
    """Threads (sampled) whose TMEM accesses leave their warp's lane quarter, for the step's own
    TMEM <-> register copies (``make_row_copies``) built on its own S accumulator, as the kernel
    builds them. ``warp_of`` is a parameter only so that a test can show a wrong mapping is caught."""
    import cutlass
    import cutlass.cute as cute

    from ladder.contract import set_target_arch
    set_target_arch(ARCH)
    module = step.module
    # the warps that load/store TMEM (all of them until warp specialization; then the softmax ones)
    tmem_warps = step.info.extra.get("tmem_warps", range(module.THREADS // 32))
    seen = {}

    @cute.jit
    def probe():
        tiled_mma, _ = module.make_tiled_mmas(cutlass.BFloat16)
        tStS = tiled_mma.make_fragment_C(tiled_mma.partition_shape_C((module.TILE_M, module.TILE_N)))
        chunk0 = cute.composition(tStS[(None, None), 0, 0],
                                  cute.make_layout((module.TILE_M, module.TMEM_CHUNK)))
        load, store = module.make_row_copies(chunk0, module.TMEM_CHUNK)
        coords = cute.make_identity_tensor((module.TILE_M, module.TMEM_CHUNK))
        for copy, name in ((load, "load"), (store, "store")):
            for t in (t for t in threads if t // 32 in tmem_warps):
                # The copies serve one 128-row tile; a CTA with more threads (a second Q tile)
                # uses them with slice t % 128, in its own TMEM columns.
                part = copy.get_slice(t % TMEM_LANES)
                tmem_side = part.partition_S(coords) if name == "load" else part.partition_D(coords)
                reg_side = part.partition_D(coords) if name == "load" else part.partition_S(coords)
                seen[(name, t)] = (_rows(tmem_side, by_element), _rows(reg_side, by_element))

    probe()
    violations = []
    for (name, t), (warp_lanes, thread_rows) in seen.items():
        quarter = warp_of(t) % 4
        allowed = set(range(LANES_PER_WARP * quarter, LANES_PER_WARP * (quarter + 1)))
        if not warp_lanes <= allowed or not thread_rows <= allowed:
            violations.append((name, t, sorted(warp_lanes)[:2], sorted(thread_rows)[:2]))
    return violations, seen


@pytest.mark.parametrize("step", BLACKWELL, ids=step_id)
def test_each_warp_touches_only_its_own_tmem_lanes(step):
    violations, seen = warp_lane_violations(step)
    assert seen, "the probe saw no copies"
    assert not violations, f"{step.id}: TMEM accesses outside the warp's lane quarter: {violations[:4]}"
    # one thread per query row: thread t's registers hold TMEM lane (= row) t % 128, all columns
    for (name, t), (_, thread_rows) in seen.items():
        assert thread_rows == {t % TMEM_LANES}, f"{step.id} {name}: thread {t} holds rows {thread_rows}"


def test_the_coordinates_read_from_the_layout_are_the_ones_indexing_finds():
    """The lane check reads each partition's coordinates off its static layout (instant) instead of
    indexing every element (a traced operation each, minutes per step): both agree, thread by thread."""
    threads = (0, 45, 90, 127)                  # one per warp: each by-element trace takes seconds
    fast, slow = (warp_lane_violations(resolve("b02"), by_element=e, threads=threads)[1] for e in (False, True))
    assert len(fast) == 2 * len(threads) and fast == slow


def test_the_lane_check_catches_a_wrong_warp_to_lane_mapping():
    violations, _ = warp_lane_violations(resolve("b02"), warp_of=lambda thread: thread // 32 + 1)
    assert violations


def test_b02_issues_tcgen05_mma_from_unswizzled_smem_descriptors():
    step = resolve("b02")
    descriptors = sass.umma_descriptors(_ptx(step))
    # 8 MMAs for S (A = Q, B = K) and 8 for O (A = P, B = V), each one 128x128x16 instruction
    assert len(descriptors) == 2 * 16
    assert {d.layout_name for d in descriptors} == {"SWIZZLE_NONE (interleave)"}
    assert {d.version for d in descriptors} == {1}                     # the sm_100 format
    # K-major Q, K, P: 8-row core matrices 128 B apart along M, 16-byte columns 2 KB apart along K;
    # MN-major V the other way round. (The descriptor's two offsets, decoded.)
    k_major = {(d.leading_byte_offset, d.stride_byte_offset) for d in descriptors if d.operand == "A"}
    assert k_major == {(2048, 128)}
    assert not any(sass.umma_a_from_tmem(_ptx(step)))
    report = compile_step(step, ARCH)
    assert report.sass.mechanisms["UTCHMMA"] == 16 and report.sass.mechanisms["HMMA"] == 0
    assert report.sass.mechanisms["UTCBAR"] == 2                        # one commit after S, one after P V


@pytest.mark.parametrize("step", BLACKWELL, ids=step_id)
def test_shared_storage_fits_the_227_kb_a_cta_may_use(step):
    from harness.compiler.smem_budget import SMEM_PER_CTA_LIMIT, shared_storage_bytes
    size = shared_storage_bytes(step)          # the struct the kernel allocates, evaluated here
    assert step.info.smem_bytes <= size <= SMEM_PER_CTA_LIMIT


def test_b02_thread_stores_into_the_unswizzled_layout_conflict_on_q_k_v():
    """The step's own copy thread mapping and smem layouts (harness/model/smem_model.py): the 16 threads
    that copy one 256-byte row write 16 core matrices at the same offset: each quarter-warp's 8
    threads land on the same 4 banks, 8 wavefronts per quarter, so a 16-byte warp store takes 32
    wavefronts instead of 4 (h02's stores, same pattern, are counted at ~32 by ncu). P's stores (thread t writes 16 bytes of its row t) are
    conflict-free: rows 0-7 of a core matrix are 128 contiguous bytes. b03 is measured against this."""
    from harness.model.smem_model import store_costs
    costs = {c.name: c for c in store_costs(resolve("b02"))}
    assert {n: (c.wavefronts, c.minimal) for n, c in costs.items() if n in "QKV"} == \
        {"Q": (32, 4), "K": (32, 4), "V": (32, 4)}
    assert costs["P"].is_minimal and costs["P"].bytes_per_thread == 16


def test_b03_smem_layouts_equal_the_ones_cutlass_builds_for_these_operands():
    """Q, K (A, B of S) and V (B of P V), as the kernel lays them out and the MMA partitions them,
    against ``cutlass.utils.blackwell_helpers.make_smem_layout_a/b`` for the same tiled MMAs and
    tiles (one stage): the same swizzle and the same partitioned layout."""
    import cutlass
    import cutlass.cute as cute
    import cutlass.utils.blackwell_helpers as sm100

    from ladder.contract import set_target_arch
    set_target_arch(ARCH)
    module = resolve("b03").module
    found = {}

    @cute.jit
    def compare():
        dtype = cutlass.BFloat16
        sQ, sK, sVt, _ = module.make_smem_layouts()
        mma_s, mma_pv = module.make_tiled_mmas(dtype)
        tiler_s = (module.TILE_M, module.TILE_N, module.HEAD_DIM)
        tiler_pv = (module.TILE_M, module.HEAD_DIM, module.TILE_N)
        cases = (("Q", sQ, sm100.make_smem_layout_a(mma_s, tiler_s, dtype, 1), mma_s, "A"),
                 ("K", sK, sm100.make_smem_layout_b(mma_s, tiler_s, dtype, 1), mma_s, "B"),
                 ("V", sVt, sm100.make_smem_layout_b(mma_pv, tiler_pv, dtype, 1), mma_pv, "B"))
        for name, mine, theirs, mma, operand in cases:
            tile = cute.make_tensor(cute.make_ptr(dtype, 0, cute.AddressSpace.smem), mine.outer)
            part = mma.get_slice(0).partition_A(tile) if operand == "A" else mma.get_slice(0).partition_B(tile)
            found[name] = (str(mine.inner), str(part.layout),
                           str(theirs.inner), str(cute.select(theirs.outer, mode=[0, 1, 2])))

    compare()
    assert set(found) == {"Q", "K", "V"}
    for name, (my_swizzle, my_layout, their_swizzle, their_layout) in found.items():
        assert my_swizzle == their_swizzle == "S<3,4,3>", name
        assert my_layout == their_layout, f"{name}: {my_layout} != {their_layout}"


def test_b03_descriptors_use_the_128b_swizzle_for_q_k_v():
    descriptors = sass.umma_descriptors(_ptx(resolve("b03")))
    assert len(descriptors) == 2 * 16
    by_type = {}
    for d in descriptors:
        by_type.setdefault(d.layout_name, []).append(d)
    # S: A = Q, B = K, both swizzled; P V: A = P (kept unswizzled), B = V swizzled
    assert len(by_type["SWIZZLE_128B"]) == 24 and len(by_type["SWIZZLE_NONE (interleave)"]) == 8
    assert all(d.operand == "A" for d in by_type["SWIZZLE_NONE (interleave)"])
    assert {d.stride_byte_offset for d in by_type["SWIZZLE_128B"]} == {1024}   # 8 rows x 128 B


def test_b03_swizzle_makes_every_thread_store_minimal_where_b02_is_not():
    from harness.model.smem_model import store_costs
    before = {c.name: c for c in store_costs(resolve("b02"))}
    after = {c.name: c for c in store_costs(resolve("b03"))}
    for name in "QKV":
        assert after[name].wavefronts < before[name].wavefronts, name
        assert after[name].is_minimal, name
    assert after["P"].is_minimal


def test_b04_loads_only_by_tma_with_expect_tx_equal_to_what_the_copies_deliver():
    """No thread loads Q, K or V any more (no LDG, no thread stores of them into smem), and every
    expect-tx arrive announces exactly one Q tile or one K + V pair: an announced count the copies
    never deliver would leave the barrier's phase open forever (a hang a CPU can see)."""
    from harness.model.smem_model import store_costs
    step = resolve("b04")
    report = compile_step(step, ARCH)
    assert report.sass.mechanisms["UTMALDG"] > 0 and report.sass.mechanisms["LDG"] == 0
    assert [c.name for c in store_costs(step)] == ["P"]           # Q, K, V: no thread stores left
    tile = 2 * step.info.tile_m * step.info.head_dim                 # bytes of one bf16 tile
    assert sorted(set(sass.expect_tx_bytes(report.ptx.read_text()))) == [tile, 2 * tile]


@pytest.mark.parametrize("step", [s for s in BLACKWELL if s.number >= 4], ids=lambda s: s.id)
def test_tma_steps_prefetch_each_descriptor_once(step):
    """From b04 on, warp 0 prefetches the three TMA descriptors (Q, K, V) into the descriptor cache
    at the kernel's start, as FA4 does: one prefetch.tensormap each in the PTX, one UTMACCTL.PF
    each in the SASS."""
    report = compile_step(step, ARCH)
    ptx = report.ptx.read_text()
    param_of = dict(re.findall(r"cvta\.param\.u64\s+(%rd\d+),\s*(%rd\d+);", ptx))
    prefetched = [param_of.get(r) for r in re.findall(r"prefetch\.tensormap\s+\[(%rd\d+)\]", ptx)]
    copied = {param_of.get(r) for r in re.findall(r"cp\.async\.bulk\.tensor[^\[]*\[[^\]]*\],\s*\[(%rd\d+),", ptx)}
    assert len(prefetched) == 3 and set(prefetched) == copied          # each copy's descriptor, once
    assert report.sass.opcodes["UTMACCTL.PF"] == 3


def test_b05_tmem_map_is_s0_s1_o0_o1_using_exactly_512_columns():
    module = resolve("b05").module
    tmem_map = module.INFO.extra["tmem_map"]
    assert list(tmem_map) == ["S0", "S1", "O0", "O1"]
    columns = [c for start, width in tmem_map.values() for c in range(start, start + width)]
    assert sorted(columns) == list(range(512)) == list(range(module.TMEM_COLS))   # no gap, no overlap
    # the offsets the kernel places its accumulators at are the map's
    assert tuple(tmem_map[f"S{g}"][0] for g in range(2)) == module.TMEM_S_COL
    assert tuple(tmem_map[f"O{g}"][0] for g in range(2)) == module.TMEM_O_COL


def _kv_bytes_per_tile(step):
    import cutlass
    import cutlass.cute as cute

    from ladder.contract import set_target_arch
    set_target_arch(ARCH)
    found = {}

    @cute.jit
    def measure():
        # b13 on: the layouts come from the 2-CTA MMAs (each CTA's part of the operands)
        mmas = (step.module.make_tiled_mmas(cutlass.BFloat16) if hasattr(step.module, "CLUSTER_CTAS") else ())
        _, sK, sVt, *_ = step.module.make_smem_layouts(*mmas)
        found["kv"] = cute.size_in_bytes(cutlass.BFloat16, sK) + cute.size_in_bytes(cutlass.BFloat16, sVt)

    measure()
    return int(found["kv"])


def test_b05_halves_the_kv_bytes_per_query_row_of_b04():
    """One K + V tile load per iteration serves every query row of the CTA: bytes per row = the
    K + V tile bytes (from the layouts, and announced to the barrier: an expect-tx count in the
    PTX) over the CTA's query rows."""
    per_row = {}
    for name in ("b04", "b05"):
        step = resolve(name)
        kv = _kv_bytes_per_tile(step)
        assert kv in sass.expect_tx_bytes(_ptx(step))
        per_row[name] = kv / step.info.tile_m
    assert per_row == {"b04": 512, "b05": 256}
    report = compile_step(resolve("b05"), ARCH)
    assert report.threads_per_cta == 256                                   # two softmax warpgroups
    assert report.sass.mechanisms["UTCHMMA"] == 2 * compile_step(resolve("b04"), ARCH).sass.mechanisms["UTCHMMA"]


def test_b06_p_v_reads_p_from_tmem_and_p_never_touches_smem():
    """The fingerprint that tells b06 from b05: the P V tcgen05.mma takes its A operand from TMEM
    (``[tmem]`` in the PTX, ``UTCHMMA tmem[..], gdesc[..]`` in the SASS) while S's stay smem-smem,
    and no thread stores into shared memory any more (b05's only thread stores were P's)."""
    from harness.model.smem_model import store_costs
    before, after = (compile_step(resolve(s), ARCH) for s in ("b05", "b06"))
    a_from_tmem = sass.umma_a_from_tmem(after.ptx.read_text())
    assert a_from_tmem == [False] * 16 + [True] * 16                 # 16 S MMAs, then 16 P V MMAs
    assert not any(sass.umma_a_from_tmem(before.ptx.read_text()))
    assert after.sass.mechanisms["UTCHMMA.TS"] == 16 and before.sass.mechanisms["UTCHMMA.TS"] == 0
    assert store_costs(resolve("b05")) and not store_costs(resolve("b06"))
    # the 16 STS.128 of each thread's P row are gone; what remains is setup (TMEM address, mbarriers)
    assert before.sass.mechanisms["STS"] - after.sass.mechanisms["STS"] == 16
    assert "fence.proxy.async.shared::cta" not in after.ptx.read_text()


def test_b07_warp_roles_are_warpgroup_aligned_and_cover_the_cta():
    """Softmax warpgroups start at a multiple of 4 warps (so warp w's TMEM lane quarter, w % 4,
    is its rows' quarter), the MMA and load warps are single warps of their own, and together the
    roles are exactly the CTA's warps (320 threads in the launch metadata)."""
    step = resolve("b07")
    roles = step.info.extra["warp_roles"]
    softmax = [warps for name, warps in roles.items() if name.startswith("softmax")]
    assert len(softmax) == 2 and all(len(w) == 4 and w[0] % 4 == 0 for w in softmax)
    assert len(roles["mma"]) == 1 and len(roles["load"]) == 1
    every = [w for warps in roles.values() for w in warps]
    assert sorted(every) == list(range(step.info.threads // 32)) and len(set(every)) == len(every)
    assert set(step.info.extra["tmem_warps"]) == {w for warps in softmax for w in warps}
    assert compile_step(step, ARCH).threads_per_cta == step.info.threads == 320
    # no CTA barrier inside the loop any more: one after mbarrier init, one before TMEM dealloc
    ptx = _ptx(step)
    assert ptx.count("barrier.sync") + ptx.count("bar.sync") <= 2


def test_b08_has_a_multi_stage_ring_within_the_smem_budget():
    """Stage count > 1 (metadata, the constant the kernel uses); the shared-storage struct the
    kernel allocates, evaluated on the CPU, holds the ring and stays within 227 KB; and every
    expect-tx announces one stage (one K + V pair), never the whole ring."""
    from harness.compiler.smem_budget import SMEM_PER_CTA_LIMIT, shared_storage_bytes
    step, before = resolve("b08"), resolve("b07")
    stages = step.info.extra["kv_stages"]
    assert stages == step.module.NUM_STAGES > 1
    ring = stages * 2 * 2 * step.info.tile_n * step.info.head_dim
    size = shared_storage_bytes(step)
    assert ring < size <= SMEM_PER_CTA_LIMIT
    assert size - shared_storage_bytes(before) == ring // stages * (stages - 1)   # one more K/V stage
    one_stage = 2 * 2 * step.info.tile_n * step.info.head_dim
    kv_counts = set(sass.expect_tx_bytes(_ptx(step)))
    assert kv_counts == {one_stage}          # the Q arrive (both Q tiles) is 64 KB too


def _mma_order(events):
    """(accumulator, MMA count) runs of the tcgen05.mma in program order."""
    from harness.model.mma_pipe import Mma
    runs = []
    for ev in events:
        if isinstance(ev, Mma):
            if runs and runs[-1][0] == ev.d:
                runs[-1][1] += 1
            else:
                runs.append([ev.d, 1])
    return [tuple(r) for r in runs]


def test_b09_alternates_the_q_tiles_in_the_mma_issue_order():
    """From the PTX: b08 issues per iteration S0, S1, O0, O1; b09 issues S0, S1 once before the loop,
    then O0, S0, O1, S1 per iteration (P_g V of the previous tile, then S_g of this one), then O0, O1
    once after it. Eight MMAs per GEMM (K = 128 in steps of 16) in every run."""
    from harness.model import mma_pipe
    mmas = 128 // 16
    b08, _ = mma_pipe.step_program(resolve("b08"))
    assert (_mma_order(b08.prologue), _mma_order(b08.tail)) == ([], [])
    assert _mma_order(b08.body) == [("S0", mmas), ("S1", mmas), ("O0", mmas), ("O1", mmas)]
    b09, _ = mma_pipe.step_program(resolve("b09"))
    assert _mma_order(b09.prologue) == [("S0", mmas), ("S1", mmas)]
    assert _mma_order(b09.body) == [("O0", mmas), ("S0", mmas), ("O1", mmas), ("S1", mmas)]
    assert _mma_order(b09.tail) == [("O0", mmas), ("O1", mmas)]


# log2(e) split in a hi/lo pair, as nvdisasm prints them: the full-precision expf range reduction.
_LOG2E_LO = "1.925963033500011079e-08"


def test_b10_replaces_the_expf_sequence_by_ffma2_and_ex2_and_reads_s_once():
    """b09's library exp is the expf sequence (FFMA.SAT, FFMA.RM, log2(e)'s lo constant) around each
    MUFU.EX2; b10 has none of it, one FFMA2 per pair of scores, and reads S from TMEM once per tile:
    one load per TMEM_CHUNK columns (the 16-column shape O's loads use), all issued before a single
    wait, where b09 made two passes with a wait after every load. (The row by one 128-column load
    is exp:b10-one-s-load.)"""
    from harness.compiler import softmax_budget
    b09, b10 = (softmax_budget.budget(resolve(s), ARCH) for s in ("b09", "b10"))
    t09, t10 = (compile_step(resolve(s), ARCH).sass.text for s in ("b09", "b10"))
    assert b09["opcodes"]["FFMA.SAT"] == b09["opcodes"]["FFMA.RM"] >= b09["elements_per_thread"]
    assert _LOG2E_LO in t09 and _LOG2E_LO not in t10
    assert b10["opcodes"].get("FFMA.SAT", 0) == b10["opcodes"].get("FFMA.RM", 0) == 0
    assert b10["opcodes"]["FFMA2"] == b10["elements_per_thread"] // 2
    columns = resolve("b10").module.TMEM_CHUNK
    o_chunks = s_chunks = 128 // columns
    # In the main loop: two passes over S (b09) against one (b10), plus O's rescale in both.
    ldtm = {k: sum(n for op, n in b["opcodes"].items() if op.startswith("LDTM")) for k, b in (("b09", b09), ("b10", b10))}
    assert ldtm == {"b09": 2 * s_chunks + o_chunks, "b10": s_chunks + o_chunks}
    ptx = {s: _ptx(resolve(s)) for s in ("b09", "b10")}
    shapes = {s: set(re.findall(r"tcgen05\.ld\.sync\.aligned\.(\w+\.x\d+)\.", p)) for s, p in ptx.items()}
    assert shapes == {"b09": {f"32x32b.x{columns}"}, "b10": {f"32x32b.x{columns}"}}
    # tcgen05.wait::ld in the kernel: one per S load in b09; one per tile's S in b10; one per O
    # chunk in the rescale and in the epilogue in both.
    waits = {s: p.count("tcgen05.wait::ld") for s, p in ptx.items()}
    assert waits == {"b09": 2 * s_chunks + 2 * o_chunks, "b10": 1 + 2 * o_chunks}


@pytest.mark.parametrize("step", BLACKWELL, ids=step_id)
def test_every_mma_addresses_tmem_from_the_allocated_base(step):
    """Each tcgen05.mma's TMEM operands (the accumulator, and P's A operand from b06 on) are the
    address tcgen05.alloc returned plus a column offset, never a bare constant: a constant only
    works while the allocation happens to start at column 0 (a P V operand built from a fresh
    fragment is such a constant). The offsets are the TMEM map's."""
    ptx = _ptx(step)
    addresses = sass.umma_tmem_addresses(ptx)
    assert addresses and None not in {base for _, base, _ in addresses}, "a TMEM address built from a constant"
    # Every base is the allocated address read back from the shared-memory slot tcgen05.alloc
    # wrote: one load, or (b12 on, where setmaxnreg separates the roles' code) one per role.
    loaded = set(re.findall(r"ld\.shared\.b32\s+(%r\d+),", ptx))
    assert {base for _, base, _ in addresses} <= loaded, f"{step.id}: a TMEM base not loaded from smem"
    tmem_map = step.info.extra["tmem_map"]
    assert {off for operand, _, off in addresses if operand == "D"} == {start for start, _ in tmem_map.values()}
    aliases = step.info.extra.get("tmem_aliases", {})
    for operand, _, off in addresses:
        if operand == "A":
            assert any(tmem_map[host][0] + lo <= off < tmem_map[host][0] + lo + cols
                       for host, lo, cols in aliases.values()), f"{step.id}: A at column {off}"


def _roles_by_registers(step):
    """{registers after setmaxnreg: [RegisterRegion, ...]} of the step's sm_100a SASS."""
    regions = {}
    for region in sass.register_regions(compile_step(step, ARCH).sass.text):
        if not region.out_of_line:
            regions.setdefault(region.registers, []).append(region)
    return regions


@pytest.mark.parametrize("sid", ["b12", "b13", "b14"])
def test_b12_on_splits_the_register_file_between_four_whole_warpgroups(sid):
    """16 warps, four whole warpgroups (setmaxnreg acts per warpgroup): softmax 0-7 raise their
    registers to 192, the correction warpgroup 8-11 drops to 80, the MMA, load and two idle warps to
    48 in one setmaxnreg taken before they part ways; together exactly the register file (512
    threads x 128 at launch = 65,536)."""
    step = resolve(sid)
    mod, extra = step.module, step.info.extra
    roles = extra["warp_roles"]
    assert sorted(w for warps in roles.values() for w in warps) == list(range(16))
    assert roles["correction"] == (8, 9, 10, 11) and roles["mma"] == (12,) and roles["load"] == (13,)
    per_group = {"softmax": 2 * 128, "correction": 128, "other": 128}
    assert sum(extra["registers"][k] * n for k, n in per_group.items()) == 65536 == step.info.threads * 128
    regions = _roles_by_registers(step)
    assert set(regions) == {None, mod.SOFTMAX_REGISTERS, mod.CORRECTION_REGISTERS, mod.OTHER_REGISTERS}
    assert len(regions[mod.OTHER_REGISTERS]) == 1          # one setmaxnreg for warps 12-15, then their roles
    assert compile_step(step, ARCH).registers == 128       # the entry count ptxas needs to honour them


@pytest.mark.parametrize("sid", ["b12", "b13", "b14"])
def test_b12_on_rescales_o_only_in_the_correction_warps_after_a_vote(sid):
    """b11's softmax stores P and O to TMEM (its rescale); b12's softmax stores only P, and O's
    load-scale-store sits in the correction warpgroup's code, behind a ballot."""
    step = resolve(sid)
    mod = step.module
    regions = _roles_by_registers(step)
    (softmax,), (correction,) = regions[mod.SOFTMAX_REGISTERS], regions[mod.CORRECTION_REGISTERS]
    p_stores = mod.TILE_N // mod.TMEM_CHUNK                   # one store per TMEM_CHUNK keys of P
    assert softmax.count("STTM") == p_stores and softmax.count("VOTE") == 0
    o_chunks = mod.NUM_Q_TILES * (mod.HEAD_DIM // mod.TMEM_CHUNK)
    assert correction.count("STTM") == correction.count("LDTM") == o_chunks
    assert correction.count("VOTE") >= mod.NUM_Q_TILES and correction.count("MUFU.EX2") == 0
    b11 = compile_step(resolve("b11"), ARCH).sass.text
    assert b11.count("STTM") > compile_step(step, ARCH).sass.text.count("STTM") - o_chunks


def test_b12_rescales_exactly_and_fa4s_threshold_is_the_experiment():
    """b12 keeps the old max only when the new one is not above it: RESCALE_THRESHOLD = 0.0, so
    the kernel's one `moved_log2 >= -RESCALE_THRESHOLD` compares with 0 (a factor below 1 only when
    the row's max grew). FA4's lag of up to 8 (log2 units) is exp:b12-rescale-threshold-8,
    whose comparison ptxas sees with -8.0."""
    compare = r"setp\.ge\.f32\s+%p\d+, %r\d+, (0f[0-9A-F]{8});"
    step = resolve("b12")
    assert step.module.RESCALE_THRESHOLD == 0.0 == step.info.extra["rescale_threshold"]
    assert re.findall(compare, _ptx(step)) in (["0f00000000"], ["0f80000000"])     # +0.0f or -0.0f
    lagging = resolve("exp:b12-rescale-threshold-8")
    assert lagging.module.RESCALE_THRESHOLD == 8.0 == lagging.info.extra["rescale_threshold"]
    assert re.findall(compare, _ptx(lagging)) == ["0fC1000000"]                    # -8.0f


def _softmax_loop_local_memory(spec):
    """(compile report, LDL, STL) in the step's softmax tile loop: the SASS loop that holds the
    most MUFU.EX2 (harness/compiler/softmax_budget.py), found without the setmaxnreg regions."""
    from collections import Counter

    from harness.compiler import softmax_budget
    report = compile_step(resolve(spec), ARCH)
    instrs, labels = softmax_budget.parse(report.sass.text)
    loop, _, notes = softmax_budget.main_loop(instrs, labels)
    assert loop is not None and not notes, notes
    mod = resolve(spec).module
    assert sum(i.opcode == "MUFU.EX2" for i in loop.inline) == mod.TILE_N - mod.EX2_EMULATED_PER_TILE + 1
    ops = Counter(i.opcode.split(".")[0] for i in loop.inline)
    return report, ops["LDL"], ops["STL"]


def test_b12_setmaxnreg_is_forced_without_it_the_softmax_spills():
    """16 warps leave every thread 65,536 / 512 = 128 registers. exp:b12-no-setmaxnreg (b12
    without its three setmaxnreg and min_blocks_per_mp=1) compiles at that cap, and its softmax
    tile loop (a 128-score row plus the emulation's temporaries) stores to and reloads from local
    memory; b12, whose softmax warps take 192, has no local-memory access in that loop."""
    plain, ldl, stl = _softmax_loop_local_memory("exp:b12-no-setmaxnreg")
    assert plain.registers == 128 and plain.sass.mechanisms.get("USETMAXREG", 0) == 0
    assert stl > 0 and ldl > 0, (ldl, stl)
    b12, ldl, stl = _softmax_loop_local_memory("b12")
    assert b12.registers == 128 and b12.sass.mechanisms["USETMAXREG"] == 3
    assert (ldl, stl) == (0, 0)
    assert plain.sass.spills > b12.sass.spills


def test_b12_softmax_does_not_spill_and_the_declared_spills_are_elsewhere():
    """b11's softmax spilled at the 168 registers of a 320-thread CTA; with 192 after setmaxnreg
    b12's softmax code stores nothing to local memory. The spills the step declares are the
    48-register warps': they reload (LDL) values stored before the roles split or in their loop."""
    step = resolve("b12")
    mod = step.module
    regions = _roles_by_registers(step)
    (softmax,) = regions[mod.SOFTMAX_REGISTERS]
    assert softmax.count("STL") == 0
    assert sum(r.count("STL") + r.count("LDL") for r in regions[mod.OTHER_REGISTERS]) > 0
    assert "spills_at_register_cap" in step.info.extra


# ---- b13: 2-CTA MMA ---------------------------------------------------------------------------

def test_b13_every_tcgen05_instruction_runs_on_the_cta_pair():
    """The PTX ISA forbids mixing: every tcgen05 alloc, dealloc, relinquish, mma and commit of a
    kernel must name the same cta_group. b13's are all cta_group::2, every commit is multicast
    to the pair (mask 0b11), and the SASS issues only the pair forms."""
    step = resolve("b13")
    ptx = _ptx(step)
    assert "cta_group::1" not in ptx
    for op in ("alloc", "dealloc", "relinquish_alloc_permit", "mma", "commit"):
        found = re.findall(rf"tcgen05\.{op}\.(\S+)", ptx)
        assert found and all(f.startswith("cta_group::2") for f in found), (op, set(found))
    assert all(".multicast::cluster" in c for c in re.findall(r"tcgen05\.commit\S+", ptx))
    mech = compile_step(step, ARCH).sass.mechanisms
    assert mech["UTCHMMA"] == mech["UTCHMMA.2CTA"] == 64          # 2 Q tiles x (8 + 8) k-blocks x 2 (loop, prologue/tail)
    assert mech["UTCBAR"] == mech["UTCBAR.2CTA"] > 0
    assert mech["UTMALDG"] == mech["UTMALDG.2CTA"] > 0
    assert mech["UCGABAR"] == 2                                     # one cluster arrive, one wait


def test_b13_launches_clusters_of_two_ctas():
    """The cluster shape is a launch attribute, not in the PTX; the IR's launch facts carry it."""
    from harness.compiler.compile import launch_facts
    facts = launch_facts(resolve("b13"), ARCH)
    assert facts["cluster_launch"] and facts["exact_cluster_dim"] == (2, 1, 1)
    assert not launch_facts(resolve("b12"), ARCH)["cluster_launch"]


def test_b13_tma_bytes_land_on_the_leaders_barrier_which_expects_the_pairs_bytes():
    """Every TMA load is a cta_group::2 copy whose mbarrier address has the peer bit (bit 24 of a
    shared::cluster address) cleared: CTA 1's bytes count on CTA 0's barrier. The leader's
    expect-tx therefore announces both CTAs' bytes: 2 x (two Q tiles) and 2 x (one stage: a K half
    and a V half)."""
    mod = resolve("b13").module
    ptx = _ptx(resolve("b13"))
    copies = re.findall(r"cp\.async\.bulk\.tensor\.\S+ \[[^\]]+\], \[[^\]]+\], \[(%r\d+)\]", ptx)
    assert copies and all("cta_group::2" in c for c in re.findall(r"cp\.async\.bulk\.tensor\.\S+", ptx))
    for reg in set(copies):
        (mask,) = re.findall(rf"and\.b32\s+{re.escape(reg)}, %r\d+, (-?\d+);", ptx)
        assert not int(mask) & (1 << 24), (reg, mask)
    q_bytes = 2 * mod.NUM_Q_TILES * mod.TILE_M * mod.HEAD_DIM
    stage_bytes = 2 * 2 * (mod.TILE_N // mod.CLUSTER_CTAS) * mod.HEAD_DIM     # K half + V half, bf16
    assert sorted(set(sass.expect_tx_bytes(ptx))) == [2 * stage_bytes, 2 * q_bytes] == [65536, 131072]


def test_b13_inits_its_barriers_before_the_cluster_barrier_and_touches_the_peer_only_after():
    """Barrier init, fence.mbarrier_init.release.cluster, then the cluster barrier (every thread of
    both CTAs); only after it the pair allocates TMEM, a TMA copy lands or a thread arrives on the
    other CTA's barrier (mapa)."""
    ptx = _ptx(resolve("b13"))

    def first(pattern):
        return re.search(pattern, ptx).start()
    sync = [first(p) for p in (r"mbarrier\.init", r"fence\.mbarrier_init\.release\.cluster",
                               r"barrier\.cluster\.arrive", r"barrier\.cluster\.wait")]
    assert sync == sorted(sync)
    assert all(first(p) > sync[-1] for p in (r"tcgen05\.alloc", r"cp\.async\.bulk\.tensor", r"mapa\."))
    from harness.model.protocol_replay import ptx_init_counts
    counts = ptx_init_counts(ptx)
    mod = resolve("b13").module
    assert counts.count(mod.P_FULL_ARRIVALS) == 2 * mod.NUM_Q_TILES == counts.count(256)   # p_full, o_ready
    assert counts.count(mod.TMEM_FREE_ARRIVALS) == 1


def _mma_split(step):
    """{(operand, CTA): (first coordinate, layout)} of the 2-CTA MMAs' split, from their own
    partition of coordinate tensors: which rows of Q (of the MMA's 256), keys of K and head dims
    of V CTA v holds."""
    import cutlass
    import cutlass.cute as cute

    from ladder.contract import set_target_arch
    set_target_arch(ARCH)
    m, found = step.module, {}

    @cute.jit
    def measure():
        tiled_mma, tiled_mma_pv = m.make_tiled_mmas(cutlass.BFloat16)
        for v in cutlass.range_constexpr(m.CLUSTER_CTAS):
            for name, mma, shape, side in (("Q", tiled_mma, (m.MMA_M, m.HEAD_DIM), "A"),
                                           ("K", tiled_mma, (m.TILE_N, m.HEAD_DIM), "B"),
                                           ("Vt", tiled_mma_pv, (m.HEAD_DIM, m.TILE_N), "B")):
                coords = cute.make_identity_tensor(shape)
                thr = mma.get_slice(v)
                part = thr.partition_A(coords) if side == "A" else thr.partition_B(coords)
                found[(name, v)] = (str(part.iterator), str(part.layout))

    measure()
    return {k: (tuple(int(x) for x in re.findall(r"\d+", it)), lay) for k, (it, lay) in found.items()}


def test_b13_each_cta_holds_its_q_rows_and_half_of_every_k_and_v_tile():
    """CTA v holds rows 128v.. of each 256-row Q tile (its own TMEM lanes 0-127), keys 64v..+63
    of K and head dims 64v..+63 of V (all 128 of the other mode, 8 k-blocks of 16); the O rows
    each CTA stores (o_row_tile) are the Q rows its MMA part computed, and the cluster's rows are
    each stored once."""
    step = resolve("b13")
    mod = step.module
    split = _mma_split(step)
    for v in range(2):
        assert split[("Q", v)] == ((128 * v, 0), "((128,16),1,8):((1@0,1@1),0,16@1)")
        assert split[("K", v)] == ((64 * v, 0), "((64,16),1,8):((1@0,1@1),0,16@1)")
        assert split[("Vt", v)] == ((64 * v, 0), "((64,16),1,8):((1@0,1@1),0,16@1)")
    clusters = 3
    rows = [mod.o_row_tile(m, g, v) for m in range(clusters) for g in range(mod.NUM_Q_TILES) for v in range(2)]
    assert sorted(rows) == list(range(clusters * 4))
    for m in range(clusters):
        for g in range(mod.NUM_Q_TILES):
            for v in range(2):
                q_row = (mod.NUM_Q_TILES * m + g) * mod.MMA_M + split[("Q", v)][0][0]
                assert mod.o_row_tile(m, g, v) * mod.TILE_M == q_row


def test_b13_halves_the_kv_bytes_each_sm_loads_per_tile():
    """Per K/V tile each CTA loads its K half and its V half: a ring stage of 32 KB instead of
    b12's 64 KB, for the same 256 query rows per CTA (the layouts' own sizes)."""
    b12, b13 = resolve("b12").module, resolve("b13").module
    per_cta = {s.id: _kv_bytes_per_tile(s) // s.module.NUM_STAGES for s in (resolve("b12"), resolve("b13"))}
    assert per_cta == {"b12": 65536, "b13": 32768}
    assert b12.INFO.tile_m == b13.INFO.tile_m


def test_b13_keeps_b12s_emulated_share_and_fa4s_two_cta_share_is_the_experiment():
    """b13 changes the MMA, not the softmax: 16 of 128 exponentials emulated per row, as b12 (the
    softmax issues 128 - 16 MUFU.EX2 per row and tile, plus one for the rescale factor).
    exp:b13-two-cta-emulation is FA4's 2-CTA setting (ex2_emu_freq 10): elements 6-9, 16-19, 26-29
    of the two middle 32-element fragments, 24 of 128."""
    for spec, share, first in (("b13", 16, [12, 14, 28, 30]), ("exp:b13-two-cta-emulation", 24, [6, 8, 16, 18, 26, 28])):
        step = resolve(spec)
        mod = step.module
        emulated = [(c, i) for c in range(4) for i in range(0, 32, 2) if mod.ex2_is_emulated(c, i, 4)]
        assert [i for c, i in emulated if c == 1] == first, spec
        assert 2 * len(emulated) == mod.EX2_EMULATED_PER_TILE == share, spec
        (softmax,) = _roles_by_registers(step)[mod.SOFTMAX_REGISTERS]
        assert softmax.count("MUFU.EX2") == mod.TILE_N - mod.EX2_EMULATED_PER_TILE + 1, spec
    assert resolve("b12").module.EX2_EMULATED_PER_TILE == 16


# ---- b14: persistent clusters ------------------------------------------------------------------

def test_b14_launches_pairs_on_a_grid_sized_at_launch():
    """The grid is sized at launch (resident clusters, clamped to the work tiles), not fixed: the IR's
    launch facts fix the block and the cluster of two, and no grid. The CPU compile (the contract's
    six arguments, no max_clusters) takes FALLBACK_CLUSTERS, a B200's SM pairs."""
    from harness.compiler.compile import launch_facts
    from harness.model import units
    mod = resolve("b14").module
    assert mod.FALLBACK_CLUSTERS == units.gpu("b200").sms // mod.CLUSTER_CTAS == 74
    assert not hasattr(mod, "GRID_CTAS")
    facts = launch_facts(resolve("b14"), ARCH)
    assert "exact_grid_dim" not in facts and facts["exact_cluster_dim"] == (2, 1, 1)
    assert facts["exact_block_dim"] == (mod.THREADS, 1, 1)
    # the walk is over clusters, from the cluster's own index and count (both CTAs read the same)
    ptx = _ptx(resolve("b14"))
    assert "%clusterid.x" in ptx and "%nclusterid.x" in ptx


@pytest.mark.parametrize("capacity,n_work,clusters", [
    (74, 1, 1), (74, 45, 45), (74, 74, 74), (74, 150, 74),     # fewer tiles than clusters, as many, more
    (60, 45, 45), (60, 150, 60), (37, 300, 37), (1, 7, 1),     # a GPU holding fewer than 74 pairs
    (73, 75, 73), (71, 35, 35), (148, 512, 148)])              # odd counts; a larger GPU
def test_b14_grid_is_the_resident_clusters_clamped_to_the_work(capacity, n_work, clusters):
    mod = resolve("b14").module
    assert mod.grid_clusters(mod.check_capacity(capacity), n_work) == clusters


@pytest.mark.parametrize("capacity", [0, -2, None, 74.0, True])
def test_b14_rejects_a_capacity_that_launches_no_cluster(capacity):
    """A capacity must be a positive int (0 clusters would be an empty grid, a launch error)."""
    with pytest.raises(ValueError, match="resident clusters"):
        resolve("b14").module.check_capacity(capacity)


def _fake_gpus(monkeypatch, answers, sms=132):
    """cutlass.utils.HardwareInfo as on a host with len(answers) GPUs of ``sms`` SMs, whose driver
    answers answers[i] (a count, or an exception it raises) for device i (``None``: no driver at
    all); returns the (device, cluster size) queries it was asked."""
    import cutlass.utils
    asked = []

    class HardwareInfo:                 # what the real one does in each case
        def __init__(self, device_id=0):
            if answers is None:
                raise RuntimeError('"cuda" is an NVIDIA driver library and can only be found via system search')
            if device_id >= len(answers):
                raise ValueError(f"Device ID {device_id} is out of range for device count {len(answers)}")
            self.device_id = device_id

        def get_max_active_clusters(self, cluster_size):
            asked.append((self.device_id, cluster_size))
            answer = answers[self.device_id]
            if isinstance(answer, Exception):
                raise answer
            return answer

        def get_device_multiprocessor_count(self):
            return sms

    monkeypatch.setattr(cutlass.utils, "HardwareInfo", HardwareInfo)
    monkeypatch.setattr(resolve("b14").module, "_resident", {})
    return asked


def test_b14_capacity_without_a_gpu_is_the_fallback(monkeypatch):
    """No driver (as here), or the index past the device count: FALLBACK_CLUSTERS, and nothing is
    cached (a later call on a GPU asks the driver)."""
    mod = resolve("b14").module
    monkeypatch.setattr(mod, "_resident", {})
    assert mod.resident_clusters(0) == mod.FALLBACK_CLUSTERS and mod._resident == {}     # the real HardwareInfo
    asked = _fake_gpus(monkeypatch, None)
    assert mod.resident_clusters(0) == mod.FALLBACK_CLUSTERS and mod._resident == {} and asked == []
    asked = _fake_gpus(monkeypatch, [70])
    assert mod.resident_clusters(1) == mod.FALLBACK_CLUSTERS and mod.resident_clusters(0) == 70


def test_b14_capacity_is_the_drivers_answer_once_per_device(monkeypatch):
    """On a GPU the capacity is what the driver says fits at once for clusters of two (below 74, odd:
    not derived from the SM count), asked once per device; a driver that cannot answer gives the
    GPU's SMs / 2 (FA4's count) for that call only; an answer of 0 clusters is refused."""
    mod = resolve("b14").module
    asked = _fake_gpus(monkeypatch, [71, 37, RuntimeError("CUDA error code=201"), 0], sms=148)
    assert [mod.resident_clusters(i) for i in (0, 1, 0, 1)] == [71, 37, 71, 37]
    assert asked == [(0, mod.CLUSTER_CTAS), (1, mod.CLUSTER_CTAS)]
    assert mod.resident_clusters(2) == 74 and mod.resident_clusters(2) == 74 and len(asked) == 4
    assert 2 not in mod._resident          # the SM-count stand-in is not kept: the next call asks again
    with pytest.raises(ValueError, match="resident clusters"):
        mod.resident_clusters(3)


def test_b14_attention_launches_the_host_for_its_devices_capacity(monkeypatch):
    """``attention`` asks about q's device (resident_clusters) before the compile and launches, through
    the contract, the host with that capacity fixed: the same host (one compile) while the capacity
    is the same, another for another capacity. Run on the CPU: the GPU parts of the contract's
    launch are stubbed, the compile and launch replaced by a recorder."""
    import contextlib
    import types

    import torch

    from ladder import contract
    mod = resolve("b14").module
    capacities, asked, launches = iter([61, 61, 37]), [], []     # two calls on one GPU, one on another
    q = torch.zeros(1, 512, 1, 128, dtype=torch.bfloat16)
    monkeypatch.setattr(mod, "resident_clusters", lambda index: asked.append(index) or next(capacities))
    monkeypatch.setattr(contract, "validate_inputs", lambda info, q, k, v, scale: 0.125)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (10, 0))
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: types.SimpleNamespace(cuda_stream=0))
    monkeypatch.setattr(contract, "compiled_for",
                        lambda info, host, arch, args: (lambda *a: launches.append((info.id, host, arch, len(a)))))
    for _ in range(3):
        mod.attention(q, q, q)
    assert asked == [q.device.index] * 3
    assert launches == [("b14", mod.host_for(61), "sm_100a", 6)] * 2 + [("b14", mod.host_for(37), "sm_100a", 6)]
    assert mod.host_for(61) is not mod.host_for(37) and mod.host_for(61) is not mod.host


def test_b14_host_launches_twice_the_clamped_capacity_and_the_same_kernel(tmp_path):
    """Compiled as ``attention`` compiles it (host_for a capacity of 60) and as the CPU compile does
    (``host``, six arguments: FALLBACK_CLUSTERS), the IR launches 2 * min(capacity, work tiles)
    CTAs, the clamp computed on the host at launch from the tensors' shapes; and the kernel's SASS
    is the CPU compile's, so the SASS this repo reads is the kernel that runs."""
    import collections
    import os
    import subprocess
    import sys

    from harness.core.paths import ROOT
    code = ("from ladder import contract; from harness.core.steps import resolve; "
            "m = resolve('b14').module; contract.compile_host(m.host, 'sm_100a'); "
            "contract.compile_host(m.host_for(60), 'sm_100a')")
    env = {**os.environ, "CUTE_DSL_KEEP": "ir,cubin", "CUTE_DSL_DUMP_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, cwd=ROOT)
    mod = resolve("b14").module
    for name, capacity in (("host", mod.FALLBACK_CLUSTERS), ("host_for_capacity", 60)):
        (ir,) = tmp_path.glob(f"cute_dsl_cutlass_{name}_Fake*_clean.mlir")
        text = ir.read_text()
        clamp = re.search(rf"(%\w+) = arith\.minsi (%\w+, %c{capacity}_i32|%c{capacity}_i32, %\w+) : i32", text)
        grid = re.search(rf"(%\w+) = arith\.muli {clamp.group(1)}, %c2_i32 : i32", text)
        assert re.search(rf"gridDim = \({grid.group(1)}, %c1_i32, %c1_i32\)", text), name
    (cubin,) = tmp_path.glob("cutlass_host_for_capacity_*.cubin")
    real, fake = sass.read_cubin(cubin), compile_step(resolve("b14"), ARCH).sass
    assert collections.Counter(real.opcodes) == collections.Counter(fake.opcodes)
    assert real.registers == fake.registers


def test_b14_stores_o_from_registers_as_b13():
    """Persistence is the one change: O leaves as in b13, each softmax thread storing its row from
    registers to global memory (16-byte stores, a row is 256 bytes: 16 of them), once per work
    tile at that tile's coordinates. No TMA store, no O tile in shared memory and no epilogue warp
    (FA4 has them; they are not this step's change): the shared memory and the warp roles are b13's."""
    step, b13 = resolve("b14"), resolve("b13")
    report, base = compile_step(step, ARCH), compile_step(b13, ARCH)
    ptx = report.ptx.read_text()
    assert not re.search(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared", ptx)
    assert report.sass.mechanisms["UTMASTG"] == 0 and "fence.proxy.async.shared::cta" not in ptx
    assert report.sass.opcodes["STG.E.128"] == base.sass.opcodes["STG.E.128"] == step.module.HEAD_DIM * 2 // 16
    assert report.sass.opcodes.get("STS.128", 0) == 0
    assert step.info.smem_bytes == b13.info.smem_bytes
    assert step.info.extra["warp_roles"] == b13.info.extra["warp_roles"]


def _cluster_tiles(mod, cluster, n_clusters, batch, heads, m_blocks):
    return [mod.tile_coords(cluster + i * n_clusters, m_blocks, heads)
            for i in range(mod.tiles_of(cluster, n_clusters, m_blocks * heads * batch))]


@pytest.mark.parametrize("capacity", [74, 60, 37, 1])
@pytest.mark.parametrize("batch,heads,m_blocks", [(3, 5, 7), (1, 1, 1), (7, 3, 1), (1, 100, 1), (8, 16, 4), (4, 16, 8)])
def test_b14_scheduler_takes_every_tile_once(batch, heads, m_blocks, capacity):
    """The launched clusters (grid_clusters: the capacity, at most one per tile) walk the work tiles
    c, c + n, ...: every (m-block, head, batch) is taken by exactly one cluster (shapes that do not
    divide the clusters, fewer tiles than resident clusters, a GPU holding fewer than 74 pairs, odd
    counts), every launched cluster takes at least one, the m-block runs fastest, and expanded by
    (Q tile, CTA) every 128-row block of every (batch, head) is stored once."""
    mod = resolve("b14").module
    n_work = m_blocks * heads * batch
    n_clusters = mod.grid_clusters(capacity, n_work)
    walks = [_cluster_tiles(mod, c, n_clusters, batch, heads, m_blocks) for c in range(n_clusters)]
    taken = [t for walk in walks for t in walk]
    assert sorted(taken) == sorted((m, h, b) for m in range(m_blocks) for h in range(heads) for b in range(batch))
    assert min(len(w) for w in walks) >= 1 and max(len(w) for w in walks) == -(-n_work // n_clusters)
    assert walks[0][:1] == [(0, 0, 0)]
    if m_blocks > 1:
        assert mod.tile_coords(1, m_blocks, heads) == (1, 0, 0)               # m-block fastest
    rows = sorted((b, h, mod.o_row_tile(m, g, v)) for m, h, b in taken
                  for g in range(mod.NUM_Q_TILES) for v in range(mod.CLUSTER_CTAS))
    assert rows == [(b, h, r) for b in range(batch) for h in range(heads) for r in range(4 * m_blocks)]


@pytest.mark.parametrize("sid", ["b13", "b14"])
def test_b13_on_softmax_stores_nothing_to_local_memory(sid):
    """In the 2-CTA kernels the softmax's 192 registers hold its row under ptxas 13.4: it stores
    nothing to local memory (ptxas 12.9 parked a register pair per tile). b14 addresses its O rows per work tile, after the o_full wait, as b13
    does after its loop, so the addresses are not live through the softmax."""
    step = resolve(sid)
    (softmax,) = _roles_by_registers(step)[step.module.SOFTMAX_REGISTERS]
    assert softmax.count("MUFU.EX2") > 0                  # the region is the softmax's
    assert softmax.count("STL") == 0
