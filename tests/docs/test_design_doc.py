"""The design lives in the repository: code, tests, benchmarks and docs cite it by its path
(docs/design.md), every section they cite is a heading there, and every path it names exists."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs/design.md"
SCANNED = ("navarch", "tests", "bench", "docs", "README.md")

#: Any name of the design page, in any case ("redesign.md" is another file).
_ANY_NAME = re.compile(r"(?i)(?<![\w-])design\.md")
#: A citation of a section: the path, a comma, then the section's heading.
_CITATION = re.compile(r"docs/design\.md,\s+")
#: A line break inside a comment or docstring, so a citation may wrap.
_WRAP = re.compile(r"\n[ \t]*(?:#+[ \t]*)?")
#: Repository paths the page names in backticks (placeholders like <pool> are not paths).
_PATH = re.compile(r"`((?:navarch|tests|bench|docs|schemas|playbooks|templates)/[\w./-]*)`")


def _texts() -> Iterator[tuple[Path, str]]:
    for name in SCANNED:
        top = ROOT / name
        for path in sorted([top] if top.is_file() else top.rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            try:
                yield path, path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue


def _headings() -> list[str]:
    found: list[str] = []
    fenced = False
    for line in DESIGN.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.+)", line)):
            found.append(m.group(1).strip())
    return found


def _names_heading(cited: str, headings: list[str]) -> bool:
    cited = cited.lstrip("\"'`")
    return any(cited.startswith(h) and not cited[len(h) : len(h) + 1].isalnum() for h in headings)


def test_every_file_cites_the_design_as_docs_design_md() -> None:
    wrong = []
    for path, text in _texts():
        rel = path.relative_to(ROOT)
        for m in _ANY_NAME.finditer(text):
            before = text[max(0, m.start() - 5) : m.start()]
            exact = m.group() == DESIGN.name
            linked = rel.parts[0] == "docs" and before.endswith("](")
            if exact and (before == "docs/" or linked):
                continue
            line = text.count("\n", 0, m.start()) + 1
            wrong.append(f"{rel}:{line}: {before}{m.group()}")
    assert not wrong, f"cite the design as docs/design.md (the file in this repository): {wrong}"


def test_every_cited_section_is_a_heading_of_docs_design_md() -> None:
    headings = _headings()
    unknown = []
    for path, text in _texts():
        joined = _WRAP.sub(" ", text)
        for m in _CITATION.finditer(joined):
            cited = joined[m.end() : m.end() + 60]
            if not _names_heading(cited, headings):
                unknown.append(f"{path.relative_to(ROOT)}: {cited.split(')')[0]!r}")
    assert not unknown, (
        f"these citations name no heading of docs/design.md (its headings: {headings}): {unknown}"
    )


def test_every_path_docs_design_md_names_exists() -> None:
    missing = sorted(
        p for p in set(_PATH.findall(DESIGN.read_text())) if not (ROOT / p.rstrip("/")).exists()
    )
    assert not missing, f"docs/design.md names paths that do not exist: {missing}"
