"""Work done once per build directory: a computed value kept as JSON under build/memo/<kind>/, keyed by
everything it depends on, and found there by every later process (pytest's workers, the next run).

Two processes that need the same value at once do not both compute it: the second waits on a lock
file for the first and then reads its result. A computation that raises is kept too (its message):
asking again raises the same error without redoing the work.

``per_step_version`` memoizes within a process a model computed from a step (its budget, bound,
simulation): a generated page asks for the same one several times.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import functools
import hashlib
import inspect
import json
from pathlib import Path
from typing import Callable

from harness.core.paths import BUILD, publish

MEMO = BUILD / "memo"


class Remembered(RuntimeError):
    """An error a computation raised when it ran, raised again from its kept record."""


@contextlib.contextmanager
def exclusive(lock: Path):
    """Hold an exclusive lock on ``lock`` (a file, created if missing) for the block."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def path_for(kind: str, key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return MEMO / kind / f"{digest}.json"


def remembered(kind: str, key: dict, compute: Callable[[], object]):
    """``compute()``'s JSON-able value for ``key``, computed at most once per build directory. The
    text of the module that defines ``compute`` is part of the key: editing the model recomputes."""
    source = Path(inspect.getsourcefile(compute)).read_bytes()
    key = {**key, "computed_by": hashlib.sha256(source).hexdigest()}
    path = path_for(kind, key)

    def read():
        record = json.loads(path.read_text())
        if "error" in record:
            raise Remembered(record["error"])
        return record["value"]

    if path.is_file():
        return read()
    with exclusive(path.with_suffix(".lock")):
        if path.is_file():                     # computed by another process while this one waited
            return read()
        try:
            value = compute()
        except Exception as e:
            publish(path, json.dumps({"key": key, "error": f"{type(e).__name__}: {e}"}))
            raise
        publish(path, json.dumps({"key": key, "value": value}))
        return value


def per_step_version(fn):
    """Memoize ``fn(step, *args)`` within the process, per version of the step's file (its path and
    text) and arguments; every caller gets its own copy of the value."""
    cache: dict = {}

    @functools.wraps(fn)
    def memoized(step, *args, **kwargs):
        key = (str(step.path.resolve()), step.path.read_text(), args, tuple(sorted(kwargs.items())))
        if key not in cache:
            cache[key] = fn(step, *args, **kwargs)
        return copy.deepcopy(cache[key])

    memoized.cache = cache
    return memoized
