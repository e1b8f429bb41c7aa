"""Typed failures of the control service and the TCP data path.

Local vs remote (STYLE "errors"): a :class:`HandshakeFailed` or :class:`FrameError` means the
*peer* (or someone pretending to be it) sent something the protocol forbids; the connection is
closed and nothing it sent was decoded past the failing point.
"""

from __future__ import annotations

__all__ = ["ConnectionClosed", "FrameError", "HandshakeFailed", "NetError"]


class NetError(Exception):
    """Base class of the control service's and the TCP device's errors."""


class HandshakeFailed(NetError):
    """The peer did not prove the identity it claimed (bad key, bad certificate, wrong peer,
    malformed hello). The connection is closed before any frame of it is decoded."""


class FrameError(NetError):
    """A frame is malformed: a length over its bound, an unknown kind, a truncated frame.
    Nothing was allocated for it; the connection is closed."""


class ConnectionClosed(NetError):
    """The connection is gone (closed locally, by the peer, or after a failure)."""
