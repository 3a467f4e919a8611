"""What every picture of the ladder shares: where it goes and how it is drawn, fixed so that the
same data draws the same bytes (harness/report/plot.py, harness/report/timeline_draw.py)."""

from harness.core.paths import ROOT

IMG = ROOT / "writeups" / "img"
MISSING = "matplotlib is not installed: pip install -e '.[plot]' (or `make install`)"
DPI = 110
RC = {"svg.hashsalt": "attention-ladder", "svg.fonttype": "path", "font.family": "DejaVu Sans",
      "path.simplify": False}
