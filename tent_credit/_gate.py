"""The dispatch gate: receiver credit at dispatch eligibility (RFC "Dispatch Integration").

:class:`DispatchGate` is the ``eligibility`` callback of ``tent_sched``'s
``AdmissionQueue.pick_for_dispatch`` (docs/design.md#gate-at-eligibility). Neither package
imports the other: the gate reads owners through the :class:`GatedOwner` protocol and answers
with its own decision values, which carry the ``verdict`` the queue dispatches on
(``"eligible"`` / ``"blocked"`` / ``"rejected"``). Inside a pick the queue runs, per owner,
drop → byte window → this gate (docs/semantics.md#admission-queue)::

    TryAdmit(local owners/bytes)
      -> PickByLocalPolicy(FIFO/EDF, promotion, drop, byte window)
      -> DispatchGate: SenderEndpoint.try_reserve(charge_for_plan(plan, length))
           eligible: the caller submits, then gate.commit(token) or gate.rollback(token)
           blocked:  the owner stays queued in place; a credit stall is recorded and the
                     waiting charge becomes the endpoint's demand
           rejected: the owner's snapshot was fenced (or its peer failed negotiation)

The caller builds each owner with ``OwnerRequest(..., gate_key=ctx.gate_key, context=ctx)``
for a :class:`DispatchContext` ``ctx``; the gate refuses an owner whose ``gate_key`` differs
(the queue skips later owners of a blocked key only if they share it). The gate is sans-IO and
not thread-safe: one dispatch loop drives it, serially, with the queue and the endpoints.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Collection, Mapping
from typing import ClassVar, Literal

import attrs

from ._arith import U32_MAX, check_u64, checked_add, checked_sub
from ._backpressure import BackpressureInfo, BackpressureSource
from ._describe import describe
from ._endpoints import EndpointEvent, SenderEndpoint
from ._ledger import ReservationToken
from ._negotiation import CreditMode
from ._types import CreditCharge, CreditKey, CreditResource, Plan, SessionId
from .errors import ArithmeticOverflow, InvalidArgument, InvalidEntry, TooManyRequests

__all__ = [
    "DEFAULT_STALL_BUCKETS_NS",
    "GATE_POLICY",
    "TICKET_TRANSITIONS",
    "CreditStall",
    "DispatchContext",
    "DispatchGate",
    "GateAction",
    "GateBlocked",
    "GateConfig",
    "GateEligible",
    "GateRejected",
    "GateStatistics",
    "GateToken",
    "GatedOwner",
    "PickOutcome",
    "RejectReason",
    "RouteRemoval",
    "RouteStatistics",
    "TicketState",
]

from ._gate_values import (
    DEFAULT_STALL_BUCKETS_NS,
    GATE_POLICY,
    TICKET_TRANSITIONS,
    CreditStall,
    DispatchContext,
    GateAction,
    GateConfig,
    GatedOwner,
    GateStatistics,
    PickOutcome,
    RejectReason,
    RouteRemoval,
    RouteStatistics,
    TicketState,
    _check_owner,
    _owner_ids,
)


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
        gate: DispatchGate,
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


@attrs.frozen
class GateEligible:
    """Dispatch the owner; ``token`` is ``None`` when it needed no credit (READ/local plan or a
    DISABLED gate), else the :class:`GateToken` to commit or roll back."""

    verdict: ClassVar[Literal["eligible"]] = "eligible"
    token: GateToken | None


@attrs.frozen
class GateBlocked:
    """Keep the owner queued in place; ``info`` says why (RFC "Backpressure API")."""

    verdict: ClassVar[Literal["blocked"]] = "blocked"
    info: BackpressureInfo


@attrs.frozen
class GateRejected:
    """Fail the owner (the queue ends it FAILED: the value carries no ``status``)."""

    verdict: ClassVar[Literal["rejected"]] = "rejected"
    reason: RejectReason


_NO_CREDIT_NEEDED = GateEligible(None)


class _Route:
    """Mutable state of one (receiver, class) route."""

    def __init__(self, receiver: int, endpoint: SenderEndpoint, buckets: int) -> None:
        self.receiver = receiver
        self.qos_class = endpoint.qos_class
        self.endpoint = endpoint
        self.waiting: dict[CreditResource, int] = {}
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
        # observe_pick settles this route again while that entry lives (docstring step 6).
        self.withdrawn: tuple[CreditKey | None, int] | None = None

    @property
    def ident(self) -> tuple[int, int]:
        return (self.receiver, self.qos_class)


class DispatchGate:
    """Receiver-credit eligibility for ``tent_sched``'s admission queue (structurally its
    ``Eligibility`` protocol: ``gate(owner, now_ns) -> decision``).

    Per owner the queue asks about (after its drop and byte-window checks):

    1. DISABLED mode → eligible, no token, nothing read or recorded (identical to no gate).
    2. The owner's ``context`` must be a :class:`DispatchContext` and its ``gate_key`` equal to
       ``context.gate_key`` (else :class:`InvalidArgument`). A READ or local plan → eligible
       without a token: no remote ledger stalls it.
    3. The route ``(receiver, qos_class)`` must be registered (else :class:`InvalidEntry`).
    4. A ``snapshot`` that is not the route's current ``(session, epoch)`` → rejected
       (``SNAPSHOT_FENCED``); nothing is reserved.
    5. :data:`GATE_POLICY` by mode and the peer's negotiation state: RESERVE →
       ``try_reserve(charge_for_plan(plan, length))``: a token → eligible; backpressure →
       blocked, a stall recorded and the route's whole waiting charge set as the endpoint's
       pending demand. LEGACY → eligible with a legacy token while fewer than
       ``legacy_window`` are in flight on the route (a legacy fallback is counted), else
       blocked (source LOCAL_QUEUE, ``fallback_allowed``). REJECT → rejected
       (``NEGOTIATION_FAILED``).

    6. Idle credit (issue 10 item 8, docs/abuse.md "Idle credit goes back"): when an owner
       leaves a route without using credit (its refused submit was rolled back, or it was
       credit-stalled and was dropped, rejected, or canceled through :meth:`forget`), the gate
       gives back the route's available credit beyond what the owners still credit-stalled on
       it wait for (``SenderEndpoint.return_unused``), and sets the route's demand to what
       they wait for (``set_pending_demand(waiting)``; ``{}`` withdraws it). So a key whose
       work left cannot keep capacity that another key of the same receiver waits for
       (``gated/hoarding``). This runs at the end of :meth:`observe_pick` (for the owners the
       pick rejected or dropped), :meth:`forget` and :meth:`rollback`, never in the middle of
       a pick, and not for :meth:`rollback_unsettled` (its owners are still queued). An owner
       queued but never asked about is unknown to the gate: at its first pick it asks again.
       The receiver may still answer the demand as it was before (the report that lowered it
       is in flight): so once owners left a route, every later :meth:`observe_pick` settles it
       again the same way, until the endpoint's entry changes (a new session or epoch).

    Then the caller submits each picked owner: :meth:`commit` once the transport accepted it,
    :meth:`rollback` if it refused (exact credit restored), :meth:`complete` when it finished;
    :meth:`observe_pick` records the owners the queue skipped behind a blocked key. Every
    public call validates before it changes anything: a raised error leaves the gate (and its
    endpoints, except the stall-demand noted in :meth:`__call__`) as it was.
    """

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
        # (step 6 of the class docstring): their demand and idle credit are settled next.
        self._settle_due: dict[tuple[int, int], _Route] = {}

    # ---------------------------------------------------------------- configuration

    @property
    def config(self) -> GateConfig:
        return self._config

    @property
    def mode(self) -> CreditMode:
        return self._mode

    def add_endpoint(self, receiver: int, endpoint: SenderEndpoint) -> None:
        """Register the sender endpoint that holds credit of ``receiver`` for its QoS class.

        The route is ``(receiver, endpoint.qos_class)``. Raises :class:`InvalidArgument` for a
        non-u64 receiver, a non-endpoint, or an endpoint whose mode is not the gate's (the gate
        and its peers roll out together); :class:`InvalidEntry` if the route exists;
        :class:`TooManyRequests` past ``max_routes``. A failure changes nothing.
        """
        check_u64(receiver, "receiver")
        if not isinstance(endpoint, SenderEndpoint):
            raise InvalidArgument(f"expected a SenderEndpoint, got {type(endpoint).__name__}")
        if endpoint.mode is not self._mode:
            raise InvalidArgument(
                f"endpoint mode {endpoint.mode.name} differs from the gate's {self._mode.name}"
            )
        ident = (receiver, endpoint.qos_class)
        if ident in self._routes:
            raise InvalidEntry(f"route {ident} is already registered")
        if len(self._routes) >= self._config.max_routes:
            raise TooManyRequests(f"the gate holds its maximum of {self._config.max_routes} routes")
        self._routes[ident] = _Route(receiver, endpoint, len(self._config.stall_buckets_ns))
        self._removed.pop(ident, None)

    def remove_endpoint(self, receiver: int, qos_class: int = 0) -> RouteRemoval:
        """Unregister a route, fencing what the gate holds on it; frees a ``max_routes`` slot.

        1. Every RESERVED token of the route (picked, not yet committed) is rolled back: its
           exact charge returns to the old endpoint's ledger, a legacy token frees its slot. A
           later :meth:`commit` or :meth:`rollback` of such a token raises :class:`InvalidEntry`
           (settle picks before reconfiguring routes).
        2. Every credit stall of the route is dropped. A queued owner of the route is rejected
           at its next pick (:attr:`RejectReason.ROUTE_REMOVED`): its credit is gone with the
           route.
        3. COMMITTED tokens stay in flight and :meth:`complete` them as usual (on the old
           endpoint).

        Returns the :class:`RouteRemoval`; the old endpoint is the caller's to disconnect.
        Raises :class:`InvalidArgument` for a non-u64 receiver or non-u32 class and
        :class:`InvalidEntry` for an unregistered route; nothing changes then.
        """
        check_u64(receiver, "receiver")
        if type(qos_class) is not int or not 0 <= qos_class <= U32_MAX:
            raise InvalidArgument(f"qos_class must be a u32 int, got {describe(qos_class)}")
        route = self._route(receiver, qos_class)
        removal = self._detach(route)
        self._removed[route.ident] = None
        while len(self._removed) > self._config.max_routes:
            del self._removed[next(iter(self._removed))]
        return removal

    def replace_endpoint(self, receiver: int, endpoint: SenderEndpoint) -> RouteRemoval:
        """Point the route ``(receiver, endpoint.qos_class)`` at a new sender endpoint (e.g. a
        REQUIRED peer that failed negotiation and reconnected).

        The old route is fenced as by :meth:`remove_endpoint` (steps 1-3). Queued owners then
        follow the fencing rule of their context: one pinned to the old endpoint's
        ``(session, epoch)`` is rejected (``SNAPSHOT_FENCED``: old-epoch credit never pays for
        new-epoch work); an unpinned one is re-pointed to the new endpoint. Returns the old
        route's :class:`RouteRemoval`. Raises like :meth:`add_endpoint` (a wrong endpoint or
        mode) and :class:`InvalidEntry` for an unregistered route; nothing changes then.
        """
        check_u64(receiver, "receiver")
        if not isinstance(endpoint, SenderEndpoint):
            raise InvalidArgument(f"expected a SenderEndpoint, got {type(endpoint).__name__}")
        if endpoint.mode is not self._mode:
            raise InvalidArgument(
                f"endpoint mode {endpoint.mode.name} differs from the gate's {self._mode.name}"
            )
        route = self._route(receiver, endpoint.qos_class)
        if endpoint is route.endpoint:
            raise InvalidArgument("the route already uses this endpoint")
        removal = self._detach(route)
        self._routes[route.ident] = _Route(receiver, endpoint, len(self._config.stall_buckets_ns))
        return removal

    def _detach(self, route: _Route) -> RouteRemoval:
        """Fence and unregister ``route`` (validated by the caller; cannot fail)."""
        tokens = [t for t in self._unsettled.values() if t._route is route]
        for token in tokens:
            self._settle_rollback(token, TICKET_TRANSITIONS[(TicketState.RESERVED, "rollback")])
        stalled = [owner_id for owner_id, (r, _stall) in self._stalls.items() if r is route]
        for owner_id in stalled:
            self._end_stall(owner_id, 0, dispatched=False)
        self._settle_due.pop(route.ident, None)  # the old endpoint is the caller's now
        del self._routes[route.ident]
        return RouteRemoval(
            receiver=route.receiver,
            qos_class=route.qos_class,
            endpoint=route.endpoint,
            rolled_back=len(tokens),
            stalls_dropped=len(stalled),
            in_flight=route.committed - route.completed,
        )

    def endpoint(self, receiver: int, qos_class: int = 0) -> SenderEndpoint:
        """The endpoint of a route; :class:`InvalidEntry` if it is not registered."""
        return self._route(receiver, qos_class).endpoint

    def snapshot(self, receiver: int, qos_class: int = 0) -> tuple[SessionId, int] | None:
        """The route's current ``(session, epoch)``, or ``None`` before its first activation.

        Raises :class:`InvalidEntry` for an unregistered route.
        """
        endpoint = self._route(receiver, qos_class).endpoint
        key = endpoint.key
        return None if key is None else (key.receiver_session, endpoint.epoch)

    def context(self, plan: Plan, receiver: int, qos_class: int = 0) -> DispatchContext:
        """A :class:`DispatchContext` pinned to the route's current snapshot (remote plans).

        READ and local plans are not pinned and need no registered route. Raises
        :class:`InvalidArgument` for malformed values, :class:`InvalidEntry` for a remote plan
        to an unregistered route.
        """
        unpinned = DispatchContext(plan=plan, receiver=receiver, qos_class=qos_class)
        if not unpinned.remote:
            return unpinned
        return attrs.evolve(unpinned, snapshot=self.snapshot(receiver, qos_class))

    def _route(self, receiver: int, qos_class: int) -> _Route:
        check_u64(receiver, "receiver")
        if type(qos_class) is not int or not 0 <= qos_class <= U32_MAX:
            raise InvalidArgument(f"qos_class must be a u32 int, got {describe(qos_class)}")
        route = self._routes.get((receiver, qos_class))
        if route is None:
            raise InvalidEntry(f"no endpoint registered for receiver {receiver} class {qos_class}")
        return route

    # ---------------------------------------------------------------- eligibility

    def __call__(
        self, owner: GatedOwner, now_ns: int, /
    ) -> GateEligible | GateBlocked | GateRejected:
        """Decide one owner (the policy is in the class docstring).

        Raises :class:`InvalidArgument` (bad ``now_ns``, context or ``gate_key``, or the
        endpoint's clock went backwards) or :class:`InvalidEntry` (unregistered route); the
        exception propagates out of the pick, which then changes nothing in the queue.
        Reservations this gate issued earlier in that pick stay RESERVED: reclaim them with
        :meth:`rollback_unsettled`. A blocked reserve changes the endpoint's demand target
        only (that is its purpose). A charge whose demand cannot be expressed in u64 (with the
        route's waiting demand) raises :class:`ArithmeticOverflow` before anything changes.
        """
        if self._mode is CreditMode.DISABLED:
            return _NO_CREDIT_NEEDED
        check_u64(now_ns, "now_ns")
        _check_owner(owner)
        ctx = self._context_of(owner)
        if not ctx.remote:
            self._no_credit += 1
            return _NO_CREDIT_NEEDED
        owner_id = owner.owner_id
        ident = (ctx.receiver, ctx.qos_class)
        if ident not in self._routes and (ctx.snapshot is not None or ident in self._removed):
            # a pinned context was made for a registered route: it was removed since
            self._end_stall(owner_id, now_ns, dispatched=False)
            return GateRejected(RejectReason.ROUTE_REMOVED)
        route = self._route(ctx.receiver, ctx.qos_class)
        endpoint = route.endpoint
        if ctx.snapshot is not None and ctx.snapshot != self.snapshot(*route.ident):
            # RFC "Replay and restart safety": an old snapshot never spends new-epoch credit.
            self._end_stall(owner_id, now_ns, dispatched=False)
            route.rejected_snapshots += 1
            return GateRejected(RejectReason.SNAPSHOT_FENCED)
        charge = ctx.charge(owner.length)
        assert charge is not None  # remote plans always charge
        # A block adds the charge to the route's waiting demand: refuse one that cannot be
        # added (ArithmeticOverflow) before anything counts it (issue 10 item 10).
        waiting = _plus(route.waiting, charge)
        action = GATE_POLICY[(self._mode, endpoint.state, self._config.required_fallback)]
        if action is GateAction.REJECT:
            self._end_stall(owner_id, now_ns, dispatched=False)
            route.rejected_failed += 1
            return GateRejected(RejectReason.NEGOTIATION_FAILED)
        if action is GateAction.LEGACY:
            if route.legacy_in_flight >= self._config.legacy_window:
                info = BackpressureInfo(
                    source=BackpressureSource.LOCAL_QUEUE,
                    peer=endpoint.sender_peer,
                    qos_class=route.qos_class,
                    exhausted=(),
                    retry_after_us=0,
                    fallback_allowed=True,
                )
                return self._block(route, owner, charge, now_ns, info)
            route.legacy_in_flight += 1
            route.legacy_fallbacks += 1
            return self._eligible(route, owner_id, charge, None, now_ns)
        if endpoint.key is not None and owner_id not in self._stalls:
            endpoint._demand_targets(waiting)
        result = endpoint.try_reserve(charge, now_ns)
        if isinstance(result, BackpressureInfo):
            return self._block(route, owner, charge, now_ns, result)
        route.reserved += 1
        return self._eligible(route, owner_id, charge, result, now_ns)

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

    def _eligible(
        self,
        route: _Route,
        owner_id: int,
        charge: CreditCharge,
        reservation: ReservationToken | None,
        now_ns: int,
    ) -> GateEligible:
        self._end_stall(owner_id, now_ns, dispatched=True)
        token = GateToken(
            self,
            ticket=self._next_ticket,
            owner_id=owner_id,
            route=route,
            charge=charge,
            reservation=reservation,
        )
        self._next_ticket += 1
        self._unsettled[token.ticket_id] = token
        return GateEligible(token)

    def _block(
        self,
        route: _Route,
        owner: GatedOwner,
        charge: CreditCharge,
        now_ns: int,
        info: BackpressureInfo,
    ) -> GateBlocked:
        owner_id = owner.owner_id
        fresh = owner_id not in self._stalls
        if info.source is BackpressureSource.RECEIVER_CREDIT and route.endpoint.key is not None:
            # RFC "blocked: keep queued; record stall; request/update demand": ask the receiver
            # for everything waiting on this route, not just the head owner's shortfall.
            waiting = _plus(route.waiting, charge) if fresh else route.waiting
            route.endpoint.set_pending_demand(waiting)
        route.blocked += 1
        route.last_info = info
        self._mark_stall(
            route, owner_id=owner_id, length=owner.length, charge=charge, now_ns=now_ns, info=info
        )
        return GateBlocked(info)

    # ---------------------------------------------------------------- stall bookkeeping

    def _mark_stall(
        self,
        route: _Route,
        *,
        owner_id: int,
        length: int,
        charge: CreditCharge,
        now_ns: int,
        info: BackpressureInfo,
    ) -> None:
        known = self._stalls.get(owner_id)
        if known is not None:  # still stalled: keep the first block time, refresh the reason
            self._stalls[owner_id] = (route, attrs.evolve(known[1], info=info))
            return
        if self._stalls and now_ns < next(reversed(self._stalls.values()))[1].since_ns:
            self._stalls_in_order = False  # the newest stall so far is later than this one
        self._stalls[owner_id] = (
            route,
            CreditStall(
                owner_id=owner_id,
                receiver=route.receiver,
                qos_class=route.qos_class,
                length=length,
                charge=charge,
                since_ns=now_ns,
                info=info,
            ),
        )
        route.waiting = _plus(route.waiting, charge)
        route.stalled_owners += 1
        route.stalled_bytes += length

    def _end_stall(self, owner_id: int, now_ns: int, *, dispatched: bool) -> None:
        entry = self._stalls.pop(owner_id, None)
        if entry is None:
            return
        if not self._stalls:  # nothing left to be out of order
            self._stalls_in_order = True
        route, stall = entry
        route.waiting = _minus(route.waiting, stall.charge)
        route.stalled_owners -= 1
        route.stalled_bytes -= stall.length
        endpoint = route.endpoint
        if dispatched and endpoint.ahead and endpoint.key is not None:
            # version 2: the owner's charge moves from waiting to in flight in the sender's
            # level (it commits next), so the level stays what the receiver was told
            endpoint.set_pending_demand(route.waiting)
        if dispatched:  # the stall duration runs from the first block to dispatch
            duration = max(0, now_ns - stall.since_ns)
            route.stalls_ended += 1
            route.stall_ns_total += duration
            for index, bound in enumerate(self._config.stall_buckets_ns):
                if duration <= bound:
                    route.bucket_counts[index] += 1
                    break
        else:  # it left without the credit it asked for (step 6 of the class docstring)
            self._settle_due[route.ident] = route

    def observe_pick(
        self, result: PickOutcome, owner: Callable[[int], GatedOwner], now_ns: int
    ) -> None:
        """Record what the pick did beyond the owners it asked the gate about.

        1. Owners reported blocked without being asked (behind a blocked owner of the same
           key) become credit stalls from ``now_ns``, with their route's last reason, and
           their charge joins the route's pending demand.
        2. Dropped and rejected owners lose any stall record.
        3. Every route whose credit-stalled owners were dropped or rejected, and every route
           owners left earlier on the same endpoint entry, has its idle credit and demand
           settled (class docstring, step 6).

        ``owner`` resolves an owner id to its view (``queue.owner``). Raises
        :class:`InvalidArgument` (bad ``now_ns`` or context) or :class:`InvalidEntry`
        (unknown route, or a blocked owner of a route this gate never blocked); nothing
        changes then.
        """
        check_u64(now_ns, "now_ns")
        blocked = _owner_ids(result, "blocked")
        ended = (*_owner_ids(result, "dropped"), *_owner_ids(result, "rejected"))
        if not callable(owner):
            raise InvalidArgument(f"owner must resolve an owner id, got {describe(owner)}")
        skipped: list[tuple[_Route, GatedOwner, CreditCharge, BackpressureInfo]] = []
        stalls = self._stalls
        for owner_id in [i for i in blocked if i not in stalls]:  # most are stalled already
            view = owner(owner_id)
            _check_owner(view)
            ctx = self._context_of(view)
            route = self._route(ctx.receiver, ctx.qos_class)
            charge = ctx.charge(view.length)
            if charge is None or route.last_info is None:
                raise InvalidEntry(f"owner {owner_id} was not blocked by this gate")
            skipped.append((route, view, charge, route.last_info))
        waiting: dict[tuple[int, int], dict[CreditResource, int]] = {}
        for route, _view, charge, _info in skipped:
            waiting[route.ident] = _plus(waiting.get(route.ident, route.waiting), charge)
        for ident, vector in waiting.items():
            route = self._routes[ident]
            info = route.last_info
            credit_stall = info is not None and info.source is BackpressureSource.RECEIVER_CREDIT
            if credit_stall and route.endpoint.key is not None:  # the skipped join the demand
                route.endpoint.set_pending_demand(vector)
        for route, view, charge, info in skipped:
            self._mark_stall(
                route,
                owner_id=view.owner_id,
                length=view.length,
                charge=charge,
                now_ns=now_ns,
                info=info,
            )
        for owner_id in ended:
            self._end_stall(owner_id, now_ns, dispatched=False)
        for ident, route in self._routes.items():
            endpoint = route.endpoint
            if route.withdrawn is not None and route.withdrawn == (endpoint.key, endpoint.epoch):
                self._settle_due[ident] = route  # a grant for the old demand may have come
        self._settle_idle()

    def forget(self, owner_id: int) -> None:
        """The owner left the queue otherwise (canceled): drop its stall record, if any.

        If it was credit-stalled, its route's demand drops by its charge and the route's credit
        beyond what the owners still stalled on it wait for goes back (class docstring, step 6).
        Idempotent. Raises :class:`InvalidArgument` for a non-u64 id; nothing changes then.
        """
        check_u64(owner_id, "owner_id")
        self._end_stall(owner_id, 0, dispatched=False)
        self._settle_idle()

    def _settle_idle(self) -> None:
        """Step 6 of the class docstring for every route marked since the last settlement.

        Cannot fail: only credit the ledger shows available is returned, and a demand target
        past u64 (waiting owners whose charges no grant can ever cover together) leaves the
        route's previous, higher target in place (``set_pending_demand`` changes nothing when
        it refuses); the next block of such an owner raises :class:`ArithmeticOverflow`.
        """
        due, self._settle_due = self._settle_due, {}
        for ident, route in due.items():
            endpoint = route.endpoint
            if self._routes.get(ident) is not route or endpoint.key is None:
                continue  # removed meanwhile, or no credit key (legacy): nothing to settle
            waiting = route.waiting
            idle = {
                r: a - waiting.get(r, 0)
                for r, a in endpoint.available().items()
                if a > waiting.get(r, 0)
            }
            if idle:
                # RFC "Security and Abuse Boundaries": credit nothing waits for goes back, so
                # a key whose work left cannot starve another key of the same receiver.
                endpoint.return_unused(CreditCharge.of(idle))
                route.idle_returns += 1
            with contextlib.suppress(ArithmeticOverflow):
                endpoint.set_pending_demand(waiting)
            route.withdrawn = (endpoint.key, endpoint.epoch)

    def stall(self, owner_id: int) -> CreditStall | None:
        """The owner's current credit stall (where, how much, since when, the typed
        :class:`BackpressureInfo`), or ``None`` if it is not stalled. Raises
        :class:`InvalidArgument` for a non-u64 id."""
        check_u64(owner_id, "owner_id")
        entry = self._stalls.get(owner_id)
        return None if entry is None else entry[1]

    def oldest_stall(self, receiver: int) -> CreditStall | None:
        """The longest-standing stall of an owner bound for ``receiver`` (any QoS class): the
        smallest ``since_ns``, the first recorded among equals; ``None`` if there is none.
        Raises :class:`InvalidArgument` for a non-u64 receiver.

        A connector asks this on every dispatch pass, so it does not scan every stall: while
        the stalls were recorded in time order it returns the receiver's first one.
        """
        check_u64(receiver, "receiver")
        if self._stalls_in_order:
            for route, stall in self._stalls.values():
                if route.receiver == receiver:
                    return stall
            return None
        oldest: CreditStall | None = None
        for route, stall in self._stalls.values():
            if route.receiver == receiver and (oldest is None or stall.since_ns < oldest.since_ns):
                oldest = stall
        return oldest

    # ---------------------------------------------------------------- settlement

    def _token(self, token: object, event: str) -> tuple[GateToken, TicketState] | None:
        if token is None:
            return None
        if not isinstance(token, GateToken):
            raise InvalidArgument(f"expected a GateToken or None, got {type(token).__name__}")
        if token._gate is not self:
            raise InvalidEntry(f"token {token.ticket_id} was issued by another gate")
        nxt = TICKET_TRANSITIONS.get((token._state, event))
        if nxt is None:
            raise InvalidEntry(
                f"cannot {event} token {token.ticket_id} in state {token.state.name}"
            )
        return token, nxt

    def commit(self, token: object) -> None:
        """The transport accepted the owner's submit: RESERVED → COMMITTED (in flight).

        ``None`` (an owner that needed no credit) is a no-op, so a driver settles every pick
        alike. Raises :class:`InvalidArgument` for a non-token, :class:`InvalidEntry` for a
        token of another gate, one not RESERVED, or one whose epoch was fenced since the pick
        (commit right after the submit, before feeding control input); nothing changes then.
        """
        checked = self._token(token, "commit")
        if checked is None:
            return
        gate_token, nxt = checked
        if gate_token._reservation is not None:
            gate_token._route.endpoint.commit(gate_token._reservation)
        gate_token._state = nxt
        gate_token._route.committed += 1
        del self._unsettled[gate_token.ticket_id]

    def rollback(self, token: object) -> None:
        """The transport refused the submit: give back exactly what the pick took.

        A credit token restores its exact charge in the ledger (docs/semantics.md#sender-ledger); if
        its epoch was fenced meanwhile, the fence already discarded that whole entry and only the
        token is settled. A legacy token frees its window slot. The owner has left (it ends FAILED),
        so the route's credit beyond what its credit-stalled owners wait for goes back to the
        receiver (class docstring, step 6). ``None`` is a no-op. Raises like :meth:`commit`
        (misuse); nothing changes then.
        """
        checked = self._token(token, "rollback")
        if checked is None:
            return
        gate_token, nxt = checked
        self._settle_rollback(gate_token, nxt)
        self._settle_due[gate_token._route.ident] = gate_token._route
        self._settle_idle()

    def _settle_rollback(self, token: GateToken, nxt: TicketState) -> None:
        route = token._route
        reservation = token._reservation
        if reservation is None:
            route.legacy_in_flight -= 1
        elif _is_live(route.endpoint, reservation):
            route.endpoint.rollback(reservation)
        token._state = nxt
        route.rolled_back += 1
        del self._unsettled[token.ticket_id]

    def complete(self, token: object, now_ns: int) -> list[EndpointEvent]:
        """The transport finished the owner's work (any status): COMMITTED → COMPLETED.

        A credit token ends its in-flight count on the endpoint (which may finish a fence;
        completion never mints credit); a legacy token frees its window slot. ``None`` is a
        no-op. Returns the endpoint's events. Raises :class:`InvalidArgument` (non-token, bad
        ``now_ns``) or :class:`InvalidEntry` (another gate's token, one not COMMITTED);
        nothing changes then.
        """
        check_u64(now_ns, "now_ns")
        checked = self._token(token, "complete")
        if checked is None:
            return []
        gate_token, nxt = checked
        route = gate_token._route
        events: list[EndpointEvent] = []
        if gate_token._reservation is not None:
            events = route.endpoint.complete(gate_token._reservation, now_ns)
        else:
            route.legacy_in_flight -= 1
        gate_token._state = nxt
        route.completed += 1
        return events

    def rollback_unsettled(self, *, keep: Collection[GateToken] = ()) -> int:
        """Roll back every token issued and neither committed nor rolled back, except those in
        ``keep``; return how many.

        For a dispatch loop whose pick raised (the queue dispatched nothing, but the gate may
        have reserved for owners it asked earlier in that pick). ``keep`` names the tokens of
        owners picked earlier that still await their submit (a dispatch core commits at a
        transfer's first post). Raises :class:`InvalidArgument` if ``keep`` holds a non-token;
        nothing changes then.
        """
        if not all(isinstance(token, GateToken) for token in keep):
            raise InvalidArgument("keep must hold GateToken values")
        kept = {token.ticket_id for token in keep if token._gate is self}
        tokens = [t for t in self._unsettled.values() if t.ticket_id not in kept]
        for token in tokens:
            self._settle_rollback(token, TICKET_TRANSITIONS[(TicketState.RESERVED, "rollback")])
        return len(tokens)

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


def _plus(vector: Mapping[CreditResource, int], charge: CreditCharge) -> dict[CreditResource, int]:
    out = dict(vector)
    for resource, amount in charge.parts:
        out[resource] = checked_add(out.get(resource, 0), amount)
    return out


def _minus(vector: Mapping[CreditResource, int], charge: CreditCharge) -> dict[CreditResource, int]:
    out = dict(vector)
    for resource, amount in charge.parts:
        left = checked_sub(out.get(resource, 0), amount)
        if left:
            out[resource] = left
        else:
            out.pop(resource, None)
    return out


def _is_live(endpoint: SenderEndpoint, reservation: ReservationToken) -> bool:
    """Whether the reservation's entry is still the endpoint's current one (not fenced)."""
    return reservation.key == endpoint.key and reservation.epoch == endpoint.epoch


# --------------------------------------------------------------------------- metrics
