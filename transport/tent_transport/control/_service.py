"""The control service: pumps the sans-IO credit endpoints over authenticated connections.

The driver is aioquic's shape (TRANSPORT "Layers"): feed each received frame into the endpoint,
send what it queues, re-arm ``get_timer()``. One control connection per (sender, receiver)
pair, opened by the sender (:class:`ControlClient`) to the receiver (:class:`ControlServer`).

Lifecycle and fencing (TRANSPORT "Leases"):

1. The handshake binds the peer id (``_handshake``); the receiver then numbers the connection
   (its transport *session*), ``accept``\\ s the sender's credit key (a new epoch: a previous one
   of that sender becomes FENCING) and sends the bootstrap (rails, credit versions).
2. The sender calls ``connect`` (first connection) or ``reconnect`` on its endpoint, which
   offers its versions; activation and grants follow as CREDIT frames.
3. Disconnect: the sender's endpoint goes STALE (``disconnect``) and the client reconnects
   with a bounded back-off; the receiver fences the epoch (``CreditReceiver.disconnect``).
4. A fenced epoch's capacity comes back only through ``fence_complete``, called exactly when no
   byte of the old session can still land: after the receiver's hook ``retire_session`` has
   closed that session's data connections and they have finished (no payload in flight).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import attrs

from tent_credit import (
    SUPPORTED_VERSIONS,
    CapabilityActivation,
    CreditReceiver,
    EndpointEvent,
    NegotiationState,
    ReceiverEndpoint,
    SenderEndpoint,
    SessionId,
    encode,
)
from tent_credit.errors import CreditError, LocalProtocolError
from tent_credit.testing import FaultyChannel

from ._bootstrap import BootstrapError, SessionBootstrap
from ._connection import ControlConnection
from ._errors import ConnectionLost, HandshakeFailed
from ._frames import FrameKind
from ._handshake import (
    AuthenticatedPeer,
    PskIdentity,
    TlsIdentity,
    client_handshake,
    server_handshake,
)

__all__ = [
    "ControlClient",
    "ControlServer",
    "PeerSession",
    "ReceiverHooks",
    "SenderHooks",
    "ServiceStatistics",
]

Identity = PskIdentity | TlsIdentity
FaultFactory = Callable[[int], FaultyChannel | None]
"""``faults(peer)``: the fault channel for frames sent to ``peer`` (``None``: no faults)."""


class _Timer:
    """One re-armable loop timer at an endpoint's ``get_timer()`` (monotonic ns)."""

    def __init__(self, fire: Callable[[], None]) -> None:
        self._fire = fire
        self._handle: asyncio.TimerHandle | None = None
        self._when: int | None = None

    def arm(self, when_ns: int | None, now_ns: int) -> None:
        if when_ns == self._when and self._handle is not None:
            return
        self.cancel()
        if when_ns is None:
            return
        self._when = when_ns
        delay = max(0.0, (when_ns - now_ns) / 1e9)
        self._handle = asyncio.get_running_loop().call_later(delay, self._run)

    def _run(self) -> None:
        self._handle = None
        self._when = None
        self._fire()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = None
        self._when = None


@attrs.frozen(kw_only=True)
class ServiceStatistics:
    connections_accepted: int
    handshakes_failed: int
    reconnects: int
    protocol_violations: int
    unsupported_frames: int
    fences_completed: int


class _Counters:
    def __init__(self) -> None:
        self.accepted = 0
        self.handshakes_failed = 0
        self.reconnects = 0
        self.violations = 0
        self.unsupported = 0
        self.fences_completed = 0

    def snapshot(self) -> ServiceStatistics:
        return ServiceStatistics(
            connections_accepted=self.accepted,
            handshakes_failed=self.handshakes_failed,
            reconnects=self.reconnects,
            protocol_violations=self.violations,
            unsupported_frames=self.unsupported,
            fences_completed=self.fences_completed,
        )


def _count_violations(counters: _Counters, events: Sequence[EndpointEvent]) -> None:
    counters.violations += sum(1 for e in events if e.kind == "protocol_violation")


def _no_credit_activation(endpoint: SenderEndpoint) -> bytes:
    versions = tuple(v for v in (0xFFFF,) if v not in SUPPORTED_VERSIONS) or (0xFFFE,)
    return encode(
        CapabilityActivation(
            versions=versions,
            selected_version=0,
            receiver_session_id=SessionId(1),
            epoch=0,
            qos_class=endpoint.qos_class,
        )
    )


async def _open_stream(
    host: str, port: int, identity: Identity
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    if isinstance(identity, TlsIdentity):
        return await asyncio.open_connection(
            host, port, ssl=identity.client_context, server_hostname=None
        )
    return await asyncio.open_connection(host, port)


# --------------------------------------------------------------------------- receiver side


@attrs.define(eq=False)
class PeerSession:
    """One sender's control connection at the receiver."""

    peer: int
    session: int
    data_key: bytes = attrs.field(repr=False)
    connection: ControlConnection
    endpoint: ReceiverEndpoint | None
    epoch: int
    current: bool = True
    retiring: bool = False


class ReceiverHooks(Protocol):
    def session_opened(self, session: PeerSession) -> None:
        """A sender's new session is live (publish its descriptors, accept its data binds)."""

    def retire_session(self, peer: int, session: int) -> Awaitable[None]:
        """Close the session's data connections and revoke its exposures; resolve once no byte
        of it can still land."""

    def admit_peer(self, peer: int) -> bool:
        """Whether an authenticated peer may open a session (``False``: quarantined)."""


class ControlServer:
    """The receiver's control listener (one :class:`PeerSession` per connected sender).

    ``credit`` is the receiver's :class:`CreditReceiver` (``None``: credit disabled, CREDIT
    frames are ignored and counted). ``rails`` is called for the data listeners' addresses when a
    bootstrap is sent.
    """

    def __init__(
        self,
        identity: Identity,
        *,
        credit: CreditReceiver | None,
        rails: Callable[[], Sequence[tuple[str, int]]],
        hooks: ReceiverHooks,
        qos_class: int = 0,
        faults: FaultFactory | None = None,
        handshake_timeout_s: float = 5.0,
        max_queued: int = 256,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self._identity = identity
        self._credit = credit
        self._rails = rails
        self._hooks = hooks
        self._qos = qos_class
        self._faults = faults
        self._timeout = handshake_timeout_s
        self._max_queued = max_queued
        self._clock = clock
        self._sessions: dict[int, PeerSession] = {}
        # session numbers grow across restarts too (microseconds of wall clock at start), so
        # a sender tells a restarted receiver's session from the one it lost
        self._ids = itertools.count(max(1, time.time_ns() // 1000))
        self._server: asyncio.Server | None = None
        self._timer = _Timer(self.flush)
        self._tasks: set[asyncio.Task[None]] = set()
        self._counters = _Counters()

    async def listen(self, host: str, port: int) -> tuple[str, int]:
        """Start listening; returns the bound address."""
        ssl_ctx = self._identity.server_context if isinstance(self._identity, TlsIdentity) else None
        self._server = await asyncio.start_server(self._on_connect, host, port, ssl=ssl_ctx)
        sockname = self._server.sockets[0].getsockname()
        return str(sockname[0]), int(sockname[1])

    def session_of(self, peer: int) -> PeerSession | None:
        """The peer's current (live) session, or ``None``."""
        ps = self._sessions.get(peer)
        return ps if ps is not None and ps.current else None

    def sessions(self) -> tuple[PeerSession, ...]:
        return tuple(ps for ps in self._sessions.values() if ps.current)

    def statistics(self) -> ServiceStatistics:
        return self._counters.snapshot()

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            auth = await asyncio.wait_for(
                server_handshake(reader, writer, self._identity), self._timeout
            )
        except (HandshakeFailed, TimeoutError, ConnectionError, OSError):
            # rule 3: closed before any frame of it is decoded
            self._counters.handshakes_failed += 1
            writer.close()
            return
        if not self._hooks.admit_peer(auth.peer):
            self._counters.handshakes_failed += 1
            writer.close()
            return
        self._counters.accepted += 1
        self._open(reader, writer, auth)

    def _open(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, auth: AuthenticatedPeer
    ) -> None:
        peer = auth.peer
        old = self._sessions.get(peer)
        endpoint = None
        epoch = 0
        if self._credit is not None:
            try:
                endpoint = self._credit.accept(peer, self._qos)
            except CreditError:
                self._counters.violations += 1  # e.g. more keys than configured
                writer.close()
                return
            epoch = endpoint.epoch
        holder: list[PeerSession] = []
        connection = ControlConnection(
            reader,
            writer,
            auth,
            on_frame=lambda kind, payload: self._on_frame(holder[0], kind, payload),
            on_closed=lambda: self._on_closed(holder[0]),
            max_queued=self._max_queued,
            faults=None if self._faults is None else self._faults(peer),
        )
        ps = PeerSession(
            peer=peer,
            session=next(self._ids),
            data_key=auth.data_key,
            connection=connection,
            endpoint=endpoint,
            epoch=epoch,
        )
        holder.append(ps)
        self._sessions[peer] = ps
        if old is not None and old.current:
            # a reconnect while the old connection still looked alive (a sender restart):
            # accept() fenced the old epoch already
            old.current = False
            old.connection.close("superseded by a new connection")
            self._retire(old, fenced_epoch=old.epoch)
        bootstrap = SessionBootstrap(
            session=ps.session,
            credit_versions=() if self._credit is None else self._credit.versions,
            rails=tuple(self._rails()),
        )
        connection.publish(FrameKind.SESSION, bootstrap.encode())
        connection.start()
        self._hooks.session_opened(ps)
        self.flush()

    def _on_frame(self, ps: PeerSession, kind: FrameKind, payload: bytes) -> None:
        if kind is not FrameKind.CREDIT:
            self._counters.violations += 1  # a sender sends credit frames only
            ps.connection.close(f"a sender does not send {kind.name} frames")
            return
        if ps.endpoint is None:
            self._counters.unsupported += 1  # credit disabled here: an old peer ignores them
            return
        if ps.endpoint.closed:
            return
        events = ps.endpoint.receive_message(payload, self._clock())
        _count_violations(self._counters, events)
        self.flush()

    def _on_closed(self, ps: PeerSession) -> None:
        if not ps.current:
            return  # superseded: its retirement is already under way
        ps.current = False
        if self._credit is not None and ps.endpoint is not None and not ps.endpoint.closed:
            self._credit.disconnect(ps.peer, self._qos)
        self._retire(ps, fenced_epoch=ps.epoch)

    def _retire(self, ps: PeerSession, *, fenced_epoch: int) -> None:
        if ps.retiring:
            return
        ps.retiring = True

        async def retire() -> None:
            await self._hooks.retire_session(ps.peer, ps.session)
            # TRANSPORT "Leases": only now can no byte of the old session land
            if self._credit is not None and fenced_epoch:
                with contextlib.suppress(CreditError):
                    self._credit.fence_complete(ps.peer, self._qos, fenced_epoch)
                    self._counters.fences_completed += 1
                self.flush()

        self._spawn(retire())

    def flush(self) -> None:
        """Send what the endpoints queued; re-arm the refresh timer."""
        if self._credit is None:
            return
        now = self._clock()
        for (peer, _qos), messages in self._credit.messages_to_send(now).items():
            ps = self._sessions.get(peer)
            if ps is None or not ps.current:
                continue
            for message in messages:
                ps.connection.publish(FrameKind.CREDIT, message)
        self._timer.arm(self._credit.get_timer(), now)

    async def close(self) -> None:
        self._timer.cancel()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        for ps in list(self._sessions.values()):
            ps.connection.close("server closing")
        for task in list(self._tasks):
            task.cancel()


# --------------------------------------------------------------------------- sender side


class SenderHooks(Protocol):
    def session_started(
        self, client: ControlClient, bootstrap: SessionBootstrap, auth: AuthenticatedPeer
    ) -> None:
        """A (re)connected control session is live: open its data connections."""

    def session_lost(self, client: ControlClient) -> None:
        """The control connection dropped (a reconnect follows unless closed)."""

    def descriptors(self, client: ControlClient, payload: bytes) -> None:
        """A DESCRIPTORS frame arrived (decode it; a bad one is a peer fault)."""

    def credit_received(self, client: ControlClient) -> None:
        """A credit message was applied to the endpoint: stalled work may now be eligible."""


class ControlClient:
    """The sender's control connection to one receiver, with reconnects.

    :meth:`start` makes the first connection and raises :class:`HandshakeFailed` or
    :class:`OSError` if it fails (nothing is left running). Afterwards a lost connection is
    re-established with a bounded exponential back-off until :meth:`close`.
    """

    def __init__(
        self,
        identity: Identity,
        host: str,
        port: int,
        *,
        endpoint: SenderEndpoint | None,
        hooks: SenderHooks,
        expect_peer: int | None = None,
        faults: FaultFactory | None = None,
        handshake_timeout_s: float = 5.0,
        backoff_s: tuple[float, float] = (0.02, 1.0),
        max_queued: int = 256,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self._identity = identity
        self.host = host
        self.port = port
        self.endpoint = endpoint
        self._hooks = hooks
        self._expect = expect_peer
        self._faults = faults
        self._timeout = handshake_timeout_s
        self._backoff = backoff_s
        self._max_queued = max_queued
        self._clock = clock
        self._connection: ControlConnection | None = None
        self._auth: AuthenticatedPeer | None = None
        self._bootstrap_pending = False
        self._closed = False
        self._lost = asyncio.Event()
        self._maintainer: asyncio.Task[None] | None = None
        self._timer = _Timer(self._on_timer)
        self._counters = _Counters()
        self.bootstrap: SessionBootstrap | None = None
        self._started_once = False

    @property
    def peer(self) -> int:
        """The receiver's authenticated peer id. Raises :class:`ConnectionLost` before the
        first connection."""
        if self._auth is None:
            raise ConnectionLost("not connected yet")
        return self._auth.peer

    @property
    def closing(self) -> bool:
        return self._closed

    @property
    def connected(self) -> bool:
        return self._connection is not None and not self._connection.closed

    def statistics(self) -> ServiceStatistics:
        return self._counters.snapshot()

    async def start(self) -> None:
        await self._connect_once()
        self._maintainer = asyncio.ensure_future(self._maintain())

    async def _connect_once(self) -> None:
        reader, writer = await _open_stream(self.host, self.port, self._identity)
        try:
            auth = await asyncio.wait_for(
                client_handshake(reader, writer, self._identity, expect_peer=self._expect),
                self._timeout,
            )
        except (HandshakeFailed, TimeoutError, ConnectionError, OSError) as exc:
            self._counters.handshakes_failed += 1
            writer.close()
            if isinstance(exc, HandshakeFailed):
                raise
            raise HandshakeFailed(f"handshake did not complete: {exc!r}") from exc
        if self._auth is not None and auth.peer != self._auth.peer:
            writer.close()
            raise HandshakeFailed(f"reconnected to peer {auth.peer}, was {self._auth.peer}")
        self._auth = auth
        self._lost.clear()
        self._bootstrap_pending = True
        self._connection = ControlConnection(
            reader,
            writer,
            auth,
            on_frame=self._on_frame,
            on_closed=self._on_closed,
            max_queued=self._max_queued,
            faults=None if self._faults is None else self._faults(auth.peer),
        )
        self._connection.start()

    async def _maintain(self) -> None:
        delay = self._backoff[0]
        while not self._closed:
            await self._lost.wait()
            if self.closing:
                return
            await asyncio.sleep(delay)
            try:
                await self._connect_once()
            except (HandshakeFailed, OSError):
                delay = min(delay * 2, self._backoff[1])
                continue
            delay = self._backoff[0]
            self._counters.reconnects += 1

    def _on_frame(self, kind: FrameKind, payload: bytes) -> None:
        assert self._connection is not None and self._auth is not None
        if self._bootstrap_pending:
            if kind is not FrameKind.SESSION:
                self._violation("the first frame must be the session bootstrap")
                return
            try:
                bootstrap = SessionBootstrap.decode(payload)
            except BootstrapError as exc:
                self._violation(str(exc))
                return
            self._bootstrap_pending = False
            self.bootstrap = bootstrap
            self._session_started(bootstrap, self._auth)
            return
        if kind is FrameKind.CREDIT:
            if self.endpoint is None:
                self._counters.unsupported += 1
                return
            events = self.endpoint.receive_message(payload, self._clock())
            _count_violations(self._counters, events)
            self.flush()
            self._hooks.credit_received(self)
        elif kind is FrameKind.DESCRIPTORS:
            self._hooks.descriptors(self, payload)
        else:
            self._violation(f"unexpected {kind.name} frame")

    def _violation(self, detail: str) -> None:
        self._counters.violations += 1
        if self._connection is not None:
            self._connection.close(f"protocol violation: {detail}")

    def _session_started(self, bootstrap: SessionBootstrap, auth: AuthenticatedPeer) -> None:
        endpoint = self.endpoint
        if endpoint is not None:
            now = self._clock()
            if not self._started_once:
                endpoint.connect(now)
            else:
                # DISABLED / LEGACY / FAILED have nothing to renegotiate
                with contextlib.suppress(LocalProtocolError):
                    endpoint.reconnect(now)
            if not bootstrap.credit_versions and endpoint.state is NegotiationState.NEGOTIATING:
                # An old peer: its bootstrap has no credit capability and it will never
                # answer an offer. Tell the endpoint what such a peer's answer would be, an
                # activation with no common version: OPTIONAL falls back to the bounded legacy
                # window, REQUIRED fails explicitly (the core decides which).
                events = endpoint.receive_message(_no_credit_activation(endpoint), now)
                _count_violations(self._counters, events)
        self._started_once = True
        self._hooks.session_started(self, bootstrap, auth)
        self.flush()

    def _on_closed(self) -> None:
        self._timer.cancel()
        if self.endpoint is not None and self._started_once:
            self.endpoint.disconnect(self._clock())
        self._hooks.session_lost(self)
        self._lost.set()

    def _on_timer(self) -> None:
        if self.endpoint is not None:
            self.endpoint.handle_timer(self._clock())
        self.flush()

    def flush(self) -> None:
        """Send what the endpoint queued; re-arm its timer. Call after every reservation,
        commit or completion (the engine does, once per dispatch pass)."""
        endpoint = self.endpoint
        connection = self._connection
        if endpoint is None or connection is None or connection.closed or self._bootstrap_pending:
            return
        now = self._clock()
        for message in endpoint.messages_to_send(now):
            connection.publish(FrameKind.CREDIT, message)
        self._timer.arm(endpoint.get_timer(), now)

    def drop_connection(self) -> None:
        """Close the current control connection (tests: a real disconnect; a reconnect follows)."""
        if self._connection is not None:
            self._connection.close("dropped locally")

    async def close(self) -> None:
        self._closed = True
        self._timer.cancel()
        self._lost.set()
        if self._connection is not None:
            self._connection.close("client closing")
        if self._maintainer is not None:
            self._maintainer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._maintainer
