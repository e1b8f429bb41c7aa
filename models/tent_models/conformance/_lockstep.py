"""The generic lockstep core: drive a spec and an implementation with the same operations.

docs/design.md#principle-3 ("refinement is checked, not assumed"). A spec model (anything satisfying
:class:`~tent_models.model_api.SpecModel`) and an :class:`ImplementationAdapter` receive the same
``(action, args)`` instances. After every step the runner compares the adapter's abstraction of
the implementation with the adapter's projection of the spec state (both are spec states: the
projection erases what the implementation cannot show), and checks the spec's invariants on the
abstracted state. The first disagreement is a :class:`Divergence`, printed with the checker's
numbered, diff-only trace format (:func:`tent_models.checker.format_trace`).

Guards. When the spec's guard is false, the adapter says what the implementation must do instead
(:meth:`ImplementationAdapter.refusal`): raise a typed error, or accept the call as a no-op, and
in both cases change nothing. Some guards are bounds of the model rather than protocol rules (a
window the configuration does not list, a clock bound); the adapter answers ``None`` for those
and the runner does not perform the step at all.
"""

from __future__ import annotations

import enum
import traceback
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Generic, Protocol, TypeVar

import attrs

from tent_models.checker import TraceStep, format_trace, trace_steps
from tent_models.model_api import SpecModel

__all__ = [
    "ActionInstance",
    "ConformanceFailure",
    "Divergence",
    "DivergenceKind",
    "ImplementationAdapter",
    "Lockstep",
    "Outcome",
    "OutcomeKind",
    "StepVerdict",
    "minimise_divergence",
    "run_lockstep",
]

S = TypeVar("S")

ActionInstance = tuple[str, tuple[Hashable, ...]]


class OutcomeKind(enum.StrEnum):
    """What the implementation did with one operation."""

    APPLIED = "applied"  # the call returned and took effect
    UNCHANGED = "unchanged"  # the call returned and is documented as a no-op in this state
    RAISED = "raised"  # the call raised one of the package's typed errors


@attrs.frozen(kw_only=True)
class Outcome:
    """The implementation's answer to one operation, compared by kind and error class name.

    ``message`` (the error text) is shown in reports but does not take part in equality.
    """

    kind: OutcomeKind
    error: str = ""
    message: str = attrs.field(default="", eq=False)

    @classmethod
    def applied(cls) -> Outcome:
        """The call took effect."""
        return cls(kind=OutcomeKind.APPLIED)

    @classmethod
    def unchanged(cls) -> Outcome:
        """The call was accepted as a no-op."""
        return cls(kind=OutcomeKind.UNCHANGED)

    @classmethod
    def raised(cls, error: type[BaseException], message: str = "") -> Outcome:
        """The call raised ``error`` (compared by class name)."""
        return cls(kind=OutcomeKind.RAISED, error=error.__name__, message=message)

    def __str__(self) -> str:
        if self.kind is OutcomeKind.RAISED:
            return f"raised {self.error}" + (f" ({self.message})" if self.message else "")
        return str(self.kind)


class ConformanceFailure(Exception):
    """Raised by an adapter *during* an operation when the implementation does something the
    spec rules out before the call even returns (for example it consults the credit gate about
    an owner the spec's scan would not ask). The runner turns it into a :class:`Divergence`."""


class ImplementationAdapter(Protocol[S]):
    """What the lockstep runner needs from one implementation under test.

    An adapter owns one fresh implementation object plus the harness state the spec models but
    the implementation takes as call arguments (a clock, a bandwidth estimate).
    """

    def perform(self, action: str, args: tuple[Hashable, ...]) -> Outcome:
        """Apply one spec action instance to the implementation and say what it did.

        Typed errors of the implementation are outcomes (``Outcome.raised``); a mismatch found
        during the call raises :class:`ConformanceFailure`.
        """
        ...

    def refusal(self, state: S, action: str, args: tuple[Hashable, ...]) -> Outcome | None:
        """What the implementation must do when the spec's guard of ``action(args)`` is false in
        ``state``; ``None`` when the guard is a bound of the model with no implementation
        counterpart (the step is then not performed)."""
        ...

    def abstract(self) -> S:
        """The abstraction function: the implementation's public state as a spec state."""
        ...

    def project(self, state: S) -> S:
        """The spec state with what the implementation cannot show erased, so that
        ``abstract() == project(spec_state)`` is the refinement check."""
        ...


class DivergenceKind(enum.StrEnum):
    """How the implementation departed from the spec."""

    STATE = "state"  # abstract(impl) != project(spec) after a step
    OUTCOME = "outcome"  # applied / unchanged / raised differs from what the spec implies
    INVARIANT = "invariant"  # a spec invariant fails on the abstracted implementation state
    CALL = "call"  # the adapter saw a mismatch during the call (ConformanceFailure)
    CRASH = "crash"  # the implementation raised something that is not a typed outcome


@attrs.frozen(kw_only=True)
class Divergence:
    """The first disagreement between spec and implementation, with its trace.

    ``steps`` is the spec's execution in the checker's trace format (step 0 is the initial state;
    a refused step appears with no field changed). ``actions`` are the performed ``(action,
    args)`` instances, the divergent one last: :func:`run_lockstep` with them reproduces it.
    ``mismatch`` maps every differing field of the spec's ``describe`` view to ``(spec value,
    implementation value)`` for a STATE divergence.
    """

    kind: DivergenceKind
    step: int
    action: str | None
    args: tuple[Hashable, ...]
    detail: str
    mismatch: Mapping[str, tuple[object, object]] = attrs.field(factory=dict)
    steps: tuple[TraceStep, ...] = ()
    actions: tuple[ActionInstance, ...] = ()

    def format(self, *, full: bool = False) -> str:
        """The trace in the checker's format, then the divergence and the differing fields.

        Diff-only by default: the initial state shows only the fields that a later step
        changes or that differ at the divergence (the others are counted); ``full`` shows every
        field of the initial state.
        """
        steps = self.steps if full else self._diff_only_steps()
        hidden = len(self.steps[0].fields) - len(steps[0].fields) if steps else 0
        trace = format_trace(
            steps, violated=f"conformance ({self.kind}) at step {self.step}", cites=""
        ).split("\n")
        if hidden:
            trace.insert(1, f"    ({hidden} field(s) that never change are not shown)")
        lines = [*trace, f"    {self.detail}"]
        lines.extend(
            f"    {key}: spec {spec!r} / implementation {impl!r}"
            for key, (spec, impl) in self.mismatch.items()
        )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()

    def _diff_only_steps(self) -> tuple[TraceStep, ...]:
        if not self.steps:
            return ()
        relevant = set(self.mismatch)
        for step in self.steps[1:]:
            relevant.update(step.changed)
        first = self.steps[0]
        kept = {k: v for k, v in first.fields.items() if k in relevant}
        return (attrs.evolve(first, fields=kept), *self.steps[1:])


class StepVerdict(enum.StrEnum):
    """What :meth:`Lockstep.step` did with one action instance."""

    APPLIED = "applied"  # enabled in the spec, applied to both, states agree
    REFUSED = "refused"  # disabled in the spec, the implementation refused it the same way
    NOT_PERFORMED = "not_performed"  # disabled by a model bound: neither side was touched


_ABSENT = "<absent>"


def _mismatch(
    spec_view: Mapping[str, object], impl_view: Mapping[str, object]
) -> dict[str, tuple[object, object]]:
    keys = list(spec_view) + [k for k in impl_view if k not in spec_view]
    return {
        key: (spec_view.get(key, _ABSENT), impl_view.get(key, _ABSENT))
        for key in keys
        if spec_view.get(key, _ABSENT) != impl_view.get(key, _ABSENT)
    }


class Lockstep(Generic[S]):
    """One lockstep run of ``spec`` and an adapter's implementation, step by step.

    Construction compares the initial states (``initial``, or the spec's first initial state).
    After the first divergence the run is over: :attr:`divergence` keeps it and further
    :meth:`step` calls return it again without touching either side.
    """

    def __init__(
        self, spec: SpecModel[S], adapter: ImplementationAdapter[S], *, initial: S | None = None
    ) -> None:
        """Raises :class:`ValueError` when the spec has no initial state (nothing is run)."""
        if initial is None:
            initials = list(spec.initial_states())
            if not initials:
                raise ValueError(f"model {spec.name!r} has no initial state")
            initial = initials[0]
        self._spec = spec
        self._adapter = adapter
        self._invariants = tuple(spec.invariants())
        self._states: list[S] = [initial]
        self._actions: list[ActionInstance] = []
        self.divergence: Divergence | None = None
        self.divergence = self._compare(step=0, action=None, args=())

    @property
    def state(self) -> S:
        """The spec's current state."""
        return self._states[-1]

    @property
    def actions(self) -> tuple[ActionInstance, ...]:
        """The action instances performed so far (refused ones included)."""
        return tuple(self._actions)

    def step(self, action: str, args: tuple[Hashable, ...]) -> StepVerdict | Divergence:
        """Apply ``action(args)`` to the spec and the implementation and compare.

        1. Spec guard true: the implementation must answer APPLIED; then ``abstract()`` must
           equal ``project(next spec state)`` and every spec invariant must hold on it.
        2. Spec guard false: ``refusal`` names the expected outcome; ``None`` → nothing is
           performed. Otherwise the implementation must answer exactly that outcome and its
           abstraction must not change.

        Returns the :class:`StepVerdict`, or the :class:`Divergence` (also kept in
        :attr:`divergence`).
        """
        if self.divergence is not None:
            return self.divergence
        state = self.state
        nxt = self._spec.apply(state, action, args)
        expected = Outcome.applied() if nxt is not None else None
        if nxt is None:
            expected = self._adapter.refusal(state, action, args)
            if expected is None:
                return StepVerdict.NOT_PERFORMED
        before = self._adapter.abstract()
        self._actions.append((action, args))
        self._states.append(state if nxt is None else nxt)
        index = len(self._actions)
        try:
            outcome = self._adapter.perform(action, args)
        except ConformanceFailure as failure:
            return self._diverge(DivergenceKind.CALL, index, action, args, str(failure))
        except Exception as error:  # an untyped error is itself the divergence (principle 8)
            text = "".join(traceback.format_exception_only(error)).strip()
            return self._diverge(
                DivergenceKind.CRASH, index, action, args, f"implementation raised {text}"
            )
        if outcome != expected:
            guard = "enabled" if nxt is not None else self._spec.explain(state, action, args)
            return self._diverge(
                DivergenceKind.OUTCOME,
                index,
                action,
                args,
                f"expected the implementation to be {expected} (spec: {guard}), but it {outcome}",
            )
        if nxt is None:
            after = self._adapter.abstract()
            if after != before:
                return self._diverge(
                    DivergenceKind.STATE,
                    index,
                    action,
                    args,
                    f"the refused call ({outcome}) changed the implementation",
                    mismatch=_mismatch(self._spec.describe(before), self._spec.describe(after)),
                )
            return StepVerdict.REFUSED
        divergence = self._compare(index, action, args)
        if divergence is not None:
            self.divergence = divergence
            return divergence
        return StepVerdict.APPLIED

    def trace(self) -> tuple[TraceStep, ...]:
        """The spec's execution so far in the checker's trace format."""
        return trace_steps(self._spec, self._states, self._actions)

    def _compare(
        self, step: int, action: str | None, args: tuple[Hashable, ...]
    ) -> Divergence | None:
        abstracted = self._adapter.abstract()
        projected = self._adapter.project(self.state)
        if abstracted != projected:
            return self._make(
                DivergenceKind.STATE,
                step,
                action,
                args,
                "the implementation's abstraction differs from the spec state",
                mismatch=_mismatch(self._spec.describe(projected), self._spec.describe(abstracted)),
            )
        for invariant in self._invariants:
            if not invariant.holds(abstracted):
                return self._make(
                    DivergenceKind.INVARIANT,
                    step,
                    action,
                    args,
                    f"invariant {invariant.name} fails on the implementation "
                    f"(cites: {invariant.cites})",
                )
        return None

    def _diverge(
        self,
        kind: DivergenceKind,
        step: int,
        action: str,
        args: tuple[Hashable, ...],
        detail: str,
        *,
        mismatch: Mapping[str, tuple[object, object]] | None = None,
    ) -> Divergence:
        self.divergence = self._make(kind, step, action, args, detail, mismatch=mismatch)
        return self.divergence

    def _make(
        self,
        kind: DivergenceKind,
        step: int,
        action: str | None,
        args: tuple[Hashable, ...],
        detail: str,
        *,
        mismatch: Mapping[str, tuple[object, object]] | None = None,
    ) -> Divergence:
        return Divergence(
            kind=kind,
            step=step,
            action=action,
            args=args,
            detail=detail,
            mismatch=dict(mismatch or {}),
            steps=self.trace(),
            actions=self.actions,
        )


def minimise_divergence(
    replay: Callable[[Sequence[ActionInstance]], Divergence | None],
    divergence: Divergence,
    *,
    max_replays: int = 2_000,
) -> Divergence:
    """A shorter run that diverges the same way (same kind, at the same action), found by
    replaying ``divergence.actions`` with steps removed, as the checker minimises
    (:func:`tent_models.checker.minimise`).

    ``replay(actions)`` runs ``actions`` on a fresh spec and implementation in lockstep and
    returns the first divergence or ``None``. Policy (delta debugging over steps):

    1. Replay the recorded actions; if that does not diverge the same way (the divergence is
       not reproducible, e.g. it needed a harness draw), return ``divergence`` unchanged.
    2. For chunk sizes ``len // 2``, ``len // 4``, ..., 1: delete each chunk in turn and keep
       the deletion when the replay still diverges the same way (its actions end at the
       divergence, so later steps fall away too).
    3. Repeat 2 until no single step can be deleted (1-minimal), or until ``max_replays``
       replays were spent (the shortest divergence found so far is returned).
    """

    def same(found: Divergence | None) -> bool:
        return (
            found is not None
            and found.kind is divergence.kind
            and found.action == divergence.action
        )

    replays = 1
    best = replay(divergence.actions)
    if best is None or not same(best):
        return divergence
    changed = True
    while changed and replays < max_replays:
        changed = False
        chunk = max(len(best.actions) // 2, 1)
        while chunk >= 1 and replays < max_replays:
            start = 0
            while start < len(best.actions) - 1 and replays < max_replays:
                # the last action is the divergent one: it always stays
                current = best.actions
                candidate = current[:start] + current[start + chunk :]
                if not candidate or candidate[-1] != current[-1]:
                    start += chunk
                    continue
                found = replay(candidate)
                replays += 1
                if found is not None and same(found) and len(found.actions) < len(current):
                    best = found
                    changed = True
                else:
                    start += chunk
            chunk //= 2
    return best


def run_lockstep(
    spec: SpecModel[S],
    adapter: ImplementationAdapter[S],
    actions: Iterable[ActionInstance],
    *,
    initial: S | None = None,
) -> Divergence | None:
    """Run ``actions`` through a fresh :class:`Lockstep`; the first divergence, or ``None``.

    Steps the spec refuses are checked as refusals; steps disabled by a model bound are not
    performed (see :meth:`Lockstep.step`).
    """
    lockstep = Lockstep(spec, adapter, initial=initial)
    for action, args in actions:
        verdict = lockstep.step(action, args)
        if isinstance(verdict, Divergence):
            return verdict
    return lockstep.divergence
