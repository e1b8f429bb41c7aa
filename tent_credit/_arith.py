"""Checked u64 / u128 arithmetic (docs/design.md#principle-6: overflow is an error, never a
wrap)."""

from __future__ import annotations

from ._describe import describe
from .errors import ArithmeticOverflow, InvalidArgument

__all__ = ["U32_MAX", "U64_MAX", "U128_MAX", "check_u64", "checked_add", "checked_sub"]

U32_MAX = (1 << 32) - 1
U64_MAX = (1 << 64) - 1
U128_MAX = (1 << 128) - 1


def check_u64(value: int, what: str = "value") -> int:
    """Return ``value`` if it is an ``int`` in [0, 2**64 - 1]; else raise InvalidArgument."""
    if type(value) is not int:  # bool is an int subclass: reject it explicitly
        raise InvalidArgument(f"{what} must be an int, got {type(value).__name__}")
    if value < 0 or value > U64_MAX:
        raise InvalidArgument(f"{what} {describe(value)} is outside u64")
    return value


def checked_add(a: int, b: int) -> int:
    """``a + b`` for u64 operands; :class:`ArithmeticOverflow` if the sum exceeds 2**64 - 1.

    pre: 0 <= a <= U64_MAX
    pre: 0 <= b <= U64_MAX
    raises: ArithmeticOverflow
    post: __return__ == a + b
    post: __return__ <= U64_MAX
    """
    total = a + b
    if total > U64_MAX:
        raise ArithmeticOverflow(f"u64 overflow: {describe(a)} + {describe(b)}")
    return total


def checked_sub(a: int, b: int) -> int:
    """``a - b`` for u64 operands; :class:`ArithmeticOverflow` if the result is negative.

    pre: 0 <= a <= U64_MAX
    pre: 0 <= b <= U64_MAX
    raises: ArithmeticOverflow
    post: __return__ == a - b
    post: 0 <= __return__ <= a
    """
    if b > a:
        raise ArithmeticOverflow(f"u64 underflow: {describe(a)} - {describe(b)}")
    return a - b
