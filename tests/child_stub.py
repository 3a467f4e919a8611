"""A stand-in child for tests of harness.isolate: behaves as told by its job name."""

import json
import sys
import time

job, step_id, out_path = sys.argv[1:]
if job == "hang":                       # a deadlocked kernel, as the parent sees it
    time.sleep(600)
elif job == "die":                      # a crash before any result is written
    sys.exit(7)
elif job == "raise":
    json.dump({"step": step_id, "error": "ValueError: told to"}, open(out_path, "w"))
else:
    json.dump({"step": step_id, "numerics": []}, open(out_path, "w"))
