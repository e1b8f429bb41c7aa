"""RDMA bandwidth arbitration: the post order of slices on one NIC (docs/semantics.md#arbitration).

The arbitration only reorders: it never drops, admits or moves a slice to another NIC. It runs
within one priority tier (:func:`order_tiers` runs it per tier); the caller then posts a prefix of
the order bounded by the queue pair's budget (:func:`postable_prefix`) and re-orders the rest on
its next tick.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

import attrs

from ._describe import describe
from ._mlu import mlu
from .errors import InvalidArgument

__all__ = [
    "DEFAULT_MAX_QP_WR",
    "EXACT_SLOTS",
    "Slice",
    "order_by_deadline",
    "order_tiers",
    "postable_prefix",
]

EXACT_SLOTS = 64
"""Slots the greedy resolves exactly; the rest is ranked once (docs/semantics.md#arbitration)."""

DEFAULT_MAX_QP_WR = 256
"""The reference's default work-request budget of one queue pair (``max_qp_wr``)."""

_T = TypeVar("_T")


_IntValidator = Callable[[object, "attrs.Attribute[int]", int], None]


def _int_at_least(minimum: int) -> _IntValidator:
    def check(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
        if type(value) is not int or value < minimum:
            raise InvalidArgument(f"{attr.name} must be an int >= {minimum}, got {describe(value)}")

    return check


def _any_int(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int:
        raise InvalidArgument(f"{attr.name} must be an int, got {describe(value)}")


def _hashable(_inst: object, attr: attrs.Attribute[Hashable], value: Hashable) -> None:
    try:
        hash(value)
    except TypeError:
        raise InvalidArgument(f"{attr.name} must be hashable, got {describe(value)}") from None


@attrs.frozen(kw_only=True)
class Slice:
    """One slice about to be posted on a NIC.

    ``deadline_ns`` 0 means no deadline (it scores 0 and is never urgent). ``priority`` is the QoS
    tier: a *lower* value is a higher tier and posts first (0 is the highest, the reference's
    default ``PRIO_HIGH``). ``ident`` is the caller's handle, carried through untouched.
    An invalid field raises ``InvalidArgument``.
    """

    length: int = attrs.field(validator=_int_at_least(1))
    deadline_ns: int = attrs.field(default=0, validator=_int_at_least(0))
    priority: int = attrs.field(default=0, validator=_any_int)
    ident: Hashable = attrs.field(default=None, validator=_hashable)


def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond the float range
        return False


def _validate(
    slices: Sequence[Slice], bandwidth_bps: float, posted_bytes: int, now_ns: int
) -> None:
    if not isinstance(slices, Sequence):
        raise InvalidArgument(f"slices must be a sequence of Slice, got {describe(slices)}")
    for position, item in enumerate(slices):
        if not isinstance(item, Slice):
            raise InvalidArgument(f"slices[{position}] is not a Slice: {describe(item)}")
    if (
        isinstance(bandwidth_bps, bool)
        or not isinstance(bandwidth_bps, int | float)
        or not _finite(bandwidth_bps)
    ):
        raise InvalidArgument(
            f"bandwidth_bps must be a finite number, got {describe(bandwidth_bps)}"
        )
    if type(posted_bytes) is not int or posted_bytes < 0:
        raise InvalidArgument(f"posted_bytes must be an int >= 0, got {describe(posted_bytes)}")
    if type(now_ns) is not int or now_ns < 0:
        raise InvalidArgument(f"now_ns must be an int >= 0, got {describe(now_ns)}")


def order_by_deadline(
    slices: Sequence[Slice], bandwidth_bps: float, posted_bytes: int, now_ns: int
) -> list[int]:
    """Return the post order of ``slices`` as a permutation of their indices
    (docs/semantics.md#arbitration).

    ``bandwidth_bps`` is this NIC's transmit estimate, ``posted_bytes`` its posted-but-uncompleted
    bytes. The policy:

    1. Fewer than 2 slices, ``bandwidth_bps <= 0`` or no slice with a deadline → arrival order.
    2. ``bytes_ahead`` starts at ``posted_bytes``. For each of the first :data:`EXACT_SLOTS`
       slots, every unplaced slice is scored with ``deadline_mlu(bytes_ahead, length, deadline_ns,
       now_ns, bandwidth_bps)``; the highest score takes the slot (strictly greater wins, so ties
       go to the lowest index) and its length joins ``bytes_ahead``.
    3. Past that slot, the rest are scored once against the accumulated ``bytes_ahead`` and
       stable-sorted by score, descending (ties keep arrival order).

    Never drops a slice. The greedy gives exactly the result of scoring every slice in every slot
    but scores far fewer: it relies on the shape of ``deadline_mlu`` (§1: 0.0 without a
    deadline, DBL_MAX when past due, otherwise non-decreasing in length and non-increasing in
    deadline, as float64 rounding is monotone). Slices of equal length and deadline score alike,
    so their lowest unplaced index stands for them; the future-deadline groups are scanned by
    deadline and the scan stops once the score the longest remaining length would have at that
    deadline falls below the best score found. Raises ``InvalidArgument`` for an element that is
    not a :class:`Slice`, a non-finite bandwidth, or negative ``posted_bytes``/``now_ns``.
    """
    _validate(slices, bandwidth_bps, posted_bytes, now_ns)
    count = len(slices)
    if count < 2 or bandwidth_bps <= 0 or not any(s.deadline_ns for s in slices):
        return list(range(count))

    # Three kinds of slice, as deadline_mlu scores them (docs/semantics.md#mlu): no deadline (always
    # 0.0), past due (always DBL_MAX) and future deadlines, grouped by equal (deadline, length).
    # Each list or group holds its indices in ascending order, so its head is its best tie-breaker.
    no_deadline: deque[int] = deque()
    past_due: deque[int] = deque()
    groups: dict[tuple[int, int], deque[int]] = {}
    for index, item in enumerate(slices):
        if item.deadline_ns == 0:
            no_deadline.append(index)
        elif item.deadline_ns <= now_ns:
            past_due.append(index)
        else:
            groups.setdefault((item.deadline_ns, item.length), deque()).append(index)
    scan = sorted(groups)  # future groups by deadline, ascending
    group_lengths = sorted(length for _, length in scan)  # the longest is the last

    # Those two kinds score the same whatever bytes_ahead is: score each once.
    past_due_score = no_deadline_score = 0.0
    if past_due:
        item = slices[past_due[0]]
        past_due_score = mlu(0, item.length, item.deadline_ns, now_ns, bandwidth_bps)
    if no_deadline:
        item = slices[no_deadline[0]]
        no_deadline_score = mlu(0, item.length, 0, now_ns, bandwidth_bps)

    order: list[int] = []
    bytes_ahead = posted_bytes
    for _ in range(min(count, EXACT_SLOTS)):
        # best_source: -1 past due, -2 no deadline, else a position in ``scan``. Every score
        # is >= 0, so some slice always replaces the initial -1.0.
        best_score, best_index, best_source = -1.0, count, -1
        if past_due:
            best_score, best_index, best_source = past_due_score, past_due[0], -1
        if no_deadline and (
            no_deadline_score > best_score
            or (no_deadline_score == best_score and no_deadline[0] < best_index)
        ):
            best_score, best_index, best_source = no_deadline_score, no_deadline[0], -2
        if scan:
            # deadline_mlu is non-decreasing in length and non-increasing in deadline, so the
            # score of the longest group at this deadline bounds every group from here on: once
            # the bound is below the best score, nothing later can win or tie.
            longest = group_lengths[-1]
            for position, (deadline, length) in enumerate(scan):
                bound = mlu(bytes_ahead, longest, deadline, now_ns, bandwidth_bps)
                if bound < best_score:
                    break
                score = (
                    bound
                    if length == longest
                    else mlu(bytes_ahead, length, deadline, now_ns, bandwidth_bps)
                )
                head = groups[deadline, length][0]
                if score > best_score or (score == best_score and head < best_index):
                    best_score, best_index, best_source = score, head, position
        if best_source == -1:
            past_due.popleft()
        elif best_source == -2:
            no_deadline.popleft()
        else:
            key = scan[best_source]
            members = groups[key]
            members.popleft()
            if not members:
                del scan[best_source], groups[key]
                del group_lengths[bisect.bisect_left(group_lengths, key[1])]
        order.append(best_index)
        bytes_ahead += slices[best_index].length

    # docs/semantics.md#arbitration: past slot 64, one score per slice against the accumulated
    # bytes_ahead.
    rest: list[tuple[float, int]] = []
    for index in (*past_due, *no_deadline):
        item = slices[index]
        score = mlu(bytes_ahead, item.length, item.deadline_ns, now_ns, bandwidth_bps)
        rest.append((score, index))
    for (deadline, length), members in groups.items():
        score = mlu(bytes_ahead, length, deadline, now_ns, bandwidth_bps)
        rest.extend((score, index) for index in members)
    rest.sort(key=lambda pair: (-pair[0], pair[1]))  # score descending, then arrival order
    order.extend(index for _, index in rest)
    return order


def order_tiers(
    slices: Sequence[Slice], bandwidth_bps: float, posted_bytes: int, now_ns: int
) -> list[int]:
    """Order ``slices`` tier by tier, arbitrating by deadline within each tier.

    1. Tiers post in ascending ``priority`` value: 0 (``PRIO_HIGH``, the default) first. QoS
       decides which tier posts first; the arbitration only orders inside a tier.
    2. Each tier is ordered by :func:`order_by_deadline` over its own slices (in arrival order).
    3. A tier's ``bytes_ahead`` starts at ``posted_bytes`` plus the lengths of every slice of the
       higher tiers, since those post ahead of it on the same NIC in this pass.

    Returns a permutation of the indices of ``slices``. Raises ``InvalidArgument`` as
    :func:`order_by_deadline` does.
    """
    _validate(slices, bandwidth_bps, posted_bytes, now_ns)
    tiers: dict[int, list[int]] = {}
    for index, item in enumerate(slices):
        tiers.setdefault(item.priority, []).append(index)
    order: list[int] = []
    ahead = posted_bytes
    for priority in sorted(tiers):
        indices = tiers[priority]
        tier = [slices[index] for index in indices]
        order.extend(
            indices[local] for local in order_by_deadline(tier, bandwidth_bps, ahead, now_ns)
        )
        ahead += sum(item.length for item in tier)
    return order


def postable_prefix(
    order: Sequence[_T], *, max_qp_wr: int = DEFAULT_MAX_QP_WR, outstanding_wr: int
) -> tuple[list[_T], list[_T]]:
    """Split ``order`` into what fits the queue pair's budget now and what waits a tick.

    The budget is ``max_qp_wr - outstanding_wr`` work requests (docs/semantics.md#arbitration);
    ``post_now`` is the longest prefix of ``order`` within it and ``later`` the rest, for the next
    tick's re-ordering. Raises ``InvalidArgument`` unless ``max_qp_wr >= 1`` and ``0 <=
    outstanding_wr
    <= max_qp_wr`` (a queue pair never holds more than its budget).
    """
    if not isinstance(order, Sequence) or isinstance(order, str | bytes):
        raise InvalidArgument(f"order must be a sequence, got {describe(order)}")
    if type(max_qp_wr) is not int or max_qp_wr < 1:
        raise InvalidArgument(f"max_qp_wr must be an int >= 1, got {describe(max_qp_wr)}")
    if type(outstanding_wr) is not int or not 0 <= outstanding_wr <= max_qp_wr:
        raise InvalidArgument(
            f"outstanding_wr must be an int in [0, {max_qp_wr}], got {describe(outstanding_wr)}"
        )
    budget = max_qp_wr - outstanding_wr
    return list(order[:budget]), list(order[budget:])
