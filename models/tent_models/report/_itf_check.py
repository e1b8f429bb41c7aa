"""Validate an ITF trace against a model: is every state reachable from the one before by one
step of the model (``tent trace validate FILE.itf.json``)?

An ITF trace lists states, not steps, and may describe only some of the model's variables. So
the validator keeps every model state consistent with the trace so far (at most
``max_frontier``) and, for each next ITF state, takes the successors whose ``describe`` view
agrees with it on the trace's variables. When a state's ``#meta`` names the ``action`` (ours
do; Quint's ``mbt::actionTaken`` variable does too), only that action may explain it. Values
are compared in ITF's own normal form (:func:`~tent_models.report._itf.canonical`): a list and a
tuple of equal items, an integer and its ``#bigint`` are the same value. A lasso's ``loop``
adds one step: from the last state back to the state it names.

On rejection the report names the first state no step explains, the guard that refused the
recorded action (the model's ``explain``), and the closest step the model does allow (fewest
variables differing) with the values that differ.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import attrs

from tent_models.checker._result import ABSENT
from tent_models.checker._trace import format_action
from tent_models.report._chart import ACCEPTED, REJECTED, Chart, Closing, Row
from tent_models.report._itf import ItfError, ItfTrace, canonical, decode, encode, show
from tent_models.report._lifelines import ChartError, Placement, lifelines, placements

__all__ = ["ItfReport", "itf_chart", "validate_itf"]

_ACTION_VARS = ("mbt::actionTaken", "action_taken")  # Quint's MBT variable; Apalache's alias


@attrs.frozen(kw_only=True)
class ItfReport:
    """The verdict on one ITF trace. ``matched`` states (0..matched-1) are explained; ``path``
    is one sequence of model steps that explains them (from ``initial``)."""

    path_name: str
    ok: bool
    states: int
    matched: int
    initial: Any = attrs.field(default=None, eq=False, repr=False)
    path: tuple[tuple[str, tuple[Hashable, ...]], ...] = ()
    state_before: Any = attrs.field(default=None, eq=False, repr=False)
    recorded: str = ""  # the recorded action of the rejected state, when it names one
    refused: str = ""  # the model's explain() of the recorded action
    closest: str = ""  # the closest step the model allows
    differences: tuple[tuple[str, str, str], ...] = ()  # (variable, model, trace) of it
    detail: str = ""

    def format(self) -> str:
        """What ``tent trace validate`` prints."""
        if self.ok:
            return f"{self.path_name}: valid ITF trace ({self.states} states)"
        lines = [
            f"{self.path_name}: REJECTED at state {self.matched} "
            f"(states 0..{self.matched - 1} match the model)"
            if self.matched
            else f"{self.path_name}: REJECTED at state 0 (no initial state matches)",
        ]
        if self.detail:
            lines.append(f"  {self.detail}")
        if self.recorded:
            lines.append(f"  recorded step: {self.recorded}")
        if self.refused:
            lines.append(f"  refused: {self.refused}")
        if self.closest and not self.differences:
            lines.append(f"  closest model step: {self.closest}, which reaches that state")
        elif self.closest:
            lines.append(f"  closest model step: {self.closest}, which differs in:")
            lines.extend(f"    {v}: model {m}, trace {t}" for v, m, t in self.differences)
        return "\n".join(lines)


@attrs.frozen
class _Node:
    state: Any
    parent: int
    step: tuple[str, tuple[Hashable, ...]] | None


def _compared(trace: ItfTrace) -> tuple[str, ...]:
    return tuple(v for v in trace.vars if not v.startswith("mbt::") and v not in _ACTION_VARS)


def _differences(
    model: Any, state: Any, expected: Mapping[str, Any], names: Sequence[str]
) -> list[tuple[str, str, str]]:
    """``(variable, model value, trace value)`` of every variable the two disagree on."""
    view = model.describe(state)
    out = []
    for name in names:
        mine = encode(view.get(name, ABSENT))
        if canonical(mine) != canonical(expected[name]):
            shown = show(mine) if name in view else "(the model has no such variable)"
            out.append((name, shown, show(expected[name])))
    return out


def _recorded_step(trace: ItfTrace, index: int) -> tuple[str, Any] | None:
    """The action the trace records for state ``index`` and its ITF-encoded arguments (``None``
    when it records a name only, as Quint's ``mbt::actionTaken`` does)."""
    meta = trace.state_meta[index]
    if isinstance(meta.get("action"), str):
        return meta["action"], meta.get("args")
    for var in _ACTION_VARS:
        name = trace.states[index].get(var)
        if isinstance(name, str):
            return name, None
    return None


def _matches(recorded: tuple[str, Any] | None, action: str, args: tuple[Hashable, ...]) -> bool:
    """Whether a model step is the recorded one: same name, and same arguments when recorded
    (compared as ITF values, so a message argument matches its record)."""
    if recorded is None:
        return True
    name, raw = recorded
    if action != name:
        return False
    return raw is None or canonical(encode(args)) == canonical(raw)


def _label(recorded: tuple[str, Any]) -> str:
    name, raw = recorded
    if raw is None:
        return name
    try:
        return format_action(name, _as_args(raw))
    except ItfError:
        return f"{name}{show(raw)}"


def _as_args(raw: Any) -> tuple[Hashable, ...]:
    """Recorded ITF arguments as a tuple of Python values (``ItfError`` when they are not)."""
    try:
        value = decode(raw)
    except (TypeError, KeyError, AttributeError, ValueError) as exc:
        raise ItfError(f"the recorded arguments {show(raw)} are not ITF values") from exc
    if not isinstance(value, tuple):
        raise ItfError(f"the recorded arguments {show(raw)} are not a tuple")
    return value


def validate_itf(
    trace: ItfTrace, model: Any, *, path: str = "<itf>", max_frontier: int = 1000
) -> ItfReport:
    """Replay ``trace`` on ``model`` (see the module docstring); never raises for a trace that
    does not fit the model: the report says where and why."""
    names = _compared(trace)
    targets = list(trace.states) + ([trace.states[trace.loop]] if trace.loop is not None else [])
    layers: list[list[_Node]] = [
        [
            _Node(s, -1, None)
            for s in model.initial_states()
            if not _differences(model, s, targets[0], names)
        ][:max_frontier]
    ]
    if not layers[0]:
        starts = list(model.initial_states())
        best = min(starts, key=lambda s: len(_differences(model, s, targets[0], names)))
        return ItfReport(
            path_name=path,
            ok=False,
            states=len(trace.states),
            matched=0,
            closest="the initial state",
            differences=tuple(_differences(model, best, targets[0], names)),
            detail="no initial state of the model agrees with state 0",
        )
    for index in range(1, len(targets)):
        recorded = _recorded_step(trace, index) if index < len(trace.states) else None
        layer: list[_Node] = []
        seen: set[Any] = set()
        closest: tuple[int, str, list[tuple[str, str, str]]] | None = None
        for parent, node in enumerate(layers[-1]):
            for step in model.successors(node.state):
                args = tuple(step.args)
                if not _matches(recorded, step.action, args):
                    continue
                diffs = _differences(model, step.state, targets[index], names)
                if diffs:
                    if closest is None or len(diffs) < closest[0]:
                        closest = (len(diffs), format_action(step.action, args), diffs)
                    continue
                if step.state in seen or len(layer) >= max_frontier:
                    continue
                seen.add(step.state)
                layer.append(_Node(step.state, parent, (step.action, args)))
        if not layer:
            return _rejected(
                trace,
                model,
                path=path,
                index=index,
                layers=layers,
                recorded=recorded,
                closest=closest,
                target=targets[index],
            )
        layers.append(layer)
    return ItfReport(
        path_name=path,
        ok=True,
        states=len(trace.states),
        matched=len(trace.states),
        initial=_first_path(layers)[0],
        path=_first_path(layers)[1],
    )


def _first_path(
    layers: list[list[_Node]],
) -> tuple[Any, tuple[tuple[str, tuple[Hashable, ...]], ...]]:
    """The initial state and the steps of one path through ``layers`` (to its first node)."""
    steps = []
    index = 0
    for layer in reversed(layers):
        node = layer[index]
        if node.step is not None:
            steps.append(node.step)
        index = node.parent
        if node.parent < 0:
            return node.state, tuple(reversed(steps))
    raise AssertionError("every path starts at an initial state")  # pragma: no cover


def _rejected(
    trace: ItfTrace,
    model: Any,
    *,
    path: str,
    index: int,
    layers: list[list[_Node]],
    recorded: tuple[str, Any] | None,
    closest: tuple[int, str, list[tuple[str, str, str]]] | None,
    target: Mapping[str, Any],
) -> ItfReport:
    names = _compared(trace)
    before = layers[-1][0].state
    refused = ""
    label = ""
    if recorded is not None:
        action, raw = recorded
        label = _label(recorded)
        if raw is not None:
            try:
                args = _as_args(raw)
                enabled = model.apply(before, action, args) is not None
                refused = (
                    f"{label} is enabled but leads to another state"
                    if enabled
                    else model.explain(before, action, args)
                )
            except Exception as exc:  # a model's apply may not expect foreign arguments
                refused = f"{label} does not apply to the model: {type(exc).__name__}: {exc}"
        elif closest is None:
            refused = f"no {action} step is enabled here"
    if closest is None and recorded is not None:  # nothing of that action: the closest of any
        for step in model.successors(before):
            diffs = _differences(model, step.state, target, names)
            if closest is None or len(diffs) < closest[0]:
                closest = (len(diffs), format_action(step.action, tuple(step.args)), diffs)
    initial, steps = _first_path(layers)
    where = "the loop back to state " + str(trace.loop) if index >= len(trace.states) else ""
    return ItfReport(
        path_name=path,
        ok=False,
        states=len(trace.states),
        matched=index,
        initial=initial,
        path=steps,
        state_before=before,
        recorded=label,
        refused=refused,
        closest="" if closest is None else closest[1],
        differences=() if closest is None else tuple(closest[2]),
        detail=f"no step of the model leads to state {index}" + (f" ({where})" if where else ""),
    )


def itf_chart(trace: ItfTrace, model: Any, report: ItfReport, *, ident: str, title: str) -> Chart:
    """The chart of a validated ITF trace: the explained steps on the model's lifelines, the
    trace's own values changing; a rejected trace ends with its refused state, marked."""
    states = [report.initial]
    for action, args in report.path:
        states.append(model.apply(states[-1], action, args))
    try:
        nodes = lifelines(model)
        where = list(placements(model, states, report.path))
    except ChartError:
        nodes = (str(getattr(model, "name", "") or "model"),)
        where = [Placement("local", nodes[0]) for _ in report.path]
    rows = [
        Row(
            index=i,
            action=format_action(a, args),
            placement=p,
            changes=_itf_changes(trace.states[i - 1], trace.states[i], trace.vars),
        )
        for i, ((a, args), p) in enumerate(zip(report.path, where, strict=True), 1)
    ]
    if report.ok:
        closing = Closing(
            kind=ACCEPTED,
            heading=f"valid: every one of {report.states} states "
            "is one step of the model from the one before",
        )
    else:
        i = report.matched
        target = trace.states[i] if i < len(trace.states) else trace.states[trace.loop or 0]
        placement = Placement("local", nodes[0], None, report.recorded or f"state {i}")
        recorded = _recorded_step(trace, i) if i < len(trace.states) else None
        if recorded is not None and recorded[1] is not None and report.state_before is not None:
            try:
                step = (recorded[0], _as_args(recorded[1]))
                (placement,) = placements(model, [report.state_before], [step])
            except (ChartError, ItfError):
                pass  # drawn as a box on the first lifeline
        notes = [
            n
            for n in (
                f"refused: {report.refused}" if report.refused else "",
                f"closest model step: {report.closest}" if report.closest else "",
            )
            if n
        ]
        notes.extend(f"  {v}: model {m}, trace {t}" for v, m, t in report.differences)
        if i > 0:
            rows.append(
                Row(
                    index=i,
                    action=report.recorded or f"state {i}",
                    placement=placement,
                    changes=_itf_changes(trace.states[i - 1], target, trace.vars),
                    notes=tuple(notes),
                    marked=True,
                )
            )
        closing = Closing(kind=REJECTED, heading=f"state {i}: {report.detail}", lines=tuple(notes))
    return Chart(
        ident=ident,
        title=title,
        lifelines=nodes,
        initial=tuple((v, show(trace.states[0][v])) for v in trace.vars),
        rows=tuple(rows),
        closing=closing,
    )


def _itf_changes(
    old: Mapping[str, Any], new: Mapping[str, Any], names: Sequence[str]
) -> tuple[tuple[str, str, str], ...]:
    return tuple(
        (v, show(old[v]), show(new[v])) for v in names if canonical(old[v]) != canonical(new[v])
    )
