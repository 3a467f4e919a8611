"""The glossary in writeups/00-algorithm.md and the links to it: unique anchors, each term's first use in
a writeup's prose links to its anchor, every glossary link resolves, and the README routes there first."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "writeups" / "00-algorithm.md"
WRITEUPS = sorted(p for p in (ROOT / "writeups").rglob("*.md") if p != GLOSSARY)

# anchor -> the spellings of its term. Case-sensitive unless the pattern says (?i); acronyms stay exact
# so that "SM" does not match "sm_90a" and "TMA" does not match "tma" in a file name.
TERMS = {
    "warpgroup": r"(?i)\bwarpgroups?\b",
    "wgmma": r"(?i)\bwgmma\b",
    "mma-sync": r"\bmma\.sync\b",
    "ss-rs-ts": r"\b(?:SS|RS|TS)\b",
    "umma": r"\bUMMA\b|\btcgen05\.mma\b",
    "tmem": r"\bTMEM\b|(?i:\btensor\s+memory\b)(?!\s+[Aa]ccelerator)",
    "tma": r"\bTMA\b|\bTensor\s+Memory\s+Accelerator\b",
    "mbarrier": r"(?i)\bmbarriers?\b",
    "expect-tx": r"(?i)\bexpect[-_]tx\b",
    "phase-parity": r"(?i)\bparit(?:y|ies)\b|(?<!softmax )(?<!timeline )\bphases?\b",  # a barrier's phase, not a schedule's
    "swizzle": r"(?i)\bswizzl(?:e|es|ed|ing)\b",
    "bank-conflict": r"(?i)\bbank[-\s]+conflict(?:s|ed)?\b|\bwavefronts?\b",
    "named-barrier": r"(?i)\bnamed\s+barriers?\b",
    "setmaxnreg": r"\bsetmaxnreg\b",
    "warp-specialization": r"(?i)\bwarp[-\s]+speciali[sz](?:ation|ed)\b",
    "pipeline-stage": r"(?i)\bstages?\b|\bring\b",
    "enabler": r"(?i)\benablers?\b",
    "fraction-of-fa4": r"(?i)\bfractions?\s+of\s+(?:stock\s+)?(?:FA4|FlashAttention-4)\b",
    "h-mean": r"(?i)\bh-mean\b|\bharmonic\s+mean\b",
    "ex2": r"\bex2(?:\.approx(?:\.f32)?)?\b|\bMUFU(?:\.EX2)?\b",
    "cta": r"\bCTAs?\b",
    "sm": r"\bSMs?\b",
    "occupancy": r"(?i)\boccupancy\b",
    # ncu's stall names as the profiles spell them, not "stall" alone (a warp stalls in any sense)
    "stall-reasons": r"\b(?:long|short)[_\s-]scoreboard\b|\bdispatch_stall\b|\bmio_throttle\b"
    r"|\b[Bb]arrier\s+stalls\b|(?i:\bstall\s+reasons?\b)",
    "uniform-registers": r"\bR2URs?\b|(?i:\buniform\s+registers?\b)",
    "packed-fp32": r"\bF(?:FMA|ADD|MUL)2(?:\.[A-Z0-9_]+)*s?\b|(?i:\bpacked\s+(?:FMAs?|multipl(?:y|ies)|adds?)\b)",
    "fmnmx": r"\bFMNMX3?(?:\.[A-Z0-9_]+)*s?\b",
    "f2fp": r"\bF2FP(?:\.[A-Z0-9_]+)*s?\b",
    "proxy-fence": r"(?i)\bproxy\s+fences?\b|\bfence\.proxy\.async(?:\.shared::cta)?|\b(?:async|generic)[-\s]+prox(?:y|ies)\b"
    r"|\bproxies\b",
    "cluster": r"(?i)\bclusters?\b|\bmapa\b",
    "multicast": r"(?i)\bmulticast\b",
    # the bound model's critical path, not any dependency chain ("four chains of max.f32")
    "chain": r"(?i)\bhand-offs?\b|\bchain\s+of\s+one\s+Q\s+tile\b",
}
PATTERNS = {anchor: re.compile(p) for anchor, p in TERMS.items()}

ANCHOR = re.compile(r'<a id="([^"]+)"></a>')
# A Markdown link, or a code span (a run of backticks, its content, the same run again).
TOKEN = re.compile(r"\[(?P<text>[^\]]*)\]\((?P<url>[^)\s]*)\)|(?P<ticks>`+)(?P<code>.+?)(?P=ticks)", re.S)
GLOSSARY_LINK = re.compile(r"\]\(([^)\s]*00-algorithm\.md(?:#[^)\s]*)?)\)")


def prose(text: str) -> str:
    """``text`` with everything that is not prose blanked out line by line: fenced code blocks, generated
    blocks (ladder:begin .. ladder:end), HTML comments, headings, table rows and the <details>/<summary>
    lines of a collapsed appendix (HTML, where a Markdown link would not render)."""
    out, fence, generated = [], False, False
    for line in text.splitlines():
        stripped = line.strip()
        if generated:
            generated = not stripped.startswith("<!-- ladder:end")
        elif stripped.startswith("```"):
            fence = not fence
        elif stripped.startswith("<!-- ladder:begin"):
            generated = True
        elif not fence and not stripped.startswith(("#", "|", "<!--", "<details", "</details")):
            out.append(line)
            continue
        out.append("")
    return "\n".join(out)


def uses(text: str):
    """Every use of a glossary term in the prose of ``text``, in reading order: (position, anchor, the
    text used, the link's target or None). Inside a link the link's text counts; a code span counts
    only when it is exactly a spelling of the term (`wgmma`, not `wgmma.fence`)."""
    body = prose(text)
    found, pos = [], 0

    def plain(start: int, end: int):
        for anchor, pattern in PATTERNS.items():
            for m in pattern.finditer(body, start, end):
                found.append((m.start(), anchor, m.group(0), None))

    for tok in TOKEN.finditer(body):
        plain(pos, tok.start())
        pos = tok.end()
        if tok.group("url") is not None:
            label = tok.group("text").replace("`", "").replace("*", "")
            for anchor, pattern in PATTERNS.items():
                if pattern.search(label):
                    found.append((tok.start(), anchor, tok.group(0), tok.group("url")))
        else:
            code = tok.group("code").strip()
            for anchor, pattern in PATTERNS.items():
                if pattern.fullmatch(code):
                    found.append((tok.start(), anchor, tok.group(0), None))
    plain(pos, len(body))
    return sorted(found, key=lambda u: u[0])


def unlinked_first_uses(text: str, glossary_href: str) -> list[str]:
    """The terms whose first prose use in ``text`` is not a link to ``glossary_href#<anchor>``."""
    first = {}
    for _, anchor, used, url in uses(text):
        first.setdefault(anchor, (used, url))
    return [f"{anchor}: {used!r}" for anchor, (used, url) in first.items() if url != f"{glossary_href}#{anchor}"]


def href_from(path: Path) -> str:
    return Path("../" * (len(path.relative_to(ROOT / "writeups").parts) - 1)).joinpath(GLOSSARY.name).as_posix()


def glossary_anchors() -> list[str]:
    return ANCHOR.findall(GLOSSARY.read_text())


def test_glossary_anchors_are_unique_and_cover_every_term():
    anchors = glossary_anchors()
    assert len(anchors) == len(set(anchors)), sorted(a for a in set(anchors) if anchors.count(a) > 1)
    assert set(TERMS) <= set(anchors), f"terms without an anchor: {sorted(set(TERMS) - set(anchors))}"


@pytest.mark.parametrize("path", WRITEUPS, ids=lambda p: str(p.relative_to(ROOT / "writeups")))
def test_first_use_of_each_term_links_to_the_glossary(path):
    missing = unlinked_first_uses(path.read_text(), href_from(path))
    assert not missing, f"{path.relative_to(ROOT)}: first use not linked to the glossary: {missing}"


@pytest.mark.parametrize("path", WRITEUPS, ids=lambda p: str(p.relative_to(ROOT / "writeups")))
def test_every_glossary_link_resolves(path):
    anchors = set(glossary_anchors())
    text = path.read_text()
    links = GLOSSARY_LINK.findall(text)
    # each term's first use links to the glossary (the test above): at least one link per term used
    assert len(links) >= len({anchor for _, anchor, _, _ in uses(text)}), f"{path.relative_to(ROOT)}: {links}"
    for url in links:
        target, _, anchor = url.partition("#")
        assert (path.parent / target).resolve() == GLOSSARY, f"{path.relative_to(ROOT)}: {url} is not the glossary"
        assert anchor in anchors, f"{path.relative_to(ROOT)}: {url} names no anchor of the glossary"


def test_the_check_catches_an_unlinked_first_use():
    linked = "A [warpgroup](00-algorithm.md#warpgroup) is four warps; each warpgroup issues wgmma..."
    assert "warpgroup: 'warpgroup'" not in unlinked_first_uses(linked, "00-algorithm.md")
    assert "wgmma: 'wgmma'" in unlinked_first_uses(linked, "00-algorithm.md")
    late = "Each warpgroup issues; a [warpgroup](00-algorithm.md#warpgroup) is four warps."
    assert unlinked_first_uses(late, "00-algorithm.md") == ["warpgroup: 'warpgroup'"]
    # not prose: a heading, a fenced block, a table row, a generated block; and `wgmma.fence` is code
    skipped = "# wgmma\n```\nwgmma\n```\n| wgmma |\n<!-- ladder:begin x -->\nwgmma\n<!-- ladder:end -->\n`wgmma.fence`"
    assert unlinked_first_uses(skipped, "00-algorithm.md") == []
    # a link to the wrong anchor, or from the wrong folder, does not count
    assert unlinked_first_uses("[wgmma](00-algorithm.md#tma)", "00-algorithm.md") == ["wgmma: '[wgmma](00-algorithm.md#tma)'"]
    assert unlinked_first_uses("[`wgmma`](00-algorithm.md#wgmma)", "../00-algorithm.md") != []


def test_readme_routes_to_the_algorithm_page_before_any_step():
    readme = (ROOT / "README.md").read_text()
    first_step = re.search(r"\]\(writeups/(?:01-|hopper/|blackwell/)", readme)
    glossary = readme.find("](writeups/00-algorithm.md")
    assert glossary >= 0, "README.md does not link writeups/00-algorithm.md"
    assert first_step is None or glossary < first_step.start(), "README.md links a step before 00-algorithm.md"
