"""Length-prefixed control frames (sans-IO): ``[u32 length][u8 kind][payload]``.

``length`` counts the kind byte and the payload. The decoder reads the five header bytes, checks
the length against the kind's bound and only then waits for (and buffers) the payload, so a peer
cannot make it allocate more than ``max bound + 5`` bytes
(docs/transport_design.md#transport-rule-3: every length is bounded before anything is allocated).
Payloads are CBOR: the credit messages of ``tent_credit``'s codec (kind CREDIT) and the transport's
own messages (``_messages.py``).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping
from types import MappingProxyType

from tent_credit import MAX_MESSAGE_BYTES

from ._errors import FrameError

__all__ = ["FRAME_BOUNDS", "FrameDecoder", "FrameKind", "encode_frame"]

_HEADER = struct.Struct("!IB")


class FrameKind(enum.IntEnum):
    """What a control frame carries."""

    CREDIT = 1
    """A ``tent_credit`` control message (fed to the sans-IO endpoint as is)."""
    SESSION = 2
    """Receiver → sender: the receiver's transport session (rails to open data connections to)."""
    DESCRIPTORS = 3
    """Receiver → sender: the segment descriptors of the regions exposed to this sender."""
    VERBS = 4
    """Both ways: the verbs out-of-band exchange (QP endpoints, region rkeys)."""


FRAME_BOUNDS: Mapping[FrameKind, int] = MappingProxyType(
    {
        FrameKind.CREDIT: MAX_MESSAGE_BYTES,
        FrameKind.SESSION: 4096,
        FrameKind.DESCRIPTORS: 256 * 1024,
        FrameKind.VERBS: 4096,
    }
)
"""Largest payload accepted per kind (bytes)."""


def encode_frame(kind: FrameKind, payload: bytes) -> bytes:
    """One frame. Raises :class:`FrameError` if ``payload`` exceeds its kind's bound (we never
    send what the peer must refuse)."""
    bound = FRAME_BOUNDS[kind]
    if len(payload) > bound:
        raise FrameError(f"{kind.name} payload of {len(payload)} bytes exceeds {bound}")
    return _HEADER.pack(len(payload) + 1, int(kind)) + payload


class FrameDecoder:
    """Cuts a byte stream into frames. Not thread-safe; one per connection.

    :meth:`feed` returns the complete frames so far; :meth:`append` and :meth:`take` do the
    same in steps, so that a reader can decode a few frames at a time and leave the rest as
    bytes (a peer held to its frame rate then costs the receiver its bytes, not a decoded
    frame per few bytes). A length of 0, an unknown kind or a length over the kind's bound
    raises :class:`FrameError`; the decoder is then poisoned (every later call raises too),
    because the stream position is lost and the connection must be closed. The frames before
    the bad header are handed out first: :meth:`take` returns them and the next call raises.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._need: tuple[FrameKind, int] | None = None  # the header read, payload pending
        self._failed: str | None = None

    def feed(self, data: bytes) -> list[tuple[FrameKind, bytes]]:
        self.append(data)
        return self.take()

    def append(self, data: bytes) -> None:
        """Buffer ``data``; nothing is decoded until :meth:`take`."""
        if self._failed is not None:
            raise FrameError(self._failed)
        self._buffer += data

    def take(self, limit: int | None = None) -> list[tuple[FrameKind, bytes]]:
        """The next complete frames, at most ``limit`` of them (``None``: all)."""
        if self._failed is not None:
            raise FrameError(self._failed)
        frames: list[tuple[FrameKind, bytes]] = []
        while limit is None or len(frames) < limit:
            if self._need is None:
                if len(self._buffer) < _HEADER.size:
                    return frames
                length, raw_kind = _HEADER.unpack_from(self._buffer)
                try:
                    self._need = self._check(length, raw_kind)
                except FrameError:
                    if frames:
                        return frames  # in stream order; the next call raises (poisoned)
                    raise
                del self._buffer[: _HEADER.size]
            kind, size = self._need
            if len(self._buffer) < size:
                return frames
            frames.append((kind, bytes(self._buffer[:size])))
            del self._buffer[:size]
            self._need = None
        return frames

    def _check(self, length: int, raw_kind: int) -> tuple[FrameKind, int]:
        try:
            kind = FrameKind(raw_kind)
        except ValueError:
            self._failed = f"unknown frame kind {raw_kind}"
            raise FrameError(self._failed) from None
        if length < 1 or length - 1 > FRAME_BOUNDS[kind]:
            bound = FRAME_BOUNDS[kind] + 1
            self._failed = f"{kind.name} frame length {length} outside [1, {bound}]"
            raise FrameError(self._failed)
        return kind, length - 1

    @property
    def buffered(self) -> int:
        """Bytes held: of frames not taken yet, and of an incomplete one (once every complete
        frame was taken, bounded by the largest kind bound + 5)."""
        return len(self._buffer)
