"""Grant-ahead arithmetic of the gated spec (credit protocol version 2), written for review.

Under version 2 a sender's report states its **level**: the charges of its work on the key that
is in flight (committed, not completed) or waiting for credit. The receiver keeps the key's
*unlanded* credit (``granted − landed − reclaimed``: what the sender holds unused or has in
flight) topped up to the key's **hold**, in whole charges, as the key's data lands:

1. **unit**: one charge of the key's work, ``level / gcd(level)`` (a level ``(4, 2, 2)`` of two
   2-byte writes has the unit ``(2, 1, 1)``); the level in units is ``level / unit``.
2. **chunk**: the configured grant chunk (the RFC's lease batch) or, when it is 0, the key's
   fair share of the pool, rounded up: ``max(1, ceil(pool / (unit × active)))`` whole units,
   the smallest over the resources, where ``active`` counts the keys with a level.
3. **hold** = ``min(level, chunk)`` in units: an inflated level buys no more than the share.
4. **held**: the unlanded credit in units, counted *down* (whole units only) when the key is
   **settled** (every charge its sender reported consumed has landed: all of it is unused) and
   *up* otherwise (a charge partly landed still occupies its unit).
5. **quantum**: the fewest units one top-up carries: 1 for a hold of 1, 2 for a hold of 2 or
   3, else half the hold rounded up; for a key that is not **capped** (level ≤ hold) at most
   ``hold − 1``, so a lone sender is topped up while one of its units is still in flight.
6. A top-up is **due** when ``deficit = hold − held`` reaches the quantum. A top-up of ``n``
   units adds ``n`` charges, never a part of one: a fragment the key holds (credit short of
   one unit, an activation grant below the charge say) is not completed, its sender returns
   it (report rule 5, :meth:`~tent_spec.gated._core.GatedCore.return_uncovered`).

This module is pure integer arithmetic on resource vectors (tuples of ints); the receiver's
waiting line that serves due keys is :class:`~tent_spec.gated._line.GatedLine`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

Vec = tuple[int, ...]


def unit_of(level: Vec) -> Vec:
    """One charge of the work ``level`` describes: ``level / gcd`` over its non-zero amounts
    (all zeros for an empty level)."""
    if not any(level):
        return tuple(0 for _ in level)
    scale = math.gcd(*(a for a in level if a))
    return tuple(a // scale for a in level)


def units_down(amounts: Vec, unit: Vec) -> int:
    """Whole units ``amounts`` covers: the smallest ``amount // unit`` over the unit's
    resources, never below 0 (0 for an empty unit)."""
    counts = [a // u for a, u in zip(amounts, unit, strict=True) if u]
    return max(0, min(counts)) if counts else 0


def units_up(amounts: Vec, unit: Vec) -> int:
    """Units ``amounts`` touches: the largest ``ceil(amount / unit)`` over the unit's
    resources (0 for an empty unit)."""
    return max((-(-a // u) for a, u in zip(amounts, unit, strict=True) if u), default=0)


def in_heads(level: Vec, head: Vec) -> Vec:
    """``level`` stated in whole charges of ``head`` (zeros: the level itself): the fewest
    heads that cover it on every resource, ``m × head`` with ``m = max ceil(level / head)``.
    Its unit is the head's (a charge holds one request slot, so its gcd is 1), so the
    receiver grants in charges the head can use; over-stated amounts are bounded by the
    key's fair share like any level."""
    if not any(head):
        return level
    m = max(-(-a // h) for a, h in zip(level, head, strict=True) if h)
    return tuple(m * h for h in head)


def quantum(hold: int, *, capped: bool) -> int:
    """Rule 5 of the module docstring."""
    if hold <= 1:
        return 1
    size = 2 if hold <= 3 else -(-hold // 2)
    return size if capped else min(size, hold - 1)


class Standing(NamedTuple):
    """One key's grant-ahead position (module docstring), counts in units of ``unit``."""

    unit: Vec
    level: int
    hold: int
    held: int

    @property
    def capped(self) -> bool:
        """The level exceeds the hold: the key wants more than its share."""
        return self.level > self.hold

    @property
    def deficit(self) -> int:
        return max(0, self.hold - self.held)

    @property
    def quantum(self) -> int:
        return quantum(self.hold, capped=self.capped)

    @property
    def due(self) -> bool:
        """A top-up is due: the deficit reached the quantum."""
        return self.hold > 0 and self.deficit >= self.quantum

    def top_up(self, units: int) -> Vec:
        """The grant that adds ``units`` units (rule 6 of the module docstring)."""
        return tuple(units * u for u in self.unit)


def standing(
    level: Vec, unlanded: Vec, pool: Vec, *, active: int, chunk: int, settled: bool
) -> Standing:
    """The key's position: ``level`` from its last report, ``unlanded`` from the receiver's
    books, ``pool`` the capacity, ``active`` the keys with a level (at least 1), ``chunk``
    the configured chunk in units (0: the fair share), ``settled`` rule 4."""
    unit = unit_of(level)
    level_units = units_down(level, unit)
    if not level_units:
        return Standing(unit=unit, level=0, hold=0, held=0)
    share = chunk or max(
        1, min(-(-p // (u * active)) for p, u in zip(pool, unit, strict=True) if u)
    )
    held = units_down(unlanded, unit) if settled else units_up(unlanded, unit)
    return Standing(unit=unit, level=level_units, hold=min(level_units, share), held=held)
