"""How fast one peer may make the receiver handle control frames (issue 27 item 4).

RFC "Security and Abuse Boundaries": per-peer update frequency and control-queue occupancy are
bounded. One authenticated peer sending 200,000 heartbeats cut an honest sender's throughput
to a third: every frame cost the receiver's loop a decode and a handler, ahead of everybody
else's work. :class:`ControlRate` is a token bucket per control connection:

1. Each frame received takes a token; tokens come back at ``rate_hz`` up to ``burst``. The
   connection pays for each batch of frames (``READ_BATCH``) before it handles it.
2. Past the bucket the connection is *not read* for as long as the debt takes to repay (its
   frames wait in the kernel, and TCP's flow control holds the peer back): nothing is
   dropped, so no changed total is ever lost, and in ``t`` seconds a peer gets at most
   ``burst + rate_hz * t`` frames (plus one batch) handled, whatever it sends.
3. A peer that keeps at it is quarantined: the time it is held back, less half the time that
   passes, adds up (a leaky bucket); at ``flood_s`` (about twice that long of continuous
   flooding) :attr:`flooding` turns true and the service closes and quarantines it. An honest
   burst (a reconnect's reports) is held back a moment and drains.

The defaults (2,000 frames a second, a burst of 4,000) leave an honest sender room: one
streaming 40 credited 64 KiB writes on loopback (``tests/transport/net/test_control_flood.py``)
sent 4 control frames with grant-ahead credit (version 2) and 113 with version 1 (2.8 per
transfer), and a transfer costs the engine about 1 ms of CPU or more (docs/benchmarks.md), so
an honest sender stays well under 1,000 frames a second.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

__all__ = ["ControlRate"]


class ControlRate:
    """The control-frame budget of one connection. ``clock`` is in seconds (monotonic).

    Raises :class:`ValueError` for a rate, burst or flood bound that is not a finite positive
    number.
    """

    def __init__(
        self,
        rate_hz: float = 2_000.0,
        burst: int = 4_000,
        *,
        flood_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        bounds = (rate_hz, burst, flood_s)
        if not all(type(b) in {int, float} and 0 < b < math.inf for b in bounds):
            raise ValueError(f"rate, burst and flood bound must be finite and > 0: {bounds}")
        self.rate_hz = float(rate_hz)
        self.burst = float(burst)
        self.flood_s = float(flood_s)
        self._clock = clock
        self._tokens = self.burst
        self._level = 0.0  # seconds held back, leaking at half the time that passes
        self._last = clock()
        self.throttled = 0
        """Times the connection was held back (cumulative)."""
        self.throttled_s = 0.0
        """Seconds it was held back in all (cumulative)."""

    def charge(self, frames: int) -> float:
        """Take ``frames`` tokens; returns how long to stop reading (0: within the budget)."""
        now = self._clock()
        elapsed = max(0.0, now - self._last)
        self._last = now
        self._tokens = min(self.burst, self._tokens + elapsed * self.rate_hz) - frames
        self._level = max(0.0, self._level - elapsed / 2)
        if self._tokens >= 0:
            return 0.0
        wait = -self._tokens / self.rate_hz
        self.throttled += 1
        self.throttled_s += wait
        self._level += wait
        return wait

    @property
    def flooding(self) -> bool:
        """Held back long enough, often enough, to be a flood (see the module docstring)."""
        return self._level >= self.flood_s
