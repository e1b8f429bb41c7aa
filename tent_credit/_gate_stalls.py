"""The dispatch gate's credit stalls, and the settlement of what owners leave behind.

An owner the gate blocks becomes a :class:`CreditStall` of its route, its charge part of the
route's waiting demand; it ends when the owner is dispatched (the stall-duration histogram) or
leaves (dropped, rejected, forgotten), which marks its route for the idle-credit settlement of
:class:`~tent_credit.DispatchGate`'s step 6. :meth:`observe_pick` records what a pick did beyond
the owners it asked about. A mixin of :class:`~tent_credit._gate.DispatchGate` over
:mod:`._gate_state`, apart from the decision: it is bookkeeping the decision and the settlement
of tickets both update.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping

import attrs

from ._arith import U64_MAX, check_u64, checked_add, checked_sub
from ._backpressure import BackpressureInfo, BackpressureSource
from ._describe import describe
from ._endpoints import SenderEndpoint
from ._gate_state import _GateState, _Route
from ._gate_values import CreditStall, GatedOwner, PickOutcome, _check_owner, _owner_ids
from ._types import CreditCharge, CreditResource
from .errors import ArithmeticOverflow, InvalidArgument, InvalidEntry


class _GateStalls(_GateState):
    """Credit stalls and idle-credit settlement of a :class:`DispatchGate` (module docstring)."""

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
        if self._restate_stall(route, owner_id, info):
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
        route.stall_charges[owner_id] = dict(charge.parts)
        route.stalled_owners += 1
        route.stalled_bytes += length

    def _restate_stall(self, route: _Route, owner_id: int, info: BackpressureInfo) -> bool:
        # An owner still stalled keeps its first block time; only its reason is refreshed.
        known = self._stalls.get(owner_id)
        if known is None:
            return False
        # an endpoint answers a repeated block with the same object: no attrs __eq__ then
        if known[1].info is not info and known[1].info != info:
            self._stalls[owner_id] = (route, attrs.evolve(known[1], info=info))
        return True

    def _end_stall(self, owner_id: int, now_ns: int, *, dispatched: bool) -> None:
        self._repeats.pop(owner_id, None)
        entry = self._stalls.pop(owner_id, None)
        if entry is None:
            return
        if not self._stalls:  # nothing left to be out of order
            self._stalls_in_order = True
        route, stall = entry
        route.waiting = _minus(route.waiting, stall.charge)
        route.stall_charges.pop(owner_id, None)
        route.stalled_owners -= 1
        route.stalled_bytes -= stall.length
        endpoint = route.endpoint
        if dispatched and endpoint._ahead and endpoint._key is not None:  # fields: per dispatch
            # version 2: the owner's charge moves from waiting to in flight in the sender's
            # level (it commits next), so the level stays what the receiver was told
            endpoint.set_pending_demand(route.waiting, head=route.head())
        if dispatched:  # the stall duration runs from the first block to dispatch
            duration = max(0, now_ns - stall.since_ns)
            route.stalls_ended += 1
            route.stall_ns_total += duration
            for index, bound in enumerate(self._config.stall_buckets_ns):
                if duration <= bound:
                    route.bucket_counts[index] += 1
                    break
        else:  # it left without the credit it asked for (step 6 of DispatchGate's docstring)
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
           settled (:class:`DispatchGate`, step 6).

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
                # behind the route's blocked owner, stalled already: the head stays its charge
                route.endpoint.set_pending_demand(vector, head=route.head())
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
                # a grant for the old demand may have come (not a leave: see _settle_idle)
                self._settle_due.setdefault(ident, route)
        self._settle_idle()

    def forget(self, owner_id: int) -> None:
        """The owner left the queue otherwise (canceled): drop its stall record, if any.

        If it was credit-stalled, its route's demand drops by its charge and the route's idle
        credit goes back (:class:`DispatchGate`, step 6). Idempotent. Raises
        :class:`InvalidArgument` for a non-u64 id; nothing changes then.
        """
        check_u64(owner_id, "owner_id")
        self._end_stall(owner_id, 0, dispatched=False)
        self._settle_idle()

    def _settle_idle(self) -> None:
        """Step 6 of :class:`DispatchGate` for every route marked since the last settlement.

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
            settle = _settle_version2 if endpoint.ahead else _settle_version1
            if settle(endpoint, route.waiting, route.head()):
                route.idle_returns += 1
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


def _settle_version2(
    endpoint: SenderEndpoint,
    waiting: Mapping[CreditResource, int],
    head: Mapping[CreditResource, int] | None,
) -> bool:
    """Version 2 states what still waits first: if what is on hand does not cover the head's
    charge, the endpoint gives all of it back (docs/credit_protocol.md#uncovered-credit). It
    keeps its whole level (in flight plus waiting): the receiver tops the key up for work that
    landed and is not completed yet, and returning that top-up at every pick of a withdrawn
    route had it granted straight back each time. ``True``: credit went back."""
    _state_demand(endpoint, waiting, head)
    return _return_beyond(endpoint, endpoint.level())


def _settle_version1(
    endpoint: SenderEndpoint,
    waiting: Mapping[CreditResource, int],
    head: Mapping[CreditResource, int] | None,
) -> bool:
    """Version 1 (no top-ups) returns what nothing waiting needs, then states the demand: its
    demand target counts the returned totals. ``True``: credit went back."""
    returned = _return_beyond(endpoint, waiting)
    _state_demand(endpoint, waiting, head)
    return returned


def _return_beyond(endpoint: SenderEndpoint, keep: Mapping[CreditResource, int]) -> bool:
    # RFC "Security and Abuse Boundaries": credit nothing waits for goes back, so a key whose
    # work left cannot starve another key of the same receiver.
    idle = {r: a - keep.get(r, 0) for r, a in endpoint.available().items() if a > keep.get(r, 0)}
    if idle:
        endpoint.return_unused(CreditCharge.of(idle))
    return bool(idle)


def _state_demand(
    endpoint: SenderEndpoint,
    waiting: Mapping[CreditResource, int],
    head: Mapping[CreditResource, int] | None,
) -> None:
    # A demand target past u64 (waiting owners whose charges no grant can ever cover
    # together) leaves the previous, higher target in place (_settle_idle's docstring).
    with contextlib.suppress(ArithmeticOverflow):
        endpoint.set_pending_demand(waiting, head=head)


def _plus(vector: Mapping[CreditResource, int], charge: CreditCharge) -> dict[CreditResource, int]:
    out = dict(vector)
    for resource, amount in charge.parts:
        total = out.get(resource, 0) + amount
        if total > U64_MAX:  # checked_add, only to raise: every pick adds a charge
            checked_add(out.get(resource, 0), amount)
        out[resource] = total
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
