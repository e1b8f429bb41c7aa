"""The receiver side of the TCP data path: one rail's listener (:class:`TcpDataServer`).

It accepts (paced under pressure, ``control/_listener``), keeps the connections that have not
bound yet at its door (``control/_door``: a newer one evicts the oldest), proves a bind on the
raw socket before any transport is built (``control/_preauth``; under TLS, on the transport),
holds each session's bound connections and retires them. What one connection does, from its
bind to its acknowledgements, is ``_connection.DataConnection``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl

from ...control import BIND, CHALLENGE_BYTES, PeerSession, check_bind, parse_bind
from ...control._door import Door, reads_before_connection_made
from ...control._errors import HandshakeFailed
from ...control._listener import (
    ACCEPT_BACKLOG,
    ACCEPT_BURST,
    ACCEPT_RATE,
    PacedListener,
    Pressure,
)
from ...control._preauth import RawPreAuth
from ...segments import Exposure, SegmentTable
from .._congestion import apply_congestion, check_congestion
from .._halves import DataPlane, DataServerStatistics
from ._connection import DataConnection, ServerStats

__all__ = ["DataPlane", "DataServerStatistics", "TcpDataServer"]


_Unbound = DataConnection | RawPreAuth[tuple[int, int]]
"""A connection at the data listener's door: a protocol (TLS) or a raw socket (the same union
as ``DataServerSide.door``'s)."""


def _evict(conn: _Unbound) -> None:
    conn.close()  # evicted by a newer unbound connection


class TcpDataServer:
    """One rail's data listener at the receiver. Loop-thread only."""

    def __init__(
        self,
        *,
        rail: int,
        segments: SegmentTable,
        plane: DataPlane,
        max_write_bytes: int = 64 << 20,
        ssl_context: ssl.SSLContext | None = None,
        bind_timeout_s: float = 5.0,
        max_unbound: int = 64,
        max_session_connections: int = 4,
        congestion_control: str | None = None,
    ) -> None:
        check_congestion(congestion_control)
        for name, value in (
            ("max_unbound", max_unbound),
            ("max_session_connections", max_session_connections),
        ):
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be an int >= 1: {value!r}")
        self.rail = rail
        self.max_unbound = max_unbound
        """Data connections that may wait for their bind at once; a newer one evicts the
        oldest (``control/_door``)."""
        self.max_session_connections = max_session_connections
        """Bound data connections one (peer, session) may hold on this rail; a bind past it is
        refused like a bad one."""
        self.segments = segments
        self.plane = plane
        self.max_write_bytes = max_write_bytes
        self.bind_timeout_s = bind_timeout_s
        self.ssl_context = ssl_context
        self.congestion_control = congestion_control
        """The data connections' TCP congestion control (``None``: the system's)."""
        self.start_tls = False  # set by listen: TLS on the accepted socket
        self._server: PacedListener | None = None
        self.door: Door[_Unbound] = Door(max_unbound, _evict)
        self._upgrades: set[asyncio.Task[None]] = set()
        self.pressure = Pressure(self.door)  # a full door, or many refused binds
        self._sessions: dict[tuple[int, int], set[DataConnection]] = {}
        self.stats = ServerStats()
        self.address: tuple[str, int] = ("", 0)

    async def listen(self, host: str, port: int) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        # TLS starts in connection_made, at the door and within the deadline; on a loop that
        # reads before connection_made (uvloop) asyncio runs it first, within the deadline only
        early_tls = self.ssl_context is not None and reads_before_connection_made(loop)
        self.start_tls = self.ssl_context is not None and not early_tls
        self._server = await PacedListener.listen(
            lambda: DataConnection(self),
            host,
            port,
            full=self.pressure,  # then accepts are paced (control/_listener)
            rate=ACCEPT_RATE,
            burst=ACCEPT_BURST,
            backlog=ACCEPT_BACKLOG,
            tls=self.ssl_context if early_tls else None,
            tls_timeout=self.bind_timeout_s if early_tls else None,
            raw=self._take if self.ssl_context is None else None,
            # accepted data sockets inherit it, and set up with it (not bbr's pacing)
            configure=lambda sock: apply_congestion(sock, self.congestion_control),
        )
        self.address = self._server.address()
        return self.address

    def _take(self, sock: socket.socket) -> None:
        # without TLS the bind runs on the raw socket (control/_preauth): a stranger costs no
        # transport; one is built only for a connection that proved its bind
        challenge = os.urandom(CHALLENGE_BYTES)
        self.stats.connections += 1
        conn = RawPreAuth(
            sock,
            first=challenge,
            need=BIND.size,
            step=lambda raw: self.check_bind(challenge, raw),
            done=self._taken,
            deadline_s=self.bind_timeout_s,
        )
        self.door.enter(conn)  # at most max_unbound wait; a newer one evicts the oldest

    def _taken(self, conn: RawPreAuth[tuple[int, int]], bound: tuple[int, int] | None) -> None:
        self.door.leave(conn)
        if bound is not None:
            task = asyncio.ensure_future(self._upgrade(conn.sock, bound))
            self._upgrades.add(task)
            task.add_done_callback(self._upgrades.discard)

    async def _upgrade(self, sock: socket.socket, bound: tuple[int, int]) -> None:
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: DataConnection(self, bound), sock
            )
        except (OSError, asyncio.CancelledError):
            sock.close()  # lost before its protocol ran, or the listener closing

    def check_bind(self, challenge: bytes, raw: bytes) -> tuple[int, int]:
        """``(peer, session)`` of the live control session a bind answer ``raw`` to
        ``challenge`` proves. Raises :class:`HandshakeFailed` (counted as a refused bind)."""
        try:
            peer, rail, mac = parse_bind(raw)
        except HandshakeFailed:
            self.bind_refused()
            raise
        bound = self.plane.bound_session(peer)
        if (
            bound is None
            or rail != self.rail
            or not self.may_bind(peer, bound[0])  # before the MAC: a quarantined peer is cheap
            or not check_bind(bound[1], challenge, peer, rail, mac)
        ):
            self.bind_refused()
            raise HandshakeFailed("bind refused")
        return peer, bound[0]

    def may_bind(self, peer: int, session: int) -> bool:
        """Whether ``(peer, session)`` may bind one more data connection: its session is the
        peer's live one, the peer is not quarantined, and it holds fewer than
        ``max_session_connections`` here (one per rail; a few more cover a reconnect that
        overlaps its predecessor's close, not a flood of bound sockets)."""
        bound = self.plane.bound_session(peer)
        return (
            bound is not None
            and bound[0] == session
            and not self.plane.quarantined(peer)
            and self.connections(peer, session) < self.max_session_connections
        )

    def bind_refused(self) -> None:
        self.stats.binds_refused += 1
        self.pressure.failed()  # enough of them pace the listener (control/_listener.Pressure)

    @property
    def unbound(self) -> int:
        """Data connections waiting for their bind (at most ``max_unbound``)."""
        return len(self.door)

    def bound(self, protocol: DataConnection) -> None:
        self.door.leave(protocol)
        self._sessions.setdefault((protocol.peer, protocol.session), set()).add(protocol)

    def forget(self, protocol: DataConnection) -> None:
        self.door.leave(protocol)
        held = self._sessions.get((protocol.peer, protocol.session))
        if held is not None:
            held.discard(protocol)
            if not held:
                del self._sessions[(protocol.peer, protocol.session)]

    def connections(self, peer: int, session: int) -> int:
        return len(self._sessions.get((peer, session), ()))

    async def retire(self, peer: int, session: int) -> None:
        """Close every data connection of ``(peer, session)``; return once all are gone (no
        byte of that session can land after this)."""
        held = list(self._sessions.get((peer, session), ()))
        for protocol in held:
            protocol.close()
        if held:
            # asyncio.wait, not gather: a retirement canceled midway (the control service
            # cancels its tasks as it closes) must not cancel the connections' own ``closed``
            # futures, or their connection_lost takes them as finished and never forgets them
            await asyncio.wait([p.closed for p in held])

    def statistics(self) -> DataServerStatistics:
        s = self.stats
        return DataServerStatistics(
            connections=s.connections,
            binds_refused=s.binds_refused,
            binds_evicted=self.door.evicted,
            writes_landed=s.landed,
            writes_refused=s.refused,
            integrity_errors=s.integrity,
            reads_served=s.reads,
            bytes_landed=s.bytes,
        )

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._upgrades):
            task.cancel()
        protocols = [*self.door, *(p for held in self._sessions.values() for p in held)]
        for conn in protocols:
            conn.close()
        protocols = [p for p in protocols if isinstance(p, DataConnection)]  # the raw: closed
        if protocols:  # waited for, never canceled (see retire)
            await asyncio.wait([p.closed for p in protocols], timeout=5.0)

    # ------------------------------------------------------------ ReceiverHalf protocol

    def start(self) -> None:
        """Nothing to start: the listener accepts from :meth:`listen` on."""
        return None

    def take_frame(self, session: PeerSession, payload: bytes) -> bool:
        """TCP takes no control frames (its setup is the bind on the data connection)."""
        return False

    def expose(self, exposure: Exposure) -> None:
        """Nothing to register: a TCP write lands through the segment table's check."""
        return None

    def revoke(self, exposure: Exposure) -> None:
        """Nothing registered to drop (the segment table already refuses the range)."""
        return None

    def allocate(self, length: int) -> memoryview | None:
        """Any buffer will do for TCP."""
        return None

    def data_statistics(self) -> DataServerStatistics | None:
        return self.statistics()
