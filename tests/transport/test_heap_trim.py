"""The receiver gives the heap an ended session freed back to the operating system
(``engine/_heap.py``; docs/abuse.md "RSS back to baseline"): a trim follows a session's
retirement, requests meanwhile join it, trims are spaced by the interval, and the call it relies
on really returns freed heap pages on glibc."""

from __future__ import annotations

import asyncio
import platform
import subprocess
import sys
import textwrap

import pytest
from tent_transport.control import PskIdentity
from tent_transport.engine import EngineOptions, _heap
from tent_transport.engine._heap import HeapTrim
from tent_transport.engine._receiving import ReceiverSide
from tent_transport.segments import SegmentTable


async def _until(predicate: object, limit_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + limit_s
    while not predicate() and loop.time() < end:  # type: ignore[operator]
        await asyncio.sleep(0.01)


def test_requests_join_one_trim_and_trims_are_spaced() -> None:
    async def run() -> list[float]:
        loop = asyncio.get_running_loop()
        at: list[float] = []
        heap = HeapTrim(loop, interval_s=0.05, trim=lambda pad: at.append(loop.time()) or 0)
        for _ in range(3):
            heap.request()  # a burst of retirements: one trim
        await _until(lambda: len(at) == 1)
        await asyncio.sleep(0.02)
        assert heap.trims == 1
        heap.request()  # right after a trim: waits out the interval from that trim
        await _until(lambda: len(at) == 2)
        assert heap.trims == 2
        return at

    first, second = asyncio.run(run())
    assert second - first >= 0.05 - 0.01  # asyncio may run a timer one clock tick early


def test_close_cancels_a_pending_trim_and_no_libc_means_no_trim() -> None:
    async def run() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        calls: list[int] = []
        heap = HeapTrim(loop, interval_s=0.01, trim=lambda pad: calls.append(pad) or 0)
        heap.request()
        heap.close()
        absent = HeapTrim(loop, interval_s=0.01, trim=None)
        absent.request()
        await asyncio.sleep(0.05)
        return len(calls), absent.trims

    assert asyncio.run(run()) == (0, 0)
    with pytest.raises(ValueError):
        HeapTrim(asyncio.new_event_loop(), interval_s=0)


@pytest.mark.parametrize("enabled", [True, False])
def test_a_retired_session_trims_the_heap(monkeypatch: pytest.MonkeyPatch, enabled: bool) -> None:
    calls: list[int] = []
    monkeypatch.setattr(_heap, "malloc_trim", lambda pad: calls.append(pad) or 0)

    async def run() -> int:
        side = ReceiverSide(credit=None, segments=SegmentTable(), trim_heap=enabled)
        await side.retire_session(4, 10)
        await side.retire_session(5, 11)  # a second one joins the same trim
        await _until(lambda: side.statistics().heap_trims >= 1, limit_s=3.0)
        await asyncio.sleep(0.05)
        side.close()
        return side.statistics().heap_trims

    assert asyncio.run(run()) == (1 if enabled else 0)
    assert calls == ([0] if enabled else [])


def test_trim_heap_option_is_a_bool() -> None:
    identity = PskIdentity(local_peer=1, keys={})
    assert EngineOptions(peer_id=1, identity=identity).trim_heap is True
    with pytest.raises(ValueError, match="trim_heap"):
        EngineOptions(peer_id=1, identity=identity, trim_heap=1)  # type: ignore[arg-type]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_malloc_trim_returns_freed_heap_pages() -> None:
    """What the receiver relies on: memory freed in the middle of the heap (pinned by a few
    live blocks, as a closed connection's buffers are by longer-lived objects) stays in RSS until
    trimmed, and the trim gives most of it back."""
    script = textwrap.dedent(
        """
        from tent_transport.engine._heap import malloc_trim
        def rss():
            for line in open("/proc/self/status"):
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        blocks = [bytearray(64 * 1024 - 64) for _ in range(1024)]  # 64 MiB below mmap's bar
        kept = blocks[::32]
        del blocks
        before = rss()
        malloc_trim(0)
        print(before, rss(), len(kept))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    before, after, _ = map(int, out.stdout.split())
    assert _heap.malloc_trim is not None
    assert before - after > 32 * 1024, (before, after)  # KiB: over half of the 64 MiB freed
