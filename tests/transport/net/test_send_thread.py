"""The raw transport's send thread (devices/tcp/_send_thread.py): payloads leave the socket while
the event loop is busy, in order with the small writes sent inline, and closing joins the thread
before the socket closes; on real loopback sockets, on asyncio's loop and on uvloop."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from typing import Any

import pytest
from net_helpers import connect_exposed, write_request
from procs import KEY, credit_config
from raw_helpers import Recorder, drain, read_in_thread, run, tcp_pair
from tent_transport.config import load_engine_config
from tent_transport.control import PskIdentity
from tent_transport.devices.tcp._raw import INLINE_BYTES, RawSocketTransport
from tent_transport.devices.tcp._send_thread import send_thread_by_default
from tent_transport.devices.tcp._sender import TcpRail
from tent_transport.engine import EngineOptions, SyncEngine
from tent_transport.errors import InvalidArgument

from tent_sched import TaskStatus

__all__ = ["run"]  # the fixture (raw_helpers)

_SMALL_BUFFERS = 16 << 10  # both kernel buffers this small: a payload waits on the reader


def _small_pair() -> tuple[socket.socket, socket.socket]:
    client, peer = tcp_pair(sndbuf=_SMALL_BUFFERS)
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _SMALL_BUFFERS)
    return client, peer


def _send_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("tent-send-")}


async def _taken(transport: RawSocketTransport) -> None:
    """Wait (bounded) until the socket took every queued byte: the thread counts a send after
    it returns, so the peer can read the last bytes a moment before the count drops."""
    for _ in range(1000):
        if transport.get_write_buffer_size() == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{transport.get_write_buffer_size()} bytes never left the queue")


def test_a_payload_leaves_while_the_loop_thread_is_blocked(run: Any) -> None:
    async def scenario() -> None:
        client, peer = _small_pair()
        protocol = Recorder()
        transport = RawSocketTransport(
            asyncio.get_running_loop(), client, protocol, send_thread=True
        )
        payload = bytes(range(256)) * (32 << 10)  # 8 MiB, far beyond both kernel buffers
        try:
            transport.write(payload)
            # The loop thread reads it all itself, without returning to the loop: only a thread
            # other than the loop's can keep the socket fed (without one this read times out).
            assert drain(peer, len(payload)) == payload
        finally:
            transport.close()
            peer.close()
        assert await protocol.lost is None

    run(scenario())


def test_inline_and_threaded_writes_arrive_in_the_order_written(run: Any) -> None:
    async def scenario() -> None:
        client, peer = _small_pair()
        protocol = Recorder()
        transport = RawSocketTransport(
            asyncio.get_running_loop(), client, protocol, send_thread=True
        )
        # headers below INLINE_BYTES, payloads above it, as the data path writes them: a small
        # write behind a queued payload must wait for it, not go out inline
        parts: list[bytes] = []
        for i in range(12):
            parts.append(bytes([i]) * 40)
            parts.append(bytes([255 - i]) * (INLINE_BYTES + 4099 * i + 1))
        try:
            for part in parts:
                transport.write(memoryview(part))
            expected = b"".join(parts)
            assert await read_in_thread(peer, len(expected)) == expected
            await _taken(transport)
        finally:
            transport.close()
            peer.close()
        await protocol.lost

    run(scenario())


def test_close_with_a_blocked_send_joins_the_thread_and_closes_the_socket_once(run: Any) -> None:
    async def scenario() -> None:
        before = _send_threads()  # any a failed test elsewhere left behind
        client, peer = _small_pair()
        protocol = Recorder()
        transport = RawSocketTransport(
            asyncio.get_running_loop(), client, protocol, send_thread=True
        )
        try:
            transport.write(bytes(4 << 20))  # the peer never reads: the thread waits on it
            for _ in range(200):
                if transport.get_write_buffer_size() < 4 << 20:
                    break
                await asyncio.sleep(0.01)
            assert transport.get_write_buffer_size() > 0  # still blocked
            assert len(_send_threads() - before) == 1
        finally:
            transport.close()
        assert not _send_threads() - before  # joined by close, before the socket is closed
        transport.write(b"after close")  # dropped, not raised, not queued
        assert transport.get_write_buffer_size() == 0
        assert await protocol.lost is None
        assert protocol.events == ["made", "lost"]
        assert client.fileno() == -1
        peer.close()

    run(scenario())


def test_a_reset_during_a_threaded_send_reaches_the_protocol_once(run: Any) -> None:
    async def scenario() -> None:
        before = _send_threads()
        client, peer = _small_pair()
        protocol = Recorder()
        transport = RawSocketTransport(
            asyncio.get_running_loop(), client, protocol, send_thread=True
        )
        transport.write(bytes(4 << 20))
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        peer.close()  # linger 0 with unread bytes: an RST under the thread's send
        exc = await asyncio.wait_for(protocol.lost, 10)
        assert exc is None or isinstance(exc, ConnectionError)
        await asyncio.sleep(0)
        assert protocol.events.count("lost") == 1
        assert not _send_threads() - before
        assert transport.is_closing() and transport.get_write_buffer_size() == 0

    run(scenario())


def test_the_rail_sends_on_a_thread_with_more_than_two_cpus_unless_told_and_refuses_a_non_bool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for cpus, default in ((1, False), (2, False), (3, True), (16, True)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda _pid, n=cpus: set(range(n)))
        assert send_thread_by_default() is default
        assert TcpRail("tcp0").send_thread is default
        assert TcpRail("tcp0", send_thread=True).send_thread is True
        assert TcpRail("tcp0", send_thread=False).send_thread is False
    with pytest.raises(InvalidArgument):
        TcpRail("tcp0", send_thread=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("send_thread", [True, False])
def test_the_engine_moves_payloads_with_and_without_the_send_thread(send_thread: bool) -> None:
    block = 1 << 20  # above INLINE_BYTES: every payload goes through the thread when there is one
    before = _send_threads()  # any a failed test elsewhere left behind
    config = load_engine_config(credit_config("required", slots=4, block=block, batch=1))
    rx = SyncEngine(
        config, EngineOptions(peer_id=2, identity=PskIdentity(local_peer=2, keys={1: KEY}))
    )
    tx = SyncEngine(
        config,
        EngineOptions(
            peer_id=1,
            identity=PskIdentity(local_peer=1, keys={2: KEY}),
            data_send_thread=send_thread,
        ),
    )
    try:
        peer, memory, segment = connect_exposed(rx, tx, 4 * block)
        blocks = [os.urandom(block) for _ in range(4)]
        requests = [
            write_request(peer, segment.segment_id, i * block, data)
            for i, data in enumerate(blocks)
        ]
        handles = [tx.submit_nowait([request]) for request in requests]
        for _ in blocks:
            rx.release(rx.next_landed(10))
        for handle in handles:
            assert handle.result(10).status is TaskStatus.COMPLETED
        assert bytes(memory) == b"".join(blocks)
        assert len(_send_threads() - before) == (1 if send_thread else 0)  # one connection
    finally:
        tx.close()
        rx.close()
    assert not _send_threads() - before


def test_a_non_bool_data_send_thread_option_is_refused() -> None:
    identity = PskIdentity(local_peer=1, keys={2: KEY})
    with pytest.raises(ValueError, match="data_send_thread"):
        EngineOptions(peer_id=1, identity=identity, data_send_thread=1)  # type: ignore[arg-type]
