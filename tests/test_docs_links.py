"""The docs' links resolve, and code comments cite docs and design sections that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#+ (.*)")
# what a code comment cites: a page under docs, a design doc's numbered section (", 6. Title",
# ", 4. and 6."), or any page's section by its heading in quotes (README.md, "Title")
DOC_PATH = re.compile(r"\bdocs/[\w./-]+\.md\b")
SECTION = re.compile(r"\b(docs/design/[\w-]+\.md), (\d+)\.(?=[\s)])")
NUMBERED = re.compile(r"\b(docs/design/[\w-]+\.md), ((?:\d+\.(?: and )?)+)([^)\n]*)")
QUOTED = re.compile(r"((?<![\w/.-])(?:[\w-]+/)*[\w-]+\.md), \"([^\"]+)\"")
COMMENT_MARK = re.compile(r"^\s*(?:#+|//+|/\*+|\*+(?!/))?\s?")
CODE_DIRS = ["minisgl_core", "plugins", "benchmarks", "tests", "examples"]
CODE_SUFFIXES = {".py", ".c", ".cpp", ".h", ".sh", ".toml"}
ROOT_CODE = ["Makefile", "pyproject.toml"]


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
    return [*(ROOT / name for name in ROOT_CODE),
            *(path for folder in CODE_DIRS for path in sorted((ROOT / folder).rglob("*"))
              if path.suffix in CODE_SUFFIXES and ".venv" not in path.parts
              and path.name != "test_docs_links.py")]


def flowing(text: str) -> str:
    """``text`` with each line's comment mark dropped and the lines joined by one space: a
    citation wrapped over comment lines reads as one."""
    return " ".join(COMMENT_MARK.sub("", line).strip() for line in text.splitlines())


def headings(doc: Path) -> list[str]:
    """The page's headings, lowercased, without their leading #s."""
    return [m.group(1).strip().lower() for line in doc.read_text().splitlines()
            if (m := HEADING.match(line))]


def numbered_titles(doc: Path) -> dict[str, str]:
    """Section number -> title of the page's "## N. Title" headings, lowercased."""
    return {m.group(1): m.group(2).strip().lower() for line in doc.read_text().splitlines()
            if (m := re.match(r"^## (\d+)\. (.*)", line))}


def cited_section_problems(path: Path, text: str) -> list[str]:
    """Quoted headings that no heading of the page starts with, and numbered sections whose
    cited title is not the section's (a renumbered or renamed section)."""
    problems = []
    where = path.relative_to(ROOT)
    for doc, title in set(QUOTED.findall(text)):
        page = ROOT / doc if (ROOT / doc).exists() else ROOT / "docs" / doc
        if not page.exists():
            problems.append(f"{where}: {doc} (no such page)")
        elif not any(h.startswith(title.lower()) for h in headings(page)):
            problems.append(f'{where}: {doc}, "{title}" (no such heading)')
    for doc, numbers, after in set(NUMBERED.findall(text)):
        titles = numbered_titles(ROOT / doc) if (ROOT / doc).exists() else {}
        problems += [f"{where}: {doc}, section {n}" for n in re.findall(r"\d+", numbers)
                     if n not in titles]
        cited = after.strip().lower()
        title = titles.get(re.findall(r"\d+", numbers)[-1], "")
        # a bare number ("12.)", "4. and 6.") or the section's own title, maybe cut by ")"
        if cited and title and not (cited.startswith(title) or title.startswith(cited)):
            problems.append(f"{where}: {doc}, {numbers.strip()} {after.strip()} "
                            f"(the section is now: {title})")
    return problems


def test_code_cites_docs_and_design_sections_that_exist() -> None:
    missing = []
    for path in code_files():
        text = path.read_text(errors="replace")
        for cited in set(DOC_PATH.findall(text)):
            if not (ROOT / cited).exists():
                missing.append(f"{path.relative_to(ROOT)}: {cited}")
        for doc, number in set(SECTION.findall(text)):
            page = (ROOT / doc).read_text() if (ROOT / doc).exists() else ""
            if not re.search(rf"^## {number}\. ", page, re.M):
                missing.append(f"{path.relative_to(ROOT)}: {doc}, section {number}")
        missing += cited_section_problems(path, flowing(text))
    assert missing == []


def test_the_benchmarks_page_stays_a_reference() -> None:
    lines = (ROOT / "docs" / "benchmarks.md").read_text().splitlines()
    assert len(lines) < 400
    assert any(line.startswith("## Headline results") for line in lines)
