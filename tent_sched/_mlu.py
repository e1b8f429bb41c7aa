"""The MLU predictor of deadline scheduling (docs/semantics.md#mlu).

``deadline_mlu`` is the public, checked predictor; :func:`mlu` is the same formula without the
argument checks, for the hot paths of every drop check and of the bandwidth arbitration, whose
inputs are validated once per pick. The float64 operation order is pinned:
the spec keeps its own copy (``tent_spec.mlu.deadline_mlu``, docs/design.md#principle-2) and the two
must agree bit for bit, including at ``mlu == θ`` where the drop decision flips.
"""

from __future__ import annotations

import sys

from ._describe import describe
from .errors import InvalidArgument

__all__ = ["DBL_MAX", "deadline_mlu", "mlu"]

DBL_MAX: float = sys.float_info.max
"""MLU of a past-due owner: the largest finite float64 (the reference's DBL_MAX, not inf)."""


def deadline_mlu(
    bytes_ahead: int, length: int, deadline_ns: int, now_ns: int, bandwidth_bps: float
) -> float:
    """Predict the maximum link utilisation needed to meet ``deadline_ns`` (docs/semantics.md#mlu).

    1. ``deadline_ns == 0`` (no deadline) or ``bandwidth_bps <= 0`` (no estimate) → ``0.0``:
       checked first, so such an owner is never urgent and never dropped.
    2. ``deadline_ns <= now_ns`` (equal counts as past) → :data:`DBL_MAX`.
    3. Otherwise ``((bytes_ahead + length) / bandwidth_bps) / ((deadline_ns - now_ns) / 1e9)``,
       evaluated in exactly that order in float64.

    Pure. Raises :class:`~tent_sched.errors.InvalidArgument` for a counter that is not an int
    >= 0 or a bandwidth that is not an int or float (bools excluded); the scheduler's own hot
    loops call the unchecked :func:`mlu` on values they validated already.

    Contracts (CrossHair, u64 counters and a bandwidth that is not NaN):

    pre: 0 <= bytes_ahead <= 2**64 - 1 and 0 <= length <= 2**64 - 1
    pre: 0 <= deadline_ns <= 2**64 - 1 and 0 <= now_ns <= 2**64 - 1
    pre: bandwidth_bps == bandwidth_bps
    post: __return__ >= 0
    post: __return__ == 0.0 or (deadline_ns != 0 and bandwidth_bps > 0)
    post: __return__ == DBL_MAX or not (deadline_ns != 0 and 0 < bandwidth_bps and deadline_ns <= now_ns)
    """  # noqa: E501 (CrossHair reads each contract from one docstring line)
    for name, value in (
        ("bytes_ahead", bytes_ahead),
        ("length", length),
        ("deadline_ns", deadline_ns),
        ("now_ns", now_ns),
    ):
        if type(value) is not int or value < 0:  # sums of u64 lengths may pass 2**64
            raise InvalidArgument(f"{name} must be an int >= 0, got {describe(value)}")
    if type(bandwidth_bps) not in (int, float):
        raise InvalidArgument(f"bandwidth_bps must be a number, got {describe(bandwidth_bps)}")
    try:
        return mlu(bytes_ahead, length, deadline_ns, now_ns, bandwidth_bps)
    except OverflowError:  # an int bandwidth beyond float range
        raise InvalidArgument("bandwidth_bps is beyond the float range") from None


def mlu(
    bytes_ahead: int, length: int, deadline_ns: int, now_ns: int, bandwidth_bps: float
) -> float:
    """:func:`deadline_mlu` without its argument checks (for callers that validated them)."""
    if deadline_ns == 0 or bandwidth_bps <= 0:  # §1: checked first
        return 0.0
    if deadline_ns <= now_ns:  # §1: equal counts as past
        return DBL_MAX
    return ((bytes_ahead + length) / bandwidth_bps) / ((deadline_ns - now_ns) / 1e9)
