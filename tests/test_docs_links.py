"""The docs' links resolve, and code comments cite docs and design sections that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#+ (.*)")
# what a code comment cites: a page under docs, or a design doc's numbered section (", 6. Title")
DOC_PATH = re.compile(r"\bdocs/[\w./-]+\.md\b")
SECTION = re.compile(r"\b(docs/design/[\w-]+\.md), (\d+)\.(?=[\s)])")
CODE_DIRS = ["minisgl_core", "plugins", "benchmarks", "tests"]
CODE_SUFFIXES = {".py", ".c", ".cpp", ".h"}


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
            *sorted(ROOT.glob("plugins/*/README.md"))]


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a page's headings (code blocks skipped)."""
    found: set[str] = set()
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        match = None if in_code else HEADING.match(line)
        if match:
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower())
            found.add(slug.replace(" ", "-"))
    return found


def test_relative_links_in_the_docs_resolve() -> None:
    broken = []
    for page in markdown_files():
        for target in LINK.findall(page.read_text()):
            if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def code_files() -> list[Path]:
    return [path for folder in CODE_DIRS for path in sorted((ROOT / folder).rglob("*"))
            if path.suffix in CODE_SUFFIXES and ".venv" not in path.parts]


def test_code_cites_docs_and_design_sections_that_exist() -> None:
    missing = []
    for path in code_files():
        text = path.read_text(errors="replace")
        for cited in set(DOC_PATH.findall(text)):
            if not (ROOT / cited).exists():
                missing.append(f"{path.relative_to(ROOT)}: {cited}")
        for doc, number in set(SECTION.findall(text)):
            headings = (ROOT / doc).read_text() if (ROOT / doc).exists() else ""
            if not re.search(rf"^## {number}\. ", headings, re.M):
                missing.append(f"{path.relative_to(ROOT)}: {doc}, section {number}")
    assert missing == []


def test_the_benchmarks_page_stays_a_reference() -> None:
    lines = (ROOT / "docs" / "benchmarks.md").read_text().splitlines()
    assert len(lines) < 400
    assert any(line.startswith("## Headline results") for line in lines)
