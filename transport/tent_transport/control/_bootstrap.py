"""The receiver's transport session, sent first on every control connection (frame SESSION).

Capability and rail setup happen here, once per connection (the RFC's "Extend BootstrapDesc:
capability/version negotiation only"); the credit negotiation itself runs through the credit
endpoints right after. CBOR, canonical, strictly decoded::

    [33, 1, session u64, credit [u16...], rails [[host tstr, port u16]...]]

``session`` numbers this control connection at the receiver: data headers, exposures and data
binds name it, and a new connection of the same peer gets a larger one (the old one's data
connections are then closed and its exposures revoked). ``credit`` lists the credit protocol
versions the receiver speaks; ``rails`` the data listeners, in rail order.
"""

from __future__ import annotations

import attrs
import cbor2

__all__ = ["BOOTSTRAP_TYPE", "MAX_RAILS", "BootstrapError", "SessionBootstrap"]

BOOTSTRAP_TYPE = 33
MAX_RAILS = 16
_U64_MAX = 2**64 - 1


class BootstrapError(ValueError):
    """Bytes that are not a valid session bootstrap (a peer fault)."""


@attrs.frozen(kw_only=True)
class SessionBootstrap:
    session: int
    credit_versions: tuple[int, ...]
    rails: tuple[tuple[str, int], ...]

    def encode(self) -> bytes:
        return cbor2.dumps(
            [
                BOOTSTRAP_TYPE,
                1,
                self.session,
                list(self.credit_versions),
                [[h, p] for h, p in self.rails],
            ],
            canonical=True,
        )

    @classmethod
    def decode(cls, data: bytes) -> SessionBootstrap:
        """Raises :class:`BootstrapError` for anything but a valid, canonical bootstrap."""
        try:
            raw = cbor2.loads(data)
        except (cbor2.CBORDecodeError, ValueError, OverflowError, RecursionError, TypeError) as e:
            raise BootstrapError(f"CBOR decoding failed: {e}") from e
        if type(raw) is not list or len(raw) != 5 or raw[0] != BOOTSTRAP_TYPE or raw[1] != 1:
            raise BootstrapError("not a version-1 session bootstrap")
        _, _, session, versions, rails = raw
        if type(session) is not int or not 0 < session <= _U64_MAX:
            raise BootstrapError(f"bad session {session!r}")
        if type(versions) is not list or len(versions) > 8 or len(set(versions)) != len(versions):
            raise BootstrapError("credit versions must be a short unique list")
        if any(type(v) is not int or not 0 < v <= 0xFFFF for v in versions):
            raise BootstrapError("credit versions must be non-zero u16")
        if type(rails) is not list or not 0 < len(rails) <= MAX_RAILS:
            raise BootstrapError(f"rails must list 1..{MAX_RAILS} listeners")
        parsed: list[tuple[str, int]] = []
        for rail in rails:
            if (
                type(rail) is not list
                or len(rail) != 2
                or type(rail[0]) is not str
                or not 0 < len(rail[0]) <= 255
                or type(rail[1]) is not int
                or not 0 < rail[1] <= 0xFFFF
            ):
                raise BootstrapError(f"bad rail {rail!r}")
            parsed.append((rail[0], rail[1]))
        message = cls(session=session, credit_versions=tuple(versions), rails=tuple(parsed))
        if message.encode() != bytes(data):
            raise BootstrapError("encoding is not canonical")
        return message
