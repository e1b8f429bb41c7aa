"""The adapter's state and plumbing: construction of the endpoints, the handshake, the mapping
of wire bytes to spec messages (sequences per mapping rule 3) and the receiver facts that the
drivers and the abstraction read.
"""

from __future__ import annotations

from typing import Any

from tent_spec.credit import (
    ACTIVATION,
    UPDATE,
    USAGE,
    Activation,
    CreditBounds,
    Update,
    Usage,
)

from tent_credit import (
    AllocatorConfig,
    CapabilityActivation,
    CapabilityOffer,
    CreditCharge,
    CreditReceiver,
    ReceiverCreditUpdate,
    ReservationToken,
    SenderCreditUsage,
    SenderEndpoint,
    SessionId,
    TokenState,
)
from tent_credit._messages import SUPPORTED_VERSIONS
from tent_credit._trace import TraceSink
from tent_credit._wire import decode, encode
from tent_models.conformance._lockstep import ConformanceFailure
from tent_models.conformance.credit._harness import (
    _amounts_vector,
    _Channel,
    _ReceiverSlot,
    _SenderSlot,
    _vector,
    _Work,
)
from tent_models.conformance.credit._model import (
    _LIFTED,
    FRESHNESS_TTL_MS,
    REFRESH_INTERVAL_NS,
    RESOURCES,
    USAGE_INTERVAL_NS,
)


class _AdapterCore:
    """The harness state of :class:`~tent_models.conformance.credit.CreditAdapter`: one receiver,
    its endpoints and one sender process per spec sender, connected by :class:`_Channel` s."""

    def __init__(self, bounds: CreditBounds, *, trace: TraceSink | None = None) -> None:
        self.bounds = bounds
        self._n = bounds.resources
        self._trace = trace
        capacity = {RESOURCES[r]: c for r, c in enumerate(bounds.capacity)}
        self._config = AllocatorConfig(
            capacity=capacity,
            control_slots=1,
            # all-or-nothing on the whole demand (spec grant), never capped below it
            max_grant=dict.fromkeys(capacity, _LIFTED),
            min_grant=dict.fromkeys(capacity, _LIFTED),
            max_keys=bounds.senders,
            retry_after_us=1,
        )
        self._now = 0
        self._session = 1
        self._withheld: dict[tuple[int, int, int], list[int]] = {}  # (session, s, epoch)
        self._demands: dict[tuple[int, int, int, int], int] = {}  # (s, session, epoch, seq)
        self._work: dict[int, list[_Work]] = {s: [] for s in range(bounds.senders)}
        self._receiver = self._new_receiver()
        self._rslots: list[_ReceiverSlot] = []
        self._slots: list[_SenderSlot] = []
        for s in range(bounds.senders):
            endpoint = self._new_sender(s, clock=0)
            self._slots.append(
                _SenderSlot(endpoint=endpoint, clock=0, down=_Channel(), up=_Channel())
            )
            self._rslots.append(_ReceiverSlot(endpoint=self._receiver.accept(self.peer(s))))
        for s in range(bounds.senders):  # mapping rule 6: the handshake, delivered at once
            self._handshake(s)
            data = self._slots[s].down.deliver(0, self._tick())
            self._receive_down(s, data)
        begin = getattr(trace, "begin", None)
        if callable(begin):
            begin()

    # ---- construction helpers ------------------------------------------------------------

    @staticmethod
    def peer(s: int) -> int:
        """The implementation's sender peer id of spec sender ``s``."""
        return s + 1

    def _new_receiver(self) -> CreditReceiver:
        # tent_spec.credit models version 1's absolute demand targets (grant-ahead, version 2,
        # is modelled by tent_spec.gated and checked by its conformance)
        return CreditReceiver(
            self._config,
            SessionId(self._session),
            freshness_ttl_ms=FRESHNESS_TTL_MS,
            refresh_interval_ns=REFRESH_INTERVAL_NS,
            trace=self._trace,
            versions=(1,),
        )

    def _new_sender(self, s: int, *, clock: int) -> SenderEndpoint:
        endpoint = SenderEndpoint(
            sender_peer=self.peer(s), usage_interval_ns=USAGE_INTERVAL_NS, trace=self._trace
        )
        endpoint.connect(clock)
        return endpoint

    def _tick(self) -> int:
        self._now += 1
        return self._now

    def _charge(self, c: int) -> CreditCharge:
        return CreditCharge.of({RESOURCES[r]: a for r, a in enumerate(self.bounds.charges[c]) if a})

    # ---- sequences (mapping rule 3) ------------------------------------------------------

    def _spec_seq(self, session: int, s: int, epoch: int, seq: int) -> int:
        withheld = self._withheld.get((session, s, epoch), ())
        return seq - sum(1 for w in withheld if w <= seq)

    # ---- messages --------------------------------------------------------------------------

    def _spec_message(self, s: int, data: bytes) -> Activation | Update | Usage:
        message = decode(data)
        n = self._n
        if isinstance(message, CapabilityActivation):
            return Activation(ACTIVATION, message.receiver_session_id.value, message.epoch)
        if isinstance(message, ReceiverCreditUpdate):
            session, epoch = message.receiver_session_id.value, message.epoch
            return Update(
                UPDATE,
                session,
                epoch,
                self._spec_seq(session, s, epoch, message.sequence),
                _amounts_vector(message.grants, n),
            )
        if isinstance(message, SenderCreditUsage):
            session, epoch = message.receiver_session_id.value, message.epoch
            return Usage(
                USAGE,
                session,
                epoch,
                message.sequence,
                _amounts_vector(message.returned_totals, n),
                self._demands.get((s, session, epoch, message.sequence), -1),
            )
        raise ConformanceFailure(f"a {type(message).__name__} is in flight")

    def _find(self, s: int, msg: Any) -> tuple[_Channel, int] | None:
        slot = self._slots[s]
        channel = slot.up if isinstance(msg, Usage) else slot.down
        for i, data in enumerate(channel.contents()):
            if self._spec_message(s, data) == msg:
                return channel, i
        return None

    def _receive_down(self, s: int, data: bytes) -> None:
        """Feed a receiver→sender message to the sender; track a change of its entry."""
        slot = self._slots[s]
        before = (slot.endpoint.key, slot.endpoint.epoch)
        slot.endpoint.receive_message(data, slot.clock)
        if (slot.endpoint.key, slot.endpoint.epoch) != before:
            # a fresh entry: new usage sequences, no stale history, "introduce ourselves"
            slot.usage_seq = 0
            slot.was_stale = False
            slot.stale_at = 0
            slot.dirty = True

    def _emit_receiver(self, s: int, data: bytes, *, publish: bool) -> None:
        """Route one receiver→sender message (mapping rule 3 decides about updates)."""
        rslot = self._rslots[s]
        message = decode(data)
        if isinstance(message, ReceiverCreditUpdate):
            grants = _amounts_vector(message.grants, self._n)
            last = rslot.last_grants if rslot.last_grants is not None else (0,) * self._n
            rslot.last_grants = grants
            if not publish and grants == last:
                key = (message.receiver_session_id.value, s, message.epoch)
                self._withheld.setdefault(key, []).append(message.sequence)
                return
        self._slots[s].down.send(data, self._now)

    def _drain(self, *, forced: int | None = None) -> None:
        """Collect what every receiver endpoint sends now (eager grants publish here)."""
        for s, rslot in enumerate(self._rslots):
            for data in rslot.endpoint.messages_to_send(rslot.clock):
                self._emit_receiver(s, data, publish=s == forced)

    def _handshake(self, s: int) -> None:
        """Deliver the sender's capability offer to its receiver endpoint (mapping rule 5)."""
        rslot = self._rslots[s]
        offer = CapabilityOffer(versions=SUPPORTED_VERSIONS, qos_class=0)
        rslot.endpoint.receive_message(encode(offer), rslot.clock)
        self._drain()

    def _token(self, s: int, c: int, *, live: bool) -> ReservationToken | None:
        """A RESERVED token of charge ``c``: of the live entry, or of a fenced one."""
        endpoint = self._slots[s].endpoint
        current = (endpoint.key, endpoint.epoch)
        for token, charge in self._slots[s].tokens:
            live_entry = (token.key, token.epoch) == current
            if charge == c and token.state is TokenState.RESERVED and live_entry == live:
                return token
        return None

    # ---- receiver facts ------------------------------------------------------------------

    def _receiver_grant(self, s: int) -> tuple[int, ...] | None:
        """The receiver's granted totals for the sender's live entry (``None`` if not live)."""
        endpoint = self._slots[s].endpoint
        key = endpoint.key
        if key is None or key.receiver_session.value != self._session:
            return None
        if endpoint.epoch != self._rslots[s].endpoint.epoch:
            return None
        totals = self._receiver.allocator.key_totals(self.peer(s), 0, endpoint.epoch)
        return _vector(totals.granted, self._n)
