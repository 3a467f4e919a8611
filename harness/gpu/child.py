"""Entry point of a child process: ``python -m harness.gpu.child <job> <step> <out.json>``.

A step that deadlocks or crashes takes only its child down; the parent (``harness.gpu.isolate``)
enforces the timeout and reads the JSON this writes.
"""

import json
import sys
import traceback


def main(argv: list[str]) -> int:
    job, step_id, out_path = argv
    from harness.gpu import measure
    try:
        if job == "measure":
            payload = measure.measure_step(step_id)
        elif job == "selfcheck":
            payload = measure.selfcheck_step(step_id)
        elif job == "selfcheck-guard":
            payload = measure.selfcheck_step(step_id, guard=True)
        elif job == "stock":
            payload = measure.measure_stock()
        elif job == "ex2-accuracy":
            from harness.gpu import ex2_accuracy
            payload = ex2_accuracy.measure(step_id)
        elif job == "timeline":
            from harness.gpu import timeline_run
            payload = timeline_run.measure(step_id)
        else:
            raise ValueError(f"unknown job {job!r}")
    except Exception as e:
        payload = {"step": step_id, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    with open(out_path, "w") as f:
        json.dump(payload, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
