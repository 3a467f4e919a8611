"""Where things live: the checkout, its build outputs and its recorded results. Imports nothing
of the harness, so every module may import it."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LADDER = ROOT / "ladder"
BUILD = ROOT / "build"
RESULTS = ROOT / "results"
