"""The door of a listener: connections that proved nothing yet, bounded, the idlest evicted.

Both listeners of a receiver face strangers: the control listener until a handshake succeeds,
a data listener until a bind does. What a stranger can make the receiver hold there is bounded
by :class:`Door` (issue 27, docs/abuse.md "The doors"), with this policy:

1. At most ``limit`` connections wait at once (each also within its listener's deadline), so
   a flood holds at most ``limit`` sockets and tasks, however fast it connects.
2. A connection past the limit is let in, and the waiting connection that made progress
   *longest ago* is closed in its place (evicted, counted). Refusing the newest instead
   (``MaxStartups`` without its random drop) keeps the door locked for as long as a flood
   keeps its places full: the one refused is exactly the honest peer reconnecting (issue 27:
   64 silent sockets, reopened at each 5 s deadline, kept an honest sender out for good).
3. Progress (``advance``: a well-formed hello of a known peer, a completed TLS handshake) puts
   a connection back at the end of the line. So an honest connection is evicted only if
   ``limit`` other connections arrive or make progress within one step of its handshake (one
   round trip): a flood must open (or advance) ``limit`` connections per round trip of the
   honest peer to keep it out, and connections that merely said hello and stalled leave in
   turn like the silent ones.

Not chosen: OpenSSH's random early drop (``MaxStartups start:rate:full``) refuses a newcomer
with a probability that reaches 1 when the places are full, so a flood that keeps them full
locks everyone out; per-source limits (nginx ``limit_conn``, sshd ``PerSourceMaxStartups``)
cannot tell an attacker from the honest peer behind the same address (loopback, NAT); silent
connections first, then the advanced ones, lets a flood of stalled hellos (peer ids are not
secret) fill the door with connections only a newcomer's own eviction could displace. A
shorter deadline under pressure adds nothing once a full door turns over at the flood's rate.

Not thread-safe: one per listener, used from its event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

__all__ = ["Door", "reads_before_connection_made"]

T = TypeVar("T", bound=Hashable)


class Door(Generic[T]):
    """The waiting connections of one listener, in the order of their last progress.

    ``evict(conn)`` closes a connection the door pushed out; it may call :meth:`leave` (which
    is idempotent). Raises :class:`ValueError` for a limit that is not an int >= 1.
    """

    def __init__(self, limit: int, evict: Callable[[T], None]) -> None:
        if type(limit) is not int or limit < 1:
            raise ValueError(f"a door's limit must be an int >= 1: {limit!r}")
        self.limit = limit
        self._evict = evict
        self._line: dict[T, None] = {}  # insertion-ordered: the first key progressed longest ago
        self.evicted = 0
        """Connections closed to make room for a newer one (cumulative)."""

    def __len__(self) -> int:
        return len(self._line)

    def __iter__(self) -> Iterator[T]:
        """The waiting connections (a snapshot: evicting while iterating is safe)."""
        return iter(list(self._line))

    def __contains__(self, conn: object) -> bool:
        return conn in self._line

    def enter(self, conn: T) -> None:
        """Let ``conn`` wait at the end of the line; if the door was full, evict the
        connection at its head (never ``conn`` itself: a limit is at least 1)."""
        self._line[conn] = None
        if len(self._line) > self.limit:
            oldest = next(iter(self._line))
            del self._line[oldest]
            self.evicted += 1
            self._evict(oldest)

    def advance(self, conn: T) -> None:
        """``conn`` made progress in its handshake: back to the end of the line. Nothing for a
        connection no longer waiting."""
        if conn in self._line:
            del self._line[conn]
            self._line[conn] = None

    def leave(self, conn: T) -> None:
        """``conn`` stopped waiting (authenticated, failed or closed). Idempotent."""
        self._line.pop(conn, None)


def reads_before_connection_made(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` may hand a new connection's first bytes to its protocol although
    ``connection_made`` paused reading (uvloop does): TLS cannot then start on an accepted
    socket, whose client hello may already be consumed."""
    return type(loop).__module__.startswith("uvloop")
