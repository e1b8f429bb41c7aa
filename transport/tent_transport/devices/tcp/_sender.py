"""The sender side of the TCP data path: :class:`TcpRail`, a :class:`Device` over TCP.

One rail holds one data connection per peer (docs/transport_design.md#transport-rule-6), opened by
:meth:`TcpRail.attach` and bound to the authenticated control session before it carries anything.
:meth:`post` writes each slice's header (with the payload's CRC32C and its lease) and then the
payload; the receiver's acknowledgements arrive in posting order and complete the slices. A READ's
payload is received straight into the slice's local buffer and verified. Every posted slice
completes exactly once: a lost connection completes all of its outstanding slices as FLUSHED.

Budgets (docs/transport_design.md#transport-rule-7): ``post_budget(peer) = min(free completion
slots, max_qp_wr - outstanding on that connection)``, and 0 while the connection is not ready.
Posted payloads are not copied: the connection keeps views of the callers' buffers until the bytes
are sent (the handle holds the buffer until the acknowledgement anyway, rule 5). Plaintext
connections run on :class:`~._raw.RawSocketTransport`, which sends from those views (payloads on a
send thread of its own, so the kernel's copy overlaps the loop's work); TLS ones on asyncio's SSL
transport, fed in chunks while its buffer is nearly empty.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import cast

import attrs

from ...control import BIND, CHALLENGE_BYTES, data_bind_proof, tune_socket
from ...errors import ConnectionLost, HandshakeFailed, InvalidArgument, PostRefused
from .._base import Opcode, SliceCompletion, SliceRequest, SliceStatus
from .._congestion import check_congestion
from .._halves import AttachFailed, RailStatistics, SessionContext
from ._mark import ReadMark
from ._raw import RawSocketTransport, connect_socket, open_raw_connection
from ._send_thread import send_thread_by_default
from ._wire import ACK, Ack, AckStatus, Request, checksum

__all__ = ["RailStatistics", "TcpRail"]

_ACK_STATUS = {
    AckStatus.REFUSED: SliceStatus.WRITE_REFUSED,
    AckStatus.ACCESS: SliceStatus.REMOTE_ACCESS_ERROR,
    AckStatus.INTEGRITY: SliceStatus.INTEGRITY_ERROR,
    AckStatus.MALFORMED: SliceStatus.TRANSPORT_ERROR,
}


@attrs.define(eq=False)
class _Pending:
    wr_id: int
    opcode: Opcode
    length: int
    local: memoryview


_CHALLENGE, _ACKS, _READ_PAYLOAD, _DEAD = range(4)
_CHUNK = 1 << 20


class _ClientProtocol(asyncio.BufferedProtocol):
    """One data connection: challenge → bind → acknowledgements (and READ payloads)."""

    def __init__(self, rail: TcpRail, peer: int) -> None:
        self._rail = rail
        self.peer = peer
        self._state = _CHALLENGE
        self._small = bytearray(max(ACK.size, CHALLENGE_BYTES))
        self._filled = 0
        self._transport: asyncio.Transport | None = None
        self._zero_copy = False
        self.challenge: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.outstanding: collections.deque[_Pending] = collections.deque()
        # our own send queue of views into the callers' buffers: asyncio's transport buffer
        # is a bytearray that copies and memmoves what it holds, so it is fed in chunks only
        # while it is nearly empty (no copy at all when the socket takes the chunk at once)
        self._sendq: collections.deque[memoryview] = collections.deque()
        self.paused = False
        self.ready = False
        self._read_ack: Ack | None = None
        self._read_dest: memoryview | None = None
        self._mark = ReadMark(None)  # paces a READ answer's payload (_mark.py; plaintext only)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a cast, not an isinstance check: uvloop's transports are not asyncio.Transport
        # subclasses, yet offer the same methods
        self._transport = cast(asyncio.Transport, transport)
        transport = self._transport
        # the plaintext transport keeps views itself: no chunking, no pausing needed
        self._zero_copy = isinstance(transport, RawSocketTransport)
        tune_socket(transport, 0)
        sock = transport.get_extra_info("socket")
        if self._zero_copy:  # plaintext: the socket's bytes are the payload's
            self._mark = ReadMark(sock)
        if sock is not None and self._rail.send_buffer_bytes:
            # A kernel send buffer that holds a whole slice takes each chunk at once, so little
            # of a payload is ever copied into (and memmoved out of) asyncio's transport buffer:
            # measured on loopback, 26 % of the payload bytes with the autotuned default, 5-10 %
            # with 4 MiB (the kernel caps it at net.core.wmem_max).
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._rail.send_buffer_bytes)
        transport.set_write_buffer_limits(high=_CHUNK, low=_CHUNK // 4)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._state == _READ_PAYLOAD:
            assert self._read_dest is not None
            return self._read_dest[self._filled :]
        need = CHALLENGE_BYTES if self._state == _CHALLENGE else ACK.size
        if self._state == _DEAD:
            self._filled = 0
            need = len(self._small)
        return memoryview(self._small)[self._filled : need]

    def buffer_updated(self, nbytes: int) -> None:
        if self._state == _DEAD:
            return
        self._filled += nbytes
        if self._state == _CHALLENGE and self._filled == CHALLENGE_BYTES:
            self._filled = 0
            self._state = _ACKS
            if not self.challenge.done():
                self.challenge.set_result(bytes(self._small[:CHALLENGE_BYTES]))
        elif self._state == _ACKS and self._filled == ACK.size:
            self._filled = 0
            self._on_ack(Ack.unpack(bytes(self._small[: ACK.size])))
        elif self._state == _READ_PAYLOAD:
            assert self._read_dest is not None
            left = len(self._read_dest) - self._filled
            self._mark.left(left)
            if not left:
                self._filled = 0
                self._on_read_payload()

    def _on_ack(self, ack: Ack | None) -> None:
        head = self.outstanding[0] if self.outstanding else None
        if ack is None or head is None or ack.request != head.wr_id:
            self._fail("unexpected acknowledgement")  # completions stay in order, or none do
            return
        if ack.status is AckStatus.OK and head.opcode is Opcode.READ:
            if ack.length != head.length:
                self._fail("READ acknowledgement of the wrong length")
                return
            self._read_ack = ack
            self._read_dest = head.local
            self._state = _READ_PAYLOAD
            self._mark.payload(ack.length)
            return
        self.outstanding.popleft()
        status = SliceStatus.SUCCESS if ack.status is AckStatus.OK else _ACK_STATUS[ack.status]
        detail = "" if status.moved else f"receiver answered {ack.status.name}"
        self._rail._complete(head, status, detail)

    def _on_read_payload(self) -> None:
        ack, dest = self._read_ack, self._read_dest
        assert ack is not None and dest is not None
        self._read_ack = None
        self._read_dest = None
        self._state = _ACKS
        head = self.outstanding.popleft()
        if checksum(dest) != ack.checksum:
            self._rail._complete(head, SliceStatus.INTEGRITY_ERROR, "READ checksum mismatch")
        else:
            self._rail._bytes_read += head.length
            self._rail._complete(head, SliceStatus.SUCCESS, "")

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._pump_send()

    def _pump_send(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        queue = self._sendq
        while queue and not self.paused:
            head = queue[0]
            if len(head) <= _CHUNK:
                queue.popleft()
                transport.write(head)
            else:
                queue[0] = head[_CHUNK:]
                transport.write(head[:_CHUNK])

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._state = _DEAD
        self.ready = False
        if not self.challenge.done():
            self.challenge.set_exception(ConnectionLost("data connection closed before bind"))
        # every outstanding slice completes exactly once
        while self.outstanding:
            self._rail._complete(self.outstanding.popleft(), SliceStatus.FLUSHED, "connection lost")
        self._rail._lost(self)
        if not self.closed.done():
            self.closed.set_result(None)

    def _fail(self, reason: str) -> None:
        if self._transport is not None:
            self._transport.close()

    def write(self, data: bytes | memoryview) -> None:
        """Queue ``data`` (a view is kept, not copied: the slice owns the buffer until its
        completion) and send what the socket takes now."""
        if self._zero_copy:
            assert self._transport is not None
            self._transport.write(data)
            return
        self._sendq.append(data if isinstance(data, memoryview) else memoryview(data))
        if not self.paused:
            self._pump_send()

    def close(self) -> None:
        self._fail("closed locally")


class TcpRail:
    """A rail of TCP data connections, one per peer (a :class:`Device`). Loop-thread only,
    except :meth:`set_wakeup`'s callback, which it calls from the loop."""

    def __init__(
        self,
        name: str,
        *,
        rail: int = 0,
        link_speed_gbps: float = 0.0,
        max_qp_wr: int = 256,
        cq_slots: int = 4096,
        ssl_context: ssl.SSLContext | None = None,
        send_buffer_bytes: int = 4 << 20,
        send_thread: bool | None = None,
        congestion_control: str | None = None,
    ) -> None:
        check_congestion(congestion_control)
        if type(send_buffer_bytes) is not int or send_buffer_bytes < 0:
            raise InvalidArgument(f"send_buffer_bytes must be an int >= 0: {send_buffer_bytes!r}")
        if send_thread is not None and type(send_thread) is not bool:
            raise InvalidArgument(f"send_thread must be a bool or None: {send_thread!r}")
        self.send_buffer_bytes = send_buffer_bytes
        """``SO_SNDBUF`` of each data connection (0: the kernel's autotuned default)."""
        self.send_thread = send_thread_by_default() if send_thread is None else send_thread
        """Plaintext connections send payloads on a thread of their own (``_send_thread``):
        the kernel's copy leaves the loop thread, which measured half its CPU per 4 MiB block
        (``None``: only with more than two CPUs, :func:`send_thread_by_default`)."""
        self.congestion_control = congestion_control
        """The data connections' TCP congestion control (``None``: the system's)."""
        self._name = name
        self.rail = rail
        self._speed = link_speed_gbps
        self._max_qp_wr = max_qp_wr
        self._cq_slots = cq_slots
        self._ssl = ssl_context
        self._peers: dict[int, _ClientProtocol] = {}
        self._sessions: dict[int, int] = {}
        self._completions: collections.deque[SliceCompletion] = collections.deque()
        self._in_flight = 0
        self._wakeup: Callable[[], None] | None = None
        self.on_lost: Callable[[int], None] | None = None
        """Called with the peer when an attached data connection closed on its own."""
        self._posted = 0
        self._completed = 0
        self._failed = 0
        self._flushed = 0
        self._bytes_sent = 0
        self._bytes_read = 0

    # --------------------------------------------------------------- Device protocol

    @property
    def name(self) -> str:
        return self._name

    @property
    def link_speed_gbps(self) -> float:
        return self._speed

    def post_budget(self, peer: int) -> int:
        protocol = self._peers.get(peer)
        if protocol is None or not protocol.ready:
            return 0
        cq_free = self._cq_slots - self._in_flight - len(self._completions)
        return max(0, min(cq_free, self._max_qp_wr - len(protocol.outstanding)))

    def post(self, slices: Sequence[SliceRequest], now_ns: int) -> None:
        if not slices:
            return
        peer = slices[0].peer
        if any(s.peer != peer for s in slices):
            raise PostRefused("a post names more than one peer", ready=True)
        budget = self.post_budget(peer)
        if len(slices) > budget:
            raise PostRefused(f"{len(slices)} slices over the budget of {budget}", ready=budget > 0)
        protocol = self._peers[peer]
        session = self._sessions[peer]
        # build every header first: a malformed lease refuses the whole post, nothing sent
        headers = [self._header(s, session) for s in slices]
        for s, header in zip(slices, headers, strict=True):
            protocol.outstanding.append(
                _Pending(wr_id=s.wr_id, opcode=s.opcode, length=s.length, local=s.local)
            )
            protocol.write(header)
            if s.opcode is Opcode.WRITE:
                protocol.write(s.local)
                self._bytes_sent += s.length
        self._in_flight += len(slices)
        self._posted += len(slices)

    @staticmethod
    def _header(s: SliceRequest, session: int) -> bytes:
        return Request.for_slice(s, session).pack()

    def poll(self, max_entries: int, now_ns: int) -> list[SliceCompletion]:
        out: list[SliceCompletion] = []
        while self._completions and len(out) < max_entries:
            out.append(self._completions.popleft())
        return out

    def next_completion_ns(self) -> int | None:
        return None

    def set_wakeup(self, callback: Callable[[], None] | None) -> None:
        self._wakeup = callback

    def close(self) -> None:
        for protocol in list(self._peers.values()):
            protocol.close()

    # --------------------------------------------------------------- connections

    def ready(self, peer: int) -> bool:
        protocol = self._peers.get(peer)
        return protocol is not None and protocol.ready

    async def _tls_connection(
        self, peer: int, host: str, port: int
    ) -> tuple[asyncio.BaseTransport, _ClientProtocol]:
        sock = await connect_socket(host, port, self.congestion_control)
        try:
            return await asyncio.get_running_loop().create_connection(
                lambda: _ClientProtocol(self, peer), sock=sock, ssl=self._ssl, server_hostname=host
            )
        except BaseException:
            sock.close()
            raise

    async def attach(
        self,
        peer: int,
        host: str,
        port: int,
        *,
        local_peer: int,
        session: int,
        data_key: bytes,
        timeout_s: float = 5.0,
    ) -> None:
        """Open and bind the data connection to ``peer`` for its control ``session``
        (replacing an older one, whose outstanding slices are flushed). Raises
        :class:`ConnectionLost` or :class:`HandshakeFailed`; nothing is left attached then."""
        old = self._peers.pop(peer, None)
        if old is not None:
            old.close()
        try:
            connecting: Awaitable[tuple[asyncio.BaseTransport, _ClientProtocol]]
            if self._ssl is None:  # plaintext: the zero-copy transport (see _raw)
                connecting = open_raw_connection(
                    lambda: _ClientProtocol(self, peer),
                    host,
                    port,
                    send_thread=self.send_thread,
                    congestion=self.congestion_control,
                )
            else:
                connecting = self._tls_connection(peer, host, port)
            _transport, protocol = await asyncio.wait_for(connecting, timeout_s)
        except (OSError, TimeoutError) as exc:
            raise ConnectionLost(f"data connection to {host}:{port} failed: {exc!r}") from exc
        try:
            challenge = await asyncio.wait_for(protocol.challenge, timeout_s)
        except (ConnectionLost, TimeoutError) as exc:
            protocol.close()
            raise HandshakeFailed(f"no data challenge from {host}:{port}: {exc!r}") from exc
        protocol.write(data_bind_proof(data_key, challenge, local_peer, self.rail))
        assert len(data_bind_proof(data_key, challenge, local_peer, self.rail)) == BIND.size
        protocol.ready = True
        self._peers[peer] = protocol
        self._sessions[peer] = session
        self._wake()

    async def open_session(self, peer: int, context: SessionContext) -> None:
        """The :class:`~tent_transport.devices.Rail` protocol: :meth:`attach` to the rail's
        address the session advertised; a failed connection or bind is :class:`AttachFailed`."""
        host, port = context.address
        try:
            await self.attach(
                peer,
                host,
                port,
                local_peer=context.local_peer,
                session=context.session,
                data_key=context.data_key,
            )
        except (ConnectionLost, HandshakeFailed, OSError) as exc:
            raise AttachFailed(f"{self.name}: data connection failed: {exc}") from exc

    def frame(self, peer: int, payload: bytes) -> bool:
        """TCP sets up in-band on its data connection and takes no control frames; one a
        receiver sends anyway is ignored, as before there was a frame kind for it."""
        return True

    def detach(self, peer: int) -> None:
        """Close the peer's data connection (its outstanding slices complete FLUSHED)."""
        protocol = self._peers.pop(peer, None)
        if protocol is not None:
            protocol.close()

    async def wait_detached(self, peer: int) -> None:
        protocol = self._peers.get(peer)
        if protocol is not None:
            await protocol.closed

    # --------------------------------------------------------------- internals

    def _complete(self, pending: _Pending, status: SliceStatus, detail: str) -> None:
        self._in_flight -= 1
        if status is SliceStatus.SUCCESS:
            self._completed += 1
        elif status is SliceStatus.FLUSHED:
            self._flushed += 1
        else:
            self._failed += 1
        self._completions.append(
            SliceCompletion(
                wr_id=pending.wr_id, status=status, length=pending.length, detail=detail
            )
        )
        self._wake()

    def _lost(self, protocol: _ClientProtocol) -> None:
        if self._peers.get(protocol.peer) is protocol:
            # lost while attached (not detached by us): tell the owner, who restarts the session
            del self._peers[protocol.peer]
            if self.on_lost is not None:
                self.on_lost(protocol.peer)
        self._wake()

    def _wake(self) -> None:
        if self._wakeup is not None:
            with contextlib.suppress(Exception):
                self._wakeup()

    def statistics(self) -> RailStatistics:
        return RailStatistics(
            posted=self._posted,
            completed=self._completed,
            failed=self._failed,
            flushed=self._flushed,
            bytes_sent=self._bytes_sent,
            bytes_read=self._bytes_read,
            outstanding=self._in_flight,
        )
