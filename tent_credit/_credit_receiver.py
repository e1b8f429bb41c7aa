"""One receiver node: :class:`CreditReceiver`, its allocator and an endpoint per connection.

The receiver owns what its connections share: the session and the allocator, the grant-ahead
loop (:mod:`._standing`), the push order in which stalled endpoints are served when capacity
frees, the data path's calls (landing, write admission, quarantine, release, fence
completion) and the trace. One sender's connection is a :class:`~tent_credit.ReceiverEndpoint`
(:mod:`._receiver_endpoint`); this module creates and drives them.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._admission import WriteAdmission
from ._allocator import AllocationClass, AllocatorConfig, ReceiverCreditAllocator
from ._arith import U64_MAX, check_u64
from ._describe import describe
from ._endpoint_common import _check_key_epoch, _check_peer, _vector
from ._fairness import GrantSplit
from ._messages import SUPPORTED_VERSIONS
from ._receiver_endpoint import ReceiverEndpoint
from ._standing import StandingGrants
from ._trace import TraceSink
from ._types import CreditResource, SessionId
from .errors import InvalidArgument, InvalidEntry

__all__ = ["CreditReceiver"]


class CreditReceiver:
    """One receiver node: a session, its global allocator, and an endpoint per connection.

    A receiver restart is a new :class:`CreditReceiver` with a new :class:`SessionId`: its
    activations carry the new session, which fences every sender's old ledger entry.

    ``initial_grant`` is what an activation grants up front (keep it small: RFC principle 3).
    ``hold_partial`` (version 2): a top-up that could only be part of a key's quantum waits for
    that key's own release, or for :meth:`grant_partial`, the transport's timer
    (docs/credit_protocol.md#partial-hold).
    """

    def __init__(
        self,
        config: AllocatorConfig,
        session: SessionId,
        *,
        freshness_ttl_ms: int = 0,
        refresh_interval_ns: int = 0,
        initial_grant: Mapping[CreditResource, int] | None = None,
        versions: tuple[int, ...] = SUPPORTED_VERSIONS,
        trace: TraceSink | None = None,
        hold_partial: bool = False,
    ) -> None:
        if type(hold_partial) is not bool:
            raise InvalidArgument(f"hold_partial must be a bool, got {describe(hold_partial)}")
        self._allocator = ReceiverCreditAllocator(config, session)
        if type(freshness_ttl_ms) is not int or not 0 <= freshness_ttl_ms <= 0xFFFF_FFFF:
            raise InvalidArgument(
                f"freshness_ttl_ms must be a u32, got {describe(freshness_ttl_ms)}"
            )
        check_u64(refresh_interval_ns, "refresh_interval_ns")
        self._ttl_ms = freshness_ttl_ms
        self._refresh_ns = refresh_interval_ns
        if initial_grant is not None and not isinstance(initial_grant, Mapping):
            raise InvalidArgument(f"initial_grant must be a mapping, got {describe(initial_grant)}")
        self._initial = dict(initial_grant or {})
        for r, a in self._initial.items():
            if r not in config.capacity or type(a) is not int or not 0 <= a <= U64_MAX:
                raise InvalidArgument(f"invalid initial grant {describe(r)}: {describe(a)}")
        self._versions = versions
        self._endpoints: dict[tuple[int, int], ReceiverEndpoint] = {}
        self._due: dict[ReceiverEndpoint, None] = {}  # endpoints that may owe a message
        self._ahead = StandingGrants(
            self._allocator,
            self._ahead_endpoints,
            static=config.grant_chunk,
            hold_partial=hold_partial,
        )
        self._tickets = 0  # the push order's clock: one tick per stall or serve of a stall
        self._trace = trace  # docs/traces.md; None: tracing off
        if trace is not None:
            trace.record("receiver", "start", {"session": session.value})

    def _trace_vars(self, sender_peer: int, qos_class: int, epoch: int) -> dict[str, object]:
        # The logged variables of one key+epoch (docs/traces.md); a settled epoch logs none.
        try:
            totals = self._allocator.key_totals(sender_peer, qos_class, epoch)
        except InvalidEntry:
            return {"epoch": epoch}
        return {
            "epoch": epoch,
            "state": totals.state.name,
            "granted": _vector(totals.granted),
            "released": _vector(totals.released),
            "reclaimed": _vector(totals.reclaimed),
            "landed": _vector(totals.landed),
        }

    def _trace_event(
        self, kind: str, sender_peer: int, qos_class: int, epoch: int, **extra: object
    ) -> None:
        if self._trace is not None:
            fields: dict[str, object] = {"peer": sender_peer, "qos": qos_class, "epoch": epoch}
            fields.update(extra)
            fields["vars"] = self._trace_vars(sender_peer, qos_class, epoch)
            self._trace.record("receiver", kind, fields)

    @property
    def session(self) -> SessionId:
        return self._allocator.session

    @property
    def allocator(self) -> ReceiverCreditAllocator:
        return self._allocator

    @property
    def versions(self) -> tuple[int, ...]:
        return self._versions

    @property
    def freshness_ttl_ms(self) -> int:
        return self._ttl_ms

    @property
    def refresh_interval_ns(self) -> int:
        return self._refresh_ns

    @property
    def initial_demand(self) -> Mapping[CreditResource, int]:
        return self._initial

    def endpoints(self) -> tuple[ReceiverEndpoint, ...]:
        return tuple(self._endpoints.values())

    def stalled_endpoints(self) -> tuple[ReceiverEndpoint, ...]:
        """The open, unquarantined stalled endpoints in the order the next push visits them.

        Under ``GrantSplit.MAX_MIN_FAIR`` (the default) longest waiting first
        (:attr:`ReceiverEndpoint.waiting_since`); under ``GrantSplit.FIRST_COME``, the old
        policy kept for comparison, connection order, as before (``tent_spec.gated`` models
        that policy with its push in key order)."""
        waiting = [ep for ep in self._endpoints.values() if ep._stalled and ep._pushable()]
        if self._allocator.config.grant_split is GrantSplit.FIRST_COME:
            return tuple(waiting)
        return tuple(sorted(waiting, key=lambda ep: ep.waiting_since))

    def _next_ticket(self) -> int:
        self._tickets += 1
        return self._tickets

    def _ahead_endpoints(self) -> list[ReceiverEndpoint]:
        # the keys the grant-ahead loop serves: open, version 2, not quarantined
        quarantined = self._allocator.is_quarantined
        return [
            ep
            for ep in self._endpoints.values()
            if ep.ahead and not ep.closed and not quarantined(ep.sender_peer, ep.qos_class)
        ]

    @property
    def waiting_line(self) -> tuple[tuple[int, int], ...]:
        """Version 2: the ``(sender_peer, qos_class)`` keys whose top-up is due and waits for
        capacity, head first (served strictly in this order; see :mod:`._standing`)."""
        return self._ahead.line()

    @property
    def partial_waiting(self) -> bool:
        """Version 2 with ``hold_partial``: the head of the waiting line is held for its own
        release instead of being granted part of its quantum; a transport calls
        :meth:`grant_partial` once its hold ran out (docs/credit_protocol.md#partial-hold)."""
        return self._ahead.partial_waiting

    def grant_partial(self) -> bool:
        """Grant the held head what is free and serve on (the hold's timer); whether anything
        was granted. A no-op when no head is held."""
        return self._ahead.grant_partial()

    def endpoint(self, sender_peer: int, qos_class: int = 0) -> ReceiverEndpoint | None:
        """The latest endpoint of a sender's connection (closed or open), or ``None``.

        Raises :class:`InvalidArgument` for a non-u64 peer or non-u32 class."""
        _check_peer(sender_peer, qos_class)
        return self._endpoints.get((sender_peer, qos_class))

    def accept(
        self,
        sender_peer: int,
        qos_class: int = 0,
        *,
        allocation_class: AllocationClass = AllocationClass.USER,
    ) -> ReceiverEndpoint:
        """A sender's control connection was set up (identity from the handshake).

        Opens the key's next epoch: a reconnect moves the previous epoch to FENCING (its
        outstanding stays committed until :meth:`fence_complete`) and closes its endpoint.
        Raises IA / TMR from the allocator; a failure changes nothing.
        """
        _check_peer(sender_peer, qos_class)
        epoch = self._allocator.open_epoch(
            sender_peer, qos_class, allocation_class=allocation_class
        )
        old = self._endpoints.get((sender_peer, qos_class))
        if old is not None:
            old.close()
        endpoint = ReceiverEndpoint(
            self,
            sender_peer=sender_peer,
            qos_class=qos_class,
            epoch=epoch,
            ahead=allocation_class is AllocationClass.USER,
        )
        self._endpoints[(sender_peer, qos_class)] = endpoint
        self._trace_event("accept", sender_peer, qos_class, epoch)
        if old is not None and old.ahead:
            self._ahead.membership_changed()
        return endpoint

    def disconnect(self, sender_peer: int, qos_class: int = 0) -> int:
        """The sender's control connection dropped: fence its current epoch; returns it.

        Raises :class:`InvalidArgument` for a non-u64 peer or non-u32 class and
        :class:`InvalidEntry` without an open connection; a failure changes nothing."""
        _check_peer(sender_peer, qos_class)
        endpoint = self._endpoints.get((sender_peer, qos_class))
        if endpoint is None or endpoint.closed:
            raise InvalidEntry(f"no open connection of sender {sender_peer} class {qos_class}")
        self._allocator.fence(sender_peer, qos_class, endpoint.epoch)
        endpoint.close()
        self._trace_event("fence", sender_peer, qos_class, endpoint.epoch)
        if endpoint.ahead:
            self._ahead.membership_changed()
        return endpoint.epoch

    def data_landed(
        self, sender_peer: int, qos_class: int, epoch: int, amounts: Mapping[CreditResource, int]
    ) -> None:
        """The receiver's transport saw a sender's data arrive (see the allocator)."""
        _check_key_epoch(sender_peer, qos_class, epoch)
        self._allocator.data_landed(sender_peer, qos_class, epoch, amounts)
        if self._trace is not None:  # the vector only for a trace: asked per write
            self._trace_event("land", sender_peer, qos_class, epoch, amounts=_vector(amounts))
        self._landed(sender_peer, qos_class, epoch)

    def _landed(self, sender_peer: int, qos_class: int, epoch: int) -> None:
        # Version 2: the key's unlanded credit fell; its top-up may be due (_standing rule 1)
        endpoint = self._endpoints.get((sender_peer, qos_class))
        if (
            endpoint is not None
            and endpoint.ahead
            and endpoint.epoch == epoch
            and not endpoint.closed
        ):
            self._ahead.landed(endpoint)

    def admit_write(
        self,
        sender_peer: int,
        qos_class: int,
        epoch: int,
        amounts: Mapping[CreditResource, int],
    ) -> WriteAdmission:
        """Admit or refuse a credited write before it touches memory (docs/seams.md).

        See :meth:`ReceiverCreditAllocator.admit_write`: accepted means counted as landed (call
        it *instead of* :meth:`data_landed`, then :meth:`release` once consumed). A refusal counts
        a protocol violation and quarantines the key: its endpoint is closed (the transport should
        drop the connection), what it held and never landed is reclaimed at once and pushed to
        stalled senders. Never raises, whatever the peer put in the lease.
        """
        quarantined_before = self._allocator.quarantined_keys
        admission = self._allocator.admit_write(sender_peer, qos_class, epoch, amounts)
        if admission.accepted:
            if self._trace is not None:  # the vector only for a trace: asked per write
                self._trace_event("land", sender_peer, qos_class, epoch, amounts=_vector(amounts))
            self._landed(sender_peer, qos_class, epoch)
            return admission
        if self._allocator.quarantined_keys != quarantined_before:
            self._after_quarantine(sender_peer, qos_class)
        return admission

    def quarantine(self, sender_peer: int, qos_class: int) -> bool:
        """Quarantine a key for a write the transport refused on its own (docs/abuse.md
        "Transfers held": one opening more transfers than its slot credit), as a refused
        :meth:`admit_write` does: its endpoint closed, what it held and never landed reclaimed
        and pushed to stalled senders. ``False`` (nothing changes) for an unknown or malformed
        key; never raises."""
        try:
            self._allocator.quarantine(sender_peer, qos_class)
        except (InvalidArgument, InvalidEntry):
            return False
        self._after_quarantine(sender_peer, qos_class)
        return True

    def _after_quarantine(self, sender_peer: int, qos_class: int) -> None:
        endpoint = self._endpoints.get((sender_peer, qos_class))
        if endpoint is not None:
            endpoint.close()
        if self._trace is not None:
            self._trace.record("receiver", "quarantine", {"peer": sender_peer, "qos": qos_class})
        self._ahead.membership_changed()
        self._capacity_freed()

    def release(
        self, sender_peer: int, qos_class: int, epoch: int, amounts: Mapping[CreditResource, int]
    ) -> None:
        """The local consumer finished with landed data: free it and push to stalled senders."""
        _check_key_epoch(sender_peer, qos_class, epoch)
        self._allocator.release(sender_peer, qos_class, epoch, amounts)
        if self._trace is not None:  # the vector only for a trace: asked per write
            self._trace_event("release", sender_peer, qos_class, epoch, amounts=_vector(amounts))
        self._capacity_freed()

    def fence_complete(
        self, sender_peer: int, qos_class: int, epoch: int
    ) -> Mapping[CreditResource, int]:
        """Old QPs / in-flight work of a fenced epoch are drained: reclaim and push."""
        _check_key_epoch(sender_peer, qos_class, epoch)
        reclaimed = self._allocator.fence_complete(sender_peer, qos_class, epoch)
        self._trace_event("fence_complete", sender_peer, qos_class, epoch)
        self._capacity_freed()
        return reclaimed

    def _capacity_freed(self) -> None:
        # Push: senders whose demand was blocked get a grant as soon as capacity frees, longest
        # waiting first (stalled_endpoints; FIRST_COME keeps connection order). When the freed
        # capacity covers every stalled key's max-min share the order changes nothing (the split
        # is order-free); it decides who gets what is left below one share per key, which the
        # allocator hands out first-come (at least one unit per grant). Connection order made
        # "first" mean "connected first": with capacity freed one unit at a time the
        # first-connected stalled senders took every unit (issue 13: 11 of 16 incast senders
        # waited 10 s). Oldest stall first is first-come among the stalled, and a full grant
        # sends a sender to the back: with N stalled senders, each is served within
        # (N - 1) full grants of the others.
        for endpoint in self.stalled_endpoints():
            endpoint._capacity_freed()
        self._ahead.serve()  # version 2: the waiting line, first come (_standing rule 2)

    @property
    def owing(self) -> bool:
        """Whether some endpoint became due since the last :meth:`take_due` (a transport's
        flush would find something to send)."""
        return bool(self._due)

    @property
    def needs_flush(self) -> bool:
        """Whether a transport's flush has work: a message is owed (:attr:`owing`), or the
        waiting line's head is held for its own release (:attr:`partial_waiting`), whose
        hold's timer only a flush arms (a consumer that keeps what landed never releases, and
        without the timer the head would wait for good)."""
        return bool(self._due) or self._ahead.partial_waiting

    def take_due(self) -> tuple[ReceiverEndpoint, ...]:
        """The endpoints that may owe their sender a message since the last call (an
        activation, an update with news, an answer), in the order they became due; the rest
        owe nothing but a refresh (:attr:`refresh_interval_ns`). A transport's flush asks only
        these instead of every connection."""
        due = tuple(self._due)
        self._due.clear()
        return due

    def messages_to_send(self, now_ns: int) -> dict[tuple[int, int], list[bytes]]:
        """Per (sender_peer, qos_class): what each open connection must send now."""
        return {
            key: msgs
            for key, ep in self._endpoints.items()
            if (msgs := ep.messages_to_send(now_ns))
        }

    def get_timer(self) -> int | None:
        timers = [t for ep in self._endpoints.values() if (t := ep.get_timer()) is not None]
        return min(timers) if timers else None
