"""The documentation builds without a single warning, and its negotiation diagram is the table.

The build runs Sphinx in a subprocess with ``-W`` (warnings are errors): a broken cross-reference,
a page left out of every toctree, a code block that does not lex, or a missing include fails it.
The doctests of ``docs/*.md`` run separately (``--doctest-glob=*.md`` in pyproject).

The build runs with a ``PATH`` that holds no program at all (Sphinx runs from this interpreter's
absolute path), so a page that needs Graphviz's ``dot`` or any other system tool fails here: the
docs build on a machine with only Python and pip.

The diagram test parses ``docs/credit_negotiation.dot`` (the source of the negotiation picture on
``docs/credit_protocol.md``) and compares its edges with
:data:`tent_credit._negotiation.TRANSITIONS`, both ways, and checks that the checked-in SVG shows
exactly that source, so the page cannot go stale when the table changes. The built HTML is
checked for what an air-gapped reader needs: nothing loaded from outside (no external URL
anywhere, except the hyperlinks that cite the public documents of ``docs/sources.md`` by URL,
which a reader follows and a browser never fetches), and every diagram rendered to SVG (no DOT
or mermaid source left as text).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tent_models.rendering import stale_renderings, svg_problems

from tent_credit._negotiation import TRANSITIONS, NegotiationState

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CREDIT_DOT = DOCS / "credit_negotiation.dot"
_EDGE = re.compile(
    r'^\s*(?P<src>\w+)\s*->\s*(?P<dst>\w+)\s*(?:\[label="(?P<label>\w+(?:\\n\w+)*)"\])?;$'
)
# The block's header: the directive's options, the graph and its default styles, the start point.
_HEADER = re.compile(r"^\s*(digraph \w+ \{|\}|(graph|node|edge|start) \[.*\];)$")

Edge = tuple[str, str, str]


def state_diagram_edges(dot_source: str) -> set[Edge]:
    """The labelled ``(source, event, target)`` edges of a DOT state diagram.

    The start arrow (``start -> X``) carries no event and is left out. Any other line of the
    diagram that is neither the header nor an edge with an event label is an error: the diagram
    must stay a plain rendering of the table.
    """
    edges: set[Edge] = set()
    for line in dot_source.splitlines():
        if not line.strip() or _HEADER.match(line):
            continue
        match = _EDGE.match(line)
        assert match is not None, f"not an edge line: {line!r}"
        if match.group("src") == "start":
            continue
        label = match.group("label")
        assert label is not None, f"edge without an event label: {line!r}"
        for event in label.split("\\n"):  # parallel edges share an arrow, one event a line
            edges.add((match.group("src"), event, match.group("dst")))
    return edges


def table_edges() -> set[Edge]:
    return {(state.name, event.name, nxt.name) for (state, event), nxt in TRANSITIONS.items()}


def test_negotiation_diagram_has_exactly_the_edges_of_the_transition_table() -> None:
    drawn = state_diagram_edges(CREDIT_DOT.read_text(encoding="utf-8"))
    expected = table_edges()
    assert expected - drawn == set(), "edges of TRANSITIONS missing from the diagram"
    assert drawn - expected == set(), "diagram edges that TRANSITIONS does not have"


def test_negotiation_diagram_starts_in_disabled_and_names_every_state() -> None:
    text = CREDIT_DOT.read_text(encoding="utf-8")
    assert re.search(r"^\s*start -> DISABLED;$", text, re.MULTILINE)
    drawn_states = {s for src, _, dst in state_diagram_edges(text) for s in (src, dst)}
    assert drawn_states == {state.name for state in NegotiationState}


def test_the_negotiation_picture_shows_its_dot_source() -> None:
    svg = CREDIT_DOT.with_suffix(".svg").read_text(encoding="utf-8")
    assert svg_problems(CREDIT_DOT.read_text(encoding="utf-8"), svg) == []
    assert stale_renderings(DOCS) == {}, "stale SVG: run `tent spec diagram`"


def test_diagram_parser_reports_a_dropped_edge() -> None:
    # The comparison above is only as good as the parser: removing one edge line must show.
    text = CREDIT_DOT.read_text(encoding="utf-8")
    line = '    FENCING -> ACTIVE [label="FENCE_DRAINED"];\n'
    assert line in text
    drawn = state_diagram_edges(text.replace(line, ""))
    assert table_edges() - drawn == {("FENCING", "FENCE_DRAINED", "ACTIVE")}


@pytest.fixture(scope="module")
def html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The docs built once as HTML with ``-W`` (warnings are errors)."""
    tmp = tmp_path_factory.mktemp("docs")
    out = tmp / "html"
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
            str(tmp / "doctrees"),
            str(DOCS),
            str(out),
        ],
        cwd=ROOT,
        env={**os.environ, "PATH": str(tmp / "no-programs")},  # no dot, no system tool at all
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return out


def test_docs_build_as_html_with_warnings_as_errors(html: Path) -> None:
    # Every page became HTML (a page outside every toctree is already a warning above).
    for page in DOCS.rglob("*.md"):
        if "_build" in page.parts:
            continue
        built = html / page.relative_to(DOCS).with_suffix(".html")
        assert built.is_file(), f"{page.relative_to(DOCS)} was not built"


# An XML namespace or a DOCTYPE's DTD names a vocabulary; no browser fetches it.
_NAMESPACE = re.compile(r'xmlns(?::\w+)?="http://www\.w3\.org/[^"]*"|<!DOCTYPE[^>]*>')
_URL = re.compile(r"(?:https?:)?//[\w.-]+\.[a-z]{2,}[^\s\"'<>)]*", re.IGNORECASE)
_CSS_REMOTE = re.compile(r"(?:url\(\s*['\"]?|@import\s+['\"]?)(?:https?:)?//", re.IGNORECASE)


# The public sources a page cites by URL: plain hyperlinks to exactly these, nothing else.
_CITED = re.compile(
    r'<a class="reference external" href="(?:https://github\.com/kvcache-ai/Mooncake/issues/2849'
    r'|https://kvcache-ai\.github\.io/Mooncake/design/tent/deadline-scheduling\.html'
    r'|https://github\.com/kvcache-ai/Mooncake)">[^<]*</a>'
)


def external_urls(text: str) -> list[str]:
    """Every external URL of an HTML or SVG text (XML namespaces and source citations aside)."""
    return _URL.findall(_CITED.sub("", _NAMESPACE.sub("", text)))


def test_the_built_html_names_no_external_url(html: Path) -> None:
    pages = [*html.rglob("*.html"), *html.rglob("*.svg")]
    assert len(pages) > 20
    found = {str(p.relative_to(html)): external_urls(p.read_text("utf-8")) for p in pages}
    assert {page: urls for page, urls in found.items() if urls} == {}
    for sheet in html.rglob("*.css"):  # stylesheets load nothing remote either
        assert not _CSS_REMOTE.search(sheet.read_text("utf-8")), sheet.name


def test_the_footer_names_who_holds_the_copyright(html: Path) -> None:
    footer = (html / "index.html").read_text("utf-8").split('class="footer"', 1)[1]
    holder = r"&#169;\s*TENT protocol team, licensed under Apache-2\.0"
    assert re.search(holder, footer), footer[:300]


def test_the_url_check_allows_only_a_link_to_a_cited_source() -> None:
    rfc = "https://github.com/kvcache-ai/Mooncake/issues/2849"
    assert external_urls(f'<a class="reference external" href="{rfc}">{rfc}</a>') == []
    assert external_urls(f'<script src="{rfc}"></script>') == [rfc]  # a load, not a citation
    other = "https://github.com/kvcache-ai/Mooncake/issues/1"
    assert external_urls(f'<a class="reference external" href="{other}">x</a>') == [other]


def test_the_url_check_sees_a_cdn_script() -> None:
    page = '<svg xmlns="http://www.w3.org/2000/svg"/><script src="https://cdn.jsdelivr.net/x.js">'
    assert external_urls(page) == ["https://cdn.jsdelivr.net/x.js"]
    assert external_urls('<link href="//fonts.googleapis.com/css?family=A">') == [
        "//fonts.googleapis.com/css?family=A"
    ]


# DOT or mermaid source that reached the page as text instead of a rendered image.
_RAW_DIAGRAM = re.compile(
    r'digraph\s+"?\w+"?\s*\{|stateDiagram|class="mermaid"|"?\w+"? -&gt; "?\w+"? \[label='
)


def test_the_raw_source_check_sees_unrendered_dot_and_mermaid() -> None:
    assert _RAW_DIAGRAM.search('<pre>digraph "negotiation" {</pre>')
    assert _RAW_DIAGRAM.search('<pre>    "A" -&gt; "B" [label="x"];</pre>')
    assert _RAW_DIAGRAM.search('<div class="mermaid">stateDiagram-v2</div>')
    assert not _RAW_DIAGRAM.search("<p>ACTIVE --&gt; STALE in prose</p>")


def test_every_diagram_is_rendered_svg_and_no_source_is_left_as_text(html: Path) -> None:
    pages = {
        "credit_protocol.html": {"FENCING", "FENCE_DRAINED"},
        "diagrams/negotiation.html": {"FENCING", "NEGOTIATING"},
        "diagrams/owner_lifecycle.html": {"QUEUED", "DISPATCHING", "TERMINAL"},
    }
    for name, labels in pages.items():
        text = (html / name).read_text("utf-8")
        assert not _RAW_DIAGRAM.search(text), f"{name} shows diagram source as text"
        (image,) = re.findall(r'<img alt="[^"]*" src="([^"]+\.svg)"', text)
        svg = (html / name).parent / image
        drawn = set(re.findall(r"<text[^>]*>([^<]+)</text>", svg.read_text("utf-8")))
        assert labels <= drawn, (name, labels - drawn)
    for page in html.rglob("*.html"):
        assert not _RAW_DIAGRAM.search(page.read_text("utf-8")), page.name


def test_the_api_reference_documents_every_public_name(html: Path) -> None:
    import tent_models

    import tent_credit
    import tent_sched

    text = (html / "api.html").read_text("utf-8")
    import tent_transport.devices
    import tent_transport.engine
    import tent_transport.errors

    transport = (tent_transport.engine, tent_transport.devices, tent_transport.errors)
    for package in (tent_credit, tent_sched, tent_models, *transport):
        for name in package.__all__:
            assert f'id="{package.__name__}.{name}"' in text, f"{package.__name__}.{name}"
    assert 'id="tent_credit._' not in text and 'id="tent_sched._' not in text


def test_the_api_reference_documents_what_a_class_has_from_its_private_mixins(html: Path) -> None:
    # Each is one class over private mixins split by responsibility: autodoc leaves inherited
    # members out unless docs/conf.py names the other bases to leave out instead.
    from tent_transport.dispatch import DispatchCore

    import tent_credit
    import tent_sched

    text = (html / "api.html").read_text("utf-8")
    for cls in (tent_credit.SenderEndpoint, tent_credit.DispatchGate, tent_sched.AdmissionQueue):
        package = cls.__module__.partition(".")[0]
        names = {n for base in cls.__mro__[:-1] for n in vars(base) if not n.startswith("_")}
        assert len(names) >= 15
        for name in sorted(names):
            assert f'id="{package}.{cls.__name__}.{name}"' in text, f"{cls.__name__}.{name}"
    names = {n for base in DispatchCore.__mro__[:-1] for n in vars(base) if not n.startswith("_")}
    assert names - set(vars(DispatchCore)) >= {"submit", "cancel", "fail_peer"}  # from mixins
    for name in sorted(names):
        assert f'id="tent_transport.dispatch.DispatchCore.{name}"' in text, name
    assert 'id="tent_transport.dispatch._' not in text


def test_the_api_reference_has_no_attrs_noise(html: Path) -> None:
    text = (html / "api.html").read_text("utf-8")
    assert "Method generated by attrs" not in text
    assert "NOTHING" not in text
    assert "&lt;factory&gt;" in text  # a factory default still shows that there is one
