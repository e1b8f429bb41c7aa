"""The control service: frames, the handshake (PSK and mutual TLS), pumping, fencing."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import ssl
import struct
import weakref
from collections.abc import Awaitable

import pytest
import trustme
from net_helpers import run, until
from tent_transport.control import (
    AuthenticatedPeer,
    ControlClient,
    ControlConnection,
    ControlServer,
    FrameDecoder,
    FrameError,
    FrameKind,
    HandshakeFailed,
    PeerSession,
    PskIdentity,
    SessionBootstrap,
    TlsIdentity,
    encode_frame,
)

from tent_credit import (
    AllocatorConfig,
    CreditMode,
    CreditReceiver,
    CreditResource,
    EndpointEvent,
    NegotiationState,
    SenderEndpoint,
    SessionId,
)
from tent_credit.testing import FaultRates, FaultyChannel

R = CreditResource
KEY_12 = b"k" * 32


def psk(local: int, **keys: bytes) -> PskIdentity:
    return PskIdentity(local_peer=local, keys={int(k[1:]): v for k, v in keys.items()})


# ----------------------------------------------------------------------------- frames


def test_frames_round_trip_in_any_split() -> None:
    stream = encode_frame(FrameKind.CREDIT, b"abc") + encode_frame(FrameKind.SESSION, b"")
    for cut in range(len(stream) + 1):
        decoder = FrameDecoder()
        frames = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])
        assert frames == [(FrameKind.CREDIT, b"abc"), (FrameKind.SESSION, b"")]


def test_frame_length_is_bounded_before_allocation() -> None:
    decoder = FrameDecoder()
    # a 4 GiB credit frame: refused from its 5 header bytes, nothing buffered for it
    with pytest.raises(FrameError):
        decoder.feed(struct.pack("!IB", 0xFFFF_FFFF, int(FrameKind.CREDIT)))
    assert decoder.buffered <= 5
    with pytest.raises(FrameError):  # poisoned: the stream position is lost
        decoder.feed(b"")


@pytest.mark.parametrize("header", [struct.pack("!IB", 0, 1), struct.pack("!IB", 2, 99)])
def test_zero_length_and_unknown_kind_are_refused(header: bytes) -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(header + b"x")


def test_take_decodes_at_most_its_limit_and_keeps_the_rest_as_bytes() -> None:
    frame = encode_frame(FrameKind.CREDIT, b"\x80" * 8)
    decoder = FrameDecoder()
    decoder.append(frame * 40 + frame[:3])
    assert decoder.take(16) == [(FrameKind.CREDIT, b"\x80" * 8)] * 16
    assert decoder.buffered == 24 * len(frame) + 3  # undecoded, not 24 frame objects
    assert len(decoder.take(16)) == 16 and len(decoder.take(16)) == 8
    assert decoder.take(16) == [] and decoder.buffered == 3  # the frame begun
    decoder.append(frame[3:])
    assert decoder.take() == [(FrameKind.CREDIT, b"\x80" * 8)] and decoder.buffered == 0


def test_frames_before_a_bad_header_come_out_in_order_then_the_decoder_is_poisoned() -> None:
    good = encode_frame(FrameKind.SESSION, b"ok")
    decoder = FrameDecoder()
    # however the stream was cut, the frames before the bad header are handed out first
    assert decoder.feed(good * 2 + struct.pack("!IB", 0, 1)) == [(FrameKind.SESSION, b"ok")] * 2
    with pytest.raises(FrameError):
        decoder.take()
    with pytest.raises(FrameError):
        decoder.append(good)


def test_a_failing_frame_handler_closes_the_connection_instead_of_killing_its_reader() -> None:
    async def scenario() -> None:
        accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]]
        accepted = asyncio.get_running_loop().create_future()

        async def on_connect(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            accepted.set_result((r, w))

        listener = await asyncio.start_server(on_connect, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        _, peer_writer = await asyncio.open_connection("127.0.0.1", port)
        reader, writer = await accepted
        closed: list[str] = []
        handled: list[FrameKind] = []

        def on_frame(kind: FrameKind, payload: bytes) -> None:
            handled.append(kind)
            raise KeyError("a defect reached by a peer's frame")

        connection = ControlConnection(
            reader,
            writer,
            AuthenticatedPeer(peer=1, data_key=b"k" * 32),
            on_frame=on_frame,
            on_closed=lambda: closed.append(connection.close_reason),
        )
        connection.start()
        peer_writer.write(encode_frame(FrameKind.CREDIT, b"x") * 2)
        await until(lambda: bool(closed), what="the connection to close")
        assert closed == [connection.close_reason]  # once
        assert connection.close_reason.startswith("handler failed: KeyError")
        assert handled == [FrameKind.CREDIT]  # nothing after the failure was handled
        peer_writer.close()
        listener.close()

    run(scenario())


# ----------------------------------------------------------------------------- harness


class _Hooks:
    """Receiver hooks recording the order of retire and fence_complete."""

    def __init__(self, credit: CreditReceiver | None = None) -> None:
        self.opened: list[PeerSession] = []
        self.log: list[str] = []
        self.gate: asyncio.Event | None = None
        self.credit = credit

    def session_opened(self, session: PeerSession) -> None:
        self.opened.append(session)

    def admit_peer(self, peer: int) -> bool:
        return True

    def flooded(self, peer: int) -> None:
        self.log.append(f"flooded {peer}")

    def retire_session(self, peer: int, session: int) -> Awaitable[None]:
        async def retire() -> None:
            self.log.append(f"retire-start {peer}/{session}")
            if self.gate is not None:
                await self.gate.wait()
            self.log.append(f"retire-done {peer}/{session}")

        return retire()


class _SenderHooks:
    def __init__(self) -> None:
        self.sessions: list[SessionBootstrap] = []
        self.lost = 0

    def session_started(
        self, client: ControlClient, bootstrap: SessionBootstrap, auth: AuthenticatedPeer
    ) -> None:
        self.sessions.append(bootstrap)

    def session_lost(self, client: ControlClient) -> None:
        self.lost += 1

    def descriptors(self, client: ControlClient, payload: bytes) -> None:
        pass

    def credit_received(self, client: ControlClient) -> bool:
        self.credit_messages = getattr(self, "credit_messages", 0) + 1
        return False  # no pass follows here: the client flushes itself


def _receiver(*, refresh_ns: int = 0) -> CreditReceiver:
    config = AllocatorConfig(
        capacity={R.DATA_BYTES: 1 << 20, R.REQUEST_SLOTS: 8, R.CONSUMER_SLOTS: 8},
        control_slots=4,
        max_grant={R.DATA_BYTES: 1 << 20, R.REQUEST_SLOTS: 8, R.CONSUMER_SLOTS: 8},
        max_keys=8,
        retry_after_us=100,
    )
    return CreditReceiver(
        config,
        SessionId(7),
        initial_grant={R.DATA_BYTES: 4096, R.REQUEST_SLOTS: 1, R.CONSUMER_SLOTS: 1},
        refresh_interval_ns=refresh_ns,
    )


async def _server(
    identity: PskIdentity | TlsIdentity, credit: CreditReceiver | None, hooks: _Hooks
) -> tuple[ControlServer, int]:
    server = ControlServer(identity, credit=credit, rails=lambda: [("127.0.0.1", 9)], hooks=hooks)
    _, port = await server.listen("127.0.0.1", 0)
    return server, port


# ----------------------------------------------------------------------------- handshake


def test_psk_handshake_binds_identity_and_activates_credit() -> None:
    async def scenario() -> None:
        credit = _receiver()
        hooks = _Hooks()
        server, port = await _server(psk(2, p1=KEY_12), credit, hooks)
        endpoint = SenderEndpoint(sender_peer=1, mode=CreditMode.REQUIRED)
        sender = _SenderHooks()
        client = ControlClient(
            psk(1, p2=KEY_12), "127.0.0.1", port, endpoint=endpoint, hooks=sender
        )
        await client.start()
        await until(lambda: endpoint.state is NegotiationState.ACTIVE, what="activation")
        await until(lambda: endpoint.available()[R.DATA_BYTES] == 4096, what="initial grant")
        assert client.peer == 2
        assert [s.peer for s in hooks.opened] == [1]  # identity from the handshake
        assert sender.sessions[0].rails == (("127.0.0.1", 9),)
        await client.close()
        await server.close()

    run(scenario())


class _FrameHooks(_SenderHooks):
    """Sender hooks that answer whether a flush follows (a driver's dispatch pass) or the
    client must flush."""

    def __init__(self, *, pass_follows: bool) -> None:
        super().__init__()
        self.pass_follows = pass_follows

    def credit_received(self, client: ControlClient) -> bool:
        super().credit_received(client)
        return self.pass_follows


@pytest.mark.parametrize("pass_follows", [False, True], ids=["client-flushes", "pass-flushes"])
def test_a_credit_frame_is_flushed_once_by_the_client_or_by_the_pass(pass_follows: bool) -> None:
    """A credit frame's answers are flushed once: by the client after the frame, unless its
    hook says a flush follows anyway (the engine's dispatch pass flushes every client). The
    client flushed before asking the hook, twice per frame under the engine."""

    async def scenario() -> None:
        credit = _receiver()
        server, port = await _server(psk(2, p1=KEY_12), credit, _Hooks())
        endpoint = SenderEndpoint(sender_peer=1, mode=CreditMode.REQUIRED)
        within = [False]  # inside the client's handling of a credit frame
        flushed = [0]  # flushes made within a credit frame's handling
        sender = _FrameHooks(pass_follows=pass_follows)
        client = ControlClient(
            psk(1, p2=KEY_12), "127.0.0.1", port, endpoint=endpoint, hooks=sender
        )
        receive, flush, on_frame = endpoint.receive_message, client.flush, client._on_frame

        def receive_counted(data: bytes, now_ns: int) -> list[EndpointEvent]:
            within[0] = True
            return receive(data, now_ns)

        def on_frame_counted(kind: FrameKind, payload: bytes) -> None:
            # the frame's handling is the client's frame callback, no more: a flush by its
            # timer due in the same loop turn is not the frame's (a call_soon marking the
            # end let such a flush count, once under load)
            try:
                on_frame(kind, payload)
            finally:
                within[0] = False

        def flush_counted() -> None:
            flushed[0] += within[0]
            flush()

        endpoint.receive_message = receive_counted  # type: ignore[method-assign]
        client.flush = flush_counted  # type: ignore[method-assign]
        client._on_frame = on_frame_counted  # type: ignore[method-assign]
        await client.start()
        await until(lambda: endpoint.available()[R.DATA_BYTES] == 4096, what="initial grant")
        handled = sender.credit_messages  # the activation and the initial grant at least
        assert handled >= 2
        assert flushed[0] == (0 if pass_follows else handled)
        await client.close()
        await server.close()

    run(scenario())


@pytest.mark.parametrize(
    "client_keys",
    [{"p2": b"x" * 32}, {"p2": KEY_12}],  # wrong key; right key but claims an unknown id
    ids=["wrong-key", "unknown-peer"],
)
def test_wrong_psk_identity_is_refused_at_the_handshake(client_keys: dict[str, bytes]) -> None:
    async def scenario() -> None:
        credit = _receiver()
        hooks = _Hooks()
        server, port = await _server(psk(2, p1=KEY_12), credit, hooks)
        local = 1 if client_keys["p2"] != KEY_12 else 3
        client = ControlClient(
            psk(local, **client_keys), "127.0.0.1", port, endpoint=None, hooks=_SenderHooks()
        )
        with pytest.raises(HandshakeFailed):
            await client.start()
        await until(lambda: server.statistics().handshakes_failed == 1, what="refusal")
        assert hooks.opened == []  # no session, no credit key, no frame decoded
        assert credit.allocator.statistics().keys == 0
        await server.close()

    run(scenario())


def test_garbage_before_the_handshake_is_closed_undecoded() -> None:
    async def scenario() -> None:
        hooks = _Hooks()
        server, port = await _server(psk(2, p1=KEY_12), None, hooks)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        # a well-formed credit frame where the hello belongs: never decoded as a frame
        writer.write(encode_frame(FrameKind.CREDIT, b"\x80" * 60))
        # closed with the rest of the frame unread: the kernel resets rather than ends it
        with contextlib.suppress(ConnectionResetError):
            assert await reader.read() == b""
        assert hooks.opened == []
        assert server.statistics().handshakes_failed == 1
        writer.close()
        await server.close()

    run(scenario())


def test_pending_handshakes_are_bounded_and_a_newcomer_evicts_the_oldest() -> None:
    async def scenario() -> None:
        hooks = _Hooks()
        server = ControlServer(
            psk(2, p1=KEY_12),
            credit=None,
            rails=lambda: [("127.0.0.1", 9)],
            hooks=hooks,
            max_pending_handshakes=2,
        )
        _, port = await server.listen("127.0.0.1", 0)
        # two connections that never send a hello hold both handshake places
        idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        await until(lambda: server.pending_handshakes == 2, what="two pending handshakes")
        # an honest peer gets in all the same: the oldest idle one is closed unread instead
        client = ControlClient(
            psk(1, p2=KEY_12), "127.0.0.1", port, endpoint=None, hooks=_SenderHooks()
        )
        await client.start()
        await until(lambda: len(hooks.opened) == 1, what="the honest session")
        assert await idle[0][0].read() == b""
        assert server.statistics().handshakes_evicted == 1
        assert server.pending_handshakes == 1  # the younger idle one, within its deadline
        for _, idle_writer in idle:
            idle_writer.close()
        await until(lambda: server.pending_handshakes == 0, what="the idle ones to go")
        await client.close()
        await server.close()

    run(scenario())


def test_a_bad_pending_handshake_bound_is_refused() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError):
            ControlServer(
                psk(2, p1=KEY_12),
                credit=None,
                rails=lambda: [],
                hooks=_Hooks(),
                max_pending_handshakes=bad,  # type: ignore[arg-type]
            )


def _tls(ca: trustme.CA, local: int, name: str, names: dict[int, str]) -> TlsIdentity:
    cert = ca.issue_cert(name)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    client_ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    client_ctx.check_hostname = False  # identity is the peer-id ↔ SAN map, checked after
    for ctx in (server_ctx, client_ctx):
        cert.configure_cert(ctx)
    trusted = ca  # both sides trust the test CA
    trusted.configure_trust(server_ctx)
    trusted.configure_trust(client_ctx)
    return TlsIdentity(
        local_peer=local, server_context=server_ctx, client_context=client_ctx, peer_names=names
    )


def test_mutual_tls_handshake() -> None:
    async def scenario() -> None:
        ca = trustme.CA()
        names = {1: "sender-1.tent", 2: "receiver-2.tent"}
        hooks = _Hooks()
        server, port = await _server(_tls(ca, 2, "receiver-2.tent", names), _receiver(), hooks)
        endpoint = SenderEndpoint(sender_peer=1)
        client = ControlClient(
            _tls(ca, 1, "sender-1.tent", names),
            "127.0.0.1",
            port,
            endpoint=endpoint,
            hooks=_SenderHooks(),
        )
        await client.start()
        await until(lambda: endpoint.state is NegotiationState.ACTIVE, what="activation")
        assert [s.peer for s in hooks.opened] == [1]
        await client.close()
        await server.close()

    run(scenario())


@pytest.mark.parametrize("case", ["untrusted-ca", "cert-names-another-peer"])
def test_bad_certificate_is_refused(case: str) -> None:
    async def scenario() -> None:
        ca = trustme.CA()
        names = {1: "sender-1.tent", 2: "receiver-2.tent", 3: "sender-3.tent"}
        hooks = _Hooks()
        server, port = await _server(_tls(ca, 2, "receiver-2.tent", names), _receiver(), hooks)
        if case == "untrusted-ca":
            identity = _tls(trustme.CA(), 1, "sender-1.tent", names)
            identity.client_context.load_verify_locations(cadata=ca.cert_pem.bytes().decode())
        else:  # a valid certificate of peer 3 claiming to be peer 1
            identity = _tls(ca, 1, "sender-3.tent", names)
        client = ControlClient(identity, "127.0.0.1", port, endpoint=None, hooks=_SenderHooks())
        with pytest.raises((HandshakeFailed, ssl.SSLError, ConnectionError)):
            await client.start()
        await asyncio.sleep(0.05)
        assert hooks.opened == []
        await server.close()

    run(scenario())


# ----------------------------------------------------------------------------- lifecycle


def test_disconnect_stale_reconnect_fence_complete_after_retire() -> None:
    async def scenario() -> None:
        credit = _receiver()
        hooks = _Hooks()
        server, port = await _server(psk(2, p1=KEY_12), credit, hooks)
        endpoint = SenderEndpoint(sender_peer=1)
        sender = _SenderHooks()
        client = ControlClient(
            psk(1, p2=KEY_12), "127.0.0.1", port, endpoint=endpoint, hooks=sender
        )
        await client.start()
        await until(lambda: endpoint.available()[R.DATA_BYTES] == 4096, what="grant")
        hooks.gate = asyncio.Event()  # hold the retirement: data "still in flight"
        client.drop_connection()
        await until(lambda: len(sender.sessions) == 2, what="reconnect")
        assert endpoint.statistics().stale_transitions == 1
        first = f"1/{hooks.opened[0].session}"
        await until(lambda: f"retire-start {first}" in hooks.log, what="retire start")
        totals = credit.allocator.key_totals(1, 0, 1)
        assert totals.state.name == "FENCING"  # not reclaimed while the session may land
        assert credit.allocator.outstanding(R.DATA_BYTES) >= 4096
        hooks.gate.set()
        await until(lambda: server.statistics().fences_completed == 1, what="fence_complete")
        assert hooks.log.index(f"retire-done {first}") >= 0
        assert hooks.opened[1].session > hooks.opened[0].session
        await until(lambda: endpoint.state is NegotiationState.ACTIVE, what="new epoch active")
        assert endpoint.epoch == 2
        await client.close()
        await server.close()

    run(scenario())


class _BrokenPipeHooks(_Hooks):
    """Every session's first write fails as one to a peer already gone: asyncio's transport
    hands the error to the socket's protocol (``connection_lost(exc)``), which passes it to the
    stream's, whose reader keeps it, and its traceback keeps the frames the write ran in,
    ``session_opened`` and the server's code above it. Sessions are only weakly referenced
    here."""

    def __init__(self) -> None:
        super().__init__()
        self.sessions: list[weakref.ref[PeerSession]] = []

    def session_opened(self, session: PeerSession) -> None:
        self.sessions.append(weakref.ref(session))
        try:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
        except BrokenPipeError as exc:
            # what the transport does with it
            session.connection._writer.transport.get_protocol().connection_lost(exc)


def test_a_failed_write_does_not_keep_the_sessions_a_reconnect_replaced() -> None:
    async def scenario() -> None:
        hooks = _BrokenPipeHooks()
        server, port = await _server(psk(2, p1=KEY_12), None, hooks)
        client = ControlClient(
            psk(1, p2=KEY_12), "127.0.0.1", port, endpoint=None, hooks=_SenderHooks()
        )
        await client.start()  # each session closes at once; the client reconnects
        await until(lambda: len(hooks.sessions) >= 6, what="six sessions")
        await client.close()
        await until(lambda: not server._tasks, what="the retirements")
        gc.collect()
        alive = [i for i, ref in enumerate(hooks.sessions[:-1]) if ref() is not None]
        # each kept the one before it through its frames: every session stayed in memory
        assert alive == []
        await server.close()

    run(scenario())


def test_credit_survives_a_faulty_control_channel() -> None:
    async def scenario() -> None:
        # Over a lossy channel both refreshes run (grant-ahead sends nothing without news, so
        # they are what repeats a lost report or update: gated/bad/no_refresh).
        credit = _receiver(refresh_ns=5_000_000)
        rates = FaultRates(drop=0.3, duplicate=0.3, reorder=0.3, max_delay_ns=2_000_000)
        channels: dict[int, FaultyChannel] = {}

        def faults(peer: int) -> FaultyChannel:
            channels[peer] = FaultyChannel(seed=peer, rates=rates)
            return channels[peer]

        hooks = _Hooks()
        server = ControlServer(
            psk(2, p1=KEY_12),
            credit=credit,
            rails=lambda: [("127.0.0.1", 9)],
            hooks=hooks,
            faults=faults,
        )
        _, port = await server.listen("127.0.0.1", 0)
        endpoint = SenderEndpoint(
            sender_peer=1, usage_interval_ns=1_000_000, refresh_interval_ns=5_000_000
        )
        client = ControlClient(
            psk(1, p2=KEY_12),
            "127.0.0.1",
            port,
            endpoint=endpoint,
            hooks=_SenderHooks(),
            faults=faults,
        )
        await client.start()
        await until(lambda: endpoint.state is NegotiationState.ACTIVE, what="activation")
        # ask for more than the initial grant: the level is re-reported until a grant arrives
        endpoint.set_pending_demand({R.DATA_BYTES: 65536, R.REQUEST_SLOTS: 2, R.CONSUMER_SLOTS: 2})
        client.flush()
        await until(lambda: endpoint.available()[R.DATA_BYTES] >= 65536, timeout=20, what="grant")
        stats = [c.statistics() for c in channels.values()]
        assert sum(s.dropped + s.duplicated + s.reordered for s in stats) > 0  # faults happened
        await client.close()
        await server.close()

    run(scenario())


@pytest.mark.parametrize(
    ("mode", "state"),
    [
        (CreditMode.OPTIONAL, NegotiationState.LEGACY),
        (CreditMode.REQUIRED, NegotiationState.FAILED),
    ],
)
def test_old_peer_without_credit_capability(mode: CreditMode, state: NegotiationState) -> None:
    async def scenario() -> None:
        hooks = _Hooks()
        server, port = await _server(psk(2, p1=KEY_12), None, hooks)  # credit off: an old peer
        endpoint = SenderEndpoint(sender_peer=1, mode=mode)
        client = ControlClient(
            psk(1, p2=KEY_12), "127.0.0.1", port, endpoint=endpoint, hooks=_SenderHooks()
        )
        await client.start()
        await until(lambda: endpoint.state is state, what=state.name)
        await client.close()
        await server.close()

    run(scenario())
