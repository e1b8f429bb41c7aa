"""Draw a :class:`~tent_models.report.Chart` as one self-contained SVG (no script, no font or
file it loads), laid out in Python with a monospace font so text widths are known.

Layout, top to bottom: a header box per lifeline; the initial state (row 0, every field in its
tooltip); one row per step, its arrow or box on the left and its diff-only state change in the
right-hand column; the closing box (the violated invariant and its values, the witness reached,
or the refused event). Every step is a ``<g class="step <kind>">`` with a ``<title>`` (the
browser's tooltip: the full action and every change), and, with ``links``, a link to the
step's row in the HTML report's table. The output is deterministic: the docs check it in.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from html import escape

from tent_models.report._chart import ACCEPTED, WITNESS, Chart, Row
from tent_models.report._diff import shorten
from tent_models.report._lifelines import DUPLICATE, LOCAL, LOSE

__all__ = ["DOCS_DIFF_CHARS", "svg"]

FONT_PX = 12
CHAR_PX = 7.3  # advance of one monospace character at 12 px (DejaVu Sans Mono: 7.22)
LINE_PX = 15
LEFT_PX = 44  # the step-number column
COL_MIN_PX = 150
COL_MAX_PX = 240
DIFF_CHARS = 64  # width of the state-change column, in characters (the report's)
DOCS_DIFF_CHARS = 40  # ... in the docs' charts, which a page scales to its text width
MAX_DIFF_LINES = 6  # changes shown per step; the rest are counted (all are in the tooltip)
WRAP_LINES = 3  # lines one change may take before it is cut

_CSS = """
text { font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace; font-size: 12px; fill: #212529;
       white-space: pre; }
.head rect { fill: #e7f5ff; stroke: #1c7ed6; }
.head text { font-weight: bold; text-anchor: middle; }
.life { stroke: #adb5bd; stroke-dasharray: 4 4; }
.hit { fill: transparent; }
.step:hover .hit, .init:hover .hit { fill: #fff3bf; }
.num { text-anchor: end; fill: #868e96; }
.arrow line { stroke: #212529; stroke-width: 1.4; }
.label { text-anchor: middle; }
.box .frame { fill: #f8f9fa; stroke: #495057; }
.duplicate line { stroke: #e8590c; stroke-dasharray: 6 3; }
.lose line { stroke: #c92a2a; stroke-dasharray: 6 3; }
.lose .cross { fill: #c92a2a; font-weight: bold; text-anchor: middle; }
.field { font-weight: bold; }
.diff, .more { fill: #495057; }
.note { fill: #c92a2a; }
.marked .hit { fill: var(--mark-bg); stroke: var(--mark); }
.marked line { stroke: var(--mark); stroke-width: 2.4; }
.marked .frame { stroke: var(--mark); stroke-width: 2.4; fill: var(--mark-bg); }
.marked .label, .marked .boxtext { fill: var(--mark); font-weight: bold; }
.closing rect { fill: var(--mark-bg); stroke: var(--mark); stroke-width: 2; }
.closing .heading { fill: var(--mark); font-weight: bold; }
"""

_BAD = ("#c92a2a", "#fff5f5")
_GOOD = ("#2b8a3e", "#ebfbee")


def _x_text(text: str) -> str:
    return escape(text, quote=True)


class _Layout:
    """Positions of the lifelines and columns of one chart."""

    def __init__(self, chart: Chart, diff_chars: int) -> None:
        self.nodes = chart.lifelines
        self.diff_chars = diff_chars
        wanted = float(COL_MIN_PX)
        for node in self.nodes:
            wanted = max(wanted, len(node) * CHAR_PX + 28)
        for row in chart.rows:
            span = self.span(row)
            need = len(row.label) * CHAR_PX + 36  # room for the arrowhead
            wanted = max(wanted, need / (span if span else 1.5))
        self.col = min(COL_MAX_PX, round(wanted))
        self.diff_x = LEFT_PX + len(self.nodes) * self.col + 14
        self.width = round(self.diff_x + diff_chars * CHAR_PX + 10)

    def x(self, node: str) -> float:
        return LEFT_PX + self.col * (self.nodes.index(node) + 0.5)

    def span(self, row: Row) -> int:
        p = row.placement
        if p.kind == LOCAL or p.target is None:
            return 0
        return abs(self.nodes.index(p.target) - self.nodes.index(p.source))


def _row_lines(row: Row, unchanged: str, width: int) -> list[tuple[str, str]]:
    """``(css class, text)`` lines of a step's right-hand column: changes, then notes."""
    lines: list[tuple[str, str]] = []
    for field, old, new in row.changes[:MAX_DIFF_LINES]:
        arrow = f"{old} → {new}" if old else new
        parts = textwrap.wrap(f"{field}: {arrow}", width, subsequent_indent="    ")
        if len(parts) > WRAP_LINES:  # the tooltip and the report's table hold all of it
            parts = [*parts[: WRAP_LINES - 1], shorten(parts[WRAP_LINES - 1] + " …", width)]
        lines.append(("diff", parts[0]))
        lines.extend(("more", part) for part in parts[1:])
    hidden = len(row.changes) - MAX_DIFF_LINES
    if hidden > 0:
        lines.append(("diff", f"… {hidden} more change(s) (in the tooltip)"))
    if not row.changes:
        lines.append(("diff", unchanged))
    for note in row.notes:
        lines.extend(("note", part) for part in textwrap.wrap(note, width) or [""])
    return lines


def _tooltip(row: Row) -> str:
    lines = [f"{row.index} {row.action}"]
    lines.extend(
        f"{field}: {old} -> {new}" if old else f"{field}: {new}" for field, old, new in row.changes
    )
    lines.extend(row.notes)
    return "\n".join(lines)


def _diff_text(x: float, y: float, css: str, text: str, width: int) -> str:
    shown = shorten(text, width)
    if css == "diff" and (": " in shown or shown.endswith(":")):
        field, _colon, rest = shown.partition(": ") if ": " in shown else (shown[:-1], ":", "")
        return (
            f'<text x="{x:.1f}" y="{y:.1f}" class="diff"><tspan class="field">'
            f"{_x_text(field)}</tspan>: {_x_text(rest)}</text>"
        )
    return f'<text x="{x:.1f}" y="{y:.1f}" class="{css}">{_x_text(shown)}</text>'


def _step(
    chart: Chart, layout: _Layout, row: Row, *, top: float, height: float, links: bool
) -> Iterator[str]:
    p = row.placement
    kind = "box" if p.kind == LOCAL else f"arrow {p.kind}"
    marked = " marked" if row.marked else ""
    target = p.target or ""
    yield (
        f'<g class="step {kind}{marked}" id="{chart.ident}-svg-{row.index}" '
        f'data-step="{row.index}" data-kind="{p.kind}" data-source="{_x_text(p.source)}" '
        f'data-target="{_x_text(target)}">'
    )
    yield f"<title>{_x_text(_tooltip(row))}</title>"
    if links:
        yield f'<a href="#{chart.ident}-step-{row.index}">'
    yield (f'<rect class="hit" x="0" y="{top:.1f}" width="{layout.width}" height="{height:.1f}"/>')
    yield f'<text class="num" x="{LEFT_PX - 8}" y="{top + 18:.1f}">{row.index}</text>'
    mid = top + 22
    if p.kind == LOCAL or p.target is None or p.target == p.source:
        x = layout.x(p.source)
        text = shorten(row.label, max(4, int(layout.col * 1.5 / CHAR_PX) - 2))
        w = len(text) * CHAR_PX + 14
        left = min(max(x - w / 2, LEFT_PX), layout.diff_x - 10 - w)
        yield (
            f'<rect class="frame" x="{left:.1f}" y="{top + 7:.1f}" width="{w:.1f}" '
            'height="20" rx="3"/>'
        )
        yield (
            f'<text class="boxtext" x="{left + w / 2:.1f}" y="{top + 21:.1f}" '
            f'text-anchor="middle">{_x_text(text)}</text>'
        )
    else:
        x1, x2 = layout.x(p.source), layout.x(p.target)
        direction = 1 if x2 > x1 else -1
        start, end = x1 + 3 * direction, x2 - 3 * direction
        marker = "mark" if row.marked else {DUPLICATE: "dup", LOSE: "lose"}.get(p.kind, "plain")
        if p.kind == LOSE:
            end = x1 + (x2 - x1) * 0.62
            yield (f'<line x1="{start:.1f}" y1="{mid:.1f}" x2="{end:.1f}" y2="{mid:.1f}"/>')
            yield f'<text class="cross" x="{end:.1f}" y="{mid + 4:.1f}">✕</text>'
        else:
            yield (
                f'<line x1="{start:.1f}" y1="{mid:.1f}" x2="{end:.1f}" y2="{mid:.1f}" '
                f'marker-end="url(#{chart.ident}-{marker})"/>'
            )
        room = max(4, int((abs(x2 - x1) - 10) / CHAR_PX))
        yield (
            f'<text class="label" x="{(x1 + x2) / 2:.1f}" y="{mid - 5:.1f}">'
            f"{_x_text(shorten(row.label, room))}</text>"
        )
    for i, (css, text) in enumerate(_row_lines(row, chart.unchanged, layout.diff_chars)):
        yield _diff_text(layout.diff_x, top + 16 + i * LINE_PX, css, text, layout.diff_chars)
    if links:
        yield "</a>"
    yield "</g>"


def _markers(ident: str, colour: str) -> Iterator[str]:
    for name, fill in (
        ("plain", "#212529"),
        ("dup", "#e8590c"),
        ("lose", "#c92a2a"),
        ("mark", colour),
    ):
        yield (
            f'<marker id="{ident}-{name}" viewBox="0 0 10 10" refX="9" refY="5" '
            f'markerWidth="9" markerHeight="9" markerUnits="userSpaceOnUse" '
            f'orient="auto-start-reverse">'
            f'<path d="M0,0 L10,5 L0,10 z" fill="{fill}"/></marker>'
        )


def svg(chart: Chart, *, links: bool = False, diff_chars: int = DIFF_CHARS) -> str:
    """The chart as an SVG document (a string). With ``links`` every step links to the
    ``#<ident>-step-<n>`` row of the report page it is embedded in; ``diff_chars`` is the width
    of the state-change column in characters (longer changes wrap, then are cut; the tooltip
    keeps them whole). Raises ``ValueError`` when it is below 20."""
    if diff_chars < 20:
        raise ValueError(f"diff_chars must be at least 20, got {diff_chars}")
    layout = _Layout(chart, diff_chars)
    colour, background = _GOOD if chart.closing.kind in (WITNESS, ACCEPTED) else _BAD
    body: list[str] = []
    # the header: one box per lifeline
    body.append('<g class="head">')
    for node in layout.nodes:
        x = layout.x(node)
        w = layout.col - 16
        body.append(f'<rect x="{x - w / 2:.1f}" y="6" width="{w:.1f}" height="24" rx="4"/>')
        body.append(f'<text x="{x:.1f}" y="22">{_x_text(shorten(node, int(w / CHAR_PX)))}</text>')
    body.append("</g>")
    top = 38.0
    # row 0: the initial state, every field in the tooltip
    tip = "\n".join(["initial state", *(f"{k}: {v}" for k, v in chart.initial)])
    body.append(f'<g class="init" id="{chart.ident}-svg-init"><title>{_x_text(tip)}</title>')
    if links:
        body.append(f'<a href="#{chart.ident}-initial">')
    body.append(f'<rect class="hit" x="0" y="{top:.1f}" width="{layout.width}" height="24"/>')
    body.append(f'<text x="{LEFT_PX + 4}" y="{top + 16:.1f}">initial state</text>')
    summary = (
        f"{len(chart.initial)} field(s); a step shows its changes"
        if chart.initial
        else "the spec's initial state"
    )
    body.append(
        f'<text class="diff" x="{layout.diff_x:.1f}" y="{top + 16:.1f}">{_x_text(summary)}</text>'
    )
    if links:
        body.append("</a>")
    body.append("</g>")
    top += 24
    for row in chart.rows:
        lines_of_row = len(_row_lines(row, chart.unchanged, layout.diff_chars))
        height = max(34.0, 12 + LINE_PX * lines_of_row)
        body.extend(_step(chart, layout, row, top=top, height=height, links=links))
        top += height
    lives = "".join(
        f'<line class="life" x1="{layout.x(n):.1f}" y1="30" x2="{layout.x(n):.1f}" y2="{top:.1f}"/>'
        for n in layout.nodes
    )
    # the closing box: what the trace shows
    wrap = int((layout.width - 28) / CHAR_PX)
    lines = [
        part
        for line in (*chart.closing.lines, *((chart.note,) if chart.note else ()))
        for part in textwrap.wrap(line, wrap) or [""]
    ]
    box_h = 16 + LINE_PX * (1 + len(lines))
    top += 10
    body.append(f'<g class="closing {chart.closing.kind}">')
    body.append(f'<rect x="6" y="{top:.1f}" width="{layout.width - 12}" height="{box_h}" rx="4"/>')
    mark = "✓" if chart.closing.kind in (WITNESS, ACCEPTED) else "✗"
    body.append(
        f'<text class="heading" x="16" y="{top + 18:.1f}">'
        f"{mark} {_x_text(chart.closing.heading)}</text>"
    )
    for i, line in enumerate(lines):
        body.append(
            f'<text class="closing-line" x="16" y="{top + 18 + (i + 1) * LINE_PX:.1f}">'
            f"{_x_text(line)}</text>"
        )
    body.append("</g>")
    height = round(top + box_h + 8)
    defs = "".join(_markers(chart.ident, colour))
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="tent-chart" width="{layout.width}" '
        f'height="{height}" viewBox="0 0 {layout.width} {height}" role="img" '
        f'style="--mark: {colour}; --mark-bg: {background}">'
        f"<title>{_x_text(chart.title)}</title>"
        f"<style>{_CSS}</style><defs>{defs}</defs>{lives}{''.join(body)}</svg>\n"
    )
