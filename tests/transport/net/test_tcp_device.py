"""The TCP data device in one process: binding, admission before memory, integrity, READ."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time

import pytest
from net_helpers import run, until
from tent_transport.control import BIND, CHALLENGE_BYTES, data_bind_proof
from tent_transport.devices import Opcode, SliceRequest, SliceStatus, WriteLease
from tent_transport.devices.tcp import (
    ACK,
    Ack,
    AckStatus,
    Flags,
    Request,
    TcpDataServer,
    TcpRail,
    WireOpcode,
    checksum,
)
from tent_transport.errors import InvalidArgument
from tent_transport.segments import Access, SegmentTable

KEY = os.urandom(32)
SENDER, SESSION = 1, 5


class Plane:
    """A receiver's decisions, recorded."""

    def __init__(self, *, admit: str | None = None) -> None:
        self.admit_reason = admit
        self.quarantine: set[int] = set()
        self.landed_log: list[Request] = []
        self.aborted_log: list[tuple[Request, str]] = []
        self.refusals: list[str] = []
        self.admitted = 0

    def bound_session(self, peer: int) -> tuple[int, bytes] | None:
        return (SESSION, KEY) if peer == SENDER else None

    def quarantined(self, peer: int) -> bool:
        return peer in self.quarantine

    def admit(self, peer: int, session: int, request: Request) -> str | None:
        self.admitted += 1
        return self.admit_reason

    def refused(self, peer: int, session: int, request: Request | None, reason: str) -> None:
        self.refusals.append(reason)
        self.quarantine.add(peer)

    def landed(self, peer: int, session: int, request: Request) -> None:
        self.landed_log.append(request)

    def aborted(self, peer: int, session: int, request: Request, reason: str) -> None:
        self.aborted_log.append((request, reason))

    def integrity_failed(self, peer: int, session: int, request: Request) -> None:
        self.aborted(peer, session, request, "checksum mismatch")


async def _setup(
    plane: Plane, size: int = 1 << 16
) -> tuple[TcpDataServer, TcpRail, bytearray, int, int]:
    table = SegmentTable()
    memory = bytearray(size)
    segment = table.register(memory)
    table.expose(
        SENDER,
        SESSION,
        segment_id=segment.segment_id,
        offset=0,
        length=size // 2,
        access=Access.WRITE | Access.READ,
    )
    server = TcpDataServer(rail=0, segments=table, plane=plane)
    host, port = await server.listen("127.0.0.1", 0)
    rail = TcpRail("tcp0")
    await rail.attach(SENDER + 100, host, port, local_peer=SENDER, session=SESSION, data_key=KEY)
    return server, rail, memory, segment.segment_id, port


def _write(wr_id: int, data: bytes, segment: int, offset: int, lease: WriteLease | None = None):
    return SliceRequest(
        wr_id=wr_id,
        opcode=Opcode.WRITE,
        peer=SENDER + 100,
        local=memoryview(data),
        remote_segment=segment,
        remote_offset=offset,
        length=len(data),
        lease=lease,
        write_id=wr_id,
    )


async def _completions(rail: TcpRail, n: int) -> list:
    out: list = []

    def more() -> bool:
        out.extend(rail.poll(64, 0))
        return len(out) >= n

    await until(more, what=f"{n} completions")
    return out


def test_writes_land_in_place_and_complete_in_order() -> None:
    async def scenario() -> None:
        plane = Plane()
        server, rail, memory, seg, _ = await _setup(plane)
        blobs = [os.urandom(1000 + i) for i in range(5)]
        offsets = [i * 4096 for i in range(5)]
        lease = WriteLease(session=9, epoch=1, qos_class=0, charge=((1, 1000), (2, 1)))
        rail.post(
            [
                _write(i, b, seg, o, lease)
                for i, (b, o) in enumerate(zip(blobs, offsets, strict=True))
            ],
            0,
        )
        done = await _completions(rail, 5)
        assert [c.wr_id for c in done] == [0, 1, 2, 3, 4]
        assert all(c.status is SliceStatus.SUCCESS for c in done)
        for blob, offset in zip(blobs, offsets, strict=True):
            assert memory[offset : offset + len(blob)] == blob
        assert plane.admitted == 5  # every credited write was admitted first
        assert plane.landed_log[0].flags & Flags.CREDITED
        assert plane.landed_log[0].charge == (1000, 1, 0, 0)
        rail.close()
        await server.close()

    run(scenario())


def test_read_lands_in_the_local_buffer() -> None:
    async def scenario() -> None:
        server, rail, memory, seg, _ = await _setup(Plane())
        memory[100:200] = os.urandom(100)
        local = bytearray(100)
        rail.post(
            [
                SliceRequest(
                    wr_id=7,
                    opcode=Opcode.READ,
                    peer=SENDER + 100,
                    local=memoryview(local),
                    remote_segment=seg,
                    remote_offset=100,
                    length=100,
                )
            ],
            0,
        )
        (done,) = await _completions(rail, 1)
        assert done.status is SliceStatus.SUCCESS
        assert local == memory[100:200]
        rail.close()
        await server.close()

    run(scenario())


@pytest.mark.parametrize(
    ("offset", "admit", "status"),
    [
        (1 << 15, None, SliceStatus.REMOTE_ACCESS_ERROR),  # beyond the exposed half
        (0, "over credit", SliceStatus.WRITE_REFUSED),  # inside the region, over the lease
    ],
    ids=["outside-region", "over-credit"],
)
def test_lying_write_is_refused_before_memory_and_quarantined(
    offset: int, admit: str | None, status: SliceStatus
) -> None:
    async def scenario() -> None:
        plane = Plane(admit=admit)
        server, rail, memory, seg, _ = await _setup(plane)
        before = bytes(memory)
        rail.post([_write(1, b"\xff" * 512, seg, offset), _write(2, b"\xee" * 8, seg, 0)], 0)
        done = await _completions(rail, 2)
        assert done[0].status is status
        assert done[1].status is SliceStatus.FLUSHED  # the connection was closed behind it
        assert bytes(memory) == before  # not one byte touched
        assert plane.quarantine == {SENDER}
        assert plane.landed_log == []
        # quarantined: a new data connection of the sender is refused at the bind
        with pytest.raises(Exception):  # noqa: B017 - closed during or right after the bind
            await rail.attach(
                SENDER + 100,
                "127.0.0.1",
                server.address[1],
                local_peer=SENDER,
                session=SESSION,
                data_key=KEY,
            )
            rail.post([_write(3, b"x", seg, 0)], 0)
            (late,) = await _completions(rail, 1)
            raise ConnectionError(late.status)
        assert bytes(memory) == before
        rail.close()
        await server.close()

    run(scenario())


def _raw_connect(port: int, receive_buffer: int = 0) -> tuple[socket.socket, bytes]:
    sock = socket.socket()
    sock.settimeout(5)
    if receive_buffer:  # before connecting: the window is negotiated at the handshake
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.connect(("127.0.0.1", port))
    challenge = b""
    while len(challenge) < CHALLENGE_BYTES:
        challenge += sock.recv(CHALLENGE_BYTES - len(challenge))
    return sock, challenge


def _recv_upto(sock: socket.socket, n: int) -> bytes:
    """Up to ``n`` bytes, fewer if the peer closes (a reset counts as a close)."""
    out = b""
    try:
        while len(out) < n and (chunk := sock.recv(n - len(out))):
            out += chunk
    except ConnectionResetError:
        pass
    sock.close()
    return out


def _raw_write(request: int, seg: int, offset: int, payload: bytes) -> tuple[bytes, bytes]:
    header = Request(
        opcode=WireOpcode.WRITE,
        flags=Flags.NONE,
        qos_class=0,
        write_id=request,
        request=request,
        segment=seg,
        offset=offset,
        length=len(payload),
        session=SESSION,
        lease_session=0,
        epoch=0,
        checksum=checksum(payload),
        charge=(0, 0, 0, 0),
    ).pack()
    return header, payload


def test_unbound_data_connection_is_closed_before_any_header_is_read() -> None:
    async def scenario() -> None:
        plane = Plane()
        server, rail, memory, seg, port = await _setup(plane)
        before = bytes(memory)
        header, payload = _raw_write(1, seg, 0, b"\xaa" * 64)

        def attack(proof_key: bytes) -> bytes:
            sock, challenge = _raw_connect(port)
            bind = data_bind_proof(proof_key, challenge, SENDER, 0)
            sock.sendall(bind + header + payload)
            return _recv_upto(sock, ACK.size)

        # a valid header sent without a valid bind (wrong key): closed, no ack, nothing written
        answer = await asyncio.to_thread(attack, os.urandom(32))
        assert answer == b""
        assert bytes(memory) == before
        assert server.statistics().binds_refused == 1
        # the same bytes with the session's key land (the test can tell the difference)
        answer = await asyncio.to_thread(attack, KEY)
        assert Ack.unpack(answer[: ACK.size]).status is AckStatus.OK  # type: ignore[union-attr]
        assert memory[:64] == payload
        assert BIND.size == len(data_bind_proof(KEY, b"c" * 32, 1, 0))
        rail.close()
        await server.close()

    run(scenario())


def test_a_peer_that_never_reads_its_answers_cannot_fill_the_receiver() -> None:
    """READ answers carry up to max_write_bytes each; a bound peer that sends READ headers and
    never reads must be throttled (its requests stop being read), not buffered without end."""
    requests, length = 1024, 1 << 15  # 32 MiB of answers asked for

    async def scenario() -> None:
        server, rail, memory, seg, port = await _setup(Plane())
        memory[: 1 << 15] = os.urandom(1 << 15)
        headers = b"".join(
            Request(
                opcode=WireOpcode.READ,
                flags=Flags.NONE,
                qos_class=0,
                write_id=0,
                request=i,
                segment=seg,
                offset=0,
                length=length,
                session=SESSION,
                lease_session=0,
                epoch=0,
                checksum=0,
                charge=(0, 0, 0, 0),
            ).pack()
            for i in range(requests)
        )
        await until(lambda: server.connections(SENDER, SESSION) == 1, what="the rail's bind")
        honest = set(server._sessions[(SENDER, SESSION)])  # the rail's own connection
        sock, challenge = await asyncio.to_thread(_raw_connect, port, 1 << 16)
        sock.sendall(data_bind_proof(KEY, challenge, SENDER, 0))
        sock.setblocking(False)
        await until(lambda: server.connections(SENDER, SESSION) == 2, what="the attack's bind")
        (protocol,) = server._sessions[(SENDER, SESSION)] - honest
        sent = 0

        def pushed_or_throttled() -> bool:
            # send what the kernel takes, without ever reading an answer
            nonlocal sent
            with contextlib.suppress(BlockingIOError):
                while sent < len(headers):
                    sent += sock.send(headers[sent:])
            paused = getattr(protocol, "reading_paused", False)
            return paused or server.statistics().reads_served == requests

        await until(pushed_or_throttled, what="every READ served or the peer throttled")
        assert protocol._transport is not None
        buffered = protocol._transport.get_write_buffer_size()
        served = server.statistics().reads_served
        # at most one answer past asyncio's high-water mark (64 KiB), not the 32 MiB asked for
        assert buffered <= (1 << 16) + length + ACK.size, (buffered, served)
        assert served < requests

        # once the peer reads, it gets every answer, whole and in order
        answers = 0

        def drain() -> None:
            nonlocal answers
            while answers < requests:
                ack = Ack.unpack(_recv_exact(sock, ACK.size))
                assert ack is not None and ack.status is AckStatus.OK
                assert ack.request == answers and ack.length == length
                assert _recv_exact(sock, length) == memory[:length]
                answers += 1

        sock.settimeout(20)
        # the rest of the headers go out while the answers are read (a peer that reads)
        await asyncio.gather(
            asyncio.to_thread(sock.sendall, headers[sent:]), asyncio.to_thread(drain)
        )
        assert server.statistics().reads_served == requests
        sock.close()
        rail.close()
        await server.close()

    run(scenario(), timeout=60)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return bytes(out)


def test_unbound_connections_are_bounded_and_a_newcomer_evicts_the_oldest() -> None:
    async def scenario() -> None:
        plane = Plane()
        table = SegmentTable()
        memory = bytearray(4096)
        segment = table.register(memory)
        table.expose(
            SENDER,
            SESSION,
            segment_id=segment.segment_id,
            offset=0,
            length=4096,
            access=Access.WRITE,
        )
        server = TcpDataServer(rail=0, segments=table, plane=plane, max_unbound=2)
        _, port = await server.listen("127.0.0.1", 0)
        idle = [await asyncio.to_thread(_raw_connect, port) for _ in range(2)]  # never bind
        await until(lambda: server.unbound == 2, what="two unbound connections")
        # the door is full: an honest sender's bind gets in, the oldest idle one goes
        rail = TcpRail("tcp0")
        await rail.attach(
            SENDER + 100, "127.0.0.1", port, local_peer=SENDER, session=SESSION, data_key=KEY
        )
        assert await asyncio.to_thread(_recv_upto, idle[0][0], 1) == b""  # evicted, unread
        assert server.statistics().binds_evicted == 1
        assert server.statistics().binds_refused == 0
        rail.post([_write(1, b"ok", segment.segment_id, 0)], 0)
        (done,) = await _completions(rail, 1)
        assert done.status is SliceStatus.SUCCESS and memory[:2] == b"ok"
        assert server.unbound == 1  # the younger idle one still waits, within its deadline
        idle[1][0].close()
        await until(lambda: server.unbound == 0, what="the idle connection to go")
        rail.close()
        await server.close()

    run(scenario())


def test_a_session_cannot_bind_more_than_its_share_of_data_connections() -> None:
    async def scenario() -> None:
        plane = Plane()
        table = SegmentTable()
        server = TcpDataServer(rail=0, segments=table, plane=plane, max_session_connections=2)
        _, port = await server.listen("127.0.0.1", 0)

        def bind() -> socket.socket:
            sock, challenge = _raw_connect(port)
            sock.sendall(data_bind_proof(KEY, challenge, SENDER, 0))
            return sock

        held = [await asyncio.to_thread(bind) for _ in range(2)]
        await until(lambda: server.connections(SENDER, SESSION) == 2, what="two binds")
        extra = await asyncio.to_thread(bind)  # a valid proof, one connection too many
        assert await asyncio.to_thread(_recv_upto, extra, 1) == b""  # closed
        assert server.statistics().binds_refused == 1
        assert server.connections(SENDER, SESSION) == 2
        held[0].close()
        await until(lambda: server.connections(SENDER, SESSION) == 1, what="one to go")
        again = await asyncio.to_thread(bind)  # room again
        await until(lambda: server.connections(SENDER, SESSION) == 2, what="the new bind")
        for sock in (*held, again):
            sock.close()
        await server.close()

    run(scenario())


def test_checksum_mismatch_fails_the_write() -> None:
    async def scenario() -> None:
        plane = Plane()
        server, rail, _memory, seg, port = await _setup(plane)
        payload = b"\x01" * 128

        def send() -> bytes:
            sock, challenge = _raw_connect(port)
            sock.sendall(data_bind_proof(KEY, challenge, SENDER, 0))
            sock.sendall(
                Request(
                    opcode=WireOpcode.WRITE,
                    flags=Flags.NONE,
                    qos_class=0,
                    write_id=1,
                    request=9,
                    segment=seg,
                    offset=0,
                    length=128,
                    session=SESSION,
                    lease_session=0,
                    epoch=0,
                    checksum=checksum(payload) ^ 1,
                    charge=(0, 0, 0, 0),
                ).pack()
                + payload
            )
            data = b""
            while len(data) < ACK.size:
                data += sock.recv(ACK.size - len(data))
            sock.close()
            return data

        ack = Ack.unpack(await asyncio.to_thread(send))
        assert ack is not None and ack.status is AckStatus.INTEGRITY and ack.request == 9
        assert plane.landed_log == [] and plane.aborted_log[0][1] == "checksum mismatch"
        rail.close()
        await server.close()

    run(scenario())


def test_retire_closes_the_sessions_connections_and_flushes_the_sender() -> None:
    async def scenario() -> None:
        server, rail, _memory, _seg, _ = await _setup(Plane())
        assert server.connections(SENDER, SESSION) == 1 or await _bound(server)
        await server.retire(SENDER, SESSION)
        assert server.connections(SENDER, SESSION) == 0
        await until(lambda: not rail.ready(SENDER + 100), what="sender sees the close")
        assert rail.post_budget(SENDER + 100) == 0
        rail.close()
        await server.close()

    run(scenario())


def test_a_retirement_canceled_midway_leaves_its_connections_to_close_and_close_clean() -> None:
    """A retirement awaiting its connections' close is canceled (the control service cancels
    its tasks when it closes): the connections must still be forgotten when they close, and
    closing the server must not raise the cancellation (found by the abuse benchmark: an
    engine closed while a liar's superseded session was retiring raised CancelledError)."""

    async def scenario() -> None:
        server, rail, _memory, _seg, _ = await _setup(Plane())
        await _bound(server)
        retiring = asyncio.ensure_future(server.retire(SENDER, SESSION))
        await asyncio.sleep(0)  # it closed the connection and awaits its close
        retiring.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await retiring
        await until(lambda: server.connections(SENDER, SESSION) == 0, what="the forget")
        rail.close()
        await server.close()  # raised CancelledError

    run(scenario())


async def _bound(server: TcpDataServer) -> bool:
    await until(lambda: server.connections(SENDER, SESSION) == 1, what="bind")
    return True


def test_data_connection_send_buffer_holds_a_slice() -> None:
    # The engine sizes SO_SNDBUF to one dispatch slice so that asyncio's transport buffer
    # (which copies and memmoves) is rarely used; the kernel reports twice the value it keeps.
    async def scenario() -> None:
        server, rail, _memory, _seg, _ = await _setup(Plane())
        transport = rail._peers[SENDER + 100]._transport  # the connection under test
        assert transport is not None
        sock = transport.get_extra_info("socket")
        with open("/proc/sys/net/core/wmem_max") as f:
            cap = int(f.read())
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) >= min(4 << 20, cap)
        rail.close()
        await server.close()

    run(scenario())


def test_a_negative_send_buffer_is_refused() -> None:
    with pytest.raises(InvalidArgument):
        TcpRail("tcp0", send_buffer_bytes=-1)


def _ack_of(sock: socket.socket) -> Ack | None:
    data = b""
    while len(data) < ACK.size:  # the socket's 5 s timeout bounds a receiver that never answers
        data += sock.recv(ACK.size - len(data))
    return Ack.unpack(data)


def test_a_payload_read_with_a_low_water_mark_lands_when_it_trickles_in() -> None:
    """A large payload is read with SO_RCVLOWAT (``READ_MARK``); the mark follows what is left,
    so a payload that arrives piece by piece still wakes the receiver for its tail, and goes back
    to 1 after it, so a small write that follows, alone on the wire, is read too."""
    from tent_transport.devices.tcp._mark import READ_MARK

    async def scenario() -> None:
        plane = Plane()
        size = 8 << 20
        server, rail, memory, seg, port = await _setup(plane, size)
        large = os.urandom(READ_MARK + READ_MARK // 2)  # a tail below the mark
        small = os.urandom(128)

        def send() -> list[Ack | None]:
            sock, challenge = _raw_connect(port)
            sock.sendall(data_bind_proof(KEY, challenge, SENDER, 0))
            header, payload = _raw_write(1, seg, 0, large)
            sock.sendall(header)
            piece = 64 << 10
            for start in range(0, len(payload), piece):  # bounded: 24 pieces, 1 ms apart
                sock.sendall(payload[start : start + piece])
                time.sleep(0.001)
            acks = [_ack_of(sock)]
            header, payload = _raw_write(2, seg, len(large), small)
            sock.sendall(header + payload)  # alone on the wire, far below the mark
            acks.append(_ack_of(sock))
            sock.close()
            return acks

        acks = await asyncio.to_thread(send)
        assert [(a.status, a.request) for a in acks if a is not None] == [
            (AckStatus.OK, 1),
            (AckStatus.OK, 2),
        ]
        assert bytes(memory[: len(large)]) == large
        assert bytes(memory[len(large) : len(large) + len(small)]) == small
        assert [r.request for r in plane.landed_log] == [1, 2]
        rail.close()
        await server.close()

    run(scenario())


def test_a_large_read_answer_is_read_with_the_mark_and_the_acks_after_it_too() -> None:
    """The sender reads a READ answer's payload with the same mark (``_mark.ReadMark``), and
    returns it to 1 after the payload: the small write after it is acknowledged."""
    from tent_transport.devices.tcp._mark import READ_MARK

    async def scenario() -> None:
        server, rail, memory, seg, _ = await _setup(Plane(), 8 << 20)
        size = READ_MARK + READ_MARK // 2
        memory[:size] = os.urandom(size)
        local = bytearray(size)
        read = SliceRequest(
            wr_id=7,
            opcode=Opcode.READ,
            peer=SENDER + 100,
            local=memoryview(local),
            remote_segment=seg,
            remote_offset=0,
            length=size,
        )
        rail.post([read], 0)
        (done,) = await _completions(rail, 1)
        assert done.status is SliceStatus.SUCCESS and local == memory[:size]
        small = os.urandom(64)
        rail.post([_write(8, small, seg, size)], 0)  # its ack alone, far below the mark
        (done,) = await _completions(rail, 1)
        assert done.status is SliceStatus.SUCCESS and memory[size : size + 64] == small
        rail.close()
        await server.close()

    run(scenario())
