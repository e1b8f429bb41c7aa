"""Result values of a check: trace steps, counterexamples, per-action coverage, the result."""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping
from types import MappingProxyType

import attrs

__all__ = [
    "ABSENT",
    "DEADLOCK_DETAIL",
    "ActionCoverage",
    "CheckResult",
    "CounterExample",
    "TraceStep",
    "ViolationKind",
    "WitnessResult",
]

ABSENT = "<absent>"
"""Shown as the old or new value of a field that ``describe`` omits on one side of a step."""


def _freeze_mapping(value: Mapping[str, object]) -> Mapping[str, object]:
    return MappingProxyType(dict(value))


def _freeze_changes(
    value: Mapping[str, tuple[object, object]],
) -> Mapping[str, tuple[object, object]]:
    return MappingProxyType(dict(value))


class ViolationKind(enum.StrEnum):
    """What a counterexample shows."""

    INVARIANT = "invariant"  # a reachable state breaks a named safety predicate
    DEADLOCK = "deadlock"  # no action enabled, not terminal, not quiescent by bound, not recovered
    RECOVERABILITY = "recoverability"  # with faults stopped, no recovered state is reachable
    WITNESS = "witness"  # a "sometimes" property holds in no reachable state (vacuity)
    COVERAGE = "coverage"  # an action never fired and is not declared unreachable


@attrs.frozen(kw_only=True)
class TraceStep:
    """One numbered step of a trace, as printed by :func:`format_trace`.

    Step 0 is the initial state: ``action`` is ``None`` and ``fields`` holds every field. A later
    step names the action instance taken and ``changed`` maps each field it changed to
    ``(old, new)``; ``fields`` is the full state after the step (for JSON export).
    """

    index: int = attrs.field(validator=attrs.validators.ge(0))
    action: str | None
    args: tuple[Hashable, ...] = ()
    changed: Mapping[str, tuple[object, object]] = attrs.field(
        factory=dict, converter=_freeze_changes
    )
    fields: Mapping[str, object] = attrs.field(factory=dict, converter=_freeze_mapping)


@attrs.frozen(kw_only=True)
class CounterExample:
    """A violated property with the shortest (BFS) or minimised (simulation) trace showing it.

    ``actions`` is the trace as ``(action, args)`` pairs from ``steps[0]``'s initial state (what
    :func:`~tent_models.checker.replay` and conformance replay consume); it is empty for witness
    and coverage failures, which have no trace. ``detail`` adds context in words. ``compared``
    holds the values a violated invariant reported comparing in the last state (an invariant
    that returns a :class:`~tent_models.Verdict`); it is empty for a plain ``bool`` invariant.
    """

    kind: ViolationKind
    name: str
    cites: str = ""
    steps: tuple[TraceStep, ...] = ()
    actions: tuple[tuple[str, tuple[Hashable, ...]], ...] = ()
    detail: str = ""
    compared: Mapping[str, object] = attrs.field(factory=dict, converter=_freeze_mapping)


@attrs.frozen(kw_only=True)
class ActionCoverage:
    """Per-action counts: states where it was enabled, transitions it fired, new states found."""

    action: str
    enabled: int = attrs.field(validator=attrs.validators.ge(0))
    fired: int = attrs.field(validator=attrs.validators.ge(0))
    new_states: int = attrs.field(validator=attrs.validators.ge(0))
    declared_unreachable: bool = False


@attrs.frozen(kw_only=True)
class WitnessResult:
    """Whether a "sometimes" witness was satisfied, and the shortest trace to a state that does."""

    name: str
    satisfied: bool
    steps: tuple[TraceStep, ...] = ()


@attrs.frozen(kw_only=True)
class CheckResult:
    """The outcome of :func:`~tent_models.checker.check` or :func:`~tent_models.checker.simulate`.

    ``ok`` is true when no violation was found. ``exhaustive`` is true only when BFS explored the
    whole bounded state space (no ``max_states`` cut, no early stop on a safety violation, not a
    simulation): coverage, witnesses and recoverability are judged only then.
    ``bytes_per_state`` estimates the checker's own storage (seen set, parent links, edges) per
    distinct state; ``collision_probability`` is the birthday bound for 64-bit fingerprints and
    ``collision_probability_tlc`` TLC's optimistic ``n (generated - n) / 2**64``.
    ``shard_states`` is each shard's share of the seen set in a multi-process or Ray run
    (they sum to ``distinct_states``), empty otherwise.
    """

    model: str
    mode: str  # "bfs" or "simulation"
    ok: bool
    exhaustive: bool
    distinct_states: int
    transitions: int
    depth: int
    seconds: float
    states_per_second: float
    bytes_per_state: float
    collision_probability: float
    collision_probability_tlc: float
    symmetry: bool
    workers: int
    coverage: tuple[ActionCoverage, ...]
    witnesses: tuple[WitnessResult, ...]
    violations: tuple[CounterExample, ...]
    shard_states: tuple[int, ...] = ()  # distinct states stored by each shard (sharded runs)
    bitstate: int = 0  # log2 of the bit array of a bitstate run (then collision_probability
    # is the expected number of states omitted, capped at 1); 0 for an exact seen set


DEADLOCK_DETAIL = (
    "no action is enabled in the last state, and it is not terminal (the model's is_terminal), "
    "quiescent by bound or recovered"
)
"""Why a deadlock is one, in every checker mode (declare a finished protocol's states with
``is_terminal``, or judge no deadlocks: ``tent check --no-deadlock``)."""
