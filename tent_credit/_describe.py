"""Bounded descriptions of untrusted values for error messages.

An error message must never format an unbounded value a peer or a careless caller chose:
CPython refuses to turn an integer of over 4,300 digits into a string (``ValueError``), and a
megabyte-long repr is a denial of service of its own. :func:`describe` caps what goes in.
"""

from __future__ import annotations

import enum

__all__ = ["describe"]

_MAX_BITS = 128  # the widest integer any field holds (a session id)
_MAX_CHARS = 32


def describe(value: object) -> str:
    """A short description of ``value`` whose length does not depend on the value's size.

    Integers of at most 128 bits and enum members print as themselves; a wider integer as its
    bit length; strings and byte strings as a truncated repr and their length; containers as
    their type and length; anything else as its type name.
    """
    if value is None or isinstance(value, bool | float):
        return repr(value)
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, int):
        bits = value.bit_length()
        return str(int(value)) if bits <= _MAX_BITS else f"an integer of {bits} bits"
    if isinstance(value, str | bytes | bytearray):
        if len(value) <= _MAX_CHARS:
            return repr(value)
        return f"{value[:_MAX_CHARS]!r}... ({len(value)} long)"
    if isinstance(value, list | tuple | dict | set | frozenset):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"a {type(value).__name__}"
