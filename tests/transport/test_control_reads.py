"""Reading a control connection (``control/_reads.py``): frames are handled in the callback that
read them, whole batches at a time with a turn of the loop between, starting with what the
stream buffered behind the handshake; the peer's end closes the connection after its frames."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable

import pytest
import trustme
import uvloop
from tent_transport.control import AuthenticatedPeer, ControlConnection, FrameKind, encode_frame
from tent_transport.control._rate import ControlRate
from tent_transport.control._reads import READ_BATCH

PEER = AuthenticatedPeer(peer=1, data_key=b"k" * 32)


def _frames(n: int) -> bytes:
    return b"".join(encode_frame(FrameKind.CREDIT, bytes([i % 256])) for i in range(n))


async def _connection(
    on_frame: Callable[[FrameKind, bytes], None],
    buffered: bytes = b"",
    *,
    eof: bool = False,
    rate: ControlRate | None = None,
) -> tuple[ControlConnection, socket.socket, list[str]]:
    """A connection over a socket pair whose stream already holds ``buffered`` (as if the peer
    had sent it right behind its handshake), then its end of stream with ``eof``."""
    ours, theirs = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=ours)
    if buffered:
        reader.feed_data(buffered)
    if eof:
        reader.feed_eof()
    connection, closed = _started(reader, writer, on_frame, rate)
    return connection, theirs, closed


def _started(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    on_frame: Callable[[FrameKind, bytes], None],
    rate: ControlRate | None,
) -> tuple[ControlConnection, list[str]]:
    """A started connection over ``reader``/``writer`` and the reasons it closed with."""
    closed: list[str] = []
    connection = ControlConnection(
        reader,
        writer,
        PEER,
        on_frame=on_frame,
        on_closed=lambda: closed.append(connection.close_reason),
        rate=rate,
    )
    connection.start()
    return connection, closed


async def _until(predicate: Callable[[], bool]) -> None:
    for _ in range(10_000):  # bounded: loop turns, not time
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("never happened")


def _run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 10))  # type: ignore[arg-type]


def test_the_reads_yield_between_batches_of_buffered_frames() -> None:
    # One peer's backlog, already buffered: without a turn of the loop between batches all of
    # it is handled before any other task runs (the receiver starved behind one chatty sender).
    frames = 5 * READ_BATCH
    seen: list[int] = []  # how many were handled whenever the other task ran

    async def scenario() -> None:
        handled: list[bytes] = []
        connection, theirs, _ = await _connection(
            lambda kind, payload: handled.append(payload), _frames(frames)
        )

        async def other() -> None:
            while len(handled) < frames:
                seen.append(len(handled))
                await asyncio.sleep(0)

        await other()
        assert handled == [bytes([i]) for i in range(frames)]  # all of them, in order
        connection.close()
        theirs.close()

    _run(scenario)
    between = [n for n in seen if 0 < n < frames]
    assert between, "no other task ran while the backlog was handled"
    assert all(n % READ_BATCH == 0 for n in between)  # it yields after whole batches


def test_a_frame_is_handled_in_the_callback_that_read_it_not_in_a_task() -> None:
    # A reader task would handle a frame one loop iteration after the transport read it, behind
    # whatever data work that iteration ran: here no task is current while a frame is handled.
    async def scenario() -> None:
        tasks: list[asyncio.Task[object] | None] = []
        connection, theirs, _ = await _connection(
            lambda kind, payload: tasks.append(asyncio.current_task())
        )
        theirs.sendall(_frames(3))
        await _until(lambda: len(tasks) == 3)
        assert tasks == [None, None, None]
        connection.close()
        theirs.close()

    _run(scenario)


def test_the_peers_end_closes_the_connection_after_the_frames_it_sent_before() -> None:
    async def scenario() -> None:
        handled: list[bytes] = []
        _, theirs, closed = await _connection(
            lambda kind, payload: handled.append(payload), _frames(2 * READ_BATCH + 3), eof=True
        )
        await _until(lambda: bool(closed))
        assert len(handled) == 2 * READ_BATCH + 3
        assert closed == ["closed by the peer"]
        theirs.close()

        handled.clear()
        _, theirs, closed = await _connection(lambda kind, payload: handled.append(payload))
        theirs.sendall(_frames(4))
        theirs.shutdown(socket.SHUT_WR)
        await _until(lambda: bool(closed))
        assert len(handled) == 4 and closed == ["closed by the peer"]
        theirs.close()

    _run(scenario)


def test_writes_still_flow_and_drain_after_the_reads_took_the_socket_over() -> None:
    # the stream's protocol keeps the writer's flow control: a published frame reaches the
    # peer, and drain() returns once the peer reads (it would wait for good if the pause and
    # resume of writing went nowhere)
    async def scenario() -> None:
        connection, theirs, _ = await _connection(lambda kind, payload: None)
        payload = b"\x80" * 1000
        for _ in range(300):  # more than the socket takes at once
            assert connection.publish(FrameKind.CREDIT, payload)
        theirs.setblocking(False)
        want = 300 * len(encode_frame(FrameKind.CREDIT, payload))
        got = 0
        for _ in range(100_000):
            try:
                got += len(theirs.recv(1 << 16))
            except BlockingIOError:
                await asyncio.sleep(0)
            if got >= want:
                break
        assert got == want
        assert connection.statistics().queued == 0
        connection.close()
        theirs.close()

    _run(scenario)


async def _tls_connection(
    on_frame: Callable[[FrameKind, bytes], None], rate: ControlRate
) -> tuple[ControlConnection, asyncio.StreamWriter, list[str]]:
    """The same over TLS: the connection is the server's end of a TLS stream (its transport is
    asyncio's SSL transport, whose pause stops what it hands up, not the socket)."""
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("receiver.tent").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]]
    accepted = asyncio.get_running_loop().create_future()

    async def on_connect(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        accepted.set_result((r, w))

    listener = await asyncio.start_server(on_connect, "127.0.0.1", 0, ssl=server_ctx)
    port = listener.sockets[0].getsockname()[1]
    _, peer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client_ctx, server_hostname="receiver.tent"
    )
    reader, writer = await accepted
    listener.close()
    connection, closed = _started(reader, writer, on_frame, rate)
    return connection, peer, closed


@pytest.mark.parametrize("where", ["asyncio", "uvloop", "tls"])
def test_a_peer_over_its_rate_is_paused_unread_and_loses_nothing(where: str) -> None:
    # the rate's hold pauses the transport's reading (its frames wait in the kernel, or in the
    # SSL layer's bounded buffer) and resumes it: every frame is handled, in order, on
    # asyncio's loop, on uvloop's and over TLS
    frames = 12 * READ_BATCH
    rate = ControlRate(rate_hz=4_000.0, burst=READ_BATCH)

    async def scenario() -> None:
        handled: list[bytes] = []

        def on_frame(kind: FrameKind, payload: bytes) -> None:
            handled.append(payload)

        if where == "tls":
            connection, peer, closed = await _tls_connection(on_frame, rate)
            peer.write(_frames(frames))
            await peer.drain()
        else:
            connection, theirs, closed = await _connection(on_frame, rate=rate)
            theirs.sendall(_frames(frames))
        for _ in range(1_000):  # bounded: the holds add up to about 40 ms
            if len(handled) == frames:
                break
            await asyncio.sleep(0.01)
        assert handled == [bytes([i % 256]) for i in range(frames)]
        assert rate.throttled > 0 and not closed  # held back, not closed
        connection.close()
        if where == "tls":
            peer.close()
        else:
            theirs.close()

    if where == "uvloop":
        uvloop.run(asyncio.wait_for(scenario(), 10))
    else:
        _run(scenario)
