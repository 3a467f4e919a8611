"""The code of a step file without its prose: docstrings and ``#`` comments stripped, so a diff of
two steps (``ladder diff --code``) shows only the lines that change what runs.

Stripping keeps every remaining line as written (indentation, spacing, line breaks inside an
expression) and drops the lines left blank, except inside a multi-line string, whose text is code.
A docstring that is a body's only statement becomes ``pass``, so the stripped source still parses
to the original's syntax tree minus its docstrings (tests/test_code_diff.py checks that on every
step). A docstring sharing its line with other code is kept rather than cut out of the line.
"""

from __future__ import annotations

import ast
import difflib
import io
import tokenize
from pathlib import Path

from harness.core.paths import ROOT

_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _docstrings(tree: ast.AST):
    """(docstring statement, is the body's only statement) for every docstring in ``tree``."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, _DOCUMENTED) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            yield body[0], len(body) == 1


def numbered_code_lines(source: str) -> list[tuple[int, str]]:
    """(1-based line number in ``source``, text) of each line that carries code."""
    lines = source.split("\n")      # as ast and tokenize count lines (splitlines also splits at \f)
    tree = ast.parse(source)
    comment_at: dict[int, int] = {}       # 0-based line -> column (characters) where its comment starts
    in_string: set[int] = set()           # 0-based lines whose end lies inside a multi-line string
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comment_at[tok.start[0] - 1] = tok.start[1]
        elif tok.start[0] != tok.end[0] and tok.type not in (tokenize.NL, tokenize.NEWLINE):
            in_string.update(range(tok.start[0] - 1, tok.end[0] - 1))
    drop: set[int] = set()
    replace: dict[int, str] = {}
    for doc, alone in _docstrings(tree):
        first, last = doc.lineno - 1, doc.end_lineno - 1
        before = lines[first].encode()[:doc.col_offset].decode()
        after = lines[last].encode()[doc.end_col_offset:].decode()
        if before.strip() or (after.strip() and not after.strip().startswith("#")):
            continue                      # shares its line with code: keep it
        drop.update(range(first, last + 1))
        if alone:
            replace[first] = before + "pass"
    out = []
    for i, line in enumerate(lines):
        if i in replace:
            out.append((i + 1, replace[i]))
            continue
        if i in drop:
            continue
        if i in in_string:
            out.append((i + 1, line))      # text of a string: kept byte for byte, blank or not
            continue
        text = (line[:comment_at[i]] if i in comment_at else line).rstrip()
        if text.strip():
            out.append((i + 1, text))
    return out


def code_lines(source: str) -> list[str]:
    """The lines of ``source`` that carry code: docstrings, comments and blank lines dropped."""
    return [text for _, text in numbered_code_lines(source)]


def code_source(source: str) -> str:
    return "\n".join(code_lines(source)) + "\n"


def display_path(path) -> str:
    """A path relative to the repository when it is inside it (a step), else as given (a copy in /tmp)."""
    path = Path(path)
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def _spacing_blind(line: str) -> str:
    """A line compared without its indentation and with each run of spaces as one (``diff -b -w``
    for code): a block moved into a function, or re-aligned, compares equal."""
    return " ".join(line.split())


def function_lines(source: str, names) -> set[int]:
    """The file lines (1-based) of every function in ``source`` named in ``names``, at any depth."""
    return {n for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names
            for n in range(node.lineno, node.end_lineno + 1)}


def code_diff(a_path, b_path, context: int = 3, whitespace: bool = False, within=()) -> str:
    """Unified diff of the code lines of two files ('' when their code is the same). Each hunk is
    headed by the file line numbers where it starts on either side (``@@ a.py:120 b.py:118 @@``):
    the stripped lines have no numbers of their own. Lines that differ only in indentation or
    spacing count as the same (shown as context, as the second file has them) unless
    ``whitespace``: moving code into a function is then not a change. With ``within`` (function
    names), only the hunks that change a line inside one of those functions, on either side."""
    a_source, b_source = Path(a_path).read_text(), Path(b_path).read_text()
    a, b = numbered_code_lines(a_source), numbered_code_lines(b_source)
    a_in, b_in = function_lines(a_source, within), function_lines(b_source, within)
    a_text, b_text = [t for _, t in a], [t for _, t in b]
    key = (lambda lines: lines) if whitespace else (lambda lines: [_spacing_blind(t) for t in lines])
    out = []
    matcher = difflib.SequenceMatcher(None, key(a_text), key(b_text), autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        changes = [op for op in group if op[0] != "equal"]
        if within and not any(a[i][0] in a_in for _, i1, i2, _, _ in changes for i in range(i1, i2)) \
                and not any(b[j][0] in b_in for _, _, _, j1, j2 in changes for j in range(j1, j2)):
            continue
        if not out:
            spacing = "" if whitespace else ", indentation ignored"
            out += [f"--- {display_path(a_path)} (code only{spacing})",
                    f"+++ {display_path(b_path)} (code only{spacing})"]
        i1, j1 = group[0][1], group[0][3]
        a_line = a[i1][0] if i1 < len(a) else (a[-1][0] + 1 if a else 1)
        b_line = b[j1][0] if j1 < len(b) else (b[-1][0] + 1 if b else 1)
        out.append(f"@@ {Path(a_path).name}:{a_line} {Path(b_path).name}:{b_line} @@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [" " + t for t in b_text[j1:j2]]
                continue
            out += ["-" + t for t in a_text[i1:i2]]
            out += ["+" + t for t in b_text[j1:j2]]
    return "\n".join(out) + "\n" if out else ""


def changed_lines(diff: str) -> int:
    """How many lines of a code_diff are removed or added."""
    return sum(1 for line in diff.splitlines() if line[:1] in ("+", "-") and not line.startswith(("---", "+++")))


def kernel_loop(source: str) -> tuple[str, int, int, list[str]]:
    """(kernel function's name, first and last file line, code lines) of the first top-level
    ``for`` loop in the ``@cute.kernel`` function of a step: the main loop over K/V tiles."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(
                (d.attr if isinstance(d, ast.Attribute) else getattr(d, "id", None)) == "kernel"
                for d in node.decorator_list):
            loop = next((s for s in node.body if isinstance(s, ast.For)), None)
            if loop is None:
                break
            lines = [(n, t) for n, t in numbered_code_lines(source) if loop.lineno <= n <= loop.end_lineno]
            indent = len(lines[0][1]) - len(lines[0][1].lstrip())
            return node.name, loop.lineno, loop.end_lineno, [t[indent:] for _, t in lines]
    raise ValueError("no @cute.kernel function with a top-level for loop")
