"""Reading a control connection: each frame handled in the callback that read it.

After the handshake, :class:`FrameReads` becomes the control socket's protocol: it decodes what
the transport read and hands every complete frame to the connection in ``data_received``
itself. The reader used to be a task awaiting a :class:`asyncio.StreamReader`; a frame then
reached it one event-loop iteration after the read, behind every callback of the iteration
that read it and those queued before the task's wake-up. Read here, a frame waits only for the
callbacks ahead of it in the iteration that read it (docs/transport_design.md#transport-rule-1).
On a loop busy with data work those are still most of its wait: a lone incast sender on 2
cores (a 4 MiB copy, a send and a checksum per block) decodes a grant 1.9 ms after the receiver
sent it against 2.1-2.3 ms with the task (medians; docs/incast.md#incast-admission-flush).

What the reader task did, this protocol does with the transport's own flow control:

- frames are handled in order, ``READ_BATCH`` at a time; after a whole batch the socket is not
  read until the loop has run once more (the other connections and the data plane get a turn:
  one chatty peer's backlog cannot keep them waiting, issue 13);
- with a :class:`~._rate.ControlRate` each batch is paid for before it is handled: over its
  budget the socket is not read for as long as the debt takes (its frames wait in the kernel),
  and a peer that keeps at it is closed;
- a frame begun must be whole within ``partial_frame_s`` of its first byte (a slowloris peer
  after the handshake); our own pauses do not count against the peer;
- a bad frame header, a handler's failure, the peer's end of stream and a lost connection close
  the connection, with the reason; at the end of stream, after the frames that came before it
  (under TLS asyncio's SSL layer closes the transport at the peer's end itself: frames a pause
  still holds then go with the connection, like any other frame of a closed session).

The stream protocol the socket had before keeps the writer's side: flow control
(``pause_writing``/``resume_writing``, which ``StreamWriter.drain`` waits on) and the loss of the
connection still reach it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ._errors import FrameError
from ._frames import FrameDecoder, FrameKind
from ._rate import ControlRate

__all__ = ["READ_BATCH", "FrameReads", "leftover"]

_log = logging.getLogger("tent_transport.control")

READ_BATCH = 16
"""Frames handled between two turns of the event loop: a 64 KiB read can hold a thousand
small frames, and without a turn one chatty peer's backlog keeps every other connection and
the data plane waiting until all of it is handled (issue 13)."""


def leftover(reader: asyncio.StreamReader) -> tuple[bytes, bool]:
    """What ``reader`` buffered and nobody read yet (bytes the peer sent right behind its
    handshake), and whether the peer's end of stream came with them. asyncio has no call that
    returns a stream's buffer without awaiting, so this reads its private ``_buffer``."""
    buffered: bytearray | bytes = getattr(reader, "_buffer", b"")
    data = bytes(buffered)
    if isinstance(buffered, bytearray):
        buffered.clear()
    return data, reader.at_eof()


class FrameReads(asyncio.Protocol):
    """The protocol of one authenticated control socket (module docstring).

    ``deliver(kind, payload)`` handles one frame; ``close(reason)`` closes the connection (and
    the transport with it) and ``closed()`` says whether it is closed; ``stream`` is the
    socket's protocol before, which keeps the writer's flow control. Not thread-safe."""

    def __init__(
        self,
        transport: asyncio.Transport,
        stream: asyncio.BaseProtocol,
        *,
        deliver: Callable[[FrameKind, bytes], None],
        close: Callable[[str], None],
        closed: Callable[[], bool],
        rate: ControlRate | None,
        partial_frame_s: float,
    ) -> None:
        self._transport = transport
        self._stream = stream
        self._deliver = deliver
        self._close = close
        self._closed = closed
        self._rate = rate
        self._partial_frame_s = partial_frame_s
        self._loop = asyncio.get_running_loop()
        self._decoder = FrameDecoder()
        self._paid: list[tuple[FrameKind, bytes]] = []  # a batch waiting out its rate hold
        self._resume: asyncio.Handle | None = None  # our own pause, until it ends
        self._partial: asyncio.TimerHandle | None = None  # the begun frame's deadline
        self._eof = False  # the peer's end of stream came: close once what came before is handled

    def start(self, buffered: bytes, eof: bool) -> None:
        """Take the socket over with ``buffered`` (:func:`leftover`) first; the first frames are
        handled in a callback of their own, after the caller's."""
        self._transport.set_protocol(self)
        self._decoder.append(buffered)
        self._eof = eof
        self._pause(0.0)

    def stop(self) -> None:
        """The connection closed: no callback of ours runs any more."""
        for handle in (self._resume, self._partial):
            if handle is not None:
                handle.cancel()
        self._resume = self._partial = None

    # ------------------------------------------------------------------ asyncio.Protocol

    def data_received(self, data: bytes) -> None:
        try:
            self._decoder.append(data)
        except FrameError as exc:
            self._close(f"frame error: {exc}")
            return
        if self._resume is None:  # else: read before the pause took effect; handled after it
            self._handle()

    def eof_received(self) -> bool:
        self._eof = True
        if self._resume is None:
            self._handle()
        return True  # the transport stays open until the frames before the end are handled

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop()
        self._stream.connection_lost(exc)
        self._close("closed by the peer" if exc is None else f"read failed: {exc}")

    def pause_writing(self) -> None:
        self._stream.pause_writing()

    def resume_writing(self) -> None:
        self._stream.resume_writing()

    # ------------------------------------------------------------------ frames

    def _handle(self) -> None:
        try:
            self._batches()
        except FrameError as exc:
            self._close(f"frame error: {exc}")
        except Exception as exc:
            # A handler failed on something this peer sent (a defect of ours, not a typed
            # refusal): close the connection, as for any peer fault, rather than leave a
            # session nobody reads. Logged: it is a bug to fix.
            _log.exception("control frame handler failed; closing the connection")
            self._close(f"handler failed: {type(exc).__name__}: {exc}")

    def _batches(self) -> None:
        took = False
        while not self._closed():
            paid, self._paid = self._paid, []
            batch = paid or self._decoder.take(READ_BATCH)
            if not batch:
                break
            took = True
            rate = self._rate
            if not paid and rate is not None:
                # paid for before it is handled: over its budget the peer waits, unread
                hold = rate.charge(len(batch))
                if hold and rate.flooding:
                    self._close("control flood: over its frame rate for too long")
                    return
                if hold:
                    self._paid = batch
                    self._pause(hold)
                    return
            for kind, payload in batch:
                self._deliver(kind, payload)
                if self._closed():  # a handler closed it
                    return
            if len(batch) == READ_BATCH:
                self._pause(0.0)  # let the other connections run
                return
        if self._eof:
            self._close("closed by the peer")
        elif not self._closed():
            self._watch_partial(took)

    def _watch_partial(self, took: bool) -> None:
        # Every complete frame is handled: what is left is one frame begun, whose deadline
        # runs from its first byte (a new frame begins when one was just taken)
        if not self._decoder.buffered:
            if self._partial is not None:
                self._partial.cancel()
                self._partial = None
        elif took or self._partial is None:
            if self._partial is not None:
                self._partial.cancel()
            self._partial = self._loop.call_later(self._partial_frame_s, self._too_slow)

    def _too_slow(self) -> None:
        self._partial = None
        self._close(f"a frame begun was not whole in {self._partial_frame_s} s")

    def _pause(self, delay: float) -> None:
        # Not read until ``delay`` passed (0: the loop ran once more); the begun frame's
        # deadline restarts after it (our pauses do not count against the peer)
        if self._partial is not None:
            self._partial.cancel()
            self._partial = None
        if not self._transport.is_closing():
            self._transport.pause_reading()
        if delay > 0:
            self._resume = self._loop.call_later(delay, self._resumed)
        else:
            self._resume = self._loop.call_soon(self._resumed)

    def _resumed(self) -> None:
        self._resume = None
        if self._closed():
            return
        if not self._transport.is_closing():
            self._transport.resume_reading()
        self._handle()
