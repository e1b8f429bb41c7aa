"""A socket's sends on a thread of its own, so the kernel's copy overlaps the loop's Python work.

``socket.send`` releases the GIL for the copy into the kernel's send buffer: about 0.4 ms per
MiB-sized call on loopback, which on the event-loop thread is time in which no completion,
credit frame or next post is handled. :class:`SendThread` takes the views a
:class:`~._raw.RawSocketTransport` queues and sends them in order, waiting for writability
with ``poll``. The transport still sends a small write inline while nothing is queued here, so
a 4 KiB transfer pays no thread hand-off (docs/transport.md#transport-send-thread).

Ordering and lifetime: only the loop thread queues; a view leaves the queue when the socket has
taken all of it, so an empty queue means the thread touches the socket no more until the next
``send``. :meth:`stop` shuts the socket down, wakes the thread and joins it before the owner
closes the socket, so the thread never uses a file descriptor number the kernel has reused.
"""

from __future__ import annotations

import collections
import contextlib
import os
import select
import socket
import threading
from collections.abc import Callable

__all__ = ["SendThread", "send_thread_by_default"]

# how long the thread waits for writability before it looks at its stop flag again
_POLL_MS = 200


def send_thread_by_default() -> bool:
    """Whether a data connection gets a send thread when nobody said: only with more than two
    CPUs to run on. On two, loopback benchmarks with the receiver on the same cores measured a
    cost of 2-7 % (docs/transport.md#transport-send-thread): the thread only takes CPU
    the receiver needs."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity call on this platform
        cpus = os.cpu_count() or 1
    return cpus > 2


class SendThread:
    """Sends the views queued by :meth:`send` on ``sock`` (non-blocking), in order, on a daemon
    thread; the first error is reported once through ``on_error`` (from the thread; the caller
    passes a thread-safe callback) and ends the thread."""

    def __init__(self, sock: socket.socket, on_error: Callable[[OSError], None]) -> None:
        self._sock = sock
        self._on_error = on_error
        self._queue: collections.deque[memoryview] = collections.deque()
        self._queued_bytes = 0
        self._cond = threading.Condition(threading.Lock())
        self._stopping = False
        self._thread = threading.Thread(
            target=self._run, name=f"tent-send-{sock.fileno()}", daemon=True
        )
        self._thread.start()

    @property
    def queued_bytes(self) -> int:
        """Bytes queued and not yet taken by the socket."""
        return self._queued_bytes

    def idle(self) -> bool:
        """Nothing queued: the thread will not touch the socket until the next :meth:`send`."""
        return not self._queue

    def send(self, view: memoryview) -> None:
        """Queue ``view`` behind what is queued (kept, not copied, until the socket took it)."""
        with self._cond:
            if self._stopping:
                return
            self._queue.append(view)
            self._queued_bytes += len(view)
            self._cond.notify()

    def stop(self) -> None:
        """Drop what is queued, stop the thread and wait for it (the socket stays open: its
        owner closes it after this returns)."""
        with self._cond:
            self._stopping = True
            self._queue.clear()
            self._queued_bytes = 0
            self._cond.notify()
        # wakes a thread blocked in poll or send at once (not connected any more: no thread
        # can be blocked on it)
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        sock, cond, queue = self._sock, self._cond, self._queue
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLOUT)
        while True:
            with cond:
                while not queue and not self._stopped():
                    cond.wait()
                if self._stopped():
                    return
                view = queue[0]
            try:
                sent = sock.send(view)
            except (BlockingIOError, InterruptedError):
                poller.poll(_POLL_MS)
                continue
            except OSError as exc:
                if not self._stopped():
                    self._on_error(exc)
                return
            with cond:
                if self._stopped():
                    return
                self._queued_bytes -= sent
                if sent < len(view):
                    queue[0] = view[sent:]
                else:
                    queue.popleft()

    def _stopped(self) -> bool:
        # a call, not the attribute: :meth:`stop` sets it from another thread at any point
        return self._stopping
