"""A stranger's connection served from its raw socket until it proves something (issue 27,
docs/abuse.md#raw-preauth).

A connection that never authenticates is what a door flood is made of, and what it costs the
receiver is what each such connection costs, times the accept rate. Built as an asyncio
connection, each took a transport, a protocol, two tasks and about eight turns of the event
loop before it was evicted: 0.4-0.8 ms of the receiver's CPU each on this project's machine,
against 0.3-0.5 ms now (``benchmarks/door_cost.py``; a bare Python listener pays 0.2-0.3).
:class:`RawPreAuth` instead watches the accepted socket with ``add_reader``, reads exactly the
bytes the next step of the handshake needs, answers with one ``send`` and closes the socket on
failure, eviction or deadline: no transport, no task. Only a connection that authenticated is
handed to asyncio (``connect_accepted_socket``), and as it read no byte past its proof, the
peer's first frames are still in the socket for the transport.

Used where nothing but the handshake's own bytes come before authentication: the PSK control
handshake (``ControlServer``) and the data listener's bind without TLS (``TcpDataServer``).
TLS runs on asyncio's transport as before.

Not thread-safe: used from its event loop.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Generic, TypeVar

from ._errors import HandshakeFailed

__all__ = ["More", "RawPreAuth"]

T = TypeVar("T")


class More:
    """A step's answer when the handshake goes on: write ``reply`` (``b""``: nothing), then
    read ``need`` bytes for the next step."""

    __slots__ = ("need", "reply")

    def __init__(self, reply: bytes, need: int) -> None:
        self.reply = reply
        self.need = need


class RawPreAuth(Generic[T]):
    """One accepted socket, read step by step until the handshake gives a result.

    ``first`` is what the listener sends at once (a challenge; ``b""``: nothing); ``need`` the
    bytes of the first step. ``step(data)`` gets exactly the bytes asked for and returns
    either :class:`More` or the handshake's result; it raises :class:`HandshakeFailed` to
    refuse. ``done(self, result)`` runs once: with the result (the socket is then the
    caller's, no longer watched), or with ``None`` when the connection failed, was closed
    (:meth:`close`: evicted) or reached ``deadline_s``; the socket is then closed.
    """

    def __init__(
        self,
        sock: socket.socket,
        *,
        first: bytes,
        need: int,
        step: Callable[[bytes], More | T],
        done: Callable[[RawPreAuth[T], T | None], None],
        deadline_s: float,
    ) -> None:
        self.sock = sock
        self._loop = asyncio.get_running_loop()
        self._need = need
        self._buf = bytearray()
        self._step = step
        self._done: Callable[[RawPreAuth[T], T | None], None] | None = done
        self._fd = sock.fileno()
        self._timer: asyncio.TimerHandle | None = None
        if first and not self._send(first):
            self._loop.call_soon(self.close)  # reported once the caller has it
            return
        self._loop.add_reader(self._fd, self._readable)
        self._timer = self._loop.call_later(deadline_s, self.close)

    @property
    def finished(self) -> bool:
        return self._done is None

    def _send(self, data: bytes) -> bool:
        # a fresh socket's buffer takes a handshake's few bytes whole; a peer that left it no
        # room for them is refused rather than waited for
        try:
            return self.sock.send(data) == len(data)
        except OSError:
            return False

    def _readable(self) -> None:
        try:
            data = self.sock.recv(self._need - len(self._buf))  # never past this step
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        if not data:
            self.close()
            return
        self._buf += data
        if len(self._buf) < self._need:
            return
        chunk = bytes(self._buf)
        self._buf.clear()
        try:
            out = self._step(chunk)
        except HandshakeFailed:
            self.close()
            return
        if isinstance(out, More):
            self._need = out.need
            if out.reply and not self._send(out.reply):
                self.close()
            return
        self._finish(out)

    def _unwatch(self) -> Callable[[RawPreAuth[T], T | None], None] | None:
        done, self._done = self._done, None
        if done is not None and self._timer is not None:
            self._timer.cancel()
            self._loop.remove_reader(self._fd)
        return done

    def _finish(self, result: T) -> None:
        done = self._unwatch()
        if done is not None:
            done(self, result)

    def close(self) -> None:
        """Close the connection (evicted, failed, past its deadline, or the listener closing)
        and report it to ``done`` with ``None``. Nothing once finished."""
        done = self._unwatch()
        if done is None:
            return
        self.sock.close()
        done(self, None)
