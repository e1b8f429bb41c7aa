"""``tent trace validate --html``: one section per trace file, each with its chart."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tent_models.report._html import Figure, Page, Section, slug
from tent_models.report._itf import ItfTrace
from tent_models.report._itf_check import ItfReport, itf_chart
from tent_models.report._lifelines import ChartError
from tent_models.report._recorded import recorded_chart
from tent_models.trace._format import TraceFile
from tent_models.trace._validate import TraceReport

__all__ = ["itf_section", "recorded_section", "trace_page", "unreadable_section"]


def _verdict(ok: bool) -> str:
    return "valid" if ok else "rejected"


def recorded_section(path: str, trace: TraceFile, report: TraceReport) -> Section:
    """A recorded (CBOR) trace and its verdict against the credit spec."""
    ident = f"f-{slug(path)}"
    title = f"{path}: {len(trace.events)} event(s) of {', '.join(trace.nodes) or 'no node'}"
    figure = Figure(title=title, chart=recorded_chart(trace, report, ident=ident, title=title))
    return Section(
        anchor=ident,
        heading=path,
        passed=report.ok,
        verdict=_verdict(report.ok),
        message=report.format().splitlines()[0],
        figures=(figure,),
        text=report.format(),
    )


def itf_section(path: str, trace: ItfTrace, model: Any, report: ItfReport) -> Section:
    """An ITF trace and its verdict against ``model``."""
    ident = f"f-{slug(path)}"
    title = f"{path}: {len(trace.states)} ITF state(s) on {getattr(model, 'name', 'the model')}"
    try:
        figure = Figure(
            title=title, chart=itf_chart(trace, model, report, ident=ident, title=title)
        )
    except ChartError as exc:
        figure = Figure(title=title, error=str(exc))
    return Section(
        anchor=ident,
        heading=path,
        passed=report.ok,
        verdict=_verdict(report.ok),
        message=report.format().splitlines()[0],
        figures=(figure,),
        text=report.format(),
    )


def unreadable_section(path: str, reason: str) -> Section:
    """A file that could not be read as a trace."""
    return Section(
        anchor=f"f-{slug(path)}", heading=path, passed=False, verdict="unreadable", message=reason
    )


def trace_page(sections: Sequence[Section]) -> Page:
    """The page of one ``tent trace validate`` run."""
    bad = sum(not s.passed for s in sections)
    return Page(
        title="tent trace validate",
        summary=(
            f"{len(sections)} trace(s): {len(sections) - bad} valid, {bad} rejected or unreadable.",
            "Each chart draws the trace's events on the lifelines of its nodes; a rejected "
            "trace ends at the first event the spec does not allow, with the guard that "
            "refused it and what the spec allows there. Hover a step for its state change.",
        ),
        columns=("trace", "result", "verdict"),
        rows=tuple((s.heading, s.verdict, s.message) for s in sections),
        sections=tuple(sections),
    )
