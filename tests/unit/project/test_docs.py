"""The README is a front door, docs/ holds the reference: sizes, links, the generated table reference."""

import re
from pathlib import Path

import pytest

from jobs.common.schemas import COLUMN_DOCS, QUARANTINE_REASONS, TABLES
from jobs.common.tabledocs import BEGIN, END, render_table_reference

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def prose_lines(text: str) -> list[str]:
    """The lines of a Markdown text outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def links(page: Path) -> list[str]:
    """Every inline link target of ``page`` (outside code)."""
    targets = []
    for line in prose_lines(page.read_text(encoding="utf-8")):
        targets += _LINK.findall(_CODE_SPAN.sub(lambda m: m.group(0).replace("[", "").replace("]", ""), line))
    return targets


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings (a repeated heading gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose_lines(page.read_text(encoding="utf-8")):
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def test_the_generated_table_reference_is_current():
    text = (DOCS / "tables.md").read_text(encoding="utf-8")
    assert BEGIN in text and END in text
    current = text.split(BEGIN, 1)[1].split(END, 1)[0]
    stale = "docs/tables.md is stale: run python -m jobs.common.tabledocs --write"
    assert current == "\n" + render_table_reference(), stale


def test_every_column_of_every_table_is_described():
    assert set(COLUMN_DOCS) == set(TABLES)
    reference = render_table_reference()
    for table, schema in TABLES.items():
        for name in schema.names:
            assert COLUMN_DOCS[table][name].strip(), (table, name)
            assert f"| `{name}` |" in reference


def test_every_quarantine_reason_is_documented():
    text = (DOCS / "streaming-job.md").read_text(encoding="utf-8")
    section = text.split("## Quarantine reasons", 1)[1]
    for reason in QUARANTINE_REASONS:
        assert f"`{reason}`" in section, reason


def test_the_readme_is_a_front_door():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 220, f"README.md has {len(lines)} lines (at most 220)"


def test_the_readme_starts_with_the_two_commands_and_ci_runs_the_test_command():
    text = README.read_text(encoding="utf-8")
    first_block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split()[0] for line in first_block.splitlines() if line and not line[0].isspace()]
    assert commands == ["bin/run", "bin/test"]
    assert text.index("```bash") < text.index("\n## ")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "exec bin/test" in ci


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_an_existing_file_and_anchor(page):
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading with anchor #{anchor}")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_every_docs_page_the_readme_links_exists():
    pages = {t.split("#", 1)[0] for t in links(README) if t.startswith("docs/")}
    expected = {
        "docs/cli.md",
        "docs/streaming-job.md",
        "docs/tables.md",
        "docs/monitoring.md",
        "docs/orchestration.md",
        "docs/performance.md",
        "docs/deployment.md",
    }
    assert expected <= pages
    for target in pages:
        assert (ROOT / target).exists(), target
    assert not (DOCS / "results.md").exists()  # merged into docs/performance.md
