"""The sender side of the credit protocol: :class:`SenderEndpoint` (see :mod:`._endpoints`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping

import attrs

from ._arith import U64_MAX, check_u64, checked_add
from ._backpressure import BackpressureInfo, BackpressureSource
from ._describe import describe
from ._endpoint_common import (
    EndpointEvent,
    _amounts,
    _byte_items,
    _check_now,
    _nonzero_amounts,
    _vector,
)
from ._inbox import ControlInbox, InboxOutcome
from ._ledger import (
    Blocked,
    ReservationToken,
    SenderCreditLedger,
    TokenState,
    UpdateDisposition,
    update_acceptance,
)
from ._levels import LevelReports
from ._messages import (
    GRANT_AHEAD_VERSION,
    SUPPORTED_VERSIONS,
    CapabilityActivation,
    CapabilityOffer,
    ControlMessage,
    Heartbeat,
    ReceiverCreditUpdate,
    SenderCreditUsage,
)
from ._negotiation import CreditMode, NegotiationState, PeerNegotiation
from ._trace import TraceSink, message_fields
from ._types import CreditCharge, CreditKey, CreditResource, SessionId
from ._wire import decode, encode
from .errors import (
    ArithmeticOverflow,
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


class SenderEndpoint:
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

    def __init__(
        self,
        *,
        sender_peer: int,
        qos_class: int = 0,
        mode: CreditMode = CreditMode.REQUIRED,
        usage_interval_ns: int = 1_000_000,
        versions: tuple[int, ...] = SUPPORTED_VERSIONS,
        trace: TraceSink | None = None,
        level_hold_ns: int | None = None,
        refresh_interval_ns: int | None = None,
    ) -> None:
        check_u64(sender_peer, "sender_peer")
        if refresh_interval_ns is not None:
            check_u64(refresh_interval_ns, "refresh_interval_ns")
        if level_hold_ns is not None:
            check_u64(level_hold_ns, "level_hold_ns")
        if type(qos_class) is not int or not 0 <= qos_class <= 0xFFFF_FFFF:
            raise InvalidArgument(f"qos_class must be a u32, got {describe(qos_class)}")
        check_u64(usage_interval_ns, "usage_interval_ns")
        self._negotiation = PeerNegotiation(
            mode=mode, sender_peer=sender_peer, local_versions=versions
        )
        self._qos_class = qos_class
        # one live entry plus the fenced ones still draining
        self._ledger = SenderCreditLedger(max_entries=4)
        self._inbox: ControlInbox[CreditKey] = ControlInbox(max_keys=2)
        self._usage_interval_ns = usage_interval_ns
        # version 2 (grant-ahead): the level this sender states and when it reports it
        hold = 20 * usage_interval_ns if level_hold_ns is None else level_hold_ns
        self._levels = LevelReports(hold)
        self._direct_waiting = False  # the waiting work came from blocked try_reserve calls
        self._last_report: tuple[object, ...] | None = None  # (demand − consumed, returned)
        self._reports_repeated = 0
        self._refresh_interval_ns = refresh_interval_ns
        self._key: CreditKey | None = None
        self._epoch = 0
        self._outbox: list[ControlMessage] = []
        self._usage_sequence = 0
        self._usage_dirty = False
        self._last_usage_ns: int | None = None
        self._heartbeat_sent_ns: int | None = None
        # an offer is retransmitted every usage interval until its activation arrives: the
        # control channel may lose it, and nothing else would ever re-open the negotiation
        self._awaiting_activation = False
        self._last_offer_ns: int | None = None
        self._demand_target: dict[CreditResource, int] = {}
        # the demand target the last usage report carried (see _starts_wanting)
        self._reported_target: dict[CreditResource, int] = {}
        self._retry_after_us = 0
        # committed, not yet completed work per (key, epoch): the fence drains the old ones
        self._in_flight: dict[tuple[CreditKey, int], int] = {}
        self._now_ns = 0
        self._received = 0
        self._sent = 0
        self._violations = 0
        self._ignored = 0
        self._stale_transitions = 0
        self._blocked = 0
        self._trace = trace  # docs/traces.md; None: tracing off
        self._node = f"sender:{sender_peer}"

    def _check_time(self, now_ns: int) -> None:
        # The endpoint's clock only moves forward: checked before anything changes, so a call
        # with a stale time fails whole instead of half-applying a batch.
        _check_now(now_ns)
        if now_ns < self._now_ns:
            raise InvalidArgument(f"now_ns {now_ns} is before the last time seen ({self._now_ns})")

    def _advance(self, now_ns: int) -> None:
        # Only once the whole call is validated: a refused call leaves the clock (and with it
        # ``update_age_ns``) where it was (docs/design.md#principle-5).
        self._check_time(now_ns)
        self._now_ns = now_ns

    # ---------------------------------------------------------------- properties

    @property
    def sender_peer(self) -> int:
        """The identity bound at connection setup; it never changes."""
        return self._negotiation.sender_peer

    @property
    def qos_class(self) -> int:
        return self._qos_class

    @property
    def state(self) -> NegotiationState:
        return self._negotiation.state

    @property
    def mode(self) -> CreditMode:
        return self._negotiation.mode

    @property
    def key(self) -> CreditKey | None:
        """The credit key of the current session (``None`` before activation)."""
        return self._key

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def ledger(self) -> SenderCreditLedger:
        """The ledger (read it; mutate it only through this endpoint)."""
        return self._ledger

    @property
    def ahead(self) -> bool:
        """Whether the receiver grants ahead of this sender (protocol version 2 negotiated)."""
        return self._negotiation.version == GRANT_AHEAD_VERSION

    def level(self) -> Mapping[CreditResource, int]:
        """Version 2: the level this sender states, its work in flight plus waiting for credit
        on the current key (see :mod:`tent_credit._levels`)."""
        return self._levels.level()

    def level_reports(self) -> tuple[
        Mapping[CreditResource, int], Mapping[CreditResource, int], Mapping[CreditResource, int]
    ]:
        """Version 2, read-only: the waiting work the gate stated on the current key, and the
        level and returned totals the last report on it carried (``{}``: none yet). The
        conformance harness reads them (docs/spec_review_gated.md)."""
        levels = self._levels
        return dict(levels.waiting), levels.reported, levels.reported_returned

    def available(self) -> Mapping[CreditResource, int]:
        """Available credit of the current key (all zero before the first update)."""
        if self._key is None or not self._ledger.entry(self._key).has_update:
            return dict.fromkeys(CreditResource, 0)
        return self._ledger.available(self._key)

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

    def _trace_vars(self) -> dict[str, object]:
        # The logged variables of a sender (docs/traces.md).
        out: dict[str, object] = {"state": self._negotiation.state.name}
        if self._key is None:
            out.update(session=0, epoch=0)
            return out
        entry = self._ledger.entry(self._key)
        out.update(
            session=self._key.receiver_session.value,
            epoch=self._epoch,
            grant_total=_vector(entry.grant_total),
            consumed=_vector(entry.consumed),
            returned=_vector(entry.returned),
        )
        return out

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

    def _fenced_in_flight(self) -> int:
        current = (self._key, self._epoch)
        return sum(n for slot, n in self._in_flight.items() if slot != current)

    def _maybe_fence_drained(self, now_ns: int) -> list[EndpointEvent]:
        if self._negotiation.state is not NegotiationState.FENCING:
            return []
        if self._fenced_in_flight():
            return []
        current = (self._key, self._epoch)
        self._in_flight = {slot: n for slot, n in self._in_flight.items() if slot == current}
        self._negotiation.on_fence_drained(now_ns)
        return [EndpointEvent(kind="fence_drained")]

    def _offer_update(self, update: ReceiverCreditUpdate) -> list[EndpointEvent]:
        key = self._key
        if key is None:
            self._ignored += 1
            return [EndpointEvent(kind="update_ignored", detail="not active")]
        if update.qos_class != self._qos_class:
            return [self._violation(f"update names qos class {update.qos_class}")]
        if update.receiver_session_id != key.receiver_session or update.epoch != self._epoch:
            # an old session/epoch (reordered past a fence) or one not activated yet
            self._ignored += 1
            return [EndpointEvent(kind="update_ignored", detail="other session or epoch")]
        # Validate before coalescing: an update the ledger would refuse must not displace a
        # pending valid one in the inbox (issue 10 item 3).
        if update.sequence == 0:
            return [self._violation("update sequence 0 is reserved")]
        entry = self._ledger.entry(key)
        previous = [0] * (max(CreditResource) + 1)
        for resource, total in entry.grant_total.items():
            previous[resource] = total
        pairs = [(int(g.resource), g.amount) for g in update.grants]
        if update_acceptance(entry.last_sequence, update.sequence, previous, pairs) is None:
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
        if self.ahead:
            self._observe_level()  # credit on hand grew: idle beyond the waiting work?
        elif update.retry_after_us and not self._demand_unmet():
            # The receiver still holds a demand this sender withdrew (the report that said so
            # was lost): report again, or freed capacity keeps going to work that is gone.
            self._usage_dirty = True
        # after a disconnect, STALE waits for the reconnect's activation, not for an update
        with contextlib.suppress(LocalProtocolError):
            self._negotiation.on_update_accepted(
                update.receiver_session_id,
                update.epoch,
                now_ns,
                freshness_ttl_ms=update.freshness_ttl_ms,
            )
        self._heartbeat_sent_ns = None
        return [EndpointEvent(kind="grant_applied", detail=disposition.name)]

    # ---------------------------------------------------------------- reservations

    def try_reserve(self, charge: CreditCharge, now_ns: int) -> ReservationToken | BackpressureInfo:
        """Reserve ``charge`` atomically against the current grant, or explain why not.

        Returns a RESERVED token, or a :class:`BackpressureInfo` (source RECEIVER_CREDIT) when
        the peer is not ACTIVE or some resource lacks credit; in the latter case the shortfall
        raises the demand target the next usage report carries. Raises
        :class:`InvalidArgument` for a malformed charge or a bad ``now_ns``, and
        :class:`ArithmeticOverflow` for a charge no u64 grant can ever cover (``consumed +
        returned + amount > 2**64 - 1``); a raised call changes nothing. A blocked reserve
        changes nothing but the demand target and the ``blocked`` counters.
        """
        if not isinstance(charge, CreditCharge):
            raise InvalidArgument(f"expected a CreditCharge, got {describe(charge)}")
        self._check_time(now_ns)
        if self._key is not None:
            self._check_satisfiable(self._key, charge)
        self._advance(now_ns)
        self._negotiation.check_freshness(self._now_ns)
        key = self._key
        if key is None or not self._negotiation.may_reserve():
            self._blocked += 1
            self._trace_reserve(charge, None)
            return self._backpressure(tuple(r for r, _ in charge.parts))
        if not self._ledger.entry(key).has_update:
            self._blocked += 1
            self._raise_demand(key, charge)
            self._trace_reserve(charge, None)
            return self._backpressure(tuple(r for r, _ in charge.parts))
        result = self._ledger.try_reserve(key, charge)
        if isinstance(result, Blocked):
            self._blocked += 1
            self._raise_demand(key, charge)
            self._trace_reserve(charge, None)
            return self._backpressure(result.exhausted)
        if self.ahead and self._direct_waiting:
            # version 2, a caller without a gate: the reserved charge no longer waits (it
            # joins the level as in flight once committed)
            waiting = self._levels.waiting
            for resource, amount in charge.parts:
                left = waiting.get(resource, 0) - amount
                if left > 0:
                    waiting[resource] = left
                else:
                    waiting.pop(resource, None)
        if self.ahead:
            self._observe_level()
        self._trace_reserve(charge, result)
        return result

    def _trace_reserve(self, charge: CreditCharge, token: ReservationToken | None) -> None:
        if self._trace is not None:
            self._trace.record(
                self._node,
                "reserve",
                {
                    "charge": _vector(charge.as_dict()),
                    "result": "blocked" if token is None else "reserved",
                    "token": 0 if token is None else token.token_id,
                    "vars": self._trace_vars(),
                },
            )

    def _trace_token(self, kind: str, token: ReservationToken) -> None:
        if self._trace is not None:
            self._trace.record(
                self._node,
                kind,
                {
                    "charge": _vector(token.charge.as_dict()),
                    "token": token.token_id,
                    "epoch": token.epoch,
                    "vars": self._trace_vars(),
                },
            )

    def set_pending_demand(self, waiting: Mapping[CreditResource, int]) -> None:
        """Declare the total charge of the work now waiting for credit (e.g. the credit-stalled
        owners of this key in the admission queue).

        The demand target becomes ``consumed + returned + waiting`` per resource, i.e. the
        cumulative grant under which all that work would fit. It moves down as well as up
        (issue 10 item 7, docs/abuse.md "Demand withdrawal"): a resource ``waiting`` omits has
        nothing waiting, and ``set_pending_demand({})`` withdraws the demand, so the receiver
        gives freed capacity to keys whose work is still there. Targets stay absolute, and the
        receiver applies only a report newer than the last one it applied, so a duplicated or
        reordered report can neither over-ask nor resurrect a withdrawn demand.
        Raises :class:`InvalidArgument` for a non-mapping or a malformed amount
        (:class:`ArithmeticOverflow` for a target past u64) and :class:`InvalidEntry` before
        activation; a failure changes nothing.
        """
        targets = self._demand_targets(waiting)  # validates everything first
        assert self._key is not None  # _demand_targets raised InvalidEntry otherwise
        if self.ahead:
            # version 2: the waiting work is part of the level (_levels), not a target
            self._levels.waiting = {r: a for r, a in waiting.items() if a}
            self._direct_waiting = False
            self._observe_level()
            return
        entry = self._ledger.entry(self._key)
        for resource in self._demand_target:
            if resource not in targets:  # nothing of it waits any more
                targets[resource] = entry.consumed[resource] + entry.returned[resource]
        targets = {r: t for r, t in targets.items() if t}
        if targets != self._demand_target:
            self._demand_target = targets
            self._usage_dirty = True

    def _demand_targets(self, waiting: Mapping[CreditResource, int]) -> dict[CreditResource, int]:
        # The validation half of set_pending_demand (the gate checks a demand with it before
        # it reserves, so a demand that cannot be expressed is refused before anything changes).
        if not isinstance(waiting, Mapping):
            raise InvalidArgument(f"waiting must be a mapping, got {describe(waiting)}")
        if self._key is None:
            raise InvalidEntry("no active credit key")
        entry = self._ledger.entry(self._key)
        targets: dict[CreditResource, int] = {}
        for resource, amount in waiting.items():
            if not isinstance(resource, CreditResource):
                raise InvalidArgument(f"unknown credit resource {describe(resource)}")
            check_u64(amount, f"waiting[{resource.name}]")
            base = checked_add(entry.consumed[resource], entry.returned[resource])
            targets[resource] = checked_add(base, amount)
        return targets

    def _check_satisfiable(self, key: CreditKey, charge: CreditCharge) -> None:
        # A charge no u64 grant can ever cover (consumed + returned + amount > 2**64 - 1) is
        # refused before anything changes, counters included (issue 10 item 10); blocking it
        # would need a demand target past u64.
        entry = self._ledger.entry(key)
        for resource, amount in charge.parts:
            if entry.consumed[resource] + entry.returned[resource] + amount > U64_MAX:
                raise ArithmeticOverflow(
                    f"{resource.name} charge of {amount} can never be granted: consumed + "
                    "returned + charge exceeds 2**64 - 1"
                )

    def _raise_demand(self, key: CreditKey, charge: CreditCharge) -> None:
        if self.ahead:
            # version 2: at least this charge waits (a retried charge is not counted twice;
            # a gate states its waiting work exactly with set_pending_demand)
            waiting = self._levels.waiting
            for resource, amount in charge.parts:
                waiting[resource] = max(waiting.get(resource, 0), amount)
            self._direct_waiting = True
            self._observe_level()
            return
        entry = self._ledger.entry(key)
        for resource, amount in charge.parts:
            shortfall = amount - entry.available[resource]
            if shortfall > 0:
                target = checked_add(entry.grant_total[resource], shortfall)
                if target > self._demand_target.get(resource, 0):
                    self._demand_target[resource] = target
                    self._usage_dirty = True

    def _backpressure(self, exhausted: tuple[CreditResource, ...]) -> BackpressureInfo:
        return BackpressureInfo(
            source=BackpressureSource.RECEIVER_CREDIT,
            peer=self.sender_peer,
            qos_class=self._qos_class,
            exhausted=tuple(sorted(set(exhausted))),
            retry_after_us=self._retry_after_us,
            fallback_allowed=self._negotiation.state is NegotiationState.LEGACY,
        )

    def commit(self, token: ReservationToken) -> None:
        """The transport accepted the work: RESERVED → COMMITTED; it is now in flight.

        Raises :class:`InvalidEntry` for a token of a fenced epoch or one already settled.
        """
        self._ledger.commit(token)
        slot = (token.key, token.epoch)
        self._in_flight[slot] = self._in_flight.get(slot, 0) + 1
        self._usage_dirty = True
        if slot == (self._key, self._epoch):
            self._levels.commit(token.charge.as_dict())
            self._observe_level()
        self._trace_token("commit", token)

    def rollback(self, token: ReservationToken) -> None:
        """The transport refused the work: give the exact charge back
        (docs/semantics.md#sender-ledger)."""
        self._ledger.rollback(token)
        self._observe_level()  # credit on hand grew back
        self._trace_token("rollback", token)

    def complete(self, token: ReservationToken, now_ns: int) -> list[EndpointEvent]:
        """The transport finished committed work (success or failure).

        Completion only ends the in-flight count (used to finish fencing); it never mints
        local credit: the receiver's release makes new grants (RFC concurrency rule 6).
        Raises :class:`InvalidArgument` for a non-token or a bad ``now_ns`` and
        :class:`InvalidEntry` for a token that is not COMMITTED or already completed; a failure
        changes nothing (the clock included).
        """
        if not isinstance(token, ReservationToken):
            raise InvalidArgument(f"expected a ReservationToken, got {describe(token)}")
        self._check_time(now_ns)
        if token.state is not TokenState.COMMITTED:
            raise InvalidEntry(f"token {token.token_id} is {token.state.name}, not COMMITTED")
        slot = (token.key, token.epoch)
        count = self._in_flight.get(slot, 0)
        if count <= 0:
            raise InvalidEntry(f"token {token.token_id} was already completed")
        self._advance(now_ns)
        self._in_flight[slot] = count - 1
        if slot == (self._key, self._epoch):
            self._levels.complete(token.charge.as_dict())
            self._observe_level()
        self._trace_token("complete", token)
        return self._maybe_fence_drained(now_ns)

    def return_unused(self, charge: CreditCharge) -> None:
        """Give unused credit back to the receiver (cumulative ``returned`` total).

        Raises :class:`InvalidEntry` before activation and :class:`InsufficientCredit` when
        ``charge`` exceeds what is available; a failure changes nothing.
        """
        if self._key is None:
            raise InvalidEntry("no active credit key")
        self._ledger.return_credit(self._key, charge)
        self._usage_dirty = True
        self._observe_level()
        if self._trace is not None:
            self._trace.record(
                self._node,
                "return",
                {"charge": _vector(charge.as_dict()), "vars": self._trace_vars()},
            )

    # ---------------------------------------------------------------- output

    def messages_to_send(self, now_ns: int) -> list[bytes]:
        """Encoded messages for the receiver, in order (offer, usage, heartbeat)."""
        self._advance(now_ns)
        out = self._outbox
        self._outbox = []
        if self._awaiting_activation and (
            self._last_offer_ns is None or now_ns - self._last_offer_ns >= self._usage_interval_ns
        ):
            out.append(
                CapabilityOffer(
                    versions=self._negotiation.local_versions, qos_class=self._qos_class
                )
            )
            self._last_offer_ns = now_ns
        if self._key is not None and self._negotiation.state in (
            NegotiationState.ACTIVE,
            NegotiationState.FENCING,
            NegotiationState.STALE,
        ):
            usage = self._usage_due(now_ns)
            if usage is not None:
                out.append(usage)
            hb = None if self.ahead else self._heartbeat_due(now_ns)  # v2: the refresh report
            if hb is not None:
                out.append(hb)
        self._sent += len(out)
        if self._trace is not None:
            for m in out:
                self._trace.record(self._node, "send", {"msg": message_fields(m)})
        return [encode(m) for m in out]

    def _demand_unmet(self) -> bool:
        if self._key is None or not self._demand_target:
            return False
        granted = self._ledger.entry(self._key).grant_total
        return any(t > granted[r] for r, t in self._demand_target.items())

    def _starts_wanting(self) -> bool:
        # Demand is unmet, but the last reported target is covered by the grant: the receiver
        # thinks this key wants nothing and grants nothing more until it hears otherwise, so
        # the work would idle up to an interval (a sequential sender: every transfer). At most
        # one such report per grant that covers the reported target, so no flood: a sender
        # whose reported demand is still unmet is paced by the interval as before.
        if self._key is None or not self._demand_unmet():
            return False
        granted = self._ledger.entry(self._key).grant_total
        return all(t <= granted[r] for r, t in self._reported_target.items())

    def _usage_due(self, now_ns: int) -> SenderCreditUsage | None:
        # Pull: report when something changed, and keep re-reporting unmet demand every
        # interval, since a lost report must not leave the sender stalled for good. The interval
        # paces consumption, returns, re-reports and changes of a demand the receiver already
        # knows is unmet; only a sender that starts wanting skips it (_starts_wanting).
        if self._key is not None and self.ahead:
            return self._level_report(now_ns)
        if self._key is None or not (self._usage_dirty or self._demand_unmet()):
            return None
        if (
            self._last_usage_ns is not None
            and now_ns - self._last_usage_ns < self._usage_interval_ns
            and not self._starts_wanting()
        ):
            return None
        entry = self._ledger.entry(self._key)
        self._usage_sequence += 1
        self._usage_dirty = False
        self._last_usage_ns = now_ns
        self._reported_target = dict(self._demand_target)
        # The receiver reads an omitted resource as "unchanged", and consumed drops on a
        # rollback: so every resource this entry was granted is reported, zeros included (a
        # resource never granted was never consumed or returned, and may be one the receiver
        # does not model).
        granted = [r for r, total in entry.grant_total.items() if total]
        self._count_repeat(entry.consumed, entry.returned)
        return SenderCreditUsage(
            receiver_session_id=self._key.receiver_session,
            epoch=self._epoch,
            sequence=self._usage_sequence,
            qos_class=self._qos_class,
            consumed_totals=_amounts({r: entry.consumed[r] for r in granted}),
            returned_totals=_amounts({r: entry.returned[r] for r in granted}),
            pending_demand=_nonzero_amounts(self._demand_target),
        )

    def _observe_level(self) -> None:
        # Version 2: the level or the credit on hand changed (_levels rule 2's hold).
        if self._key is not None and self.ahead:
            entry = self._ledger.entry(self._key)
            self._levels.observe(self._now_ns, entry.available, entry.returned)

    def _refresh_ns(self) -> int:
        # Version 2's refresh (_levels rule 3): as configured, else half the freshness TTL
        # (where version 1 sends its heartbeat); 0: never.
        if self._refresh_interval_ns is not None:
            return self._refresh_interval_ns
        return self._negotiation.freshness_ttl_ms * 500_000

    def _level_report(self, now_ns: int) -> SenderCreditUsage | None:
        # Version 2 (_levels): a report only with news; its demand is consumed + returned +
        # level, so the receiver reads the level back as demand − consumed − returned.
        assert self._key is not None
        if not self._levels.due(now_ns, self._refresh_ns()):
            return None
        entry = self._ledger.entry(self._key)
        if self._levels.settling():
            idle = self._levels.idle(entry.available)
            if idle:  # rule 2: credit nothing waiting will use goes back with the report
                self._ledger.return_credit(self._key, CreditCharge.of(idle))
                entry = self._ledger.entry(self._key)
        level = self._levels.level()
        self._levels.sent(level, entry.returned, now_ns)
        # credit still idle after the report (the activation's grant beside a first report)
        # starts its hold now, not at some later event (rule 2)
        self._levels.observe(now_ns, entry.available, entry.returned)
        self._usage_sequence += 1
        self._usage_dirty = False
        self._last_usage_ns = now_ns
        granted = [r for r, total in entry.grant_total.items() if total]
        demand = {r: entry.consumed[r] + entry.returned[r] + a for r, a in level.items()}
        self._demand_target = demand
        self._count_repeat(entry.consumed, entry.returned)
        return SenderCreditUsage(
            receiver_session_id=self._key.receiver_session,
            epoch=self._epoch,
            sequence=self._usage_sequence,
            qos_class=self._qos_class,
            consumed_totals=_amounts({r: entry.consumed[r] for r in granted}),
            returned_totals=_amounts({r: entry.returned[r] for r in granted}),
            pending_demand=_nonzero_amounts(demand),
        )

    def _count_repeat(
        self, consumed: Mapping[CreditResource, int], returned: Mapping[CreditResource, int]
    ) -> None:
        # A report is a repeat when its demand beyond consumption and its returns are the
        # previous report's (statistics only: what the report says does not change)
        content = (
            tuple(sorted((r, t - consumed[r]) for r, t in self._demand_target.items())),
            tuple(sorted((r, a) for r, a in returned.items() if a)),
        )
        self._reports_repeated += content == self._last_report
        self._last_report = content

    def _heartbeat_due(self, now_ns: int) -> Heartbeat | None:
        ttl_ms = self._negotiation.freshness_ttl_ms
        age = self._negotiation.update_age_ns(now_ns)
        if self._key is None or ttl_ms == 0 or age is None or age * 2 < ttl_ms * 1_000_000:
            return None
        if (
            self._heartbeat_sent_ns is not None
            and now_ns - self._heartbeat_sent_ns < ttl_ms * 500_000
        ):
            return None
        self._heartbeat_sent_ns = now_ns
        return Heartbeat(
            receiver_session_id=self._key.receiver_session,
            epoch=self._epoch,
            qos_class=self._qos_class,
        )

    def get_timer(self) -> int | None:
        """The next ``now_ns`` at which :meth:`handle_timer` has work, or ``None``."""
        deadlines: list[int] = []
        if self._key is not None and self.ahead:
            refresh = self._refresh_ns()
            if self._levels.due(self._now_ns, refresh):
                deadlines.append(self._now_ns)
            elif (when := self._levels.timer(refresh)) is not None:
                deadlines.append(when)
        elif (self._usage_dirty or self._demand_unmet()) and self._last_usage_ns is not None:
            due = self._last_usage_ns + self._usage_interval_ns
            if due > self._now_ns and self._starts_wanting():
                due = self._now_ns  # reported at once (_starts_wanting)
            deadlines.append(due)
        if self._awaiting_activation and self._last_offer_ns is not None:
            deadlines.append(self._last_offer_ns + self._usage_interval_ns)
        ttl_ms = self._negotiation.freshness_ttl_ms
        age = self._negotiation.update_age_ns(self._now_ns)
        if ttl_ms and age is not None and self._negotiation.state is NegotiationState.ACTIVE:
            refreshed = self._now_ns - age
            if not self.ahead:
                deadlines.append(refreshed + ttl_ms * 500_000)  # heartbeat at half the TTL
            deadlines.append(refreshed + ttl_ms * 1_000_000 + 1)  # staleness
        return min(deadlines) if deadlines else None

    def handle_timer(self, now_ns: int) -> list[EndpointEvent]:
        """Evaluate freshness on the sender's clock (ACTIVE → STALE past the TTL)."""
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
        current = self._in_flight.get((self._key, self._epoch), 0) if self._key else 0
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


# --------------------------------------------------------------------------- receiver
