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

from harness.steps import ROOT


@dataclass
class ChildResult:
    status: str                 # "ok", "error" (the job raised), "timeout", "crash" (no result)
    payload: dict | None
    seconds: float
    log_tail: str = ""

    @property
    def error(self) -> str | None:
        if self.status == "ok":
            return None
        if self.payload and self.payload.get("error"):
            return self.payload["error"]
        return {"timeout": "TIMEOUT", "crash": "CRASH"}.get(self.status, self.status) + (
            f": {self.log_tail[-400:]}" if self.log_tail else "")


def run_job(job: str, step_id: str, *, timeout: float, sanitizer: str | None = None,
            module: str = "harness.child") -> ChildResult:
    with tempfile.TemporaryDirectory() as tmp:
        out_path = os.path.join(tmp, "result.json")
        log_path = os.path.join(tmp, "log.txt")
        cmd = [sys.executable, "-m", module, job, step_id, out_path]
        if sanitizer:
            cmd = ["compute-sanitizer", f"--tool={sanitizer}", "--error-exitcode=3", *cmd]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
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
        with open(log_path) as f:
            tail = f.read()[-4000:]
        if code is None:
            return ChildResult("timeout", None, seconds, tail)
        payload = None
        if os.path.exists(out_path):
            with open(out_path) as f:
                payload = json.load(f)
        if payload is None or code != 0:
            return ChildResult("crash", payload, seconds, tail)
        return ChildResult("error" if payload.get("error") else "ok", payload, seconds, tail)
