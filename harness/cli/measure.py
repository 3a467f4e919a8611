"""Measuring on a GPU: ``ladder run``, ``ladder table`` (on a CPU: the compile table),
``ladder selfcheck`` (tiny shapes, sanitizers, TMEM guardrails, hang reports)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.progress import Progress
from rich.table import Table

from harness.cli import common
from harness.cli.common import DEFAULT_TIMEOUT, arch_to_run, console, recorded_summary, select_steps
from harness.cli.compiled import fingerprint_problems, sass_table
from harness.compiler.compile import compile_step
from harness.core import results
from harness.core.steps import Step, discover, resolve
from harness.gpu.isolate import run_job
from harness.gpu.ladder_run import check_recordable, file_outcome, measure, run_ladder
from harness.model import protocol_replay
from harness.report.tables import built_with, fa4_ran, ladder_cells, markdown_table


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
        console.print(f"FA4's kernel: {fa4_ran([payload])}; compiled by {built_with([payload])}")
    return ok


def _measure(step: Step, job: str, timeout: float, sanitizer=None):
    with console.status(f"{step.id}: {job} in a child process (timeout {timeout:.0f} s)..."):
        return run_job(job, step.spec, timeout=timeout,
                       sanitizer=sanitizer)


def cmd_run(args) -> int:
    step = resolve(args.step)
    if args.record:
        check_recordable(step)          # before anything runs, on any machine
    cap, name = common.gpu()
    arch = arch_to_run(step, cap)
    if arch is None:
        where = f"this GPU ({name}, sm_{cap[0]}{cap[1]})" if cap else "this machine (no CUDA GPU)"
        console.print(f"[yellow]{step.id} did NOT run: it targets {', '.join(step.info.archs)} and "
                      f"{where} is not one of them.[/yellow] Compiling instead.")
        code = 0
        for a in step.info.archs:
            code |= sass_table(step, a, None)
        console.print(f"last recorded fraction of FA4 (h-mean): {recorded_summary(step)}")
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


def cpu_table(steps: list[Step]) -> int:
    table = Table(title="compile + SASS on this machine (no GPU): every step, every target arch")
    for col in ("step", "arch", "compile s", "regs", "spills", "threads", "smem KB", "mechanism", "claim", "recorded h-mean"):
        table.add_column(col)
    code = 0
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("compiling", total=sum(len(s.info.archs) for s in steps))
        for step in steps:
            for arch in step.info.archs:
                progress.update(task, description=f"compiling {step.id} for {arch}")
                r = compile_step(step, arch)
                problems = fingerprint_problems(step, r)
                code |= bool(problems)
                mech = ", ".join(f"{m} {r.sass.mechanisms.get(m, 0)}" for m in step.info.sass_present)
                table.add_row(step.id, arch, f"{r.compile_seconds:.1f}", str(r.registers), str(r.sass.spills),
                              str(r.threads_per_cta), f"{step.info.smem_bytes / 1024:.0f}", mech,
                              "[green]holds[/green]" if not problems else f"[red]{'; '.join(problems)}[/red]",
                              recorded_summary(step))
                progress.advance(task)
    console.print(table)
    console.print("No GPU here: nothing was run. Recorded h-means come from results/*.json (see their provenance).")
    return code


TABLE_HEADERS = ["step", "change", "4k", "8k", "16k", "h-mean", "vs prev", "FA4 TFLOP/s", "numerics"]


def _table_cells(outcomes) -> list[list[str]]:
    """One row of cells per measured step, in order. "vs prev" compares a ladder step with the row
    above it, and an experiment or a variant with the ladder step it edits, if that was measured
    in this run."""
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
    steps = select_steps(args)
    cap, name = common.gpu()
    if cap is None:
        return cpu_table(steps)
    runnable = [s for s in steps if arch_to_run(s, cap)]
    skipped = [s.id for s in steps if not arch_to_run(s, cap)]
    if skipped:
        console.print(f"not runnable on {name} (other arch): {', '.join(skipped)}")

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
    measured = [o.row for o in run.outcomes if o.row]
    about = f"FA4's kernel: {fa4_ran(measured)}; compiled by {built_with(measured)}" if measured else ""
    if about:
        console.print(about)
    if run.stock:
        console.print("context: " + ", ".join(f"{b['seqlen']}: FA4 {b['fa4_tflops']:.0f}, cuDNN {b['cudnn_tflops']:.0f}, "
                                               f"FA2 {b['fa2_tflops']:.0f} TFLOP/s" for b in run.stock["bench"]))
    if args.json:
        Path(args.json).write_text(json.dumps(run.measured_rows(), indent=1))
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write(f"### {title}\n\n{markdown_table(_table_cells(run.outcomes), TABLE_HEADERS)}\n\n")
            f.writelines(f"- {line}\n" for line in ([about] if about else []) + run.notes + run.failures)
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
    console.print(f"[red]{step.id} did not finish: a hang. Its barriers, who waits and who arrives "
                  "(harness/model/protocol.py, from the kernel source):[/red]")
    try:
        for line in protocol_replay.describe(step.module):
            console.print(line, markup=False, highlight=False)
    except Exception as e:
        console.print(f"(the protocol model could not read {step.id}: {e})")


def cmd_selfcheck(args) -> int:
    timeout = args.timeout if args.timeout is not None else (GUARD_TIMEOUT if args.guard else 600.0)
    cap, name = common.gpu()
    # Named steps run as named (an experiment too); by default every ladder step.
    candidates = select_steps(args) if args.steps else [s for s in discover() if not s.variant]
    if args.guard:
        unrunnable = [s for s in candidates if "sm_100a" in s.info.archs and not arch_to_run(s, cap)]
        code = _guarded_compiles(unrunnable)
        if cap is None:
            console.print("[yellow]selfcheck --guard compiled what it could; nothing ran (no CUDA GPU).[/yellow]")
            return code or 2
    if cap is None:
        console.print("[yellow]selfcheck needs a CUDA GPU; none here. On a CPU, `ladder table` compiles every step.[/yellow]")
        return 2
    steps = [s for s in candidates if arch_to_run(s, cap)]
    if not steps:
        console.print(f"[red]none of {', '.join(s.id for s in candidates) or 'the steps'} runs on {name}: "
                      "nothing was checked[/red]")
        return 1
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


def add_commands(sub) -> None:
    s = sub.add_parser("run", help="numerics + timing vs FA4 on a matching GPU; else compile and show SASS")
    s.add_argument("step")
    s.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    s.add_argument("--record", metavar="FILE")
    s.set_defaults(fn=cmd_run)
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
