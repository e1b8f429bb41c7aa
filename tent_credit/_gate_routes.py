"""The dispatch gate's routes: registering, replacing and removing sender endpoints.

A route is one (receiver, QoS class) and the :class:`SenderEndpoint` holding its credit.
Removing or replacing one fences what the gate holds on it (RESERVED tickets rolled back, stalls
dropped, COMMITTED ones left to complete); :meth:`snapshot` and :meth:`context` pin an owner to
the route's current (session, epoch). A mixin of :class:`~tent_credit._gate.DispatchGate` over
:mod:`._gate_settle`, apart from the decision: it is configuration, called when peers come and
go, not per owner.
"""

from __future__ import annotations

from ._arith import U32_MAX, check_u64
from ._describe import describe
from ._endpoints import SenderEndpoint
from ._gate_settle import _GateSettlement
from ._gate_state import _current, _Route
from ._gate_values import TICKET_TRANSITIONS, DispatchContext, RouteRemoval, TicketState
from ._types import Plan, SessionId
from .errors import InvalidArgument, InvalidEntry, TooManyRequests


class _GateRoutes(_GateSettlement):
    """Route registration of a :class:`DispatchGate` (module docstring)."""

    # ---------------------------------------------------------------- configuration

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
        return _current(self._route(receiver, qos_class).endpoint)

    def context(self, plan: Plan, receiver: int, qos_class: int = 0) -> DispatchContext:
        """A :class:`DispatchContext` pinned to the route's current snapshot (remote plans).

        READ and local plans are not pinned and need no registered route. Raises
        :class:`InvalidArgument` for malformed values, :class:`InvalidEntry` for a remote plan
        to an unregistered route.
        """
        unpinned = DispatchContext(plan=plan, receiver=receiver, qos_class=qos_class)
        if not unpinned.remote:
            return unpinned
        # built again rather than attrs.evolve'd: evolve costs a submit twice the constructor
        snapshot = self.snapshot(receiver, qos_class)
        return DispatchContext(plan=plan, receiver=receiver, qos_class=qos_class, snapshot=snapshot)
