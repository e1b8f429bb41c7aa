"""``tent check --html``: the run's outcomes as a :class:`~tent_models.report._html.Page`.

Every outcome whose check result holds traces gets charts: each counterexample (a model's
violation, a known-bad variant's refutation, an ablated guard's refuting run) drawn open, and
each satisfied witness's shortest trace drawn folded. The charts replay on a fresh model from
the outcome's factory (``Outcome.model``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tent_models._targets import Outcome
from tent_models.checker import ReplayError
from tent_models.report._chart import counterexample_chart, witness_chart
from tent_models.report._html import Figure, Page, Section, slug
from tent_models.report._itf import itf_document
from tent_models.report._lifelines import ChartError

__all__ = ["check_page", "write_itf_traces"]


def _figures(outcome: Outcome) -> tuple[Figure, ...]:
    result = outcome.result
    if result is None:
        return ()
    base = slug(outcome.target)
    model: Any = None
    error = ""
    if outcome.model is None:
        error = "the outcome names no model to replay the trace on"
    else:
        try:
            model = outcome.model()
        except Exception as exc:  # a factory that fails now: the text report still stands
            error = f"building the model failed: {type(exc).__name__}: {exc}"
    figures = []
    # A refutation's message names the invariant that refuted it: its counterexample first.
    refuting = outcome.message.removeprefix("counterexample to ").split(" after ")[0]
    ordered = sorted(result.violations, key=lambda v: v.name != refuting)
    for n, violation in enumerate(ordered, 1):
        title = f"{violation.kind.value} violated: {violation.name}"
        if not violation.steps:
            figures.append(Figure(title=title, error=violation.detail or "no trace"))
            continue
        try:
            if model is None:
                raise ChartError(error)
            chart = counterexample_chart(model, violation, ident=f"{base}-v{n}", title=title)
        except (ChartError, ReplayError) as exc:
            figures.append(Figure(title=title, error=str(exc)))
            continue
        figures.append(Figure(title=title, chart=chart))
    for n, witness in enumerate(result.witnesses, 1):
        if not witness.satisfied or model is None:
            continue
        title = f"witness {witness.name} ({len(witness.steps) - 1} step(s))"
        try:
            chart = witness_chart(model, witness, ident=f"{base}-w{n}", title=title)
        except (ChartError, ReplayError) as exc:
            figures.append(Figure(title=title, error=str(exc), folded=True))
            continue
        figures.append(Figure(title=title, chart=chart, folded=True))
    return tuple(figures)


def _cell(value: int | None) -> str:
    return "" if value is None else f"{value:,}"


def check_page(outcomes: Sequence[Outcome], seconds: float, *, title: str) -> Page:
    """The page of one ``tent check`` run: totals, one row and one section per outcome."""
    failed = sum(not o.passed for o in outcomes)
    sections = []
    rows = []
    for outcome in outcomes:
        figures = _figures(outcome)
        text = "" if figures and outcome.passed else outcome.report
        sections.append(
            Section(
                anchor=f"t-{slug(outcome.target)}",
                heading=outcome.target,
                passed=outcome.passed,
                verdict=outcome.verdict,
                message=outcome.message,
                figures=figures,
                text=text,
            )
        )
        rows.append(
            (
                outcome.target,
                outcome.verdict,
                outcome.kind.value,
                outcome.tier.value,
                _cell(outcome.states),
                _cell(outcome.depth),
                f"{outcome.seconds:.1f} s",
                outcome.message,
            )
        )
    summary = (
        f"{len(outcomes)} target(s): {len(outcomes) - failed} passed, {failed} failed "
        f"in {seconds:.1f} s.",
        "Each chart draws one trace: a lifeline per node, a step as an arrow (a message sent, "
        "delivered, duplicated or lost) or a box (a local action). Hover a step for its state "
        "change; click it for its row in the table below the chart.",
    )
    return Page(
        title=title,
        summary=summary,
        columns=("target", "result", "kind", "tier", "states", "depth", "time", "message"),
        rows=tuple(rows),
        sections=tuple(sections),
    )


def write_itf_traces(directory: Path, outcomes: Sequence[Outcome]) -> list[Path]:
    """Write every counterexample with a trace as ``<target>.<kind>-<property>.itf.json`` into
    ``directory`` (created); returns the files written. Raises ``OSError`` when it cannot."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for outcome in outcomes:
        if outcome.result is None:
            continue
        model_name = outcome.result.model
        for violation in outcome.result.violations:
            if not violation.steps:
                continue
            doc = itf_document(
                violation.steps, source=outcome.target, model=model_name, violation=violation
            )
            name = f"{slug(outcome.target)}.{violation.kind.value}-{slug(violation.name)}.itf.json"
            path = directory / name
            path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
            written.append(path)
    return written
