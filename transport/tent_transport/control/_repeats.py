"""The sender holds back usage reports that only repeat the last one it published (issue 13).

The credit core's sender re-reports unmet demand every usage interval, so that a lost report
cannot leave it stalled for good. Over one control connection that turns into a closed loop:
every repeat makes the receiver recompute its grant and answer with a push, the push wakes the
sender, and the sender repeats again one interval later. With 16 stalled senders the receiver
did little else (measured: 224–304 control frames per transfer, docs/incast.md).

The rule here (:class:`RepeatHold`): a report whose *content* differs from the last one
published (its session, epoch, QoS class, consumed and returned totals and demand targets:
everything but its sequence number) goes out at once; the core's own rate bound of one per
interval still applies. A report with the same content, a *repeat*, goes out only once a
back-off has passed since the last one published: the usage interval, doubled with every
repeat, up to ``cap_ns``. A changed report, or a publish the connection refused, starts the
back-off again.

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

# The wire layout (tent_credit._wire): [tag, schema_version, session, epoch, sequence, ...];
# SenderCreditUsage is tag 2 with 7 fields after the schema version.
_USAGE_TAG = 2
_USAGE_ITEMS = 9
_SEQUENCE = 4


def _content(message: bytes) -> tuple[Any, ...] | None:
    """A usage report's fields without its sequence (``None``: not a usage report)."""
    try:
        structure = cbor2.loads(message)
    except (cbor2.CBORDecodeError, ValueError):  # our own encoding: never, but never hold it
        return None
    if (
        not isinstance(structure, list)
        or len(structure) != _USAGE_ITEMS
        or structure[0] != _USAGE_TAG
    ):
        return None
    content = structure[:_SEQUENCE] + structure[_SEQUENCE + 1 :]
    return tuple(repr(item) for item in content)  # nested lists: hashable, compared exactly


class RepeatHold:
    """Decides which of the sender endpoint's usage reports to publish (module docstring).

    ``interval_ns`` is the endpoint's usage interval (the first back-off), ``cap_ns`` the
    longest back-off. Raises :class:`ValueError` for an interval below 0 or a cap below the
    interval. Not thread-safe: one per control client, used from its event loop.
    """

    def __init__(self, interval_ns: int, cap_ns: int) -> None:
        if interval_ns < 0 or cap_ns < interval_ns:
            raise ValueError(f"need 0 <= interval_ns <= cap_ns, got {interval_ns}, {cap_ns}")
        self._interval = interval_ns
        self._cap = cap_ns
        self._last: tuple[Any, ...] | None = None
        self._published_ns = 0
        self._backoff = interval_ns
        self.held = 0
        """Repeats held back so far."""

    def admit(self, message: bytes, now_ns: int) -> bool:
        """Whether to publish ``message`` now (anything but a usage report: always)."""
        content = _content(message)
        if content is None:
            return True
        if content != self._last:
            self._last = content
            self._backoff = self._interval
        elif now_ns - self._published_ns < self._backoff:
            self.held += 1
            return False
        else:
            self._backoff = min(self._cap, max(1, 2 * self._backoff))
        self._published_ns = now_ns
        return True

    def refused(self) -> None:
        """The connection refused the report just admitted: the next one is not a repeat."""
        self._last = None

    def reset(self) -> None:
        """A new connection: its first report goes out whatever the last one said."""
        self._last = None
        self._backoff = self._interval
