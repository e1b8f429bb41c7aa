"""Every citation in the repository resolves inside it (issue 28 item 4).

Code, tests, the spec, the docs and ``tent check --list`` cite the project's own pages by path and
anchor (``docs/semantics.md#sender-ledger``, or a relative Markdown link inside ``docs/``), and
the public documents by short name: "the RFC" with a locator (*rule 4*, *acceptance 2*, …),
``Deadline Scheduling "<section>"``, and Mooncake issues by number. ``docs/sources.md`` resolves
the short names to titles and URLs and lists the numbered items and section titles a locator may
name. This walks every tracked text file and fails on a citation that names a missing file, a
missing anchor, a locator past the end of its list, an unlisted section or issue number, or one of
the internal notes the project was built from, which are not part of the repository.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from tent_models.cli import main
from tent_models.sources import CREDIT_RFC, DEADLINE_SCHEDULING

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "docs" / "sources.md"

_ANCHOR = re.compile(r"^\(([\w-]+)\)=[ \t]*$", re.MULTILINE)
# A path citation: docs/<file>.md, optionally #anchor, not part of a longer path or URL.
_PATH = re.compile(r"(?<![\w./-])(docs/[\w./-]*?\.md)(?:#([\w-]+))?")
# A Markdown link to a local page: [text](page.md#anchor) or [text](#anchor).
_LINK = re.compile(r"\]\((?![a-z]+:)([^)\s#]*?\.md)?(?:#([\w-]+))?\)")
# Names of the internal notes this project was designed from; they are not in the repository.
_INTERNAL = re.compile(
    r"\bSEMANTICS\b|\bDESIGN\b|\bTRANSPORT\.md\b|\bTRANSPORT (?:rules? \d|\")|\bSTYLE:"
    r"|/work/shared|\bseeds/|\bseed `0\d\d`|\b[Ss]eed(?:'s)? \""
)
_RFC_LOCATOR = re.compile(
    r"\bRFC(?:'s)? (state machine rule|concurrency rules?|rule|acceptance|criterion|claim|goal"
    r"|principle|question)s? (\d+)(?:\s*[–-]\s*(\d+))?"
)
# Which numbered list of docs/sources.md a locator names: (anchor, number of items).
_RFC_LISTS = {
    "goal": ("rfc-goals", 6),
    "claim": ("rfc-claims", 8),
    "principle": ("rfc-principles", 4),
    "rule": ("rfc-state-machine-rules", 5),
    "state machine rule": ("rfc-state-machine-rules", 5),
    "concurrency rule": ("rfc-concurrency-rules", 6),
    "concurrency rules": ("rfc-concurrency-rules", 6),
    "acceptance": ("rfc-acceptance", 8),
    "criterion": ("rfc-acceptance", 8),
    "question": ("rfc-open-questions", 5),
}
_NUMBERED = re.compile(r"\b(?:RFC|Mooncake|PR|reference) #(\d+)")
_SCHEDULING_SECTION = re.compile(r"\bDeadline Scheduling(?:'s)?:? \"([^\"]+)\"")
# What a path citation of the repository may name besides docs pages (none today).
_BINARY = {".png", ".svg", ".cbor", ".bin", ".gz", ".whl", ".jpg", ".ico", ".pyc"}


def tracked_files() -> list[Path]:
    """The repository's text files: git's list when this is a checkout, else a walk of the tree."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout.decode()
        paths = [ROOT / p for p in out.split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", "_build", "__pycache__", ".hypothesis"}
        paths = [p for p in ROOT.rglob("*") if p.is_file() and not skip & set(p.parts)]
    return [p for p in paths if p.is_file() and p.suffix not in _BINARY]


def anchors(page: Path) -> set[str]:
    return set(_ANCHOR.findall(page.read_text("utf-8")))


def _sources_text() -> str:
    return SOURCES.read_text("utf-8")


def _section(text: str, anchor: str) -> str:
    """The text of ``docs/sources.md`` from the target ``anchor`` to the next target."""
    start = text.index(f"({anchor})=")
    following = _ANCHOR.search(text, start + 1 + len(anchor) + 3)
    return text[start : following.start() if following else len(text)]


def _titles(text: str, anchor: str) -> set[str]:
    """The section titles a source's paragraph "Its sections, by title (…): a; b; c." lists."""
    paragraph = _section(text, anchor).split("Its sections, by title", 1)[1].split("\n\n", 1)[0]
    listed = paragraph.split("): ", 1)[1]
    listed = re.split(r"\.(?:\s+[A-Z]|\s*$)", " ".join(listed.split()), maxsplit=1)[0]
    return {t.strip() for t in listed.split(";")}


def _issue_numbers(text: str) -> set[str]:
    return set(re.findall(r"^\| #(\d+) \|", _section(text, "source-other"), re.MULTILINE))


def citation_errors(text: str, where: Path, relative_to: Path | None = None) -> Iterator[str]:
    """Every unresolvable citation in ``text``; Markdown links resolve against ``relative_to``."""
    sources = _sources_text()
    for m in _INTERNAL.finditer(text):
        yield f"cites an internal note not in the repository: {m.group(0)!r}"
    for m in _PATH.finditer(text):
        page = ROOT / m.group(1)
        if not page.is_file():
            yield f"{m.group(0)}: no such file"
        elif m.group(2) and m.group(2) not in anchors(page):
            yield f"{m.group(0)}: no target ({m.group(2)})= in {m.group(1)}"
    if relative_to is not None:
        for m in _LINK.finditer(text):
            page = (relative_to / m.group(1)).resolve() if m.group(1) else where
            if not page.is_file():
                yield f"link {m.group(0)}: no such file"
            elif m.group(2) and m.group(2) not in anchors(page):
                yield f"link {m.group(0)}: no target ({m.group(2)})= in {page.name}"
    for m in _RFC_LOCATOR.finditer(text):
        anchor, count = _RFC_LISTS[m.group(1)]
        numbers = {int(m.group(2)), int(m.group(3) or m.group(2))}
        if not all(1 <= n <= count for n in numbers):
            yield f"{m.group(0)}: the RFC's list ({anchor}) has {count} items"
    numbered = _issue_numbers(sources)
    for m in _NUMBERED.finditer(text):
        if m.group(1) not in numbered:
            yield f"{m.group(0)}: not listed in docs/sources.md#source-other"
    titles = _titles(sources, "source-deadline-scheduling") | {"Three Requests", "Three Slices"}
    for m in _SCHEDULING_SECTION.finditer(text):
        for part in " ".join(m.group(1).split()).split(" → "):
            if part not in titles and not part.startswith("Why per-completion timing"):
                yield f"{m.group(0)}: {part!r} is not a section of Deadline Scheduling"


def test_every_citation_in_the_repository_resolves() -> None:
    broken = {}
    for path in tracked_files():
        if path == Path(__file__).resolve():
            continue  # this file names the patterns it forbids
        try:
            text = path.read_text("utf-8")
        except UnicodeDecodeError:
            continue
        base = path.parent if path.suffix == ".md" else None
        errors = list(citation_errors(text, path, base))
        if errors:
            broken[str(path.relative_to(ROOT))] = errors
    assert broken == {}


def test_tent_check_list_cites_resolve_and_name_the_sources() -> None:
    result = CliRunner().invoke(main, ["check", "--list"], terminal_width=400)
    assert result.exit_code == 0, result.output
    assert "docs/semantics.md#" in result.output and "RFC" in result.output
    assert list(citation_errors(result.output, ROOT / "tent check --list")) == []
    # The legend under the table names the public documents by title and URL.
    assert f"RFC: {CREDIT_RFC.title}, {CREDIT_RFC.url}" in result.output


def test_the_sources_page_agrees_with_the_cli_legend() -> None:
    text = " ".join(_sources_text().split())
    for source in (CREDIT_RFC, DEADLINE_SCHEDULING):
        assert source.url in text
    assert "TENT Receiver-Advertised Credits and Upstream Backpressure" in text
    assert "TENT Deadline Scheduling" in text
    for kind, (anchor, count) in _RFC_LISTS.items():  # each list really has that many items
        section = " ".join(_section(_sources_text(), anchor).split())
        assert f"; {count} " in section or f": {count} " in section, kind
        assert f"; {count + 1} " not in section, kind


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("see docs/semantics.md#no-such-anchor", "no target"),
        ("see docs/nothing.md", "no such file"),
        ("(SEMANTICS §2)", "internal note"),
        ('(TRANSPORT "Leases")', "internal note"),
        ("DESIGN principle 5", "internal note"),
        ('the seed\'s "Promotion"', "internal note"),
        ("RFC rule 6", "has 5 items"),
        ("RFC acceptance 9", "has 8 items"),
        ("RFC #1234", "not listed"),
        ('Deadline Scheduling "Three Owners"', "not a section"),
    ],
)
def test_a_broken_citation_is_reported(text: str, error: str) -> None:
    errors = list(citation_errors(text, ROOT / "x.py"))
    assert errors and error in errors[0], errors


def test_a_broken_relative_link_is_reported() -> None:
    page = ROOT / "docs" / "index.md"
    bad = "[x](semantics.md#nope) [y](nowhere.md) [z](#also-nope)"
    errors = list(citation_errors(bad, page, page.parent))
    assert len(errors) == 3, errors
    good = "[x](semantics.md#sender-ledger) [y](design.md) [v](#verification-pipeline)"
    assert list(citation_errors(good, page, page.parent)) == []
