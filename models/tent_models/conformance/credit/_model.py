"""The spec side of the credit harness: the resource order, the harness's timer settings,
:func:`conformance_bounds` / :data:`CONFORMANCE_BOUNDS` (mapping rule 11) and
:class:`EagerGrantSpec`, the spec scheduled the way the implementation grants (mapping rule 1).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, cast

from tent_spec.credit import (
    CreditBounds,
    CreditSpec,
    CreditState,
    Faults,
    Usage,
)

from tent_credit import CreditResource

RESOURCES: tuple[CreditResource, ...] = tuple(CreditResource)
"""Spec resource index ``r`` is ``RESOURCES[r]`` (DATA_BYTES, REQUEST_SLOTS, ...)."""

USAGE_INTERVAL_NS = 1
FRESHNESS_TTL_MS = 1_000
REFRESH_INTERVAL_NS = 1_000_000
_TTL_NS = FRESHNESS_TTL_MS * 1_000_000
_LIFTED = 1 << 30  # a bound that a conformance run never reaches
_NO_FAULTS = Faults(0, 0, 0, 0, 0, 0)


def conformance_bounds(
    base: CreditBounds,
    *,
    max_receiver_restarts: int = _LIFTED,
    max_tokens: int | None = None,
) -> CreditBounds:
    """``base``'s sizes (senders, capacity, charges) with every cap a run could hit lifted.

    Fault budgets, the message bag, sequences, epochs and the grant total are unbounded in the
    implementation, so a bound there would disable steps it takes (mapping rule 11).
    """
    return CreditBounds(
        senders=base.senders,
        capacity=base.capacity,
        charges=base.charges,
        max_grant_total=_LIFTED,
        max_tokens=base.max_tokens if max_tokens is None else max_tokens,
        max_epoch=_LIFTED,
        max_messages=_LIFTED,
        max_duplications=_LIFTED,
        max_losses=_LIFTED,
        max_sender_restarts=_LIFTED,
        max_receiver_restarts=max_receiver_restarts,
        max_stale=_LIFTED,
        max_regressions=_LIFTED,
        max_seq=_LIFTED,
    )


CONFORMANCE_BOUNDS = CreditBounds(
    senders=2,
    capacity=(2, 1),
    charges=((1, 1), (1, 0)),
    max_grant_total=_LIFTED,
    max_tokens=2,
    max_epoch=_LIFTED,
    max_messages=_LIFTED,
    max_duplications=_LIFTED,
    max_losses=_LIFTED,
    max_sender_restarts=_LIFTED,
    max_receiver_restarts=_LIFTED,
    max_stale=_LIFTED,
    max_regressions=_LIFTED,
    max_seq=_LIFTED,
)
"""credit/tiny-like sizes with two senders and a partial charge (so multi-resource atomicity,
per-resource returns and contention matter), every cap lifted."""


# --------------------------------------------------------------------------------------------
# The spec with eager grants (mapping rule 1)
# --------------------------------------------------------------------------------------------


class EagerGrantSpec:
    """:class:`~tent_spec.credit.CreditSpec` scheduled the way the implementation grants.

    ``apply`` applies the action, then ``grant`` for the acting sender of a delivered usage
    report, then for every stalled sender in the receiver's push order, then for the rest in
    index order, each while enabled. Everything else is the spec's own (guards, invariants,
    ``explain``, ``describe``). Structurally a ``SpecModel``.

    ``push_order`` answers the sender indices the implementation's receiver pushes to next
    (:meth:`tent_credit.CreditReceiver.stalled_endpoints`, longest waiting first); without
    it, index order. The spec leaves open which stalled sender freed capacity goes to, so the
    scheduler takes that choice from the implementation (it resolves the spec's internal
    nondeterminism, like the eager firing itself); every grant it fires must still be one the
    spec allows, and the order policy itself is tested in ``tests/credit/test_push_order.py``.
    """

    def __init__(
        self, spec: CreditSpec, *, push_order: Callable[[], Sequence[int]] | None = None
    ) -> None:
        self.spec = spec
        self.bounds = spec.bounds
        self.name = f"{spec.name}+eager-grants"
        self._push_order = push_order

    def initial_states(self) -> list[CreditState]:
        return self.spec.initial_states()

    def apply(self, state: CreditState, action: str, args: tuple[Hashable, ...]) -> Any:
        nxt = self.spec.apply(state, action, args)
        if nxt is None:
            return None
        return self.grant_closure(nxt, action, args)

    def grant_closure(
        self, state: CreditState, action: str, args: tuple[Hashable, ...]
    ) -> CreditState:
        """Fire every enabled ``grant`` in the implementation's order (mapping rule 1)."""
        pushed = list(self._push_order()) if self._push_order is not None else []
        order = [*pushed, *(s for s in range(len(state.peers)) if s not in pushed)]
        if action == "deliver" and isinstance(args[1], Usage):
            first = cast("int", args[0])
            order.remove(first)
            order.insert(0, first)
        for s in order:
            granted = self.spec.apply(state, "grant", (s,))
            if granted is not None:
                state = granted
        return state

    def successors(self, state: CreditState) -> Iterable[Any]:
        for step in self.spec.successors(state):
            yield step._replace(state=self.grant_closure(step.state, step.action, step.args))

    def explain(self, state: CreditState, action: str, args: tuple[Hashable, ...]) -> str:
        return self.spec.explain(state, action, args)

    def action_names(self) -> Sequence[str]:
        return self.spec.action_names()

    def unreachable_actions(self) -> frozenset[str]:
        return self.spec.unreachable_actions()

    def fault_actions(self) -> frozenset[str]:
        return self.spec.fault_actions()

    def invariants(self) -> Sequence[Any]:
        return self.spec.invariants()

    def witnesses(self) -> Sequence[Any]:
        return self.spec.witnesses()

    def pack(self, state: CreditState) -> tuple[Any, ...]:
        return self.spec.pack(state)

    def canonicalize(self, state: CreditState) -> CreditState:
        return state

    def within_bounds(self, state: CreditState) -> bool:
        return self.spec.within_bounds(state)

    def quiescent_by_bound(self, state: CreditState) -> bool:
        return self.spec.quiescent_by_bound(state)

    def recovered(self, state: CreditState) -> bool:
        return self.spec.recovered(state)

    def describe(self, state: CreditState) -> Mapping[str, object]:
        return self.spec.describe(state)
