"""Recorded results: one JSON file per GPU kind (results/h200.json, results/b200.json, ...).

A file maps step id -> the row its child process measured (numerics, side-by-side timings against
FA4, provenance). Rows merge in, so a long ladder can be recorded over several calls.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness.steps import ROOT

RESULTS = ROOT / "results"
SCHEMA = 1


def gpu_key(gpu_name: str) -> str:
    """'NVIDIA H200' -> 'h200', 'NVIDIA B200' -> 'b200'."""
    name = re.sub(r"^nvidia\s+", "", gpu_name.strip(), flags=re.I)
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"


def harmonic_mean(values) -> float | None:
    values = [v for v in values if v]
    return len(values) / sum(1.0 / v for v in values) if values else None


def summarize(row: dict) -> dict:
    """Fractions of FA4 per seqlen and their harmonic mean, from a measured row."""
    fractions = {str(b["seqlen"]): b["fraction"] for b in row.get("bench", [])}
    return {"fractions": fractions, "hmean": harmonic_mean(fractions.values()),
            "numerics_passed": all(n["passed"] for n in row.get("numerics", [])) and bool(row.get("numerics"))}


def load(path: Path) -> dict:
    if not path.exists():
        return {"schema": SCHEMA, "rows": {}}
    data = json.loads(path.read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: unknown results schema {data.get('schema')!r}")
    return data


def _save(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def _with_summary(label: str, row: dict) -> dict:
    """The row as stored: checked for provenance, traceback dropped, summary added."""
    prov = row.get("provenance") or {}
    missing = [k for k in ("gpu", "date", "command", "torch", "cutlass_dsl", "flash_attn_4") if not prov.get(k)]
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
    """File an experiment's measured row (``harness.experiments``) under "experiments", with its
    base step and question: evidence for a writeup, never a row of the ladder."""
    data = load(path)
    data.setdefault("experiments", {})[experiment.name] = {
        **_with_summary(experiment.name, row), "base": experiment.base,
        "question": experiment.question, "diagnostic": experiment.diagnostic}
    _save(path, data)
    return data


def record_profile(path: Path, payload: dict) -> dict:
    """Store one step's hardware-counter profile (``harness.profile``) beside its measured row."""
    data = load(path)
    if not payload.get("provenance", {}).get("gpu"):
        raise ValueError("a profile must carry its provenance")
    data.setdefault("profiles", {})[payload["step"]] = payload
    _save(path, data)
    return data


def record_selfcheck(path: Path, tool: str, steps: list) -> dict:
    """Note that ``ladder selfcheck`` (under compute-sanitizer ``tool``, or "none") passed each of
    ``steps`` (Step objects): per step, with the code version it checked and the provenance.
    Merges, so a check of only the new steps keeps the earlier steps' entries."""
    from harness.provenance import collect
    data = load(path)
    prov = collect()
    entry = data.setdefault("selfcheck", {}).setdefault(tool, {})
    for step in steps:
        entry[step.id] = {"code_sha256": step.code_sha256, "provenance": prov}
    _save(path, data)
    return data


def is_stale(step, row: dict) -> bool:
    """True when ``row`` was measured on a different version of the step's file than the one
    here now (rows recorded before hashes were kept cannot tell, and count as current)."""
    recorded = row.get("code_sha256")
    return bool(recorded) and recorded != step.code_sha256


def all_recorded() -> dict[str, dict]:
    """GPU key -> results file contents, for every results/*.json."""
    return {p.stem: load(p) for p in sorted(RESULTS.glob("*.json"))}


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
