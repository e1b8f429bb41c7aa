"""A stranger's connection is served from its raw socket (control/_preauth.py): no transport
is built for a connection until it proved its key (control listener, PSK) or its bind (data
listener without TLS), and the peer's first bytes past its proof are left for the transport.

``RawPreAuth`` on socket pairs, then both listeners with a counter on the loop's
``connect_accepted_socket`` (what builds a transport for an accepted socket). Asyncio's loop
and uvloop.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
from raw_helpers import run
from tent_transport.control import ControlClient, ControlServer, PskIdentity
from tent_transport.control._errors import HandshakeFailed
from tent_transport.control._preauth import More, RawPreAuth
from test_control import _Hooks, _SenderHooks
from test_doors import SENDER, _attach_and_write, _data_pair, _hello

__all__ = ["run"]  # the fixture (raw_helpers)

Run = Callable[[Coroutine[Any, Any, Any]], Any]
KEY = os.urandom(32)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    server, client = socket.socketpair()
    server.setblocking(False)
    yield server, client
    server.close()
    client.close()


class _Steps:
    """Two steps: 4 bytes ("ping") answered with "pong", then 3 bytes ("end") give "ok"."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []

    def __call__(self, data: bytes) -> More | str:
        self.seen.append(data)
        if len(self.seen) == 1:
            if data != b"ping":
                raise HandshakeFailed("not a ping")
            return More(b"pong", 3)
        return "ok"


def _start(
    sock: socket.socket, steps: _Steps, *, first: bytes = b"", deadline_s: float = 10.0
) -> tuple[RawPreAuth[str], asyncio.Future[str | None]]:
    result: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()

    def done(conn: RawPreAuth[str], value: str | None) -> None:
        assert not result.done(), "done ran twice"
        result.set_result(value)

    conn = RawPreAuth(sock, first=first, need=4, step=steps, done=done, deadline_s=deadline_s)
    return conn, result


def test_steps_get_exactly_their_bytes_and_the_rest_stays_in_the_socket(
    run: Run, pair: tuple[socket.socket, socket.socket]
) -> None:
    server, client = pair

    async def scenario() -> None:
        steps = _Steps()
        conn, result = _start(server, steps, first=b"hi")
        assert client.recv(2) == b"hi"  # sent at once
        for piece in (b"p", b"in", b"g"):  # a step's bytes may come in pieces
            client.sendall(piece)
            await asyncio.sleep(0.01)
        client.sendall(b"end" + b"FRAME")  # the proof and the peer's first frame at once
        assert await asyncio.wait_for(result, 5) == "ok"
        assert steps.seen == [b"ping", b"end"]
        assert client.recv(4) == b"pong"
        assert conn.finished
        assert server.fileno() != -1  # the caller's now, open
        assert server.recv(16) == b"FRAME"  # nothing read past the last step
        conn.close()  # finished: nothing happens
        assert server.fileno() != -1

    run(scenario())


def test_a_refused_step_closes_the_socket_and_reports_none(
    run: Run, pair: tuple[socket.socket, socket.socket]
) -> None:
    server, client = pair

    async def scenario() -> None:
        conn, result = _start(server, _Steps())
        client.sendall(b"PING")
        assert await asyncio.wait_for(result, 5) is None
        assert server.fileno() == -1
        assert client.recv(16) == b""  # closed, nothing answered
        assert conn.finished

    run(scenario())


def test_the_deadline_and_a_peer_that_leaves_end_it(run: Run) -> None:
    async def scenario() -> None:
        late_s, late_c = socket.socketpair()
        late_s.setblocking(False)
        _, late = _start(late_s, _Steps(), deadline_s=0.05)
        gone_s, gone_c = socket.socketpair()
        gone_s.setblocking(False)
        _, gone = _start(gone_s, _Steps())
        gone_c.sendall(b"pi")
        gone_c.close()  # half a step, then gone
        assert await asyncio.wait_for(late, 5) is None
        assert await asyncio.wait_for(gone, 5) is None
        assert late_s.fileno() == -1 and gone_s.fileno() == -1
        late_c.close()

    run(scenario())


def test_close_reports_none_once(run: Run, pair: tuple[socket.socket, socket.socket]) -> None:
    server, _ = pair

    async def scenario() -> None:
        conn, result = _start(server, _Steps())
        conn.close()  # evicted
        conn.close()
        assert result.done() and result.result() is None
        assert server.fileno() == -1

    run(scenario())


class _Transports:
    """Counts the transports the running loop builds for accepted sockets."""

    def __init__(self) -> None:
        self.built = 0
        loop = asyncio.get_running_loop()
        original = loop.connect_accepted_socket

        async def counting(*args: Any, **kwargs: Any) -> Any:
            self.built += 1
            return await original(*args, **kwargs)

        loop.connect_accepted_socket = counting  # type: ignore[method-assign]


async def _strangers(port: int, greetings: list[bytes]) -> list[socket.socket]:
    loop = asyncio.get_running_loop()
    out = []
    for greeting in greetings:
        sock = socket.socket()
        sock.setblocking(False)
        await loop.sock_connect(sock, ("127.0.0.1", port))
        if greeting:
            await loop.sock_sendall(sock, greeting)
        out.append(sock)
    return out


async def _closed(sock: socket.socket) -> bool:
    loop = asyncio.get_running_loop()
    try:
        while await asyncio.wait_for(loop.sock_recv(sock, 4096), 5):
            pass  # a challenge or a server hello, then the close
    except ConnectionResetError:
        pass  # closed with its bytes unread
    return True


def test_strangers_at_the_control_listener_cost_no_transport(run: Run) -> None:
    async def scenario() -> None:
        transports = _Transports()
        hooks = _Hooks()
        server = ControlServer(
            PskIdentity(local_peer=2, keys={1: KEY}),
            credit=None,
            rails=lambda: [("127.0.0.1", 9)],
            hooks=hooks,
            max_pending_handshakes=2,
            handshake_timeout_s=0.2,
        )
        _, port = await server.listen("127.0.0.1", 0)
        # silent, a stalled hello of a known peer, garbage, a hello of an unknown peer
        greetings = [b"", _hello(1), b"\x00" * 47, _hello(9), b""]
        strangers = await _strangers(port, greetings)
        for sock in strangers:  # evicted, refused or past the deadline: all closed
            assert await _closed(sock)
            sock.close()
        assert server.statistics().handshakes_failed == len(greetings)
        assert transports.built == 0
        client = ControlClient(
            PskIdentity(local_peer=1, keys={2: KEY}),
            "127.0.0.1",
            port,
            endpoint=None,
            hooks=_SenderHooks(),
        )
        await client.start()
        while [s.peer for s in hooks.opened] != [1]:
            await asyncio.sleep(0.005)
        assert transports.built == 1  # the honest peer's, once it proved its key
        await client.close()
        await server.close()

    run(scenario())


def test_strangers_at_a_data_listener_cost_no_transport(run: Run) -> None:
    async def scenario() -> None:
        transports = _Transports()
        server, rail, memory, segment = _data_pair()
        server.bind_timeout_s = 0.2
        _, port = await server.listen("127.0.0.1", 0)
        # silent, a bind answer of garbage, a well-formed bind with a wrong MAC
        forged = b"TDAT" + SENDER.to_bytes(8, "big") + b"\x00\x00" + os.urandom(32)
        strangers = await _strangers(port, [b"", b"\x01" * 46, forged])
        for sock in strangers:
            assert await _closed(sock)
            sock.close()
        assert server.statistics().binds_refused == 2
        assert transports.built == 0
        await _attach_and_write(rail, port, segment, memory)  # the honest bind and a write
        assert transports.built == 1
        rail.close()
        await server.close()

    run(scenario())
