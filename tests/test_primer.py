"""writeups/00b-cute-primer.md cannot go stale: every snippet on the page runs on the CPU exactly as
printed (after the page's prelude), and prints exactly the text block shown under it; every section's
"First used" line names a step file and a function in it that uses the idiom, with no earlier step of
that track using it."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "writeups" / "00b-cute-primer.md"

PRELUDE = re.compile(r"<!-- primer:prelude -->\n```python\n(?P<code>.*?)```", re.S)
SNIPPET = re.compile(r"<!-- primer:snippet (?P<name>[\w-]+) -->\n```python\n(?P<code>.*?)```\n+```text\n(?P<out>.*?)```",
                     re.S)
FIRST_USED = re.compile(r"\*\*First used:\*\* (?P<step>\w+), `(?P<path>[^`]+)`, `(?P<fn>\w+)`: `(?P<idiom>[^`]+)`")
SECTION = re.compile(r"^## ", re.M)


def prelude(text: str) -> str:
    return PRELUDE.search(text).group("code")


def snippets(text: str) -> dict[str, tuple[str, str]]:
    """name -> (code, expected output), in page order."""
    found = {}
    for m in SNIPPET.finditer(text):
        assert m.group("name") not in found, f"two snippets named {m.group('name')}"
        found[m.group("name")] = (m.group("code"), m.group("out"))
    return found


def run_snippet(code: str, cwd: Path) -> str:
    """stdout of the page's prelude + ``code``, run as a script file in ``cwd`` (the DSL reads a
    function's source, so not ``python -c``) by a fresh interpreter (its own DSL state and arch), with
    no CUTE_DSL_* settings inherited; files the DSL may write (PTX) land in ``cwd``."""
    script = cwd / "snippet.py"
    script.write_text(prelude(PAGE.read_text()) + code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUTE_DSL_")}
    env.update(PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, script.name], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


TEXT = PAGE.read_text()
SNIPPETS = snippets(TEXT)


def test_the_page_has_its_snippets():
    assert PRELUDE.search(TEXT)
    assert len(SNIPPETS) >= 8, sorted(SNIPPETS)
    # every fenced python block on the page is a tested snippet or the prelude
    assert TEXT.count("```python") == len(SNIPPETS) + 1


@pytest.mark.parametrize("name", list(SNIPPETS))
def test_snippet_prints_what_the_page_shows(name, tmp_path):
    code, expected = SNIPPETS[name]
    assert run_snippet(code, tmp_path).rstrip("\n") == expected.rstrip("\n")


def sections(text: str) -> list[str]:
    return [s for s in SECTION.split(text)[1:] if "<!-- primer:snippet" in s]


def track_order(path: str) -> list[Path]:
    """The step files a reader meets before and at ``path``: 01, then the step's own track."""
    folder = (ROOT / path).parent
    track = sorted(folder.glob("[hb][0-9][0-9]_*.py")) if folder.name in ("hopper", "blackwell") else []
    return sorted(ROOT.glob("ladder/s01_*.py")) + track


def function_source(path: Path, name: str) -> str | None:
    text = path.read_text()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return ast.get_source_segment(text, node)
    return None


@pytest.mark.parametrize("section", sections(TEXT), ids=lambda s: s.splitlines()[0][:40])
def test_each_section_names_where_its_idiom_is_first_used(section):
    m = FIRST_USED.search(section)
    assert m, "a section with a snippet ends with '**First used:** step, `file`, `function`: `idiom`'"
    path = ROOT / m.group("path")
    assert path.is_file(), m.group("path")
    assert path.stem.split("_")[0].lstrip("s") == m.group("step"), f"{m.group('step')} is not {path.name}"
    source = function_source(path, m.group("fn"))
    assert source is not None, f"no function {m.group('fn')} in {m.group('path')}"
    assert m.group("idiom") in source, f"{m.group('fn')} in {m.group('path')} does not use {m.group('idiom')!r}"
    order = track_order(m.group("path"))
    earlier = [p.name for p in order[:order.index(path)] if m.group("idiom") in p.read_text()]
    assert not earlier, f"{m.group('idiom')!r} is used before {path.name}, in {earlier}"
