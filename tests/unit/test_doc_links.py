"""Every reference in the user documentation resolves inside the repository.

README.md, docs/ and deploy/README.md are read by people who have only this repository:
a relative link must name a file that exists (and a heading that exists, for an anchor),
a repository path written in the text must exist, a section sign must point at a numbered
section of the same page (or be a literature citation: "Lehmann & Romano §4.5"), and no
internal work item ("issue 11", a branch name, "third pass") may be left in them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "deploy" / "README.md"]

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# a repository path in running text (not part of an absolute path like /etc/model-monitor/x)
_PATH = re.compile(r"(?<![\w/.~-])((?:docs|deploy|monitor|tests|bench|plugins|\.ci)/[\w./*-]*\w/?)")
_SECTION = re.compile(r"§\s?(\d+(?:\.\d+)*)")
# "Howard et al. 2021 §3.5", "Brown, Cai & DasGupta 2001, §2", "Lehmann & Romano §4.5"
_CITATION = re.compile(r"[A-Z][a-z][\w-]*(?: et al\.)?,?(?: \(?\d{4}\)?,?)? $")
_WORK_ITEMS = re.compile(
    r"\bissues? #?\d+|\b(?:eng|tick|hyg|mem|replay|perf)\d\b|\b(?:second|third|fourth|fifth) pass\b"
    r"|(?-i:DESIGN\.md|DESIGN §)|\.\./shared",
    re.IGNORECASE,
)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _headings(path: Path) -> list[str]:
    out, fenced = [], False
    for line in path.read_text("utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.append(line.lstrip("#").strip())
    return out


def _prose(path: Path) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    out, fenced = [], False
    for i, line in enumerate(path.read_text("utf-8").splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append((i, line))
    return out


def _name(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_links_resolve(doc: Path) -> None:
    problems = []
    for i, line in enumerate(doc.read_text("utf-8").splitlines(), 1):
        for m in _LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target):
                continue  # http(s), mailto: outside the repository
            file, _, anchor = target.partition("#")
            path = (doc.parent / file).resolve() if file else doc
            if not path.exists():
                problems.append(f"{_name(doc)}:{i}: {target}: no such file")
            elif (
                anchor
                and path.suffix == ".md"
                and anchor not in {_slug(h) for h in _headings(path)}
            ):
                problems.append(f"{_name(doc)}:{i}: {target}: no such heading")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_repository_paths_exist(doc: Path) -> None:
    problems = []
    for i, line in _prose(doc):
        for m in _PATH.finditer(line):
            rel = m.group(1)
            if not any(REPO.glob(rel.rstrip("/"))):
                problems.append(f"{_name(doc)}:{i}: {rel} does not exist")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_section_references_resolve(doc: Path) -> None:
    numbered = {h.split(" ", 1)[0].rstrip(".") for h in _headings(doc) if h[:1].isdigit()}
    problems = []
    previous = ""
    for i, line in _prose(doc):
        for m in _SECTION.finditer(line):
            before = line[: m.start()].lstrip() or previous.rstrip() + " "  # wrapped citation
            if _CITATION.search(before):
                continue  # a section of a cited paper or book
            if m.group(1) not in numbered:
                problems.append(f"{_name(doc)}:{i}: {m.group(0)} is no section of this page")
        previous = line
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("doc", [*DOCS, REPO / "config.example.toml"], ids=_name)
def test_no_internal_work_items(doc: Path) -> None:
    found = [
        f"{_name(doc)}:{i}: {m.group(0)!r}"
        for i, line in enumerate(doc.read_text("utf-8").splitlines(), 1)
        for m in _WORK_ITEMS.finditer(line)
    ]
    assert not found, "\n".join(found)


_CODE_WORK_ITEMS = re.compile(
    r"\bissues? #?\d+|(?-i:DESIGN\.md|DESIGN §)|\.\./shared", re.IGNORECASE
)


def test_code_names_no_internal_work_items() -> None:
    """Docstrings and comments explain themselves too: they cite the project's docs or the
    literature, not a work item or a file outside the repository."""
    found = [
        f"{path.relative_to(REPO)}:{i}: {m.group(0)!r}"
        for root in ("monitor", "tests", "bench", "plugins", "deploy")
        for path in sorted((REPO / root).rglob("*"))
        if path.is_file()
        and path.suffix in (".py", ".md", ".toml", ".yml", ".yaml", ".json")
        and path.resolve() != Path(__file__).resolve()
        for i, line in enumerate(path.read_text("utf-8", errors="replace").splitlines(), 1)
        for m in _CODE_WORK_ITEMS.finditer(line)
    ]
    assert not found, "\n".join(found)


def test_deploy_text_names_files_that_exist() -> None:
    """deploy/ configs point at files in the repository (rules, dashboards, READMEs)."""
    problems = []
    for path in sorted((REPO / "deploy").rglob("*")):
        if path.suffix not in (".yml", ".yaml", ".toml", ".md") and path.name != "Dockerfile":
            continue
        for i, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            for m in re.finditer(r"(?<![\w/.-])((?:\.\./)*[\w.-]+/)*[\w.-]+\.md\b", line):
                rel = m.group(0)
                if not ((path.parent / rel).exists() or (REPO / rel).exists()):
                    problems.append(f"{_name(path)}:{i}: {rel} does not exist")
            for m in _WORK_ITEMS.finditer(line):
                problems.append(f"{_name(path)}:{i}: internal reference {m.group(0)!r}")
    assert not problems, "\n".join(problems)


def test_the_readme_links_the_design_and_it_speaks_to_users() -> None:
    readme = (REPO / "README.md").read_text("utf-8")
    assert "(docs/design.md)" in readme
    opening = (REPO / "docs" / "design.md").read_text("utf-8").split("\n## ", 1)[0]
    assert "twin" not in opening and "keep those names" not in opening, opening
