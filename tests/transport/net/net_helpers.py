"""Helpers of the real-socket transport tests (stage 6: ``pytest -m transport``)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
    """Run ``coro`` on a fresh loop, bounded: a hang fails the test instead of stalling CI."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def until(predicate: Any, *, timeout: float = 10.0, what: str = "condition") -> None:
    """Wait for ``predicate()`` (bounded; polls the loop, asserts nothing about speed)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def data_server(engine: Any, rail: int = 0) -> Any:
    """The engine's TCP data listener of ``rail`` (its receiver half on a TCP engine)."""
    from tent_transport.devices.tcp import TcpDataServer

    half = engine.receivers[rail]
    assert isinstance(half, TcpDataServer)
    return half


def verbs_receiver(engine: Any) -> Any:
    """The verbs receiver half of a soft-verbs engine."""
    from tent_transport.devices.verbs import VerbsReceiver

    half = engine.receivers[0]
    assert isinstance(half, VerbsReceiver)
    return half


def sync_pair(config: Any, **rx_options: Any) -> tuple[Any, Any, int]:
    """A receiver ``SyncEngine`` (peer 2; ``rx_options``: more of its ``EngineOptions``) and a
    sender (peer 1) on ``config``, both started and connected: ``(rx, tx, peer)``."""
    from procs import KEY
    from tent_transport.control import PskIdentity
    from tent_transport.engine import EngineOptions, SyncEngine

    rx = SyncEngine(
        config,
        EngineOptions(peer_id=2, identity=PskIdentity(local_peer=2, keys={1: KEY}), **rx_options),
    )
    tx = SyncEngine(
        config, EngineOptions(peer_id=1, identity=PskIdentity(local_peer=1, keys={2: KEY}))
    )
    host, port = rx.start()
    tx.start()
    return rx, tx, tx.connect(host, port)


def connect_exposed(rx: Any, tx: Any, size: int) -> tuple[int, bytearray, Any]:
    """Start two ``SyncEngine``\\ s, connect ``tx`` to ``rx`` and expose a fresh ``size``-byte
    segment of ``rx`` to peer 1; return ``(peer, memory, segment)`` once ``tx`` sees it."""
    host, port = rx.start()
    tx.start()
    peer = tx.connect(host, port)
    memory = bytearray(size)
    segment = rx.register(memory)
    rx.expose(1, segment.segment_id, 0, len(memory))
    tx.wait_regions(peer, lambda d: bool(d.regions))
    return peer, memory, segment


def write_request(peer: int, segment: int, offset: int, data: bytes, **fields: Any) -> Any:
    """A WRITE of ``data`` to ``segment`` at ``offset`` of ``peer`` (a ``TransferRequest``;
    ``fields``: its other fields, e.g. ``plan``)."""
    from tent_transport.devices import Opcode
    from tent_transport.dispatch import TransferRequest

    return TransferRequest(
        opcode=Opcode.WRITE,
        local=data,
        peer=peer,
        remote_segment=segment,
        remote_offset=offset,
        length=len(data),
        **fields,
    )
