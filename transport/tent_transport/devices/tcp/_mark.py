"""The receive low-water mark of a connection while it reads a large payload.

A payload of at least :data:`READ_MARK_FROM` bytes is read with the socket's ``SO_RCVLOWAT``
at :data:`READ_MARK` bytes, or at what is left of it when less: the loop is woken when that much
has arrived instead of for every burst of segments, and a 4 MiB payload takes about 2 reads
instead of 17 (docs/transport.md#transport-read-mark). The mark never exceeds what is still to
come, so a wake is always due; Linux caps it at half the receive buffer and wakes a reader
early when the buffer is under pressure or the peer closed; it goes back to 1 after the
payload, so a header is read as it comes. Not the whole payload: the sender would then fill the
buffer before the reader copied any of it (4 MiB measured slower than 2, and 2 faster than 1).
Plaintext sockets only: under TLS the bytes on the wire are records, which the SSL layer above
the socket buffers itself. Used by the receiver's data connections (write payloads) and by the
sender's (READ answers).
"""

from __future__ import annotations

import socket
from typing import Any

__all__ = ["READ_MARK", "READ_MARK_FROM", "ReadMark"]

READ_MARK_FROM = 256 << 10
READ_MARK = 2 << 20


class ReadMark:
    """``SO_RCVLOWAT`` of one socket (``None``: a TLS or test transport, nothing is set)."""

    __slots__ = ("_sock", "mark")

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self.mark = 1

    def payload(self, length: int) -> None:
        """A payload of ``length`` bytes is about to be read."""
        if length >= READ_MARK_FROM and self._sock is not None:
            self._set(min(length, READ_MARK))

    def left(self, left: int) -> None:
        """``left`` bytes of the payload are still to come (0: it is whole)."""
        if not left:
            if self.mark != 1:
                self._set(1)
        elif left < self.mark:
            self._set(left)

    def _set(self, mark: int) -> None:
        self.mark = mark
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, mark)
        except OSError:  # a platform without it, or the socket is closing: read as before
            self._sock = None
            self.mark = 1
