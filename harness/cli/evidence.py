"""The evidence behind a writeup: ``ladder profile`` (Nsight Compute counters), ``ladder accuracy``
(the FMA-pipe exp2 against float64), ``ladder timeline`` (one CTA's phases, measured or simulated)."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from harness.cli import common
from harness.cli.common import arch_to_run, child_payload, console
from harness.core import results
from harness.core.paths import ROOT
from harness.core.steps import resolve
from harness.gpu import ex2_accuracy
from harness.gpu.profile import METRICS, profile, stall_reasons
from harness.model import ex2_model
from harness.model.ex2_model import BF16_ROUNDING
from harness.report import timeline_draw
from harness.timeline import probes, records


def cmd_profile(args) -> int:
    step = resolve(args.step)
    cap, name = common.gpu()
    if not arch_to_run(step, cap):
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
    console.print(f"{label}: max relative error {stats['max_rel_error']:.3e} (2^{stats['max_rel_error_log2']:.2f}) "
                  f"at x = {stats['argmax_x']!r} over {stats['normal_elements']:,} x >= -126; bound 2^-9 = "
                  f"{BF16_ROUNDING:.3e} (bf16 rounding of P); max absolute error below x = -126: "
                  f"{stats['max_abs_error_below_normal']:.3e}; {stats['elements']:,} elements")


def cmd_accuracy(args) -> int:
    """The step's FMA-pipe exp2 on this GPU against float64 (harness/gpu/ex2_accuracy.py), in a child."""
    step = resolve(args.step or ex2_accuracy.DEFAULT_STEP)
    ex2_accuracy.fingerprint(step)           # the step has the emulation block, before anything runs
    cap, name = common.gpu()
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
    payload = child_payload("ex2-accuracy", step, "exp2 emulation", args.timeout)
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


TIMELINE_TIMEOUT = 300.0      # one compile and a few launches


def _print_timeline(record: dict, title: str) -> None:
    table = Table(title=title)
    table.add_column("lane")
    for name in record["phases"]:
        table.add_column(name, justify="right")
    for lane, medians in records.phase_medians(record).items():
        table.add_row(lane, *(f"{medians[n]:,.0f}" if n in medians else "" for n in record["phases"]))
    console.print(table)
    per = records.period(record)
    if per:
        console.print(f"one K/V tile every {per:,.0f} cycles (median over tiles 2-{records.KEPT_TILES - 1})")


def cmd_timeline(args) -> int:
    """Measure (--measure, on a GPU of the step's arch) or draw a step's timeline."""
    step = resolve(args.step)
    probes.check_markers(step.module, step.path.read_text())
    if args.measure:
        cap, name = common.gpu()
        if not arch_to_run(step, cap):
            where = f"this GPU ({name})" if cap else "this machine (no CUDA GPU)"
            console.print(f"[yellow]{step.id} cannot run on {where}: nothing measured.[/yellow]")
            return 2
        record = child_payload("timeline", step, "instrumented run", args.timeout)
        if record is None:
            return 1
        _print_timeline(record, f"{step.id} on {name}: median cycles per phase, one CTA (measured)")
        console.print(f"instrumented kernel {record['instrumented_ms']:.3f} ms vs the step {record['step_ms']:.3f} ms; "
                      f"numerics {'pass' if record['numerics_passed'] else 'FAIL'}")
        if args.record:
            results.record_timeline(Path(args.record), record)
            console.print(f"recorded into {args.record}")
        return 0 if record["numerics_passed"] else 1
    record, label = timeline_draw.source_for(step)
    _print_timeline(record, f"{step.id}: median cycles per phase, one CTA ({label})")
    for path in timeline_draw.draw(step, record, label, Path(args.out) if args.out else None):
        console.print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


def add_commands(sub) -> None:
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
    s = sub.add_parser("timeline", help="one CTA's warp roles phase by phase over K/V tiles: measured on the GPU "
                                        "(--measure), drawn from the recording, or simulated for Blackwell")
    s.add_argument("step")
    s.add_argument("--measure", action="store_true", help="run the instrumented step on this GPU")
    s.add_argument("--record", metavar="FILE", help="with --measure: store the timeline in this results file")
    s.add_argument("--timeout", type=float, default=TIMELINE_TIMEOUT, help="seconds")
    s.add_argument("--out", metavar="DIR", help="draw here instead of writeups/img")
    s.set_defaults(fn=cmd_timeline)
