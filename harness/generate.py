"""Generated blocks in the writeups and the README: numbers come from results/*.json and from the
compiler, never from a hand. ``ladder writeups`` refreshes them; a CPU test fails when one is stale.

    <!-- ladder:begin results 01 -->   ...generated...   <!-- ladder:end -->

Kinds: ``results <step>``, ``sass <step> [<against>]``, ``table <track>``, ``stock``,
``profile <step>``, ``experiments <base step>``, ``compare <a> <b>`` (steps or exp:names), ``checks``.
"""

from __future__ import annotations

import re
from pathlib import Path

from tabulate import tabulate

from harness import experiments, results
from harness.steps import ROOT, resolve, track_steps

BLOCK = re.compile(r"(<!-- ladder:begin ([^>]*?) -->\n)(.*?)(<!-- ladder:end -->)", re.S)
NOT_RUN_B200 = "compiled, not yet run on a B200"
STALE = "changed since measured: to be re-measured"
SEQ_LABEL = {"4096": "4k", "8192": "8k", "16384": "16k"}


def _md(rows, headers) -> str:
    """A GitHub Markdown table; cells are shown exactly as formatted here."""
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def _fmt(x, digits=3):
    return "—" if x is None else f"{x:.{digits}f}"


def _gpu_label(row):
    p = row.get("provenance", {})
    return f"{p.get('gpu', '?')}, {p.get('date', '?')[:10]}"


def results_block(step_id: str) -> str:
    step = resolve(step_id)
    rows = results.latest_for(step.id)
    out = []
    stale = [gpu for gpu, row in rows.items() if results.is_stale(step, row)]
    if stale:
        out.append(f"The kernel file {step.path.relative_to(ROOT).as_posix()} has {STALE} "
                   f"(its recorded result measured an earlier version).")
        rows = {gpu: row for gpu, row in rows.items() if gpu not in stale}
    if rows:
        table = []
        for gpu, row in rows.items():
            fr = row.get("fractions", {})
            table.append([_gpu_label(row), *(_fmt(fr.get(s)) for s in SEQ_LABEL), _fmt(row.get("hmean")),
                          " / ".join(f"{b['step_tflops']:.0f}" for b in row.get("bench", [])),
                          " / ".join(f"{b['fa4_tflops']:.0f}" for b in row.get("bench", [])),
                          "pass" if row.get("numerics_passed") else "FAIL"])
        out.append(_md(table, ["GPU, date", "4k", "8k", "16k", "h-mean",
                                            "step TFLOP/s (4k/8k/16k)", "FA4 TFLOP/s", "numerics"]))
        out.append("")
        out.append("Fractions of stock FlashAttention-4, timed side by side in one process "
                   "(batch*seqlen = 16k, 16 heads, hdim 128, bf16, non-causal; L2 flushed; median).")
        for gpu, row in rows.items():
            p = row["provenance"]
            out.append(f"Recorded by `{p['command']}` on {p['gpu']} (driver {p.get('driver')}), torch "
                       f"{p['torch']}, nvidia-cutlass-dsl {p['cutlass_dsl']}, flash-attn-4 {p['flash_attn_4']}.")
    if "sm_100a" in step.info.archs and "b200" not in rows:
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
    table.append(["spill bytes", *(r.sass.spills for r in reports)])
    table.append(["threads / CTA", *(r.threads_per_cta for r in reports)])
    table.append(["smem bytes / CTA", *(s.info.smem_bytes for s, _ in columns)])
    if any(s.info.tmem_cols for s, _ in columns):
        table.append(["TMEM columns / CTA", *(s.info.tmem_cols or 0 for s, _ in columns)])
    return _md([[str(c) for c in r] for r in table], headers) + "\n"


def table_block(track: str) -> str:
    recorded = results.all_recorded()
    gpu = "h200" if track == "hopper" else "b200"
    data = recorded.get(gpu, {"rows": {}})
    table, prev = [], None
    for step in track_steps(track):
        row = data["rows"].get(step.id)
        name = f"[{step.id}]({step.writeup.relative_to(ROOT).as_posix()})"
        change = step.info.change + (" *(enabler)*" if step.info.enabler else "")
        if row and results.is_stale(step, row):
            table.append([name, change, STALE, "", "", "", ""])
            prev = None
        elif row:
            fr = row.get("fractions", {})
            h = row.get("hmean")
            vs = f"{(h / prev - 1) * 100:+.0f}%" if prev and h else ""
            table.append([name, change, *(_fmt(fr.get(s)) for s in SEQ_LABEL), _fmt(h), vs])
            prev = h
        else:
            missing = NOT_RUN_B200 if track == "blackwell" else "not yet measured"
            table.append([name, change, missing, "", "", "", ""])
            prev = None
    text = _md(table, ["step", "change", "4k", "8k", "16k", "h-mean", "vs prev"]) + "\n"
    measured = [r for s in track_steps(track) if (r := data["rows"].get(s.id)) and not results.is_stale(s, r)]
    if measured:
        fa4 = {}
        for r in measured:
            for b in r.get("bench", []):
                fa4.setdefault(str(b["seqlen"]), []).append(b["fa4_tflops"])
        span = ", ".join(f"{SEQ_LABEL[s]}: " + (f"{min(v):.0f}" if len(v) == 1 else f"{min(v):.0f}-{max(v):.0f}")
                         for s, v in fa4.items())
        p = measured[-1]["provenance"]
        text += (f"\nFractions of stock FA4 measured in the same process on {p['gpu']}; FA4's own TFLOP/s "
                 f"in those processes: {span}. Dates: "
                 f"{min(r['provenance']['date'][:10] for r in measured)} to "
                 f"{max(r['provenance']['date'][:10] for r in measured)}.\n")
    return text


def stock_block() -> str:
    lines = []
    for gpu, data in results.all_recorded().items():
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
        lines.append(_md(table, ["seqlen", "FA4 TFLOP/s", "cuDNN TFLOP/s", "cuDNN / FA4",
                                 *(("FA2 TFLOP/s", "FA2 / FA4") if with_fa2 else ())]) + "\n")
    return "\n".join(lines) if lines else "No recorded results yet.\n"


def _current_profile(data: dict, step_id: str):
    """(step, profile) recorded in one results file, or (step, None) if absent; a profile of an
    earlier version of the step's code comes back as the string "stale"."""
    step = resolve(step_id)
    prof = data.get("profiles", {}).get(step.id)
    if prof and results.is_stale(step, prof):
        return step, "stale"
    return step, prof


def _profile_rows(metrics: dict, stall_names=None) -> list[tuple[str, str]]:
    """(counter, value) rows of one profile: the fixed counters, smem conflict shares, then the
    warp stall reasons (the largest ones, or exactly ``stall_names``)."""
    from harness.profile import METRICS, stall_reasons
    rows = [(meaning, "n/a" if metrics.get(m) is None else f"{metrics[m]:,.1f}")
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
    for gpu, data in results.all_recorded().items():
        step, prof = _current_profile(data, step_id)
        if not prof:
            continue
        if prof == "stale":
            lines.append(f"The recorded profile of {step.id} is of an earlier version of its code: to be re-profiled.\n")
            continue
        p = prof["provenance"]
        lines.append(_md([list(r) for r in _profile_rows(prof["metrics"])], ["counter", "value"]))
        lines.append(f"\nseqlen {prof['seqlen']} (bench shape), {p['gpu']}, {p['date'][:10]}, `{p['command']}`.\n")
    return "\n".join(lines) if lines else "No recorded profile yet.\n"


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
        columns = [_profile_rows(prof["metrics"], names) for _, prof in found]
        table = [[label, *(col[i][1] for col in columns)] for i, (label, _) in enumerate(columns[0])]
        lines.append(_md(table, ["counter", *(f"{step.id}" for step, _ in found)]))
        seqlens = sorted({prof["seqlen"] for _, prof in found})
        dates = sorted({prof["provenance"]["date"][:10] for _, prof in found})
        lines.append(f"\nseqlen {', '.join(map(str, seqlens))} (bench shape), {found[0][1]['provenance']['gpu']}, "
                     f"{' to '.join(dict.fromkeys([dates[0], dates[-1]]))}, `ladder profile <step> --record`; "
                     "each column is its own ncu run.\n")
    return "\n".join(lines) if lines else "No recorded profiles yet.\n"


def experiments_block(base: str) -> str:
    """The recorded what-if experiments on ``base`` (harness/experiments.py), beside the base
    step's own recorded h-mean. Each row is its own process, so compare h-means, not TFLOP/s."""
    base_id = resolve(base).id
    lines = []
    for gpu, data in results.all_recorded().items():
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
        lines.append(_md(table, ["experiment", "what it asks", "h-mean (fraction of FA4)", f"vs {base_id}", "numerics"]))
        lines.append(f"\n{next(iter(found.values()))['provenance']['gpu']}, {', '.join(dates)}; "
                     f"{'; '.join(f'`{c}`' for c in commands)}. See any edit with `ladder diff {base_id} exp:<name>`.\n")
    return "\n".join(lines) if lines else "No recorded experiments yet.\n"


def _recorded_hmean(name: str) -> tuple[float | None, str]:
    """(h-mean, label) of a ladder step or 'exp:<name>' experiment, from the first results file
    that has it."""
    step = resolve(name)
    section = "experiments" if step.experiment else "rows"
    stale = False
    for gpu, data in results.all_recorded().items():
        row = data.get(section, {}).get(step.id)
        if row and results.is_stale(step, row):
            stale = True
        elif row and row.get("hmean") is not None:
            return row["hmean"], f"`{name}`"
    return None, f"`{name}`" + (" (changed since measured)" if stale else "")


def compare_block(a: str, b: str) -> str:
    """One line: how two recorded h-means (steps or experiments) compare."""
    (ha, la), (hb, lb) = _recorded_hmean(a), _recorded_hmean(b)
    if ha is None or hb is None:
        return f"{la} vs {lb}: not both recorded yet.\n"
    return f"{la} {ha:.3f} vs {lb} {hb:.3f} (h-mean fractions of FA4): {(ha / hb - 1) * 100:+.0f}%.\n"


def checks_block() -> str:
    """Which steps passed `ladder selfcheck`, plain and under each compute-sanitizer tool."""
    lines = []
    for gpu, data in results.all_recorded().items():
        for tool, entry in sorted(data.get("selfcheck", {}).items()):
            what = "selfcheck" if tool == "none" else f"compute-sanitizer {tool}"
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


def render(spec: str) -> str:
    """One generated block from its spec: the kind, then its arguments (``sass b03 b02``)."""
    kind, *args = spec.split()
    blocks = {"results": results_block, "sass": sass_block, "table": table_block,
              "profile": profile_block, "profiles": profiles_block, "compare": compare_block,
              "experiments": experiments_block, "checks": checks_block, "stock": stock_block}
    if kind not in blocks:
        raise ValueError(f"unknown generated block kind {kind!r}")
    return blocks[kind](*args)


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "writeups").rglob("*.md"))]


# ptxas does not always allocate the same number of registers for the same PTX (seen on this
# machine: b05's identical PTX compiled to 186 or 196 registers from run to run, every other
# column of its SASS table unchanged). A block that differs only in that row is not stale, and is
# not rewritten: otherwise every `ladder writeups` would flip the number and CI would flake.
_VOLATILE_ROW = re.compile(r"^\|\s*registers / thread\s*\|.*$", re.M)


def _settled(text: str) -> str:
    return _VOLATILE_ROW.sub("| registers / thread | (as compiled) |", text)


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
