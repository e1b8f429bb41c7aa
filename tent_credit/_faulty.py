"""The one fault-injecting channel (docs/design.md#ownership), public as :mod:`tent_credit.testing`.

:class:`FaultyChannel` is a sans-IO, in-memory, one-way channel of encoded messages. It drops,
duplicates, delays and reorders them, with every choice taken from a seeded
:class:`random.Random` or from a :class:`FaultChooser` (e.g. Hypothesis draws), so a run is
reproducible and a failing schedule shrinks. The example, the conformance harness and the
transport's fault wrapper all use it; none of them builds its own.

Time enters as ``now_ns`` (no clock is read); it must not go backwards between calls.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from typing import Protocol

import attrs

from ._describe import describe
from .errors import InvalidArgument, InvalidEntry, TooManyRequests

__all__ = [
    "CHOICE_DELAY",
    "CHOICE_DROP",
    "CHOICE_DUPLICATE",
    "CHOICE_REORDER",
    "CHOICE_REORDER_PICK",
    "NO_FAULTS",
    "ChannelStatistics",
    "FaultChooser",
    "FaultRates",
    "FaultyChannel",
]

CHOICE_DROP = "drop"
CHOICE_DUPLICATE = "duplicate"
CHOICE_DELAY = "delay_ns"
CHOICE_REORDER = "reorder"
CHOICE_REORDER_PICK = "reorder_pick"


def _rate(_inst: object, attr: attrs.Attribute[float], value: float) -> None:
    if type(value) not in (int, float) or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise InvalidArgument(f"{attr.name} must be a rate in [0, 1], got {describe(value)}")


def _delay(_inst: object, _attr: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 0:
        raise InvalidArgument(f"max_delay_ns must be a non-negative int, got {describe(value)}")


@attrs.frozen(kw_only=True)
class FaultRates:
    """Per-message fault probabilities and the delay bound. Raises :class:`InvalidArgument`
    for a rate outside [0, 1] (or not a number) or a negative ``max_delay_ns``.

    A rate of exactly 0 never injects that fault and a rate of exactly 1 always does; neither
    takes a choice. In between, the seeded generator draws, or the chooser decides.
    """

    drop: float = attrs.field(default=0.0, validator=_rate)
    duplicate: float = attrs.field(default=0.0, validator=_rate)
    reorder: float = attrs.field(default=0.0, validator=_rate)
    max_delay_ns: int = attrs.field(default=0, validator=_delay)

    def needs_choices(self) -> bool:
        """Whether some fault decision is random (a rate strictly inside (0, 1) or a delay)."""
        rates = (self.drop, self.duplicate, self.reorder)
        return any(0.0 < r < 1.0 for r in rates) or self.max_delay_ns > 0


NO_FAULTS = FaultRates()
"""The default rates: a perfect FIFO channel."""


class FaultChooser(Protocol):
    """Supplies every choice of a :class:`FaultyChannel` (e.g. from Hypothesis' ``data.draw``).

    ``choose(what, options)`` returns an int in ``[0, options)``. ``what`` names the choice:

    * ``"drop"``, ``"duplicate"``, ``"reorder"`` (``options`` = 2): 1 injects the fault, 0 not;
    * ``"delay_ns"`` (``options`` = ``max_delay_ns + 1``): the delay of one copy;
    * ``"reorder_pick"`` (``options`` = messages due − 1): which later message overtakes.

    Choice 0 is always the fault-free one, so a shrinking chooser converges on fewer faults.
    """

    def choose(self, what: str, options: int) -> int: ...


@attrs.frozen(kw_only=True)
class ChannelStatistics:
    """A snapshot of a channel. Always ``sent + duplicated == delivered + dropped + in_flight``."""

    sent: int
    """Messages accepted by :meth:`FaultyChannel.send` (including those it then dropped)."""
    delivered: int
    dropped: int
    duplicated: int
    """Extra copies made (by the duplicate rate or :meth:`FaultyChannel.duplicate_at`)."""
    reordered: int
    """Deliveries that overtook a message sent earlier and still in flight, whatever the cause
    (the reorder rate, a shorter delay, or :meth:`FaultyChannel.deliver_one`)."""
    in_flight: int


@attrs.frozen(order=True)
class _InFlight:
    due_ns: int
    serial: int  # send order of this copy; orders messages due at the same time
    data: bytes = attrs.field(eq=False, order=False)


class FaultyChannel:
    """A bounded, fault-injecting, in-memory channel of encoded messages (one direction).

    Pending messages are kept in *pending order*: by due time, then by send order. The index
    ``i`` of :meth:`drop_at`, :meth:`duplicate_at` and :meth:`deliver_one` refers to it.

    ``capacity`` bounds the messages in flight: a :meth:`send` into a full channel raises
    :class:`TooManyRequests` (a bounded channel reports its bound; it does not silently
    discard). Randomness comes from ``random.Random(seed)`` or from ``chooser``, never both;
    without either, ``rates`` must need no random choice (see :meth:`FaultRates.needs_choices`),
    so every run is reproducible.

    Raises :class:`InvalidArgument` for an invalid argument or combination.
    """

    def __init__(
        self,
        *,
        seed: int | None = None,
        rates: FaultRates = NO_FAULTS,
        chooser: FaultChooser | None = None,
        capacity: int = 1024,
    ) -> None:
        if seed is not None and type(seed) is not int:
            raise InvalidArgument(f"seed must be an int or None, got {describe(seed)}")
        if not isinstance(rates, FaultRates):
            raise InvalidArgument(f"rates must be FaultRates, got {describe(rates)}")
        if chooser is not None and not callable(getattr(chooser, "choose", None)):
            raise InvalidArgument(
                f"chooser must have a choose(what, options) method: {describe(chooser)}"
            )
        if seed is not None and chooser is not None:
            raise InvalidArgument("give a seed or a chooser, not both")
        if seed is None and chooser is None and rates.needs_choices():
            raise InvalidArgument("random fault rates need a seed or a chooser (reproducibility)")
        if type(capacity) is not int or capacity < 1:
            raise InvalidArgument(f"capacity must be a positive int, got {describe(capacity)}")
        self._rates = rates
        self._chooser = chooser
        self._rng = random.Random(seed) if seed is not None else None
        self._capacity = capacity
        self._in_flight: list[_InFlight] = []  # sorted: the pending order
        self._live_serials: set[int] = set()
        self._serial_heap: list[int] = []  # min-heap of serials, lazily pruned of non-live ones
        self._next_serial = 0
        self._now_ns = 0
        self._sent = 0
        self._delivered = 0
        self._dropped = 0
        self._duplicated = 0
        self._reordered = 0

    @property
    def rates(self) -> FaultRates:
        return self._rates

    @property
    def capacity(self) -> int:
        return self._capacity

    # ------------------------------------------------------------------------ choices

    def _pick(self, what: str, options: int) -> int:
        if self._chooser is None:
            assert self._rng is not None  # guaranteed by __init__ whenever a choice is needed
            return self._rng.randrange(options)
        choice = self._chooser.choose(what, options)
        if type(choice) is not int or not 0 <= choice < options:
            raise InvalidArgument(
                f"chooser returned {describe(choice)} for {describe(what)} ({options} options)"
            )
        return choice

    def _decide(self, what: str, rate: float) -> bool:
        if rate == 0.0:
            return False
        if rate == 1.0:
            return True
        if self._chooser is None:
            assert self._rng is not None
            return self._rng.random() < rate
        return self._pick(what, 2) == 1

    def _delay_ns(self) -> int:
        top = self._rates.max_delay_ns
        return self._pick(CHOICE_DELAY, top + 1) if top else 0

    # ------------------------------------------------------------------------ validation

    def _check_now(self, now_ns: int) -> None:
        if type(now_ns) is not int or now_ns < 0:
            raise InvalidArgument(f"now_ns must be a non-negative int, got {describe(now_ns)}")
        if now_ns < self._now_ns:
            raise InvalidArgument(f"now_ns went backwards: {now_ns} < {self._now_ns}")

    def _check_index(self, i: int) -> None:
        if type(i) is not int:
            raise InvalidArgument(f"index must be an int, got {describe(i)}")
        if not 0 <= i < len(self._in_flight):
            raise InvalidEntry(f"no pending message {i} ({len(self._in_flight)} pending)")

    # ------------------------------------------------------------------------ mutation

    def _enqueue(self, data: bytes, due_ns: int) -> None:
        serial = self._next_serial
        self._next_serial += 1
        bisect.insort(self._in_flight, _InFlight(due_ns, serial, data))
        self._live_serials.add(serial)
        heapq.heappush(self._serial_heap, serial)

    def _remove_serial(self, serial: int) -> None:
        self._live_serials.discard(serial)
        while self._serial_heap and self._serial_heap[0] not in self._live_serials:
            heapq.heappop(self._serial_heap)

    def _count_delivery(self, serial: int) -> None:
        self._remove_serial(serial)
        self._delivered += 1
        if self._serial_heap and self._serial_heap[0] < serial:  # an earlier send is in flight
            self._reordered += 1

    # ------------------------------------------------------------------------ public API

    def send(self, data: bytes, now_ns: int) -> None:
        """Put ``data`` on the channel at ``now_ns``.

        Policy, in order (all choices are made before anything changes):

        1. the channel is full (``capacity`` messages in flight) → :class:`TooManyRequests`;
        2. drop (rate ``drop``): the message is counted as sent and dropped, and that is all;
        3. duplicate (rate ``duplicate``), only when there is room for two copies;
        4. each copy gets its own delay in ``[0, max_delay_ns]`` and is due at
           ``now_ns + delay``; copies with the same due time keep send order.

        Raises :class:`InvalidArgument` (bad ``data`` or ``now_ns``, or a chooser answer out of
        range) or :class:`TooManyRequests`; either way the channel is unchanged.
        """
        if type(data) is not bytes:
            raise InvalidArgument(f"data must be bytes, got {type(data).__name__}")
        self._check_now(now_ns)
        if len(self._in_flight) >= self._capacity:
            raise TooManyRequests(f"channel full: {self._capacity} messages in flight")
        dropped = self._decide(CHOICE_DROP, self._rates.drop)
        copies = 1
        if (
            not dropped
            and len(self._in_flight) + 2 <= self._capacity
            and self._decide(CHOICE_DUPLICATE, self._rates.duplicate)
        ):
            copies = 2
        delays = [] if dropped else [self._delay_ns() for _ in range(copies)]
        # commit
        self._now_ns = now_ns
        self._sent += 1
        if dropped:
            self._dropped += 1
            return
        self._duplicated += copies - 1
        for delay in delays:
            self._enqueue(data, now_ns + delay)

    def deliver(self, now_ns: int) -> list[bytes]:
        """Remove and return every message due by ``now_ns``.

        The due messages come in pending order, except that before each delivery, while two or
        more are left, a reorder (rate ``reorder``) lets a later one (``"reorder_pick"``)
        overtake the head. Raises :class:`InvalidArgument` (channel unchanged) for a bad
        ``now_ns`` or a chooser answer out of range.
        """
        self._check_now(now_ns)
        due_count = bisect.bisect_right(self._in_flight, now_ns, key=lambda m: m.due_ns)
        remaining = list(range(due_count))
        order: list[int] = []
        while remaining:
            pick = 0
            if len(remaining) >= 2 and self._decide(CHOICE_REORDER, self._rates.reorder):
                pick = 1 + self._pick(CHOICE_REORDER_PICK, len(remaining) - 1)
            order.append(remaining.pop(pick))
        # commit
        self._now_ns = now_ns
        delivered = [self._in_flight[i] for i in order]
        del self._in_flight[:due_count]
        for message in delivered:
            self._count_delivery(message.serial)
        return [message.data for message in delivered]

    def deliver_one(self, i: int, now_ns: int) -> bytes:
        """Deliver the ``i``-th pending message now, whether or not it is due (a forced
        reordering or early arrival). Raises :class:`InvalidArgument` (bad ``now_ns`` or
        index type) or :class:`InvalidEntry` (no such message); the channel is then unchanged.
        """
        self._check_now(now_ns)
        self._check_index(i)
        self._now_ns = now_ns
        message = self._in_flight.pop(i)
        self._count_delivery(message.serial)
        return message.data

    def drop_at(self, i: int) -> None:
        """Lose the ``i``-th pending message. Raises :class:`InvalidArgument` or
        :class:`InvalidEntry` (no such message), leaving the channel unchanged."""
        self._check_index(i)
        message = self._in_flight.pop(i)
        self._remove_serial(message.serial)
        self._dropped += 1

    def duplicate_at(self, i: int) -> None:
        """Add a copy of the ``i``-th pending message, due at the same time (after every
        message already pending with that due time).

        Raises :class:`InvalidArgument` or :class:`InvalidEntry` (no such message) or
        :class:`TooManyRequests` (channel full), leaving the channel unchanged.
        """
        self._check_index(i)
        if len(self._in_flight) >= self._capacity:
            raise TooManyRequests(f"channel full: {self._capacity} messages in flight")
        message = self._in_flight[i]
        self._enqueue(message.data, message.due_ns)
        self._duplicated += 1

    def pending(self) -> int:
        """The number of messages in flight."""
        return len(self._in_flight)

    def next_due_ns(self) -> int | None:
        """When the earliest pending message is due (``None`` when nothing is in flight)."""
        return self._in_flight[0].due_ns if self._in_flight else None

    def statistics(self) -> ChannelStatistics:
        """A frozen snapshot of the counters."""
        return ChannelStatistics(
            sent=self._sent,
            delivered=self._delivered,
            dropped=self._dropped,
            duplicated=self._duplicated,
            reordered=self._reordered,
            in_flight=len(self._in_flight),
        )
