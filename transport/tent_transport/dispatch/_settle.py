"""When a dispatched transfer's gate token is committed, given back, or completed.

The gate reserves a transfer's charge at pick time; the transfer reaches a transport only when
a Device accepts one of its slices. So the core commits the token at the transfer's **first
successful post** (RFC "submit-success commit"), not when its slices are queued on the rails,
and every way a transfer can end before that (a post a ready device refuses, a cancel, a peer
declared dead, a receiver session fenced meanwhile) rolls the token back: the exact charge
returns to the sender's ledger (RFC "Reservation token restores exact bytes/slots"), and the
gate then returns the route's idle credit as it does for any unused credit. A token committed
stays committed: once a slice was posted its bytes may land, and only the receiver's release
(or a fence) gives that credit back.
"""

from __future__ import annotations

from tent_credit import DispatchGate, EndpointEvent, GateToken, TicketState
from tent_credit import errors as credit_errors

from ._records import TransferRecord

__all__ = ["Settlement"]


class Settlement:
    """The tokens of dispatched transfers not yet posted (one per transfer, by transfer id)."""

    __slots__ = ("_gate", "_pending")

    def __init__(self, gate: DispatchGate | None) -> None:
        self._gate = gate
        self._pending: dict[int, TransferRecord] = {}

    def handed_off(self, record: TransferRecord) -> None:
        """``record`` was cut into slices with its pick's token: it awaits its first post."""
        if self._gate is not None and isinstance(record.token, GateToken):
            self._pending[record.transfer_id] = record

    def pending_tokens(self) -> tuple[GateToken, ...]:
        """The tokens awaiting a first post (kept when a failed pick rolls back its own)."""
        return tuple(r.token for r in self._pending.values() if isinstance(r.token, GateToken))

    def stale(self) -> list[TransferRecord]:
        """Transfers awaiting their first post whose token can no longer be committed: the
        receiver's session or the key's epoch changed since the pick (their slices carry a lease
        the receiver would refuse), or the route is gone. The caller fails them unposted."""
        gate = self._gate
        if gate is None:
            return []
        out = []
        for record in self._pending.values():
            token = record.token
            assert isinstance(token, GateToken)
            if token.state is not TicketState.RESERVED:
                out.append(record)  # rolled back by the route's removal
                continue
            try:
                snapshot = gate.snapshot(token.receiver, token.qos_class)
            except credit_errors.InvalidEntry:
                out.append(record)
                continue
            reservation = token.reservation
            if reservation is not None and snapshot != (
                reservation.key.receiver_session,
                reservation.epoch,
            ):
                out.append(record)
        return out

    def posted(self, record: TransferRecord) -> None:
        """A slice of ``record`` was posted: commit its token if this was the first."""
        if self._pending.pop(record.transfer_id, None) is None:
            return
        assert self._gate is not None
        self._gate.commit(record.token)  # checked live by ``stale`` in this same pass

    def ended(self, record: TransferRecord, now_ns: int) -> list[EndpointEvent]:
        """``record`` ended: roll back a token never committed, complete a committed one."""
        gate = self._gate
        token = record.token
        if gate is None or not isinstance(token, GateToken):
            return []
        if self._pending.pop(record.transfer_id, None) is not None:
            if token.state is TicketState.RESERVED:
                gate.rollback(token)  # exact charge back; then the route's idle return
            return []
        return gate.complete(token, now_ns)
