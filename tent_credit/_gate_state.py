"""What the dispatch gate keeps: routes, tickets, and the registries that hold them.

:class:`GateToken` (a ticket, made only by the gate) and ``_Route`` (one (receiver, class)
route's counters and waiting demand) are the records; :class:`_GateState` creates the gate's
registries, finds a route and an owner's context, and snapshots it all
(:meth:`~tent_credit.DispatchGate.statistics`). :class:`~tent_credit._gate.DispatchGate` is this
base under mixins split by responsibility, each over the one before: :mod:`._gate_stalls` (credit
stalls and the idle-credit settlement), :mod:`._gate_settle` (the tickets' lifecycle),
:mod:`._gate_routes` (registering and fencing routes), and :mod:`._gate` (the decision itself).
The records live here, below all of them, because every part reads them.
"""

from __future__ import annotations

import types
from typing import NamedTuple

from ._arith import U32_MAX, U64_MAX, check_u64
from ._backpressure import BackpressureInfo
from ._describe import describe
from ._endpoints import SenderEndpoint
from ._gate_values import (
    CreditStall,
    DispatchContext,
    GateConfig,
    GatedOwner,
    GateStatistics,
    RouteStatistics,
    TicketState,
)
from ._ledger import ReservationToken
from ._negotiation import CreditMode
from ._types import CreditCharge, CreditKey, CreditResource, SessionId
from .errors import InvalidArgument, InvalidEntry


def _current(endpoint: SenderEndpoint) -> tuple[SessionId, int] | None:
    """The endpoint's current ``(session, epoch)`` (``None`` before its first activation): what
    a pinned context must still name. Its fields, not its properties: read at every pick."""
    key = endpoint._key
    return None if key is None else (key.receiver_session, endpoint._epoch)


class GateToken:
    """The handle an eligible owner carries (``Picked.token``), made only by the gate.

    A credit token wraps the endpoint's :class:`ReservationToken` (``reservation``); a legacy
    token (``legacy``) holds one slot of the peer's bounded legacy window and no credit.
    Read-only: ``ticket_id``, ``owner_id``, ``receiver``, ``qos_class``, ``charge``,
    ``reservation``, ``legacy``, ``state``.
    """

    __slots__ = ("_charge", "_gate", "_owner_id", "_reservation", "_route", "_state", "_ticket")

    def __init__(
        self,
        gate: _GateState,
        *,
        ticket: int,
        owner_id: int,
        route: _Route,
        charge: CreditCharge,
        reservation: ReservationToken | None,
    ) -> None:
        self._gate = gate
        self._ticket = ticket
        self._owner_id = owner_id
        self._route = route
        self._charge = charge
        self._reservation = reservation
        self._state = TicketState.RESERVED

    @property
    def ticket_id(self) -> int:
        return self._ticket

    @property
    def owner_id(self) -> int:
        return self._owner_id

    @property
    def receiver(self) -> int:
        return self._route.receiver

    @property
    def qos_class(self) -> int:
        return self._route.qos_class

    @property
    def charge(self) -> CreditCharge:
        return self._charge

    @property
    def reservation(self) -> ReservationToken | None:
        return self._reservation

    @property
    def legacy(self) -> bool:
        return self._reservation is None

    @property
    def state(self) -> TicketState:
        return self._state

    def __repr__(self) -> str:
        kind = "legacy" if self.legacy else "credit"
        return (
            f"GateToken(ticket_id={self._ticket}, owner_id={self._owner_id}, "
            f"route={self._route.ident}, {kind}, state={self._state.name})"
        )


class _Route:
    """Mutable state of one (receiver, class) route."""

    def __init__(self, receiver: int, endpoint: SenderEndpoint, buckets: int) -> None:
        self.receiver = receiver
        self.qos_class = endpoint.qos_class
        self.endpoint = endpoint
        self.waiting: dict[CreditResource, int] = {}
        # the charges of its credit-stalled owners in queue order (the gate keeps that order
        # within a key): the first is the head the endpoint states its level in
        self.stall_charges: dict[int, dict[CreditResource, int]] = {}
        self.stalled_owners = 0
        self.stalled_bytes = 0
        self.last_info: BackpressureInfo | None = None
        self.bucket_counts = [0] * buckets
        self.stalls_ended = 0
        self.stall_ns_total = 0
        self.reserved = 0
        self.committed = 0
        self.rolled_back = 0
        self.completed = 0
        self.blocked = 0
        self.legacy_in_flight = 0
        self.legacy_fallbacks = 0
        self.rejected_snapshots = 0
        self.rejected_failed = 0
        self.idle_returns = 0
        # The (key, epoch) of the endpoint entry on which owners left and the demand was
        # lowered: a grant the receiver sends for the old demand may still arrive, so every
        # observe_pick settles this route again while that entry lives (DispatchGate's step 6).
        self.withdrawn: tuple[CreditKey | None, int] | None = None

    @property
    def ident(self) -> tuple[int, int]:
        return (self.receiver, self.qos_class)

    def head(self) -> dict[CreditResource, int] | None:
        """The charge of the route's first credit-stalled owner (``None``: none stalls)."""
        return next(iter(self.stall_charges.values()), None)


class _Repeat(NamedTuple):
    """What a credit-stalled owner's last pick saw and answered (``DispatchGate.__call__``)."""

    context: object
    length: int
    route: _Route
    waiting: dict[CreditResource, int]
    stamp: tuple[object, ...]
    decision: object


class _GateState:
    """The registries of a :class:`DispatchGate` and the lookups every part of it uses (module
    docstring); not used on its own."""

    def __init__(self, config: GateConfig | None = None) -> None:
        """Raises :class:`InvalidArgument` if ``config`` is not a :class:`GateConfig`."""
        if config is None:
            config = GateConfig()
        if not isinstance(config, GateConfig):
            raise InvalidArgument(f"config must be a GateConfig, got {type(config).__name__}")
        self._config = config
        self._mode = config.mode
        self._routes: dict[tuple[int, int], _Route] = {}
        self._stalls: dict[int, tuple[_Route, CreditStall]] = {}
        # Whether ``_stalls`` (insertion-ordered) is also ordered by ``since_ns``, as it is
        # when the gate is driven with a clock that never goes back (the dispatch core's):
        # then a receiver's oldest stall is its first one (``oldest_stall``).
        self._stalls_in_order = True
        self._unsettled: dict[int, GateToken] = {}
        self._next_ticket = 1
        self._no_credit = 0
        # Routes removed recently (at most max_routes, oldest forgotten first): an unpinned
        # owner of one is rejected as ROUTE_REMOVED instead of raising InvalidEntry (misuse).
        self._removed: dict[tuple[int, int], None] = {}
        # Routes an owner left without using its credit since the last settlement
        # (step 6 of DispatchGate's docstring), or only settled again (``withdrawn``): their
        # demand and idle credit are settled next.
        self._settle_due: dict[tuple[int, int], _Route] = {}
        # A credit-stalled owner's last blocked answer, while its endpoint can vouch that asking
        # again would change nothing (``SenderEndpoint.repeat_stamp``): the owner is asked at
        # every dispatch pass until a grant comes. Dropped when the stall ends.
        self._repeats: dict[int, _Repeat] = {}

    @property
    def config(self) -> GateConfig:
        return self._config

    @property
    def mode(self) -> CreditMode:
        return self._mode

    def _route(self, receiver: int, qos_class: int) -> _Route:
        if type(receiver) is not int or not 0 <= receiver <= U64_MAX:  # inline: every pick
            check_u64(receiver, "receiver")
        if type(qos_class) is not int or not 0 <= qos_class <= U32_MAX:
            raise InvalidArgument(f"qos_class must be a u32 int, got {describe(qos_class)}")
        route = self._routes.get((receiver, qos_class))
        if route is None:
            raise InvalidEntry(f"no endpoint registered for receiver {receiver} class {qos_class}")
        return route

    def _context_of(self, owner: GatedOwner) -> DispatchContext:
        ctx = owner.context
        if not isinstance(ctx, DispatchContext):
            raise InvalidArgument(
                f"owner {owner.owner_id}: context must be a DispatchContext, "
                f"got {type(ctx).__name__}"
            )
        if owner.gate_key != ctx.gate_key:
            raise InvalidArgument(
                f"owner {owner.owner_id}: gate_key {describe(owner.gate_key)} must be the "
                f"context's {describe(ctx.gate_key)} (else the queue cannot keep order within a "
                "credit key)"
            )
        return ctx

    # ---------------------------------------------------------------- statistics

    def statistics(self) -> GateStatistics:
        """A frozen snapshot of the gate and its routes (in registration order)."""
        bounds = self._config.stall_buckets_ns
        routes = []
        for route in self._routes.values():
            cumulative = 0
            buckets = []
            for bound, count in zip(bounds, route.bucket_counts, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            routes.append(
                RouteStatistics(
                    receiver=route.receiver,
                    qos_class=route.qos_class,
                    state=route.endpoint.state,
                    stalled_owners=route.stalled_owners,
                    stalled_bytes=route.stalled_bytes,
                    waiting=types.MappingProxyType(dict(route.waiting)),
                    stalls_ended=route.stalls_ended,
                    stall_ns_total=route.stall_ns_total,
                    stall_buckets=tuple(buckets),
                    reserved=route.reserved,
                    committed=route.committed,
                    rolled_back=route.rolled_back,
                    completed=route.completed,
                    blocked=route.blocked,
                    legacy_in_flight=route.legacy_in_flight,
                    legacy_fallbacks=route.legacy_fallbacks,
                    rejected_snapshots=route.rejected_snapshots,
                    rejected_failed=route.rejected_failed,
                    idle_returns=route.idle_returns,
                )
            )
        return GateStatistics(
            mode=self._mode,
            routes=tuple(routes),
            no_credit_dispatches=self._no_credit,
            unsettled_tokens=len(self._unsettled),
        )
