"""Shared by the raw transport's tests (test_raw_transport, test_send_thread): the ``run``
fixture (asyncio's loop and uvloop), a recording protocol and loopback socket pairs."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
import uvloop

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Iterator[Callable[[Coroutine[Any, Any, Any]], Any]]:
    with asyncio.Runner(loop_factory=LOOPS[request.param]) as runner:
        yield runner.run


class Recorder(asyncio.BufferedProtocol):
    """Collects what arrives and every callback, in order."""

    def __init__(self, *, fail_on_data: bool = False) -> None:
        self.buffer = bytearray(64 * 1024)
        self.received = bytearray()
        self.events: list[str] = []
        self.lost: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()
        self.fail_on_data = fail_on_data

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.events.append("made")

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self.buffer)

    def buffer_updated(self, nbytes: int) -> None:
        if self.fail_on_data:
            raise ValueError("the protocol refuses these bytes")
        self.received += self.buffer[:nbytes]

    def eof_received(self) -> bool | None:
        self.events.append("eof")
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append("lost")
        self.lost.set_result(exc)


def tcp_pair(sndbuf: int = 0) -> tuple[socket.socket, socket.socket]:
    """A connected loopback pair; ``sndbuf`` > 0 shrinks the client's send buffer so that the
    kernel takes only part of a large write."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
    if sndbuf:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    return client, peer


def drain(peer: socket.socket, count: int) -> bytes:
    out = bytearray()
    peer.settimeout(10)
    while len(out) < count:
        chunk = peer.recv(count - len(out))
        assert chunk, f"peer closed after {len(out)} of {count} bytes"
        out += chunk
    return bytes(out)


async def read_in_thread(peer: socket.socket, count: int) -> bytes:
    return await asyncio.get_running_loop().run_in_executor(None, drain, peer, count)
