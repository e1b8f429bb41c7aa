"""Rendered diagrams checked in beside their DOT source, and checked against it without Graphviz.

The docs show each state diagram as an SVG file rendered by Graphviz's ``dot`` from a ``.dot``
source beside it. Rendering needs ``dot`` (Debian: ``apt-get install graphviz``); building the
docs and checking the pictures does not, so a machine with only Python and pip builds them:

1. :func:`render_svg` runs ``dot -Tsvg`` and stamps the SVG with the SHA-256 of the exact DOT
   text it was rendered from.
2. :func:`svg_problems` reads an SVG and its DOT source and lists every way they disagree: the
   stamp names another source, or the drawing's nodes, arrows and arrow labels (Graphviz writes
   each as a ``<g class="node|edge">`` group with a ``<title>`` and ``<text>`` lines) differ
   from the DOT's. An empty list means the picture shows exactly the DOT, which the diagram
   tests compare with the specification's tables.
"""

from __future__ import annotations

import hashlib
import html
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

__all__ = ["GraphvizMissing", "render_svg", "stale_renderings", "svg_problems"]

_STAMP = "<!-- tent spec diagram: rendered from DOT sha256:{digest} -->"
_STAMP_RE = re.compile(r"<!-- tent spec diagram: rendered from DOT sha256:([0-9a-f]{64}) -->")
_RENDER_TIMEOUT_S = 60

# DOT statements as the generator and the hand-written sources write them: one per line.
_DOT_ID = r'(?:"(?P<{0}q>[^"]*)"|(?P<{0}>[\w.]+))'
_DOT_EDGE = re.compile(
    rf"^\s*{_DOT_ID.format('src')}\s*->\s*{_DOT_ID.format('dst')}"
    r'(?:\s*\[[^\]]*?label="(?P<label>(?:[^"\\]|\\.)*)"[^\]]*\])?\s*;\s*$'
)
_DOT_NODE = re.compile(rf"^\s*{_DOT_ID.format('node')}\s*\[[^\]]*\]\s*;\s*$")
_SVG_GROUP = re.compile(
    r'<g id="[^"]*" class="(?P<kind>node|edge)">\s*<title>(?P<title>[^<]*)</title>'
    r"(?P<body>.*?)</g>",
    re.DOTALL,
)
_SVG_TEXT = re.compile(r"<text[^>]*>(?P<text>[^<]*)</text>")


class GraphvizMissing(RuntimeError):
    """Rendering needs Graphviz's ``dot`` program, which is not on ``PATH``."""


def _digest(dot_source: str) -> str:
    return hashlib.sha256(dot_source.encode("utf-8")).hexdigest()


def render_svg(dot_source: str) -> str:
    """The SVG ``dot -Tsvg`` draws from ``dot_source``, stamped with the source's digest.

    Raises :class:`GraphvizMissing` without ``dot`` on ``PATH`` and ``RuntimeError`` when ``dot``
    refuses the source (its message included).
    """
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizMissing(
            "rendering a diagram needs Graphviz's `dot` (Debian: apt-get install graphviz); "
            "building the docs and checking the rendered SVGs do not"
        )
    result = subprocess.run(
        [exe, "-Tsvg", "-Gbgcolor=transparent"],
        input=dot_source,
        capture_output=True,
        text=True,
        check=False,
        timeout=_RENDER_TIMEOUT_S,
    )
    if result.returncode != 0:
        raise RuntimeError(f"dot failed ({result.returncode}): {result.stderr.strip()}")
    svg = result.stdout
    declaration_end = svg.index("?>") + 2 if svg.startswith("<?xml") else 0
    stamp = _STAMP.format(digest=_digest(dot_source))
    return f"{svg[:declaration_end]}\n{stamp}{svg[declaration_end:]}"


def _dot_drawing(dot_source: str) -> tuple[Counter[str], Counter[tuple[str, str, str]]]:
    """Nodes and ``(source, target, label lines)`` arrows a DOT source declares."""
    nodes: set[str] = set()
    arrows: Counter[tuple[str, str, str]] = Counter()
    for line in dot_source.splitlines():
        edge = _DOT_EDGE.match(line)
        if edge is not None:
            src = _name(edge, "src")
            dst = _name(edge, "dst")
            label = (edge.group("label") or "").replace("\\n", "\n").replace('\\"', '"')
            arrows[src, dst, "\n".join(part for part in label.split("\n") if part)] += 1
            nodes.update((src, dst))
            continue
        node = _DOT_NODE.match(line)
        if node is not None and _name(node, "node") not in ("graph", "node", "edge"):
            nodes.add(_name(node, "node"))
    return Counter(dict.fromkeys(nodes, 1)), arrows


def _name(match: re.Match[str], group: str) -> str:
    quoted = match.group(f"{group}q")
    return quoted if quoted is not None else match.group(group)


def _svg_drawing(svg: str) -> tuple[Counter[str], Counter[tuple[str, str, str]]]:
    """Nodes and arrows (with their label lines) Graphviz drew in ``svg``."""
    nodes: Counter[str] = Counter()
    arrows: Counter[tuple[str, str, str]] = Counter()
    for group in _SVG_GROUP.finditer(svg):
        title = html.unescape(group.group("title"))
        if group.group("kind") == "node":
            nodes[title] += 1
            continue
        src, _, dst = title.partition("->")
        texts = [html.unescape(t.group("text")) for t in _SVG_TEXT.finditer(group.group("body"))]
        arrows[src, dst, "\n".join(texts)] += 1
    return nodes, arrows


def svg_problems(dot_source: str, svg: str) -> list[str]:
    """Every way ``svg`` fails to be the rendering of ``dot_source``; empty when it is."""
    problems = []
    stamp = _STAMP_RE.search(svg)
    if stamp is None:
        problems.append("the SVG has no `tent spec diagram` stamp")
    elif stamp.group(1) != _digest(dot_source):
        problems.append("the SVG was rendered from another DOT source")
    dot_nodes, dot_arrows = _dot_drawing(dot_source)
    svg_nodes, svg_arrows = _svg_drawing(svg)
    for name in sorted((dot_nodes - svg_nodes).keys()):
        problems.append(f"node {name!r} is not drawn")
    for name in sorted((svg_nodes - dot_nodes).keys()):
        problems.append(f"node {name!r} is drawn but not in the source")
    for src, dst, label in sorted((dot_arrows - svg_arrows).keys()):
        problems.append(f"arrow {src} -> {dst} [{label!r}] is not drawn")
    for src, dst, label in sorted((svg_arrows - dot_arrows).keys()):
        problems.append(f"arrow {src} -> {dst} [{label!r}] is drawn but not in the source")
    return problems


def stale_renderings(docs: Path) -> dict[Path, list[str]]:
    """``.svg`` files under ``docs`` that are missing or do not show their ``.dot`` source."""
    out = {}
    for source in sorted(docs.rglob("*.dot")):
        if "_build" in source.parts:
            continue
        svg = source.with_suffix(".svg")
        if not svg.is_file():
            out[svg] = ["missing"]
            continue
        problems = svg_problems(
            source.read_text(encoding="utf-8"), svg.read_text(encoding="utf-8")
        )
        if problems:
            out[svg] = problems
    return out
