"""The chart of one trace as a value: lifelines, one row per step, a closing verdict box.

Built from a checker counterexample or witness (:func:`counterexample_chart`,
:func:`witness_chart`) or from a recorded implementation trace
(:mod:`tent_models.report._recorded`), and drawn by :func:`tent_models.report.svg`.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import attrs

from tent_models.checker import CounterExample, ReplayError, TraceStep, WitnessResult
from tent_models.checker._trace import format_action
from tent_models.report._diff import Change, changes, show
from tent_models.report._lifelines import Placement, lifelines, placements

__all__ = ["Chart", "Closing", "Row", "counterexample_chart", "witness_chart"]

VIOLATION = "violation"
WITNESS = "witness"
REJECTED = "rejected"
ACCEPTED = "accepted"
CLOSINGS = (VIOLATION, WITNESS, REJECTED, ACCEPTED)
LAST_FIELDS = 6  # fields of the last step a closing box names when the invariant names none


@attrs.frozen(kw_only=True)
class Row:
    """One step: its number, the full action text, where it happens and what it changed.

    ``notes`` are extra lines drawn under the step (why a recorded event was refused, what the
    spec allows there); ``marked`` draws the step in the closing colour (the violating or
    refused step).
    """

    index: int = attrs.field(validator=attrs.validators.ge(0))
    action: str
    placement: Placement
    changes: tuple[Change, ...] = ()
    notes: tuple[str, ...] = ()
    marked: bool = False

    @property
    def label(self) -> str:
        """The text on the arrow or box: the model's short label, else the action."""
        return self.placement.label or self.action


@attrs.frozen(kw_only=True)
class Closing:
    """The box under the last step: what the trace shows (``kind`` one of :data:`CLOSINGS`),
    a heading, and lines (the rule cited, the values compared, the refusing guards)."""

    kind: str = attrs.field(validator=attrs.validators.in_(CLOSINGS))
    heading: str
    lines: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class Chart:
    """A sequence chart: ``ident`` prefixes the HTML anchors of its steps (unique per page)."""

    ident: str
    title: str
    lifelines: tuple[str, ...]
    initial: tuple[tuple[str, str], ...]  # (field, value) of the initial state, every field
    rows: tuple[Row, ...]
    closing: Closing
    note: str = ""  # why the chart is simpler than the model's (a replay that failed)
    unchanged: str = "(no field changed)"  # what a step that changed nothing shows


def _states(model: Any, steps: Sequence[TraceStep], actions: Sequence[Any]) -> list[Any]:
    """The concrete states of a trace: replayed from the initial state whose description is
    step 0's (a model may have several). Raises :class:`ReplayError` when none replays."""
    first = dict(steps[0].fields) if steps else None
    failure: ReplayError | None = None
    for start in model.initial_states():
        if first is not None and dict(model.describe(start)) != first:
            continue
        states = [start]
        for index, (action, args) in enumerate(actions):
            nxt = model.apply(states[-1], action, tuple(args))
            if nxt is None:
                failure = ReplayError(
                    index, format_action(action, args), model.explain(states[-1], action, args)
                )
                break
            states.append(nxt)
        else:
            return states
    raise failure or ReplayError(0, "initial state", "no initial state matches the trace's")


def _rows(
    model: Any, steps: Sequence[TraceStep], actions: Sequence[tuple[str, tuple[Hashable, ...]]]
) -> tuple[tuple[str, ...], tuple[Row, ...], str]:
    """Lifelines, rows and a note: the model's hook when the trace replays, else one lifeline."""
    note = ""
    try:
        states = _states(model, steps, actions)
        nodes = lifelines(model)
        where = placements(model, states, actions)
    except ReplayError as exc:
        nodes = (str(getattr(model, "name", "") or "model"),)
        where = tuple(Placement("local", nodes[0]) for _ in actions)
        note = f"the trace does not replay on the model ({exc}); drawn on one lifeline"
    rows = tuple(
        Row(
            index=step.index,
            action=format_action(action, args),
            placement=placement,
            changes=changes(step.changed),
        )
        for step, (action, args), placement in zip(steps[1:], actions, where, strict=True)
    )
    if rows:
        rows = (*rows[:-1], attrs.evolve(rows[-1], marked=True))
    return nodes, rows, note


def _initial(steps: Sequence[TraceStep]) -> tuple[tuple[str, str], ...]:
    return tuple((k, show(v)) for k, v in steps[0].fields.items()) if steps else ()


def counterexample_chart(model: Any, violation: CounterExample, *, ident: str, title: str) -> Chart:
    """The chart of a checker counterexample (an invariant, deadlock or recoverability one).

    The last step is marked; the closing box names the violated property, the rule it cites
    and the values the invariant compared (when it returned a ``Verdict``). Raises
    :class:`~tent_models.report.ChartError` when the model's chart hook is wrong, and
    ``ValueError`` for a counterexample without a trace (a witness or coverage failure).
    """
    if not violation.steps:
        raise ValueError(f"{violation.kind.value} {violation.name} has no trace to draw")
    actions = [(a, tuple(args)) for a, args in violation.actions]
    nodes, rows, note = _rows(model, violation.steps, actions)
    lines = []
    if violation.detail:
        lines.append(violation.detail)
    if violation.cites:
        lines.append(f"cites: {violation.cites}")
    if violation.compared:
        lines.append(
            "compared: " + ", ".join(f"{k}={show(v)}" for k, v in violation.compared.items())
        )
    elif rows and rows[-1].changes:  # the invariant names no values: what the step changed
        changed = rows[-1].changes
        last = ", ".join(f"{field}={new}" for field, _old, new in changed[:LAST_FIELDS])
        more = f" (and {len(changed) - LAST_FIELDS} more)" if len(changed) > LAST_FIELDS else ""
        lines.append(f"after the last step: {last}{more}")
    closing = Closing(
        kind=VIOLATION,
        heading=f"{violation.kind.value} violated: {violation.name}",
        lines=tuple(lines),
    )
    return Chart(
        ident=ident,
        title=title,
        lifelines=nodes,
        initial=_initial(violation.steps),
        rows=rows,
        closing=closing,
        note=note,
    )


def witness_chart(model: Any, witness: WitnessResult, *, ident: str, title: str) -> Chart:
    """The chart of the shortest trace to a state that satisfies a witness.

    Raises ``ValueError`` for a witness that was not satisfied (it has no trace).
    """
    if not witness.satisfied or not witness.steps:
        raise ValueError(f"witness {witness.name} was not satisfied: no trace to draw")
    actions = [(s.action or "", tuple(s.args)) for s in witness.steps[1:]]
    nodes, rows, note = _rows(model, witness.steps, actions)
    closing = Closing(
        kind=WITNESS,
        heading=f"witness reached: {witness.name}",
        lines=(f"after {len(rows)} step(s)",),
    )
    return Chart(
        ident=ident,
        title=title,
        lifelines=nodes,
        initial=_initial(witness.steps),
        rows=rows,
        closing=closing,
        note=note,
    )


def initial_fields(fields: Mapping[str, object]) -> tuple[tuple[str, str], ...]:
    """Every field of a state view as ``(field, shown value)`` pairs."""
    return tuple((k, show(v)) for k, v in fields.items())
