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

This module holds the decision (steps 1-5 of :class:`DispatchGate`) and the values it answers
with; :class:`DispatchGate` is that decision over private mixins split by responsibility:
:mod:`._gate_routes` (routes), :mod:`._gate_settle` (tickets after the pick),
:mod:`._gate_stalls` (credit stalls, idle credit) and :mod:`._gate_state` (the records and
registries, :class:`GateToken` among them). The values it reads are :mod:`._gate_values`. Every
public name of these modules is importable from here.
"""

from __future__ import annotations

from typing import ClassVar, Literal, cast

import attrs

from ._arith import check_u64
from ._backpressure import BackpressureInfo, BackpressureSource
from ._gate_routes import _GateRoutes
from ._gate_stalls import _plus
from ._gate_state import GateToken, _current, _Repeat, _Route
from ._ledger import ReservationToken
from ._negotiation import CreditMode
from ._types import CreditCharge

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


class DispatchGate(_GateRoutes):
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
       it wait for (version 2: beyond the endpoint's level, its work in flight plus what
       waits; all of it when it does not cover the head's charge) with
       ``SenderEndpoint.return_unused``, and sets the route's demand to what they wait for
       (``set_pending_demand(waiting)``; ``{}`` withdraws it). So a key whose
       work left cannot keep capacity that another key of the same receiver waits for
       (``gated/hoarding``). This runs at the end of :meth:`observe_pick` (for the owners the
       pick rejected or dropped), :meth:`forget` and :meth:`rollback`, never in the middle of
       a pick, and not for :meth:`rollback_unsettled` (its owners are still queued). An owner
       queued but never asked about is unknown to the gate: at its first pick it asks again.
       The receiver may still answer the demand as it was before (the report that lowered it
       is in flight): so once owners left a route, every later :meth:`observe_pick` settles it
       again the same way, until the endpoint's entry changes (a new session or epoch).

    7. Repeats: an owner still credit-stalled is asked again at every dispatch pass until its
       grant comes. When nothing the decision read has changed since its last block but the
       clock (:meth:`_blocked_again`), the gate answers with the same :class:`GateBlocked` and
       counts and records exactly what the full decision would; any change (a grant, a
       reservation or return, a new session or epoch, the peer's state or retry hint, the
       route's waiting demand) decides in full again.

    8. Quiet passes: :meth:`quiet_stamp` composes what every blocked decision reads but the
       clock (each route's waiting demand, legacy window and endpoint stamp, the routes and the
       mode) with the first instant at which the clock alone may change one (a freshness TTL
       running out). A driver whose last pick dispatched, dropped and rejected nothing may
       skip the next one while the stamp is equal and that instant has not come: every owner
       would be answered as before (the dispatch core does, docs/gate.md#quiet-passes).

    Then the caller submits each picked owner: :meth:`commit` once the transport accepted it,
    :meth:`rollback` if it refused (exact credit restored), :meth:`complete` when it finished;
    :meth:`observe_pick` records the owners the queue skipped behind a blocked key. Every
    public call validates before it changes anything: a raised error leaves the gate (and its
    endpoints, except the stall-demand noted in :meth:`__call__`) as it was.
    """

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
        route's waiting demand, beside what the endpoint consumed) raises
        :class:`ArithmeticOverflow` before anything changes; never one that only the credit
        the endpoint returned crowds out (a receiver's grant near 2**64: it waits, blocked).
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
        repeat = self._repeats.pop(owner_id, None)
        if repeat is not None and self._blocked_again(repeat, ctx, owner, now_ns):
            return cast(GateBlocked, repeat.decision)
        ident = (ctx.receiver, ctx.qos_class)
        if ident not in self._routes and (ctx.snapshot is not None or ident in self._removed):
            # a pinned context was made for a registered route: it was removed since
            self._end_stall(owner_id, now_ns, dispatched=False)
            return GateRejected(RejectReason.ROUTE_REMOVED)
        route = self._route(ctx.receiver, ctx.qos_class)
        endpoint = route.endpoint
        if ctx.snapshot is not None and ctx.snapshot != _current(endpoint):
            # RFC "Replay and restart safety": an old snapshot never spends new-epoch credit.
            self._end_stall(owner_id, now_ns, dispatched=False)
            route.rejected_snapshots += 1
            return GateRejected(RejectReason.SNAPSHOT_FENCED)
        charge = ctx.charge(owner.length)
        assert charge is not None  # remote plans always charge
        # A block adds the charge to the route's waiting demand: refuse one that cannot be
        # added (ArithmeticOverflow) before anything counts it (issue 10 item 10).
        waiting = _plus(route.waiting, charge)
        # the endpoint's fields, not its properties (here and below): read at every pick
        state = endpoint._negotiation._state
        action = GATE_POLICY[(self._mode, state, self._config.required_fallback)]
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
        if endpoint._key is not None and owner_id not in self._stalls:
            endpoint._demand_targets(waiting)
        result = endpoint.try_reserve(charge, now_ns)
        if isinstance(result, BackpressureInfo):
            return self._block(route, owner, charge, now_ns, result)
        route.reserved += 1
        return self._eligible(route, owner_id, charge, result, now_ns)

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
        if info.source is BackpressureSource.RECEIVER_CREDIT and route.endpoint._key is not None:
            # RFC "blocked: keep queued; record stall; request/update demand": ask the receiver
            # for everything waiting on this route, not just the head owner's shortfall.
            waiting = _plus(route.waiting, charge) if fresh else route.waiting
            head = route.head() or dict(charge.parts)  # the first stalled owner's charge
            route.endpoint.set_pending_demand(waiting, head=head)
        route.blocked += 1
        route.last_info = info
        self._mark_stall(
            route, owner_id=owner_id, length=owner.length, charge=charge, now_ns=now_ns, info=info
        )
        decision = GateBlocked(info)
        stamp = route.endpoint.repeat_stamp(charge)
        if stamp is not None:
            self._repeats[owner_id] = _Repeat(
                owner.context, owner.length, route, route.waiting, stamp, decision
            )
        return decision

    def quiet_stamp(self) -> tuple[tuple[object, ...], int | None] | None:
        """``(stamp, until_ns)`` for a driver's quiet passes (item 8 of the class docstring).

        ``stamp`` is equal between two calls only if nothing a decision of this gate reads
        has changed but the clock: the mode, the registered and removed routes, and per route
        its waiting demand, its legacy window in flight and its endpoint's
        :meth:`~tent_credit.SenderEndpoint.quiet_stamp`. ``until_ns`` is the first instant
        at which the clock alone may change a decision (the earliest freshness TTL expiry;
        ``None``: never). ``None`` instead of a pair when the gate cannot promise it: a
        settlement of idle credit is due, or an endpoint traces every attempt. A query.
        """
        if self._settle_due:
            return None
        parts: list[object] = [self._mode, len(self._removed)]
        until: int | None = None
        for route in self._routes.values():
            endpoint = route.endpoint.quiet_stamp()
            if endpoint is None:
                return None
            state, stale_at = endpoint
            if stale_at is not None and (until is None or stale_at < until):
                until = stale_at
            # the waiting dict itself: a route's is replaced, never changed in place
            parts.append((route, route.waiting, route.legacy_in_flight, state))
        return tuple(parts), until

    def _blocked_again(
        self, repeat: _Repeat, ctx: DispatchContext, owner: GatedOwner, now_ns: int
    ) -> bool:
        """Answer a credit-stalled owner's pick as its last one, when nothing it read has
        changed but the clock: the same context and length (so the same route, snapshot and
        charge), the route still registered with the same waiting demand, and the endpoint's
        :meth:`~tent_credit.SenderEndpoint.repeat_blocked` (its ledger, state, key, epoch,
        retry hint and demand unchanged). It counts and records what the full decision would
        (``blocked``, the stall's reason). Profiled, these repeats were most of the gate's
        cost, and the gate half of credit's extra Python per transfer on the sender
        (docs/incast.md#incast-cpu)."""
        route = repeat.route
        if (
            repeat.context is not ctx
            or repeat.length != owner.length
            or self._routes.get((ctx.receiver, ctx.qos_class)) is not route
            or route.waiting is not repeat.waiting
            or not route.endpoint.repeat_blocked(repeat.stamp, now_ns)
        ):
            return False
        info = cast(GateBlocked, repeat.decision).info
        route.blocked += 1
        route.last_info = info
        self._restate_stall(route, owner.owner_id, info)  # a repeat exists only while stalled
        self._repeats[owner.owner_id] = repeat
        return True
