"""Generated blocks of hardware counters (``ladder profile --record``) and the shared-memory model
beside them: ``profile <step>``, ``profiles <a> <b> ...``, ``smem <step> ...``, ``stores <step> ...``,
``banks <step> <store>``."""

from __future__ import annotations

import dataclasses

from harness.compiler.compile import compile_step
from harness.core import experiments, results
from harness.core.steps import resolve
from harness.core.workloads import bench_shape
from harness.gpu.profile import FA4, METRICS, fa4_fingerprint, stall_reasons
from harness.model.smem_model import BANK_BYTES, BANKS, WARP, kernel_stores, store_costs, stores_alone
from harness.report.tables import built_with, markdown_table


@dataclasses.dataclass(frozen=True)
class _Stock:
    """Stands in for a Step where a profile table names stock FA4 (profile.FA4) as a column."""
    id: str


def _current_profile(data: dict, step_id: str):
    """(step, profile) recorded in one results file, or (step, None) if absent; a profile of an
    earlier version of the kernel (results.stale_reason; for FA4, another flash-attn-4 or CuTe
    DSL release) comes back as the string "stale"."""
    if step_id == FA4:
        prof = data.get("profiles", {}).get(FA4)
        return _Stock(FA4), ("stale" if prof and prof["fingerprint"] != fa4_fingerprint() else prof)
    step = resolve(step_id)
    prof = data.get("profiles", {}).get(step.id)
    if prof and results.is_stale(step, prof):
        return step, "stale"
    return step, prof


def _profile_rows(metrics: dict, stall_names=None) -> list[tuple[str, str]]:
    """(counter, value) rows of one profile: the fixed counters, smem conflict shares, then the
    warp stall reasons (the largest ones, or exactly ``stall_names``)."""
    # A counter added to METRICS after a profile was recorded is left out of that profile's table.
    rows = [(meaning, "n/a" if metrics[m] is None else f"{metrics[m]:,.1f}")
            for m, meaning in METRICS.items() if m in metrics]
    for op in ("ld", "st"):
        waves = metrics.get(f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum")
        conflicts = metrics.get(f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{op}.sum")
        if waves and conflicts is not None:
            rows.append((f"smem {'load' if op == 'ld' else 'store'} conflict share (conflicts / wavefronts)",
                         f"{conflicts / waves:.3f}"))
    stalls = dict(stall_reasons(metrics, top=len(metrics)))
    names = stall_names if stall_names is not None else [r for r, _ in stall_reasons(metrics)]
    rows += [(f"warps stalled on {r} per issued instruction",
              f"{stalls[r]:.2f}" if r in stalls else "n/a") for r in names]
    return rows


def profile_block(step_id: str) -> str:
    lines = []
    for data in results.all_recorded().values():
        step, prof = _current_profile(data, step_id)
        if not prof:
            continue
        if prof == "stale":
            lines.append(f"The recorded profile of {step.id} measured another version of the kernel (its "
                         "fingerprint differs): to be re-profiled.\n")
            continue
        p = prof["provenance"]
        lines.append(markdown_table([list(r) for r in _profile_rows(prof["metrics"])], ["counter", "value"]))
        lines.append(f"\nseqlen {prof['seqlen']} (bench shape), {p['gpu']}, {p['date'][:10]}, `{p['command']}`; "
                     f"{built_with([prof])}.\n")
    return "\n".join(lines) if lines else "No recorded profile yet.\n"


def profiles_block(*step_ids: str) -> str:
    """Several steps' (or experiments') recorded profiles side by side, one column each. The stall
    rows are the union of each profile's largest reasons, so every column shows the same ones."""
    lines = []
    for gpu, data in results.all_recorded().items():
        found = [_current_profile(data, s) for s in step_ids]
        missing = [step.id for step, prof in found if not prof or prof == "stale"]
        if len(missing) == len(found):
            continue
        if missing:
            lines.append(f"{gpu}: no current profile of {', '.join(missing)} yet: to be profiled.\n")
            continue
        names = []
        for _, prof in found:
            names += [r for r, _ in stall_reasons(prof["metrics"]) if r not in names]
        columns = [dict(_profile_rows(prof["metrics"], names)) for _, prof in found]
        labels = list(dict.fromkeys(label for col in sorted(columns, key=len, reverse=True) for label in col))
        table = [[label, *(col.get(label, "n/a") for col in columns)] for label in labels]
        lines.append(markdown_table(table, ["counter", *(f"{step.id}" for step, _ in found)]))
        seqlens = sorted({prof["seqlen"] for _, prof in found})
        dates = sorted({prof["provenance"]["date"][:10] for _, prof in found})
        beside = [prof["beside"] for _, prof in found if prof.get("beside")]
        runs = (f"FA4's column comes from the same process and ncu run as {beside[0]}'s "
                f"(`ladder profile {beside[0]} --with-fa4 --record`); every other column is its own run"
                if beside else "each column is its own ncu run")
        lines.append(f"\nseqlen {', '.join(map(str, seqlens))} (bench shape), {found[0][1]['provenance']['gpu']}, "
                     f"{' to '.join(dict.fromkeys([dates[0], dates[-1]]))}, `ladder profile <step> --record`; "
                     f"{runs}; {built_with([prof for _, prof in found])}.\n")
    return "\n".join(lines) if lines else "No recorded profiles yet.\n"


def store_model_rows(data: dict, names) -> list[dict]:
    """For each step or experiment with a current profile in ``data`` that counted smem store
    instructions: the model's kernel-wide stores (harness/model/smem_model.py) beside ncu's."""
    out = []
    for name in names:
        step, prof = _current_profile(data, name)
        metrics = prof.get("metrics", {}) if isinstance(prof, dict) else {}
        if metrics.get("smsp__sass_inst_executed_op_shared_st.sum") is None:
            continue
        if step.experiment and experiments.get(step.experiment).scratch_stores:
            continue                         # stores the model does not describe (the experiment's own)
        model = kernel_stores(step, bench_shape(prof["seqlen"]))
        warps = metrics["sm__warps_active.avg.pct_of_peak_sustained_active"] * 64 / 100
        out.append({"name": name, "model": model, "warps_per_sm": warps,
                    "alone": stores_alone(compile_step(step, step.info.archs[0]).sass.mechanisms, warps),
                    "instructions": metrics["smsp__sass_inst_executed_op_shared_st.sum"],
                    "wavefronts": metrics["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"],
                    "conflicts": metrics["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"]})
    return out


def stores_block(*names: str) -> str:
    """The smem model's cost of each step's thread-issued stores (harness/model/smem_model.py), from the
    step's own copy partitions and layouts: per warp store instruction and per tile."""
    table = []
    for name in names:
        step = resolve(name)
        for c in store_costs(step):
            table.append([f"`{step.id}`", c.name, str(c.bytes_per_thread), str(c.wavefronts), str(c.minimal),
                          str(c.instructions), str(c.wavefronts_per_tile)])
    return markdown_table(table, ["step", "store", "bytes / thread", "wavefronts / warp store", "minimum",
                                  "warp stores / warp / tile", "wavefronts / warp / tile"]) + (
        "\nPer warp of the CTA (each stores its share alike); Q's tile once per CTA, K, V and P once per K/V "
        "tile. Each store instruction is costed as if it had shared memory to itself.\n")


def banks_block(name: str, store: str) -> str:
    """Text picture of warp 0's first 16-byte store of ``store`` (Q, K, V) in step ``name``: the
    bank group (4 banks = 16 bytes) each thread writes, one line per quarter-warp, from the step's
    own copy partition and smem layout (harness/model/smem_model.py)."""
    step = resolve(name)
    cost = next(c for c in store_costs(step) if c.name == store)
    group_bytes, per_phase = cost.bytes_per_thread, 128 // cost.bytes_per_thread
    groups = BANKS * BANK_BYTES // group_bytes
    lines = [f"{step.id}, {store}: warp 0's first {cost.bytes_per_thread}-byte store; bank group "
             f"(banks 4g..4g+3) of each thread"]
    for start in range(0, WARP, per_phase):
        gs = [(a // group_bytes) % groups for a in cost.first_addresses[start:start + per_phase]]
        worst = max(gs.count(g) for g in set(gs))
        lines.append(f"quarter {start // per_phase} (threads {start:2d}-{start + per_phase - 1:2d}): "
                     f"{' '.join(map(str, gs))}   -> {worst} wavefront{'s' if worst > 1 else ''}")
    lines.append(f"total {cost.wavefronts} wavefronts for the warp store (minimum {cost.minimal})")
    return "```\n" + "\n".join(lines) + "\n```\n"


def smem_block(*names: str) -> str:
    """Model vs counter: thread-issued smem stores, predicted from the layouts (per instruction, in
    isolation) and counted by ncu, for each named step or experiment with a current profile."""
    lines = []
    for data in results.all_recorded().values():
        rows = store_model_rows(data, names)
        if not rows:
            continue
        table = [[f"`{r['name']}`", f"{r['warps_per_sm']:.0f}", "yes" if r["alone"] else "no",
                  f"{r['model'].instructions / 1e6:,.2f} M / {r['instructions'] / 1e6:,.2f} M",
                  f"{r['model'].wavefronts / 1e6:,.1f} M / {r['wavefronts'] / 1e6:,.1f} M",
                  f"{(r['model'].wavefronts - r['model'].minimal) / 1e6:,.1f} M / {r['conflicts'] / 1e6:,.1f} M",
                  f"{r['wavefronts'] / r['model'].wavefronts:.2f}" if r["model"].wavefronts else "—"]
                 for r in rows]
        lines.append(markdown_table(table, ["kernel", "warps / SM", "stores alone on the SM",
                                            "store instructions (model / ncu)", "store wavefronts (model / ncu)",
                                            "bank-conflict wavefronts (model / ncu)", "ncu / model"]))
        gpu = next(iter(data["profiles"].values()))["provenance"]["gpu"]
        lines.append(f"\nModel: `harness/model/smem_model.py` (each store instruction's banks, phase by phase, scaled by "
                     f"the instruction count at the profiled shape); counters: `ladder profile <step> --record` on "
                     f"{gpu}, seqlen {_profile_seqlen(data, rows)}. \"Alone\": no tensor-core or "
                     "TMA smem traffic from other warps can overlap the stores.\n")
    return "\n".join(lines) if lines else "No recorded profile counts smem store instructions yet.\n"


def _profile_seqlen(data: dict, rows: list[dict]) -> str:
    return ", ".join(sorted({str(_current_profile(data, r["name"])[1]["seqlen"]) for r in rows}))


BLOCKS = {"profile": profile_block, "profiles": profiles_block, "smem": smem_block, "stores": stores_block, "banks": banks_block}
