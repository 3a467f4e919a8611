"""Where things live: the checkout, its build outputs and its recorded results, and how a
generated file is put there (``publish``). Imports nothing of the harness, so every module may
import it."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LADDER = ROOT / "ladder"
# Build outputs (compiles, FA4's build, instrumented copies): build/, or LADDER_BUILD (a test's own folder).
BUILD = Path(os.environ.get("LADDER_BUILD") or ROOT / "build")
RESULTS = ROOT / "results"


def publish(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` unless it already holds it, through a temporary file and one rename:
    a second process (pytest -n, a child job) never reads a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return path
