"""What the Hopper steps claim, proven on the CPU from layouts, PTX and launch metadata."""

import re

import pytest

from harness.compiler.compile import compile_step
from harness.compiler.sass import expect_tx_bytes, p_v_wait_window, wgmma_descriptor_layout_types
from harness.compiler.smem_budget import SMEM_PER_CTA_LIMIT, shared_storage_bytes
from harness.core.markers import without_markers
from harness.core.steps import resolve, track_steps
from harness.model.smem_model import store_costs

HOPPER = [s for s in track_steps("hopper") if s.id.startswith("h")]
SWIZZLE_128B, INTERLEAVE = 1, 0


def _costs(step_id):
    return {c.name: c for c in store_costs(resolve(step_id))}


def test_h03_swizzle_makes_every_thread_store_minimal_where_h02_is_not():
    h02, h03 = _costs("h02"), _costs("h03")
    for name in ("Q", "K", "V"):
        assert not h02[name].is_minimal, f"h02 {name}: {h02[name]}"
        assert h02[name].wavefronts == 8 * h02[name].minimal     # 8-way in each of 4 quarter-warps
        assert h03[name].is_minimal, f"h03 {name}: {h03[name]}"
    # P's stores come from the accumulator fragment: whole 128-byte rows per warp, both steps.
    assert h02["P"].is_minimal and h03["P"].is_minimal


def test_step01_p_store_is_conflicted_as_its_writeup_says():
    costs = _costs("01")
    assert costs["P"].wavefronts == 8 and costs["P"].minimal == 1
    assert all(costs[n].is_minimal for n in ("Q", "K", "V"))


@pytest.mark.parametrize("step", [s for s in HOPPER if s.number >= 4], ids=lambda s: s.id)
def test_tma_steps_issue_no_thread_stores_of_qkv(step):
    assert set(_costs(step.id)) <= {"P"}


def _descriptor_pairs(step_id):
    report = compile_step(resolve(step_id), "sm_90a")
    types = wgmma_descriptor_layout_types(report.ptx.read_text())
    return list(zip(types[0::2], types[1::2], strict=True))      # (A, B) per wgmma, in program order


def test_h02_descriptors_are_unswizzled():
    pairs = _descriptor_pairs("h02")
    assert len(pairs) == 16 and set(pairs) == {(INTERLEAVE, INTERLEAVE)}


# The stage-first experiments build each k-block's descriptor as the stage's plus an offset: the
# reader must follow that add to the layout bits (harness/compiler/sass.py).
STAGE_FIRST = [resolve(f"exp:{base}-stage-first-operands") for base in ("h08", "h14")]


@pytest.mark.parametrize("step", [s for s in HOPPER if s.number >= 3] + STAGE_FIRST, ids=lambda s: s.id)
def test_descriptors_use_the_128b_swizzle_for_q_k_v(step):
    types = wgmma_descriptor_layout_types(compile_step(step, "sm_90a").ptx.read_text())
    s_gemm = list(zip(types[0:16:2], types[1:16:2], strict=True))
    assert set(s_gemm) == {(SWIZZLE_128B, SWIZZLE_128B)}      # Q and K
    if step.number < 6:
        pv_gemm = list(zip(types[16::2], types[17::2], strict=True))
        assert len(pv_gemm) == 8 and set(pv_gemm) == {(INTERLEAVE, SWIZZLE_128B)}   # P interleaved, V swizzled
    else:   # P from registers: V's descriptor only (h12: more GEMMs in program order, all swizzled)
        assert types[16:] == [SWIZZLE_128B] * 8 or (step.number >= 12 and set(types[16:]) == {SWIZZLE_128B})


def test_h05_two_warpgroups_share_each_kv_tile():
    h04, h05 = resolve("h04"), resolve("h05")
    r04, r05 = compile_step(h04, "sm_90a"), compile_step(h05, "sm_90a")
    assert r04.threads_per_cta == 128 and r05.threads_per_cta == 256    # from the PTX .reqntid
    assert h05.info.tile_m == 2 * h04.info.tile_m == 128
    assert h05.module.NUM_WARPGROUPS * h05.module.WGMMA_M == h05.info.tile_m

    def kv_bytes_per_query_row(info):
        return 2 * info.tile_n * info.head_dim * 2 / info.tile_m      # K and V tile, bf16

    assert kv_bytes_per_query_row(h05.info) == kv_bytes_per_query_row(h04.info) / 2
    # The same instruction mix per thread: each warpgroup runs h04's loop on its own rows.
    assert r05.sass.mechanisms["HGMMA"] == r04.sass.mechanisms["HGMMA"]
    # P's barrier spans one warpgroup (a named barrier of 128 threads); h04's spans the CTA.
    named = re.compile(r"\bbar(?:rier)?\.sync(?:\.aligned)?\s+\S+,\s*128;")
    assert named.search(r05.ptx.read_text()) and not named.search(r04.ptx.read_text())


def test_h06_p_stays_in_registers():
    h05, h06 = compile_step(resolve("h05"), "sm_90a"), compile_step(resolve("h06"), "sm_90a")
    # P V reads A from registers: the RS form of HGMMA, absent before.
    assert h05.sass.mechanisms["HGMMA.RS"] == 0 and h06.sass.mechanisms["HGMMA.RS"] == 8
    # No shared-memory store of P is left (h05's were its only STS).
    assert h05.sass.mechanisms["STS"] > 0 and h06.sass.mechanisms["STS"] == 0
    assert resolve("h06").info.smem_bytes == resolve("h05").info.smem_bytes - 2 * 128 * 128


@pytest.mark.parametrize("step", HOPPER, ids=lambda s: s.id)
def test_smem_budget_from_the_shared_storage(step):
    info = step.info
    m = step.module
    if not hasattr(m, "make_shared_storage"):            # h02-h05: Q, K, V and P tiles
        tiles = m.TILE_M * m.HEAD_DIM + 2 * m.TILE_N * m.HEAD_DIM + m.TILE_M * m.TILE_N
        assert info.smem_bytes == 2 * tiles <= SMEM_PER_CTA_LIMIT
        return
    # From h06 on: the struct the kernel allocates (tiles, stages, mbarriers, alignment).
    struct = shared_storage_bytes(step)
    assert info.smem_bytes <= struct <= SMEM_PER_CTA_LIMIT
    assert struct - info.smem_bytes <= 2048, "the metadata's smem_bytes should be the tiles"


@pytest.mark.parametrize("step", [s for s in HOPPER if s.number >= 4], ids=lambda s: s.id)
def test_every_expect_tx_announces_what_one_copy_delivers(step):
    """An mbarrier armed for more bytes than its TMA copies deliver never completes (h08's first
    version announced a whole ring of K stages and hung): each count is one Q tile, one K or V
    tile, or one K + V pair, never more."""
    m = step.module
    kv_tile = 2 * m.TILE_N * m.HEAD_DIM
    tile_bytes = {2 * m.TILE_M * m.HEAD_DIM, kv_tile, 2 * kv_tile}
    counts = expect_tx_bytes(compile_step(step, "sm_90a").ptx.read_text())
    assert counts and set(counts) <= tile_bytes, (sorted(set(counts)), sorted(tile_bytes))


def test_h07_specializes_warps_and_moves_registers():
    r06, r07 = compile_step(resolve("h06"), "sm_90a"), compile_step(resolve("h07"), "sm_90a")
    assert r07.threads_per_cta == 384 and r06.threads_per_cta == 256       # from the PTX .reqntid
    assert r06.sass.mechanisms["USETMAXREG"] == 0
    assert r07.sass.mechanisms["USETMAXREG"] >= 2                          # one per role
    ptx = r07.ptx.read_text()
    m = resolve("h07").module
    assert re.search(rf"setmaxnreg\.dec\.sync\.aligned\.u32\s+{m.PRODUCER_REGISTERS};", ptx)
    assert re.search(rf"setmaxnreg\.inc\.sync\.aligned\.u32\s+{m.CONSUMER_REGISTERS};", ptx)
    # The per-SM register file holds the split: 1 producer + 2 consumer warpgroups.
    assert 128 * m.PRODUCER_REGISTERS + 256 * m.CONSUMER_REGISTERS <= 65536


def test_h08_has_a_multi_stage_ring_within_the_smem_budget():
    h08 = resolve("h08")
    assert h08.info.extra["kv_stages"] == h08.module.NUM_STAGES > 1
    struct = shared_storage_bytes(h08)
    ring = h08.info.extra["kv_stages"] * 2 * (2 * h08.module.TILE_N * h08.module.HEAD_DIM)
    assert ring < struct <= SMEM_PER_CTA_LIMIT


def _sass_lines(step_id):
    return [line.split("*/", 1)[1].strip() for line in compile_step(resolve(step_id), "sm_90a").sass.text.splitlines()
            if re.match(r"\s+/\*[0-9a-f]{4,}\*/", line)]


def test_h09_hands_the_turn_over_between_issuing_qk_and_waiting_for_it():
    """Ping-pong in the SASS: after the QK^T wgmmas (descriptor A) and before their wait, a
    BAR.ARV on the other warpgroup's barrier; a BAR.SYNC on its own barrier before the P V wgmmas
    (register A). The barriers are 256-thread named barriers, not the CTA barrier 0."""
    h09 = resolve("h09")
    assert 0 not in h09.info.extra["pingpong_barriers"]
    assert h09.module.PINGPONG_THREADS == 2 * h09.module.WARPGROUP_THREADS
    lines = _sass_lines("h09")
    last_qk = max(i for i, op in enumerate(lines) if op.startswith("HGMMA") and re.search(r",\s*gdesc\[\w+\],", op)
                  and "gsb0" in op)
    wait = next(i for i in range(last_qk, len(lines)) if lines[i].startswith("WARPGROUP.DEPBAR"))
    assert any(op.startswith("BAR.ARV") and "0x100" in op for op in lines[last_qk:wait])
    first_pv = next(i for i, op in enumerate(lines) if re.match(r"HGMMA\.\S+\s+R\d+,\s*R\d+,\s*gdesc", op))
    turn = max(i for i in range(first_pv) if lines[i].startswith("BAR.SYNC"))
    assert "0x100" in lines[turn] and not re.search(r"BAR\.SYNC\S*\s+0x0\b", lines[turn])
    assert not any(op.startswith("BAR.ARV") for op in _sass_lines("h08"))


def test_h10_computes_each_exponential_with_one_ffma_and_one_ex2():
    """The library exp's range reduction goes: per score element h10's main loop has one MUFU.EX2
    (plus one per row for the rescale), about one FFMA (the folded scale), and less than half of
    h09's instructions."""
    from harness.compiler.softmax_budget import budget
    h09, h10 = budget(resolve("h09"), "sm_90a"), budget(resolve("h10"), "sm_90a")
    assert not h10["ambiguous"] and not h09["ambiguous"]
    assert h10["counts"]["MUFU.EX2"] == h10["elements_per_thread"] + h10["rows_per_thread"]
    assert h10["per_element"]["FFMA"] <= 1.1 < h09["per_element"]["FFMA"]
    assert h10["total_per_element"] < 0.5 * h09["total_per_element"] + 1


@pytest.mark.parametrize("base", ["h08", "h14"])
def test_stage_first_operands_add_one_immediate_per_k_block(base):
    """exp:<base>-stage-first-operands slices K and V by ring stage before k-block: each HGMMA's
    descriptor is then the stage's 64-bit descriptor plus an immediate (one UIADD3.64), as in FA4's
    loop, where the step builds it from halves (UIADD3 + UMOVs). The K/V loop gets shorter."""
    from harness.compiler.softmax_budget import budget
    step, exp = budget(resolve(base), "sm_90a"), budget(resolve(f"exp:{base}-stage-first-operands"), "sm_90a")
    assert not step["ambiguous"] and not exp["ambiguous"]
    ops, exp_ops = step["opcodes"], exp["opcodes"]
    assert ops.get("UIADD3.64", 0) == 0
    assert exp_ops.get("UIADD3.64", 0) >= 14          # 2 GEMMs x 8 k-blocks; each first one adds nothing
    assert exp_ops.get("UMOV", 0) * 4 < ops["UMOV"]
    assert exp["total"] < step["total"]


def test_h11_loads_k_and_v_on_their_own_barriers():
    """Four barrier families (k_full, k_empty, v_full, v_empty), each expect-tx one tile (a K or a V,
    never the pair), and K_{j+1}'s copy issued before V_j's in the producer loop."""
    from harness.model import protocol_source
    m = resolve("h11").module
    proto = protocol_source.extract(m, 3)
    assert {b.name for b in proto.counts} == {"q_full", "k_full", "k_empty", "v_full", "v_empty"}
    tile = 2 * m.TILE_N * m.HEAD_DIM
    counts = expect_tx_bytes(compile_step(resolve("h11"), "sm_90a").ptx.read_text())
    assert set(counts) == {2 * m.TILE_M * m.HEAD_DIM, tile}
    producer = [op for op in proto.warps[0] if op.kind == "copy"]
    order = [op.bar.name for op in producer]
    assert order == ["q_full", "k_full", "k_full", "v_full", "k_full", "v_full", "v_full"]


def test_h12_issues_both_gemms_of_a_turn_before_waiting_for_the_first():
    """Intra-warpgroup overlap in the SASS, in the loop: the QK^T wgmmas (descriptor A), then the
    P V wgmmas (register A) with no WARPGROUP.DEPBAR in between, then the hand-over (BAR.ARV), then a
    wait leaving one group in flight (DEPBAR.LE 1) before the one leaving none (DEPBAR.LE 0). h11
    waits for everything (LE 0) after every GEMM."""
    lines = _sass_lines("h12")
    pv = [i for i, op in enumerate(lines) if re.match(r"HGMMA\.\S+\s+R\d+,\s*R\d+,\s*gdesc", op)]
    qk = [i for i, op in enumerate(lines) if re.match(r"HGMMA\.\S+\s+R\d+,\s*gdesc", op)]
    # the loop's P V: the one group of P V wgmmas that follows a group of QK^T wgmmas directly
    first_pv = next(i for i in pv if any(q < i for q in qk) and
                    not any(lines[k].startswith("WARPGROUP.DEPBAR") for k in range(max(q for q in qk if q < i), i)))
    last_qk = max(q for q in qk if q < first_pv)
    assert not any(op.startswith("WARPGROUP.DEPBAR") for op in lines[last_qk:first_pv])
    waits = [i for i in range(first_pv, len(lines)) if lines[i].startswith("WARPGROUP.DEPBAR")]
    assert re.search(r"0x1\s*;?$", lines[waits[0]]) and re.search(r"0x0\s*;?$", lines[waits[1]]), \
        [lines[w] for w in waits[:2]]
    assert any(op.startswith("BAR.ARV") for op in lines[first_pv:waits[0]])
    assert not any(op.startswith("WARPGROUP.DEPBAR") and re.search(r"0x1\s*;?$", op) for op in _sass_lines("h11"))


def _writes_to_the_p_v_operand_while_it_may_run(lines) -> tuple[int, int]:
    """(registers that an RS wgmma reads its A operand, P, from; non-wgmma writes to them between
    the loop's DEPBAR.LE 1 and the DEPBAR.LE 0 after it, while the turn's P V may still run)."""
    a_regs = set()
    for op in lines:
        m = re.match(r"HGMMA\.\S+\s+R\d+,\s*R(\d+),\s*gdesc", op)
        if m:
            a_regs |= {int(m.group(1)) + k for k in range(4)}      # 8 bf16 = 4 registers per k-block
    one, zero = p_v_wait_window(lines)
    dest = re.compile(r"(?:@!?U?P\d\s+)?(?!HGMMA|WARPGROUP)\S+\s+R(\d+)\b")
    return len(a_regs), sum(1 for op in lines[one:zero] if (m := dest.match(op)) and int(m.group(1)) in a_regs)


@pytest.mark.parametrize("sid", ["h12", "h13", "h14"])
def test_no_register_of_an_in_flight_p_v_is_written(sid):
    """P V reads P from registers (RS wgmma) asynchronously, until wait_group says it is done, and
    PTX leaves it to the program not to write them earlier; ptxas catches some such writes (it then
    serializes the wgmmas, C7514) but not all (the broken copy below), so the program order must keep
    P's conversion behind wait_group(0). In the SASS: no write to an A-operand register of the loop's
    HGMMA.RS between the wait that leaves P V in flight and the wait for it."""
    a_regs, writes = _writes_to_the_p_v_operand_while_it_may_run(_sass_lines(sid))
    assert a_regs == 32 and writes == 0, (sid, a_regs, writes)   # P: 64 bf16 per thread = 32 registers


# h12 with a second bf16 P fragment: the softmax converts P_j into it with no wait for P V(j-1),
# the next iteration waits for P V at its top and moves the fragment into tOrP under QK^T.
SECOND_P_FRAGMENT = (
    ("    tOrP = cute.make_rmem_tensor_like(_acc_as_a_fragment(acc_S), dtype)\n",
     "    tOrP = cute.make_rmem_tensor_like(_acc_as_a_fragment(acc_S), dtype)\n"
     "    tOrP_next = cute.make_rmem_tensor_like(_acc_as_a_fragment(acc_S), dtype)\n"),
    ("\n    tOrP.store(_acc_as_a_fragment(acc_S).load().to(dtype))\n",
     "\n    tOrP_next.store(_acc_as_a_fragment(acc_S).load().to(dtype))\n"),
    ("        # wait: K_j landed", "        warpgroup.wait_group(0)\n        # wait: K_j landed"),
    ("        # O rescaled to tile j-1's max", "        tOrP.store(tOrP_next.load())\n        # O rescaled to tile j-1's max"),
    ("        warpgroup.wait_group(0)\n        # arrive: this warp's P V is done", "        # arrive: this warp's P V is done"),
    ("        tOrP.store(_acc_as_a_fragment(acc_S).load().to(dtype))\n",
     "        tOrP_next.store(_acc_as_a_fragment(acc_S).load().to(dtype))\n"),
    ("    # ---- Last half tile", "    warpgroup.wait_group(0)\n    tOrP.store(tOrP_next.load())\n    # ---- Last half tile"),
)


def test_a_second_p_fragment_written_under_p_v_is_caught(tmp_path):
    """The check above on a broken copy of h12 (SECOND_P_FRAGMENT) that keeps P_j in a second
    register fragment so that the softmax need not wait for P V(j-1): register tensors are values,
    the "move" into tOrP is no instruction, and the second fragment compiles to the very registers
    P V(j-1) reads; ptxas compiles it without a word (no wgmma serialization either), and the check
    counts the conversion's writes to them while P V may still run."""
    source = without_markers(resolve("h12").path.read_text())
    for old, new in SECOND_P_FRAGMENT:
        assert source.count(old) == 1, f"h12 changed: update this test ({old!r})"
        source = source.replace(old, new)
    broken = tmp_path / "h12_second_p_fragment.py"
    broken.write_text(source)
    assert _writes_to_the_p_v_operand_while_it_may_run(_sass_lines(str(broken)))[1] > 0


@pytest.mark.parametrize("sid", ["h12", "h13", "h14"])
def test_o_is_rescaled_only_while_no_wgmma_uses_it(sid):
    """Program order in the consumer's loop (the kernel source): the softmax of tile j runs on acc_S
    alone; P's conversion comes after wait_group(0), when P V(j-1) no longer reads tOrP; O's
    rescale comes in the next turn, after S_{j+1}'s QK^T is issued (it does not touch acc_O) and
    before a wgmma fence and the P V that accumulates into O."""
    import inspect
    src = inspect.getsource(resolve(sid).module.consumer)
    loop = src[src.index("for n_block in range(1, n_blocks):"):src.index("# ---- Last half tile")]
    rescale = "O_mn[r, None] = O_mn[r, None].load() * row_scale[r]"
    qk_commit = loop.index("warpgroup.commit_group()")
    pv = loop.index("cute.gemm(tiled_mma_pv")
    assert qk_commit < loop.index(rescale) < loop.rindex("warpgroup.fence()", 0, pv) < pv
    assert loop.count(rescale) == 1
    assert loop.index("warpgroup.wait_group(1)") < loop.index("online_softmax(") < loop.index("warpgroup.wait_group(0)")
    assert "tOrP.store(" in loop[loop.index("warpgroup.wait_group(0)"):]
    assert "O_mn" not in loop[loop.index("online_softmax("):]


def test_h13_stores_o_through_smem_with_one_tma_store():
    """The epilogue in the SASS, in order: the stmatrix stores of O, the async-proxy fence, the
    256-thread epilogue barrier (not barrier 0), the TMA stores (two 64-column boxes of the 128B
    swizzle), then the wait for the TMA's smem reads before the CTA exits. No per-thread STG."""
    m = resolve("h13").module
    lines = _sass_lines("h13")
    stsm = [i for i, op in enumerate(lines) if op.startswith("STSM")]
    assert len(stsm) == 8                      # 64 bf16 per thread, 8 per stmatrix.x4
    fence = next(i for i in range(stsm[-1], len(lines)) if lines[i].startswith("FENCE.VIEW.ASYNC.S"))
    barrier = next(i for i in range(fence, len(lines)) if lines[i].startswith("BAR.SYNC"))
    assert re.search(rf"\b{m.EPILOGUE_BARRIER:#x},\s*{m.EPILOGUE_THREADS:#x}\b", lines[barrier]), lines[barrier]
    stores = [i for i in range(barrier, len(lines)) if lines[i].startswith("UTMASTG")]
    assert len(stores) == 2
    wait = next(i for i in range(stores[-1], len(lines)) if lines[i].startswith("DEPBAR"))
    assert next(i for i in range(wait, len(lines)) if lines[i].startswith("EXIT")) > wait
    assert not any(op.startswith("STG") for op in lines)
    assert sum(op.startswith("STG") for op in _sass_lines("h12")) == 32


def test_h14_reuses_its_o_tile_only_after_the_last_store_has_read_it():
    """h14's epilogue in the SASS: the wait for the previous TMA store's read of sO
    (cp.async.bulk.wait_group.read 0: DEPBAR.LE SB0) comes before the epilogue barrier that lets
    the consumers write sO (stmatrix), and the store of this tile is not waited for in the tile
    loop (its read is waited for by the next epilogue) but once more before the CTA's last EXIT."""
    m = resolve("h14").module
    lines = _sass_lines("h14")
    epilogue = f"{m.EPILOGUE_BARRIER:#x}, {m.EPILOGUE_THREADS:#x}"
    stsm = next(i for i, op in enumerate(lines) if op.startswith("STSM"))
    first_barrier = max(i for i in range(stsm) if lines[i].startswith("BAR.SYNC") and epilogue in lines[i])
    assert any(lines[i].startswith("DEPBAR.LE SB0") for i in range(first_barrier - 4, first_barrier))
    stores = [i for i, op in enumerate(lines) if op.startswith("UTMASTG")]
    exits = [i for i, op in enumerate(lines) if re.sub(r"^@!?P\w+\s+", "", op).startswith("EXIT")]
    waits = [i for i, op in enumerate(lines) if op.startswith("DEPBAR.LE SB0")]
    assert len(waits) == 2 and waits[0] < first_barrier < stores[0] < waits[1] < exits[-1]
    # the second wait is on the way out (behind the other warps' predicated EXIT), not behind each
    # store in the tile loop (as exp:h14-o-in-q-tile has it, where the next Q waits for the read)
    assert next(i for i in exits if i > stores[-1]) < waits[1]


@pytest.mark.parametrize("sid", ["01", *(s.id for s in HOPPER), "exp:h14-tile-n-176"])
def test_the_row_max_chains_cover_whole_rows(sid):
    """``_row_max`` folds a thread's part of a row in four chains, stepping by 4: the part must be a
    multiple of 4 elements. A row of the m16n8 (mma.sync) and m64nN (wgmma) accumulators is spread
    over a quad of 4 lanes, so a thread holds TILE_N / 4 of it: TILE_N must be a multiple of 16."""
    step = resolve(sid)
    assert "def _row_max(row, init):" in step.path.read_text()
    assert (step.info.tile_n // 4) % 4 == 0 and step.info.tile_n % 4 == 0, step.info.tile_n


def test_h14_static_scheduler_covers_every_tile_once():
    """CTA c of n takes work tiles c, c + n, ...; tile -> (m_block, head, batch) with the query
    block fastest. For work counts that do not divide the SM count (and smaller than it), every
    (m_block, head, batch) is taken by exactly one CTA, and consecutive tiles share (batch, head)."""
    m = resolve("h14").module
    for m_blocks, heads, batch in ((32, 16, 4), (3, 5, 7), (1, 1, 1), (64, 16, 2), (7, 3, 1), (3, 100, 1)):
        work = m_blocks * heads * batch
        seen = []
        for cta in range(m.SM_COUNT):
            for i in range(m.tiles_of(cta, m.SM_COUNT, work)):
                seen.append(m.tile_coords(cta + i * m.SM_COUNT, m_blocks, heads))
        assert sorted(seen) == sorted((mb, h, b) for b in range(batch) for h in range(heads) for mb in range(m_blocks))
        assert [m.tile_coords(t, m_blocks, heads) for t in range(2)][0][1:] == (0, 0)
    assert m.tile_coords(1, 32, 16) == (1, 0, 0) and m.tile_coords(32, 32, 16) == (0, 1, 0)


def test_h14_is_persistent():
    """One CTA per SM of the H200 (units.py's count), the grid read back in the kernel (%nctaid.x),
    and per CTA a loop over work tiles: the protocol model walks Q's load, the K/V tiles and the
    O store once per work tile, and sQ's empty barrier hands it from one tile's O to the next Q."""
    from harness.model import protocol_source, units
    m = resolve("h14").module
    assert m.SM_COUNT == units.gpu("h200").sms
    assert "%nctaid.x" in compile_step(resolve("h14"), "sm_90a").ptx.read_text()
    for tiles in (1, 3):
        proto = protocol_source.extract(m, 2, n_tiles=tiles)
        q_loads = [op for op in proto.warps[0] if op.kind == "copy" and op.bar.name == "q_full"]
        q_free = [op for op in proto.warps[0] if op.kind == "wait" and op.bar.name == "q_empty"]
        stores_done = [op for op in proto.warps[m.STORE_WARP] if op.kind == "arrive" and op.bar.name == "q_empty"]
        assert len(q_loads) == len(q_free) == len(stores_done) == tiles
        assert [op.value for op in q_free] == [(i % 2) ^ 1 for i in range(tiles)]


def test_a_numerics_case_gives_h14_several_tiles_per_cta_with_an_odd_kv_tile_count():
    """The GPU numerics (tests/test_gpu.py, `ladder table`) reach h14's multi-tile path where the
    ring wraps differently in each work tile: more work tiles than CTAs, not a multiple of them,
    and an odd number of K/V tiles."""
    from harness.core.workloads import NUMERICS_CASES
    h14 = resolve("h14")
    mod, info = h14.module, h14.info

    def covers(case):
        batch, seqlen, heads, _ = case.shape_for(info)
        tiles, n_blocks = (seqlen // mod.TILE_M) * heads * batch, seqlen // mod.TILE_N
        return tiles > mod.SM_COUNT and tiles % mod.SM_COUNT and n_blocks % 2

    assert any(covers(case) for case in NUMERICS_CASES)
