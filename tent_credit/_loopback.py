"""An in-process network of one receiver and N senders over :class:`FaultyChannel` pairs.

Used by the shipped example, the endpoint tests and the incast scenarios: every control message
crosses a channel as real encoded bytes, with the channel's drop / duplicate / reorder / delay
faults. A tiny in-process "transport" moves the payload: a committed reservation lands at the
receiver after ``land_delay_ns``, the receiver's consumer releases it after
``consume_delay_ns``, and then the sender sees the completion.

It is a test harness (sans-IO, driven by an explicit clock), not a transport.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

from ._endpoints import CreditReceiver, ReceiverEndpoint, SenderEndpoint
from ._ledger import ReservationToken
from ._negotiation import CreditMode
from ._types import CreditCharge, CreditResource
from .errors import InvalidArgument, InvalidEntry

if TYPE_CHECKING:  # testing re-exports this module, so the channel is imported where used
    from .testing import FaultRates, FaultyChannel

__all__ = ["LoopbackNetwork", "LoopbackStatistics"]


@attrs.frozen(kw_only=True)
class LoopbackStatistics:
    """What the network saw, summed over the run."""

    reserved: int
    blocked: int
    landed: int
    released: int
    completed: int
    fenced_work: int
    peak_outstanding: Mapping[CreditResource, int]
    peak_occupied: Mapping[CreditResource, int]
    capacity: Mapping[CreditResource, int]


@attrs.frozen
class _Work:
    token: ReservationToken
    peer: int
    epoch: int
    session_value: int


class LoopbackNetwork:
    """One :class:`CreditReceiver` and several :class:`SenderEndpoint` s, wired by channels.

    ``step(now_ns)`` moves everything that is due: senders' messages up, receiver's messages
    down, payload landings and consumer releases. After every step the harness records the
    receiver's outstanding capacity and the payload actually occupying the receiver (landed, not
    yet released) so a test can assert neither ever exceeds capacity.
    """

    def __init__(
        self,
        receiver: CreditReceiver,
        *,
        seed: int = 0,
        rates: FaultRates | None = None,
        land_delay_ns: int = 20_000,
        consume_delay_ns: int = 50_000,
    ) -> None:
        if land_delay_ns < 0 or consume_delay_ns < 0:
            raise InvalidArgument("delays must be non-negative")
        self.receiver = receiver
        self._seed = seed
        self._rates = rates
        self._land_delay = land_delay_ns
        self._consume_delay = consume_delay_ns
        self.senders: dict[int, SenderEndpoint] = {}
        self._up: dict[int, FaultyChannel] = {}
        self._down: dict[int, FaultyChannel] = {}
        self._channel_count = 0
        # (due_ns, serial, kind, work): kind "land" then "release" then the sender's completion
        self._events: list[tuple[int, int, str, _Work]] = []
        self._serial = 0
        self._reserved = 0
        self._blocked = 0
        self._landed = 0
        self._released = 0
        self._completed = 0
        self._fenced_work = 0
        self._occupied: dict[CreditResource, int] = dict.fromkeys(CreditResource, 0)
        self._peak_outstanding: dict[CreditResource, int] = dict.fromkeys(CreditResource, 0)
        self._peak_occupied: dict[CreditResource, int] = dict.fromkeys(CreditResource, 0)

    def _channels(self) -> tuple[FaultyChannel, FaultyChannel]:
        from .testing import NO_FAULTS, FaultyChannel  # noqa: PLC0415 - testing re-exports us

        rates = self._rates if self._rates is not None else NO_FAULTS
        self._channel_count += 2
        seed = self._seed * 1000 + self._channel_count
        return (
            FaultyChannel(seed=seed, rates=rates),
            FaultyChannel(seed=seed + 1, rates=rates),
        )

    # ------------------------------------------------------------------ topology

    def add_sender(
        self, peer: int, now_ns: int, *, mode: CreditMode = CreditMode.REQUIRED
    ) -> SenderEndpoint:
        """Connect a new sender (identity ``peer``) to the receiver."""
        if peer in self.senders:
            raise InvalidEntry(f"sender {peer} exists")
        sender = SenderEndpoint(sender_peer=peer, mode=mode)
        self.receiver.accept(peer)
        self.senders[peer] = sender
        self._up[peer], self._down[peer] = self._channels()
        sender.connect(now_ns)
        return sender

    def reconnect_sender(self, peer: int, now_ns: int) -> None:
        """The sender's control connection dropped and came back: a new epoch for its key."""
        sender = self.senders[peer]
        sender.disconnect(now_ns)
        self.receiver.accept(peer)  # the receiver bumps the epoch; the old one is FENCING
        self._up[peer], self._down[peer] = self._channels()  # in-flight messages are lost
        sender.reconnect(now_ns)

    def restart_receiver(self, receiver: CreditReceiver, now_ns: int) -> None:
        """The receiver restarted with a new session; every sender reconnects to it.

        Payload of the old session never lands (the old receiver is gone): senders see those
        completions as failures, which drain their fenced in-flight count.
        """
        self.receiver = receiver
        old_work = [w for (_, _, kind, w) in self._events if kind == "land"]
        self._events = [e for e in self._events if e[2] == "complete"]
        for work in old_work:
            self._push(now_ns, "complete", work)
        self._occupied = dict.fromkeys(CreditResource, 0)
        for peer, sender in self.senders.items():
            sender.disconnect(now_ns)
            receiver.accept(peer)
            self._up[peer], self._down[peer] = self._channels()
            sender.reconnect(now_ns)

    # ------------------------------------------------------------------ payload

    def try_send(self, peer: int, charge: CreditCharge, now_ns: int) -> bool:
        """Reserve ``charge`` on ``peer`` and, if granted, commit and put it on the wire."""
        sender = self.senders[peer]
        result = sender.try_reserve(charge, now_ns)
        if not isinstance(result, ReservationToken):
            self._blocked += 1
            return False
        sender.commit(result)  # our in-process transport always accepts the submit
        self._reserved += 1
        work = _Work(
            token=result,
            peer=peer,
            epoch=result.epoch,
            session_value=result.key.receiver_session.value,
        )
        self._push(now_ns + self._land_delay, "land", work)
        return True

    def _push(self, due_ns: int, kind: str, work: _Work) -> None:
        self._serial += 1
        heapq.heappush(self._events, (due_ns, self._serial, kind, work))

    def _run_payload(self, now_ns: int) -> None:
        while self._events and self._events[0][0] <= now_ns:
            _, _, kind, work = heapq.heappop(self._events)
            amounts = work.token.charge.as_dict()
            if kind == "land":
                if work.session_value != self.receiver.session.value:
                    self._fenced_work += 1
                    self._push(now_ns, "complete", work)
                    continue
                try:
                    self.receiver.data_landed(work.peer, 0, work.epoch, amounts)
                except InvalidEntry:  # the epoch was fenced and completed: the write failed
                    self._fenced_work += 1
                    self._push(now_ns, "complete", work)
                    continue
                self._landed += 1
                for r, a in amounts.items():
                    self._occupied[r] += a
                self._push(now_ns + self._consume_delay, "release", work)
            elif kind == "release":
                self.receiver.release(work.peer, 0, work.epoch, amounts)
                self._released += 1
                for r, a in amounts.items():
                    self._occupied[r] -= a
                self._push(now_ns, "complete", work)
            else:
                self.senders[work.peer].complete(work.token, now_ns)
                self._completed += 1

    # ------------------------------------------------------------------ clock

    def step(self, now_ns: int) -> None:
        """Deliver everything due at ``now_ns`` in both directions, then the payload events."""
        for peer, sender in self.senders.items():
            for data in sender.messages_to_send(now_ns):
                self._up[peer].send(data, now_ns)
        for (peer, _qos), datas in self.receiver.messages_to_send(now_ns).items():
            for data in datas:
                self._down[peer].send(data, now_ns)
        for peer in self.senders:
            endpoint = self._endpoint(peer)
            for data in self._up[peer].deliver(now_ns):
                if endpoint is not None and not endpoint.closed:
                    endpoint.receive_message(data, now_ns)
            self.senders[peer].receive_batch(self._down[peer].deliver(now_ns), now_ns)
            self.senders[peer].handle_timer(now_ns)
        self._run_payload(now_ns)
        self._observe()

    def _endpoint(self, peer: int) -> ReceiverEndpoint | None:
        for ep in self.receiver.endpoints():
            if ep.sender_peer == peer:
                return ep
        return None

    def _observe(self) -> None:
        stats = self.receiver.allocator.statistics()
        for r, value in stats.outstanding.items():
            self._peak_outstanding[r] = max(self._peak_outstanding[r], value)
            if value > stats.capacity[r]:  # the allocator refuses this; a harness must not hide it
                raise AssertionError(f"{r.name} outstanding {value} > capacity {stats.capacity[r]}")
        for r, value in self._occupied.items():
            self._peak_occupied[r] = max(self._peak_occupied[r], value)

    def pending_payload(self) -> int:
        return len(self._events)

    def statistics(self) -> LoopbackStatistics:
        return LoopbackStatistics(
            reserved=self._reserved,
            blocked=self._blocked,
            landed=self._landed,
            released=self._released,
            completed=self._completed,
            fenced_work=self._fenced_work,
            peak_outstanding={r: v for r, v in self._peak_outstanding.items() if v},
            peak_occupied={r: v for r, v in self._peak_occupied.items() if v},
            capacity=dict(self.receiver.allocator.config.capacity),
        )
