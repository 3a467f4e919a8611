"""``ladder carry``: keep a recorded result when its step was edited without changing what runs.

A record names the code it measured (its fingerprint: the step's code hash). A step rewritten for
the reader (a block moved into a role function, its metadata moved) gets a new hash, and every
record of it would read as stale, though the GPU would run the same instructions. ``carry`` finds
the recorded code in git history and compiles it and the step as it is now, each as the first
compile of a fresh process. Where the two kernels' machine code is byte-identical (and, for a
timeline, the instrumented copies' SASS too) it re-stamps the record with today's fingerprint and
a ``carried`` note: from which code hash, the machine-code digest both compile to, and when.
Anything else stays stale. tests/test_results.py holds carried records to a fresh compile of the
step as it is.
"""

from __future__ import annotations

import datetime
import subprocess
from pathlib import Path

from harness.cli.common import console
from harness.compiler.compile import fresh_cubin_facts
from harness.core import results
from harness.core.paths import BUILD, ROOT
from harness.core.steps import code_sha256, discover, resolve, variant
from harness.timeline import probes

CARRY_DIR = BUILD / "carry"


def records(data: dict):
    """(label, step id, record) of every record that names one step's code: rows, profiles,
    timelines, accuracy and self-check entries (experiments measure edited copies: not carried)."""
    for sid, rec in data.get("rows", {}).items():
        yield f"rows/{sid}", sid, rec
    for key, rec in data.get("profiles", {}).items():
        if rec.get("step") and rec["step"] != "FA4":
            yield f"profiles/{key}", rec["step"], rec
    for section in ("timelines", "accuracy"):
        for sid, rec in data.get(section, {}).items():
            yield f"{section}/{sid}", sid, rec
    for tool, entries in data.get("selfcheck", {}).items():
        for sid, rec in entries.items():
            if isinstance(rec, dict) and "fingerprint" in rec:
                yield f"selfcheck/{tool}/{sid}", sid, rec
    for key, rec in data.get("toolchain", {}).get("machine_code", {}).items():   # "h14 sm_90a"
        yield f"toolchain/{key}", key.split()[0], rec


def recorded_source(step, code_hash: str, commits: int = 200) -> str | None:
    """The step file's text, from git history, whose code hash is ``code_hash`` (None if not found)."""
    rel = step.path.relative_to(ROOT).as_posix()
    log = subprocess.run(["git", "log", f"-{commits}", "--format=%H", "--", rel], cwd=ROOT,
                         capture_output=True, text=True)
    for commit in log.stdout.split():
        text = subprocess.run(["git", "show", f"{commit}:{rel}"], cwd=ROOT, capture_output=True, text=True)
        if text.returncode == 0 and code_sha256(text.stdout) == code_hash:
            return text.stdout
    return None


def _arch(step, data: dict) -> str | None:
    cap = results.capability(data)
    return step.info.arch_for_capability(cap) if cap else None


def carry(path: Path) -> list[str]:
    """Re-stamp the records of ``path`` that the machine code proves unchanged; what was done, a line each."""
    data = results.load(path)
    done, cache = [], {}
    ladder_steps = {s.id for s in discover()}
    for label, sid, rec in records(data):
        if sid not in ladder_steps:          # an experiment's profile: an edited copy, not carried
            continue
        step = resolve(sid)
        now, then = step.fingerprint, rec.get("fingerprint") or {}
        if then.get("step") == now["step"] or {k: then.get(k) for k in ("contract", "cutlass_dsl")} != \
                {k: now[k] for k in ("contract", "cutlass_dsl")}:
            continue
        arch = label.split()[-1] if label.startswith("toolchain/") else _arch(step, data)
        key = (sid, then["step"], arch)
        if key not in cache:
            cache[key] = _same_kernel(step, then["step"], arch)
        same = cache[key]
        if isinstance(same, str):
            # an earlier carry's note named the code as it was then: the record is stale now
            dropped = rec.pop("carried", None) is not None
            done.append(f"{label}: stays stale ({same}){'; its earlier carried note dropped' if dropped else ''}")
            continue
        timeline = label.startswith("timelines/")
        if timeline and not same["timeline"]():
            done.append(f"{label}: stays stale (the instrumented copies differ)")
            continue
        rec["fingerprint"] = {**now, **({"instrumented": probes.fingerprint(step)["instrumented"]} if timeline else {})}
        rec["carried"] = {"from": then["step"], "machine_code": same["digest"], "arch": arch,
                          "date": datetime.date.today().isoformat(),
                          "why": "the step's code changed; its machine code did not (`ladder carry`)"}
        done.append(f"{label}: carried ({arch} machine code {same['digest'][:12]} unchanged)")
    if any(line.endswith(("unchanged)", "note dropped")) for line in done):
        results.save(path, data)
    return done


def _same_kernel(step, code_hash: str, arch: str | None):
    """{'digest', 'timeline'} when the recorded code and today's compile to the same machine code
    for ``arch``; else why not."""
    if arch is None:
        return "the results file names no GPU the step targets"
    text = recorded_source(step, code_hash)
    if text is None:
        return "its recorded code is not in git history"
    CARRY_DIR.mkdir(parents=True, exist_ok=True)
    old_path = CARRY_DIR / f"{step.path.stem}_{code_hash[:12]}.py"
    old_path.write_text(text)
    old = variant(old_path)
    # Each compiled as the first of a fresh process: ptxas's output can depend on what a process
    # compiled before (compile.fresh_cubin_facts), and a GPU job's child compiles fresh.
    digest = fresh_cubin_facts(step, arch)["machine_code"]
    if fresh_cubin_facts(old, arch)["machine_code"] != digest:
        return f"its {arch} machine code differs from the recorded code's"

    def timeline() -> bool:
        return probes.compile_sass(old, arch).text == probes.compile_sass(step, arch).text
    return {"digest": digest, "timeline": timeline}


def cmd_carry(args) -> int:
    for line in carry(Path(args.file)):
        console.print(line)
    return 0


def add_commands(sub) -> None:
    s = sub.add_parser("carry", help="keep recorded results of steps whose code changed but whose machine code "
                                     "did not (compiled here, compared byte for byte)")
    s.add_argument("file", help="a results file, e.g. results/h200.json")
    s.set_defaults(fn=cmd_carry)
