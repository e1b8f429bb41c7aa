"""Wire error codes: the numbers a peer is told, shared by the codec and the exceptions.

They live in a module of their own, importing nothing from the package, so both
:mod:`tent_credit._wire` (which raises with them) and :mod:`tent_credit.errors` (whose
``DecodeError`` carries one) import them without an import cycle.
"""

from __future__ import annotations

import enum

__all__ = ["WireErrorCode"]


class WireErrorCode(enum.IntEnum):
    """Why bytes off the wire were refused (carried by ``DecodeError.code``).

    Kept apart from the Python exception classes, like h2's ``ErrorCodes``: these numbers are
    what a peer would be told; the exception hierarchy is what Python callers catch.
    """

    MALFORMED = 1
    """Not well-formed CBOR, or outside the CBOR subset the schema uses (indefinite lengths,
    maps, floats and simple values, tags other than bignum, trailing bytes, truncation)."""
    UNKNOWN_TYPE = 2
    """The type tag names no known message."""
    UNSUPPORTED_SCHEMA = 3
    """The schema version is not one this codec speaks (only schema version 1)."""
    TOO_LARGE = 4
    """The message is longer than the size bound."""
    INVALID_FIELD = 5
    """A field has the wrong type, is out of range, or breaks a list rule (length, uniqueness)."""
    TOO_DEEP = 6
    """Nesting deeper than :data:`tent_credit._wire.MAX_DEPTH`."""
    NON_CANONICAL = 7
    """Valid content in a non-canonical encoding (a non-minimal integer or length, a bignum for
    a value that fits in 64 bits, a bignum with leading zero bytes)."""
