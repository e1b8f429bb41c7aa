"""The structural interface between a specification module and the generic model checker.

A spec module (in ``tent_spec``) never imports this file (the spec stands alone,
docs/design.md#principle-2); it provides a class that *structurally* satisfies :class:`SpecModel`.
The checker (``tent_models.checker``) only ever talks to a spec through this Protocol.

Conventions every spec model follows:

* A state is an immutable value built only from ``int``, ``bool``, ``str``, ``None``, tuples,
  frozensets and ``typing.NamedTuple`` instances of those (readable for reviewers).
* ``pack(state)`` returns the compact encoding the checker hashes and stores: a (nested) plain
  ``tuple`` of ``int`` only, equal for equal states, different for different states.
* ``successors(state)`` yields ``Step(action, args, next_state)`` for every *enabled* action
  instance. ``args`` are explicit, hashable, plain values (ints/strs/tuples): which sender, which
  message, which charge, which owner, which window. The conformance runner replays the very
  same ``(action, args)`` on the implementation, so args must be meaningful on their own.
* ``apply(state, action, args)`` returns the successor of one action instance, or ``None`` if its
  guard is false (used by trace validation and conformance replay); ``explain(state, action,
  args)`` says which guard failed, in words.

Optionally, for speed only, a model may also provide ``fingerprinted_successors``,
``fingerprint`` and ``invariants_hold`` (see :mod:`tent_models.checker._fastpath`); each must
equal what it replaces, and ``tent_models.checker.PlainModel`` hides them for a cross-check.

A readable model whose state is a frozen dataclass or ``NamedTuple`` of components gets the
same kind of speed-up without a hand-written fast path by declaring, also optionally,
``footprints() -> Mapping[action, Footprint]`` (the fields each action reads and writes) and
``action_successors(state, action)`` (that action's steps; chained over ``action_names()``
they are ``successors(state)``). The checker then memoises each action's steps per value of
the fields it reads (:mod:`tent_models.checker._components`).

For sequence charts (``tent check --html``), a model may also declare ``lifelines()`` and
``locate(state, action, args)``: its nodes, and which node takes each step or which two a
message goes between (:mod:`tent_models.report._lifelines`, docs/charts.md).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar

S = TypeVar("S")


class Step(NamedTuple):
    """One enabled action instance and the state it leads to."""

    action: str
    args: tuple[Hashable, ...]
    state: Any


class Footprint(NamedTuple):
    """The top-level state fields an action's guard and effect read and the ones it writes."""

    reads: tuple[str, ...]
    writes: tuple[str, ...]


class Invariant(NamedTuple):
    """A named safety predicate. ``cites`` quotes the RFC rule / acceptance criterion it encodes.

    ``compared`` (optional) names the values the predicate compares in a state, for the
    ``compared:`` line of a counterexample; it is called only on a violating state.
    """

    name: str
    cites: str
    holds: Callable[[Any], bool]
    compared: Callable[[Any], Mapping[str, object]] | None = None


class Witness(NamedTuple):
    """A "sometimes" property: some reachable state must satisfy ``holds`` (non-vacuity)."""

    name: str
    holds: Callable[[Any], bool]


def no_symmetry(self: Any, state: S) -> S:
    """A ``canonicalize`` for a model without symmetry (``canonicalize = no_symmetry`` in the
    class body): every state is its own representative. The checker recognises it and skips
    the call (and, for a model with footprints, builds only the successors that are new)."""
    return state


class SpecModel(Protocol[S]):
    """What the checker needs from a specification instantiated with concrete bounds."""

    name: str

    def initial_states(self) -> Iterable[S]: ...

    def successors(self, state: S) -> Iterable[Step]: ...

    def apply(self, state: S, action: str, args: tuple[Hashable, ...]) -> S | None: ...

    def explain(self, state: S, action: str, args: tuple[Hashable, ...]) -> str: ...

    def action_names(self) -> Sequence[str]:
        """Every action of the model (for per-action coverage)."""
        ...

    def unreachable_actions(self) -> frozenset[str]:
        """Actions the model declares can never fire under its bounds (coverage exempts them)."""
        ...

    def fault_actions(self) -> frozenset[str]:
        """Actions that are faults (duplicate, lose, restart, ...): disabled when faults stop."""
        ...

    def invariants(self) -> Sequence[Invariant]: ...

    def witnesses(self) -> Sequence[Witness]: ...

    def pack(self, state: S) -> tuple[Any, ...]: ...

    def canonicalize(self, state: S) -> S:
        """Symmetry reduction: a representative of the state's orbit (identity when none)."""
        ...

    def within_bounds(self, state: S) -> bool:
        """State constraint: successors of a state outside the bounds are not explored."""
        ...

    def quiescent_by_bound(self, state: S) -> bool:
        """True when the only actions left are ones the bounds cap (not a deadlock)."""
        ...

    # A model may also have ``is_terminal(state) -> bool``: a finished protocol's state, not a
    # deadlock either (tent_models.Model has it). It is optional, read by :func:`ends_by_design`.

    def recovered(self, state: S) -> bool:
        """Recoverability goal: all credit usable again and no owner stuck."""
        ...

    def describe(self, state: S) -> Mapping[str, object]:
        """A flat ``field -> value`` view of the state for diff-only counterexample display."""
        ...


def ends_by_design(model: SpecModel[Any]) -> Callable[[Any], bool]:
    """The checker's test for a state without successors that is *not* a deadlock.

    True when the state is quiescent by a bound (``model.quiescent_by_bound``) or terminal
    (``model.is_terminal``, when the model has it: the spec's own models do not).
    """
    bound = model.quiescent_by_bound
    terminal = getattr(model, "is_terminal", None)
    if terminal is None:
        return bound
    return lambda state: bool(bound(state) or terminal(state))
