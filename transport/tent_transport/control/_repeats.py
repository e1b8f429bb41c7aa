"""Control messages that only repeat the last one published are held back (issue 13).

The credit core's sender re-reports unmet demand every usage interval, so that a lost report
cannot leave it stalled for good. Over one control connection that turns into a closed loop:
every repeat makes the receiver recompute its grant and answer with a push, the push wakes the
sender, and the sender repeats again one interval later. With 16 stalled senders the receiver
did little else (measured: 224–304 control frames per transfer, docs/incast.md).

The rule here (:class:`RepeatHold`): a report whose *content* differs from the last one
published (its session, epoch, QoS class, returned totals and demand targets: everything but
its sequence number and its consumed totals) goes out at once; the core's own rate bound of one
per interval still applies. Consumed totals are left out because no grant waits on them: the
receiver only checks them (consumed + returned within the grant), reclaims by returns and
fences by what landed, so a report that only says "I used what you granted" is a repeat too
(measured, 4 senders: 4.6 usage reports and 7.7 updates per transfer, most of them that report
and the receiver's answer). A report with the same content, a *repeat*, goes out only once a
back-off has passed since the last one published: the usage interval, doubled with every
repeat, up to ``cap_ns``. A changed report, or a publish the connection refused, starts the
back-off again.

A sender's repeated capability offer (re-sent every interval until an activation arrives) is
held the same way: a receiver answers each offer, and a slow one must not be flooded with them.

The receiver applies the same rule to its updates (``RepeatHold(..., updates=True)``, one per
connection): an update that repeats the last one sent (the same grants and ``retry_after``: a
stalled sender told again that nothing freed) waits a back-off too. Every release used to push
one to every stalled sender, each waking a sender process to learn nothing. An update with a
freshness TTL is never held: its refreshes are what keep the sender fresh.

A stalled sender's endpoint still asks to be woken one interval after each report it produced;
:meth:`RepeatHold.timer` moves that wake-up to the end of the back-off when it is the only thing
due, so a stalled sender sleeps instead of producing a report every interval only to hold it.

Why that is safe: every total is cumulative, so a held repeat loses nothing the next report
does not carry (exactly like a refused publish, see ``_connection``). A stalled sender is
granted by the receiver's push when capacity frees (``CreditReceiver.release``), not by its
repeats; they only recover a report the channel lost, now within ``cap_ns``. The bound: over a
stall of ``T`` ns with unchanged content, at most ``1 + log2(cap / interval) + T / cap``
repeats go out, against ``T / interval`` before.
"""

from __future__ import annotations

from typing import Any

import cbor2

__all__ = ["RepeatHold"]

# The wire layout (tent_credit._wire): [tag, schema_version, field, ...]. SenderCreditUsage
# is tag 2 (session, epoch, sequence, qos, consumed, returned, demand), ReceiverCreditUpdate
# tag 1 (flags, qos, session, epoch, sequence, freshness_ttl_ms, grants, retry_after_us).
_USAGE = (2, 9, 4)  # tag, items, index of the sequence
_USAGE_CONSUMED = 6
_UPDATE = (1, 10, 6)
_UPDATE_TTL = 7
# CapabilityOffer is tag 4 (versions, qos): it has no sequence; the endpoint re-offers every
# usage interval until an activation arrives, and a slow receiver (it answers every offer)
# must not be flooded with them either
_OFFER = (4, 4, -1)


def _content(message: bytes, kinds: tuple[tuple[int, int, int], ...]) -> tuple[Any, ...] | None:
    """The fields of a message of one of ``kinds`` without its sequence (``None``: another
    message, or an update with a freshness TTL, whose refreshes keep its sender fresh)."""
    try:
        structure = cbor2.loads(message)
    except (cbor2.CBORDecodeError, ValueError):  # our own encoding: never, but never hold it
        return None
    if not isinstance(structure, list) or not structure:
        return None
    for tag, items, sequence in kinds:
        if structure[0] == tag and len(structure) == items:
            if tag == _UPDATE[0] and structure[_UPDATE_TTL] != 0:
                return None
            skip = {sequence, _USAGE_CONSUMED} if tag == _USAGE[0] else {sequence}
            content = [item for i, item in enumerate(structure) if i not in skip]
            return tuple(repr(item) for item in content)  # nested lists: hashable, exact
    return None


class RepeatHold:
    """Decides which of the sender endpoint's usage reports to publish (module docstring).

    ``interval_ns`` is the endpoint's usage interval (the first back-off), ``cap_ns`` the
    longest back-off. Raises :class:`ValueError` for an interval below 0 or a cap below the
    interval. Not thread-safe: one per control client, used from its event loop.
    """

    def __init__(self, interval_ns: int, cap_ns: int, *, updates: bool = False) -> None:
        if interval_ns < 0 or cap_ns < interval_ns:
            raise ValueError(f"need 0 <= interval_ns <= cap_ns, got {interval_ns}, {cap_ns}")
        self._kinds = (_UPDATE,) if updates else (_USAGE, _OFFER)
        self._interval = interval_ns
        self._cap = cap_ns
        self._last: tuple[Any, ...] | None = None
        self._published_ns = 0
        self._backoff = interval_ns
        self._holding = False  # the last message seen was a repeat held back
        self._produced_ns = 0
        self.held = 0
        """Repeats held back so far."""

    def admit(self, message: bytes, now_ns: int) -> bool:
        """Whether to publish ``message`` now (anything but a usage report: always)."""
        content = _content(message, self._kinds)
        if content is None:
            return True
        if content != self._last:
            self._last = content
            self._backoff = self._interval
        elif now_ns - self._published_ns < self._backoff:
            self.held += 1
            self._holding = True
            self._produced_ns = now_ns
            return False
        else:
            self._backoff = min(self._cap, max(1, 2 * self._backoff))
        self._published_ns = now_ns
        self._holding = False
        return True

    def timer(self, deadline_ns: int | None, usage_interval_ns: int) -> int | None:
        """The endpoint's next deadline, moved to when the held repeat may go out if that
        deadline is only the repeat's (the endpoint re-reports one interval after the report
        it produced). A stalled sender then sleeps through its back-off instead of waking
        every interval to produce a report that is held again."""
        if deadline_ns is None or not self._holding:
            return deadline_ns
        if deadline_ns != self._produced_ns + usage_interval_ns:
            return deadline_ns  # something else is due first (an offer, a heartbeat)
        return max(deadline_ns, self._published_ns + self._backoff)

    def refused(self) -> None:
        """The connection refused the report just admitted: the next one is not a repeat."""
        self._last = None

    def reset(self) -> None:
        """A new connection: its first report goes out whatever the last one said."""
        self._last = None
        self._holding = False
        self._backoff = self._interval
