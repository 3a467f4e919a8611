"""Generated blocks in the writeups and the README: numbers come from results/*.json and from the
compiler, never from a hand. ``ladder writeups`` refreshes them; a CPU test fails when one is stale.

    <!-- ladder:begin results 01 -->   ...generated...   <!-- ladder:end -->

Kinds: ``results <step>``, ``sass <step> [<against>]``, ``table <track>``, ``stock``,
``profile <step>``, ``experiments <base step>``, ``compare <a> <b>`` (steps or exp:names), ``checks``,
``code <step> [<against>]`` (the code diff against the predecessor, docstrings and comments stripped),
``smem <step> ...`` (the smem store model against ncu's counters, per recorded profile),
``stores <step> ...`` (the model's cost of each thread-issued smem store, per warp instruction),
``banks <step> <store>`` (which banks one warp store hits, per quarter-warp), ``tmem <step>`` (TMEM columns),
``budget <step> ...`` (the softmax's main-loop instructions per score element, by class, from the SASS),
``accuracy <step>`` (the measured error of the step's FMA-pipe exp2 emulation, ``ladder accuracy``),
``bound hopper`` (the bound model against every measured Hopper step), ``timeline <step>`` (the
step's measured timeline, or for a Blackwell step without a B200 run its simulation),
``timeline-check hopper`` (measured against simulated cycles per tile) and ``roles <step>``
(registers, spills and telling instructions of each setmaxnreg region of the SASS).
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

from tabulate import tabulate

from harness import experiments, results
from harness.paths import ROOT
from harness.steps import predecessor, resolve, track_steps
from ladder.contract import ARCH_CAPABILITY

BLOCK = re.compile(r"(<!-- ladder:begin ([^>]*?) -->\n)(.*?)(<!-- ladder:end -->)", re.S)
NOT_RUN_B200 = "compiled, not yet run on a B200"
STALE = "to be re-measured"    # a record whose fingerprint differs from the kernel's now
SEQ_LABEL = {"4096": "4k", "8192": "8k", "16384": "16k"}


def markdown_table(rows, headers) -> str:
    """A GitHub Markdown table; cells are shown exactly as formatted here."""
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def _fmt(x, digits=3):
    return "—" if x is None else f"{x:.{digits}f}"


def _with_range(value, span, digits=3) -> str:
    """'0.618 (0.611-0.627)': a median and its min-max over processes; a single process shows
    its value alone."""
    if value is None:
        return "—"
    if not span or span[0] == span[1]:
        return _fmt(value, digits)
    return f"{_fmt(value, digits)} ({_fmt(span[0], digits)}-{_fmt(span[1], digits)})"


def ladder_cells(summary: dict, prev: dict | None) -> list[str]:
    """The measured cells of one ladder row (results.summarize of it): the median fraction at each
    bench seqlen, the h-mean with its range over processes, and the change from the previous
    row, marked when the two rows' ranges overlap."""
    fr, h = summary["fractions"], summary["hmean"]
    vs = ""
    if prev and prev.get("hmean") and h:
        vs = f"{(h / prev['hmean'] - 1) * 100:+.0f}%"
        if results.within_noise(summary, prev):
            vs += " (within noise)"
    return [*(_fmt(fr.get(s)) for s in SEQ_LABEL), _with_range(h, summary.get("hmean_range")), vs]


def _gpu_label(row):
    p = row.get("provenance", {})
    return f"{p.get('gpu', '?')}, {p.get('date', '?')[:10]}"


def measured_on(rows: dict, capability) -> bool:
    return any(tuple(r.get("provenance", {}).get("capability") or ()) == capability for r in rows.values())


def results_block(step_id: str) -> str:
    step = resolve(step_id)
    rows = results.latest_for(step.id)
    out = []
    stale = {gpu: results.stale_reason(step, row) for gpu, row in rows.items() if results.is_stale(step, row)}
    for gpu, reason in stale.items():
        out.append(f"The {gpu} result of {step.path.relative_to(ROOT).as_posix()} is {STALE}: {reason} "
                   "since it was measured.")
    rows = {gpu: row for gpu, row in rows.items() if gpu not in stale}
    if rows:
        table = []
        for row in rows.values():
            s = results.summarize(row)
            table.append([_gpu_label(row), *(_with_range(s["fractions"][q], s["fraction_ranges"][q]) for q in SEQ_LABEL),
                          _with_range(s["hmean"], s["hmean_range"]), str(s["repeats"]),
                          " / ".join(f"{b['step_tflops']:.0f}" for b in row.get("bench", [])),
                          " / ".join(f"{b['fa4_tflops']:.0f}" for b in row.get("bench", [])),
                          "pass" if s["numerics_passed"] else "FAIL"])
        out.append(markdown_table(table, ["GPU, date", "4k", "8k", "16k", "h-mean", "processes",
                               "step TFLOP/s (4k/8k/16k)", "FA4 TFLOP/s", "numerics"]))
        out.append("")
        out.append("Fractions of stock FlashAttention-4, timed side by side in one process "
                   "(batch*seqlen = 16k, 16 heads, hdim 128, bf16, non-causal; L2 flushed; median of each "
                   "process's timings). With several processes: the median over processes and, in "
                   "parentheses, their min-max (for h-mean: the harmonic mean of the medians, and the "
                   "lowest and highest of a single process's); TFLOP/s are medians over processes.")
        for row in rows.values():
            p = row["provenance"]
            out.append(f"Recorded by `{p['command']}` on {p['gpu']} (driver {p.get('driver')}), torch "
                       f"{p['torch']}, nvidia-cutlass-dsl {p['cutlass_dsl']}, flash-attn-4 {p['flash_attn_4']}.")
    if "sm_100a" in step.info.archs and not measured_on(rows, ARCH_CAPABILITY["sm_100a"]):
        out.append(f"B200 (sm_100a): {NOT_RUN_B200}.")
    if not out:
        out.append("No recorded results yet.")
    return "\n".join(out) + "\n"


def sass_block(step_id: str, against: str | None = None) -> str:
    from harness.compile import compile_step
    from harness.sass import MECHANISMS
    step = resolve(step_id)
    other = resolve(against) if against else None
    columns = [(step, arch) for arch in step.info.archs]
    if other:
        columns = [(other, a) for a in other.info.archs if a in step.info.archs][:1] + columns[:1]
    reports = [compile_step(s, a) for s, a in columns]
    headers = ["instruction", *(f"{s.id} {a}" for s, a in columns)]
    table = []
    for name, _, meaning in MECHANISMS:
        counts = [r.sass.mechanisms.get(name, 0) for r in reports]
        if any(counts):
            table.append([f"`{name}` ({meaning})", *counts])
    table.append(["registers / thread", *(r.registers for r in reports)])
    table.append(["spills (LDL/STL instructions + local bytes)", *(r.sass.spills for r in reports)])
    table.append(["threads / CTA", *(r.threads_per_cta for r in reports)])
    table.append(["smem bytes / CTA", *(s.info.smem_bytes for s, _ in columns)])
    if any(s.info.tmem_cols for s, _ in columns):
        table.append(["TMEM columns / CTA", *(s.info.tmem_cols or 0 for s, _ in columns)])
    return markdown_table([[str(c) for c in r] for r in table], headers) + "\n"



def _role_of(region, by_registers: dict) -> str:
    """A setmaxnreg region's role: the INFO ``registers`` key with its count; where several roles
    share a count ("other"), the instructions say which one it is."""
    if region.out_of_line:
        return "out of line: wait retries after the last EXIT (any role)"
    if region.registers is None:
        return "before the roles split"
    name = by_registers.get(region.registers, "?")
    if name == "other":
        found = [role for role, op in (("MMA", "UTCHMMA"), ("load", "UTMALDG"), ("epilogue", "UTMASTG"))
                 if region.count(op)]
        listed = ", ".join(found[:-1]) + " and " + found[-1] if len(found) > 1 else "".join(found)
        name = f"other: {listed} warps" if found else "other: warps without a role"
    return name


def roles_block(step_id: str) -> str:
    """``roles bNN``: per role (a setmaxnreg region of the SASS), its registers, spill stores and
    loads, and the instructions that say what the role does."""
    from harness.compile import compile_step
    from harness.sass import ROLE_OPCODES, register_regions
    step = resolve(step_id)
    by_registers = {n: role for role, n in step.info.extra.get("registers", {}).items()}
    report = compile_step(step, step.info.archs[0])
    rows = [[_role_of(r, by_registers), "" if r.out_of_line else str(r.registers or report.registers), *(str(r.count(op)) for op in ROLE_OPCODES)]
            for r in register_regions(report.sass.text)]
    return (markdown_table(rows, ["role (setmaxnreg region)", "registers", *(f"`{op}`" for op in ROLE_OPCODES)])
            + f"\n\n`{step.id}` compiled for {step.info.archs[0]}: the SASS split at each `USETMAXREG`, in address "
            "order; registers before the split are the launch's. The code ptxas places after the kernel's last "
            "`EXIT` (mbarrier waits' retry loops, reached from every role) is counted apart.\n")

def _files_for(track: str) -> dict[str, dict]:
    """The results files (GPU key -> contents) measured on a GPU that runs ``track``'s own steps."""
    capabilities = {c for s in track_steps(track) if s.track == track for c in s.info.capabilities}
    return {gpu: data for gpu, data in results.all_recorded().items() if results.capability(data) in capabilities}


def table_block(track: str) -> str:
    """The ladder table of ``track``, one per GPU that has a results file for it (found, not
    named: an H100's or a B200's file shows up the day it is recorded)."""
    files = _files_for(track)
    model = _model_cells(track)
    if not files:
        missing = NOT_RUN_B200 if track == "blackwell" else "not yet measured"
        table = [[_step_link(s), _change(s), missing, "", "", "", "", *model.get(s.id, [])] for s in track_steps(track)]
        return markdown_table(table, LADDER_HEADERS + (MODEL_HEADER if model else [])) + "\n" + _model_note(model)
    return "\n".join(_gpu_table(track, data, model) for data in files.values()) + _model_note(model)


MODEL_HEADER = ["model: predicted fraction of FA4 (binds)"]


def _model_cells(track: str) -> dict:
    """The Blackwell table's model column (harness/bound_report.py): step id -> [cell]."""
    if track != "blackwell":
        return {}
    from harness import bound_report
    return {sid: [cell] for sid, cell in bound_report.blackwell_cells().items()}


def _model_note(model: dict) -> str:
    if not model:
        return ""
    return ("\nThe model column is a prediction, not a measurement: the bound model (`ladder bound bNN`, "
            "harness/bound.py) from each step's own SASS, B200 unit rates and its declared overlap structure, "
            "against FA4's sm_100a kernel compiled here through the same model; checked against every measured "
            "Hopper step in writeups/00-algorithm.md.\n")


LADDER_HEADERS = ["step", "change", "4k", "8k", "16k", "h-mean", "vs prev"]


def _step_link(step) -> str:
    return f"[{step.id}]({step.writeup.relative_to(ROOT).as_posix()})"


def _change(step) -> str:
    return step.info.change + (" *(enabler)*" if step.info.enabler else "")


def _gpu_table(track: str, data: dict, model: dict | None = None) -> str:
    table, prev, measured = [], None, []
    model = model or {}
    for step in track_steps(track):
        row = data["rows"].get(step.id)
        if row and results.is_stale(step, row):
            table.append([_step_link(step), _change(step), f"{STALE}: {results.stale_reason(step, row)}",
                          "", "", "", ""])
            prev = None
        elif row:
            summary = results.summarize(row)
            table.append([_step_link(step), _change(step), *ladder_cells(summary, prev)])
            prev = summary
            measured.append(row)
        else:
            table.append([_step_link(step), _change(step), "not yet measured", "", "", "", ""])
            prev = None
        table[-1] += model.get(step.id, [])
    text = markdown_table(table, LADDER_HEADERS + (MODEL_HEADER if model else [])) + "\n"
    if measured:
        fa4 = {}
        for r in measured:
            for run in r.get("runs") or [results.run_of(r)]:
                for seqlen, tflops in run["fa4_tflops"].items():
                    fa4.setdefault(seqlen, []).append(tflops)
        span = ", ".join(f"{label}: " + (f"{min(v):.0f}" if len(v) == 1 else f"{min(v):.0f}-{max(v):.0f}")
                         for s, label in SEQ_LABEL.items() if (v := fa4.get(s)))
        repeats = sorted({results.summarize(r)["repeats"] for r in measured})
        dates = sorted(r["provenance"]["date"][:10] for r in measured)
        text += (f"\nFractions of stock FA4 measured in the same process on {measured[-1]['provenance']['gpu']}, "
                 f"each step in {' or '.join(map(str, repeats))} separate process{'es' if repeats != [1] else ''}: "
                 "the seqlen columns are medians over processes, h-mean is their harmonic mean, and in "
                 "parentheses the lowest and highest harmonic mean of a single process; \"within noise\" "
                 f"marks a change smaller than the two rows' ranges. FA4's own TFLOP/s in those processes: {span}. "
                 f"Dates: {dates[0]} to {dates[-1]}.\n")
    return text


def stock_block() -> str:
    lines = []
    for data in results.all_recorded().values():
        stock = data.get("stock")
        if not stock:
            continue
        with_fa2 = all("fa2_tflops" in b for b in stock["bench"])     # files recorded before FA2 was added lack it
        table = [[SEQ_LABEL[str(b["seqlen"])], f"{b['fa4_tflops']:.0f}", f"{b['cudnn_tflops']:.0f}",
                  _fmt(b["cudnn_fraction"], 2),
                  *((f"{b['fa2_tflops']:.0f}", _fmt(b["fa2_fraction"], 2)) if with_fa2 else ())]
                 for b in stock["bench"]]
        p = stock["provenance"]
        lines.append(f"{p['gpu']}, {p['date'][:10]} (`{p['command']}`):\n")
        lines.append(markdown_table(table, ["seqlen", "FA4 TFLOP/s", "cuDNN TFLOP/s", "cuDNN / FA4",
                                 *(("FA2 TFLOP/s", "FA2 / FA4") if with_fa2 else ())]) + "\n")
    return "\n".join(lines) if lines else "No recorded results yet.\n"


@dataclasses.dataclass(frozen=True)
class _Stock:
    """Stands in for a Step where a profile table names stock FA4 (profile.FA4) as a column."""
    id: str


def _current_profile(data: dict, step_id: str):
    """(step, profile) recorded in one results file, or (step, None) if absent; a profile of an
    earlier version of the kernel (results.stale_reason; for FA4, another flash-attn-4 or CuTe
    DSL release) comes back as the string "stale"."""
    from harness.profile import FA4, fa4_fingerprint
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
    from harness.profile import METRICS, stall_reasons
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
        lines.append(f"\nseqlen {prof['seqlen']} (bench shape), {p['gpu']}, {p['date'][:10]}, `{p['command']}`.\n")
    return "\n".join(lines) if lines else "No recorded profile yet.\n"


def store_model_rows(data: dict, names) -> list[dict]:
    """For each step or experiment with a current profile in ``data`` that counted smem store
    instructions: the model's kernel-wide stores (harness/smem_model.py) beside ncu's."""
    from harness.compile import compile_step
    from harness.smem_model import kernel_stores, stores_alone
    from harness.workloads import bench_shape
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
    """The smem model's cost of each step's thread-issued stores (harness/smem_model.py), from the
    step's own copy partitions and layouts: per warp store instruction and per tile."""
    from harness.smem_model import store_costs
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
    own copy partition and smem layout (harness/smem_model.py)."""
    from harness.smem_model import BANK_BYTES, BANKS, WARP, store_costs
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


def tmem_block(name: str) -> str:
    """Text picture of a Blackwell step's tensor-memory columns (its INFO.extra["tmem_map"], which
    tests/test_blackwell_steps.py holds to the offsets the kernel uses), one character per 8 columns."""
    step = resolve(name)
    regions, aliases = step.info.extra["tmem_map"], step.info.extra.get("tmem_aliases", {})
    cols, per_char = step.info.tmem_cols, 8

    def ruler_line(spans):
        line = [" "] * (cols // per_char)
        for label, (start, width) in spans.items():
            cells = width // per_char
            text = ("|" + label).ljust(cells, "-")[:cells]
            line[start // per_char:start // per_char + cells] = list(text)
        return "".join(line).rstrip() + ("|" if spans is regions else "")

    ticks = "".join(f"{c:<16d}" for c in range(0, cols, 128)) + str(cols)
    lines = [f"{step.id}: {cols} TMEM columns x 128 lanes (lane = query row; warp w reads lanes 32*(w%4)..+31)",
             f"column  {ticks}", f"        {ruler_line(regions)}"]
    if aliases:
        spans = {label: (regions[inside][0] + offset, width) for label, (inside, offset, width) in aliases.items()}
        lines.append(f"        {ruler_line(spans)}   <- bf16 P written over the S columns it came from")
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
        lines.append(f"\nModel: `harness/smem_model.py` (each store instruction's banks, phase by phase, scaled by "
                     f"the instruction count at the profiled shape); counters: `ladder profile <step> --record` on "
                     f"{gpu}, seqlen {_profile_seqlen(data, rows)}. \"Alone\": no tensor-core or "
                     "TMA smem traffic from other warps can overlap the stores.\n")
    return "\n".join(lines) if lines else "No recorded profile counts smem store instructions yet.\n"


def _profile_seqlen(data: dict, rows: list[dict]) -> str:
    return ", ".join(sorted({str(_current_profile(data, r["name"])[1]["seqlen"]) for r in rows}))


def profiles_block(*step_ids: str) -> str:
    """Several steps' (or experiments') recorded profiles side by side, one column each. The stall
    rows are the union of each profile's largest reasons, so every column shows the same ones."""
    from harness.profile import stall_reasons
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
                     f"{runs}.\n")
    return "\n".join(lines) if lines else "No recorded profiles yet.\n"


def experiments_block(base: str) -> str:
    """The recorded what-if experiments on ``base`` (harness/experiments.py), beside the base
    step's own recorded h-mean. Each row is its own process, so compare h-means, not TFLOP/s."""
    base_id = resolve(base).id
    lines = []
    for data in results.all_recorded().values():
        found = {n: r for n, r in data.get("experiments", {}).items() if r.get("base") == base_id
                 and not (n in experiments.EXPERIMENTS and results.is_stale(resolve(f"exp:{n}"), r))}
        if not found:
            continue
        base_row = data.get("rows", {}).get(base_id, {})
        if base_row and results.is_stale(resolve(base_id), base_row):
            base_row = {}                    # measured on an earlier version of the base step
        table = [[f"{base_id} (the step)", "", _fmt(base_row.get("hmean")), "",
                  "pass" if base_row.get("numerics_passed") else "—"]]
        for name, row in sorted(found.items()):
            h, b = row.get("hmean"), base_row.get("hmean")
            question = experiments.EXPERIMENTS[name].question if name in experiments.EXPERIMENTS else row["question"]
            table.append([f"`exp:{name}`", question, _fmt(h),
                          f"{(h / b - 1) * 100:+.0f}%" if h and b else "",
                          "wrong by design" if row.get("diagnostic") else
                          "pass" if row.get("numerics_passed") else "FAIL"])
        dates = sorted({r["provenance"]["date"][:10] for r in found.values()})
        commands = sorted({r["provenance"]["command"] for r in found.values()})
        lines.append(markdown_table(table, ["experiment", "what it asks", "h-mean (fraction of FA4)", f"vs {base_id}", "numerics"]))
        lines.append(f"\n{next(iter(found.values()))['provenance']['gpu']}, {', '.join(dates)}; "
                     f"{'; '.join(f'`{c}`' for c in commands)}. See any edit with `ladder diff {base_id} exp:<name>`.\n")
    return "\n".join(lines) if lines else "No recorded experiments yet.\n"


def _current_record(data: dict, name: str) -> tuple[dict | None, bool]:
    """(row, stale) of a ladder step or 'exp:<name>' experiment in one results file."""
    step = resolve(name)
    row = data.get("experiments" if step.experiment else "rows", {}).get(step.id)
    if row and results.is_stale(step, row):
        return None, True
    return (row if row and row.get("hmean") is not None else None), False


def compare_block(a: str, b: str) -> str:
    """How two recorded h-means (steps or experiments) compare, on each GPU that has both: never
    one side from one GPU and the other from another."""
    lines, stale = [], set()
    for data in results.all_recorded().values():
        (ra, sa), (rb, sb) = _current_record(data, a), _current_record(data, b)
        stale |= {n for n, s in ((a, sa), (b, sb)) if s}
        if ra and rb:
            change = f"{(ra['hmean'] / rb['hmean'] - 1) * 100:+.0f}%"
            if results.within_noise(results.summarize(ra), results.summarize(rb)) and (
                    results.summarize(ra)["repeats"] > 1 or results.summarize(rb)["repeats"] > 1):
                change += " (within noise)"
            gpu = ra["provenance"]["gpu"]
            lines.append(f"`{a}` {ra['hmean']:.3f} vs `{b}` {rb['hmean']:.3f} (h-mean fractions of FA4, {gpu}): "
                         f"{change}.")
    if not lines:
        labels = [f"`{n}`" + (" (to be re-measured)" if n in stale else "") for n in (a, b)]
        return f"{labels[0]} vs {labels[1]}: not both recorded yet.\n"
    return "\n".join(lines) + "\n"


def _check_name(tool: str) -> str:
    """"none", "racecheck", "guard", "guard+racecheck" -> how the checks block names the run."""
    parts = tool.split("+")
    sanitizer = [t for t in parts if t not in ("none", "guard")]
    words = (["selfcheck --guard (60 s timeout, TMEM guardrails on sm_100a)"] if "guard" in parts else []) + \
        [f"compute-sanitizer {t}" for t in sanitizer]
    return " + ".join(words) or "selfcheck"


def checks_block() -> str:
    """Which steps passed `ladder selfcheck`, plain and under each compute-sanitizer tool."""
    lines = []
    for data in results.all_recorded().values():
        for tool, entry in sorted(data.get("selfcheck", {}).items()):
            what = _check_name(tool)
            current = {s: e for s, e in entry.items() if not results.is_stale(resolve(s), e)}
            by_run = {}
            for step_id, e in current.items():
                p = e["provenance"]
                by_run.setdefault((p["gpu"], p["date"][:10], p["command"]), []).append(step_id)
            for (gpu_name, date, command), ids in sorted(by_run.items(), key=lambda kv: kv[0][1]):
                ids = [s.id for s in track_steps() if s.id in ids]
                lines.append(f"- {gpu_name}, {date}: {what} clean for {', '.join(ids)} (`{command}`)")
            changed = sorted(set(entry) - set(current))
            if changed:
                lines.append(f"- {what}: {', '.join(changed)} changed since checked: to be re-checked")
    return "\n".join(lines) + "\n" if lines else "No recorded selfcheck yet.\n"


CODE_CHANGED_LINES = 80      # a code block shows at most this many removed/added lines (b02 and h02 rewrite 01)


def code_block(step_id: str, against: str | None = None) -> str:
    """The step's change in code: a diff of its code lines against its predecessor's (or against
    ``against``), docstrings and comments stripped (harness/code_diff.py), cut after the first
    CODE_CHANGED_LINES changed lines. A step with no predecessor shows its kernel's main loop."""
    from harness.code_diff import changed_lines, code_diff, kernel_loop
    step = resolve(step_id)
    other = resolve(against) if against else predecessor(step)
    path = step.path.relative_to(ROOT).as_posix()
    if other is None:
        name, first, last, lines = kernel_loop(step.path.read_text())
        return (f"{step.id} has no predecessor to diff against: it is where the ladder starts. Its kernel's main "
                f"loop instead (`{name}` in {path}, lines {first}-{last}), docstrings and comments stripped:\n\n"
                "```python\n" + "\n".join(lines) + "\n```\n")
    command = f"ladder diff --code {other.id} {step.id}" if against else f"ladder diff --code {step.id}"
    head = f"`{command}`: the code lines that change, docstrings and comments stripped.\n\n"
    diff = code_diff(other.path, step.path)
    if not diff:
        return head + f"(no code changes: {step.id} and {other.id} differ at most in docstrings and comments)\n"
    lines, shown, changed = diff.splitlines(), [], 0
    for line in lines:
        if changed == CODE_CHANGED_LINES:
            break
        shown.append(line)
        changed += changed_lines(line)
    text = head + "```diff\n" + "\n".join(shown) + "\n```\n"
    if len(shown) < len(lines):
        text += (f"\n... {len(lines) - len(shown)} more lines ({changed_lines(diff) - changed} of them changed): "
                 f"run `{command}` for the whole diff.\n")
    return text


def budget_block(*step_ids: str) -> str:
    """The softmax instruction budget (harness/softmax_budget.py) of each step on each of its archs:
    main-loop instructions per score element by class, and for sm_100a the issue-cycle arithmetic
    per K/V tile against the tensor cores' cycles."""
    from harness import softmax_budget as sb
    steps = [resolve(s) for s in step_ids]
    budgets = [sb.budget(step, arch) for step in steps for arch in step.info.archs]
    headers, rows = sb.table(budgets)
    out = [markdown_table(rows, headers), "",
           "Per thread and K/V tile: the instructions of the main loop's body (one pass = one tile) over the "
           "E score elements the thread owns; the classes sum to the total. Static counts from the SASS, not a "
           "measurement."]
    for b in budgets:
        if b["arch"] != "sm_100a" or not b.get("loop"):
            continue
        c = sb.tile_cycles(b)
        step = resolve(b["step"])
        note = "" if measured_on(results.latest_for(step.id), ARCH_CAPABILITY["sm_100a"]) else f" ({NOT_RUN_B200})"
        out.append(f"\n{b['step']}{note}: issue {b['total_per_element']:.2f} instr/element x {c['elements']:,} "
                   f"elements ({b['tile_m']}x{b['tile_n']}) / {sb.WARP} threads per warp / {sb.SCHEDULERS_PER_SM} "
                   f"schedulers = {c['issue']:,.0f} cycles ({c['issue_low']:,.0f} without the conditional blocks) "
                   f"per K/V tile per CTA; tensor cores 2 GEMMs x 2 x {b['tile_m']}x{b['tile_n']}x{b['head_dim']} "
                   f"FLOP / {c['flop_per_clk']:,} dense FLOP/clk/SM (B200) = {c['mma']:,.0f} cycles: "
                   f"issue / MMA = {c['issue'] / c['mma']:.2f}.")
    return "\n".join(out) + "\n"


def accuracy_block(step_id: str) -> str:
    """The recorded accuracy of a step's FMA-pipe exp2 (``ladder accuracy <step> --record``), per
    GPU: its largest relative error where 2^x is normal against bf16's rounding, and where."""
    from harness import ex2_accuracy
    from harness.ex2_model import BF16_ROUNDING
    step = resolve(step_id)
    lines, table, notes = [], [], []
    for data in results.all_recorded().values():
        entry = data.get("accuracy", {}).get(step.id)
        if not entry:
            continue
        p = entry["provenance"]
        reason = ex2_accuracy.stale_reason(step, entry)
        if reason:
            lines.append(f"The {p['gpu']} measurement of {step.id}'s exp2 emulation is {STALE}: {reason} "
                         "since it was measured.")
            continue
        table.append([f"{p['gpu']}, {p['date'][:10]}", f"{entry['arch']}, {entry['path']}",
                      f"{entry['max_rel_error']:.2e} = 2^{entry['max_rel_error_log2']:.1f}",
                      f"{entry['argmax_x']:.7g}", f"{entry['bound']:.2e} = 2^{math.log2(entry['bound']):.0f}",
                      f"{entry['max_abs_error_below_normal']:.1e}", f"{entry['elements']:,}",
                      "yes" if not entry["model_mismatches"] else f"no: {entry['model_mismatches']:,} differ"])
        notes.append(f"Recorded by `{p['command']}` on {p['gpu']} (driver {p.get('driver')}), "
                     f"nvidia-cutlass-dsl {p['cutlass_dsl']}.")
    if table:
        lines[:0] = [markdown_table(table, ["GPU, date", "path", "max relative error (x >= -126)", "at x",
                                            "bound (bf16 rounding of P)", "max absolute error (x < -126)",
                                            "inputs", "bit-identical to the CPU model"]), "",
                     f"`{step.id}.ex2_emulated_pair` in an element-wise kernel, against float64 2^x, over a dense "
                     "grid on [-127, 0], every integer and its float32 neighbours, the clamp region down to -200, "
                     "huge negatives and 0 (`harness/ex2_accuracy.py`). " + " ".join(notes)]
    if not lines:
        lines.append(f"Accuracy of {step.id}'s exp2 emulation on a GPU: not yet recorded (bound: bf16 rounding of P, "
                     f"2^-9 = {BF16_ROUNDING:.2e}; `ladder accuracy {step.id} --record results/<gpu>.json`).")
    return "\n".join(lines) + "\n"


def bound_block(track: str) -> str:
    """``bound hopper``: the bound model against every measured Hopper step (harness/bound_report.py)."""
    from harness import bound_report
    if track != "hopper":
        raise ValueError(f"bound block: only `bound hopper` (the check against measurements); the Blackwell "
                         f"predictions are a column of `table blackwell`, not {track!r}")
    rows, summary = bound_report.hopper_check()
    if not rows:
        return "No Hopper step measured yet: nothing to check the model against.\n"
    return markdown_table(rows, bound_report.HOPPER_HEADERS) + "\n\n" + bound_report.hopper_note(summary)


def _timeline_table(record: dict, simulated: bool) -> str:
    from harness import timeline
    medians = timeline.phase_medians(record)
    tag = " (simulated)" if simulated else ""
    rows = [[lane + tag, *(f"{m[n]:,.0f}" if n in m else "" for n in record["phases"])] for lane, m in medians.items()]
    return markdown_table(rows, ["lane (one warp per role)", *record["phases"]])


def timeline_block(step_id: str) -> str:
    """``timeline hNN``: the step's measured timeline (picture, median cycles per phase, what the
    probes cost, provenance); for a Blackwell step without a B200 measurement, its simulation."""
    from harness import timeline, timeline_draw
    step = resolve(step_id)
    record, label = timeline_draw.source_for(step)
    simulated = bool(record.get("simulated"))
    w = timeline_draw.WINDOW
    lines = [f"![{step.id}: one CTA's warps over K/V tiles {w.start}-{w.stop - 1}, {label}]"
             f"(../img/timeline-{step.id}.svg)", "",
             f"Median cycles per timeline phase over tiles 2-{timeline.KEPT_TILES - 1} of one CTA"
             + (" (simulated, not measured):" if simulated else f" ({label}):"), "",
             _timeline_table(record, simulated), ""]
    per = timeline.period(record)
    busy = timeline.gemm_in_flight(record)
    busy_text = (f"; a GEMM is in flight {busy:.0%} of the time (tiles 2-{timeline.KEPT_TILES - 3})"
                 if busy is not None else "")
    if simulated:
        lines.append(f"Simulated (B200 unit rates, {NOT_RUN_B200}): one K/V tile every {per:,.0f} cycles{busy_text}. "
                     "The MMA warp's bars are issue only; the tensor pipe's lane shows when the GEMMs run. "
                     "What the simulation leaves out is in `harness/timeline_sim.py`; "
                     f"`ladder timeline {step.id} --measure` on a B200 replaces it with a measurement.")
    else:
        p = record["provenance"]
        cost = record["instrumented_ms"] / record["step_ms"] - 1
        lines.append(f"One K/V tile every {per:,.0f} cycles on the sampled CTA{busy_text}. The probes' price: the instrumented "
                     f"kernel ran {record['instrumented_ms']:.3f} ms against the step's {record['step_ms']:.3f} ms "
                     f"({cost:+.0%}) at seqlen 8k, and its output "
                     f"{'passed' if record['numerics_passed'] else 'FAILED'} FA4's numerics rule. Recorded by "
                     f"`{p['command']}` on {p['gpu']} (driver {p.get('driver')}), {p['date'][:10]}, "
                     f"nvidia-cutlass-dsl {p['cutlass_dsl']}.")
    return "\n".join(lines) + "\n"


def timeline_check_block(track: str) -> str:
    """``timeline-check hopper``: measured cycles per K/V tile against the simulation's, per step."""
    from harness import timeline_sim
    rows = []
    for c in timeline_sim.check(track_steps(track)):
        rows.append([c["step"], f"{c['measured']:,.0f}", f"{c['simulated']:,.0f} (simulated)",
                     f"{c['simulated'] / c['measured'] - 1:+.0%}"])
    if not rows:
        return "No measured timeline yet.\n"
    return markdown_table(rows, ["step", "measured cycles per K/V tile (one CTA)", "simulation",
                                 "simulation vs measured"]) + "\n"


def render(spec: str) -> str:
    """One generated block from its spec: the kind, then its arguments (``sass b03 b02``)."""
    kind, *args = spec.split()
    blocks = {"results": results_block, "sass": sass_block, "table": table_block,
              "profile": profile_block, "profiles": profiles_block, "compare": compare_block,
              "experiments": experiments_block, "checks": checks_block, "stock": stock_block, "smem": smem_block,
              "stores": stores_block, "banks": banks_block, "tmem": tmem_block,
              "code": code_block, "budget": budget_block, "accuracy": accuracy_block, "bound": bound_block,
              "timeline": timeline_block, "timeline-check": timeline_check_block, "roles": roles_block}
    if kind not in blocks:
        raise ValueError(f"unknown generated block kind {kind!r}")
    return blocks[kind](*args)


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "writeups").rglob("*.md"))]


# ptxas does not always allocate the same number of registers for the same PTX (seen on this
# machine: b05's identical PTX compiled to 186 or 196 registers from run to run, every mechanism
# count of its SASS table unchanged). With the registers, the moves and address instructions around
# them move too: in the softmax budget, the "other" class, the totals built on it and the loop's
# length. A block that differs only in those lines is not stale, and is not rewritten: otherwise
# every `ladder writeups` would flip them and CI would flake. The floating-point and MUFU classes
# of the budget, and every other row, are compared exactly.
_VOLATILE_ROW = re.compile(r"^\|\s*(registers / thread|other|\*\*total\*\*[^|]*|of which in conditional blocks|"
                           r"largest 'other' opcodes|main loop \(instructions\))\s*\|.*$"
                           r"|^\w+ \(compiled, not yet run on a B200\): issue .*$", re.M)
# The bound model's numbers (harness/bound_report.py) rest on issue counts, which move with the
# registers for the reason above: a model number, its binding unit and the check's summary are not
# compared either. In a row of the bound check (step | measured | predicted | binds | profile
# columns) only the predicted and binds cells are: the measured and profiled ones are compared.
_VOLATILE_MODEL = re.compile(r"\d+\.\d+ \(model[^|\n]*|binds on: [^.]*"
                             r"|^\|[^\n]*\(simulated\)[^\n]*$|^Simulated \(B200 unit rates[^\n]*$", re.M)
_BOUND_ROW = re.compile(r"^(\| \w+ +\| [0-9.]+ +\| )[^|\n]*\(model\)[^|\n]*\|[^|\n]*\|(.*)$", re.M)


def _settled(text: str) -> str:
    text = _VOLATILE_ROW.sub("(as compiled)", text)
    text = _BOUND_ROW.sub(lambda m: m.group(1) + "(model) | (model) |" + m.group(2), text)
    return _VOLATILE_MODEL.sub("(model)", text)


def refresh(path: Path, write: bool = True) -> bool:
    """Regenerate every block in ``path``; return True if anything changed (beyond the volatile
    registers row, see _VOLATILE_ROW)."""
    text = path.read_text()
    new = BLOCK.sub(lambda m: m.group(1) + render(m.group(2)) + m.group(4), text)
    changed = _settled(new) != _settled(text)
    if changed and write:
        path.write_text(new)
    return changed


def stale() -> list[Path]:
    return [p for p in documents() if p.exists() and refresh(p, write=False)]
