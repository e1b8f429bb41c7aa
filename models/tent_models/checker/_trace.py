"""Traces: replay, rebuilding a concrete trace from parent links, minimisation, diff-only display.

The display format is shared with the z3 counterexamples-to-induction::

    0 initial state
        field: value
    1 action name(arg, ...)
        field: old -> new
    violated: InvariantName
        cites: RFC text

Only the fields a step changed are printed after step 0.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from tent_models.checker._errors import InvalidArgument, ModelContractError, ReplayError
from tent_models.checker._fingerprint import fingerprint
from tent_models.checker._result import ABSENT, TraceStep
from tent_models.model_api import SpecModel

__all__ = [
    "ActionInstance",
    "compared_values",
    "format_action",
    "format_trace",
    "minimise",
    "rebuild_trace",
    "replay",
    "trace_steps",
]

ActionInstance = tuple[str, tuple[Hashable, ...]]


def replay(
    model: SpecModel[Any], steps: Sequence[ActionInstance], *, initial: Any = None
) -> list[Any]:
    """Re-apply ``(action, args)`` steps with ``model.apply``; return every state, initial first.

    Without ``initial`` the trace starts from the first of ``model.initial_states()`` in which
    every step is enabled. Raises :class:`ReplayError` (index, action, the model's ``explain``
    text) when a step is not enabled: from ``initial`` when given, otherwise from the initial
    state that got furthest; :class:`ModelContractError` when the model has no initial state.
    Nothing is mutated (states are immutable values).
    """
    starts = [initial] if initial is not None else list(model.initial_states())
    if not starts:
        raise ModelContractError(f"model {model.name!r} has no initial state")
    furthest: ReplayError | None = None
    for start in starts:
        states = [start]
        failure: ReplayError | None = None
        for index, (action, args) in enumerate(steps):
            nxt = model.apply(states[-1], action, args)
            if nxt is None:
                explanation = model.explain(states[-1], action, args)
                failure = ReplayError(index, format_action(action, args), explanation)
                break
            states.append(nxt)
        if failure is None:
            return states
        if furthest is None or failure.index > furthest.index:
            furthest = failure
    assert furthest is not None  # every start failed
    raise furthest


def _enabled_prefix(
    model: SpecModel[Any],
    initial: Any,
    steps: Sequence[ActionInstance],
    violates: Callable[[Any], bool],
) -> int | None:
    """Length of the shortest prefix of ``steps`` ending in a violating state, or None."""
    state = initial
    if violates(state):
        return 0
    for index, (action, args) in enumerate(steps):
        state = model.apply(state, action, args)
        if state is None:
            return None
        if violates(state):
            return index + 1
    return None


def minimise(
    model: SpecModel[Any],
    initial: Any,
    steps: Sequence[ActionInstance],
    violates: Callable[[Any], bool],
) -> tuple[ActionInstance, ...]:
    """Shorten a trace from ``initial`` that reaches a state where ``violates`` holds.

    Policy (delta debugging over steps, replaying with ``model.apply``):

    1. Cut the trace right after the first violating state.
    2. For chunk sizes ``len // 2``, ``len // 4``, ..., 1: try deleting each chunk; keep a
       deletion when the remaining steps are all enabled and still reach a violating state
       (then cut after the first one again).
    3. Repeat step 2 until deleting any single step fails (a 1-minimal trace).

    Raises :class:`InvalidArgument` if the given trace does not reach a violating state.
    """
    prefix = _enabled_prefix(model, initial, steps, violates)
    if prefix is None:
        raise InvalidArgument("the trace to minimise does not reach a violating state")
    current = tuple(steps[:prefix])
    changed = True
    while changed:
        changed = False
        chunk = max(len(current) // 2, 1)
        while chunk >= 1 and current:
            start = 0
            while start < len(current):
                candidate = current[:start] + current[start + chunk :]
                cut = _enabled_prefix(model, initial, candidate, violates)
                if cut is not None:
                    current = candidate[:cut]
                    changed = True
                else:
                    start += chunk
            chunk //= 2
    return current


def rebuild_trace(
    model: SpecModel[Any],
    initial: Any,
    recorded: Sequence[ActionInstance],
    *,
    symmetry: bool,
) -> tuple[list[Any], list[ActionInstance]]:
    """Turn recorded parent-link actions into a concrete execution from ``initial``.

    The BFS records, for every state, the action instance that produced it *from its parent's
    canonical representative*. Without symmetry these replay directly. With symmetry the
    concrete state may be a permutation of the representative, so policy:

    1. Compute the canonical chain ``c[i+1] = canonicalize(apply(c[i], recorded[i]))`` and the
       fingerprint of each ``c[i]``.
    2. From the concrete state, take the recorded step if it leads to the right orbit; otherwise
       the first of ``successors(state)`` whose canonical fingerprint is the next one.

    Returns ``(states, actions)``. Raises :class:`ModelContractError` when a step cannot be
    re-found (the model's successors/apply/canonicalize disagree or are not deterministic).
    """
    states = [initial]
    actions: list[ActionInstance] = []
    if not symmetry:
        for action, args in recorded:
            nxt = model.apply(states[-1], action, args)
            if nxt is None:
                raise ModelContractError(
                    f"model {model.name!r}: recorded step {format_action(action, args)} is not "
                    f"enabled on replay: {model.explain(states[-1], action, args)}"
                )
            states.append(nxt)
            actions.append((action, args))
        return states, actions
    canonicalize, pack = model.canonicalize, model.pack
    canonical = canonicalize(initial)
    for action, args in recorded:
        nxt_canonical = model.apply(canonical, action, args)
        if nxt_canonical is None:
            raise ModelContractError(
                f"model {model.name!r}: recorded step {format_action(action, args)} is not "
                "enabled on its canonical parent"
            )
        canonical = canonicalize(nxt_canonical)
        target = fingerprint(pack(canonical))
        state = states[-1]
        direct = model.apply(state, action, args)
        if direct is not None and fingerprint(pack(canonicalize(direct))) == target:
            states.append(direct)
            actions.append((action, args))
            continue
        for step in model.successors(state):
            if fingerprint(pack(canonicalize(step.state))) == target:
                states.append(step.state)
                actions.append((step.action, tuple(step.args)))
                break
        else:
            raise ModelContractError(
                f"model {model.name!r}: no successor matches the recorded orbit of step "
                f"{len(actions) + 1} ({format_action(action, args)}); is canonicalize a symmetry?"
            )
    return states, actions


def trace_steps(
    model: SpecModel[Any], states: Sequence[Any], actions: Sequence[ActionInstance]
) -> tuple[TraceStep, ...]:
    """Build the numbered, diff-only :class:`TraceStep` values of an execution.

    ``states`` has one more element than ``actions`` (the initial state first).
    """
    if len(states) != len(actions) + 1:
        raise InvalidArgument("a trace needs exactly one more state than actions")
    views = [dict(model.describe(state)) for state in states]
    steps = [TraceStep(index=0, action=None, fields=views[0])]
    for index, (action, args) in enumerate(actions, start=1):
        old, new = views[index - 1], views[index]
        changed: dict[str, tuple[object, object]] = {}
        for key in (*old, *(k for k in new if k not in old)):
            before, after = old.get(key, ABSENT), new.get(key, ABSENT)
            if before != after:
                changed[key] = (before, after)
        steps.append(
            TraceStep(index=index, action=action, args=tuple(args), changed=changed, fields=new)
        )
    return tuple(steps)


def format_action(action: str, args: Sequence[Hashable]) -> str:
    """``name(arg, ...)`` with each argument shown by ``repr``."""
    return f"{action}({', '.join(repr(arg) for arg in args)})"


def _show(value: object) -> str:
    return ABSENT if value is ABSENT else repr(value)


def compared_values(invariant: Any, state: Any) -> Mapping[str, object]:
    """The values ``invariant`` reports comparing in ``state`` (it is violated there).

    1. Its optional ``compared(state)`` callable (the spec's invariants name their values
       this way, so the hot loop's ``holds`` stays a plain bool).
    2. Else the ``compared`` mapping of what ``holds(state)`` returns (a
       :class:`~tent_models.Verdict`); a plain bool compares nothing.
    """
    explain = getattr(invariant, "compared", None)
    if callable(explain):
        return dict(explain(state))
    compared = getattr(invariant.holds(state), "compared", None)
    return dict(compared) if isinstance(compared, Mapping) else {}


_FOLD_AFTER = 4  # a small state is listed whole
_WIDTH = 100


def _wrapped(label: str, items: Sequence[str]) -> list[str]:
    """``items`` joined by ``, `` after ``label``, in lines of at most ``_WIDTH`` columns
    (an item longer than a line gets a line of its own)."""
    lines: list[str] = []
    current = f"    {label}"
    for index, item in enumerate(items):
        piece = item + ("," if index < len(items) - 1 else "")
        if current.strip() not in ("", label.strip()) and len(current) + 1 + len(piece) > _WIDTH:
            lines.append(current)
            current = " " * (4 + len(label)) + piece
        else:
            current = f"{current}{'' if current.endswith(label) else ' '}{piece}"
    if items:
        lines.append(current)
    return lines


def format_trace(
    steps: Sequence[TraceStep],
    *,
    violated: str | None = None,
    cites: str = "",
    compared: Mapping[str, object] | None = None,
) -> str:
    """Render numbered steps: step 0 folded, later steps with only changed fields.

    1. The initial state lists, one per line, the fields some step changes. When more than
       ``_FOLD_AFTER`` fields never change, they are folded into ``unchanged:`` lines of
       ``name=value`` pairs, wrapped at ``_WIDTH`` columns; fewer are listed one per line too.
    2. Each later step lists only the fields it changed, ``old -> new``.
    3. With ``violated`` a final ``violated: <name>`` line (and the ``cites`` text) is added,
       and with ``compared`` a ``compared: name=value, ...`` line of the values the invariant
       read.
    """
    lines: list[str] = []
    changing = {key for step in steps for key in step.changed}
    for step in steps:
        if step.action is None:
            lines.append(f"{step.index} initial state")
            fixed = [key for key in step.fields if key not in changing]
            folded = fixed if len(fixed) > _FOLD_AFTER else []
            lines.extend(
                f"    {key}: {_show(value)}"
                for key, value in step.fields.items()
                if key not in folded
            )
            lines.extend(_wrapped("unchanged: ", [f"{k}={_show(step.fields[k])}" for k in folded]))
            continue
        lines.append(f"{step.index} action {format_action(step.action, step.args)}")
        if not step.changed:
            lines.append("    (no field changed)")
        lines.extend(
            f"    {key}: {_show(old)} -> {_show(new)}" for key, (old, new) in step.changed.items()
        )
    if violated is not None:
        lines.append(f"violated: {violated}")
        if cites:
            lines.append(f"    cites: {cites}")
        if compared:
            shown = ", ".join(f"{key}={_show(value)}" for key, value in compared.items())
            lines.append(f"    compared: {shown}")
    return "\n".join(lines)
