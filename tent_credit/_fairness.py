"""How free capacity is split among keys with live demand (issue 10 item 8; docs/abuse.md).

Max-min fairness on *holdings*: every key with live demand may rise toward one common water
level ``L`` (its outstanding plus what it is granted now, never beyond what it wants), and ``L``
is the highest level at which the free capacity covers everyone's rise. A key already above the
level gets nothing new until the others catch up; a key that wants less than its share leaves
the rest to the others. Computed per resource, on integers.

The level does not move when one key takes its share (its rise is part of the sum that defined
the level), so grants carved one key at a time, in any order, add up to the same split.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

__all__ = ["GrantSplit", "max_min_share"]


class GrantSplit(enum.Enum):
    """The policy that decides how much of free capacity one demanding key may take."""

    MAX_MIN_FAIR = "max_min_fair"  # water-filling over the keys with live demand (default)
    FIRST_COME = "first_come"  # whoever asks first may take all free capacity (the old policy)


def max_min_share(free: int, me: tuple[int, int], others: Iterable[tuple[int, int]]) -> int:
    """My share of ``free`` under max-min fair water-filling.

    ``me`` and each of ``others`` is ``(held, want)``: what a key holds now and what more it
    wants (both ≥ 0). Returns ``min(want, max(0, L − held))`` for the highest integer level ``L``
    with ``Σ min(want_k, max(0, L − held_k)) ≤ free`` over all keys. Integer levels can leave a
    remainder below one unit per key unassigned here; the caller's per-grant minimum (at least
    one unit) hands it out first-come, so no capacity is stranded.

    pre: free >= 0 and me[0] >= 0 and me[1] >= 0
    post: 0 <= __return__ <= me[1]
    post: __return__ <= free
    """
    entries = [me, *(entry for entry in others if entry[1] > 0)]
    level = _water_level(free, entries)
    if level is None:
        return me[1]  # the free capacity covers everyone's whole want
    held, want = me
    return min(want, max(0, level - held))


def _water_level(free: int, entries: list[tuple[int, int]]) -> int | None:
    """The highest integer level whose total rise ``Σ clamp(L − held, 0, want)`` fits ``free``
    (``None`` if even full wants fit). The rise is piecewise linear in ``L``: its slope goes up
    by one at each ``held`` and down by one at each ``held + want``; one sweep over those
    breakpoints finds the level (O(n log n))."""
    steps: dict[int, int] = {}
    for held, want in entries:
        if want > 0:
            steps[held] = steps.get(held, 0) + 1
            steps[held + want] = steps.get(held + want, 0) - 1
    rise = 0  # the total rise at `at`
    slope = 0
    at = 0
    for point in sorted(steps):
        if slope and rise + slope * (point - at) > free:
            return at + (free - rise) // slope
        rise += slope * (point - at)
        at = point
        slope += steps[point]
    return None  # past the last breakpoint the slope is 0: everything fits
