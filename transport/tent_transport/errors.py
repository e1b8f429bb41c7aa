"""Typed exceptions of :mod:`tent_transport`.

The same base names as :mod:`tent_credit.errors` and :mod:`tent_sched.errors`, so the three
packages read alike: ``InvalidArgument`` (IA), ``InvalidEntry`` (IE) and ``TooManyRequests``
(TMR), plus ``LocalProtocolError`` / ``RemoteProtocolError`` for misuse by our caller versus a
fault of the peer (h11/h2 style). Expected outcomes are values, never exceptions: a credit stall
is a pending transfer with a ``BackpressureInfo``, a drop is a ``CANCELED`` status.

An error a core raised is re-raised as the matching class here with the core's exception as its
``__cause__``, so a caller catches one family.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "ConnectionLost",
    "ExceedsDispatchWindow",
    "HandshakeFailed",
    "InvalidArgument",
    "InvalidEntry",
    "LocalProtocolError",
    "NotSupported",
    "PostRefused",
    "RemoteProtocolError",
    "TooManyRequests",
    "TransferFailed",
    "TransportError",
    "UnknownHandle",
]


class TransportError(Exception):
    """Base class of every exception raised by :mod:`tent_transport`."""


class InvalidArgument(TransportError, ValueError):
    """IA: an argument is malformed or out of range. Nothing changed."""


class InvalidEntry(TransportError, LookupError):
    """IE: the id named is unknown (or already retired) or in the wrong state. Nothing changed."""


class UnknownHandle(InvalidEntry, InvalidArgument):
    """A batch id or task id of the batch API that names nothing: never allocated or published,
    or freed. An :class:`InvalidEntry` (the id is unknown) and also an :class:`InvalidArgument`,
    which is what TENT's ``getTransferStatus`` / ``freeBatch`` answer for such a handle, so a
    caller ported from it catches it either way. Nothing changed."""


class TooManyRequests(TransportError):
    """TMR: a capacity limit (queue, window, rail) would be exceeded. Nothing changed."""


class ExceedsDispatchWindow(InvalidArgument, TooManyRequests):
    """A request longer than ``runtime_queue/max_dispatch_bytes``, refused at submit: an
    InvalidArgument (no retry can ever dispatch it) that is also a TooManyRequests, TENT's answer
    for it. Nothing changed."""


class NotSupported(TransportError):
    """The operation needs a capability the device (or peer) lacks, e.g. canceling a slice a
    rail already posted on a device without :class:`~tent_transport.devices.Cancellable`.
    Nothing changed."""


class ConfigError(InvalidArgument):
    """A configuration value is missing, of the wrong type, out of range, unknown, or the
    configuration as a whole is refused (receiver credit without the runtime queue)."""


class PostRefused(TooManyRequests):
    """A Device refused a post, all or nothing: more slices than its budget, slices for more than
    one peer, or a QP/connection that is not ready. Nothing was posted.

    ``ready`` is ``False`` when the QP or connection was not ready (the dispatch core retries on a
    later pass), ``True`` when the post itself was malformed for a ready device.
    """

    def __init__(self, message: str, *, ready: bool = False) -> None:
        super().__init__(message)
        self.ready = ready

    def __reduce__(self) -> tuple[object, ...]:
        # keep ``ready`` across pickling (process pools, pytest-xdist reports)
        return (_post_refused, (str(self), self.ready))


def _post_refused(message: str, ready: bool) -> PostRefused:
    return PostRefused(message, ready=ready)


class TransferFailed(TransportError):
    """A transfer ended without its bytes (verifiably) moving; raised by waiting on its handle.

    ``status`` is the terminal task status's name (``"failed"``, ``"canceled"``, ``"timeout"``,
    ``"invalid"``) and ``detail`` the first slice failure or the reason (drop, fence, cancel).
    """

    def __init__(self, message: str, *, status: str, detail: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail

    def __reduce__(self) -> tuple[object, ...]:
        return (_transfer_failed, (str(self), self.status, self.detail))


def _transfer_failed(message: str, status: str, detail: str) -> TransferFailed:
    return TransferFailed(message, status=status, detail=detail)


class LocalProtocolError(TransportError):
    """Our caller drove the engine in a way it forbids (e.g. a submit to an unconnected peer)."""


class RemoteProtocolError(TransportError):
    """The peer violated a protocol (a malformed frame, a write outside its lease). Fail closed."""


class HandshakeFailed(RemoteProtocolError):
    """The peer did not prove its identity (TLS or PSK); the connection was closed before any of
    its frames was decoded."""


class ConnectionLost(TransportError):
    """A control or data connection closed or timed out; work on it failed or is flushed."""
