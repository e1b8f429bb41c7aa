"""The control client's and server's timer (``_Timer``): kept while the deadline moves later,
replaced when it moves earlier. (What fires early finds nothing due and is armed again by the
flush that follows: the heartbeat, idle-return and freshness tests of the transport stage run
through it.)"""

from __future__ import annotations

import asyncio
import time

from tent_transport.control._common import _Timer


def _ns_from_now(ms: float) -> int:
    return time.monotonic_ns() + int(ms * 1e6)


def test_a_later_deadline_keeps_the_armed_timer_and_an_earlier_one_replaces_it() -> None:
    async def scenario() -> None:
        fired: list[int] = []
        timer = _Timer(lambda: fired.append(time.monotonic_ns()))
        now = time.monotonic_ns()
        timer.arm(_ns_from_now(500), now)
        first = timer._handle
        assert first is not None
        timer.arm(_ns_from_now(900), now)  # later: kept, no new handle
        timer.arm(None, now)  # nothing due: kept too (it fires once and finds nothing)
        assert timer._handle is first and not first.cancelled()
        timer.arm(_ns_from_now(20), now)  # earlier: replaced
        assert timer._handle is not first and first.cancelled()
        while not fired:  # bounded by the 20 ms deadline
            await asyncio.sleep(0.005)
        assert fired[0] >= now + 20_000_000
        timer.cancel()

    asyncio.run(scenario())
