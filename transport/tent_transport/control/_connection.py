"""One authenticated control connection: frames read as they arrive, a bounded non-blocking
publisher.

Control never waits on data (docs/transport_design.md#transport-rule-1): a control connection is its
own socket, marked ``SO_PRIORITY`` (a ``prio`` qdisc on a shared rail serves it first), whose
frames are handled in the callback that read them (:mod:`._reads`), and its publisher never
blocks: :meth:`ControlConnection.publish` queues at most
``max_queued`` frames and refuses the rest (counted). Refusing is safe because every credit message
is cumulative: the next one carries everything a refused one did
(docs/design.md#protocol-decisions), exactly like a loss on the control channel, which the model
checker covers.

With ``faults`` (a :class:`tent_credit.testing.FaultyChannel`) every published frame passes
through the channel, which may drop, duplicate, delay or reorder it, before it reaches the
socket: the fault injection of the control path is the library's one channel, not a new one.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
import time
from collections.abc import Callable
from typing import cast

import attrs

from tent_credit.errors import TooManyRequests
from tent_credit.testing import FaultyChannel

from ._frames import FrameKind, encode_frame
from ._handshake import AuthenticatedPeer
from ._rate import ControlRate
from ._reads import READ_BATCH, FrameReads, leftover

__all__ = [
    "CONTROL_SO_PRIORITY",
    "READ_BATCH",
    "ControlConnection",
    "ControlStatistics",
    "tune_socket",
]

CONTROL_SO_PRIORITY = 6
"""The highest ``SO_PRIORITY`` an unprivileged socket may set; data sockets keep 0."""

_READ_CHUNK = 64 * 1024
"""What one read of a control socket asks for, where asyncio's selector transport reads it
(:func:`_bound_reads`)."""
_DIRECT_WRITE_LIMIT = 64 * 1024
"""Below this many bytes in the transport's buffer a published frame is written at once."""


def tune_socket(writer: asyncio.StreamWriter | asyncio.BaseTransport, priority: int) -> None:
    """``TCP_NODELAY`` and ``SO_PRIORITY`` on the connection's socket (where the OS has them)."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if hasattr(socket, "SO_PRIORITY"):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, priority)


def _bound_reads(writer: asyncio.StreamWriter) -> None:
    """Have asyncio's selector transport read the control socket :data:`_READ_CHUNK` bytes at
    a time instead of its default 256 KiB (``_SelectorTransport.max_size``).

    A stream's transport calls ``sock.recv(max_size)``, which allocates ``max_size`` bytes
    and shrinks them to what arrived. Control frames are tens of bytes, one per transfer, and
    on glibc a 256 KiB allocation per read costs about 12 µs more than a 64 KiB one (a 60-byte
    message over a socket pair: 14.9 µs per send and receive against 2.4; 200 KiB still
    costs 2.4): the largest single cost of receiving a credit update in the sender's profile
    (py-spy, 4 KiB transfers one at a time). A TLS connection's transport has no such
    attribute (asyncio's SSL protocol below it reads into a buffer it keeps; bounding its
    read size too changed nothing measurable), nor has uvloop's (libuv reads into one buffer
    per loop); both are left as they are."""
    transport: object = getattr(writer, "transport", None)
    if isinstance(getattr(type(transport), "max_size", None), int):
        transport.max_size = _READ_CHUNK  # type: ignore[attr-defined]


@attrs.frozen(kw_only=True)
class ControlStatistics:
    """Counters of one control connection."""

    frames_received: int
    frames_sent: int
    frames_refused: int
    """Publishes refused because the bounded queue (or the fault channel) was full."""
    queued: int


class ControlConnection:
    """Frames in, frames out, for one authenticated peer.

    ``on_frame(kind, payload)`` runs in the loop for every complete frame, in order; a
    :class:`FrameError` (bad length or kind) closes the connection, and so does a frame not
    whole within ``partial_frame_s`` of its first byte (a slowloris peer after the
    handshake). With ``rate`` the connection is not read while the peer is over its frame
    budget, and closed when it keeps at it (``_rate``). ``on_closed()`` runs once, whatever
    closed it. Not thread-safe: use it from its event loop only.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer: AuthenticatedPeer,
        *,
        on_frame: Callable[[FrameKind, bytes], None],
        on_closed: Callable[[], None],
        max_queued: int = 256,
        faults: FaultyChannel | None = None,
        partial_frame_s: float = 5.0,
        rate: ControlRate | None = None,
    ) -> None:
        if max_queued < 1:
            raise ValueError("max_queued must be at least 1")
        self._partial_frame_s = partial_frame_s
        self.rate = rate
        """The peer's control-frame budget (``_rate``; ``None``: unbounded, a sender's view of
        its receiver)."""
        self._reader = reader
        self._writer = writer
        self.peer = peer
        self._on_frame = on_frame
        self._on_closed = on_closed
        self._max_queued = max_queued
        self._faults = faults
        self._queue: collections.deque[bytes] = collections.deque()
        self._wake = asyncio.Event()
        self._fault_timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._tasks: list[asyncio.Task[None]] = []
        self._reads: FrameReads | None = None
        self._received = 0
        self._sent = 0
        self._refused = 0
        self.close_reason = ""
        tune_socket(writer, CONTROL_SO_PRIORITY)
        _bound_reads(writer)

    def start(self) -> None:
        """Take the socket over from its stream (what the stream buffered is handled first, in
        a callback after this one) and start the writer task."""
        transport = self._writer.transport
        self._reads = FrameReads(
            cast(asyncio.Transport, transport),
            transport.get_protocol(),
            deliver=self._deliver,
            close=self.close,
            closed=lambda: self._closed,
            rate=self.rate,
            partial_frame_s=self._partial_frame_s,
        )
        self._reads.start(*leftover(self._reader))
        self._tasks = [asyncio.ensure_future(self._write_loop())]

    def _deliver(self, kind: FrameKind, payload: bytes) -> None:
        self._received += 1
        self._on_frame(kind, payload)

    @property
    def closed(self) -> bool:
        return self._closed

    def publish(self, kind: FrameKind, payload: bytes) -> bool:
        """Queue one frame without blocking; ``False`` (counted) when closed or full.

        Raises :class:`FrameError` for a payload over its kind's bound (a local bug)."""
        if self._closed:
            return False
        frame = encode_frame(kind, payload)
        if self._faults is not None and kind is FrameKind.CREDIT:
            # only credit messages pass the fault channel: the protocol tolerates their loss,
            # duplication and reordering; the bootstrap and descriptors ride the plain stream
            try:
                self._faults.send(frame, time.monotonic_ns())
            except TooManyRequests:
                self._refused += 1
                return False
            self._pump_faults()
            return True
        if len(self._queue) >= self._max_queued:
            self._refused += 1
            return False
        transport = self._writer.transport
        if not self._queue and transport.get_write_buffer_size() < _DIRECT_WRITE_LIMIT:
            # Nothing queued before it and the socket is keeping up: write it now, in this
            # callback, rather than one loop iteration later from the writer task (a grant then
            # leaves the receiver in the pass that freed the capacity; rule 1: control never
            # waits behind data work). The transport tries the socket at once and keeps the
            # rest; the writer task's drain() bounds what it keeps.
            self._sent += 1
            self._writer.write(frame)
            return True
        self._queue.append(frame)
        self._wake.set()
        return True

    def _pump_faults(self) -> None:
        # move what the channel delivers now to the socket queue; re-arm for the next due one
        assert self._faults is not None
        if self._closed:
            return
        for frame in self._faults.deliver(time.monotonic_ns()):
            self._queue.append(frame)
            self._wake.set()
        due = self._faults.next_due_ns()
        if self._fault_timer is not None:
            self._fault_timer.cancel()
            self._fault_timer = None
        if due is not None:
            delay = max(0.0, (due - time.monotonic_ns()) / 1e9)
            self._fault_timer = asyncio.get_running_loop().call_later(delay, self._pump_faults)

    async def _write_loop(self) -> None:
        try:
            while not self._closed:
                await self._wake.wait()
                self._wake.clear()
                if not self._queue:
                    continue
                batch = b"".join(self._queue)
                self._sent += len(self._queue)
                self._queue.clear()
                self._writer.write(batch)
                await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            self.close(f"write failed: {exc}")

    def close(self, reason: str = "closed locally") -> None:
        """Close the socket and stop the tasks; ``on_closed`` runs once. Idempotent. Frames
        published before the close are still handed to the socket first (best effort)."""
        if self._closed:
            return
        self._closed = True
        self.close_reason = reason
        if self._reads is not None:
            self._reads.stop()
        if self._fault_timer is not None:
            self._fault_timer.cancel()
        self._wake.set()
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        with contextlib.suppress(Exception):
            if self._queue:  # best effort: what was published before the close goes out
                # first (e.g. a verbs REFUSED ack ahead of the quarantine's close)
                self._writer.write(b"".join(self._queue))
                self._queue.clear()
            self._writer.close()
        self._on_closed()

    def statistics(self) -> ControlStatistics:
        return ControlStatistics(
            frames_received=self._received,
            frames_sent=self._sent,
            frames_refused=self._refused,
            queued=len(self._queue),
        )
