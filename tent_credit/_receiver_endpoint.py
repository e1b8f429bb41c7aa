"""The receiver side of one sender's control connection: :class:`ReceiverEndpoint`.

The endpoint answers its sender's capability offer, applies its usage reports, grants its
demand from the shared allocator and decides what to send it (activation, updates, refreshes);
the protocol is described in :mod:`._endpoints`. The node that owns the endpoints, the
allocator and the grant-ahead loop is :class:`~tent_credit.CreditReceiver`
(:mod:`._credit_receiver`), which imports this module: the endpoint names only what it uses of
its receiver (:class:`OwningReceiver`), so the two modules do not import each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import attrs

from ._allocator import ReceiverCreditAllocator
from ._endpoint_common import EndpointEvent, _byte_items, _check_now
from ._messages import (
    GRANT_AHEAD_VERSION,
    CapabilityActivation,
    CapabilityOffer,
    ControlMessage,
    CreditReturn,
    Heartbeat,
    SenderCreditUsage,
)
from ._standing import StandingGrants
from ._trace import TraceSink, message_fields
from ._types import CreditResource, SessionId
from ._wire import decode, encode, encode_update
from .errors import DecodeError, InvalidArgument, LocalProtocolError, RemoteProtocolError

__all__ = [
    "HEARTBEAT_ANSWER_NS",
    "OwningReceiver",
    "ReceiverEndpoint",
    "ReceiverEndpointStatistics",
]

HEARTBEAT_ANSWER_NS = 10_000_000
"""A heartbeat is answered with a refresh only if no update went to its key within this long
(10 ms, or a quarter of the freshness TTL if that is shorter): at most 100 answers a second per
key, whatever the peer sends within its control rate."""


class OwningReceiver(Protocol):
    """What a :class:`ReceiverEndpoint` uses of the :class:`~tent_credit.CreditReceiver` that
    created it: the shared allocator and settings, the set of endpoints that may owe a message,
    the push order's clock, the grant-ahead loop, the push when capacity frees, and the trace."""

    _due: dict[ReceiverEndpoint, None]
    _trace: TraceSink | None
    _ahead: StandingGrants

    @property
    def session(self) -> SessionId: ...

    @property
    def allocator(self) -> ReceiverCreditAllocator: ...

    @property
    def versions(self) -> tuple[int, ...]: ...

    @property
    def freshness_ttl_ms(self) -> int: ...

    @property
    def refresh_interval_ns(self) -> int: ...

    @property
    def initial_demand(self) -> Mapping[CreditResource, int]: ...

    def _next_ticket(self) -> int: ...

    def _capacity_freed(self) -> None: ...

    def _trace_vars(self, sender_peer: int, qos_class: int, epoch: int) -> dict[str, object]: ...


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
    heartbeats_unanswered: int = 0
    """Heartbeats not answered with a refresh, because an update went to the key within
    :data:`HEARTBEAT_ANSWER_NS` (docs/credit_protocol.md, push rule 3). Those that arrive while
    a refresh is already due are answered by it and not counted."""


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
        receiver: OwningReceiver,
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
        self._heartbeats_unanswered = 0

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
                self._on_heartbeat(now_ns)
                return []
            return self._on_usage(message)
        return [self._violation(f"a sender does not send {type(message).__name__}")]

    def _on_heartbeat(self, now_ns: int) -> None:
        # Answered with a refresh of the full vector, unless one is already due or an update
        # went to the key moments ago (it crossed the heartbeat, or was lost: the sender's
        # next heartbeat, half a TTL later, is answered). An honest sender heartbeats once per
        # half TTL; a peer that sends 1,500 a second (within its control rate) made the
        # receiver encode and send 1,500 refreshes a second, about 6 % of a core here.
        if self._push_due:
            return  # the refresh already due answers it too
        last = self._last_push_ns
        ttl_ms = self._receiver.freshness_ttl_ms
        interval = min(HEARTBEAT_ANSWER_NS, ttl_ms * 250_000) if ttl_ms else HEARTBEAT_ANSWER_NS
        if last is not None and now_ns - last < interval:
            self._heartbeats_unanswered += 1
            return
        self._due(push=True)

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
                # version 2 reads in-flight data from it; only newer reports get here
                latest=self._version == GRANT_AHEAD_VERSION and target is not None,
            )
        except (RemoteProtocolError, InvalidArgument) as exc:
            return [self._violation(str(exc))]
        self._usage_sequence = usage.sequence
        self._usage_applied += 1
        events = [EndpointEvent(kind="usage_applied")]
        if self._version == GRANT_AHEAD_VERSION:
            self._on_level(target, consumed, returned)
            if any(reclaimed.values()):
                self._receiver._ahead.returned(self)  # its unlanded credit fell: re-evaluate
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

    def _granted(self) -> Mapping[CreditResource, int]:
        return self._receiver.allocator.granted(self._sender_peer, self._qos_class, self._epoch)

    def _news(self, granted: Mapping[CreditResource, int]) -> tuple[object, ...]:
        # what makes an update news to its sender: the grant totals and whether to wait
        return (tuple(granted.values()), self._retry_after_us)

    def _update_bytes(self, granted: Mapping[CreditResource, int]) -> bytes:
        # the next update, encoded without building the message (one per top-up)
        self._sequence += 1
        receiver = self._receiver
        return encode_update(
            self._qos_class,
            receiver.session,
            self._epoch,
            self._sequence,
            receiver.freshness_ttl_ms,
            granted,
            self._retry_after_us,
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
        granted = None  # read once: nothing below changes the books
        if self._version == GRANT_AHEAD_VERSION and not self._push_due and self._news_due:
            # version 2: no frame without news (the grants or the retry hint moved)
            granted = self._granted()
            self._push_due = self._news(granted) != self._last_sent
        self._news_due = False
        update = b""
        trace = self._receiver._trace
        if self._version and self._push_due:
            if granted is None:
                granted = self._granted()
            update = self._update_bytes(granted)
            self._push_due = False
            self._last_push_ns = now_ns
            self._pushed += 1
            news = self._news(granted)
            self._repeated += news == self._last_sent
            self._last_sent = news
        self._sent += len(out) + bool(update)
        if trace is not None:
            # the update as a message only for the trace: decode is encode's inverse
            for m in [*out, decode(update)] if update else out:
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
        frames = [encode(m) for m in out]
        if update:
            frames.append(update)
        return frames

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
            heartbeats_unanswered=self._heartbeats_unanswered,
        )
