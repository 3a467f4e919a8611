"""``ladder``: the one entry point. list, run, diff, sass, table, selfcheck, profile, accuracy, bound,
timeline, explain, writeups, plot."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shlex
import sys
from pathlib import Path

from rich.console import Console
from rich.markdown import Markdown
from rich.syntax import Syntax
from rich.table import Table

from harness import results
from harness.paths import ROOT
from harness.steps import Step, discover, predecessor, resolve, track_steps

console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)
DEFAULT_TIMEOUT = 900.0


def _gpu() -> tuple[tuple[int, int] | None, str | None]:
    from harness.provenance import gpu_capability
    cap = gpu_capability()
    if cap is None:
        return None, None
    import torch
    return cap, torch.cuda.get_device_name()


def _runnable(step: Step, cap) -> str | None:
    return step.info.arch_for_capability(cap) if cap else None


def _recorded_summary(step: Step) -> str:
    if step.variant and not step.experiment:
        return "(variant: never recorded)"
    from harness.generate import NOT_RUN_B200, measured_on
    from ladder.contract import ARCH_CAPABILITY
    rows = results.latest_for(step.id, section="experiments" if step.experiment else "rows")
    parts = []
    for gpu, row in rows.items():
        if row.get("hmean") is None:
            continue
        reason = results.stale_reason(step, row)
        s = results.summarize(row)
        span = f" ({s['hmean_range'][0]:.3f}-{s['hmean_range'][1]:.3f})" if s["repeats"] > 1 else ""
        parts.append(f"{gpu}: {s['hmean']:.3f}{span}" + (f" (stale: {reason})" if reason else ""))
    if "sm_100a" in step.info.archs and not measured_on(rows, ARCH_CAPABILITY["sm_100a"]) and not step.variant:
        parts.append(NOT_RUN_B200)
    return ", ".join(parts) or "—"


# ---------------------------------------------------------------------------------------- list
def cmd_list(args) -> int:
    table = Table(title="attention-ladder steps (fraction of FA4 = harmonic mean over 4k/8k/16k)")
    for col in ("step", "track", "change", "enabler", "archs", "last recorded"):
        table.add_column(col)
    for step in track_steps(args.track) if args.track else discover():
        info = step.info
        table.add_row(step.id, "/".join(step.tracks), info.change, "yes" if info.enabler else "",
                      ", ".join(info.archs), _recorded_summary(step))
    console.print(table)
    return 0


# ----------------------------------------------------------------------------------------- sass
def _fingerprint_ok(step: Step, report) -> list[str]:
    problems = [f"{m} missing" for m in step.info.sass_present if not report.sass.mechanisms.get(m)]
    problems += [f"{m} present" for m in step.info.sass_absent if report.sass.mechanisms.get(m)]
    if report.sass.target != report.arch:
        problems.append(f"binary targets {report.sass.target}, not {report.arch}")
    return problems


def _sass_table(step: Step, arch: str, against: Step | None) -> int:
    from harness.compile import compile_step
    from harness.sass import MECHANISMS
    with console.status(f"compiling {step.id} for {arch} (no GPU needed)..."):
        report = compile_step(step, arch)
        other = compile_step(against, arch) if against else None
    table = Table(title=f"{step.id} on {arch}: mechanism instructions" + (f", against {against.id}" if against else ""))
    table.add_column("instruction")
    table.add_column("meaning")
    if other:
        table.add_column(against.id, justify="right")
    table.add_column(step.id, justify="right")
    if other:
        table.add_column("delta", justify="right")
    for name, _, meaning in MECHANISMS:
        now = report.sass.mechanisms.get(name, 0)
        before = other.sass.mechanisms.get(name, 0) if other else 0
        if not now and not before:
            continue
        cells = [name, meaning] + ([str(before)] if other else []) + [str(now)]
        if other:
            cells.append(f"{now - before:+d}" if now != before else "")
        table.add_row(*cells)
    for label, a, b in (("registers", other.registers if other else 0, report.registers),
                        ("spills (LDL/STL + local B)", other.sass.spills if other else 0, report.sass.spills),
                        ("threads/CTA", other.threads_per_cta if other else 0, report.threads_per_cta),
                        ("smem bytes", against.info.smem_bytes if other else 0, step.info.smem_bytes),
                        ("TMEM columns", (against.info.tmem_cols or 0) if other else 0, step.info.tmem_cols or 0)):
        if label == "TMEM columns" and not (a or b):
            continue
        table.add_row(label, "", *([str(a)] if other else []), str(b), *([f"{b - a:+d}" if b != a else ""] if other else []))
    if arch == "sm_100a" and step.info.tmem_cols:
        from harness.mma_pipe import issue_order
        table.add_row("tcgen05.mma order", "by accumulator, PTX order", *([issue_order(against)] if other else []),
                      issue_order(step), *([""] if other else []))
    console.print(table)
    problems = _fingerprint_ok(step, report)
    claim = ", ".join(step.info.sass_present) + ("; none of " + ", ".join(step.info.sass_absent) if step.info.sass_absent else "")
    console.print(f"binary target: {report.sass.target}; compiled in {report.compile_seconds:.1f} s; "
                  f"cubin: {report.cubin.relative_to(ROOT)}")
    if problems:
        console.print(f"[red]fingerprint claim ({claim}) FAILS: {'; '.join(problems)}[/red]")
        return 1
    console.print(f"[green]fingerprint claim holds:[/green] {claim}")
    return 0


def _budget_table(step: Step, arch: str, against: Step | None) -> int:
    """The softmax instruction budget (harness/softmax_budget.py): main-loop instructions per score element."""
    from harness import softmax_budget
    budgets = [softmax_budget.budget(s, arch) for s in ([against] if against else []) + [step]]
    headers, rows = softmax_budget.table(budgets)
    table = Table(title=f"softmax budget on {arch}: main-loop instructions per score element, per thread and K/V tile")
    for h in headers:
        table.add_column(h, justify="left" if h == headers[0] else "right")
    for row in rows:
        table.add_row(*(cell.replace("**", "") for cell in row))
    console.print(table)
    return 1 if any(b["ambiguous"] for b in budgets) else 0


def cmd_sass(args) -> int:
    step = resolve(args.step)
    against = resolve(args.against) if args.against else None
    archs = [args.arch] if args.arch else list(step.info.archs)
    if against:
        archs = [a for a in archs if a in against.info.archs] or archs[:1]
    code = 0
    for arch in archs:
        code |= _sass_table(step, arch, against if against and arch in against.info.archs else None)
        if args.budget:
            code |= _budget_table(step, arch, against if against and arch in against.info.archs else None)
        if args.full:
            from harness.compile import compile_step
            print(compile_step(step, arch).sass.text)
    return code


# ----------------------------------------------------------------------------------------- diff
def cmd_diff(args) -> int:
    if args.b:
        a, b = resolve(args.a), resolve(args.b)
    else:
        b = resolve(args.a)
        a = predecessor(b)
        if a is None:
            code = " --code" if args.code else ""
            console.print(f"{b.id} has no predecessor: it is where the ladder starts. "
                          f"Try `ladder diff{code} {b.id} <step>`.")
            return 0
    from harness.code_diff import code_diff, display_path
    if args.code:
        text = code_diff(a.path, b.path)
    else:
        lines = difflib.unified_diff(a.path.read_text().splitlines(keepends=True),
                                     b.path.read_text().splitlines(keepends=True),
                                     fromfile=display_path(a.path), tofile=display_path(b.path))
        text = "".join(lines)
    if not text:
        console.print("(identical code: the two files differ at most in docstrings and comments)" if args.code
                      else "(identical)")
    elif sys.stdout.isatty():
        console.print(Syntax(text, "diff", theme="ansi_dark", word_wrap=False))
    else:
        sys.stdout.write(text)
    return 0


# -------------------------------------------------------------------------------------- explain
def cmd_explain(args) -> int:
    step = resolve(args.step)
    if not step.writeup.exists():
        console.print(f"[red]no writeup for {step.id} at {step.writeup.relative_to(ROOT)}[/red]")
        return 1
    console.print(Markdown(step.writeup.read_text()))
    return 0


def _shown(path: Path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def cmd_writeups(args) -> int:
    from harness import generate, plot, timeline_draw
    stale_timelines = [s for s in timeline_draw.drawable() if timeline_draw.stale(s)]
    if args.check:
        stale = generate.stale()
        for p in stale:
            console.print(f"[red]stale generated block in {p.relative_to(ROOT)}[/red]")
        plot_stale = plot.stale()
        if plot_stale:
            console.print(f"[red]stale plot: {_shown(plot.IMG)}/{plot.NAME}.json differs from results/*.json "
                          "(`ladder plot` redraws it)[/red]")
        for s in stale_timelines:
            console.print(f"[red]stale timeline picture of {s.id} (`ladder timeline {s.id}` redraws it)[/red]")
        return 1 if stale or plot_stale or stale_timelines else 0
    for path in generate.documents():
        if path.exists() and generate.refresh(path):
            console.print(f"refreshed {path.relative_to(ROOT)}")
    if plot.stale():
        for path in plot.draw(plot.plot_data()):
            console.print(f"redrew {_shown(path)}")
    for step in stale_timelines:
        for path in timeline_draw.draw(step, *timeline_draw.source_for(step)):
            console.print(f"redrew {_shown(path)}")
    return 0


def cmd_plot(args) -> int:
    from harness import plot
    for path in plot.draw(plot.plot_data(), args.out):
        console.print(f"wrote {_shown(path)}")
    return 0


# ------------------------------------------------------------------------------------ run/table
def _print_measured(step: Step, payload: dict) -> bool:
    ok = True
    num = Table(title=f"{step.id} numerics (FA4's rule: max|out-ref32| <= 2 max|ref_bf16-ref32| + 2 fp32 noise)")
    for col in ("case", "shape", "rows", "max error", "bound", ""):
        num.add_column(col)
    for n in payload.get("numerics", []):
        ok &= n["passed"]
        num.add_row(n["case"], str(tuple(n["shape"])), str(n["rows_checked"]), f"{n['max_error']:.2e}",
                    f"{n['bound']:.2e}", "[green]ok[/green]" if n["passed"] else "[red]FAIL[/red]")
    console.print(num)
    if payload.get("bench"):
        bench = Table(title=f"{step.id} vs stock FA4, same process, same inputs")
        for col in ("seqlen", "shape", f"{step.id} TFLOP/s", "FA4 TFLOP/s", "fraction of FA4"):
            bench.add_column(col, justify="right")
        for b in payload["bench"]:
            bench.add_row(str(b["seqlen"]), str(tuple(b["shape"])), f"{b['step_tflops']:.1f}",
                          f"{b['fa4_tflops']:.1f}", f"{b['fraction']:.3f}")
        summary = results.summarize(payload)
        bench.add_row("h-mean", "", "", "", f"{summary['hmean']:.3f}")
        console.print(bench)
    return ok


def _measure(step: Step, job: str, timeout: float, sanitizer=None):
    from harness.isolate import run_job
    with console.status(f"{step.id}: {job} in a child process (timeout {timeout:.0f} s)..."):
        return run_job(job, step.spec, timeout=timeout,
                       sanitizer=sanitizer)


def cmd_run(args) -> int:
    from harness.ladder_run import check_recordable, file_outcome, measure
    step = resolve(args.step)
    if args.record:
        check_recordable(step)          # before anything runs, on any machine
    cap, name = _gpu()
    arch = _runnable(step, cap)
    if arch is None:
        where = f"this GPU ({name}, sm_{cap[0]}{cap[1]})" if cap else "this machine (no CUDA GPU)"
        console.print(f"[yellow]{step.id} did NOT run: it targets {', '.join(step.info.archs)} and "
                      f"{where} is not one of them.[/yellow] Compiling instead.")
        code = 0
        for a in step.info.archs:
            code |= _sass_table(step, a, None)
        console.print(f"last recorded fraction of FA4 (h-mean): {_recorded_summary(step)}")
        return code
    with console.status(f"{step.id}: measure in a child process (timeout {args.timeout:.0f} s)..."):
        outcome = measure(step, timeout=args.timeout)
    res = outcome.runs[-1]
    console.print(f"{name}: child finished in {res.seconds:.0f} s ({res.status})")
    shown = outcome.row or res.payload or {}          # a failed child may still have checked numerics
    if shown.get("numerics"):
        _print_measured(step, shown)
    ok = outcome.numerics in ("pass", "wrong by design")
    if outcome.error:
        console.print(f"[red]{outcome.error}[/red]")
        return 1
    if args.record and (label := file_outcome(Path(args.record), outcome)):
        console.print(f"recorded {label} into {args.record}")
    return 0 if ok else 1


def _select(args) -> list[Step]:
    track = getattr(args, "track", None)
    steps = track_steps(track) if track else discover()
    if args.steps:
        wanted = [resolve(s) for s in args.steps.split(",")]
        # Ladder steps by file, never by id: a variant saved as "h03.py" is not step h03.
        paths = {w.path for w in wanted if not w.variant}
        steps = [s for s in steps if s.path in paths] + [w for w in wanted if w.variant]
    return steps


def _cpu_table(steps: list[Step]) -> int:
    from harness.compile import compile_step
    table = Table(title="compile + SASS on this machine (no GPU): every step, every target arch")
    for col in ("step", "arch", "compile s", "regs", "spills", "threads", "smem KB", "mechanism", "claim", "recorded h-mean"):
        table.add_column(col)
    code = 0
    from rich.progress import Progress
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("compiling", total=sum(len(s.info.archs) for s in steps))
        for step in steps:
            for arch in step.info.archs:
                progress.update(task, description=f"compiling {step.id} for {arch}")
                r = compile_step(step, arch)
                problems = _fingerprint_ok(step, r)
                code |= bool(problems)
                mech = ", ".join(f"{m} {r.sass.mechanisms.get(m, 0)}" for m in step.info.sass_present)
                table.add_row(step.id, arch, f"{r.compile_seconds:.1f}", str(r.registers), str(r.sass.spills),
                              str(r.threads_per_cta), f"{step.info.smem_bytes / 1024:.0f}", mech,
                              "[green]holds[/green]" if not problems else f"[red]{'; '.join(problems)}[/red]",
                              _recorded_summary(step))
                progress.advance(task)
    console.print(table)
    console.print("No GPU here: nothing was run. Recorded h-means come from results/*.json (see their provenance).")
    return code


TABLE_HEADERS = ["step", "change", "4k", "8k", "16k", "h-mean", "vs prev", "FA4 TFLOP/s", "numerics"]


def _table_cells(outcomes) -> list[list[str]]:
    """One row of cells per measured step, in order. "vs prev" compares a ladder step with the row
    above it, and an experiment or a variant with the ladder step it edits, if that was measured
    in this run."""
    from harness.generate import ladder_cells
    cells, prev, ladder = [], None, {}
    for o in outcomes:
        if o.error:
            cells.append([o.step.id, o.step.info.change, *[""] * 6, f"ERROR: {o.error[:60]}"])
            prev = None
            continue
        base = ladder.get(o.step.info.id) if o.kind != "row" else prev
        fa4 = " / ".join(f"{b['fa4_tflops']:.0f}" for b in o.row["bench"])
        cells.append([o.step.id, o.step.info.change, *ladder_cells(o.summary, base), fa4, o.numerics])
        if o.kind == "row":
            prev = ladder[o.step.id] = o.summary
    return cells


def cmd_table(args) -> int:
    steps = _select(args)
    cap, name = _gpu()
    if cap is None:
        return _cpu_table(steps)
    runnable = [s for s in steps if _runnable(s, cap)]
    skipped = [s.id for s in steps if not _runnable(s, cap)]
    if skipped:
        console.print(f"not runnable on {name} (other arch): {', '.join(skipped)}")
    from rich.progress import Progress

    from harness.ladder_run import run_ladder
    with Progress(console=console) as progress:
        task = progress.add_task("ladder", total=len(runnable) + (1 if args.stock else 0))

        started = []

        def on_step(what):
            progress.update(task, description=what, advance=1 if started else 0)
            started.append(what)

        run = run_ladder(runnable, gpu=name, timeout=args.timeout, repeat=args.repeat,
                         record=Path(args.record) if args.record else None,
                         baseline=Path(args.baseline) if args.baseline else None, tolerance=args.tolerance,
                         stock=args.stock, on_step=on_step)
    title = f"attention-ladder on {name}: fraction of stock FA4 (same process" + (
        f"; median of {args.repeat} processes, h-mean min-max in parentheses)" if args.repeat > 1 else ")")
    table = Table(title=title)
    for col in TABLE_HEADERS:
        table.add_column(col)
    colour = {"pass": "green", "FAIL": "red", "wrong by design": "yellow"}
    for row in _table_cells(run.outcomes):
        style = colour.get(row[-1], "red")
        table.add_row(*row[:-1], f"[{style}]{row[-1]}[/{style}]")
    console.print(table)
    if run.stock:
        console.print("context: " + ", ".join(f"{b['seqlen']}: FA4 {b['fa4_tflops']:.0f}, cuDNN {b['cudnn_tflops']:.0f}, "
                                               f"FA2 {b['fa2_tflops']:.0f} TFLOP/s" for b in run.stock["bench"]))
    if args.json:
        Path(args.json).write_text(json.dumps(run.measured_rows(), indent=1))
    if args.markdown:
        from harness.generate import markdown_table
        with open(args.markdown, "a") as f:
            f.write(f"### {title}\n\n{markdown_table(_table_cells(run.outcomes), TABLE_HEADERS)}\n\n")
            f.writelines(f"- {line}\n" for line in run.notes + run.failures)
    if run.recorded:
        console.print(f"recorded {', '.join(run.recorded)} into {args.record}")
    for note in run.notes:
        console.print(f"[yellow]{note}[/yellow]")
    for failure in run.failures:
        console.print(f"[red]{failure}[/red]")
    return run.exit_code


GUARD_TIMEOUT = 60.0   # selfcheck --guard: tiny shapes finish in seconds; a minute means a hang


def _guarded_compiles(steps: list[Step]) -> int:
    """Compile the Blackwell steps with TMEM guardrails where none can run: what a CPU (or an H200)
    can check of ``selfcheck --guard``."""
    from harness.compile import compile_step
    code = 0
    for step in steps:
        if step.info.extra.get("no_tmem_guard"):
            console.print(f"{step.id}: no guarded build ({step.info.extra['no_tmem_guard']}); "
                          "on a B200 it runs without guardrails, with the same timeout")
            continue
        try:
            report = compile_step(step, "sm_100a", guard=True)
            console.print(f"{step.id}: compiled for sm_100a with TMEM guardrails ({report.compile_seconds:.1f} s); "
                          "[yellow]not run: no sm_100 GPU here[/yellow]")
        except Exception as e:   # a compile error is the finding: report it, go on
            console.print(f"[red]{step.id}: guarded compile failed: {type(e).__name__}: {e}[/red]")
            code = 1
    return code


def _hang_suspects(step: Step) -> None:
    """On a timeout: the step's barrier waits and who arrives on each (from the protocol model)."""
    from harness import protocol
    console.print(f"[red]{step.id} did not finish: a hang. Its barriers, who waits and who arrives "
                  "(harness/protocol.py, from the kernel source):[/red]")
    try:
        for line in protocol.describe(step.module):
            console.print(line, markup=False, highlight=False)
    except Exception as e:
        console.print(f"(the protocol model could not read {step.id}: {e})")


def cmd_selfcheck(args) -> int:
    timeout = args.timeout if args.timeout is not None else (GUARD_TIMEOUT if args.guard else 600.0)
    cap, name = _gpu()
    candidates = [s for s in (_select(args) if args.steps else discover()) if not s.variant]
    if args.guard:
        unrunnable = [s for s in candidates if "sm_100a" in s.info.archs and not _runnable(s, cap)]
        code = _guarded_compiles(unrunnable)
        if cap is None:
            console.print("[yellow]selfcheck --guard compiled what it could; nothing ran (no CUDA GPU).[/yellow]")
            return code or 2
    if cap is None:
        console.print("[yellow]selfcheck needs a CUDA GPU; none here. On a CPU, `ladder table` compiles every step.[/yellow]")
        return 2
    steps = [s for s in candidates if _runnable(s, cap)]
    console.print(f"{name} (sm_{cap[0]}{cap[1]}): {len(steps)} runnable steps"
                  + (f", under compute-sanitizer --tool={args.sanitize}" if args.sanitize else "")
                  + (f", TMEM guardrails on sm_100a, timeout {timeout:.0f} s" if args.guard else ""))
    passed = []
    for step in steps:
        res = _measure(step, "selfcheck-guard" if args.guard else "selfcheck", timeout, sanitizer=args.sanitize)
        nums = (res.payload or {}).get("numerics", [])
        ok = res.status == "ok" and nums and all(n["passed"] for n in nums)
        detail = "; ".join(f"{n['case']} {n['max_error']:.1e}/{n['bound']:.1e}" for n in nums)
        unguarded = " (no guardrails: see INFO no_tmem_guard)" if args.guard and step.info.extra.get("no_tmem_guard") else ""
        console.print(f"{step.id}: {'[green]ok[/green]' if ok else '[red]FAIL[/red]'} ({res.seconds:.0f} s){unguarded} {detail}")
        if not ok:
            reports = res.sanitizer_reports()
            console.print(f"[red]first failing step: {step.id}: "
                          f"{'sanitizer reports' if reports else (res.error or 'numerics')[:2000]}[/red]")
            for line in reports:
                console.print(line, markup=False)
            if res.status == "timeout":
                _hang_suspects(step)
            return 1
        passed.append(step)
    console.print("[green]all runnable steps pass[/green]")
    if args.record:
        tool = "+".join(t for t in ("guard" if args.guard else "", args.sanitize or "") if t) or "none"
        results.record_selfcheck(Path(args.record), tool, passed)
        console.print(f"recorded into {args.record}")
    return 0


def cmd_profile(args) -> int:
    from harness.profile import METRICS, profile, stall_reasons
    step = resolve(args.step)
    cap, name = _gpu()
    if not _runnable(step, cap):
        console.print(f"[yellow]profile needs a GPU that {step.id} targets ({', '.join(step.info.archs)}).[/yellow]")
        return 2
    if args.record and step.variant and not step.experiment:
        raise ValueError(f"{step.id} is a variant file, not a ladder step: its profile is not recorded")
    with console.status(f"ncu on {step.id}{' and FA4' if args.with_fa4 else ''} at seqlen {args.seqlen}..."):
        payloads = profile(step.spec, args.seqlen, with_fa4=args.with_fa4)
    table = Table(title=f"seqlen {args.seqlen} on {name} (ncu --clock-control none, one run)")
    table.add_column("metric")
    for payload in payloads:
        table.add_column(payload["step"], justify="right")
    reasons = list(dict.fromkeys(r for p in payloads for r, _ in stall_reasons(p["metrics"])))
    for metric, meaning in METRICS.items():
        table.add_row(meaning, *("n/a" if p["metrics"].get(metric) is None else f"{p['metrics'][metric]:,.1f}"
                                 for p in payloads))
    for reason in reasons:
        key = f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"
        table.add_row(f"warps stalled on {reason} per issued instruction",
                      *(f"{p['metrics'].get(key) or 0.0:.2f}" for p in payloads))
    console.print(table)
    if args.record:
        for payload in payloads:
            results.record_profile(Path(args.record), payload)
        console.print(f"recorded {', '.join(p['step'] for p in payloads)} into {args.record}")
    return 0


ACCURACY_TIMEOUT = 300.0      # one compile and one element-wise launch: seconds; minutes mean a hang


def _print_accuracy(label: str, stats: dict) -> None:
    from harness.ex2_model import BF16_ROUNDING
    console.print(f"{label}: max relative error {stats['max_rel_error']:.3e} (2^{stats['max_rel_error_log2']:.2f}) "
                  f"at x = {stats['argmax_x']!r} over {stats['normal_elements']:,} x >= -126; bound 2^-9 = "
                  f"{BF16_ROUNDING:.3e} (bf16 rounding of P); max absolute error below x = -126: "
                  f"{stats['max_abs_error_below_normal']:.3e}; {stats['elements']:,} elements")


def _child_payload(job: str, step: Step, what: str, timeout: float) -> dict | None:
    """Run ``job`` for ``step`` in a child process; its payload, or None after printing why not."""
    from harness.isolate import run_job
    with console.status(f"{step.id}: {what} in a child process (timeout {timeout:.0f} s)..."):
        res = run_job(job, step.spec, timeout=timeout)
    if res.status != "ok":
        console.print(f"[red]{step.id}: {res.error}[/red]")
        return None
    return res.payload


def cmd_accuracy(args) -> int:
    """The step's FMA-pipe exp2 on this GPU against float64 (harness/ex2_accuracy.py), in a child."""
    from harness import ex2_accuracy, ex2_model
    step = resolve(args.step or ex2_accuracy.DEFAULT_STEP)
    ex2_accuracy.fingerprint(step)           # the step has the emulation block, before anything runs
    cap, name = _gpu()
    if cap not in ex2_accuracy.PATHS:
        for arch, packed in ex2_accuracy.PATHS.values():
            with console.status(f"compiling {step.id}'s exp2 emulation element-wise for {arch}..."):
                ops = ex2_accuracy.compile_sass(step, arch, packed).opcodes
            counts = ", ".join([f"{op} {n}" for op, n in sorted(ops.items()) if op.startswith(("FMNMX", "FADD", "FFMA"))]
                               + [f"MUFU.EX2 {ops.get('MUFU.EX2', 0)}"])
            console.print(f"compiled for {arch}, {ex2_accuracy.path_name(packed)}, per pair of elements: {counts}")
        x = ex2_accuracy.inputs()
        _print_accuracy("CPU float32 model (numpy; not a GPU measurement, never recorded)",
                        ex2_model.errors(x, ex2_accuracy.model(step, x)))
        where = f"this GPU ({name}, sm_{cap[0]}{cap[1]})" if cap else "this machine (no CUDA GPU)"
        console.print(f"[yellow]ladder accuracy needs an sm_90 or sm_100 GPU to run the kernel; {where} is not one: "
                      "compiled only, nothing ran, nothing recorded.[/yellow]")
        return 2
    payload = _child_payload("ex2-accuracy", step, "exp2 emulation", args.timeout)
    if payload is None:
        return 1
    _print_accuracy(f"{name}, {payload['arch']} {payload['path']}", payload)
    ok = payload["max_rel_error"] < payload["bound"]
    if payload["model_mismatches"]:
        console.print(f"[yellow]{payload['model_mismatches']} results differ in some bit from the CPU model "
                      f"(first at x = {payload['first_mismatch_x']!r})[/yellow]")
    else:
        console.print("every result is bit-identical to the CPU float32 model")
    if not ok:
        console.print(f"[red]{step.id}: the emulation's error is not below bf16 rounding[/red]")
    if args.record:
        results.record_accuracy(Path(args.record), payload)
        console.print(f"recorded into {args.record}")
    return 0 if ok else 1


def cmd_bound(args) -> int:
    from harness import bound
    step = resolve(args.step)
    gpu_key = args.gpu or ("b200" if step.track == "blackwell" else "h200")
    with console.status(f"compiling {step.id} (no GPU needed)..."):
        b = bound.bound(step, gpu_key)
        ref = bound.fa4_bound(gpu_key)
    table = Table(title=f"{step.id} on {units_name(gpu_key)} (model): cycles per CTA and K/V tile")
    table.add_column("unit / term")
    table.add_column(step.id, justify="right")
    table.add_column("FA4", justify="right")
    for unit in b.units:
        table.add_row(unit, f"{b.units[unit]:,.0f}", f"{ref.units.get(unit, 0):,.0f}")
    for name, cyc in b.chain_terms.items():
        table.add_row(f"chain: {name}", f"{cyc:,.0f}", "")
    table.add_row("one CTA's chain", f"{b.chain:,.0f}", f"{ref.chain:,.0f}")
    table.add_row("CTAs per SM", str(b.ctas_per_sm), str(ref.ctas_per_sm))
    table.add_row("time per CTA and tile", f"{b.cycles:,.0f}", f"{ref.cycles:,.0f}")
    table.add_row("FLOP per cycle per SM", f"{b.flop_per_cycle:,.0f}", f"{ref.flop_per_cycle:,.0f}")
    console.print(table)
    console.print(f"structure: {b.structure} (INFO.extra['bound']); binds: {b.binding}; FA4 ({ref.structure}) "
                  f"binds: {ref.binding}")
    console.print(f"predicted fraction of FA4 (model, not a measurement): {bound.fraction_of(b, ref):.2f}")
    return 0


TIMELINE_TIMEOUT = 300.0      # one compile and a few launches


def _print_timeline(record: dict, title: str) -> None:
    from harness import timeline
    table = Table(title=title)
    table.add_column("lane")
    for name in record["phases"]:
        table.add_column(name, justify="right")
    for lane, medians in timeline.phase_medians(record).items():
        table.add_row(lane, *(f"{medians[n]:,.0f}" if n in medians else "" for n in record["phases"]))
    console.print(table)
    per = timeline.period(record)
    if per:
        console.print(f"one K/V tile every {per:,.0f} cycles (median over tiles 2-{timeline.KEPT_TILES - 1})")


def cmd_timeline(args) -> int:
    """Measure (--measure, on a GPU of the step's arch) or draw a step's timeline."""
    from harness import timeline
    step = resolve(args.step)
    timeline.check_markers(step.module, step.path.read_text())
    if args.measure:
        cap, name = _gpu()
        if not _runnable(step, cap):
            where = f"this GPU ({name})" if cap else "this machine (no CUDA GPU)"
            console.print(f"[yellow]{step.id} cannot run on {where}: nothing measured.[/yellow]")
            return 2
        record = _child_payload("timeline", step, "instrumented run", args.timeout)
        if record is None:
            return 1
        _print_timeline(record, f"{step.id} on {name}: median cycles per phase, one CTA (measured)")
        console.print(f"instrumented kernel {record['instrumented_ms']:.3f} ms vs the step {record['step_ms']:.3f} ms; "
                      f"numerics {'pass' if record['numerics_passed'] else 'FAIL'}")
        if args.record:
            results.record_timeline(Path(args.record), record)
            console.print(f"recorded into {args.record}")
        return 0 if record["numerics_passed"] else 1
    from harness import timeline_draw
    record, label = timeline_draw.source_for(step)
    _print_timeline(record, f"{step.id}: median cycles per phase, one CTA ({label})")
    for path in timeline_draw.draw(step, record, label, Path(args.out) if args.out else None):
        console.print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


def units_name(gpu_key: str) -> str:
    from harness import units
    return units.gpu(gpu_key).name


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ladder", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("list", help="every step, its change, enabler flag, last recorded fraction of FA4")
    s.add_argument("--track", choices=("hopper", "blackwell"))
    s.set_defaults(fn=cmd_list)
    s = sub.add_parser("run", help="numerics + timing vs FA4 on a matching GPU; else compile and show SASS")
    s.add_argument("step")
    s.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    s.add_argument("--record", metavar="FILE")
    s.set_defaults(fn=cmd_run)
    s = sub.add_parser("diff", help="unified diff of a step against its predecessor (or any other step)")
    s.add_argument("a")
    s.add_argument("b", nargs="?")
    s.add_argument("--code", action="store_true", help="code lines only: docstrings and comments stripped")
    s.set_defaults(fn=cmd_diff)
    s = sub.add_parser("sass", help="mechanism instruction histogram, registers, spills (any machine)")
    s.add_argument("step")
    s.add_argument("--against")
    s.add_argument("--arch", choices=("sm_90a", "sm_100a"))
    s.add_argument("--full", action="store_true", help="also print the whole disassembly")
    s.add_argument("--budget", action="store_true", help="also the softmax budget: main-loop instructions per score element")
    s.set_defaults(fn=cmd_sass)
    s = sub.add_parser("table", help="the ladder table: measured on a GPU, compile/SASS + recorded on CPU")
    s.add_argument("--track", choices=("hopper", "blackwell"))
    s.add_argument("--steps", help="comma-separated step ids")
    s.add_argument("--record", metavar="FILE", help="merge measured rows into this results file")
    s.add_argument("--baseline", metavar="FILE", help="fail if a step's h-mean falls below this file's")
    s.add_argument("--tolerance", type=float, default=0.05)
    s.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="per step, seconds")
    s.add_argument("--stock", action="store_true", help="also time FA4 against cuDNN and FA2 (context rows)")
    s.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="measure each step in N child processes; show median and min-max (recorded ladder: 3)")
    s.add_argument("--json", metavar="FILE", help="write the measured rows here too")
    s.add_argument("--markdown", metavar="FILE", help="append the table as Markdown (e.g. $GITHUB_STEP_SUMMARY)")
    s.set_defaults(fn=cmd_table)
    s = sub.add_parser("selfcheck", help="every runnable step at tiny shapes, each in a child with a timeout")
    s.add_argument("--steps", help="comma-separated step ids (default: every runnable step)")
    s.add_argument("--sanitize", choices=("memcheck", "racecheck", "synccheck", "initcheck"))
    s.add_argument("--guard", action="store_true",
                   help="TMEM guardrails (ptxas) on sm_100a, a 60 s timeout, and on a hang the barriers "
                        "each role waits on; where a step cannot run, compile it with guardrails")
    s.add_argument("--timeout", type=float, default=None, help="per step, seconds (default 600; 60 with --guard)")
    s.add_argument("--record", metavar="FILE", help="note the clean run (tool, steps, provenance) in this results file")
    s.set_defaults(fn=cmd_selfcheck)
    s = sub.add_parser("profile", help="Nsight Compute counters for one step at one bench shape (GPU)")
    s.add_argument("step")
    s.add_argument("--seqlen", type=int, default=4096)
    s.add_argument("--with-fa4", action="store_true",
                   help="then stock FA4 on the same inputs, in the same process and ncu run")
    s.add_argument("--record", metavar="FILE")
    s.set_defaults(fn=cmd_profile)
    s = sub.add_parser("accuracy", help="a step's FMA-pipe exp2 emulation on the GPU against float64 "
                                        "(element-wise kernel; on a CPU: compile and the numpy model)")
    s.add_argument("step", nargs="?", help="a step with ex2_emulated_pair (default: b11)")
    s.add_argument("--timeout", type=float, default=ACCURACY_TIMEOUT, help="seconds")
    s.add_argument("--record", metavar="FILE", help="store the numbers (with provenance) in this results file")
    s.set_defaults(fn=cmd_accuracy)
    s = sub.add_parser("bound", help="what bounds a step: cycles per K/V tile of each SM unit, from its SASS, "
                                     "combined by its overlap structure; predicted fraction of FA4 (any machine)")
    s.add_argument("step")
    s.add_argument("--gpu", choices=("h200", "b200"), help="default: the step's own architecture's GPU")
    s.set_defaults(fn=cmd_bound)
    s = sub.add_parser("timeline", help="one CTA's warp roles phase by phase over K/V tiles: measured on the GPU "
                                        "(--measure), drawn from the recording, or simulated for Blackwell")
    s.add_argument("step")
    s.add_argument("--measure", action="store_true", help="run the instrumented step on this GPU")
    s.add_argument("--record", metavar="FILE", help="with --measure: store the timeline in this results file")
    s.add_argument("--timeout", type=float, default=TIMELINE_TIMEOUT, help="seconds")
    s.add_argument("--out", metavar="DIR", help="draw here instead of writeups/img")
    s.set_defaults(fn=cmd_timeline)
    s = sub.add_parser("explain", help="render a step's writeup in the terminal")
    s.add_argument("step")
    s.set_defaults(fn=cmd_explain)
    s = sub.add_parser("writeups", help="refresh the generated result blocks in writeups/ and README.md, "
                                        "and redraw the ladder plot if its data changed")
    s.add_argument("--check", action="store_true", help="only report stale blocks and plot (exit 1 if any)")
    s.set_defaults(fn=cmd_writeups)
    s = sub.add_parser("plot", help="draw writeups/img/ladder.svg/.png (+ .json, its data) from results/*.json")
    s.add_argument("--out", metavar="DIR", help="write here instead of writeups/img")
    s.set_defaults(fn=cmd_plot)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    # Children record the command that asked for the numbers, not their own argv.
    os.environ.setdefault("LADDER_COMMAND", shlex.join(["ladder", *argv]))
    try:
        return args.fn(args)
    except ValueError as e:
        console.print(f"[red]{e}[/red]")
        return 2


if __name__ == "__main__":
    sys.exit(main())
