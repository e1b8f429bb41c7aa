"""The sender side of the credit protocol: :class:`SenderEndpoint` (see :mod:`._endpoints`).

The class is assembled from mixins split by responsibility: :mod:`._sender_state` (its state,
clock and read-only views), :mod:`._sender_reserve` (the reservation path) and
:mod:`._sender_reports` (the messages for the receiver). This module holds the session itself:
connect, reconnect and disconnect, what the receiver sends (activations, which fence an old
epoch, and credit updates), freshness, and the statistics.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from ._endpoint_common import EndpointEvent, _byte_items
from ._inbox import InboxOutcome
from ._ledger import UpdateDisposition, update_acceptance
from ._messages import CapabilityActivation, ControlMessage, ReceiverCreditUpdate
from ._negotiation import NegotiationState
from ._sender_reports import _SenderReports
from ._sender_reserve import _SenderReservations
from ._trace import message_fields
from ._types import CreditKey, CreditResource, SessionId
from ._wire import decode
from .errors import (
    DecodeError,
    InvalidArgument,
    InvalidEntry,
    LocalProtocolError,
    NegotiationFailed,
    RemoteProtocolError,
)

__all__ = ["SenderEndpoint", "SenderEndpointStatistics"]


@attrs.frozen(kw_only=True)
class SenderEndpointStatistics:
    """A snapshot of a sender endpoint (counters since construction)."""

    state: NegotiationState
    key: CreditKey | None
    messages_received: int
    messages_sent: int
    protocol_violations: int
    updates_applied: int
    updates_ignored: int
    duplicates_or_old: int
    sequence_gaps: int
    epoch_resets: int
    stale_transitions: int
    reservations: int
    blocked: int
    in_flight: int
    fenced_in_flight: int
    demand_target: Mapping[CreditResource, int]
    update_age_ns: int | None
    reports_repeated: int = 0
    """Usage reports that carried the same demand and returns as the previous one (version 2:
    only refreshes; version 1: re-reports of an unmet demand)."""


# one frozen event per disposition, made once: a sender applies an update per transfer
_GRANT_APPLIED = {d: EndpointEvent(kind="grant_applied", detail=d.name) for d in UpdateDisposition}


class SenderEndpoint(_SenderReservations, _SenderReports):
    """The sender side of one control connection to one receiver, for one QoS class.

    Ties together negotiation (:class:`PeerNegotiation`), the ledger
    (:class:`SenderCreditLedger`), the coalescing inbox, demand reporting (pull), freshness and
    epoch fencing.

    Protocol version 2 (grant-ahead, negotiated with receivers that offer it): a usage report
    states the sender's level, its work in flight plus waiting, and goes out only with news
    (:mod:`tent_credit._levels`): a rise or a return at once, idle credit once it lasted
    ``level_hold_ns`` (default 20 usage intervals; it is returned with the report), and a
    refresh every ``refresh_interval_ns`` (default half the freshness TTL; 0: none).

    Version 1: usage is reported at most once per ``usage_interval_ns`` while something
    changed (consumption, returns or demand) or demand is unmet, except the report of a sender
    that *starts* wanting: its demand is unmet and the last target it reported is covered by its
    grant, so the receiver believes it needs nothing. That report goes out at once. A heartbeat
    asks the receiver for a refresh when the grant is older than half its TTL.

    Raises :class:`InvalidArgument` for invalid construction arguments.
    """

    # ---------------------------------------------------------------- lifecycle

    def connect(self, now_ns: int) -> None:
        """The control connection is up: start negotiating (offer our versions).

        DISABLED mode goes straight to LEGACY and sends nothing. Raises
        :class:`LocalProtocolError` if already started; a failure changes nothing.
        """
        self._check_time(now_ns)
        self._negotiation.start(now_ns)  # raises (changing nothing) if already started
        self._advance(now_ns)
        if self._negotiation.state is NegotiationState.NEGOTIATING:
            self._awaiting_activation = True
        if self._trace is not None:
            self._trace.record(self._node, "start", {"vars": self._trace_vars()})

    def reconnect(self, now_ns: int) -> None:
        """A new control connection replaced the lost one: offer our versions again.

        The receiver answers with an activation of a new epoch (or, after a receiver restart, a
        new session), which fences the old ledger entry; dispatch resumes once the old epoch's
        in-flight work drained. Raises :class:`LocalProtocolError` before :meth:`connect` or in
        DISABLED / LEGACY / FAILED (nothing to renegotiate); a failure changes nothing.
        """
        state = self._negotiation.state
        if state in (
            NegotiationState.DISABLED,
            NegotiationState.LEGACY,
            NegotiationState.FAILED,
        ):
            raise LocalProtocolError(f"cannot reconnect in state {state.name}")
        self._advance(now_ns)
        self._awaiting_activation = True
        self._last_offer_ns = None

    def disconnect(self, now_ns: int) -> None:
        """The control connection was lost: ACTIVE → STALE; no new credit-gated dispatch."""
        self._check_time(now_ns)
        before = self._negotiation.state
        self._negotiation.on_disconnect()  # raises (changing nothing) before connect
        self._advance(now_ns)
        if before is NegotiationState.ACTIVE:
            self._stale_transitions += 1
        self._outbox.clear()
        self._awaiting_activation = False
        if self._trace is not None:
            self._trace.record(self._node, "disconnect", {"vars": self._trace_vars()})

    # ---------------------------------------------------------------- input

    def receive_message(self, data: bytes, now_ns: int) -> list[EndpointEvent]:
        """Decode and apply one message from the receiver; see :meth:`receive_batch`."""
        return self.receive_batch((data,), now_ns)

    def receive_batch(self, datas: Iterable[bytes], now_ns: int) -> list[EndpointEvent]:
        """Decode and apply a burst of messages from the receiver.

        Activations are applied at once; credit updates go through the bounded inbox, which
        keeps only the newest per key by (epoch, sequence), and are then applied to the ledger
        in one pass (RFC concurrency rules 1–2). Nothing raises for a peer's misbehaviour: a
        malformed message, a decreasing grant or a payload naming another class fails closed,
        is counted as a protocol violation and reported as an event. Raises
        :class:`InvalidArgument` only for the caller's errors, before anything changes: a bad
        ``now_ns``, or ``datas`` not an iterable of bytes-like items (a released
        ``memoryview`` included).
        """
        raws = _byte_items(datas)
        self._advance(now_ns)
        events: list[EndpointEvent] = []
        received: list[ControlMessage] = []
        for data in raws:
            self._received += 1
            try:
                message = decode(data)
            except DecodeError as exc:
                events.append(self._violation(f"undecodable message: {exc}"))
                continue
            if self._trace is not None:
                received.append(message)
            if isinstance(message, CapabilityActivation):
                events.extend(self._on_activation(message, now_ns))
            elif isinstance(message, ReceiverCreditUpdate):
                events.extend(self._offer_update(message))
            else:
                events.append(self._violation(f"a receiver does not send {type(message).__name__}"))
        for key, update in self._inbox.drain():
            events.extend(self._apply_update(key, update, now_ns))
        if self._trace is not None:
            # one event per message; the state after the whole batch rides on the last one
            for i, message in enumerate(received, start=1):
                fields: dict[str, object] = {"msg": message_fields(message)}
                if i == len(received):
                    fields["vars"] = self._trace_vars()
                self._trace.record(self._node, "receive", fields)
        return events

    def _violation(self, detail: str) -> EndpointEvent:
        self._violations += 1
        return EndpointEvent(kind="protocol_violation", detail=detail)

    def _on_activation(self, act: CapabilityActivation, now_ns: int) -> list[EndpointEvent]:
        if act.qos_class != self._qos_class:
            return [self._violation(f"activation names qos class {act.qos_class}")]
        state = self._negotiation.state
        if state is NegotiationState.NEGOTIATING:
            try:
                new_state = self._negotiation.on_activation(act, now_ns)
                self._note_version()
            except NegotiationFailed as exc:
                return [EndpointEvent(kind="negotiation_failed", detail=str(exc))]
            except RemoteProtocolError as exc:
                return [self._violation(str(exc))]
            self._awaiting_activation = False
            if new_state is NegotiationState.LEGACY:
                return [EndpointEvent(kind="legacy_fallback", detail="no common version")]
            self._install_key(act.receiver_session_id, act.epoch)
            return [EndpointEvent(kind="activated", detail=f"epoch {act.epoch}")]
        if state in (NegotiationState.ACTIVE, NegotiationState.STALE, NegotiationState.FENCING):
            assert self._key is not None
            if act.receiver_session_id < self._key.receiver_session:
                # Session ids of one receiver only grow (each restart mints a larger one), so
                # this is a dead incarnation's activation reordered past a newer one: ignore it.
                self._ignored += 1
                return [
                    EndpointEvent(kind="update_ignored", detail="activation of an older session")
                ]
            if act.selected_version and act.epoch == 0:
                # RFC "wrong-epoch updates fail closed": epoch 0 is reserved (issue 10 item 2)
                return [self._violation("an activation that selects a version must carry an epoch")]
            same_session = act.receiver_session_id == self._key.receiver_session
            if same_session and act.epoch == self._epoch:
                self._awaiting_activation = False  # the reconnect was answered with our epoch
            if same_session and act.epoch <= self._epoch:
                self._ignored += 1  # a duplicated or older activation: nothing new
                return [EndpointEvent(kind="update_ignored", detail="old activation")]
            if act.selected_version != self._negotiation.version:
                return [self._violation("a re-activation changed the protocol version")]
            try:
                self._negotiation.on_new_session_or_epoch(
                    act.receiver_session_id,
                    act.epoch,
                    now_ns,
                    freshness_ttl_ms=act.freshness_ttl_ms,
                )
            except RemoteProtocolError as exc:
                return [self._violation(str(exc))]
            self._awaiting_activation = False
            old_key, old_epoch = self._key, self._epoch
            self._install_key(act.receiver_session_id, act.epoch, fence=(old_key, old_epoch))
            events = [EndpointEvent(kind="session_fenced", detail=f"epoch {act.epoch}")]
            events.extend(self._maybe_fence_drained(now_ns))
            return events
        self._ignored += 1
        return [EndpointEvent(kind="update_ignored", detail=f"activation in {state.name}")]

    def _install_key(
        self,
        session: SessionId,
        epoch: int,
        fence: tuple[CreditKey, int] | None = None,
    ) -> None:
        key = CreditKey(
            receiver_session=session, sender_peer=self.sender_peer, qos_class=self._qos_class
        )
        if fence is not None:
            old_key, old_epoch = fence
            # The epoch fence: old tokens can no longer touch any entry
            # (docs/semantics.md#sender-ledger).
            self._ledger.deactivate(old_key, old_epoch)
        self._ledger.activate(key, epoch)
        self._key = key
        self._epoch = epoch
        self._slot = (session.value, epoch)
        self._usage_sequence = 0
        self._demand_target = {}
        self._reported_target = {}
        self._retry_after_us = 0
        # version 1 introduces itself to the new epoch with a usage report; version 2 reports
        # once it has a level (_levels: no frame without news)
        self._usage_dirty = True
        self._last_usage_ns = None
        self._levels.reset(self._now_ns)
        self._direct_waiting = False

    def _offer_update(self, update: ReceiverCreditUpdate) -> list[EndpointEvent]:
        key = self._key
        if key is None:
            self._ignored += 1
            return [EndpointEvent(kind="update_ignored", detail="not active")]
        if update.qos_class != self._qos_class:
            return [self._violation(f"update names qos class {update.qos_class}")]
        # the session ids' values: an attrs __ne__ is two Python calls per update
        if (
            update.receiver_session_id.value != key.receiver_session.value
            or update.epoch != self._epoch
        ):
            # an old session/epoch (reordered past a fence) or one not activated yet
            self._ignored += 1
            return [EndpointEvent(kind="update_ignored", detail="other session or epoch")]
        # Validate before coalescing: an update the ledger would refuse must not displace a
        # pending valid one in the inbox (issue 10 item 3).
        if update.sequence == 0:
            return [self._violation("update sequence 0 is reserved")]
        last_sequence, previous, _, _ = self._ledger.vectors(key)
        pairs = [(int(g.resource), g.amount) for g in update.grants]
        if update_acceptance(last_sequence, update.sequence, previous, pairs) is None:
            return [self._violation("update lowers a cumulative grant")]
        if self._inbox.offer(key, update) is InboxOutcome.REJECTED_DECREASING:
            return [self._violation("update lowers a grant of the pending update")]
        return []

    def _apply_update(
        self, key: CreditKey, update: ReceiverCreditUpdate, now_ns: int
    ) -> list[EndpointEvent]:
        try:
            disposition = self._ledger.apply_update(key, update)
        except InvalidArgument as exc:  # decreasing grant, below consumption: fail closed
            return [self._violation(str(exc))]
        except InvalidEntry:  # fenced between offer and drain
            self._ignored += 1
            return [EndpointEvent(kind="update_ignored", detail="fenced")]
        if disposition is UpdateDisposition.DUPLICATE_OR_OLD:
            return [EndpointEvent(kind="update_ignored", detail="duplicate or old")]
        self._retry_after_us = update.retry_after_us
        if self._ahead:
            self._observe_level()  # credit on hand grew: idle beyond the waiting work?
        elif update.retry_after_us and not self._demand_unmet():
            # The receiver still holds a demand this sender withdrew (the report that said so
            # was lost): report again, or freed capacity keeps going to work that is gone.
            self._usage_dirty = True
        try:  # noqa: SIM105 (suppress() is three Python calls, per update)
            self._negotiation.on_update_accepted(
                update.receiver_session_id,
                update.epoch,
                now_ns,
                freshness_ttl_ms=update.freshness_ttl_ms,
            )
        except LocalProtocolError:
            pass  # after a disconnect, STALE waits for the reconnect's activation, not an update
        self._heartbeat_sent_ns = None
        return [_GRANT_APPLIED[disposition]]

    # ---------------------------------------------------------------- timer and statistics

    def handle_timer(self, now_ns: int) -> list[EndpointEvent]:
        """Evaluate freshness on the sender's clock (ACTIVE → STALE once the TTL has run out)."""
        self._advance(now_ns)
        before = self._negotiation.state
        after = self._negotiation.check_freshness(self._now_ns)
        if before is NegotiationState.ACTIVE and after is NegotiationState.STALE:
            self._stale_transitions += 1
            if self._trace is not None:
                self._trace.record(self._node, "stale", {"vars": self._trace_vars()})
            return [EndpointEvent(kind="became_stale")]
        return []

    def statistics(self) -> SenderEndpointStatistics:
        ls = self._ledger.statistics()
        current = self._in_flight.get(self._slot, 0) if self._slot else 0
        return SenderEndpointStatistics(
            state=self._negotiation.state,
            key=self._key,
            messages_received=self._received,
            messages_sent=self._sent,
            protocol_violations=self._violations,
            updates_applied=ls.updates_applied,
            updates_ignored=self._ignored,
            duplicates_or_old=ls.duplicates_or_old,
            sequence_gaps=ls.sequence_gaps,
            epoch_resets=ls.epoch_resets,
            stale_transitions=self._stale_transitions,
            reservations=ls.reservations,
            blocked=self._blocked,
            in_flight=current,
            fenced_in_flight=self._fenced_in_flight(),
            demand_target=dict(self._demand_target),
            update_age_ns=self._negotiation.update_age_ns(self._now_ns),
            reports_repeated=self._reports_repeated,
        )
