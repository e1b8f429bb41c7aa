"""The control service: pumps the sans-IO credit endpoints over authenticated connections.

The driver is aioquic's shape (docs/transport_design.md#layers): feed each received frame into the
endpoint, send what it queues, re-arm ``get_timer()``. One control connection per (sender, receiver)
pair, opened by the sender (:class:`ControlClient`) to the receiver (:class:`ControlServer`).

Lifecycle and fencing (docs/transport_design.md#leases):

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
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, cast

import attrs

from tent_credit import CreditReceiver, ReceiverEndpoint
from tent_credit.errors import CreditError

from ._bootstrap import SessionBootstrap
from ._common import (
    FaultFactory,
    Identity,
    ServiceStatistics,
    _count_violations,
    _Counters,
    _Timer,
)
from ._connection import ControlConnection
from ._door import Door, reads_before_connection_made
from ._errors import HandshakeFailed
from ._frames import FrameKind
from ._handshake import (
    HELLO_BYTES,
    PROOF_BYTES,
    AuthenticatedPeer,
    PskIdentity,
    PskServerSteps,
    TlsIdentity,
    server_handshake,
)
from ._listener import ACCEPT_BACKLOG, ACCEPT_BURST, ACCEPT_RATE, PacedListener, Pressure
from ._preauth import More, RawPreAuth
from ._rate import ControlRate
from ._repeats import RepeatHold

__all__ = ["ControlServer", "PeerSession", "ReceiverHooks"]

_UPDATE_BACKOFF = (1_000_000, 200_000_000)
"""An unchanged update without a freshness TTL (a stalled sender told again that nothing
freed) waits 1 ms, 2 ms, ... up to 200 ms after the last one (issue 13: every release pushed
one to every stalled sender, each waking a sender process to learn nothing)."""


def _frames_of(ps: PeerSession) -> tuple[int, int]:
    """A session's control frames (sent and received) and its endpoint's repeated updates."""
    stats = ps.connection.statistics()
    repeated = 0 if ps.endpoint is None else ps.endpoint.statistics().updates_repeated
    return stats.frames_sent + stats.frames_received, repeated


# --------------------------------------------------------------------------- receiver side


_Waiting = asyncio.Transport | RawPreAuth[AuthenticatedPeer]
"""A connection at the control listener's door: a transport (TLS) or a raw socket (PSK)."""


def _close(raw: _Waiting) -> None:
    raw.close()  # its handshake then fails (a transport's on the closed stream) and is counted


class _Accepted(asyncio.Protocol):
    """A connection just accepted: reading pauses until its handshake task takes it over, and
    any bytes that came first (uvloop) are kept for it."""

    def __init__(self, accepted: Callable[[asyncio.Transport, bytearray], None]) -> None:
        self._accepted = accepted
        self._early = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        raw = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport subclasses
        raw.pause_reading()
        self._accepted(raw, self._early)

    def data_received(self, data: bytes) -> None:
        if len(self._early) < 4096:  # a hello is 47 bytes; more is not waited for
            self._early += data


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
    repeats: RepeatHold = attrs.field(factory=lambda: RepeatHold(*_UPDATE_BACKOFF, updates=True))
    """Holds back updates that only repeat the last one sent on this connection (``_repeats``)."""


class ReceiverHooks(Protocol):
    def session_opened(self, session: PeerSession) -> None:
        """A sender's new session is live (publish its descriptors, accept its data binds)."""

    def retire_session(self, peer: int, session: int) -> Awaitable[None]:
        """Close the session's data connections and revoke its exposures; resolve once no byte
        of it can still land."""

    def admit_peer(self, peer: int) -> bool:
        """Whether an authenticated peer may open a session (``False``: quarantined)."""

    def flooded(self, peer: int) -> None:
        """The peer kept over its control-frame rate (``_rate``): its connection is closed;
        quarantine it as for any other peer fault."""


class ControlServer:
    """The receiver's control listener (one :class:`PeerSession` per connected sender).

    ``credit`` is the receiver's :class:`CreditReceiver` (``None``: credit disabled, CREDIT
    frames are ignored and counted). ``rails`` is called for the data listeners' addresses when a
    bootstrap is sent. ``handshake_timeout_s`` bounds a handshake (TLS's included) and, after
    it, each frame from its first byte; ``max_pending_handshakes`` the connections that wait
    for theirs (``_door``: a newcomer past it evicts the one idle longest); ``control_rate``
    ``(frames per second, burst, flood seconds)`` what each session's frames may cost
    (``_rate``: over it the connection is not read; a peer that keeps at it is closed and
    :meth:`ReceiverHooks.flooded`).
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
        max_pending_handshakes: int = 64,
        control_rate: tuple[float, int, float] = (2_000.0, 4_000, 5.0),
        partial_hold_ns: int = 0,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        if type(partial_hold_ns) is not int or partial_hold_ns < 0:
            raise ValueError(f"partial_hold_ns must be an int >= 0: {partial_hold_ns!r}")
        if type(max_pending_handshakes) is not int or max_pending_handshakes < 1:
            raise ValueError(
                f"max_pending_handshakes must be an int >= 1: {max_pending_handshakes!r}"
            )
        self._tls = identity.server_context if isinstance(identity, TlsIdentity) else None
        self._start_tls = False  # set by listen: TLS on the accepted socket (see there)
        self._identity = identity
        self._credit = credit
        self._rails = rails
        self._hooks = hooks
        self._qos = qos_class
        self._faults = faults
        self._timeout = handshake_timeout_s
        self._max_queued = max_queued
        ControlRate(*control_rate[:2], flood_s=control_rate[2])  # validates, raises ValueError
        self._control_rate = control_rate
        self._throttled = 0  # of sessions no longer in _sessions
        # strangers wait here until their handshake succeeds: bounded, oldest evicted (_door)
        self._door: Door[_Waiting] = Door(max_pending_handshakes, _close)
        self._pressure = Pressure(self._door)  # a full door, or many failed handshakes
        self._clock = clock
        self._sessions: dict[int, PeerSession] = {}
        # session numbers grow across restarts too (microseconds of wall clock at start), so
        # a sender tells a restarted receiver's session from the one it lost
        self._ids = itertools.count(max(1, time.time_ns() // 1000))
        self._server: PacedListener | None = None
        self._timer = _Timer(self.flush)
        # the credit core's held partial grant (CreditReceiver.partial_waiting): granted
        # once it has waited this long for its key's own release (flush arms it)
        self._partial_hold = partial_hold_ns
        self._hold_timer = _Timer(self._hold_ran_out)
        self._flush_soon: asyncio.Handle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._counters = _Counters()
        self._retired_frames = (0, 0)

    async def listen(self, host: str, port: int) -> tuple[str, int]:
        """Start listening; returns the bound address."""
        # TLS starts in _handshake, so a connection waits at the door (and within the
        # deadline) from its TCP accept on, TLS handshake included; on a loop that reads
        # before connection_made (uvloop) asyncio runs TLS first, within the deadline only
        loop = asyncio.get_running_loop()
        early_tls = None if self._tls is None else reads_before_connection_made(loop)
        self._start_tls = early_tls is False
        self._server = await PacedListener.listen(
            lambda: _Accepted(self._accepted),
            host,
            port,
            full=self._pressure,  # then accepts are paced (_listener)
            rate=ACCEPT_RATE,
            burst=ACCEPT_BURST,
            backlog=ACCEPT_BACKLOG,
            tls=self._tls if early_tls else None,
            tls_timeout=self._timeout if early_tls else None,
            raw=self._take if isinstance(self._identity, PskIdentity) else None,
        )
        return self._server.address()

    def session_of(self, peer: int) -> PeerSession | None:
        """The peer's current (live) session, or ``None``."""
        ps = self._sessions.get(peer)
        return ps if ps is not None and ps.current else None

    def sessions(self) -> tuple[PeerSession, ...]:
        return tuple(ps for ps in self._sessions.values() if ps.current)

    def statistics(self) -> ServiceStatistics:
        self._counters.handshakes_evicted = self._door.evicted
        self._counters.throttled = self._throttled + sum(
            ps.connection.rate.throttled
            for ps in self._sessions.values()
            if ps.connection.rate is not None
        )
        return self._counters.snapshot()

    def control_frames(self) -> tuple[int, int]:
        """``(frames, updates_repeated)`` over every session this server has held, retired
        ones included: control frames sent and received on their connections, and updates that
        repeated the previous one to their sender (the incast record's receiver-side count)."""
        frames, repeated = self._retired_frames
        for ps in self._sessions.values():
            if not ps.retiring:
                f, r = _frames_of(ps)
                frames, repeated = frames + f, repeated + r
        return frames, repeated

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def pending_handshakes(self) -> int:
        """Connections accepted whose handshake has not finished yet."""
        return len(self._door)

    def _accepted(self, raw: asyncio.Transport, early: bytearray) -> None:
        self._spawn(self._on_connect(raw, early))

    def _take(self, sock: socket.socket) -> None:
        # PSK: the handshake runs on the raw socket (_preauth), the same steps as
        # server_handshake's; a transport is built only for a peer that proved its key
        steps = PskServerSteps(
            cast(PskIdentity, self._identity),
            on_hello=lambda: self._door.advance(conn),
            admit=self._hooks.admit_peer,
        )

        def step(data: bytes) -> More | AuthenticatedPeer:
            return steps.proof(data) if steps.greeted else More(steps.hello(data), PROOF_BYTES)

        conn = RawPreAuth(
            sock, first=b"", need=HELLO_BYTES, step=step, done=self._taken, deadline_s=self._timeout
        )
        self._door.enter(conn)  # at most max_pending_handshakes wait, as on the TLS path

    def _taken(self, conn: RawPreAuth[AuthenticatedPeer], auth: AuthenticatedPeer | None) -> None:
        self._door.leave(conn)
        if auth is None or not self._hooks.admit_peer(auth.peer):
            if auth is not None:  # else closed already
                conn.sock.close()
            self._handshake_failed()
            return
        self._spawn(self._upgrade(conn.sock, auth))

    async def _upgrade(self, sock: socket.socket, auth: AuthenticatedPeer) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        try:
            transport, protocol = await loop.connect_accepted_socket(
                lambda: asyncio.StreamReaderProtocol(reader), sock
            )
        except asyncio.CancelledError:
            sock.close()  # the server closing
            raise
        except OSError:
            sock.close()
            self._handshake_failed()
            return
        self._counters.accepted += 1
        self._open(reader, asyncio.StreamWriter(transport, protocol, reader, loop), auth)

    async def _on_connect(self, raw: asyncio.Transport, early: bytearray) -> None:
        # at most max_pending_handshakes wait; a newcomer past it evicts the one that made
        # progress longest ago (_door)
        self._door.enter(raw)
        try:
            reader, writer, auth = await asyncio.wait_for(
                self._handshake(raw, early), self._timeout
            )
        except (HandshakeFailed, TimeoutError, ConnectionError, OSError, ssl.SSLError):
            # rule 3: closed before any frame of it is decoded
            self._handshake_failed()
            raw.close()
            return
        finally:
            self._door.leave(raw)
        if raw.is_closing():  # evicted (or lost) as the handshake completed
            self._handshake_failed()
            return
        if not self._hooks.admit_peer(auth.peer):
            self._handshake_failed()
            writer.close()
            return
        self._counters.accepted += 1
        self._open(reader, writer, auth)

    def _handshake_failed(self) -> None:
        self._counters.handshakes_failed += 1
        self._pressure.failed()  # enough of them pace the listener (_listener.Pressure)

    async def _handshake(
        self, raw: asyncio.Transport, early: bytearray
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, AuthenticatedPeer]:
        # the streams asyncio.start_server would build, but only now: nothing was read from
        # the socket before, so TLS can start on it (its client hello is still unread)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        protocol = asyncio.StreamReaderProtocol(reader)
        if raw.is_closing():
            raise ConnectionError("closed before its handshake started")
        transport: asyncio.Transport = raw
        if self._start_tls and self._tls is not None:
            tls = await loop.start_tls(raw, protocol, self._tls, server_side=True)
            if tls is None:  # closed (evicted) during the TLS handshake
                raise ConnectionError("closed during the TLS handshake")
            transport = tls
            self._door.advance(raw)  # it holds a certificate of our CA
            protocol.connection_made(transport)
        else:
            raw.set_protocol(protocol)
            protocol.connection_made(raw)
            if early:
                reader.feed_data(bytes(early))
            raw.resume_reading()
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        auth = await server_handshake(
            reader,
            writer,
            self._identity,
            on_hello=lambda: self._door.advance(raw),
            # a quarantined peer's reconnects end at their hello: no MAC, no door progress
            admit=self._hooks.admit_peer,
        )
        return reader, writer, auth

    def _open(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, auth: AuthenticatedPeer
    ) -> None:
        peer = auth.peer
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
            partial_frame_s=self._timeout,  # a frame begun: whole within the handshake's time
            rate=ControlRate(*self._control_rate[:2], flood_s=self._control_rate[2]),
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
        self._supersede(ps)
        bootstrap = SessionBootstrap(
            session=ps.session,
            credit_versions=() if self._credit is None else self._credit.versions,
            rails=tuple(self._rails()),
        )
        connection.publish(FrameKind.SESSION, bootstrap.encode())
        connection.start()
        self._hooks.session_opened(ps)
        self.flush()

    def _supersede(self, ps: PeerSession) -> None:
        """Make ``ps`` its peer's session, retiring the one it replaces.

        Its own method, so that no frame of the code that goes on to publish on ``ps`` holds
        the old session: a write that fails there (the peer already gone) keeps its traceback,
        and with it those frames, in the new connection's reader, and each reconnect then kept
        every session before it alive (found by the abuse benchmark's growing memory)."""
        old = self._sessions.get(ps.peer)
        self._sessions[ps.peer] = ps
        if old is None:
            return
        if old.connection.rate is not None:
            self._throttled += old.connection.rate.throttled  # its count outlives it
        if old.current:
            # a reconnect while the old connection still looked alive (a sender restart):
            # accept() fenced the old epoch already
            old.current = False
            old.connection.close("superseded by a new connection")
            self._retire(old, fenced_epoch=old.epoch)

    def _on_frame(self, ps: PeerSession, kind: FrameKind, payload: bytes) -> None:
        verbs = getattr(self._hooks, "verbs_frame", None)
        if kind is FrameKind.VERBS and verbs is not None:
            verbs(ps, payload)  # the verbs exchange (the hook validates and fails closed)
            return
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
        # at once, not deferred to the end of a batch: what this frame made the endpoint send
        # (an activation) must precede what the hooks publish next (the verbs rkeys)
        self.flush()

    def _on_closed(self, ps: PeerSession) -> None:
        rate = ps.connection.rate
        if rate is not None and rate.flooding:  # RFC: per-peer update frequency is bounded
            self._counters.floods += 1
            self._hooks.flooded(ps.peer)
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
        f, r = _frames_of(ps)
        self._retired_frames = (self._retired_frames[0] + f, self._retired_frames[1] + r)

        async def retire() -> None:
            await self._hooks.retire_session(ps.peer, ps.session)
            # docs/transport_design.md#leases: only now can no byte of the old session land
            if self._credit is not None and fenced_epoch:
                with contextlib.suppress(CreditError):
                    self._credit.fence_complete(ps.peer, self._qos, fenced_epoch)
                    self._counters.fences_completed += 1
                self.flush()

        self._spawn(retire())

    def flush_soon(self) -> None:
        """:meth:`flush` once the loop's current callback is done (many calls, one flush).

        For what the credit core decided in the middle of a data callback: an admitted write
        counts as landed, so its key's top-up may be due at once. A flush there would write
        that update before the rest of the callback (a small write's landing, its release and
        acknowledgement), and the sender would wake twice where once does; deferred, it leaves
        with the release's update, or right after the header of a large write, whose payload
        takes many callbacks more."""
        if self._flush_soon is None:
            self._flush_soon = asyncio.get_running_loop().call_soon(self._flush_now)

    def _flush_now(self) -> None:
        self._flush_soon = None
        self.flush()

    def flush(self) -> None:
        """Send what the endpoints queued; re-arm the refresh timer."""
        if self._credit is None:
            return
        if self._flush_soon is not None:  # this flush sends what that one would have
            self._flush_soon.cancel()
            self._flush_soon = None
        now = self._clock()
        credit = self._credit
        if credit.partial_waiting:
            # kept when armed: the hold counts from the first flush that found a head held
            self._hold_timer.arm(now + self._partial_hold, now)
        due = credit.take_due()
        if not credit.refresh_interval_ns:
            # no refresh timer: only the endpoints that became due can owe anything
            for owing in due:
                ps = self._sessions.get(owing.sender_peer)
                if ps is not None and ps.endpoint is owing and ps.current:
                    self._send(ps, owing, now)
            return
        # only the endpoints of our connections: the receiver may hold others (the staging
        # path's in-process endpoint), whose messages are not ours to take
        timers = []
        for ps in self._sessions.values():
            endpoint = ps.endpoint
            if endpoint is None or not ps.current or endpoint.closed:
                continue
            self._send(ps, endpoint, now)
            if (when := endpoint.get_timer()) is not None:
                timers.append(when)
        self._timer.arm(min(timers, default=None), now)

    def _hold_ran_out(self) -> None:
        if self._credit is not None:
            # flushed even when nothing was granted: the pass may have left another head held,
            # whose hold this flush arms
            self._credit.grant_partial()
            self.flush()

    def _send(self, ps: PeerSession, endpoint: ReceiverEndpoint, now: int) -> None:
        ahead = endpoint.ahead  # version 2 sends only news: nothing to hold back
        for message in endpoint.messages_to_send(now):
            if not ahead and not ps.repeats.admit(message, now):
                continue
            if not ps.connection.publish(FrameKind.CREDIT, message) and not ahead:
                ps.repeats.refused()

    async def close(self) -> None:
        self._timer.cancel()
        self._hold_timer.cancel()
        if self._flush_soon is not None:
            self._flush_soon.cancel()
            self._flush_soon = None
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        for conn in self._door:  # those still proving nothing
            conn.close()
        for ps in list(self._sessions.values()):
            ps.connection.close("server closing")
        for task in list(self._tasks):
            task.cancel()
