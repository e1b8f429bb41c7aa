"""The documentation builds without a single warning, and its negotiation diagram is the table.

The build runs Sphinx in a subprocess with ``-W`` (warnings are errors): a broken cross-reference,
a page left out of every toctree, a code block that does not lex, or a missing include fails it.
The doctests of ``docs/*.md`` run separately (``--doctest-glob=*.md`` in pyproject).

The diagram test parses the ``stateDiagram-v2`` block of ``docs/credit_protocol.md`` and compares
its edges with :data:`tent_credit._negotiation.TRANSITIONS`, both ways, so the page cannot go
stale when the table changes.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tent_credit._negotiation import TRANSITIONS, NegotiationState

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CREDIT_PAGE = DOCS / "credit_protocol.md"

_FENCE = re.compile(r"^```mermaid[ \t]*\n(?P<body>.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_EDGE = re.compile(r"^\s*(?P<src>\[\*\]|\w+)\s*-->\s*(?P<dst>\w+)\s*(?::\s*(?P<label>\w+))?\s*$")

Edge = tuple[str, str, str]


def state_diagram_edges(markdown: str) -> set[Edge]:
    """The labelled ``(source, event, target)`` edges of the page's one ``stateDiagram-v2``.

    The start arrow (``[*] --> X``) carries no event and is left out. Any other line of the
    diagram that is not an edge with an event label is an error: the diagram must stay a plain
    rendering of the table.
    """
    diagrams = [
        m.group("body")
        for m in _FENCE.finditer(markdown)
        if m.group("body").lstrip().startswith("stateDiagram-v2")
    ]
    assert len(diagrams) == 1, f"expected one stateDiagram-v2 block, found {len(diagrams)}"
    edges: set[Edge] = set()
    for line in diagrams[0].splitlines()[1:]:
        if not line.strip():
            continue
        match = _EDGE.match(line)
        assert match is not None, f"not an edge line: {line!r}"
        if match.group("src") == "[*]":
            continue
        label = match.group("label")
        assert label is not None, f"edge without an event label: {line!r}"
        edges.add((match.group("src"), label, match.group("dst")))
    return edges


def table_edges() -> set[Edge]:
    return {(state.name, event.name, nxt.name) for (state, event), nxt in TRANSITIONS.items()}


def test_negotiation_diagram_has_exactly_the_edges_of_the_transition_table() -> None:
    drawn = state_diagram_edges(CREDIT_PAGE.read_text(encoding="utf-8"))
    expected = table_edges()
    assert expected - drawn == set(), "edges of TRANSITIONS missing from the diagram"
    assert drawn - expected == set(), "diagram edges that TRANSITIONS does not have"


def test_negotiation_diagram_starts_in_disabled_and_names_every_state() -> None:
    text = CREDIT_PAGE.read_text(encoding="utf-8")
    assert re.search(r"^\s*\[\*\]\s*-->\s*DISABLED\s*$", text, re.MULTILINE)
    drawn_states = {s for src, _, dst in state_diagram_edges(text) for s in (src, dst)}
    assert drawn_states == {state.name for state in NegotiationState}


def test_diagram_parser_reports_a_dropped_edge() -> None:
    # The comparison above is only as good as the parser: removing one edge line must show.
    text = CREDIT_PAGE.read_text(encoding="utf-8")
    line = "    FENCING --> ACTIVE : FENCE_DRAINED\n"
    assert line in text
    drawn = state_diagram_edges(text.replace(line, ""))
    assert table_edges() - drawn == {("FENCING", "FENCE_DRAINED", "ACTIVE")}


def test_docs_build_as_html_with_warnings_as_errors(tmp_path: Path) -> None:
    out = tmp_path / "html"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-E",
            "-q",
            "-b",
            "html",
            "-d",
            str(tmp_path / "doctrees"),
            str(DOCS),
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    # Every page became HTML (a page outside every toctree is already a warning above).
    for page in DOCS.rglob("*.md"):
        if "_build" in page.parts:
            continue
        built = out / page.relative_to(DOCS).with_suffix(".html")
        assert built.is_file(), f"{page.relative_to(DOCS)} was not built"
    # The negotiation diagram reaches the HTML as a mermaid block, not as a code listing.
    html = (out / "credit_protocol.html").read_text(encoding="utf-8")
    assert 'class="mermaid"' in html
    assert "FENCING --&gt; ACTIVE : FENCE_DRAINED" in html
