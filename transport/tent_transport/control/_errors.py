"""The control service's failures, in :mod:`tent_transport.errors`' family.

A :class:`HandshakeFailed` or :class:`FrameError` means the *peer* (or someone pretending to be
it) sent something the protocol forbids; the connection is closed and nothing it sent was
decoded past the failing point.
"""

from __future__ import annotations

from ..errors import ConnectionLost, HandshakeFailed, RemoteProtocolError

__all__ = ["ConnectionLost", "FrameError", "HandshakeFailed"]


class FrameError(RemoteProtocolError):
    """A frame is malformed: a length over its bound, an unknown kind. Nothing was allocated
    for it; the connection is closed."""
