"""A plaintext stream transport that queues views of the caller's buffers and never copies them.

asyncio's socket transport keeps what the kernel did not take at once in a ``bytearray``: it
copies the rest of every partial write into it and memmoves the buffer after each later send.
For multi-MiB payloads that is a second and third pass over the bytes. The sender's data
connections without TLS use this transport instead: it keeps a queue of ``memoryview`` slices,
sends from them as the socket becomes writable, and hands received bytes to a
``BufferedProtocol`` (``get_buffer`` / ``buffer_updated``, as asyncio does). TLS connections
keep asyncio's SSL transport, which needs its own buffering.

With ``send_thread`` a :class:`~._send_thread.SendThread` sends what the socket does not take at
once, and every write above :data:`INLINE_BYTES`, so the kernel's copy of a payload runs beside
the loop's Python work instead of inside it; small writes still go out inline while that thread
has nothing queued.

It runs on any loop with ``add_reader`` / ``add_writer`` / ``sock_connect`` (asyncio's
selector loops and uvloop). Loop thread only (the send thread is internal).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
from collections.abc import Callable
from typing import Any, TypeVar

from .._congestion import apply_congestion
from ._send_thread import SendThread

__all__ = ["INLINE_BYTES", "RawSocketTransport", "open_raw_connection"]

INLINE_BYTES = 64 << 10
"""With a send thread, the largest write the loop thread still sends itself (a header, a small
payload: a hand-off to the thread would cost more than the copy)."""

_P = TypeVar("_P", bound=asyncio.BufferedProtocol)


class RawSocketTransport(asyncio.Transport):
    """One connected, non-blocking TCP socket driven by ``protocol``.

    ``write`` keeps a view of ``data`` (no copy): the caller must not change those bytes until
    they are sent, which for the data path holds anyway (a slice owns its buffer until its
    completion). ``close`` and ``abort`` both close at once, dropping unsent bytes; the
    protocol's ``connection_lost`` then runs exactly once, from the loop.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol: asyncio.BufferedProtocol,
        *,
        send_thread: bool = False,
    ) -> None:
        super().__init__()
        sock.setblocking(False)
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._queue: collections.deque[memoryview] = collections.deque()
        self._queued_bytes = 0
        self._closing = False
        self._reading = True
        self._thread: SendThread | None = None
        if send_thread:
            self._thread = SendThread(sock, self._thread_failed)
        try:
            protocol.connection_made(self)
        except BaseException:
            self._closing = True
            if self._thread is not None:
                self._thread.stop()
            sock.close()  # never leak the socket of a connection that did not start
            raise
        if not self._closing:
            loop.add_reader(self._fd, self._read_ready)

    # ------------------------------------------------------------------ asyncio.Transport

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "socket":
            return self._sock
        if name in ("peername", "sockname"):
            with contextlib.suppress(OSError):
                return self._sock.getpeername() if name == "peername" else self._sock.getsockname()
        return default

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._close(None)

    def abort(self) -> None:
        self._close(None)

    def get_write_buffer_size(self) -> int:
        thread = self._thread
        return self._queued_bytes + (0 if thread is None else thread.queued_bytes)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (0, 0)  # never pauses the protocol: the queue holds views, not copies

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """Accepted for the Transport interface; this transport never pauses its protocol."""

    def can_write_eof(self) -> bool:
        return False

    def is_reading(self) -> bool:
        return self._reading and not self._closing

    def pause_reading(self) -> None:
        if self._reading and not self._closing:
            self._reading = False
            self._loop.remove_reader(self._fd)

    def resume_reading(self) -> None:
        if not self._reading and not self._closing:
            self._reading = True
            self._loop.add_reader(self._fd, self._read_ready)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            return  # as asyncio's transports: writes after close are dropped, not raised
        view = memoryview(data)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        if not view:
            return
        thread = self._thread
        if thread is not None:
            if thread.idle() and len(view) <= INLINE_BYTES:
                sent = self._send(view)
                if sent is None or sent == len(view):
                    return
                view = view[sent:]
            thread.send(view)
            return
        if not self._queue:
            sent = self._send(view)
            if sent is None:
                return
            if sent == len(view):
                return
            view = view[sent:]
            self._loop.add_writer(self._fd, self._write_ready)
        self._queue.append(view)
        self._queued_bytes += len(view)

    # ------------------------------------------------------------------ internals

    def _write_ready(self) -> None:
        queue = self._queue
        while queue:
            head = queue[0]
            sent = self._send(head)
            if sent is None:
                return
            self._queued_bytes -= sent
            if sent < len(head):
                queue[0] = head[sent:]
                return
            queue.popleft()
        self._loop.remove_writer(self._fd)

    def _send(self, view: memoryview) -> int | None:
        """What the socket took of ``view`` (0: it would block); ``None``: it failed, and the
        connection is closed."""
        try:
            return self._sock.send(view)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError as exc:
            self._close(exc)
            return None

    def _thread_failed(self, exc: OSError) -> None:
        """The send thread's error (called on that thread): close from the loop."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing left to tell
            self._loop.call_soon_threadsafe(self._close, exc)

    def _read_ready(self) -> None:
        if self._closing:
            return
        try:
            buffer = memoryview(self._protocol.get_buffer(-1))
            if not buffer.nbytes:
                raise RuntimeError("get_buffer() returned an empty buffer")
        except Exception as exc:  # a protocol fault closes this connection, as asyncio's do
            self._close(exc)
            return
        try:
            received = self._sock.recv_into(buffer)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(exc)
            return
        if received == 0:  # EOF: the protocol may not keep a half-open connection here
            self._call(self._protocol.eof_received)
            self._close(None)
            return
        self._call(self._protocol.buffer_updated, received)

    def _call(self, callback: Callable[..., object], *args: object) -> None:
        try:
            callback(*args)
        except Exception as exc:
            self._close(exc)

    def _close(self, exc: Exception | None) -> None:
        if self._closing:
            return
        self._closing = True
        self._loop.remove_reader(self._fd)
        if self._queue:
            self._loop.remove_writer(self._fd)
            self._queue.clear()
            self._queued_bytes = 0
        if self._thread is not None:
            self._thread.stop()  # joined before _lost closes the socket
        self._loop.call_soon(self._lost, exc)

    def _lost(self, exc: Exception | None) -> None:
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._sock.close()


async def open_raw_connection(
    protocol_factory: Callable[[], _P],
    host: str,
    port: int,
    *,
    send_thread: bool = False,
    congestion: str | None = None,
) -> tuple[RawSocketTransport, _P]:
    """Connect to ``host:port`` (:func:`connect_socket`) and return the transport (with a send
    thread if asked) and its protocol. Raises ``OSError`` if no address connects."""
    sock = await connect_socket(host, port, congestion)
    protocol = protocol_factory()
    loop = asyncio.get_running_loop()
    return RawSocketTransport(loop, sock, protocol, send_thread=send_thread), protocol


async def connect_socket(host: str, port: int, congestion: str | None = None) -> socket.socket:
    """A non-blocking socket connected to ``host:port`` (each resolved address in turn, as
    ``create_connection``), with the TCP congestion control ``congestion`` set before it
    connects (``None``: the system's): chosen later, the system's algorithm has already set
    the connection up, and ``bbr`` leaves its pacing on. Raises ``OSError`` if no address
    connects."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    if not infos:
        raise OSError(f"getaddrinfo({host!r}) returned nothing")
    errors: list[OSError] = []
    for family, kind, proto, _canonical, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            apply_congestion(sock, congestion)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            errors.append(exc)
            continue
        except BaseException:  # cancelled (the caller's timeout): never leak the socket
            sock.close()
            raise
        return sock
    raise errors[0] if len(errors) == 1 else OSError(f"connect to {host}:{port} failed: {errors}")
