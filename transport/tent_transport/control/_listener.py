"""A listening socket that paces its accepts under pressure (issue 27, docs/abuse.md
"The doors").

A flood of strangers is a reconnect loop: each connection the door evicts is reopened at
once, so the receiver pays an accept, a protocol object and a close for as many connections
as the kernel hands it (about 800 a second on loopback, most of a door flood's cost). Under
:class:`Pressure` (the door full, or a burst of failed handshakes), :class:`PacedListener`
takes at most ``rate`` connections a second (a token bucket of ``burst``) and leaves the rest
in the kernel's accept queue, which is deep (``backlog``) so that no SYN is dropped: a
newcomer's connection is queued at once and taken in its turn, within ``backlog / rate``
seconds as long as the flood does not overflow the queue. Without pressure, accepts are not
paced.

asyncio's ``Server`` cannot pause its accepts (nor can uvloop's), so the listener runs its own
accept loop: ``add_reader`` on the listening socket, ``connect_accepted_socket`` for each
connection taken (what asyncio's own accept does per connection, a task each).

Not thread-safe: used from its event loop.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from ._door import Door

__all__ = [
    "ACCEPT_BACKLOG",
    "ACCEPT_BURST",
    "ACCEPT_RATE",
    "AcceptPacer",
    "PacedListener",
    "Pressure",
]

# A receiver's listeners: 128 accepts a second under pressure, 16 at once, over a kernel
# queue of 128, so a newcomer queued behind a flood is taken within about one second.
ACCEPT_RATE = 128.0
ACCEPT_BURST = 16
ACCEPT_BACKLOG = 128

_PER_EVENT = 16  # connections taken per readiness event: the loop serves others in between
_ERROR_PAUSE_S = 0.05  # after an accept error (EMFILE, ENOBUFS): let the receiver recover


class Pressure:
    """Whether a listener is under pressure, when its accepts are paced: its door is full, or
    as many of its connections as the door has places failed (a handshake or a bind refused)
    within the last ``window_s``. The second covers the floods that do not wait at the door
    but fail at once (a wrong key, a replayed handshake, a forged bind), each reopened as
    soon as it is closed."""

    def __init__(
        self, door: Door[Any], window_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._door = door
        self._window = window_s
        self._clock = clock
        self._failed: collections.deque[float] = collections.deque(maxlen=door.limit)

    def failed(self) -> None:
        """A connection failed its handshake or bind just now."""
        self._failed.append(self._clock())

    def __call__(self) -> bool:
        door, failed = self._door, self._failed
        if len(door) >= door.limit:
            return True
        return len(failed) == failed.maxlen and self._clock() - failed[0] < self._window


class AcceptPacer:
    """A token bucket over accepts: ``rate`` per second, at most ``burst`` at once.

    Raises :class:`ValueError` for a rate that is not a positive number or a burst that is not
    an int >= 1.
    """

    def __init__(self, rate: float, burst: int, now: float) -> None:
        if type(rate) not in (int, float) or not rate > 0:
            raise ValueError(f"an accept rate must be a positive number: {rate!r}")
        if type(burst) is not int or burst < 1:
            raise ValueError(f"an accept burst must be an int >= 1: {burst!r}")
        self.rate = float(rate)
        self.burst = burst
        self._tokens = float(burst)
        self._at = now

    def wait(self, now: float) -> float:
        """Seconds until a token is there at ``now`` (``0.0``: one is); takes nothing."""
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        return 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) / self.rate

    def take(self) -> None:
        """Spend a token :meth:`wait` found (an accept that happened)."""
        self._tokens -= 1.0


class PacedListener:
    """One listening socket served by its own accept loop (module docstring).

    ``full()`` says whether the listener's door is full (then accepts are paced). Each
    connection taken gets a transport and a ``factory()`` protocol, or with ``raw`` is handed
    to ``raw(sock)`` as a non-blocking socket (``_preauth``: a stranger costs no transport).
    Build it with :meth:`listen`; :meth:`close` stops accepting and closes the socket.
    """

    def __init__(
        self,
        sock: socket.socket,
        factory: Callable[[], asyncio.BaseProtocol],
        *,
        raw: Callable[[socket.socket], None] | None = None,
        full: Callable[[], bool],
        pacer: AcceptPacer,
        tls: ssl.SSLContext | None,
        tls_timeout: float | None,
    ) -> None:
        self._sock = sock
        self._factory = factory
        self._raw = raw
        self._full = full
        self._pacer = pacer
        self._tls = tls
        self._tls_timeout = tls_timeout
        self._loop = asyncio.get_running_loop()
        self._tasks: set[asyncio.Task[None]] = set()
        self._resume: asyncio.TimerHandle | None = None
        self._closed = False
        self.paced = 0
        """Times the listener stopped reading its socket for a token (cumulative)."""
        self._loop.add_reader(sock.fileno(), self._ready)

    @classmethod
    async def listen(
        cls,
        factory: Callable[[], asyncio.BaseProtocol],
        host: str,
        port: int,
        *,
        full: Callable[[], bool],
        rate: float,
        burst: int,
        backlog: int,
        tls: ssl.SSLContext | None = None,
        tls_timeout: float | None = None,
        raw: Callable[[socket.socket], None] | None = None,
        configure: Callable[[socket.socket], None] | None = None,
    ) -> PacedListener:
        """Bind ``host:port`` (the first address it resolves to) and start accepting;
        ``configure(sock)`` runs on the socket before it listens (what accepted sockets
        inherit, e.g. their congestion control).

        Raises :class:`ValueError` for a bad rate or burst, and :class:`OSError` as
        ``bind``/``listen`` do."""
        loop = asyncio.get_running_loop()
        pacer = AcceptPacer(rate, burst, loop.time())
        infos = await loop.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if configure is not None:
                configure(sock)
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        return cls(sock, factory, raw=raw, full=full, pacer=pacer, tls=tls, tls_timeout=tls_timeout)

    def address(self) -> tuple[str, int]:
        name = self._sock.getsockname()
        return str(name[0]), int(name[1])

    def _ready(self) -> None:
        for _ in range(_PER_EVENT):
            paced = self._full()
            if paced:
                wait = self._pacer.wait(self._loop.time())
                if wait > 0.0:
                    self._pause(wait)
                    return
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors or buffers: the queue keeps the rest
                self._pause(_ERROR_PAUSE_S)
                return
            if paced:  # spent only on a connection taken
                self._pacer.take()
            conn.setblocking(False)
            if self._raw is not None:
                self._raw(conn)
                continue
            task = self._loop.create_task(self._serve(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _pause(self, seconds: float) -> None:
        self.paced += 1
        self._loop.remove_reader(self._sock.fileno())
        self._resume = self._loop.call_later(seconds, self._resume_reading)

    def _resume_reading(self) -> None:
        self._resume = None
        if not self._closed:
            self._loop.add_reader(self._sock.fileno(), self._ready)

    async def _serve(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(
                self._factory, conn, ssl=self._tls, ssl_handshake_timeout=self._tls_timeout
            )
        except (TimeoutError, OSError, ssl.SSLError):
            conn.close()  # lost before its protocol ran, or a failed early TLS handshake

    def close(self) -> None:
        """Stop accepting and close the socket (idempotent); connections already taken are
        their protocols' to close."""
        if self._closed:
            return
        self._closed = True
        if self._resume is not None:
            self._resume.cancel()
        else:
            self._loop.remove_reader(self._sock.fileno())
        self._sock.close()

    async def wait_closed(self) -> None:
        """Wait for the connections being set up when :meth:`close` ran."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
