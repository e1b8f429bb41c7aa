"""Shared helpers of the in-process engine-over-soft-verbs tests."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from net_helpers import until, verbs_receiver, write_request
from procs import KEY, credit_config
from tent_transport.config import load_engine_config
from tent_transport.control import PskIdentity
from tent_transport.engine import Engine, EngineOptions

from tent_sched import TaskStatus

BLOCK = 64 << 10


@pytest.fixture(autouse=True)
def fabric(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    path = Path(tempfile.mkdtemp(prefix="tent-sv-engine-", dir=base))
    monkeypatch.setenv("TENT_SOFTVERBS_FABRIC", str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def engines(mode: str = "required") -> tuple[Engine, Engine]:
    config = load_engine_config(credit_config(mode, slots=4, block=BLOCK, batch=2))
    rx = Engine(
        config,
        EngineOptions(
            peer_id=2, identity=PskIdentity(local_peer=2, keys={1: KEY}), device="softverbs"
        ),
    )
    tx = Engine(
        config,
        EngineOptions(
            peer_id=1, identity=PskIdentity(local_peer=1, keys={2: KEY}), device="softverbs"
        ),
    )
    return rx, tx


@contextlib.asynccontextmanager
async def started(mode: str = "required") -> AsyncIterator[tuple[Engine, Engine, str, int]]:
    """A receiver and a sender engine (:func:`engines`), started, not connected: the receiver,
    the sender and the receiver's host and port; both closed on the way out."""
    rx, tx = engines(mode)
    host, port = await rx.start()
    await tx.start()
    try:
        yield rx, tx, host, port
    finally:
        await tx.close()
        await rx.close()


async def move(rx: Engine, tx: Engine, peer: int, segment: int, memory: Any, *, n: int) -> None:
    blocks = [os.urandom(BLOCK) for _ in range(n)]
    handles = [
        tx.submit([write_request(peer, segment, i * BLOCK, b)]) for i, b in enumerate(blocks)
    ]
    for _ in range(n):
        event = await rx.landed()
        assert event.sender == 1 and event.length == BLOCK
        assert bytes(memory[event.offset : event.offset + BLOCK]) == blocks[event.offset // BLOCK]
        rx.release(event)
    for handle in handles:
        assert (await handle.wait(10)).status is TaskStatus.COMPLETED


async def connected(rx: Engine, tx: Engine, length: int) -> tuple[int, int, Any]:
    host, port = await rx.start()
    await tx.start()
    peer = await tx.connect(host, port)
    memory = rx.allocate(length)
    segment = rx.register(memory)
    rx.expose(1, segment.segment_id, 0, length)
    await tx.wait_regions(peer, lambda d: bool(d.regions))
    await until(lambda: tx.rails[0].ready(peer), what="rkeys at the sender")
    return peer, segment.segment_id, memory


def pause_admission(rx: Engine) -> Any:
    """Stop the receiver's arrival polling (as a loaded receiver would not have looked yet):
    the HCAs still land and acknowledge the writes, no receiver code runs; a fence still
    drains (and drops) what arrived. Returns the function that resumes polling."""
    verbs = verbs_receiver(rx)
    assert verbs is not None
    if verbs._poller is not None:
        verbs._poller.cancel()
    verbs._tick = lambda: None  # type: ignore[method-assign]
    verbs.device.set_wakeup(None)

    def resume() -> None:
        del verbs._tick  # the class's method again
        verbs.start()

    return resume
