"""The dispatch gate's tickets after the pick: commit, roll back, complete.

Each call moves a :class:`GateToken` along :data:`TICKET_TRANSITIONS` and its reservation along
the endpoint's ledger (a legacy token frees its window slot instead); a rollback also settles
the route's idle credit (:mod:`._gate_stalls`), since its owner has left. A mixin of
:class:`~tent_credit._gate.DispatchGate` over :mod:`._gate_stalls`, apart from the decision: the
dispatch loop calls it per submit and completion, after the pick.
"""

from __future__ import annotations

from collections.abc import Collection

from ._arith import check_u64
from ._endpoint_common import EndpointEvent
from ._endpoints import SenderEndpoint
from ._gate_stalls import _GateStalls
from ._gate_state import GateToken
from ._gate_values import TICKET_TRANSITIONS, TicketState
from ._ledger import ReservationToken
from .errors import InvalidArgument, InvalidEntry


class _GateSettlement(_GateStalls):
    """The tickets' lifecycle after the pick, for a :class:`DispatchGate` (module docstring)."""

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
        so the route's idle credit goes back to the receiver (:class:`DispatchGate`, step 6).
        ``None`` is a no-op. Raises like :meth:`commit` (misuse); nothing changes then.
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


def _is_live(endpoint: SenderEndpoint, reservation: ReservationToken) -> bool:
    """Whether the reservation's entry is still the endpoint's current one (not fenced)."""
    return reservation.key == endpoint.key and reservation.epoch == endpoint.epoch
