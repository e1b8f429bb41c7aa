"""The zero-copy plaintext transport of the sender's data connections (devices/tcp/_raw.py),
on real loopback TCP sockets, on asyncio's loop and on uvloop."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from raw_helpers import Recorder, read_in_thread, run, tcp_pair
from tent_transport.devices.tcp._raw import RawSocketTransport, open_raw_connection

__all__ = ["run"]  # the fixture (raw_helpers)


def test_a_partial_write_keeps_a_view_of_the_callers_buffer_not_a_copy(run: Any) -> None:
    async def scenario() -> None:
        # a small send buffer and a peer not reading yet: the kernel takes only a part
        client, peer = tcp_pair(sndbuf=4096)
        protocol = Recorder()
        transport = RawSocketTransport(asyncio.get_running_loop(), client, protocol)
        payload = bytearray(b"a" * (1 << 20))
        transport.write(payload)
        pending = transport.get_write_buffer_size()
        assert 0 < pending < len(payload)
        # bytes not yet sent are read from the caller's buffer when the socket takes them
        payload[-16:] = b"Z" * 16
        received = await read_in_thread(peer, len(payload))
        assert received[-16:] == b"Z" * 16
        assert received[:-16] == b"a" * (len(payload) - 16)
        assert transport.get_write_buffer_size() == 0
        transport.close()
        assert await protocol.lost is None
        peer.close()

    run(scenario())


def test_writes_arrive_whole_and_in_order_across_partial_sends(run: Any) -> None:
    async def scenario() -> None:
        client, peer = tcp_pair(sndbuf=8192)
        protocol = Recorder()
        transport = RawSocketTransport(asyncio.get_running_loop(), client, protocol)
        parts = [bytes([i]) * (1000 + 3011 * i) for i in range(24)]
        for part in parts:
            transport.write(memoryview(part))
        transport.write(b"")  # nothing to send: no effect
        expected = b"".join(parts)
        assert await read_in_thread(peer, len(expected)) == expected
        transport.close()
        await protocol.lost
        peer.close()

    run(scenario())


def test_received_bytes_land_in_the_protocols_buffer_and_eof_ends_the_connection_once(
    run: Any,
) -> None:
    async def scenario() -> None:
        client, peer = tcp_pair()
        protocol = Recorder()
        transport = RawSocketTransport(asyncio.get_running_loop(), client, protocol)
        assert transport.get_extra_info("socket") is client
        assert transport.get_extra_info("peername") == peer.getsockname()
        peer.sendall(b"acknowledged" * 1000)
        peer.shutdown(socket.SHUT_WR)
        assert await asyncio.wait_for(protocol.lost, 10) is None
        assert bytes(protocol.received) == b"acknowledged" * 1000
        assert protocol.events == ["made", "eof", "lost"]
        assert transport.is_closing()
        assert client.fileno() == -1  # the socket is closed with the connection
        peer.close()

    run(scenario())


def test_close_drops_unsent_bytes_ends_once_and_later_writes_are_ignored(run: Any) -> None:
    async def scenario() -> None:
        client, peer = tcp_pair(sndbuf=4096)
        protocol = Recorder()
        transport = RawSocketTransport(asyncio.get_running_loop(), client, protocol)
        transport.write(bytes(4 << 20))
        assert transport.get_write_buffer_size() > 0
        transport.close()
        transport.close()
        transport.abort()
        transport.write(b"after close")
        assert transport.get_write_buffer_size() == 0
        assert await protocol.lost is None
        await asyncio.sleep(0)
        assert protocol.events == ["made", "lost"]
        peer.close()

    run(scenario())


def test_a_reset_by_the_peer_reaches_the_protocol_as_the_error(run: Any) -> None:
    async def scenario() -> None:
        client, peer = tcp_pair()
        protocol = Recorder()
        transport = RawSocketTransport(asyncio.get_running_loop(), client, protocol)
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        peer.close()  # linger 0: an RST, not a FIN
        exc = await asyncio.wait_for(protocol.lost, 10)
        if exc is None:  # the reset raced a read of EOF: the peer was still seen to go
            assert "eof" in protocol.events
        else:
            assert isinstance(exc, ConnectionResetError)
        transport.write(b"x" * 65536)  # a write to the dead connection is dropped, not raised
        assert transport.is_closing() and transport.get_write_buffer_size() == 0

    run(scenario())


def test_a_protocol_that_raises_on_data_closes_its_connection_with_that_error(run: Any) -> None:
    async def scenario() -> None:
        client, peer = tcp_pair()
        protocol = Recorder(fail_on_data=True)
        RawSocketTransport(asyncio.get_running_loop(), client, protocol)
        peer.sendall(b"unexpected")
        exc = await asyncio.wait_for(protocol.lost, 10)
        assert isinstance(exc, ValueError)
        peer.close()

    run(scenario())


def test_open_raw_connection_connects_or_raises_oserror(run: Any) -> None:
    async def scenario() -> None:
        with socket.create_server(("127.0.0.1", 0)) as server:
            host, port = server.getsockname()
            transport, protocol = await open_raw_connection(Recorder, host, port)
            peer, _ = server.accept()
            transport.write(b"hello")
            assert await read_in_thread(peer, 5) == b"hello"
            transport.close()
            await protocol.lost
            peer.close()
        with socket.socket() as unused:  # a port with no listener: refused
            unused.bind(("127.0.0.1", 0))
            free_port = unused.getsockname()[1]
        with pytest.raises(ConnectionRefusedError):
            await open_raw_connection(Recorder, "127.0.0.1", free_port)

    run(scenario())


def test_a_protocol_failing_in_connection_made_leaves_no_open_socket(run: Any) -> None:
    class Refuses(Recorder):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            raise RuntimeError("not today")

    async def scenario() -> None:
        client, peer = tcp_pair()
        with pytest.raises(RuntimeError, match="not today"):
            RawSocketTransport(asyncio.get_running_loop(), client, Refuses())
        assert client.fileno() == -1
        peer.close()

    run(scenario())
