"""The receiver side of the credit protocol: :class:`ReceiverEndpoint` (one per sender connection)
and :class:`CreditReceiver` (the allocator and its endpoints; see :mod:`._endpoints`)."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from ._admission import WriteAdmission
from ._allocator import AllocationClass, AllocatorConfig, ReceiverCreditAllocator
from ._arith import U64_MAX, check_u64
from ._describe import describe
from ._endpoint_common import (
    EndpointEvent,
    _amounts,
    _byte_items,
    _check_key_epoch,
    _check_now,
    _check_peer,
    _vector,
)
from ._fairness import GrantSplit
from ._messages import (
    GRANT_AHEAD_VERSION,
    SUPPORTED_VERSIONS,
    CapabilityActivation,
    CapabilityOffer,
    ControlMessage,
    CreditReturn,
    Heartbeat,
    ReceiverCreditUpdate,
    SenderCreditUsage,
)
from ._standing import StandingGrants
from ._trace import TraceSink, message_fields
from ._types import CreditResource, SessionId
from ._wire import decode, encode
from .errors import (
    DecodeError,
    InvalidArgument,
    InvalidEntry,
    LocalProtocolError,
    RemoteProtocolError,
)

__all__ = ["CreditReceiver", "ReceiverEndpoint", "ReceiverEndpointStatistics"]


@attrs.frozen(kw_only=True)
class ReceiverEndpointStatistics:
    """A snapshot of one receiver endpoint (one sender connection)."""

    sender_peer: int
    qos_class: int
    epoch: int
    version: int
    messages_received: int
    messages_sent: int
    updates_pushed: int
    usage_applied: int
    usage_duplicates: int
    demands_blocked: int
    protocol_violations: int
    stalled: bool
    updates_repeated: int = 0
    """Updates that carried the same grants and retry hint as the previous one sent (version
    2: only refreshes and answers to a repeated report)."""


class ReceiverEndpoint:
    """The receiver side of one sender's control connection (created by :class:`CreditReceiver`).

    Answers the capability offer with an activation, applies usage reports (reclaiming returned
    credit), grants demand from the shared allocator and pushes the key's full cumulative vector
    (sequence + 1 per update), on demand, when capacity frees while the sender is stalled, and
    on the refresh timer.

    A stalled endpoint holds a place in the receiver's push order (:attr:`waiting_since`): it
    takes the place at the back when it stalls, and again once grants made while it stays
    stalled add up to a full grant (``max_grant``) of some resource, so freed capacity goes to
    the sender that has waited longest since it last got a full grant (issue 13: connection
    order starved the later-connected senders).
    """

    def __init__(
        self,
        receiver: CreditReceiver,
        *,
        sender_peer: int,
        qos_class: int,
        epoch: int,
        ahead: bool = True,
    ) -> None:
        self._receiver = receiver
        self._ahead_allowed = ahead  # a staging-internal key is never granted ahead
        self._sender_peer = sender_peer
        self._qos_class = qos_class
        self._epoch = epoch
        self._version = 0
        self._sequence = 0
        self._usage_sequence = 0
        self._demand_target: dict[CreditResource, int] = {}
        self._waiting: dict[CreditResource, int] | None = None  # target - consumed - returned
        self._stalled = False
        self._waiting_since = 0  # the push-order ticket; meaningful while stalled
        self._served: dict[CreditResource, int] = {}  # granted since the ticket, while stalled
        self._retry_after_us = 0
        self._pending_activation: CapabilityActivation | None = None
        self._push_due = False
        self._last_push_ns: int | None = None
        self._closed = False
        self._received = 0
        self._sent = 0
        self._pushed = 0
        self._usage_applied = 0
        self._usage_duplicates = 0
        self._demands_blocked = 0
        self._violations = 0
        # version 2 (grant-ahead): the sender's level, the last report's content (a repeat of
        # it asks for the full vector), whether the loop holds the key waiting or capped, and
        # the (grants, retry) of the last update sent: an update goes out only with news
        self._level: dict[CreditResource, int] = {}
        self._last_report: tuple[object, ...] | None = None
        self._ahead_waiting = False
        self._ahead_capped = False
        self._last_sent: tuple[object, ...] | None = None
        self._news_due = False  # the grants or the retry hint may have moved since
        self._repeated = 0

    @property
    def sender_peer(self) -> int:
        return self._sender_peer

    @property
    def qos_class(self) -> int:
        return self._qos_class

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def version(self) -> int:
        """The negotiated protocol version; 0 until the sender's offer was accepted. The data
        path reads it for every write it admits, so it is a property, not a statistics read."""
        return self._version

    @property
    def stalled(self) -> bool:
        """The sender asked for more than could be granted; a push follows when capacity frees
        (version 2: its top-up is due and it waits in the receiver's line)."""
        if self._version == GRANT_AHEAD_VERSION:
            return self._ahead_waiting
        return self._stalled

    @property
    def ahead(self) -> bool:
        """Whether this connection negotiated grant-ahead (protocol version 2)."""
        return self._version == GRANT_AHEAD_VERSION

    @property
    def level(self) -> Mapping[CreditResource, int]:
        """Version 2: the sender's level from its last applied report (``{}``: none)."""
        return self._level

    def ahead_changed(self, *, granted: bool, capped: bool, waiting: bool) -> None:
        """The receiver's grant-ahead loop granted this key or re-evaluated it."""
        self._ahead_capped = capped
        self._ahead_waiting = waiting
        retry = self._receiver.allocator.config.retry_after_us if (capped or waiting) else 0
        if granted or retry != self._retry_after_us:
            self._due(news=True)
        self._retry_after_us = retry

    @property
    def waiting_since(self) -> int:
        """The push-order ticket of a stalled endpoint, taken from the receiver's counter when
        it stalled or was last served a full grant while stalled. A lower ticket is pushed
        first; 0 when the endpoint never stalled."""
        return self._waiting_since

    @property
    def closed(self) -> bool:
        return self._closed

    def _due(self, *, push: bool = False, news: bool = False) -> None:
        # Something may be owed to the sender: the receiver's flush asks only such endpoints.
        if push:
            self._push_due = True
        if news:
            self._news_due = True
        self._receiver._due[self] = None

    def _violation(self, detail: str) -> EndpointEvent:
        self._violations += 1
        return EndpointEvent(kind="protocol_violation", detail=detail)

    def _set_stalled(self, stalled: bool, granted_now: Mapping[CreditResource, int]) -> None:
        # First come, first served among the stalled (the fair split's remainder rule, see
        # CreditReceiver._capacity_freed): a new stall takes the next ticket, i.e. the back of
        # the push order, and so does a stalled endpoint once it was served a full grant. The
        # quantum is a full grant, not one unit: a sender served one unit per turn would pay a
        # round trip per unit, like the RFC's lease batch 1.
        if not stalled:
            self._served = {}
        elif not self._stalled:
            self._waiting_since = self._receiver._next_ticket()
            self._served = {}
        elif any(granted_now.values()):
            maximum = self._receiver.allocator.config.max_grant
            for r, amount in granted_now.items():
                self._served[r] = self._served.get(r, 0) + amount
            if any(a and a >= maximum[r] for r, a in self._served.items()):
                self._waiting_since = self._receiver._next_ticket()
                self._served = {}
        self._stalled = stalled

    def receive_message(self, data: bytes, now_ns: int) -> list[EndpointEvent]:
        """Decode and apply one message from the sender. Peer misbehaviour is counted and
        reported as an event, never raised; raises :class:`InvalidArgument` for a bad
        ``now_ns`` or a ``data`` that is not bytes-like (a released ``memoryview`` included) and
        :class:`LocalProtocolError` on a closed endpoint, before anything changes."""
        _check_now(now_ns)
        (raw,) = _byte_items((data,))
        if self._closed:
            raise LocalProtocolError("endpoint closed (its sender reconnected or disconnected)")
        self._received += 1
        try:
            message = decode(raw)
        except DecodeError as exc:
            return [self._violation(f"undecodable message: {exc}")]
        trace = self._receiver._trace
        if trace is not None:
            # no state rides on a receive: an eager grant shows on the send that publishes it
            trace.record(
                "receiver", "receive", {"peer": self._sender_peer, "msg": message_fields(message)}
            )
        if self._receiver.allocator.is_quarantined(self._sender_peer, self._qos_class):
            # RFC rule 4: nothing of a quarantined key is applied or answered (docs/abuse.md)
            return [EndpointEvent(kind="update_ignored", detail="key quarantined")]
        if isinstance(message, CapabilityOffer):
            return self._on_offer(message)
        if isinstance(message, SenderCreditUsage | CreditReturn | Heartbeat):
            if message.qos_class != self._qos_class:
                # identity is bound to the connection: a payload naming another class is a lie
                return [self._violation(f"payload names qos class {message.qos_class}")]
            if (
                message.receiver_session_id != self._receiver.session
                or message.epoch != self._epoch
            ):
                return [EndpointEvent(kind="update_ignored", detail="other session or epoch")]
            if isinstance(message, Heartbeat):
                self._due(push=True)  # answer with a refresh of the full vector
                return []
            return self._on_usage(message)
        return [self._violation(f"a sender does not send {type(message).__name__}")]

    def _on_offer(self, offer: CapabilityOffer) -> list[EndpointEvent]:
        if offer.qos_class != self._qos_class:
            return [self._violation(f"offer names qos class {offer.qos_class}")]
        mine = self._receiver.versions
        if not self._ahead_allowed:
            # the staging reserve is never granted ahead: its key speaks version 1 only
            mine = tuple(v for v in mine if v != GRANT_AHEAD_VERSION) or mine
        common = max(set(mine) & set(offer.versions), default=0)
        again = common == self._version == GRANT_AHEAD_VERSION
        self._version = common
        # A duplicated offer gets the same activation again: epochs move only on reconnect.
        self._due()
        self._pending_activation = CapabilityActivation(
            versions=mine,
            selected_version=common,
            receiver_session_id=self._receiver.session,
            epoch=self._epoch if common else 0,
            qos_class=self._qos_class,
            freshness_ttl_ms=self._receiver.freshness_ttl_ms,
        )
        if common == GRANT_AHEAD_VERSION:
            self._due(push=True)
            if not again:  # a duplicated offer: its key is known, nothing to re-evaluate
                self._grant_initial()
                self._receiver._ahead.membership_changed()
            return [EndpointEvent(kind="activated", detail=f"epoch {self._epoch}")]
        if common:
            # the initial grant is a target total, so a duplicated offer cannot grant it twice
            for resource, amount in self._receiver.initial_demand.items():
                if amount > self._demand_target.get(resource, 0):
                    self._demand_target[resource] = amount
            self._grant_outstanding_demand()
            self._due(push=True)
            return [EndpointEvent(kind="activated", detail=f"epoch {self._epoch}")]
        return [EndpointEvent(kind="legacy_fallback", detail="no common version")]

    def _grant_initial(self) -> None:
        # Version 2: the activation's grant is what the initial grant still lacks (a target
        # total: a duplicated offer grants nothing twice), exactly or not at all.
        allocator = self._receiver.allocator
        granted = allocator.key_totals(self._sender_peer, self._qos_class, self._epoch).granted
        want = {
            r: a - granted.get(r, 0)
            for r, a in self._receiver.initial_demand.items()
            if a > granted.get(r, 0)
        }
        if want and allocator.grant_exact(self._sender_peer, self._qos_class, want) is not None:
            self._due(news=True)

    def _on_usage(self, usage: SenderCreditUsage | CreditReturn) -> list[EndpointEvent]:
        if usage.sequence <= self._usage_sequence:
            self._usage_duplicates += 1
            return [EndpointEvent(kind="update_ignored", detail="duplicate or old usage")]
        consumed = (
            {a.resource: a.amount for a in usage.consumed_totals}
            if isinstance(usage, SenderCreditUsage)
            else {}
        )
        returned = {a.resource: a.amount for a in usage.returned_totals}
        target = (
            {a.resource: a.amount for a in usage.pending_demand}
            if isinstance(usage, SenderCreditUsage)
            else None
        )
        allocator = self._receiver.allocator
        modelled = allocator.config.capacity
        # docs/design.md#principle-5: the whole report is validated before any of it applies (issue
        # 10 item 4: a report refused for its demand had already reclaimed its returns, and the
        # stalled senders were never pushed the capacity those returns freed).
        if any(r not in modelled for r in (*consumed, *returned)):
            return [self._violation("usage names a resource this receiver does not model")]
        if target is not None and any(r not in modelled for r in target):
            return [self._violation("demand names a resource this receiver does not model")]
        try:
            reclaimed = allocator.on_usage(
                self._sender_peer,
                self._qos_class,
                self._epoch,
                consumed_totals=consumed,
                returned_totals=returned,
            )
        except (RemoteProtocolError, InvalidArgument) as exc:
            return [self._violation(str(exc))]
        self._usage_sequence = usage.sequence
        self._usage_applied += 1
        events = [EndpointEvent(kind="usage_applied")]
        if self._version == GRANT_AHEAD_VERSION:
            self._on_level(target, consumed, returned)
            if any(reclaimed.values()):
                self._receiver._capacity_freed()
            return events
        if target is not None:
            self._demand_target = target
            # the sender's whole waiting work (its target was consumed + returned + waiting):
            # the fair split's charge unit even where credit on hand hides a resource
            totals = allocator.key_totals(self._sender_peer, self._qos_class, self._epoch)
            self._waiting = {
                r: t - totals.consumed_reported[r] - totals.returned_reported[r]
                for r, t in target.items()
                if t > totals.consumed_reported[r] + totals.returned_reported[r]
            }
            if any(target.values()):
                # A sender that still asks evidently lacks the vector that covers it (the update
                # was lost): answer with the full vector even if nothing new is granted. Found by
                # the model checker on version 1's gated spec: without it, and without the
                # refresh timer, one lost update stalled the key for good. (Version 2 answers
                # only repeated reports and relies on the refreshes: `gated/bad/no_refresh`.)
                self._due(push=True)
            events.extend(self._grant_outstanding_demand())
        if any(reclaimed.values()):
            self._receiver._capacity_freed()
        return events

    def _on_level(
        self,
        target: Mapping[CreditResource, int] | None,
        consumed: Mapping[CreditResource, int],
        returned: Mapping[CreditResource, int],
    ) -> None:
        # Version 2: the report's demand is consumed + returned + level (docs/credit_protocol.md
        # "Grant-ahead"); a CreditReturn carries no level and leaves the key's as it was.
        if target is None:
            return
        level = {
            r: t - consumed.get(r, 0) - returned.get(r, 0)
            for r, t in target.items()
            if t > consumed.get(r, 0) + returned.get(r, 0)
        }
        back = tuple(sorted((r, a) for r, a in returned.items() if a))
        content = (tuple(sorted(level.items())), back)
        if content == self._last_report:
            # the sender repeats itself only when it suspects a lost message (_levels rule 3):
            # answer with the full vector, even if nothing changed since the last update
            self._due(push=True)
        self._last_report = content
        changed = level != self._level
        self._level = level
        if changed:
            self._receiver._ahead.level_changed(self)

    def _outstanding_demand(self) -> dict[CreditResource, int]:
        totals = self._receiver.allocator.key_totals(
            self._sender_peer, self._qos_class, self._epoch
        )
        return {
            r: t - totals.granted.get(r, 0)
            for r, t in self._demand_target.items()
            if t > totals.granted.get(r, 0)
        }

    def _grant_outstanding_demand(self) -> list[EndpointEvent]:
        demand = self._outstanding_demand()
        if not demand:
            # withdrawn or met: the key leaves the fair split, and freed capacity goes elsewhere
            self._receiver.allocator.withdraw_demand(self._sender_peer, self._qos_class)
            self._set_stalled(False, {})
            self._retry_after_us = 0  # nothing waits: later updates must not ask for a retry
            return []
        return self._grant(demand)

    def _grant(self, demand: Mapping[CreditResource, int]) -> list[EndpointEvent]:
        if not demand:
            return []
        decision = self._receiver.allocator.grant(
            self._sender_peer, self._qos_class, demand, waiting=self._waiting
        )
        if any(decision.granted_now.values()):
            self._due(push=True)
        if decision.retry_after_us:
            self._demands_blocked += 1
            self._set_stalled(True, decision.granted_now)
            self._retry_after_us = decision.retry_after_us
            self._due(push=True)  # tell the sender when to expect more
            return [EndpointEvent(kind="demand_blocked", detail=str(decision.blocked))]
        self._set_stalled(bool(self._outstanding_demand()), decision.granted_now)
        self._retry_after_us = 0
        return []

    def _pushable(self) -> bool:
        quarantined = self._receiver.allocator.is_quarantined(self._sender_peer, self._qos_class)
        return self._stalled and not self._closed and not quarantined

    def _capacity_freed(self) -> None:
        if self._pushable():
            self._grant_outstanding_demand()

    def _news(self) -> tuple[object, ...]:
        # what makes an update news to its sender: the grant totals and whether to wait
        granted = self._receiver.allocator.granted(self._sender_peer, self._qos_class, self._epoch)
        return (tuple(granted.values()), self._retry_after_us)

    def _update(self) -> ReceiverCreditUpdate:
        totals = self._receiver.allocator.key_totals(
            self._sender_peer, self._qos_class, self._epoch
        )
        self._sequence += 1
        return ReceiverCreditUpdate(
            qos_class=self._qos_class,
            receiver_session_id=self._receiver.session,
            epoch=self._epoch,
            sequence=self._sequence,
            freshness_ttl_ms=self._receiver.freshness_ttl_ms,
            grants=_amounts(totals.granted),
            retry_after_us=self._retry_after_us,
        )

    def messages_to_send(self, now_ns: int) -> list[bytes]:
        """The activation (once per offer) and at most one update: the latest full vector."""
        _check_now(now_ns)
        self._receiver._due.pop(self, None)  # asked now, whoever asks (a flush, a harness)
        if self._closed:
            return []
        refresh = self._receiver.refresh_interval_ns
        last = self._last_push_ns
        refresh_due = bool(
            self._version and refresh and last is not None and now_ns - last >= refresh
        )
        if not (self._pending_activation or self._push_due or self._news_due or refresh_due):
            return []  # the common case, checked first: a flush asks every endpoint
        out: list[ControlMessage] = []
        if self._pending_activation is not None:
            out.append(self._pending_activation)
            self._pending_activation = None
        if refresh_due:
            self._push_due = True
        if self._version == GRANT_AHEAD_VERSION and not self._push_due and self._news_due:
            # version 2: no frame without news (the grants or the retry hint moved)
            self._push_due = self._news() != self._last_sent
        self._news_due = False
        if self._version and self._push_due:
            out.append(self._update())
            self._push_due = False
            self._last_push_ns = now_ns
            self._pushed += 1
            news = self._news()
            self._repeated += news == self._last_sent
            self._last_sent = news
        self._sent += len(out)
        trace = self._receiver._trace
        if trace is not None:
            for m in out:
                trace.record(
                    "receiver",
                    "send",
                    {
                        "peer": self._sender_peer,
                        "msg": message_fields(m),
                        "vars": self._receiver._trace_vars(
                            self._sender_peer, self._qos_class, self._epoch
                        ),
                    },
                )
        return [encode(m) for m in out]

    def get_timer(self) -> int | None:
        refresh = self._receiver.refresh_interval_ns
        if self._closed or not self._version or not refresh or self._last_push_ns is None:
            return None
        return self._last_push_ns + refresh

    def handle_timer(self, now_ns: int) -> None:
        """Nothing to evaluate: the refresh is produced by :meth:`messages_to_send`."""
        _check_now(now_ns)

    def close(self) -> None:
        self._closed = True
        self._receiver._due.pop(self, None)

    def statistics(self) -> ReceiverEndpointStatistics:
        return ReceiverEndpointStatistics(
            sender_peer=self._sender_peer,
            qos_class=self._qos_class,
            epoch=self._epoch,
            version=self._version,
            messages_received=self._received,
            messages_sent=self._sent,
            updates_pushed=self._pushed,
            usage_applied=self._usage_applied,
            usage_duplicates=self._usage_duplicates,
            demands_blocked=self._demands_blocked,
            protocol_violations=self._violations,
            stalled=self.stalled,
            updates_repeated=self._repeated,
        )


class CreditReceiver:
    """One receiver node: a session, its global allocator, and an endpoint per connection.

    A receiver restart is a new :class:`CreditReceiver` with a new :class:`SessionId`: its
    activations carry the new session, which fences every sender's old ledger entry.

    ``initial_grant`` is what an activation grants up front (keep it small: RFC principle 3).
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
    ) -> None:
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
            self._allocator, self._ahead_endpoints, static=config.grant_chunk
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
