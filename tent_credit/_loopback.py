"""An in-process network of one receiver and N senders over :class:`FaultyChannel` pairs.

Used by the shipped example, the endpoint tests and the incast scenarios: every control message
crosses a channel as real encoded bytes, with the channel's drop / duplicate / reorder / delay
faults. A tiny in-process "transport" moves the payload: a committed reservation lands at the
receiver after ``land_delay_ns``, the receiver's consumer releases it after
``consume_delay_ns``, and then the sender sees the completion.

Two ways in besides :meth:`LoopbackNetwork.try_send`: :meth:`LoopbackNetwork.send_committed`
puts a reservation some other component (a dispatch gate) already committed on the wire, and
:meth:`LoopbackNetwork.send_uncredited` moves payload of a *baseline* sender that holds no credit
at all (a fixed-window sender, the overload the credit protocol prevents). Both report the
completion to a callback; baseline payload counts in the receiver's occupancy like any other.

Like a transport, it admits every credited write with :meth:`CreditReceiver.admit_write`
before the payload counts as landed (a refused write fails at its sender and is counted), and
completes the fence of a superseded epoch once its in-flight payload has landed or failed. A
receiver restart loses the old receiver's memory: payload that landed there and was not yet
consumed completes at its sender (the write itself had completed) and is counted in
``lost_at_restart``; nothing is dropped silently.

:meth:`LoopbackNetwork.send_forged` and :meth:`LoopbackNetwork.inject` let a test play a hostile
sender: a write without any reservation, and arbitrary bytes on a sender's control connection.

It is a test harness (sans-IO, driven by an explicit clock), not a transport.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import attrs

from ._endpoints import CreditReceiver, SenderEndpoint
from ._ledger import ReservationToken, TokenState
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
    refused_writes: int
    lost_at_restart: int
    fences_completed: int
    peak_outstanding: Mapping[CreditResource, int]
    peak_occupied: Mapping[CreditResource, int]
    capacity: Mapping[CreditResource, int]


@attrs.frozen
class _Work:
    token: ReservationToken | None  # None: a baseline sender's uncredited or a forged payload
    peer: int
    epoch: int
    session_value: int
    amounts: Mapping[CreditResource, int]
    on_complete: Callable[[int], object] | None = None
    forged: bool = False  # a hostile sender's write without a reservation: admission decides

    @property
    def admitted(self) -> bool:
        """Whether the receiver's write admission decides on this payload."""
        return self.token is not None or self.forged


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
        self.baseline_senders: set[int] = set()
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
        self._refused = 0
        self._lost_at_restart = 0
        self._fences_completed = 0
        # credited payload of the live session not landed yet, per (peer, epoch); superseded
        # epochs whose fence completes once theirs reaches zero
        self._unlanded: dict[tuple[int, int], int] = {}
        self._fencing: set[tuple[int, int]] = set()
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
        old = self.receiver.endpoint(peer)
        self.receiver.accept(peer)  # the receiver bumps the epoch; the old one is FENCING
        sender.disconnect(now_ns)
        if old is not None:
            self._fencing.add((peer, old.epoch))
        self._up[peer], self._down[peer] = self._channels()  # in-flight messages are lost
        sender.reconnect(now_ns)
        self._complete_drained_fences()

    def restart_receiver(self, receiver: CreditReceiver, now_ns: int) -> None:
        """The receiver restarted with a new session; every sender reconnects to it.

        Payload of the old session never lands (the old receiver is gone): senders see those
        completions as failures, which drain their fenced in-flight count. Payload that had
        landed and was not yet consumed is lost with the old receiver's memory: its write had
        completed, so it completes at its sender now, counted in ``lost_at_restart``.
        """
        self.receiver = receiver
        # baseline payload is not credit-tracked: the restart only loses credited work
        unlanded = [w for (_, _, kind, w) in self._events if kind == "land" and w.admitted]
        landed = [w for (_, _, kind, w) in self._events if kind == "release" and w.admitted]
        self._events = [e for e in self._events if e[2] == "complete" or not e[3].admitted]
        heapq.heapify(self._events)
        self._fenced_work += len(unlanded)
        self._lost_at_restart += len(landed)
        for work in (*unlanded, *landed):
            self._push(now_ns, "complete", work)
        self._unlanded.clear()
        self._fencing.clear()
        self._occupied = dict.fromkeys(CreditResource, 0)
        for _, _, kind, work in self._events:
            if kind == "release":  # baseline payload that landed and still occupies
                for r, a in work.amounts.items():
                    self._occupied[r] += a
        for peer, sender in self.senders.items():
            sender.disconnect(now_ns)
            receiver.accept(peer)
            self._up[peer], self._down[peer] = self._channels()
            sender.reconnect(now_ns)

    def calm(self, now_ns: int, rates: FaultRates) -> None:
        """Change every control channel's fault rates from now on (e.g. "the faults stop").

        Messages still in flight move to the new channels, due at once, in their old order; a
        message the old channel had decided to drop or delay further is not resurrected or
        held back (the new channel decides afresh).
        """
        self._rates = rates
        for table in (self._up, self._down):
            for peer, old in list(table.items()):
                pending = [m.data for m in old._in_flight]  # pending order (same package)
                new = self._channels()[0]
                for data in pending:
                    new.send(data, now_ns)
                table[peer] = new

    # ------------------------------------------------------------------ payload

    def try_send(self, peer: int, charge: CreditCharge, now_ns: int) -> bool:
        """Reserve ``charge`` on ``peer`` and, if granted, commit and put it on the wire."""
        sender = self.senders[peer]
        result = sender.try_reserve(charge, now_ns)
        if not isinstance(result, ReservationToken):
            self._blocked += 1
            return False
        sender.commit(result)  # our in-process transport always accepts the submit
        self._put_on_wire(peer, result, now_ns, None)
        return True

    def send_committed(
        self,
        peer: int,
        token: ReservationToken,
        now_ns: int,
        *,
        on_complete: Callable[[int], object],
    ) -> None:
        """Put payload whose reservation was already committed (e.g. by a dispatch gate) on
        the wire; ``on_complete(now_ns)`` runs instead of the endpoint's ``complete``.

        Raises :class:`InvalidEntry` for an unknown sender or a token not COMMITTED.
        """
        if peer not in self.senders:
            raise InvalidEntry(f"no credited sender {peer}")
        if not isinstance(token, ReservationToken) or token.state is not TokenState.COMMITTED:
            raise InvalidEntry(f"{token!r} is not a COMMITTED reservation")
        self._put_on_wire(peer, token, now_ns, on_complete)

    def _put_on_wire(
        self,
        peer: int,
        token: ReservationToken,
        now_ns: int,
        on_complete: Callable[[int], object] | None,
    ) -> None:
        self._reserved += 1
        work = _Work(
            token=token,
            peer=peer,
            epoch=token.epoch,
            session_value=token.key.receiver_session.value,
            amounts=token.charge.as_dict(),
            on_complete=on_complete,
        )
        self._launch(work, now_ns)

    def _launch(self, work: _Work, now_ns: int) -> None:
        if work.session_value == self.receiver.session.value:
            ident = (work.peer, work.epoch)
            self._unlanded[ident] = self._unlanded.get(ident, 0) + 1
        self._push(now_ns + self._land_delay, "land", work)

    def send_forged(
        self, peer: int, amounts: Mapping[CreditResource, int], epoch: int, now_ns: int
    ) -> None:
        """A hostile sender's write that no reservation covers (it claims ``epoch`` of the live
        session): the receiver's write admission decides whether it lands. Raises
        :class:`InvalidEntry` for an unknown sender."""
        if peer not in self.senders:
            raise InvalidEntry(f"no credited sender {peer}")
        work = _Work(
            token=None,
            peer=peer,
            epoch=epoch,
            session_value=self.receiver.session.value,
            amounts=dict(amounts),
            on_complete=lambda _now: None,
            forged=True,
        )
        self._launch(work, now_ns)

    def inject(self, peer: int, data: bytes, now_ns: int) -> None:
        """Put arbitrary bytes on sender ``peer``'s control connection to the receiver (they
        cross the channel with its faults like any other message)."""
        self._up[peer].send(data, now_ns)

    def _complete_drained_fences(self) -> None:
        # A transport completes the fence once the epoch's old QPs / in-flight work drained.
        for ident in sorted(self._fencing):
            if self._unlanded.get(ident, 0) == 0:
                self._fencing.discard(ident)
                self._unlanded.pop(ident, None)
                peer, epoch = ident
                try:
                    self.receiver.fence_complete(peer, 0, epoch)
                except InvalidEntry:  # quarantined (fenced already) or settled and forgotten
                    continue
                self._fences_completed += 1

    def add_baseline_sender(self, peer: int) -> None:
        """Register a sender that dispatches without any credit (no control connection)."""
        if peer in self.senders or peer in self.baseline_senders:
            raise InvalidEntry(f"sender {peer} exists")
        self.baseline_senders.add(peer)

    def send_uncredited(
        self,
        peer: int,
        amounts: Mapping[CreditResource, int],
        now_ns: int,
        *,
        on_complete: Callable[[int], object],
    ) -> None:
        """A baseline sender's payload: it lands and occupies the receiver without any
        reservation (the allocator never sees it), is consumed like any other, then
        ``on_complete(now_ns)`` runs. Raises :class:`InvalidEntry` for an unknown sender."""
        if peer not in self.baseline_senders:
            raise InvalidEntry(f"no baseline sender {peer}")
        work = _Work(
            token=None,
            peer=peer,
            epoch=0,
            session_value=0,
            amounts=dict(amounts),
            on_complete=on_complete,
        )
        self._push(now_ns + self._land_delay, "land", work)

    def _push(self, due_ns: int, kind: str, work: _Work) -> None:
        self._serial += 1
        heapq.heappush(self._events, (due_ns, self._serial, kind, work))

    def _run_payload(self, now_ns: int) -> None:
        while self._events and self._events[0][0] <= now_ns:
            _, _, kind, work = heapq.heappop(self._events)
            amounts = work.amounts
            credited = work.admitted
            if kind == "land":
                if credited and work.session_value != self.receiver.session.value:
                    self._fenced_work += 1
                    self._push(now_ns, "complete", work)
                    continue
                if credited:
                    ident = (work.peer, work.epoch)
                    if ident in self._unlanded:
                        self._unlanded[ident] -= 1
                    admission = self.receiver.admit_write(work.peer, 0, work.epoch, amounts)
                    self._complete_drained_fences()
                    if not admission.accepted:  # refused before it touched memory: it failed
                        self._refused += 1
                        self._push(now_ns, "complete", work)
                        continue
                self._landed += 1
                for r, a in amounts.items():
                    self._occupied[r] += a
                self._push(now_ns + self._consume_delay, "release", work)
            elif kind == "release":
                if credited:
                    self.receiver.release(work.peer, 0, work.epoch, amounts)
                    self._complete_drained_fences()
                self._released += 1
                for r, a in amounts.items():
                    self._occupied[r] -= a
                self._push(now_ns, "complete", work)
            else:
                if work.on_complete is not None:
                    work.on_complete(now_ns)
                else:
                    assert work.token is not None
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
            endpoint = self.receiver.endpoint(peer)
            for data in self._up[peer].deliver(now_ns):
                if endpoint is not None and not endpoint.closed:
                    endpoint.receive_message(data, now_ns)
            self.senders[peer].receive_batch(self._down[peer].deliver(now_ns), now_ns)
            self.senders[peer].handle_timer(now_ns)
        self._run_payload(now_ns)
        self._observe()

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
            refused_writes=self._refused,
            lost_at_restart=self._lost_at_restart,
            fences_completed=self._fences_completed,
            peak_outstanding={r: v for r, v in self._peak_outstanding.items() if v},
            peak_occupied={r: v for r, v in self._peak_occupied.items() if v},
            capacity=dict(self.receiver.allocator.config.capacity),
        )
