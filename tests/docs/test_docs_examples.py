"""The docs' examples are what a user can run: public imports only, every Python block a doctest.

A page that imports ``tent_credit._endpoints`` teaches users a name that may move without
notice; a Python block without ``>>>`` is never run, so it can rot unseen (the suite runs every
``docs/*.md`` doctest through ``--doctest-glob``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)

_FENCE = re.compile(r"^```(?P<lang>[^\s`]*)[^\n]*\n(?P<body>.*?)^```", re.MULTILINE | re.DOTALL)
_PRIVATE_IMPORT = re.compile(
    r"^\s*(?:>>>|\.\.\.)?\s*(?:from|import)\s+(?P<module>tent_\w+(?:\.\w+)*)", re.MULTILINE
)
_PYTHON = {"python", "py", "pycon", "python3"}


def private_imports(markdown: str) -> list[str]:
    """Every imported module path of ``markdown`` with a private (``_x``) component."""
    return [
        m.group("module")
        for m in _PRIVATE_IMPORT.finditer(markdown)
        if any(part.startswith("_") for part in m.group("module").split("."))
    ]


def python_blocks_without_doctest(markdown: str) -> list[str]:
    """The first line of every Python code block that has no ``>>>`` prompt (never run)."""
    return [
        m.group("body").splitlines()[0] if m.group("body") else "(empty)"
        for m in _FENCE.finditer(markdown)
        if m.group("lang") in _PYTHON and ">>>" not in m.group("body")
    ]


def test_the_pages_were_found() -> None:
    assert len(PAGES) > 10


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_examples_import_public_names_only(page: Path) -> None:
    assert private_imports(page.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_every_python_block_is_a_doctest(page: Path) -> None:
    assert python_blocks_without_doctest(page.read_text(encoding="utf-8")) == []


def test_the_checks_catch_what_they_are_for() -> None:
    page = (
        "```pycon\n>>> from tent_credit._endpoints import SenderEndpoint\n"
        ">>> import tent_sched._queue as q\n>>> from tent_sched import Blocked\n```\n"
        "```python\nendpoint.receive_batch(datas, now_ns)\n```\n"
        "```sh\ntent check\n```\n"
    )
    assert private_imports(page) == ["tent_credit._endpoints", "tent_sched._queue"]
    assert python_blocks_without_doctest(page) == ["endpoint.receive_batch(datas, now_ns)"]
