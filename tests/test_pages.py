"""Step pages read as a story first: a short narrative on top (the change, why, the prediction, the
result, the lesson, the heart of the change's code), and the supporting material (the whole diff,
experiments, profiles, SASS tables) in collapsed ``<details>`` appendices below it."""

import re

import pytest

from harness.core.steps import discover, predecessor

TEXT_LIMIT = 200        # lines of a step page outside <details>, generated blocks included
STEPS = [s for s in discover() if s.writeup.exists()]
BLOCK = re.compile(r"<!-- ladder:begin (\w[\w-]*) ([^>]*?) -->")


def outside_details(text: str) -> list[str]:
    """The lines of a page a reader sees before opening any <details> (nesting counted)."""
    depth, seen = 0, []
    for line in text.splitlines():
        opens, closes = line.count("<details"), line.count("</details>")
        if depth == 0 and not opens:
            seen.append(line)
        depth += opens - closes
        assert depth >= 0, f"a </details> without its <details>: {line!r}"
    assert depth == 0, "a <details> is never closed"
    return seen


def test_outside_details_counts_only_what_is_not_collapsed():
    page = "a\n<details><summary>x</summary>\n\nb\n<details>\nc\n</details>\n</details>\nd\n"
    assert outside_details(page) == ["a", "d"]
    with pytest.raises(AssertionError):
        outside_details("a\n<details>\nb\n")


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.id)
def test_a_step_page_shows_at_most_200_lines_before_its_appendices(step):
    shown = outside_details(step.writeup.read_text())
    assert len(shown) <= TEXT_LIMIT, (f"{step.writeup.name}: {len(shown)} lines outside <details>; move supporting "
                                      f"tables, full diffs and profiles into a collapsed appendix")


@pytest.mark.parametrize("step", [s for s in STEPS if predecessor(s)], ids=lambda s: s.id)
def test_the_narrative_shows_an_excerpt_and_the_appendix_the_whole_diff(step):
    text = step.writeup.read_text()
    shown = "\n".join(outside_details(text))
    kinds_shown = {m.group(1) for m in BLOCK.finditer(shown)}
    kinds_all = [(m.group(1), m.group(2).split()[0]) for m in BLOCK.finditer(text)]
    assert "excerpt" in kinds_shown, f"{step.writeup.name}: the narrative has no `excerpt {step.id} <function>` block"
    assert ("code", step.id) in kinds_all and "code" not in kinds_shown, \
        f"{step.writeup.name}: the whole code diff (`code {step.id}`) belongs in a collapsed appendix"


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.id)
def test_every_appendix_has_a_summary_and_renders_its_markdown(step):
    """GitHub renders Markdown inside <details> only after a blank line following <summary>."""
    lines = step.writeup.read_text().splitlines()
    assert any(line.startswith("<details") for line in lines), f"{step.writeup.name}: no collapsed appendix"
    for i, line in enumerate(lines):
        if line.startswith("<details"):
            assert "<summary>" in line and "</summary>" in line, f"{step.writeup.name}:{i + 1}: <details> needs a one-line <summary>"
            assert i + 1 < len(lines) and not lines[i + 1].strip(), f"{step.writeup.name}:{i + 2}: a blank line after <summary>"
