"""Issue 27 item 5: what an authenticated peer tries next. A frame or a data header begun must
be whole within its deadline (slowloris after the handshake), and a sender whose payloads keep
failing their CRC32C is quarantined after a bound."""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
import time

import pytest
from attackers import RawControl, RawData
from net_helpers import connect_exposed, data_server, run, until
from procs import KEY, credit_config
from tent_transport.config import load_engine_config
from tent_transport.control import (
    AuthenticatedPeer,
    ControlConnection,
    ControlServer,
    FrameKind,
    PskIdentity,
    encode_frame,
)
from tent_transport.control._connection import _READ_CHUNK
from tent_transport.devices import Opcode
from tent_transport.devices.tcp import (
    REQUEST,
    Ack,
    AckStatus,
    Flags,
    Request,
    TcpDataServer,
    WireOpcode,
    checksum,
)
from tent_transport.dispatch import TransferRequest
from tent_transport.engine import EngineOptions, SyncEngine
from tent_transport.engine._receiving import INTEGRITY_FAILURES
from tent_transport.segments import Access, SegmentTable
from test_control import _Hooks
from test_doors import DATA_KEY, SENDER, SESSION, _Plane

from tent_sched import TaskStatus

DEADLINE_S = 0.3


async def _connection_pair(
    partial_frame_s: float,
) -> tuple[ControlConnection, asyncio.StreamWriter, list[str], list[bytes]]:
    accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]]
    accepted = asyncio.get_running_loop().create_future()

    async def on_connect(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        accepted.set_result((r, w))

    listener = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    _, peer_writer = await asyncio.open_connection("127.0.0.1", port)
    reader, writer = await accepted
    listener.close()
    closed: list[str] = []
    frames: list[bytes] = []
    connection = ControlConnection(
        reader,
        writer,
        AuthenticatedPeer(peer=1, data_key=b"k" * 32),
        on_frame=lambda kind, payload: frames.append(payload),
        on_closed=lambda: closed.append(connection.close_reason),
        partial_frame_s=partial_frame_s,
    )
    connection.start()
    return connection, peer_writer, closed, frames


def test_a_control_socket_is_read_64_kib_at_a_time_and_frames_cross_the_reads_whole() -> None:
    # asyncio's selector transport asks recv() for 256 KiB by default, which costs about 12 us
    # more per read than 64 KiB (_bound_reads); frames that straddle two reads still arrive whole
    async def scenario() -> None:
        connection, peer, closed, frames = await _connection_pair(DEADLINE_S)
        transport = connection._writer.transport
        assert type(transport).max_size > _READ_CHUNK  # type: ignore[attr-defined]
        assert transport.max_size == _READ_CHUNK  # type: ignore[attr-defined]
        sent = [bytes([i]) * 1000 for i in range(200)]  # 200 KB: several reads
        peer.write(b"".join(encode_frame(FrameKind.CREDIT, p) for p in sent))
        await until(lambda: len(frames) == len(sent), what="every frame")
        assert frames == sent
        assert not closed
        peer.close()

    run(scenario())


def test_a_control_frame_begun_must_be_whole_within_its_deadline() -> None:
    async def scenario() -> None:
        _, peer, closed, frames = await _connection_pair(DEADLINE_S)
        frame = encode_frame(FrameKind.CREDIT, b"\x80" * 40)
        peer.write(frame)  # a whole frame, then the start of the next one, then nothing
        peer.write(frame[:7])
        await until(lambda: bool(closed), what="the stalled connection to close")
        assert frames == [b"\x80" * 40]
        assert closed == [f"a frame begun was not whole in {DEADLINE_S} s"]
        peer.close()

    run(scenario())


def test_a_frame_in_pieces_within_its_deadline_and_idle_time_between_frames_are_fine() -> None:
    async def scenario() -> None:
        _, peer, closed, frames = await _connection_pair(DEADLINE_S)
        frame = encode_frame(FrameKind.CREDIT, b"\x81" * 40)
        for _ in range(3):  # bounded
            peer.write(frame[:5])
            await asyncio.sleep(DEADLINE_S / 4)
            peer.write(frame[5:])
            await until(lambda: len(frames) >= 1, what="the frame")
            await asyncio.sleep(2 * DEADLINE_S)  # idle between frames: no deadline
        await until(lambda: len(frames) == 3, what="three frames")
        assert closed == []
        peer.close()

    run(scenario())


def test_an_authenticated_peer_that_stalls_mid_frame_loses_its_session() -> None:
    """End to end with the listener: a raw PSK client authenticates, then stalls mid-frame."""

    async def scenario() -> None:
        hooks = _Hooks()
        server = ControlServer(
            PskIdentity(local_peer=2, keys={1: KEY}),
            credit=None,
            rails=lambda: [("127.0.0.1", 9)],
            hooks=hooks,
            handshake_timeout_s=DEADLINE_S,
        )
        _, port = await server.listen("127.0.0.1", 0)

        def attack() -> bool:
            raw = RawControl(port, claim=1)
            raw.hello()
            raw.prove(KEY)
            raw.sock.sendall(struct.pack("!IB", 41, int(FrameKind.CREDIT)) + b"\x80" * 3)
            closed = raw.closed_by_peer(timeout_s=10)
            raw.close()
            return closed

        assert await asyncio.to_thread(attack)
        assert [s.peer for s in hooks.opened] == [1]  # it did authenticate
        await until(lambda: server.session_of(1) is None, what="the session to end")
        await server.close()

    run(scenario())


def _header(segment: int) -> bytes:
    return Request(
        opcode=WireOpcode.WRITE,
        flags=Flags.NONE,
        qos_class=0,
        write_id=1,
        request=1,
        segment=segment,
        offset=0,
        length=4,
        session=SESSION,
        lease_session=0,
        epoch=0,
        checksum=checksum(bytes(4)),
        charge=(0, 0, 0, 0),
    ).pack()


@pytest.mark.parametrize("stall", [True, False], ids=["stalls-mid-header", "slow-but-whole"])
def test_a_data_header_begun_must_be_whole_within_the_deadline(stall: bool) -> None:
    async def scenario() -> None:
        table = SegmentTable()
        memory = bytearray(64)
        segment = table.register(memory)
        table.expose(
            SENDER, SESSION, segment_id=segment.segment_id, offset=0, length=64, access=Access.WRITE
        )
        plane = _Plane()
        server = TcpDataServer(rail=0, segments=table, plane=plane, bind_timeout_s=DEADLINE_S)
        _, port = await server.listen("127.0.0.1", 0)
        header = _header(segment.segment_id)

        def attack() -> Ack | str:
            raw = RawData(port, timeout_s=10)
            raw.bind(DATA_KEY, SENDER)
            raw.sock.sendall(header[:10])
            time.sleep(2 * DEADLINE_S if stall else DEADLINE_S / 4)
            with contextlib.suppress(OSError):  # closed by the deadline: the answer says so
                raw.sock.sendall(header[10:] + b"\x00" * 4)  # the rest, and a 4-byte payload
            answer = raw.answer(10)
            raw.close()
            return answer

        answer = await asyncio.to_thread(attack)
        if stall:
            assert answer == "closed" and memory[:4] == bytes(4)  # closed, nothing landed
            assert plane.landed_count == 0
        else:
            assert isinstance(answer, Ack) and answer.status is AckStatus.OK, answer
            assert plane.landed_count == 1
        assert REQUEST.size == len(header)
        await server.close()

    run(scenario())


def test_an_engine_quarantines_a_sender_whose_payloads_keep_failing_their_crc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """End to end: a sender whose CRC32C never matches its payload costs the receiver
    ``INTEGRITY_FAILURES`` payload reads, then it is quarantined; each write fails typed."""
    import tent_transport.devices._writes as sender_module  # where a header takes its CRC

    block = 16 << 10
    config = load_engine_config(credit_config("required", slots=4, block=block, batch=1))
    rx = SyncEngine(
        config, EngineOptions(peer_id=2, identity=PskIdentity(local_peer=2, keys={1: KEY}))
    )
    tx = SyncEngine(
        config, EngineOptions(peer_id=1, identity=PskIdentity(local_peer=1, keys={2: KEY}))
    )
    try:
        peer, _memory, segment = connect_exposed(rx, tx, block)
        monkeypatch.setattr(sender_module, "checksum", lambda data: 0xBAD)
        statuses = []
        for _ in range(INTEGRITY_FAILURES + 4):  # bounded: past the bound
            request = TransferRequest(
                opcode=Opcode.WRITE,
                local=os.urandom(block),
                peer=peer,
                remote_segment=segment.segment_id,
                remote_offset=0,
                length=block,
            )
            state = tx.submit_nowait([request]).wait(timeout=10)
            statuses.append(state.status)
            if rx._call(lambda: rx.engine.receiver.statistics().quarantined):
                break
        assert rx._call(lambda: rx.engine.receiver.statistics().quarantined) == (1,)
        data = data_server(rx.engine).statistics()
        assert data.integrity_errors == INTEGRITY_FAILURES  # then no more payload read
        assert statuses[:INTEGRITY_FAILURES] == [TaskStatus.FAILED] * INTEGRITY_FAILURES
        assert rx._call(lambda: rx.engine.receiver.statistics().unreleased) == 0
    finally:
        tx.close()
        rx.close()
