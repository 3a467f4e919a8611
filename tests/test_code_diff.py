"""``ladder diff --code`` and the generated ``code`` blocks: stripping docstrings and comments keeps
the code exactly, a prose-only edit diffs to nothing, a code edit shows up."""

import ast
import io
import re
import tokenize

import pytest

from harness import cli
from harness.core.steps import discover, predecessor, resolve
from harness.report import blocks_compiled
from harness.report.code_diff import changed_lines, code_diff, code_lines, code_source


def _without_docstrings(source: str) -> str:
    """ast.dump of ``source`` with every module/class/function docstring removed (an emptied body
    gets a ``pass``), independently of harness.report.code_diff."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def _assert_stripped_keeps_the_code(source: str):
    stripped = code_source(source)
    assert ast.dump(ast.parse(stripped)) == _without_docstrings(source)
    tokens = list(tokenize.generate_tokens(io.StringIO(stripped).readline))
    assert not [t.string for t in tokens if t.type == tokenize.COMMENT]
    assert _without_docstrings(stripped) == ast.dump(ast.parse(stripped)), "a docstring is left"


@pytest.mark.parametrize("step", discover(), ids=lambda s: s.id)
def test_stripping_keeps_every_steps_code(step):
    source = step.path.read_text()
    _assert_stripped_keeps_the_code(source)
    assert len(code_lines(source)) < len(source.splitlines())


def test_stripping_keeps_strings_and_turns_a_lone_docstring_into_pass():
    source = '''"""Module docstring."""
X = """a string, not a doc:

    # not a comment
"""   # a comment after it


class Empty:
    """Only a docstring."""


def f(a,   # comment inside the call
      b):
    """Doc
    on two lines."""
    s = "# in a string"  # trailing
    return a + b
'''
    _assert_stripped_keeps_the_code(source)
    lines = code_lines(source)
    assert "" in lines and "    # not a comment" in lines          # a multi-line string's own lines stay
    assert "    pass" in lines and '    s = "# in a string"' in lines
    assert not [line for line in lines if "docstring" in line.lower() or "comment inside" in line]


def _edited(tmp_path, step_id, name, edit):
    """A copy of a step file with ``edit`` applied (it must change the text)."""
    source = resolve(step_id).path.read_text()
    new = edit(source)
    assert new != source
    path = tmp_path / name
    path.write_text(new)
    return path


def _reword_function_docstrings(source: str) -> str:
    """Prefix every function's docstring with 'Reworded. ' (just inside its opening quotes)."""
    lines = source.splitlines(keepends=True)
    docs = [node.body[0] for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef)
            and ast.get_docstring(node, clean=False) is not None]
    for doc in sorted(docs, key=lambda d: d.lineno, reverse=True):
        line = lines[doc.lineno - 1].encode()
        at = doc.col_offset + (3 if line[doc.col_offset:doc.col_offset + 3] in (b'"""', b"'''") else 1)
        lines[doc.lineno - 1] = (line[:at] + b"Reworded. " + line[at:]).decode()
    return "".join(lines)


PROSE_EDITS = {
    "module docstring": lambda s: s.replace('"""', '"""Reworded. ', 1),
    "function docstrings": lambda s: _reword_function_docstrings(s),
    "comments": lambda s: re.sub(r"# ", "# (reworded) ", s),
    "a new comment line": lambda s: s.replace("\n\n\ndef ", "\n\n\n# a new comment\ndef ", 1),
}


@pytest.mark.parametrize("edit", PROSE_EDITS, ids=str)
def test_a_docstring_or_comment_edit_gives_an_empty_code_diff(tmp_path, edit):
    original = resolve("h05").path
    edited = _edited(tmp_path, "h05", "prose.py", PROSE_EDITS[edit])
    assert code_diff(original, edited) == ""


def test_a_code_edit_shows_up(tmp_path):
    original = resolve("h05").path
    edited = _edited(tmp_path, "h05", "code.py", lambda s: re.sub(r"^TILE_N = 128\b", "TILE_N = 64", s, flags=re.M))
    diff = code_diff(original, edited)
    assert "\n-TILE_N = 128\n+TILE_N = 64\n" in diff and changed_lines(diff) == 2


def test_re_indentation_is_not_a_change_unless_asked(tmp_path, capsys):
    original = resolve("h05").path
    moved = _edited(tmp_path, "h05", "moved.py", lambda s: s.replace("TILE_N = 128", "if True:\n    TILE_N = 128", 1))
    blind, strict = code_diff(original, moved), code_diff(original, moved, whitespace=True)
    assert changed_lines(blind) == 1 and "\n+if True:\n     TILE_N = 128" in blind   # the moved line is context
    assert changed_lines(strict) == 3 and "indentation ignored" not in strict
    changed = _edited(tmp_path, "h05", "changed.py", lambda s: s.replace("TILE_N = 128", "if True:\n    TILE_N = 64", 1))
    assert changed_lines(code_diff(original, changed)) == 3     # a moved line that also changed still shows
    aligned = _edited(tmp_path, "h05", "aligned.py", lambda s: s.replace("TILE_N = 128", "TILE_N  =  128", 1))
    assert code_diff(original, aligned) == "" and changed_lines(code_diff(original, aligned, whitespace=True)) == 2
    assert cli.main(["diff", "--code", "h05", str(aligned)]) == 0
    assert "identical code" in capsys.readouterr().out
    assert cli.main(["diff", "--code", "--whitespace", "h05", str(aligned)]) == 0
    assert "+TILE_N  =  128" in capsys.readouterr().out


def test_cli_diff_code(capsys):
    assert cli.main(["diff", "--code", "h03"]) == 0
    out = capsys.readouterr().out
    h03 = resolve("h03")
    assert out == code_diff(predecessor(h03).path, h03.path) and out.startswith("--- ladder/hopper/h02")
    assert '"""' not in out and not [line for line in out.splitlines() if line[1:].lstrip().startswith("#")]
    assert cli.main(["diff", "h03"]) == 0
    assert capsys.readouterr().out != out                  # the plain diff also shows the prose


def test_cli_diff_code_of_a_prose_only_edit_is_identical(tmp_path, capsys):
    prose = _edited(tmp_path, "h03", "h03_prose.py", lambda s: s.replace('"""', '"""Reworded. ', 1))
    assert cli.main(["diff", "--code", "h03", str(prose)]) == 0
    assert "identical code" in capsys.readouterr().out
    assert cli.main(["diff", "h03", str(prose)]) == 0          # the plain diff shows the reworded docstring
    assert "+" + '"""Reworded. ' in capsys.readouterr().out


def test_every_step_writeup_with_a_predecessor_shows_its_change_before_its_prediction():
    """The heart of the change (an ``excerpt`` block) comes before the prediction; the whole diff (the
    ``code`` block) is on the page too, in its appendix (tests/test_pages.py)."""
    steps = [step for step in discover() if predecessor(step) is not None]
    assert steps, "no step with a predecessor found"
    for step in steps:
        text = step.writeup.read_text()
        assert f"<!-- ladder:begin code {step.id} -->" in text, f"{step.writeup.name} has no `code {step.id}` block"
        excerpt = re.search(rf"<!-- ladder:begin excerpt {step.id} ", text)
        assert excerpt and "## The change in code" in text, f"{step.writeup.name} has no `excerpt {step.id}` block"
        prediction = re.search(r"^## Prediction", text, re.M)
        assert prediction and excerpt.start() < prediction.start(), step.id


def test_an_excerpt_keeps_only_the_hunks_inside_the_named_functions(tmp_path, capsys):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("def f():\n    x = 1\n" + "y = 0\n" * 12 + "def g():\n    z = 1\n")
    b.write_text("def f():\n    x = 2\n" + "y = 0\n" * 12 + "def g():\n    z = 2\n")
    assert changed_lines(code_diff(a, b)) == 4
    only_g = code_diff(a, b, within=("g",))
    assert changed_lines(only_g) == 2 and "+    z = 2" in only_g and "x = 2" not in only_g
    assert code_diff(a, b, within=("h",)) == ""
    assert cli.main(["diff", "--code", "h14", "--in", "tiles_of"]) == 0
    assert "+def tiles_of" in capsys.readouterr().out
    block = blocks_compiled.excerpt_block("h14", "tiles_of")
    assert "`ladder diff --code h14 --in tiles_of`" in block and "+def tiles_of" in block
    with pytest.raises(ValueError, match="no code change"):
        blocks_compiled.excerpt_block("h14", "ring_position")


def test_a_long_code_block_is_cut_and_says_how_to_see_the_rest():
    block = blocks_compiled.code_block("b02")
    fenced = block.split("```diff\n", 1)[1].split("```", 1)[0]
    assert changed_lines(fenced) == blocks_compiled.CODE_CHANGED_LINES
    assert "more lines" in block and "`ladder diff --code b02`" in block
    short = blocks_compiled.code_block("h03")
    assert "more lines" not in short and changed_lines(short) == changed_lines(code_diff(
        resolve("h02").path, resolve("h03").path))


def test_cli_diff_stat_counts_each_pair(capsys):
    assert cli.main(["diff", "--stat", "--track", "hopper"]) == 0
    out = capsys.readouterr().out
    h03 = resolve("h03")
    row = next(line for line in out.splitlines() if "h03" in line and "h02" in line)
    assert f" {changed_lines(code_diff(predecessor(h03).path, h03.path))} " in row
    assert "b03" not in out and sum("│ h" in line for line in out.splitlines()) == 13
    assert cli.main(["diff"]) == 2


# Every step is one change away from its predecessor, so its code diff stays short enough to read as
# a lesson. The baseline's rewrite into each track and the split into warp roles are the exceptions
# by design; a step whose one change must touch every role says why in a writeup section.
DIFF_LINES = 150
DIFF_EXCEPTIONS = {"h02", "b02", "h07", "b07"}
LONG_DIFF_SECTION = "## Why this diff is longer than 150 lines"


@pytest.mark.parametrize("step", [s for s in discover() if predecessor(s) is not None], ids=lambda s: s.id)
def test_each_steps_code_diff_is_short_or_its_writeup_says_why(step):
    changed = changed_lines(code_diff(predecessor(step).path, step.path))
    if step.id in DIFF_EXCEPTIONS or changed <= DIFF_LINES:
        return
    assert LONG_DIFF_SECTION in step.writeup.read_text(), (
        f"{step.id}: {changed} changed code lines against {predecessor(step).id} (limit {DIFF_LINES}); split "
        f"the change, or justify it under '{LONG_DIFF_SECTION}' in {step.writeup.name}")


def test_the_diff_limit_can_fail(tmp_path):
    """A step that rewrote 200 lines would be caught: the counter sees every changed line."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("".join(f"x{i} = {i}\n" for i in range(200)))
    b.write_text("".join(f"x{i} = {i + 1}\n" for i in range(200)))
    assert changed_lines(code_diff(a, b)) == 400 > DIFF_LINES


FORCED_SECTION = "## A second, forced edit"


def _readme_forced_edits() -> set[str]:
    from harness.core.paths import ROOT
    text = (ROOT / "README.md").read_text()
    start = text.index("**Forced edits**")
    section = text[start:text.index("\n\n", start)]
    return set(re.findall(r"^- \[([bh]\d\d)\]\(", section, re.M))


def test_readmes_forced_edit_list_is_the_writeups():
    """README names exactly the steps whose writeup has a forced-edit section, and each such section
    cites its evidence (an experiment that shows what goes wrong without the edit)."""
    forced = {s.id for s in discover() if s.writeup.exists() and FORCED_SECTION in s.writeup.read_text()}
    assert forced and _readme_forced_edits() == forced
    for step in discover():
        if step.id in forced:
            section = step.writeup.read_text().split(FORCED_SECTION, 1)[1].split("\n## ", 1)[0]
            assert re.search(r"exp:[a-z0-9-]+", section), f"{step.id}: the forced edit cites no evidence"


def test_a_long_excerpt_is_cut_and_points_at_the_whole_diff():
    block = blocks_compiled.excerpt_block("h12", "online_softmax")
    fenced = block.split("```diff\n", 1)[1].split("```", 1)[0]
    assert len(fenced.splitlines()) == blocks_compiled.EXCERPT_LINES and "more lines" in block
    short = blocks_compiled.excerpt_block("h14", "tiles_of")
    assert "more lines" not in short
