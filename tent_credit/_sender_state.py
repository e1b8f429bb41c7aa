"""What every part of :class:`~tent_credit._sender_endpoint.SenderEndpoint` shares: its state.

The sender endpoint is one class over private mixins split by responsibility: this base
(construction, the clock, the read-only views, the level observation and the epoch fence's
drain), :mod:`._sender_reserve` (reservations and the demand they raise),
:mod:`._sender_reports` (the messages for the receiver and when they are due), and
:mod:`._sender_endpoint` (the session's lifecycle and what the receiver sends). It lives apart so
that each mixin reads only this base, never another mixin: the helpers more than one of them
calls are here.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._arith import U64_MAX, check_u64
from ._backpressure import BackpressureInfo
from ._describe import describe
from ._endpoint_common import EndpointEvent, _check_now, _vector
from ._inbox import ControlInbox
from ._ledger import SenderCreditLedger
from ._levels import LevelReports
from ._messages import GRANT_AHEAD_VERSION, SUPPORTED_VERSIONS, ControlMessage
from ._negotiation import CreditMode, NegotiationState, PeerNegotiation
from ._trace import TraceSink
from ._types import CreditCharge, CreditKey, CreditResource
from .errors import InvalidArgument


class _SenderState:
    """The state of a :class:`SenderEndpoint` and the helpers its parts share (module
    docstring); not used on its own."""

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
        # (exhausted, retry hint, fallback) -> the BackpressureInfo last made for them
        self._last_backpressure: tuple[tuple[object, ...], BackpressureInfo] | None = None
        # committed, not yet completed work per entry, (session id, epoch) of this sender's
        # key (ints hash in C, a CreditKey in Python): the fence drains the old ones
        self._in_flight: dict[tuple[int, int], int] = {}
        self._slot: tuple[int, int] | None = None  # the current entry's, once activated
        self._now_ns = 0
        self._received = 0
        self._sent = 0
        self._violations = 0
        self._ignored = 0
        self._stale_transitions = 0
        self._blocked = 0
        # the charge the ledger blocked at the last try_reserve (see repeat_stamp)
        self._blocked_charge: CreditCharge | None = None
        self._trace = trace  # docs/traces.md; None: tracing off
        # protocol version 2 negotiated: set where the negotiation picks its version (the
        # activation), read on every reservation, report and level change
        self._ahead = False
        self._node = f"sender:{sender_peer}"

    def _check_time(self, now_ns: int) -> None:
        # The endpoint's clock only moves forward: checked before anything changes, so a call
        # with a stale time fails whole instead of half-applying a batch.
        if type(now_ns) is not int or not 0 <= now_ns <= U64_MAX:  # the check, inline: a
            _check_now(now_ns)  # sender asks it several times per transfer; it raises here
        if now_ns < self._now_ns:
            raise InvalidArgument(f"now_ns {now_ns} is before the last time seen ({self._now_ns})")

    def _advance(self, now_ns: int) -> None:
        # Only once the whole call is validated: a refused call leaves the clock (and with it
        # ``update_age_ns``) where it was (docs/design.md#principle-5).
        if type(now_ns) is not int or not self._now_ns <= now_ns <= U64_MAX:
            self._check_time(now_ns)  # raises (inline above: a sender advances per call)
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
        return self._ahead

    def _note_version(self) -> None:
        # after the negotiation picked a version (only an activation does)
        self._ahead = self._negotiation.version == GRANT_AHEAD_VERSION

    def level(self) -> Mapping[CreditResource, int]:
        """Version 2: the level this sender states, its work in flight plus waiting for credit
        on the current key (see :mod:`tent_credit._levels`)."""
        return dict(self._levels.level())

    def level_reports(self) -> tuple[
        Mapping[CreditResource, int], Mapping[CreditResource, int], Mapping[CreditResource, int]
    ]:
        """Version 2, read-only: the waiting work the gate stated on the current key, and the
        level and returned totals the last report on it carried (``{}``: none yet). The
        conformance harness reads them (docs/spec_review_gated.md)."""
        levels = self._levels
        return dict(levels.waiting), levels.reported, levels.reported_returned

    def level_head(self) -> Mapping[CreditResource, int]:
        """Version 2, read-only: the charge of the first waiting owner its level is stated in
        whole charges of (``{}``: none; docs/credit_protocol.md#mixed-charges)."""
        return dict(self._levels.head)

    def available(self) -> Mapping[CreditResource, int]:
        """Available credit of the current key (all zero before the first update)."""
        if self._key is None or not self._ledger.entry(self._key).has_update:
            return dict.fromkeys(CreditResource, 0)
        return self._ledger.available(self._key)

    # ---------------------------------------------------------------- shared helpers

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

    def _observe_level(self) -> None:
        # Version 2: the level or the credit on hand changed (_levels rules 2 and 5).
        key = self._key
        if key is not None and self._ahead:
            _, grant, consumed, returned = self._ledger.vectors(key)
            on_hand = self._levels.uncovered(grant, consumed, returned)
            if on_hand:
                # rule 5: credit that does not cover the head's charge goes back, all of it
                self._give_back(key, CreditCharge.of(on_hand))
                _, grant, consumed, returned = self._ledger.vectors(key)
            self._levels.observe(self._now_ns, grant, consumed, returned)

    def _give_back(self, key: CreditKey, charge: CreditCharge) -> None:
        # Raises like SenderCreditLedger.return_credit, before anything changes.
        self._ledger.return_credit(key, charge)
        self._usage_dirty = True
        if self._trace is not None:
            self._trace.record(
                self._node,
                "return",
                {"charge": _vector(charge.as_dict()), "vars": self._trace_vars()},
            )

    def _fenced_in_flight(self) -> int:
        current = self._slot
        return sum(n for slot, n in self._in_flight.items() if slot != current)

    def _maybe_fence_drained(self, now_ns: int) -> list[EndpointEvent]:
        if self._negotiation.state is not NegotiationState.FENCING:
            return []
        if self._fenced_in_flight():
            return []
        current = self._slot
        self._in_flight = {slot: n for slot, n in self._in_flight.items() if slot == current}
        self._negotiation.on_fence_drained(now_ns)
        return [EndpointEvent(kind="fence_drained")]
