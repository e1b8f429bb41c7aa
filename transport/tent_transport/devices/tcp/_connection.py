"""One data connection at the receiver (``DataConnection``): bind, admit, land straight into
the segment. Its listener is ``_receiver.TcpDataServer``.

Per data connection, in order (docs/transport_design.md#transport-rule-2,
docs/transport_design.md#transport-rule-3 and docs/transport_design.md#transport-rule-4):

1. **Bind.** The listener sends a fresh challenge; the first ``BIND.size`` bytes must prove the
   connection belongs to the sender's live, authenticated control session
   (:func:`~tent_transport.control.check_bind`). Anything else closes it before a single header
   is parsed. A quarantined peer cannot bind. Without TLS the bind is read from the raw
   socket, and a transport is built only once it is proven (``control/_preauth``).
2. **Header.** Exactly ``REQUEST.size`` bytes are read into a header buffer (``get_buffer``
   never offers more, so no payload byte is ever read into it). A malformed header, a length
   above ``max_write_bytes`` or a session other than the bound one closes the connection.
3. **Admission, before memory is touched.** The segment table must find the range inside a
   region exposed to this (peer, session) with the needed access, and a CREDITED write must be
   admitted by the credit core (:meth:`DataPlane.admit`). A refusal quarantines the sender,
   then is answered (best effort) and the connection closed; its payload is never read.
4. **Payload.** ``get_buffer`` hands asyncio the destination slice of the registered segment
   itself, so the payload lands with no intermediate copy.
5. **Verify, acknowledge.** CRC32C of the landed bytes against the header's; a mismatch fails
   the write (INTEGRITY ack, its charge released by the transport since no consumer will see
   it; :meth:`DataPlane.integrity_failed` quarantines a sender that keeps at it). Success is
   acknowledged and reported to :meth:`DataPlane.landed`.

6. **Flow control.** A peer that does not read its answers (a READ's payload, the
   acknowledgements) stops being read once the transport's buffer passes its high-water mark,
   until it drains: what one connection can make the receiver buffer stays bounded by one
   answer (at most ``max_write_bytes``) past the mark.

A header begun must be whole within ``bind_timeout_s`` of its first byte (slowloris after the
bind: a connection of a session may otherwise stall mid-header for ever).

A connection lost in the middle of a payload reports :meth:`DataPlane.aborted` for that write
(its bytes may be partial: never announced as landed).
"""

from __future__ import annotations

import asyncio
import collections
import os
import ssl
from typing import TYPE_CHECKING, Protocol, cast

import attrs

from ...control import BIND, CHALLENGE_BYTES, tune_socket
from ...control._errors import HandshakeFailed
from ...segments import Access, SegmentTable
from .._halves import DataPlane
from .._writes import REQUEST, Flags, Request, WireOpcode, checksum
from ._mark import ReadMark
from ._wire import Ack, AckStatus

if TYPE_CHECKING:
    from ...control._door import Door
    from ...control._preauth import RawPreAuth

__all__ = ["DataConnection", "DataServerSide", "ServerStats"]


class ServerStats:
    """What a data listener counts (``TcpDataServer.statistics``)."""

    def __init__(self) -> None:
        self.connections = 0
        self.binds_refused = 0
        self.landed = 0
        self.refused = 0
        self.integrity = 0
        self.reads = 0
        self.bytes = 0


_BIND, _HEADER, _PAYLOAD, _DEAD = range(4)


@attrs.define
class _Reply:
    """One acknowledgement in request order (``ack`` ``None``: a staged write still moving)."""

    ack: Ack | None = None
    payload: memoryview | None = None


class DataServerSide(Protocol):
    """What a connection uses of its listener (``TcpDataServer``)."""

    plane: DataPlane
    segments: SegmentTable
    stats: ServerStats
    door: Door[DataConnection | RawPreAuth[tuple[int, int]]]
    bind_timeout_s: float
    max_write_bytes: int
    ssl_context: ssl.SSLContext | None
    start_tls: bool

    def bind_refused(self) -> None: ...

    def check_bind(self, challenge: bytes, raw: bytes) -> tuple[int, int]: ...

    def may_bind(self, peer: int, session: int) -> bool: ...

    def bound(self, conn: DataConnection) -> None: ...

    def forget(self, conn: DataConnection) -> None: ...


class DataConnection(asyncio.BufferedProtocol):
    """One data connection; ``bound``: its bind was proven on the raw socket already
    (``TcpDataServer._take``), it starts at its first header."""

    def __init__(self, server: DataServerSide, bound: tuple[int, int] | None = None) -> None:
        self._server = server
        self._state = _BIND if bound is None else _HEADER
        self._small = bytearray(max(BIND.size, REQUEST.size))
        self._filled = 0
        self._challenge = os.urandom(CHALLENGE_BYTES)
        self._transport: asyncio.Transport | None = None
        self.peer, self.session = (-1, -1) if bound is None else bound
        self._request: Request | None = None
        self._dest: memoryview | None = None
        self._slot: int | None = None  # the staging slot of the write being received
        # acknowledgements leave in request order; a staged write's waits for its inner move
        self._acks: collections.deque[_Reply] = collections.deque()
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._deadline: asyncio.TimerHandle | None = None  # of the bind, then of a header begun
        self._tls: asyncio.Future[None] | None = None
        self._mark = ReadMark(None)  # paces payload reads (_mark.py; plaintext only)
        self.reading_paused = False
        """Reading stopped because the peer is not taking its answers (flow control)."""

    # --------------------------------------------------------------- asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a cast, not an isinstance check: uvloop's transports are not asyncio.Transport
        # subclasses, yet offer the same methods
        self._transport = cast(asyncio.Transport, transport)
        server = self._server
        if server.ssl_context is None:
            self._mark = ReadMark(transport.get_extra_info("socket"))
        if self._state == _HEADER:  # bound on the raw socket
            tune_socket(self._transport, 0)
            # the session may have been retired (or the peer quarantined, or its places
            # taken) while this transport was built
            if not server.may_bind(self.peer, self.session):
                server.bind_refused()
                self._fail("bind refused")
                return
            server.bound(self)
            return
        # at most max_unbound wait for their bind; past it the oldest waiting one is evicted
        # (control/_door), so a flood of idle connections never locks out an honest bind
        server.door.enter(self)
        tune_socket(self._transport, 0)
        server.stats.connections += 1
        # the deadline covers TLS's own handshake too: it starts at the TCP accept
        self._deadline = asyncio.get_running_loop().call_later(
            self._server.bind_timeout_s, self._fail, "bind timed out"
        )
        if server.ssl_context is None or not server.start_tls:
            self._transport.write(self._challenge)
        else:
            self._transport.pause_reading()  # the client hello is for TLS, not for get_buffer
            self._tls = asyncio.ensure_future(self._start_tls(server.ssl_context))

    async def _start_tls(self, context: ssl.SSLContext) -> None:
        raw = self._transport
        assert raw is not None
        try:
            tls = await asyncio.get_running_loop().start_tls(raw, self, context, server_side=True)
        except (OSError, ssl.SSLError, ConnectionError):
            tls = None
        if tls is None or tls.is_closing() or self._state == _DEAD:
            # failed, timed out or evicted mid-handshake: asyncio does not call
            # connection_lost for a connection whose TLS never came up
            raw.close()
            self.connection_lost(None)
            return
        self._transport = tls
        self._server.door.advance(self)  # it holds a certificate of our CA
        self._transport.write(self._challenge)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._state == _PAYLOAD:
            assert self._dest is not None
            return self._dest[self._filled :]
        need = BIND.size if self._state == _BIND else REQUEST.size
        if self._state == _DEAD:
            need = len(self._small)  # drained and ignored after a failure
            self._filled = 0
        return memoryview(self._small)[self._filled : need]

    def buffer_updated(self, nbytes: int) -> None:
        if self._state == _DEAD:
            return
        self._filled += nbytes
        if self._state == _BIND and self._filled == BIND.size:
            self._filled = 0
            self._on_bind(bytes(self._small[: BIND.size]))
        elif self._state == _HEADER:
            if self._filled == REQUEST.size:
                self._filled = 0
                if self._deadline is not None:
                    self._deadline.cancel()
                    self._deadline = None
                self._on_header(bytes(self._small[: REQUEST.size]))
            elif self._deadline is None:  # a header begun: whole within the deadline
                self._deadline = asyncio.get_running_loop().call_later(
                    self._server.bind_timeout_s, self._fail, "partial header timed out"
                )
        elif self._state == _PAYLOAD:
            assert self._dest is not None
            left = len(self._dest) - self._filled
            self._mark.left(left)
            if not left:
                self._filled = 0
                self._on_payload()

    def pause_writing(self) -> None:
        # The peer is not reading its answers (a READ's payload, acknowledgements): stop
        # reading its requests until it does. Otherwise every READ header would copy up to
        # max_write_bytes into the transport's buffer, and a peer that never reads could fill
        # the receiver's memory; paused, the buffer holds at most one answer past the mark.
        self.reading_paused = True
        if self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        self.reading_paused = False
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    def eof_received(self) -> bool | None:
        return None  # close

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed.done():
            return  # already finished (a TLS handshake that never came up)
        if self._deadline is not None:
            self._deadline.cancel()
        # an admitted write whose payload never came whole, whoever closed the connection
        # (the peer, or we: a retirement, a quarantine; _fail leaves _request set). Only the
        # state was checked once, and _fail sets it _DEAD: a write cut off by its session's
        # retirement kept its charge for good (each reconnect of a liar pinned one)
        if self._request is not None:
            request, self._request = self._request, None
            self._server.plane.aborted(
                self.peer, self.session, request, "connection lost mid-payload"
            )
            if self._slot is not None:
                self._server.plane.staging_free(self._slot)
                self._slot = None
        self._state = _DEAD
        self._dest = None
        self._server.forget(self)
        if not self.closed.done():
            self.closed.set_result(None)

    # --------------------------------------------------------------- steps

    def _fail(self, reason: str) -> None:
        self._state = _DEAD
        self._dest = None
        if self._transport is not None:
            self._transport.close()

    def _on_bind(self, raw: bytes) -> None:
        try:
            self.peer, self.session = self._server.check_bind(self._challenge, raw)
        except HandshakeFailed:
            self._fail("bind refused")
            return
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._server.bound(self)
        self._state = _HEADER

    def _refuse(self, request: Request | None, status: AckStatus, reason: str) -> None:
        # rule 2: quarantined, answered, closed; the payload is never read. The quarantine is
        # recorded before the answer is written, so a sender that hears the refusal finds it in
        # place (its session's retirement, which closes this connection, is a later task)
        self._server.stats.refused += 1
        self._server.plane.refused(self.peer, self.session, request, reason)
        if request is not None and self._transport is not None:
            self._transport.write(
                Ack(status=status, checksum=0, request=request.request, length=0).pack()
            )
        self._fail(reason)

    def _on_header(self, raw: bytes) -> None:
        server = self._server
        request = Request.unpack(raw)
        if request is None:
            self._refuse(None, AckStatus.MALFORMED, "malformed data header")
            return
        if request.length == 0 or request.length > server.max_write_bytes:
            self._refuse(request, AckStatus.MALFORMED, f"length {request.length} out of bounds")
            return
        if request.session != self.session:
            self._refuse(request, AckStatus.ACCESS, f"header names session {request.session}")
            return
        access = Access.WRITE if request.opcode == WireOpcode.WRITE else Access.READ
        view = server.segments.check(
            self.peer,
            self.session,
            segment_id=request.segment,
            offset=request.offset,
            length=request.length,
            access=access,
        )
        if view is None:
            self._refuse(request, AckStatus.ACCESS, "outside every region exposed to the peer")
            return
        if request.opcode == WireOpcode.READ:
            self._serve_read(request, view)
            return
        reason = server.plane.admit(self.peer, self.session, request)
        if reason is not None:
            self._refuse(request, AckStatus.REFUSED, reason)
            return
        if request.flags & Flags.STAGED:
            # the target was checked above; the bytes land in a staging slot first
            slot = server.plane.staging_slot(request)
            if slot is None:
                server.plane.aborted(self.peer, self.session, request, "no staging slot")
                self._refuse(request, AckStatus.REFUSED, "no staging pool slot for it")
                return
            self._slot, view = slot
        self._request = request
        self._dest = view
        self._state = _PAYLOAD
        self._mark.payload(request.length)

    def _on_payload(self) -> None:
        request, dest = self._request, self._dest
        assert request is not None and dest is not None
        self._request = None
        self._dest = None
        self._state = _HEADER
        server = self._server
        slot, self._slot = self._slot, None
        if checksum(dest) != request.checksum:
            server.stats.integrity += 1
            self._ack(request, AckStatus.INTEGRITY)
            server.plane.integrity_failed(self.peer, self.session, request)
            if slot is not None:
                server.plane.staging_free(slot)
            return
        server.stats.landed += 1
        server.stats.bytes += request.length
        if slot is not None:
            entry = _Reply()
            self._acks.append(entry)

            def finish(ok: bool) -> None:
                status = AckStatus.OK if ok else AckStatus.ACCESS
                entry.ack = Ack(status=status, checksum=0, request=request.request, length=0)
                self._flush_acks()

            server.plane.staged(self.peer, self.session, request, slot, finish)
            return
        # the consumer hears of it before the sender's acknowledgement leaves
        server.plane.landed(self.peer, self.session, request)
        self._ack(request, AckStatus.OK)

    def _ack(self, request: Request, status: AckStatus, payload: memoryview | None = None) -> None:
        ack = Ack(
            status=status,
            checksum=0 if payload is None else checksum(payload),
            request=request.request,
            length=0 if payload is None else len(payload),
        )
        self._acks.append(_Reply(ack=ack, payload=payload))
        self._flush_acks()

    def _flush_acks(self) -> None:
        while self._acks and self._acks[0].ack is not None:
            reply = self._acks.popleft()
            assert reply.ack is not None
            if self._transport is not None and not self._transport.is_closing():
                self._transport.write(reply.ack.pack())
                if reply.payload is not None:
                    self._transport.write(reply.payload)

    def _serve_read(self, request: Request, view: memoryview) -> None:
        self._server.stats.reads += 1
        self._ack(request, AckStatus.OK, view)  # in order, also behind a staged write

    def close(self) -> None:
        self._fail("closed locally")
