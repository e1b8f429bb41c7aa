"""One self-contained HTML page: a summary table and, per section, sequence charts with their
step tables (``tent check --html``, ``tent trace validate --html``).

Nothing is loaded: the styles are inline, the charts are inline SVG drawn in Python, and there
is no script. Hovering a step shows its diff-only state change (the SVG ``<title>`` tooltip);
clicking it jumps to its row of the step table (an anchor, highlighted with CSS ``:target``).
"""

from __future__ import annotations

import re
from html import escape
from pathlib import Path

import attrs

from tent_models.report._chart import Chart
from tent_models.report._svg import svg

__all__ = ["Figure", "Page", "Section", "render", "slug", "write"]

_CSS = """
body { font-family: system-ui, 'DejaVu Sans', sans-serif; margin: 24px; color: #212529; }
figure { margin: 0 0 24px 0; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 36px; } h3 { font-size: 15px; }
code, pre, .mono { font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace; font-size: 12px; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid #dee2e6; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f1f3f5; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.pass { color: #2b8a3e; font-weight: bold; } .fail { color: #c92a2a; font-weight: bold; }
.chart { overflow-x: auto; border: 1px solid #dee2e6; border-radius: 6px; padding: 6px;
         margin: 8px 0; background: #fff; }
table.steps td { font-size: 12px; }
table.steps ul { margin: 0; padding-left: 16px; }
tr:target { background: #fff3bf; outline: 2px solid #f59f00; }
tr.marked td { background: #fff5f5; }
.note { color: #c92a2a; }
details > summary { cursor: pointer; margin: 6px 0; }
"""


@attrs.frozen(kw_only=True)
class Figure:
    """A chart, or the reason it could not be drawn, and whether it starts folded."""

    title: str
    chart: Chart | None = None
    error: str = ""
    folded: bool = False


@attrs.frozen(kw_only=True)
class Section:
    """One target or trace: its heading, verdict, one-line message, figures and extra text."""

    anchor: str
    heading: str
    passed: bool
    verdict: str
    message: str = ""
    figures: tuple[Figure, ...] = ()
    text: str = ""  # shown folded under the figures (a report without a chart, a traceback)


@attrs.frozen(kw_only=True)
class Page:
    """The whole page: title, summary lines, the summary table and the sections."""

    title: str
    summary: tuple[str, ...]
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]  # one per section, same order; cell 0 links to it
    sections: tuple[Section, ...]


def slug(text: str) -> str:
    """An HTML id made of ``text``: letters, digits and dashes."""
    return re.sub(r"[^A-Za-z0-9_]+", "-", text).strip("-") or "x"


def _steps_table(chart: Chart) -> str:
    out = [
        '<table class="steps"><tr><th>#</th><th>where</th><th>action</th>'
        "<th>state change (diff-only)</th></tr>"
    ]
    fields = "\n".join(f"{k}: {v}" for k, v in chart.initial)
    shown = (
        f"<details><summary>{len(chart.initial)} field(s)</summary>"
        f"<pre>{escape(fields)}</pre></details>"
        if chart.initial
        else ""
    )
    out.append(
        f'<tr id="{chart.ident}-initial"><td></td><td></td>'
        f"<td>initial state</td><td>{shown}</td></tr>"
    )
    for row in chart.rows:
        p = row.placement
        where = escape(p.source if p.target is None else f"{p.source} → {p.target} ({p.kind})")
        items = (
            "".join(
                f"<li><code>{escape(f)}</code>: "
                + (f"<code>{escape(o)}</code> → " if o else "")
                + f"<code>{escape(n)}</code></li>"
                for f, o, n in row.changes
            )
            or f"<li>{escape(chart.unchanged)}</li>"
        )
        notes = "".join(f'<li class="note">{escape(n)}</li>' for n in row.notes)
        marked = ' class="marked"' if row.marked else ""
        out.append(
            f'<tr id="{chart.ident}-step-{row.index}"{marked}><td class="num">'
            f'<a href="#{chart.ident}-svg-{row.index}">{row.index}</a></td>'
            f"<td>{where}</td><td><code>{escape(row.action)}</code></td>"
            f"<td><ul>{items}{notes}</ul></td></tr>"
        )
    out.append("</table>")
    return "".join(out)


def _figure(figure: Figure) -> str:
    heading = f"<h3>{escape(figure.title)}</h3>"
    if figure.chart is None:
        body = f'<p class="note">no chart: {escape(figure.error)}</p>'
    else:
        body = (
            f'<div class="chart">{svg(figure.chart, links=True)}</div>'
            f"<details open><summary>steps</summary>{_steps_table(figure.chart)}</details>"
        )
    if figure.folded:
        return f"<details><summary>{escape(figure.title)}</summary>{body}</details>"
    return f"<figure>{heading}{body}</figure>"


def _section(section: Section) -> str:
    css = "pass" if section.passed else "fail"
    out = [
        f'<section id="{section.anchor}"><h2>{escape(section.heading)} '
        f'<span class="{css}">{escape(section.verdict)}</span></h2>'
    ]
    if section.message:
        out.append(f"<p>{escape(section.message)}</p>")
    out.extend(_figure(f) for f in section.figures)
    if section.text:
        out.append(f"<details><summary>text</summary><pre>{escape(section.text)}</pre></details>")
    out.append("</section>")
    return "".join(out)


def render(page: Page) -> str:
    """The page as one HTML document."""
    head = "".join(f"<th>{escape(c)}</th>" for c in page.columns)
    rows = []
    for section, cells in zip(page.sections, page.rows, strict=True):
        css = "pass" if section.passed else "fail"
        first = f'<a href="#{section.anchor}">{escape(cells[0])}</a>'
        rest = "".join(
            f'<td class="{"num" if c[:1].isdigit() else ""}">{escape(c)}</td>' for c in cells[2:]
        )
        charts = sum(f.chart is not None for f in section.figures)
        rows.append(
            f'<tr><td>{first}</td><td class="{css}">{escape(cells[1])}</td>{rest}'
            f'<td class="num">{charts}</td></tr>'
        )
    summary = "".join(f"<p>{escape(line)}</p>" for line in page.summary)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(page.title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{escape(page.title)}</h1>{summary}"
        f"<table><tr>{head}<th>charts</th></tr>{''.join(rows)}</table>"
        f"{''.join(_section(s) for s in page.sections)}</body></html>\n"
    )


def write(directory: Path, page: Page) -> Path:
    """Write ``page`` as ``directory/index.html`` (the folder is created); returns the path.
    Raises ``OSError`` when it cannot be written."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "index.html"
    path.write_text(render(page), encoding="utf-8")
    return path
