"""Run one job in a child process with a timeout, so a deadlocked kernel cannot hang the harness."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from harness.core.paths import ROOT
from reference import CPU_REFERENCE_ENV


def child_env(*, sanitizer: str | None = None) -> dict:
    """The environment of a child process: this one's, with the checkout first on PYTHONPATH so
    ``python -m harness...`` finds the same code however the parent was started. The numerics
    reference runs on the CPU under a sanitizer only: a value inherited from the parent's shell
    never moves a timed or profiled run's reference."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop(CPU_REFERENCE_ENV, None)
    if sanitizer:
        env[CPU_REFERENCE_ENV] = "1"
    return env


@dataclass
class ChildResult:
    status: str                 # "ok", "error" (the job raised), "timeout", "crash" (no result)
    payload: dict | None
    seconds: float
    log_tail: str = ""
    log: str = ""               # the child's whole output (stdout and stderr), up to 4 MB

    def sanitizer_reports(self, limit: int = 20) -> list[str]:
        """compute-sanitizer's own report lines (no stack frames), first ``limit`` of them."""
        lines = [line for line in self.log.splitlines()
                 if line.startswith("========= ") and "Host Frame" not in line and line.strip("= ")]
        return lines[:limit]

    @property
    def error(self) -> str | None:
        if self.status == "ok":
            return None
        if self.payload and self.payload.get("error"):
            return self.payload["error"]
        return {"timeout": "TIMEOUT", "crash": "CRASH"}.get(self.status, self.status) + (
            f": {self.log_tail[-400:]}" if self.log_tail else "")


def run_job(job: str, step_id: str, *, timeout: float, sanitizer: str | None = None,
            module: str = "harness.gpu.child") -> ChildResult:
    with tempfile.TemporaryDirectory() as tmp:
        out_path = os.path.join(tmp, "result.json")
        log_path = os.path.join(tmp, "log.txt")
        cmd = [sys.executable, "-m", module, job, step_id, out_path]
        if sanitizer:
            # --report-api-errors no: the CUDA Python bindings probe driver entry points with
            # cuGetProcAddress and get CUDA_ERROR_INVALID_VALUE for absent ones, by design. Those
            # host-side probes are not kernel errors; a failed launch still raises in the child.
            cmd = ["compute-sanitizer", f"--tool={sanitizer}", "--error-exitcode=3",
                   "--report-api-errors", "no", *cmd]
        env = child_env(sanitizer=sanitizer)
        start = time.perf_counter()
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
                                    start_new_session=True)
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)      # the whole group: sanitizer and python
                proc.wait()
                code = None
        seconds = time.perf_counter() - start
        with open(log_path, errors="replace") as f:
            log = f.read(4 << 20)
        tail = log[-4000:]
        if code is None:
            return ChildResult("timeout", None, seconds, tail, log)
        payload = None
        if os.path.exists(out_path):
            with open(out_path) as f:
                payload = json.load(f)
        if payload is None or code != 0:
            return ChildResult("crash", payload, seconds, tail, log)
        return ChildResult("error" if payload.get("error") else "ok", payload, seconds, tail, log)
