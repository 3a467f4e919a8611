"""Generated blocks of the models and their checks: ``accuracy <step>`` (the FMA-pipe exp2 measured),
``bound hopper`` (the bound model against the measurements), ``timeline <step>`` (measured, or
simulated for a Blackwell step without a B200 run), ``timeline-check hopper``."""

from __future__ import annotations

import math

from harness.core import results
from harness.core.steps import resolve, track_steps
from harness.gpu import ex2_accuracy
from harness.model.ex2_model import BF16_ROUNDING
from harness.report import bound_report, timeline_draw
from harness.report.tables import NOT_RUN_B200, STALE, built_with, markdown_table
from harness.timeline import records
from harness.timeline import simulate as timeline_sim


def accuracy_block(step_id: str) -> str:
    """The recorded accuracy of a step's FMA-pipe exp2 (``ladder accuracy <step> --record``), per
    GPU: its largest relative error where 2^x is normal against bf16's rounding, and where."""
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
                     f"nvidia-cutlass-dsl {p['cutlass_dsl']}, {built_with([entry])}.")
    if table:
        lines[:0] = [markdown_table(table, ["GPU, date", "path", "max relative error (x >= -126)", "at x",
                                            "bound (bf16 rounding of P)", "max absolute error (x < -126)",
                                            "inputs", "bit-identical to the CPU model"]), "",
                     f"`{step.id}.ex2_emulated_pair` in an element-wise kernel, against float64 2^x, over a dense "
                     "grid on [-127, 0], every integer and its float32 neighbours, the clamp region down to -200, "
                     "huge negatives and 0 (`harness/gpu/ex2_accuracy.py`). " + " ".join(notes)]
    if not lines:
        lines.append(f"Accuracy of {step.id}'s exp2 emulation on a GPU: not yet recorded (bound: bf16 rounding of P, "
                     f"2^-9 = {BF16_ROUNDING:.2e}; `ladder accuracy {step.id} --record results/<gpu>.json`).")
    return "\n".join(lines) + "\n"


def bound_block(track: str) -> str:
    """``bound hopper``: the bound model against every measured Hopper step (harness/report/bound_report.py)."""
    if track != "hopper":
        raise ValueError(f"bound block: only `bound hopper` (the check against measurements); the Blackwell "
                         f"predictions are a column of `table blackwell`, not {track!r}")
    rows, summary = bound_report.hopper_check()
    if not rows and summary["stale"]:
        return (f"Model check: no H200 row measured today's code ({', '.join(summary['stale'])} left out: "
                "measured before their code changed, to be re-measured); nothing to check the model against.\n")
    if not rows:
        return "No Hopper step measured yet: nothing to check the model against.\n"
    return markdown_table(rows, bound_report.HOPPER_HEADERS) + "\n\n" + bound_report.hopper_note(summary)


def _timeline_table(record: dict, simulated: bool) -> str:
    medians = records.phase_medians(record)
    tag = " (simulated)" if simulated else ""
    rows = [[lane + tag, *(f"{m[n]:,.0f}" if n in m else "" for n in record["phases"])] for lane, m in medians.items()]
    return markdown_table(rows, ["lane (one warp per role)", *record["phases"]])


def timeline_block(step_id: str) -> str:
    """``timeline hNN``: the step's measured timeline (picture, median cycles per phase, what the
    probes cost, provenance); for a Blackwell step without a B200 measurement, its simulation."""
    step = resolve(step_id)
    record, label = timeline_draw.source_for(step)
    simulated = bool(record.get("simulated"))
    w = timeline_draw.WINDOW
    lines = [f"![{step.id}: one CTA's warps over K/V tiles {w.start}-{w.stop - 1}, {label}]"
             f"(../img/timeline-{step.id}.svg)", "",
             f"Median cycles per timeline phase over tiles 2-{records.KEPT_TILES - 1} of one CTA"
             + (" (simulated, not measured):" if simulated else f" ({label}):"), "",
             _timeline_table(record, simulated), ""]
    per = records.period(record)
    busy = records.gemm_in_flight(record)
    busy_text = (f"; a GEMM is in flight (from its issue to its wait's return, queueing behind the other "
                 f"warpgroup's included) {busy:.0%} of the time (tiles 2-{records.KEPT_TILES - 3})"
                 if busy is not None else "")
    lines.append(f"Each lane draws its own phases of tiles {w.start}-{w.stop - 1}: a producer that runs ahead of the "
                 "consumers waits for those tiles' slots earlier, so its bars stand left of theirs.")
    lines.append("")
    if simulated:
        lines.append(f"Simulated (B200 unit rates, {NOT_RUN_B200}): one K/V tile every {per:,.0f} cycles{busy_text}. "
                     "The MMA warp's bars are issue only; the tensor pipe's lane shows when the GEMMs run. "
                     "What the simulation leaves out is in `harness/timeline/simulate.py`; "
                     f"`ladder timeline {step.id} --measure` on a B200 replaces it with a measurement.")
    else:
        p = record["provenance"]
        cost = record["instrumented_ms"] / record["step_ms"] - 1
        lines.append(f"One K/V tile every {per:,.0f} cycles on the sampled CTA{busy_text}. The probes' price: the instrumented "
                     f"kernel ran {record['instrumented_ms']:.3f} ms against the step's {record['step_ms']:.3f} ms "
                     f"({cost:+.0%}) at seqlen {record['shape'][1] // 1024}k, and its output "
                     f"{'passed' if record['numerics_passed'] else 'FAILED'} FA4's numerics rule. Recorded by "
                     f"`{p['command']}` on {p['gpu']} (driver {p.get('driver')}), {p['date'][:10]}, "
                     f"nvidia-cutlass-dsl {p['cutlass_dsl']}, {built_with([record])}.")
    return "\n".join(lines) + "\n"


def timeline_check_block(track: str) -> str:
    """``timeline-check hopper``: measured cycles per K/V tile against the simulation's, per step."""
    rows = []
    for c in timeline_sim.check(track_steps(track)):
        rows.append([c["step"], f"{c['seqlen'] // 1024}k", f"{c['probe_cost']:+.0%}", f"{c['measured']:,.0f}",
                     f"{c['simulated']:,.0f} (simulated)", f"{c['simulated'] / c['measured'] - 1:+.0%}"])
    if not rows:
        return "No measured timeline yet.\n"
    return markdown_table(rows, ["step", "seqlen", "probes' cost", "measured cycles per K/V tile (one CTA)",
                                 "simulation", "simulation vs measured"]) + (
        "\n\nThe probes slow a kernel by the cost shown (the instrumented kernel's time against the step's): a row "
        "whose probes cost much, or measured at another seqlen, times a different loop from the others.\n")


BLOCKS = {"accuracy": accuracy_block, "bound": bound_block, "timeline": timeline_block, "timeline-check": timeline_check_block}
