"""Recorded results: one JSON file per GPU kind, results/<gpu-key>.json (h200.json, b200.json, ...),
found by listing the folder: a new GPU's file is picked up the day it is recorded.

A file maps step id -> the row its child processes measured (numerics, side-by-side timings against
FA4, provenance, fingerprint, and with ``--repeat`` every process's fractions). Rows merge in, so a
long ladder can be recorded over several calls. Beside "rows" a file may hold "stock", "experiments",
"profiles", "selfcheck", "accuracy" (``ladder accuracy``: a step's FMA-pipe exponential) and
"timelines" (``ladder timeline --measure``: one CTA's phases per warp and tile).
"""

from __future__ import annotations

import json
import os
import re
import statistics
from pathlib import Path

from harness.core.paths import RESULTS
from harness.core.steps import track_steps

SCHEMA = 1


def gpu_key(gpu_name: str) -> str:
    """'NVIDIA H200' -> 'h200', 'NVIDIA B200' -> 'b200'."""
    name = re.sub(r"^nvidia\s+", "", gpu_name.strip(), flags=re.I)
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"


def harmonic_mean(values) -> float | None:
    values = [v for v in values if v]
    return len(values) / sum(1.0 / v for v in values) if values else None


def run_of(payload: dict) -> dict:
    """One child process's measurement, reduced to what a row keeps of every process."""
    bench = payload.get("bench", [])
    fractions = {str(b["seqlen"]): b["fraction"] for b in bench}
    return {"date": payload.get("provenance", {}).get("date"), "fractions": fractions,
            "hmean": harmonic_mean(fractions.values()),
            "fa4_tflops": {str(b["seqlen"]): b["fa4_tflops"] for b in bench if "fa4_tflops" in b},
            "step_tflops": {str(b["seqlen"]): b["step_tflops"] for b in bench if "step_tflops" in b},
            "numerics_passed": bool(payload.get("numerics")) and all(n["passed"] for n in payload["numerics"])}


def combine_runs(payloads: list[dict]) -> dict:
    """The row of a step measured in several child processes (``ladder table --repeat N``): the
    first process's numerics and provenance, every process's fractions under "runs", and "bench"
    holding the median over processes of each timing at each seqlen."""
    if not payloads:
        raise ValueError("no measured runs to combine")
    first = payloads[0]
    bench = []
    for b in first.get("bench", []):
        same = [x for p in payloads for x in p.get("bench", []) if x["seqlen"] == b["seqlen"]]
        bench.append({**b, **{k: statistics.median(x[k] for x in same if k in x)
                              for k, v in b.items() if isinstance(v, float)}})
    return {**first, "bench": bench, "runs": [run_of(p) for p in payloads]}


def summarize(row: dict) -> dict:
    """Over the row's processes: the median fraction of FA4 at each seqlen and its min-max, the
    harmonic mean of those medians (the number a reader can recompute from the columns), and the
    min-max of each process's own harmonic mean (the noise between processes). A row measured
    once (or recorded before rows kept their runs) is its own single run."""
    runs = row.get("runs") or [run_of(row)]
    seqlens = list(dict.fromkeys(s for r in runs for s in r["fractions"]))
    per_seqlen = {s: [r["fractions"][s] for r in runs if s in r["fractions"]] for s in seqlens}
    medians = {s: statistics.median(v) for s, v in per_seqlen.items()}
    hmeans = [r["hmean"] for r in runs if r["hmean"] is not None]
    return {"fractions": medians,
            "fraction_ranges": {s: [min(v), max(v)] for s, v in per_seqlen.items()},
            "hmean": harmonic_mean(medians.values()),
            "hmean_range": [min(hmeans), max(hmeans)] if hmeans else None,
            "repeats": len(runs),
            "numerics_passed": all(r["numerics_passed"] for r in runs)}


def within_noise(a: dict, b: dict) -> bool:
    """Two summarized rows whose h-mean ranges over processes overlap: their difference is not
    beyond what the machine does between processes."""
    ra, rb = a.get("hmean_range"), b.get("hmean_range")
    return bool(ra and rb) and ra[0] <= rb[1] and rb[0] <= ra[1]


def stale_reason(step, record: dict) -> str | None:
    """Why ``record`` (a row, experiment, profile or selfcheck entry) no longer describes the
    kernel in this checkout, or None if it does: it names its fingerprint (steps.Step.fingerprint),
    and any part that differs makes it stale."""
    recorded = record.get("fingerprint")
    if not recorded:
        return "recorded without a fingerprint"
    now = step.fingerprint
    if recorded.get("step") != now["step"]:
        return "the step's code changed"
    if recorded.get("contract") != now["contract"]:
        return "ladder/contract.py changed"
    if recorded.get("cutlass_dsl") != now["cutlass_dsl"]:
        return f"measured with nvidia-cutlass-dsl {recorded.get('cutlass_dsl')}, now {now['cutlass_dsl']}"
    return None


def is_stale(step, record: dict) -> bool:
    return stale_reason(step, record) is not None


def load(path: Path) -> dict:
    if not path.exists():
        return {"schema": SCHEMA, "rows": {}}
    data = json.loads(path.read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: unknown results schema {data.get('schema')!r}")
    return data


def _save(path: Path, data: dict) -> None:
    """Write through a temporary file and one rename: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def save(path: Path, data: dict) -> None:
    """Write a whole results file (``ladder carry`` re-stamps records in place)."""
    _save(path, data)


def _with_summary(label: str, row: dict) -> dict:
    """The row as stored: checked for provenance, traceback dropped, summary added."""
    prov = row.get("provenance") or {}
    missing = [k for k in ("gpu", "date", "command", "torch", "cutlass_dsl", "ptxas", "flash_attn_4") if not prov.get(k)]
    if missing:
        raise ValueError(f"row {label}: provenance lacks {', '.join(missing)}")
    clean = {k: v for k, v in row.items() if k != "traceback"}
    return {**clean, **summarize(clean)}


def record(path: Path, rows: dict[str, dict], stock: dict | None = None) -> dict:
    """Merge measured rows (step id -> row) into the file; a row must carry its provenance."""
    data = load(path)
    for step_id, row in rows.items():
        data["rows"][step_id] = _with_summary(step_id, row)
    if stock is not None:
        data["stock"] = stock
    _save(path, data)
    return data


def record_experiment(path: Path, experiment, row: dict) -> dict:
    """File an experiment's measured row (``harness.core.experiments``) under "experiments", with its
    base step and question: evidence for a writeup, never a row of the ladder."""
    data = load(path)
    data.setdefault("experiments", {})[experiment.name] = {
        **_with_summary(experiment.name, row), "base": experiment.base,
        "question": experiment.question, "diagnostic": experiment.diagnostic}
    _save(path, data)
    return data


def record_profile(path: Path, payload: dict) -> dict:
    """Store one step's hardware-counter profile (``harness.gpu.profile``) beside its measured row."""
    data = load(path)
    if not payload.get("provenance", {}).get("gpu") or not payload["provenance"].get("ptxas"):
        raise ValueError("a profile must carry its provenance (GPU, ptxas)")
    data.setdefault("profiles", {})[payload["step"]] = payload
    _save(path, data)
    return data


def record_selfcheck(path: Path, tool: str, steps: list) -> dict:
    """Note that ``ladder selfcheck`` (under compute-sanitizer ``tool``, or "none") passed each of
    ``steps`` (Step objects): per step, with the code version it checked and the provenance.
    Merges, so a check of only the new steps keeps the earlier steps' entries."""
    from harness.core.provenance import collect
    loose = [s.id for s in steps if s.variant and not s.experiment]
    if loose:
        raise ValueError(f"a variant file is checked, never recorded: {', '.join(loose)}")
    data = load(path)
    prov = collect()
    entry = data.setdefault("selfcheck", {}).setdefault(tool, {})
    for step in steps:   # keyed as resolve() finds it again: "h14", "exp:h14-cluster-multicast"
        entry[step.spec] = {"fingerprint": step.fingerprint, "provenance": prov}
    _save(path, data)
    return data


def _record_keyed(path: Path, section: str, payload: dict) -> dict:
    """Store a per-step payload under ``section``, keyed by step; a later one replaces it."""
    prov = payload.get("provenance") or {}
    missing = [k for k in ("gpu", "date", "command", "cutlass_dsl", "ptxas") if not prov.get(k)]
    if missing:
        raise ValueError(f"{section} of {payload.get('step')}: provenance lacks {', '.join(missing)}")
    data = load(path)
    data.setdefault(section, {})[payload["step"]] = payload
    _save(path, data)
    return data


def record_accuracy(path: Path, payload: dict) -> dict:
    """One step's measured exponential accuracy (``harness.gpu.ex2_accuracy.measure``), under "accuracy"."""
    return _record_keyed(path, "accuracy", payload)


def record_timeline(path: Path, payload: dict) -> dict:
    """One step's measured timeline (``harness.gpu.timeline_run.measure``), under "timelines"."""
    return _record_keyed(path, "timelines", payload)


def record_toolchain(path: Path, entry: dict) -> dict:
    """What the GPU machine's processes compile with (``ladder toolchain --record``), under "toolchain"."""
    data = load(path)
    data["toolchain"] = entry
    _save(path, data)
    return data


def capability(data: dict) -> tuple[int, int] | None:
    """The compute capability of the GPU a results file was measured on (from any provenance)."""
    records = [*data.get("rows", {}).values(), data.get("stock") or {}, *data.get("profiles", {}).values(),
               *data.get("accuracy", {}).values()]
    for r in records:
        cap = (r.get("provenance") or {}).get("capability")
        if cap:
            return tuple(cap)
    return None


def provenances(data: dict) -> list[tuple[str, dict]]:
    """(where, provenance) of every record in one results file: its rows, experiments, profiles,
    selfchecks, accuracy runs, timelines and stock timings."""
    found = [(f"rows/{k}", r.get("provenance") or {}) for k, r in data.get("rows", {}).items()]
    for section in ("experiments", "profiles", "accuracy", "timelines"):
        found += [(f"{section}/{k}", r.get("provenance") or {}) for k, r in data.get(section, {}).items()]
    found += [(f"selfcheck/{tool}/{k}", e.get("provenance") or {})
              for tool, entries in data.get("selfcheck", {}).items() for k, e in entries.items()]
    for section in ("stock", "toolchain"):
        if data.get(section):
            found.append((section, data[section].get("provenance") or {}))
    return found


def recorded_ptxas(data: dict) -> dict[str, list[str]]:
    """ptxas version (or "not recorded") -> the records of one results file built with it."""
    out: dict[str, list[str]] = {}
    for where, prov in provenances(data):
        out.setdefault(prov.get("ptxas") or "not recorded", []).append(where)
    return out


def ptxas_mismatches(data: dict, ptxas: str) -> dict[str, list[str]]:
    """The records of one results file not built by ptxas ``ptxas``'s major version (or that do not
    say), by the version they name: what the CPU's proofs, built by ``ptxas``, do not describe."""
    def major(v):
        return int(v.split(".")[0]) if v and v[0].isdigit() else None
    return {v: w for v, w in recorded_ptxas(data).items() if major(v) is None or major(v) != major(ptxas)}


def all_recorded() -> dict[str, dict]:
    """GPU key -> results file contents, for every results/*.json."""
    return {p.stem: load(p) for p in sorted(RESULTS.glob("*.json"))}


def track_files(track: str) -> dict[str, dict]:
    """The results files (GPU key -> contents) measured on a GPU that runs ``track``'s own steps."""
    capabilities = {c for s in track_steps(track) if s.track == track for c in s.info.capabilities}
    return {gpu: data for gpu, data in all_recorded().items() if capability(data) in capabilities}


def latest_for(step_id: str, section: str = "rows") -> dict[str, dict]:
    """GPU key -> this step's (or, with section="experiments", this experiment's) recorded row."""
    return {gpu: data[section][step_id] for gpu, data in all_recorded().items() if step_id in data.get(section, {})}


def regressions(current: dict[str, dict], baseline: dict, tolerance: float) -> list[str]:
    """Steps whose harmonic-mean fraction fell more than ``tolerance`` (relative) below the baseline."""
    found = []
    for step_id, row in current.items():
        base = baseline.get("rows", {}).get(step_id)
        now = summarize(row)["hmean"]
        if base and base.get("hmean") and now is not None and now < base["hmean"] * (1 - tolerance):
            found.append(f"{step_id}: {now:.3f} < baseline {base['hmean']:.3f} - {tolerance:.0%}")
    return found
