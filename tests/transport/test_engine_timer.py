"""The engine's pass timer: kept while the core's deadline stays put, replaced when it moves,
and it still fires after passes that kept it (the core's fallback deadline is the safety net for
a wake-up that never came)."""

from __future__ import annotations

import asyncio
import time

from tent_transport.config import load_engine_config
from tent_transport.control import PskIdentity
from tent_transport.engine import Engine, EngineOptions

KEY = b"engine-timer-test-key-0123456789"


class _Core:
    """What a dispatch pass reads of the dispatch core, with a deadline the test sets."""

    def __init__(self, due_ns: int) -> None:
        self.due_ns = due_ns
        self.passes = 0
        self.fired = asyncio.Event()

    def progress(self, now_ns: int) -> list[object]:
        self.passes += 1
        if now_ns >= self.due_ns:
            self.fired.set()
        return []

    def drain_endpoint_events(self) -> list[object]:
        return []

    def backpressure(self, peer: int) -> None:
        return None

    def next_timer_ns(self) -> int:
        return self.due_ns


def _engine() -> Engine:
    options = EngineOptions(peer_id=1, identity=PskIdentity(local_peer=1, keys={2: KEY}))
    return Engine(load_engine_config({}), options)


def test_a_pass_keeps_the_timer_of_an_unchanged_deadline_and_replaces_a_moved_one() -> None:
    async def scenario() -> None:
        engine = _engine()
        core = _Core(time.monotonic_ns() + 60_000_000_000)
        engine.core = core  # type: ignore[assignment]
        engine._bind_driver()
        engine._run_pass()
        first = engine._timer
        assert first is not None
        engine._run_pass()
        engine._run_pass()
        assert engine._timer is first and not first.cancelled()  # one timer, not three
        core.due_ns += 1_000_000_000
        engine._run_pass()
        assert first.cancelled() and engine._timer is not first
        assert engine._timer is not None and engine._timer.when() > first.when()
        engine._timer.cancel()

    asyncio.run(scenario())


def test_a_kept_timer_still_fires_and_a_fired_one_is_armed_again_for_the_same_deadline() -> None:
    async def scenario() -> None:
        engine = _engine()
        core = _Core(time.monotonic_ns() + 20_000_000)  # 20 ms ahead
        engine.core = core  # type: ignore[assignment]
        engine._bind_driver()
        for _ in range(3):
            engine._run_pass()
        await asyncio.wait_for(core.fired.wait(), 30)  # a hang guard, not a timing check
        # the deadline has not moved (work still due): the pass after the firing must arm a
        # new timer, not keep the spent one, or no pass would ever run again
        while engine._pass_scheduled:
            await asyncio.sleep(0)
        engine._run_pass()
        core.fired = asyncio.Event()  # set again only by a pass the timer starts
        await asyncio.wait_for(core.fired.wait(), 30)
        engine._closed = True  # stop the passes a due-now deadline keeps scheduling

    asyncio.run(scenario())
