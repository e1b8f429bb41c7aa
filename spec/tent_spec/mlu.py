"""The spec's own copy of the MLU predictor (docs/semantics.md#mlu).

Kept apart from ``tent_sched.deadline_mlu`` on purpose (docs/design.md#principle-2) but with the
same float64 operation order, so spec and implementation agree bit for bit, also at ``mlu == θ``.
"""

from __future__ import annotations

import sys

DBL_MAX = sys.float_info.max


def deadline_mlu(
    bytes_ahead: int, length: int, deadline_ns: int, now_ns: int, bandwidth_bps: float
) -> float:
    """Predicted MLU: 0 without deadline or bandwidth, DBL_MAX when past due, else the ratio."""
    if deadline_ns == 0 or bandwidth_bps <= 0:  # checked first: never urgent, never dropped
        return 0.0
    if deadline_ns <= now_ns:  # equal counts as past
        return DBL_MAX
    return ((bytes_ahead + length) / bandwidth_bps) / ((deadline_ns - now_ns) / 1e9)
