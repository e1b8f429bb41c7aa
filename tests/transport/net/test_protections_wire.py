"""Issue 27, "Protections no test guards": each protection of docs/abuse.md end to end, on
real sockets, with a raw client where the library's honest one would never lie (unit-level
counterparts: ``tests/transport/test_protections.py``)."""

from __future__ import annotations

import asyncio
import os
import struct
import time
import types

import pytest
import trustme
from attackers import Liar, RawControl, RawData, write_header
from net_helpers import data_server, run, sync_pair, until, write_request
from procs import KEY, credit_config
from tent_transport.config import load_engine_config
from tent_transport.control import (
    ControlServer,
    FrameKind,
    PskIdentity,
)
from tent_transport.devices.tcp import (
    Ack,
    AckStatus,
    Flags,
    Request,
    TcpDataServer,
    WireOpcode,
    checksum,
)
from tent_transport.engine import EngineOptions, SyncEngine
from tent_transport.engine._receiving import ReceiverSide
from tent_transport.segments import Access, SegmentTable
from test_control import _Hooks, _tls
from test_engine import _fixed_pair

from tent_credit.errors import InvalidEntry
from tent_sched import TaskStatus

BLOCK = 64 << 10


def _server(identity: object, hooks: _Hooks, **kw: object) -> ControlServer:
    return ControlServer(
        identity,  # type: ignore[arg-type]
        credit=None,
        rails=lambda: [("127.0.0.1", 9)],
        hooks=hooks,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("honest", [False, True], ids=["proof-without-the-key", "with-the-key"])
def test_the_control_listener_checks_the_key_proof_of_the_peer_it_claims(honest: bool) -> None:
    """A raw client claims known peer 1 and proves with a key it made up: the listener's own
    check refuses it (the honest client rejects the listener's proof before it gets there)."""

    async def scenario() -> None:
        hooks = _Hooks()
        server = _server(PskIdentity(local_peer=2, keys={1: KEY}), hooks)
        _, port = await server.listen("127.0.0.1", 0)

        def attack() -> bool:
            raw = RawControl(port, claim=1)
            raw.hello()
            assert not raw.server_proof_ok(b"y" * 32)  # the liar cannot check it; it goes on
            raw.prove(KEY if honest else b"y" * 32)
            closed = raw.closed_by_peer(timeout_s=1.0 if honest else 10.0)
            raw.close()
            return closed

        closed = await asyncio.to_thread(attack)
        if honest:
            await until(lambda: [s.peer for s in hooks.opened] == [1], what="the session")
        else:
            assert closed and hooks.opened == []
            assert server.statistics().handshakes_failed == 1
        await server.close()

    run(scenario())


@pytest.mark.parametrize("claim", [1, 3], ids=["claims-another-peer", "claims-its-own"])
def test_the_tls_listener_checks_that_the_certificate_names_the_claimed_peer(claim: int) -> None:
    async def scenario() -> None:
        ca = trustme.CA()
        names = {1: "sender-1.tent", 2: "receiver-2.tent", 3: "sender-3.tent"}
        hooks = _Hooks()
        server = _server(_tls(ca, 2, "receiver-2.tent", names), hooks)
        _, port = await server.listen("127.0.0.1", 0)
        client_ctx = _tls(ca, 3, "sender-3.tent", names).client_context  # peer 3's certificate

        def attack() -> bool:
            raw = RawControl(port, claim=claim, tls=client_ctx)
            try:
                raw.hello()
                raw.prove(b"")  # TLS mode: a fresh secret, no key
            except ConnectionError:
                return True
            closed = raw.closed_by_peer(timeout_s=1.0 if claim == 3 else 10.0)
            raw.close()
            return closed

        closed = await asyncio.to_thread(attack)
        if claim == 3:
            await until(lambda: [s.peer for s in hooks.opened] == [3], what="the session")
        else:
            assert closed and hooks.opened == []
        await server.close()

    run(scenario())


def test_an_oversized_frame_after_the_handshake_closes_the_session_undecoded() -> None:
    async def scenario() -> None:
        hooks = _Hooks()
        server = _server(PskIdentity(local_peer=2, keys={1: KEY}), hooks)
        _, port = await server.listen("127.0.0.1", 0)

        def attack() -> bool:
            raw = RawControl(port, claim=1)
            raw.hello()
            raw.prove(KEY)
            # a 4 GiB credit frame: refused from its 5 header bytes
            raw.sock.sendall(struct.pack("!IB", 0xFFFF_FFFF, int(FrameKind.CREDIT)) + b"x" * 64)
            closed = raw.closed_by_peer(timeout_s=10.0)
            raw.close()
            return closed

        assert await asyncio.to_thread(attack)
        (session,) = hooks.opened
        assert session.connection.close_reason.startswith("frame error: CREDIT frame length")
        await server.close()

    run(scenario())


def _engine_pair(slots: int = 4) -> tuple[SyncEngine, SyncEngine, int]:
    config = load_engine_config(credit_config("required", slots=slots, block=BLOCK, batch=1))
    return sync_pair(config)


def test_a_region_ends_exactly_where_it_was_exposed_end_to_end() -> None:
    """One byte past the exposed region is refused before it is read; up to its last byte
    lands (the segment table's bound, off by one, is what this would catch)."""
    rx, tx, peer = _engine_pair()
    try:
        memory = bytearray(4 * BLOCK)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, BLOCK, BLOCK)  # [BLOCK, 2 BLOCK)
        tx.wait_regions(peer, lambda d: bool(d.regions))
        fits = os.urandom(BLOCK // 2)
        end = 2 * BLOCK
        state = tx.submit([write_request(peer, segment.segment_id, end - len(fits), fits)]).result(
            30
        )
        assert state.status is TaskStatus.COMPLETED
        assert memory[end - len(fits) : end] == fits
        rx.release(rx.next_landed(10))
        past = os.urandom(BLOCK // 2)
        state = tx.submit_nowait(
            [write_request(peer, segment.segment_id, end - len(past) + 1, past)]
        )
        assert state.wait(30).status is TaskStatus.FAILED
        assert memory[end:] == bytes(len(memory) - end)  # not one byte past the region
        assert rx._call(lambda: rx.engine.receiver.statistics().quarantined) == (1,)
    finally:
        tx.close()
        rx.close()


def test_a_quarantined_peers_reconnect_ends_at_its_hello_before_any_mac() -> None:
    """docs/abuse.md, the data-plane lies, finding 4: a quarantined peer's engine keeps
    reconnecting. The listener refuses its hello (the claimed id is shut out anyway, so the
    claim locks out nobody) before it computes or sends a MAC: no listener hello, no proof;
    the peer's client sees a failed handshake, which doubles its back-off."""
    rx, tx, peer = _engine_pair()
    port = rx.engine.address[1]
    try:
        memory = bytearray(4 * BLOCK)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, BLOCK)
        tx.wait_regions(peer, lambda d: bool(d.regions))
        past = tx.submit_nowait(
            [write_request(peer, segment.segment_id, BLOCK // 2, os.urandom(BLOCK))]
        )
        assert past.wait(30).status is TaskStatus.FAILED  # one byte past the region: a lie
        assert rx._call(lambda: rx.engine.receiver.statistics().quarantined) == (1,)
        raw = RawControl(port, claim=1)
        try:
            with pytest.raises(ConnectionError, match="closed after 0 of"):
                raw.hello()  # the listener's hello never comes: closed at ours
        finally:
            raw.sock.close()
    finally:
        tx.close()
        rx.close()


def test_a_forged_bind_to_an_engine_is_closed_before_any_header_is_read() -> None:
    """A bind naming the live sender, proved with a made-up key, reaches no header; the sender
    it names is not punished for it (a stranger could otherwise quarantine it)."""
    rx, tx, peer = _engine_pair()
    try:
        memory = bytearray(BLOCK)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, BLOCK)
        first = tx.wait_regions(peer, lambda d: bool(d.regions))
        header = (
            Request(
                opcode=WireOpcode.WRITE,
                flags=Flags.NONE,
                qos_class=0,
                write_id=1,
                request=1,
                segment=segment.segment_id,
                offset=0,
                length=8,
                session=first.session,
                lease_session=0,
                epoch=0,
                checksum=checksum(b"\xee" * 8),
                charge=(0, 0, 0, 0),
            ).pack()
            + b"\xee" * 8
        )
        port = data_server(rx.engine).address[1]
        raw = RawData(port, timeout_s=10)
        raw.bind(os.urandom(32), 1)
        raw.sock.sendall(header)
        assert raw.answer(10) == "closed"  # no acknowledgement: the header was never read
        raw.close()
        assert memory[:8] == bytes(8)
        assert data_server(rx.engine).statistics().binds_refused == 1
        assert rx._call(lambda: rx.engine.receiver.statistics().quarantined) == ()
        data = os.urandom(BLOCK)  # the honest sender it named goes on
        assert tx.submit([write_request(peer, segment.segment_id, 0, data)]).result(30).status is (
            TaskStatus.COMPLETED
        )
        assert memory == data
    finally:
        tx.close()
        rx.close()


def test_a_write_on_a_superseded_session_never_lands_and_quarantines_nobody() -> None:
    """Real sockets, the engine's own receiver half: a data connection bound to session OLD
    sends a write after NEW replaced it (its retirement has not closed it yet, and its
    exposure is still there): refused by admission, stale, nothing lands."""

    async def scenario() -> None:
        table = SegmentTable()
        memory = bytearray(64)
        segment = table.register(memory)
        table.expose(4, 10, segment_id=segment.segment_id, offset=0, length=64, access=Access.WRITE)
        side = ReceiverSide(credit=None, segments=table)
        closed: list[str] = []
        key = os.urandom(32)
        current = types.SimpleNamespace(
            session=10,
            epoch=0,
            endpoint=None,
            data_key=key,
            connection=types.SimpleNamespace(close=closed.append),
        )
        side.control = types.SimpleNamespace(session_of=lambda peer: current)  # type: ignore[assignment]
        server = TcpDataServer(rail=0, segments=table, plane=side)
        _, port = await server.listen("127.0.0.1", 0)
        payload = b"\x5a" * 16
        header = Request(
            opcode=WireOpcode.WRITE,
            flags=Flags.NONE,
            qos_class=0,
            write_id=1,
            request=1,
            segment=segment.segment_id,
            offset=0,
            length=16,
            session=10,
            lease_session=0,
            epoch=0,
            checksum=checksum(payload),
            charge=(0, 0, 0, 0),
        ).pack()

        def attack() -> RawData:
            raw = RawData(port, timeout_s=10)
            raw.bind(key, 4)
            return raw

        raw = await asyncio.to_thread(attack)
        await until(lambda: server.connections(4, 10) == 1, what="the bind of session 10")
        current.session = 11  # the sender reconnected: session 10 is superseded

        def write() -> Ack | str:
            raw.sock.sendall(header + payload)
            answer = raw.answer(10)
            raw.close()
            return answer

        ack = await asyncio.to_thread(write)
        assert isinstance(ack, Ack) and ack.status is AckStatus.REFUSED, ack
        assert memory[:16] == bytes(16)
        stats = side.statistics()
        assert (stats.refused, stats.stale_refused, stats.quarantined) == (1, 1, ())
        assert closed == []
        await server.close()

    run(scenario())


def test_a_failed_transfer_gives_its_window_slot_back_end_to_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A window of one transfer: the first fails (its CRC32C is wrong), the next one must
    still go (a failure that kept its slot would leave it pending for ever)."""
    import tent_transport.devices._writes as sender_module  # where a header takes its CRC

    rx, tx, peer = _fixed_pair(window=1)
    try:
        memory = bytearray(2 * BLOCK)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, len(memory))
        tx.wait_regions(peer, lambda d: bool(d.regions))
        good = sender_module.checksum
        monkeypatch.setattr(sender_module, "checksum", lambda data: good(data) ^ 1)
        bad = tx.submit_nowait([write_request(peer, segment.segment_id, 0, b"x" * BLOCK)])
        assert bad.wait(30).status is TaskStatus.FAILED
        monkeypatch.setattr(sender_module, "checksum", good)
        data = os.urandom(BLOCK)
        state = tx.submit_nowait([write_request(peer, segment.segment_id, BLOCK, data)]).wait(10)
        assert state.status is TaskStatus.COMPLETED, state
        assert memory[BLOCK:] == data
    finally:
        tx.close()
        rx.close()


def test_a_write_cut_off_mid_payload_by_its_sessions_retirement_gives_its_credit_back() -> None:
    """A credited write admitted (its charge counted as landed) whose payload is cut off
    because the receiver retires its session (the sender reconnected) never lands: its charge
    must go back. Kept, each reconnect pinned one such write's credit for good, and a peer
    that reconnected a few times held the receiver's whole capacity (found by the abuse
    benchmark's fenced-session liar: its sixth session was granted nothing)."""
    config = load_engine_config(credit_config("required", slots=4, block=BLOCK, batch=2))
    rx = SyncEngine(
        config, EngineOptions(peer_id=2, identity=PskIdentity(local_peer=2, keys={3: KEY}))
    )
    liar = None
    try:
        _, port = rx.start()
        memory = bytearray(BLOCK)
        segment = rx.register(memory)
        liar = Liar(3, receiver=2, key=KEY, control_port=port, config=config)
        rx.expose(3, segment.segment_id, 0, BLOCK)
        state = liar.wait_session()
        raw = liar.bind(data_server(rx.engine).address[1], state)
        payload = b"\x5a" * 4096
        header = write_header(
            session=state.session, segment=segment.segment_id, offset=0, payload=payload,
            lease=state.lease, charge=(len(payload), 1, 0, 1),
        )  # fmt: skip
        raw.sock.sendall(header.pack())  # admitted; its payload never follows
        allocator = rx.engine.credit.allocator  # type: ignore[union-attr]
        for _ in range(1000):  # bounded
            if rx._call(allocator.statistics).writes_admitted == 1:
                break
            time.sleep(0.01)
        assert rx._call(allocator.statistics).writes_admitted == 1
        old = state.lease[1]
        supersede = RawControl(port, claim=3)  # the liar's own key: its session is replaced
        supersede.hello()
        supersede.prove(KEY)
        supersede.frame(FrameKind.SESSION)

        def kept() -> dict[str, int] | None:
            """What the old epoch still holds once its fence completed (``None``: not yet)."""
            try:
                totals = allocator.key_totals(3, 0, old)
            except InvalidEntry:  # forgotten: a fenced epoch is once it holds nothing
                return {}
            if totals.state.name != "FENCED":
                return None
            held = {r.name: totals.landed[r] - totals.released[r] for r in totals.landed}
            return {name: amount for name, amount in held.items() if amount}

        for _ in range(1000):  # bounded: the old session retired, its fence completed
            if rx._call(kept) is not None:
                break
            time.sleep(0.01)
        assert rx._call(kept) == {}  # nothing of the cut-off write stays committed
        assert memory == bytes(BLOCK)
        supersede.close()
        raw.close()
    finally:
        if liar is not None:
            liar.close()
        rx.close()
