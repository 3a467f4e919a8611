"""A stand-in child for tests of harness.gpu.isolate and harness.gpu.ladder_run: behaves as told by its job
name, and for "measure" returns a row shaped like harness.gpu.measure's, with the fraction of FA4 the
test put in LADDER_STUB_FRACTIONS (JSON: step spec -> fraction or "fail-numerics") for that step."""

import json
import os
import sys
import time

job, step_spec, out_path = sys.argv[1:]


def measured(spec: str) -> dict:
    from harness.core.steps import resolve
    step = resolve(spec)
    told = json.loads(os.environ.get("LADDER_STUB_FRACTIONS", "{}")).get(spec, 0.5)
    fraction = 0.5 if told == "fail-numerics" else float(told)
    provenance = {"gpu": os.environ.get("LADDER_STUB_GPU", "NVIDIA H200"), "capability": [9, 0], "driver": "d",
                  "date": "2026-01-01T00:00:00Z", "command": "ladder table", "torch": "t", "cutlass_dsl": "4.8.1", "ptxas": "13.4",
                  "flash_attn_4": "f"}
    bench = [{"seqlen": s, "shape": [16384 // s, s, 16, 128], "fraction": fraction, "step_tflops": 700.0 * fraction,
              "fa4_tflops": 700.0, "step_ms": 1.0 / fraction, "fa4_ms": 1.0} for s in (4096, 8192, 16384)]
    return {"step": step.id, "provenance": provenance, "fingerprint": step.fingerprint, "bench": bench,
            "numerics": [{"case": "smallest", "shape": [1, 128, 1, 128], "rows_checked": "all", "max_error": 1e-3,
                          "bound": 2e-3, "passed": told != "fail-numerics"}]}


if job == "hang":                       # a deadlocked kernel, as the parent sees it
    time.sleep(600)
elif job == "die":                      # a crash before any result is written
    sys.exit(7)
elif job == "raise":
    json.dump({"step": step_spec, "error": "ValueError: told to"}, open(out_path, "w"))
elif job == "measure":
    json.dump(measured(step_spec), open(out_path, "w"))
else:
    json.dump({"step": step_spec, "numerics": []}, open(out_path, "w"))
