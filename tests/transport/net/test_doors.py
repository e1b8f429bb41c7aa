"""Issue 27 items 2 and 3: a flood of strangers, from the honest peer's own address, keeps
neither the control door nor a data door shut (``control/_door``: the idlest one is evicted).

Each flood keeps twice the door's places busy and reopens every connection the listener
closes (``attackers.SilentFlood``); the honest peer then connects once, while it runs.
"""

from __future__ import annotations

import os
import ssl
import struct
import time

import trustme
from attackers import SilentFlood
from net_helpers import data_server, run, until, write_request
from procs import KEY, credit_config
from tent_transport.config import load_engine_config
from tent_transport.control import ControlClient, ControlServer, PskIdentity, TlsIdentity
from tent_transport.devices import Opcode, SliceRequest, SliceStatus
from tent_transport.devices.tcp import TcpDataServer, TcpRail
from tent_transport.engine import EngineOptions, SyncEngine
from tent_transport.segments import Access, SegmentTable
from test_control import _Hooks, _SenderHooks, _tls

from tent_sched import TaskStatus

LIMIT = 64  # the defaults of max_pending_handshakes and max_unbound
HONEST_HANDSHAKE_S = 2.0  # the issue's bound: the honest connect() succeeds within 2 s
SENDER, SESSION = 1, 5
DATA_KEY = os.urandom(32)


def _hello(peer: int) -> bytes:
    """A well-formed PSK hello of ``peer`` (peer ids are not secret), as a stalling attacker
    sends it."""
    return struct.pack("!4sHBQ32s", b"TENT", 1, 1, peer, os.urandom(32))


async def _flooded(port: int, door: object, *, greeting: bytes = b"") -> SilentFlood:
    """A flood that has filled ``door`` (a listener with ``pending_handshakes`` or
    ``unbound``) and keeps reopening what it closes."""
    flood = SilentFlood(port, keep=2 * LIMIT, greeting=greeting)
    flood.start()

    def waiting() -> int:
        return int(getattr(door, "pending_handshakes", None) or getattr(door, "unbound", 0))

    await until(lambda: waiting() == LIMIT and flood.closed_by_peer > LIMIT, what="a full door")
    return flood


def _control_server(identity: PskIdentity | TlsIdentity, hooks: _Hooks) -> ControlServer:
    return ControlServer(
        identity,
        credit=None,
        rails=lambda: [("127.0.0.1", 9)],
        hooks=hooks,
        max_pending_handshakes=LIMIT,
    )


async def _honest_peer_through_a_flood(
    server_identity: PskIdentity | TlsIdentity,
    client_identity: PskIdentity | TlsIdentity,
    *,
    greeting: bytes = b"",
) -> tuple[int, int, int]:
    """Fill the control listener's door with a flood (each connection says ``greeting``, then
    nothing), then connect the honest peer with one attempt (a refusal raises
    ``HandshakeFailed``) and wait for its session. Returns the connections the flood had
    opened before the honest peer and after it, and the door's evictions."""
    hooks = _Hooks()
    server = _control_server(server_identity, hooks)
    _, port = await server.listen("127.0.0.1", 0)
    flood = await _flooded(port, server, greeting=greeting)
    opened = flood.opened
    try:
        client = ControlClient(
            client_identity,
            "127.0.0.1",
            port,
            endpoint=None,
            hooks=_SenderHooks(),
            handshake_timeout_s=HONEST_HANDSHAKE_S,
        )
        await client.start()
        await until(lambda: [s.peer for s in hooks.opened] == [1], what="the session")
        assert server.pending_handshakes <= LIMIT
        await client.close()
        return opened, flood.opened, server.statistics().handshakes_evicted
    finally:
        flood.stop()
        await server.close()


def test_an_honest_peer_connects_through_a_silent_flood_of_the_control_port() -> None:
    before, after, evicted = run(
        _honest_peer_through_a_flood(
            PskIdentity(local_peer=2, keys={1: KEY}), PskIdentity(local_peer=1, keys={2: KEY})
        )
    )
    assert after > before  # the flood went on meanwhile
    assert evicted >= LIMIT


def test_stalled_hellos_of_a_known_peer_do_not_keep_it_out_either() -> None:
    """Connections that send a valid hello (progress) and stall leave in their turn."""
    run(
        _honest_peer_through_a_flood(
            PskIdentity(local_peer=2, keys={1: KEY}),
            PskIdentity(local_peer=1, keys={2: KEY}),
            greeting=_hello(1),
        )
    )


def test_tls_handshakes_wait_at_the_door_too() -> None:
    """Under TLS the door counts a connection from its TCP accept (TLS's own handshake was
    unbounded before: asyncio ran it ahead of the listener's callback), and an honest TLS
    peer still gets in through a flood."""
    ca = trustme.CA()
    names = {1: "sender-1.tent", 2: "receiver-2.tent"}
    run(
        _honest_peer_through_a_flood(
            _tls(ca, 2, "receiver-2.tent", names), _tls(ca, 1, "sender-1.tent", names)
        )
    )


class _Plane:
    """The receiver's decisions for one bound sender (everything admitted)."""

    def __init__(self) -> None:
        self.landed_count = 0

    def bound_session(self, peer: int) -> tuple[int, bytes] | None:
        return (SESSION, DATA_KEY) if peer == SENDER else None

    def quarantined(self, peer: int) -> bool:
        return False

    def admit(self, peer: int, session: int, request: object) -> str | None:
        return None

    def refused(self, peer: int, session: int, request: object, reason: str) -> None:
        raise AssertionError(f"an honest write was refused: {reason}")

    def landed(self, peer: int, session: int, request: object) -> None:
        self.landed_count += 1

    def aborted(self, peer: int, session: int, request: object, reason: str) -> None:
        raise AssertionError(f"an honest write was aborted: {reason}")

    def integrity_failed(self, peer: int, session: int, request: object) -> None:
        raise AssertionError("an honest write failed its checksum")


def _data_pair(tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None):
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
    server = TcpDataServer(
        rail=0,
        segments=table,
        plane=_Plane(),
        max_unbound=LIMIT,
        ssl_context=None if tls is None else tls[0],
    )
    rail = TcpRail("tcp0", ssl_context=None if tls is None else tls[1])
    return server, rail, memory, segment.segment_id


def _write(segment: int, data: bytes) -> SliceRequest:
    return SliceRequest(
        wr_id=1,
        opcode=Opcode.WRITE,
        peer=SENDER + 100,
        local=memoryview(data),
        remote_segment=segment,
        remote_offset=0,
        length=len(data),
        write_id=1,
    )


async def _attach_and_write(rail: TcpRail, port: int, segment: int, memory: bytearray) -> None:
    await rail.attach(
        SENDER + 100,
        "127.0.0.1",
        port,
        local_peer=SENDER,
        session=SESSION,
        data_key=DATA_KEY,
        timeout_s=HONEST_HANDSHAKE_S,
    )
    rail.post([_write(segment, b"through")], 0)
    done: list = []
    await until(lambda: bool(done.extend(rail.poll(4, 0)) or done), what="the write")
    assert done[0].status is SliceStatus.SUCCESS
    assert memory[:7] == b"through"


def test_an_honest_bind_gets_through_a_silent_flood_of_the_data_port() -> None:
    async def scenario() -> None:
        server, rail, memory, segment = _data_pair()
        _, port = await server.listen("127.0.0.1", 0)
        flood = await _flooded(port, server)
        try:
            await _attach_and_write(rail, port, segment, memory)
            assert server.unbound <= LIMIT
            assert server.statistics().binds_evicted >= LIMIT
        finally:
            flood.stop()
            rail.close()
            await server.close()

    run(scenario())


def _data_tls() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = trustme.CA()
    cert = ca.issue_cert("receiver-2.tent")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    client_ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    client_ctx.check_hostname = False
    for ctx in (server_ctx, client_ctx):
        cert.configure_cert(ctx)
        ca.configure_trust(ctx)
    return server_ctx, client_ctx


def test_a_data_tls_handshake_waits_at_the_door_and_an_honest_bind_gets_through() -> None:
    async def scenario() -> None:
        server, rail, memory, segment = _data_pair(_data_tls())
        _, port = await server.listen("127.0.0.1", 0)
        flood = await _flooded(port, server)  # silent: they never start TLS
        try:
            await _attach_and_write(rail, port, segment, memory)
        finally:
            flood.stop()
            rail.close()
            await server.close()

    run(scenario())


def test_an_engine_reconnects_and_transfers_through_floods_of_both_doors() -> None:
    """End to end: with both doors flooded, an honest sender whose connections dropped gets
    its control session and its data connection back, and its transfers complete."""
    block = 64 << 10
    config = load_engine_config(credit_config("required", slots=4, block=block, batch=1))
    rx = SyncEngine(
        config, EngineOptions(peer_id=2, identity=PskIdentity(local_peer=2, keys={1: KEY}))
    )
    tx = SyncEngine(
        config, EngineOptions(peer_id=1, identity=PskIdentity(local_peer=1, keys={2: KEY}))
    )
    floods: list[SilentFlood] = []
    try:
        host, port = rx.start()
        tx.start()
        peer = tx.connect(host, port)
        memory = bytearray(4 * block)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, len(memory))
        first = tx.wait_regions(peer, lambda d: bool(d.regions))
        data_port = data_server(rx.engine).address[1]
        for target in (port, data_port):  # the defaults: 64 places each
            flood = SilentFlood(target, keep=128, max_connections=20_000, duration_s=60)
            flood.start()
            floods.append(flood)
        for _ in range(2000):  # bounded: both floods churn their doors
            if all(f.closed_by_peer > 64 for f in floods):
                break
            time.sleep(0.01)
        assert all(f.closed_by_peer > 64 for f in floods)
        link = tx.engine._links[peer]
        tx._call(link.client.drop_connection)  # the honest sender's connection dropped

        def current() -> int:
            ps = rx.engine.control.session_of(1)
            return -1 if ps is None else ps.session

        def session_back(old: int) -> int:
            """The sender's next session after ``old``, its region exposed and known to the
            sender. A session the flood restarts again before the sender hears of its region
            is passed over for the next one (at most 5 in a row)."""
            for _ in range(5):
                for _ in range(3000):  # bounded
                    if rx._call(current) not in (-1, old):
                        break
                    time.sleep(0.01)
                session = rx._call(current)
                assert session not in (-1, old), "the honest sender did not get its session back"
                rx.expose(1, segment.segment_id, 0, len(memory))
                try:
                    tx.wait_regions(peer, lambda d, s=session: d.session == s and bool(d.regions))
                    return session
                except TimeoutError:
                    old = session
            raise AssertionError("the flood restarted the honest sender's session 5 times")

        session = session_back(first.session)
        failed: list[str] = []
        for i in range(4):
            data = os.urandom(block)
            request = write_request(peer, segment.segment_id, i * block, data)
            state = tx.submit([request]).wait(30)
            # The flood may evict the new data connection before its bind is read (a flood
            # that opens 64 connections within one round trip of the sender's bind): the
            # transfer ends FAILED, typed, as docs/transport.md's failure semantics say, and
            # the application resubmits, on the next session when the session restarted, on
            # the same one when only the data connection came back (a CI run waited 30 s for
            # a restart that never came). A restart seen late costs one more failure.
            # Bounded: a sender kept out for good still fails here.
            while state.status is TaskStatus.FAILED and len(failed) < 5:
                failed.append(state.detail)
                if rx._call(current) != session:
                    session = session_back(session)
                state = tx.submit([request]).wait(30)
            assert state.status is TaskStatus.COMPLETED, (state, failed)
            rx.release(rx.next_landed(10))
            assert memory[i * block : (i + 1) * block] == data
        assert all(f.is_alive() for f in floods)  # the floods ran throughout
        stats = rx.engine.control.statistics()
        assert stats.handshakes_evicted > 64
        assert data_server(rx.engine).statistics().binds_evicted > 64
    finally:
        for flood in floods:
            flood.stop()
        tx.close()
        rx.close()
