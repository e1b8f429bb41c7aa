"""Typed exceptions of :mod:`tent_credit`.

One exception per status class of the reference (docs/semantics.md): ``InvalidArgument`` (IA),
``InvalidEntry`` (IE), ``TooManyRequests`` (TMR). Expected outcomes of the protocol (an update
that is a duplicate, a reserve that is blocked) are *values*, never exceptions
(docs/design.md#principle-8).

Local vs remote: a :class:`LocalProtocolError` means *our* caller misused the API; a
:class:`RemoteProtocolError` means the peer sent something the protocol forbids (a malformed
message, a decreasing grant, a payload naming another peer). The wire error codes
(:class:`~tent_credit.WireErrorCode`) live in ``_codes``, apart from these Python exceptions
(h2's ``errors`` vs ``exceptions``).
"""

from __future__ import annotations

from ._codes import WireErrorCode

__all__ = [
    "ArithmeticOverflow",
    "CreditError",
    "DecodeError",
    "GrantDecreased",
    "InsufficientCredit",
    "InvalidArgument",
    "InvalidEntry",
    "KeyQuarantined",
    "LocalProtocolError",
    "NegotiationFailed",
    "RemoteProtocolError",
    "TooManyRequests",
]


class CreditError(Exception):
    """Base class of every exception raised by :mod:`tent_credit`."""


class InvalidArgument(CreditError, ValueError):
    """IA: an argument or message field is malformed or out of range. Nothing changed."""


class ArithmeticOverflow(InvalidArgument):
    """A checked u64 operation would overflow or underflow (never wraps, never clamps)."""


class InvalidEntry(CreditError, LookupError):
    """IE: the object named does not exist or is in the wrong state/epoch. Nothing changed."""


class TooManyRequests(CreditError):
    """TMR: a configured bound (entries, inbox slots, capacity) would be exceeded."""


class InsufficientCredit(TooManyRequests):
    """A reserve or return asked for more credit than is available. Nothing changed.

    ``exhausted`` lists the resources (``CreditResource`` members) that lacked credit.
    """

    def __init__(self, message: str, exhausted: tuple[object, ...] = ()) -> None:
        super().__init__(message)
        self.exhausted = exhausted


class LocalProtocolError(CreditError):
    """The local caller drove the protocol in a way it forbids (e.g. sending before activation)."""


class RemoteProtocolError(CreditError):
    """The peer violated the protocol (malformed, decreasing, wrong identity). Fail closed."""


class DecodeError(RemoteProtocolError, InvalidArgument):
    """Bytes off the wire are not a valid message of a known type and schema version.

    ``code`` is the :class:`tent_credit.WireErrorCode` a peer would be told (the wire-level
    reason), kept apart from the Python exception hierarchy (h2's ``errors`` vs ``exceptions``).
    """

    def __init__(self, message: str, code: WireErrorCode) -> None:
        super().__init__(message)
        self.code = code

    def __reduce__(self) -> tuple[type[DecodeError], tuple[str, WireErrorCode]]:
        # keep the code across pickling (e.g. pytest-xdist reporting a failure)
        return (type(self), (str(self), self.code))


class GrantDecreased(RemoteProtocolError, InvalidArgument):
    """A cumulative grant went below its previous total (IA; also covers "below consumed").

    Grants only move up within an epoch (RFC "Absolute cumulative grants"); a receiver that
    lowers one violates the protocol. The update is rejected and nothing changes.
    """


class NegotiationFailed(RemoteProtocolError):
    """REQUIRED mode and the peer offers no common protocol version (state FAILED)."""


class KeyQuarantined(RemoteProtocolError):
    """The credit key was quarantined for a protocol violation (RFC rule 4, docs/abuse.md).

    A quarantined key gets no further grants, no new epoch and no admitted write for the rest of
    the receiver session; what it held came back through fencing. The call changed nothing.
    """
