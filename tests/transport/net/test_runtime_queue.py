"""The engine's runtime queue at its seams, as a user of the engine sees them (issue 26).

Real engines in one process: a refused post gives its credit back, the queue drains without
the caller polling, and a disabled gate submits exactly like no gate.
"""

from __future__ import annotations

import os

import pytest
from net_helpers import run, until, write_request
from procs import KEY, credit_config
from tent_transport.config import load_engine_config
from tent_transport.control import PskIdentity
from tent_transport.devices.tcp import TcpRail
from tent_transport.devices.verbs import _transport as devices_module
from tent_transport.devices.verbs import soft, soft_backend
from tent_transport.engine import Engine, EngineOptions
from tent_transport.errors import NotSupported
from verbs_engine import BLOCK, connected, fabric

from tent_sched import TaskStatus

__all__ = ["fabric"]  # the autouse fixture: a private soft-verbs fabric per test


def _pair(config: dict[str, object], device: str = "tcp") -> tuple[Engine, Engine]:
    loaded = load_engine_config(config)
    rx_identity = PskIdentity(local_peer=2, keys={1: KEY})
    tx_identity = PskIdentity(local_peer=1, keys={2: KEY})
    rx = Engine(loaded, EngineOptions(peer_id=2, identity=rx_identity, device=device))
    tx = Engine(loaded, EngineOptions(peer_id=1, identity=tx_identity, device=device))
    return rx, tx


def test_a_post_the_device_refuses_gives_its_credit_back() -> None:
    """A one-slot receiver; a write the verbs rail refuses at post (no region at that offset)
    ends FAILED and its charge is rolled back exactly, so the next write gets the only slot.
    Before, the failed write kept the slot consumed and every later write stalled forever."""

    async def scenario() -> None:
        rx, tx = _pair(credit_config("required", slots=1, block=BLOCK, batch=1), "softverbs")
        try:
            peer, segment, memory = await connected(rx, tx, 4 * BLOCK)
            refused = tx.submit([write_request(peer, segment, 8 * BLOCK, os.urandom(BLOCK))])
            state = await refused.wait(10)
            assert state.status is TaskStatus.FAILED and "post refused" in state.detail
            assert tx.gate is not None
            route = tx.gate.statistics().routes[0]
            assert (route.rolled_back, route.committed) == (1, 0)
            block = os.urandom(BLOCK)
            good = tx.submit([write_request(peer, segment, 0, block)])
            event = await rx.landed()
            assert bytes(memory[:BLOCK]) == block
            rx.release(event)
            assert (await good.wait(10)).status is TaskStatus.COMPLETED
            assert rx.credit is not None
            await until(
                lambda: set(rx.credit.allocator.statistics().outstanding.values()) == {0},
                what="every credit back",
            )
        finally:
            await tx.close()
            await rx.close()

    run(scenario(), timeout=60)


def test_the_queue_drains_without_the_caller_polling_on_a_rail_that_never_wakes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rail that reports completions only when polled (as a NIC without a completion
    channel: pyverbs of rdma-core < 57): the last transfer in flight still ends, on the
    progress fallback timer, while the caller only waits. Before, the timer ran only while
    owners were queued and the handle stayed PENDING for good."""
    monkeypatch.setattr(TcpRail, "set_wakeup", lambda self, callback: None)

    async def scenario() -> None:
        rx, tx = _pair(credit_config("disabled"))
        try:
            host, port = await rx.start()
            peer = await tx.connect(host, port)
            memory = bytearray(BLOCK)
            segment = rx.register(memory)
            rx.expose(1, segment.segment_id, 0, BLOCK)
            await tx.wait_regions(peer, lambda d: bool(d.regions))
            block = os.urandom(BLOCK)
            handle = tx.submit([write_request(peer, segment.segment_id, 0, block)])
            state = await handle.wait(10)  # only waits: nothing else wakes the sender
            assert state.status is TaskStatus.COMPLETED, state
            assert bytes(memory) == block
        finally:
            await tx.close()
            await rx.close()

    run(scenario(), timeout=60)


def test_merged_requests_are_one_owner_and_one_post_and_the_receiver_sees_each() -> None:
    """``merge_requests``: four contiguous KV pages written into contiguous offsets become one
    owner in the queue and one chained post; the receiver still gets (and releases) each page
    as its own write, and every page's handle completes."""
    config = {**credit_config("required", slots=8, block=BLOCK), "merge_requests": True}

    async def scenario() -> None:
        rx, tx = _pair(config)
        try:
            host, port = await rx.start()
            peer = await tx.connect(host, port)
            memory = bytearray(4 * BLOCK)
            segment = rx.register(memory)
            rx.expose(1, segment.segment_id, 0, 4 * BLOCK)
            await tx.wait_regions(peer, lambda d: bool(d.regions))
            pages = bytearray(os.urandom(4 * BLOCK))
            view = memoryview(pages)
            handle = tx.submit(
                [
                    write_request(
                        peer, segment.segment_id, i * BLOCK, view[i * BLOCK : (i + 1) * BLOCK]
                    )
                    for i in range(4)
                ]
            )
            landed = [await rx.landed() for _ in range(4)]
            assert sorted((e.offset, e.length) for e in landed) == [
                (i * BLOCK, BLOCK) for i in range(4)
            ]
            for event in landed:
                rx.release(event)
            state = await handle.wait(10)
            assert (state.status, state.ended, state.moved_bytes) == (
                TaskStatus.COMPLETED,
                4,
                4 * BLOCK,
            )
            assert bytes(memory) == bytes(pages)
            queue = tx.core.queue
            assert queue is not None and queue.statistics().admitted_total == 1
            assert tx.core.statistics().merged_total == 3
            assert tx.core.rail_statistics()[0].posts == 1
        finally:
            await tx.close()
            await rx.close()

    run(scenario(), timeout=60)


def test_cancel_of_work_posted_on_a_rail_that_cannot_cancel_is_not_supported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A verbs rail cannot take back a posted work request: canceling a handle whose slices
    are posted raises NotSupported and changes nothing (the write lands and completes); the
    same handle API cancels queued work at once (docs/transport.md "Batches, merging and
    cancel"). Before, such a cancel silently answered False."""
    slow = soft.SoftConfig(delay_ns=(300_000_000, 300_000_000))  # each WR runs 0.3 s late
    monkeypatch.setattr(devices_module, "soft_backend", lambda: soft_backend(config=slow))

    async def scenario() -> None:
        rx, tx = _pair(credit_config("required", slots=4, block=BLOCK), "softverbs")
        try:
            peer, segment, memory = await connected(rx, tx, BLOCK)
            block = os.urandom(BLOCK)
            handle = tx.submit([write_request(peer, segment, 0, block)])
            await until(lambda: handle.status().in_flight_slices > 0, what="the posted write")
            with pytest.raises(NotSupported):
                handle.cancel()
            event = await rx.landed()
            rx.release(event)
            assert (await handle.wait(10)).status is TaskStatus.COMPLETED
            assert bytes(memory[:BLOCK]) == block
        finally:
            await tx.close()
            await rx.close()

    run(scenario(), timeout=60)
