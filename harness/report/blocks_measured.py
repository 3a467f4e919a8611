"""Generated blocks of measured results (results/*.json): ``results <step>``, ``table <track>``,
``stock``, ``experiments <base step>``, ``compare <a> <b>``, ``checks``."""

from __future__ import annotations

from harness.core import experiments, results
from harness.core.paths import ROOT
from harness.core.steps import resolve, track_steps
from harness.report import bound_report
from harness.report.tables import (
    LADDER_HEADERS,
    NOT_RUN_B200,
    SEQ_LABEL,
    STALE,
    built_with,
    change_cell,
    fa4_ran,
    fmt,
    gpu_label,
    ladder_cells,
    markdown_table,
    measured_on,
    step_link,
    with_range,
)
from ladder.contract import ARCH_CAPABILITY


def results_block(step_id: str) -> str:
    """A step's measured row per GPU, or an experiment's (``exp:<name>``): fractions per seqlen."""
    step = resolve(step_id)
    rows = results.latest_for(step.id, "experiments" if step_id.startswith("exp:") else "rows")
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
            table.append([gpu_label(row), *(with_range(s["fractions"][q], s["fraction_ranges"][q]) for q in SEQ_LABEL),
                          with_range(s["hmean"], s["hmean_range"]), str(s["repeats"]),
                          " / ".join(f"{b['step_tflops']:.0f}" for b in row.get("bench", [])),
                          " / ".join(f"{b['fa4_tflops']:.0f}" for b in row.get("bench", [])),
                          "pass" if s["numerics_passed"] else "FAIL"])
        out.append(markdown_table(table, ["GPU, date", "4k", "8k", "16k", "h-mean", "processes",
                               "step TFLOP/s (4k/8k/16k)", "FA4 TFLOP/s", "numerics"]))
        out.append("")
        # How it was measured, for the reader who wants it: collapsed, so that a page reads the numbers first.
        out.append("<details><summary>How this was measured (shapes, processes, versions, clocks)</summary>")
        out.append("")
        out.append("Fractions of stock FlashAttention-4, timed side by side in one process "
                   "(batch*seqlen = 16k, 16 heads, hdim 128, bf16, non-causal; L2 flushed; median of each "
                   "process's timings). With several processes: the median over processes and, in "
                   "parentheses, their min-max (for h-mean: the harmonic mean of the medians, and the "
                   "lowest and highest of a single process's; * marks an h-mean outside that range, which "
                   "happens when the medians at different lengths come from different processes); "
                   "TFLOP/s are medians over processes.")
        for row in rows.values():
            p = row["provenance"]
            out.append(f"Recorded by `{p['command']}` on {p['gpu']} (driver {p.get('driver')}), torch "
                       f"{p['torch']}, nvidia-cutlass-dsl {p['cutlass_dsl']}, {built_with([row])}, "
                       f"flash-attn-4 {p['flash_attn_4']} ({fa4_ran([row])}).")
            out += [clock_sentence(row)] if clock_sentence(row) else []
        out += ["", "</details>"]
    if "sm_100a" in step.info.archs and not measured_on(rows, ARCH_CAPABILITY["sm_100a"]):
        out.append(f"B200 (sm_100a): {NOT_RUN_B200}.")
    if not out:
        out.append("No recorded results yet.")
    return "\n".join(out) + "\n"


def table_block(track: str) -> str:
    """The ladder table of ``track``, one per GPU that has a results file for it (found, not
    named: an H100's or a B200's file shows up the day it is recorded)."""
    files = results.track_files(track)
    model = _model_cells(track)
    if not files:
        missing = NOT_RUN_B200 if track == "blackwell" else "not yet measured"
        table = [[step_link(s), change_cell(s), missing, "", "", "", "", *model.get(s.id, [])] for s in track_steps(track)]
        return markdown_table(table, LADDER_HEADERS + (MODEL_HEADER if model else [])) + "\n" + _model_note(model)
    return "\n".join(_gpu_table(track, data, model) for data in files.values()) + _model_note(model)


MODEL_HEADER = ["model: predicted fraction of FA4 (binds)"]


def _model_cells(track: str) -> dict:
    """The Blackwell table's model column (harness/report/bound_report.py): step id -> [cell]."""
    if track != "blackwell":
        return {}
    return {sid: [cell] for sid, cell in bound_report.blackwell_cells().items()}


def _model_note(model: dict) -> str:
    if not model:
        return ""
    return ("\nThe model column is a prediction, not a measurement: the bound model (`ladder bound bNN`, "
            "harness/model/bound.py) from each step's own SASS, B200 unit rates and its declared overlap structure, "
            "against FA4's sm_100a kernel compiled here through the same model; checked against every measured "
            "Hopper step in [writeups/hopper/08b-model-check.md](writeups/hopper/08b-model-check.md).\n")


def _gpu_table(track: str, data: dict, model: dict | None = None) -> str:
    table, prev, measured = [], None, []
    model = model or {}
    for step in track_steps(track):
        row = data["rows"].get(step.id)
        if row and results.is_stale(step, row):
            table.append([step_link(step), change_cell(step), f"{STALE}: {results.stale_reason(step, row)}",
                          "", "", "", ""])
            prev = None
        elif row:
            summary = results.summarize(row)
            table.append([step_link(step), change_cell(step), *ladder_cells(summary, prev)])
            prev = summary
            measured.append(row)
        else:
            table.append([step_link(step), change_cell(step), "not yet measured", "", "", "", ""])
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
                 "parentheses the lowest and highest harmonic mean of a single process (* marks an h-mean "
                 "outside that range: the medians at different lengths came from different processes); \"within noise\" "
                 f"marks a change smaller than the two rows' ranges. FA4's own TFLOP/s in those processes: {span} "
                 f"(FA4's kernel: {fa4_ran(measured)}). Compiled by {built_with(measured)}. "
                 + (f"Date: {dates[0]}.\n" if dates[0] == dates[-1] else f"Dates: {dates[0]} to {dates[-1]}.\n"))
    return text


def stock_block() -> str:
    lines = []
    for data in results.all_recorded().values():
        stock = data.get("stock")
        if not stock:
            continue
        with_fa2 = all("fa2_tflops" in b for b in stock["bench"])     # files recorded before FA2 was added lack it
        table = [[SEQ_LABEL[str(b["seqlen"])], f"{b['fa4_tflops']:.0f}", f"{b['cudnn_tflops']:.0f}",
                  fmt(b["cudnn_fraction"], 2),
                  *((f"{b['fa2_tflops']:.0f}", fmt(b["fa2_fraction"], 2)) if with_fa2 else ())]
                 for b in stock["bench"]]
        p = stock["provenance"]
        lines.append(f"{p['gpu']}, {p['date'][:10]} (`{p['command']}`; FA4's kernel: {fa4_ran([stock])}):\n")
        lines.append(markdown_table(table, ["seqlen", "FA4 TFLOP/s", "cuDNN TFLOP/s", "cuDNN / FA4",
                                 *(("FA2 TFLOP/s", "FA2 / FA4") if with_fa2 else ())]) + "\n")
    return "\n".join(lines) if lines else "No recorded results yet.\n"


def experiments_block(base: str) -> str:
    """The recorded what-if experiments on ``base`` (harness/core/experiments.py), beside the base
    step's own recorded h-mean. Each row is its own process, so compare h-means, not TFLOP/s. An
    experiment no longer defined (its edit became the step's code, or was dropped) is left out: its
    record measured an edit of an earlier base, and nothing can tell whether it is current."""
    base_id = resolve(base).id
    lines = []
    for data in results.all_recorded().values():
        found = {n: r for n, r in data.get("experiments", {}).items() if r.get("base") == base_id
                 and n in experiments.EXPERIMENTS and not results.is_stale(resolve(f"exp:{n}"), r)}
        if not found:
            continue
        base_row = data.get("rows", {}).get(base_id, {})
        if base_row and results.is_stale(resolve(base_id), base_row):
            base_row = {}                    # measured on an earlier version of the base step
        table = [[f"{base_id} (the step)", "", fmt(base_row.get("hmean")), "",
                  "pass" if base_row.get("numerics_passed") else "—"]]
        for name, row in sorted(found.items()):
            h, b = row.get("hmean"), base_row.get("hmean")
            table.append([f"`exp:{name}`", experiments.EXPERIMENTS[name].question, fmt(h),
                          f"{(h / b - 1) * 100:+.0f}%" if h and b else "",
                          "wrong by design" if row.get("diagnostic") else
                          "pass" if row.get("numerics_passed") else "FAIL"])
        dates = sorted({r["provenance"]["date"][:10] for r in found.values()})
        commands = sorted({r["provenance"]["command"] for r in found.values()})
        lines.append(markdown_table(table, ["experiment", "what it asks", "h-mean (fraction of FA4)", f"vs {base_id}", "numerics"]))
        lines.append(f"\n{next(iter(found.values()))['provenance']['gpu']}, {', '.join(dates)}; "
                     f"{'; '.join(f'`{c}`' for c in commands)}; {built_with(found.values())}. "
                     f"See any edit with `ladder diff {base_id} exp:<name>`.\n")
    return "\n".join(lines) if lines else "No recorded experiments yet.\n"


def clock_sentence(row: dict) -> str | None:
    """What the SM clock did while the step and FA4 were timed (harness/gpu/clocks.py), if sampled."""
    bench = row.get("bench", [])
    if not bench or not all("step_sm_mhz" in b and "fa4_sm_mhz" in b for b in bench):
        return None
    mhz = lambda who: " / ".join(f"{b[who + '_sm_mhz']:,.0f}" for b in bench)  # noqa: E731
    capped = lambda who: " / ".join(f"{b[who + '_power_capped']:.0%}" for b in bench)  # noqa: E731
    top = max(b["step_sm_max_mhz"] for b in bench)
    return (f"SM clock while timed (median of nvidia-smi samples, 4k / 8k / 16k; the GPU allows {top:,.0f} MHz): "
            f"the step {mhz('step')} MHz, FA4 {mhz('fa4')} MHz; under the driver's power cap (sw_power_cap) "
            f"in {capped('step')} of the step's samples and {capped('fa4')} of FA4's.")


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
    words = (["selfcheck --guard (60 s timeout; TMEM guardrails too on sm_100a)"] if "guard" in parts else []) + \
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
                ptxas = f"ptxas {p.get('ptxas')}" + (" (inferred: ptxas_from)" if p.get("ptxas_from") else "")
                by_run.setdefault((p["gpu"], p["date"][:10], p["command"], ptxas), []).append(step_id)
            for (gpu_name, date, command, ptxas), ids in sorted(by_run.items(), key=lambda kv: kv[0][1]):
                ids = [s.id for s in track_steps() if s.id in ids] + sorted(i for i in ids if i.startswith("exp:"))
                lines.append(f"- {gpu_name}, {date}: {what} clean for {', '.join(ids)} (`{command}`; {ptxas})")
            changed = sorted(set(entry) - set(current))
            if changed:
                lines.append(f"- {what}: {', '.join(changed)} changed since checked: to be re-checked")
    if not lines:
        return "No recorded selfcheck yet.\n"
    return ("Each step is listed under the latest run that checked it with its current code (a run's command "
            "may name steps that a later run checked again).\n\n" + "\n".join(lines) + "\n")


def check_block(step_id: str) -> str:
    """What `ladder selfcheck` recorded for one step (or experiment): each check it passed with the
    current code (numerics at the tiny shapes, plain or under a compute-sanitizer tool), or that none was."""
    step = resolve(step_id)
    lines = []
    for data in results.all_recorded().values():
        for tool, entry in sorted(data.get("selfcheck", {}).items()):
            e = entry.get(step.spec)
            if e and not results.is_stale(step, e):
                p = e["provenance"]
                lines.append(f"- {p['gpu']}, {p['date'][:10]}: {_check_name(tool)} passed "
                             f"(numerics at the tiny shapes; `{p['command']}`; ptxas {p.get('ptxas')})")
    return "\n".join(lines) + "\n" if lines else f"No recorded selfcheck of `{step.spec}` with its current code.\n"


BLOCKS = {"check": check_block, "results": results_block, "table": table_block, "stock": stock_block, "experiments": experiments_block, "compare": compare_block, "checks": checks_block}
