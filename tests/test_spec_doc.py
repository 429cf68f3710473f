"""docs/spec.md stays in step with the clauses the code cites and the links that point at it."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import taskboard
from taskboard import Code
from taskboard._operations import OPERATIONS
from taskboard._protocol.spares import OPTIONAL_OPS

PACKAGE = Path(taskboard.__file__).resolve().parent
DOCS = Path(__file__).resolve().parent.parent / "docs"
SPEC = DOCS / "spec.md"

#: "SPEC 3", "SPEC 3.5", "SPEC 3.1 step 4", "SPEC section 7": the clause number.
CITATION = re.compile(r"\bSPEC (?:sections? )?(\d+(?:\.\d+)?)\b")
#: A heading line outside code blocks: its level and its text.
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
#: A numbered heading's clause: "3.5 renew" -> "3.5".
NUMBERED = re.compile(r"^(\d+(?:\.\d+)?)\s")
#: A link to a section of spec.md from another page, and a link within spec.md itself.
SPEC_LINK = re.compile(r"spec\.md#([^\s)\]>\"']*)")
LOCAL_LINK = re.compile(r"\]\(#([^\s)]*)\)")
#: The sections of the contract, in order (the numbering of the shared SPEC.md).
SECTIONS = ["1", "2", "3", *(f"3.{n}" for n in range(1, 9)), "4", "5", "6", "7", "8", "9", "10"]


def headings(markdown: str) -> list[tuple[int, str]]:
    """The (level, text) of every ATX heading, skipping fenced code blocks."""
    found: list[tuple[int, str]] = []
    fence = ""
    for line in markdown.splitlines():
        stripped = line.lstrip()
        if fence:
            if stripped.startswith(fence):
                fence = ""
            continue
        if stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            continue
        match = HEADING.match(line)
        if match:
            found.append((len(match.group(1)), match.group(2)))
    return found


def slug(text: str) -> str:
    """GitHub's anchor for a heading: link text kept, lowercased, punctuation but - dropped."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link shows its text
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every anchor GitHub makes for the page, repeats suffixed -1, -2, ... as it does."""
    seen: Counter[str] = Counter()
    result: set[str] = set()
    for _, text in headings(markdown):
        base = slug(text)
        result.add(base if seen[base] == 0 else f"{base}-{seen[base]}")
        seen[base] += 1
    return result


def spec_text() -> str:
    return SPEC.read_text(encoding="utf-8")


def numbered_sections() -> list[str]:
    """The clause numbers of spec.md's numbered headings, in page order."""
    numbers = []
    for _, text in headings(spec_text()):
        match = NUMBERED.match(text)
        if match:
            numbers.append(match.group(1))
    return numbers


def cited_clauses() -> set[str]:
    """Every clause number the taskboard package's source cites as SPEC n or SPEC n.m."""
    cited: set[str] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        cited.update(CITATION.findall(path.read_text(encoding="utf-8")))
    return cited


def test_slug_follows_github() -> None:
    """Anchors are computed as GitHub does: "3.5 renew" becomes "35-renew"."""
    assert slug("3.5 renew") == "35-renew"
    assert slug("7 Wall-clock mode") == "7-wall-clock-mode"
    assert slug("SPEC 7: `wall` mode") == "spec-7-wall-mode"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


def test_every_cited_clause_has_a_heading() -> None:
    """Each SPEC n / SPEC n.m cited in the taskboard source has a numbered heading in spec.md."""
    cited = cited_clauses()
    assert {"3.1", "3.5", "7"} <= cited, f"the citation scan found too little: {sorted(cited)}"
    missing = sorted(cited - set(numbered_sections()))
    assert not missing, f"docs/spec.md has no heading for SPEC {', '.join(missing)}"


def test_sections_keep_the_contracts_numbering() -> None:
    """spec.md has each section of the contract exactly once, in the contract's order."""
    assert numbered_sections() == SECTIONS


def test_every_link_to_spec_md_has_its_anchor() -> None:
    """Every spec.md#anchor link in docs/*.md (and every #anchor within spec.md) resolves."""
    known = anchors(spec_text())
    links = []
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        links += [(page.name, anchor) for anchor in SPEC_LINK.findall(text)]
        if page == SPEC:
            links += [(page.name, anchor) for anchor in LOCAL_LINK.findall(text)]
    assert any(name == "clauses.md" for name, _ in links), "docs/clauses.md links to no clause"
    broken = [f"{name}: #{anchor}" for name, anchor in links if anchor not in known]
    assert not broken, f"links to anchors docs/spec.md does not have: {broken}"


def test_every_check_code_is_described_in_section_4() -> None:
    """Each of the check() codes in taskboard.Code is named in section 4 of spec.md."""
    section = re.search(r"^## 4 .*?(?=^## )", spec_text(), re.MULTILINE | re.DOTALL)
    assert section, "docs/spec.md has no section 4"
    missing = [code.value for code in Code if f"`{code.value}`" not in section.group()]
    assert not missing, f"section 4 of docs/spec.md does not name {missing}"


def test_the_protocol_ops_are_listed_once_with_links_both_ways() -> None:
    """protocol.md's Operations table lists every op the checker can send, spec.md's section
    10 links to it instead of listing them, and the table's section links back."""
    protocol = (DOCS / "protocol.md").read_text(encoding="utf-8")
    assert "operations" in anchors(protocol)
    operations = re.search(r"^## Operations\n.*?(?=^## )", protocol, re.MULTILINE | re.DOTALL)
    assert operations, "docs/protocol.md has no Operations section"
    table = re.findall(r"^\| (`[^|]*`) \|", operations.group(), re.MULTILINE)
    listed = {op for cell in table for op in re.findall(r"`(\w+)`", cell)}
    sent = {"hello", "init", "set_time", "list", "close", *OPTIONAL_OPS}
    sent |= {row.protocol_op for row in OPERATIONS if row.protocol_op}
    assert sent <= listed, f"ops missing from protocol.md's table: {sorted(sent - listed)}"
    assert "spec.md#10-boards-in-any-language" in operations.group()
    section = re.search(r"^## 10 .*", spec_text(), re.MULTILINE | re.DOTALL)
    assert section, "docs/spec.md has no section 10"
    assert "protocol.md#operations" in section.group()
    assert "| `hello`" not in section.group(), "spec.md lists the ops a second time"
