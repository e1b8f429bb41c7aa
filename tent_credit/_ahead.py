"""Grant-ahead arithmetic (protocol version 2): how much standing credit a key should hold.

Under version 2 a sender's usage report states its **level** (its backlog): the charges of its
work on the key that is in flight or waiting for credit. The receiver keeps the key's
*unlanded* credit (granted − landed − reclaimed by return: credit the sender holds unused or has
in flight) topped up to the key's **hold** as the key's data lands, without another report:

1. The key's **unit** is one charge of its work: the level divided by the gcd of its amounts
   (a level of four 4 MiB writes, ``(16 MiB, 4, 4)``, has the unit ``(4 MiB, 1, 1)``).
2. Its **chunk** is ``static`` units (the RFC's lease batch) or, adaptive (``static == 0``),
   its fair share of the user pool: ``max(1, ceil(pool / (unit × active)))`` whole units,
   where ``active`` is the number of keys with a level. A key alone gets the pool; sixteen keys
   on eight slots get one unit each; three keys on eight slots three each (the capacity check
   makes the last of them wait in line rather than leave two slots idle). The drain itself
   clocks the grants (a top-up follows the landing of the key's own data), so a faster drain
   is granted faster without a rate estimate.
3. Its **hold** is ``min(level, chunk, cap room)`` units: a forged or inflated level gets at
   most the fair share, and a lone sender never more than it said it has.
4. It is topped up only once its **deficit** (hold − unlanded, in whole units) reaches the
   **quantum** ``q``: 1 unit for a hold of 1, 2 for a hold of 2 or 3, else half the hold,
   rounded up, and for a key that is not capped at most ``hold − 1`` (see :func:`quantum`).
   One update then carries several units (QUIC and HTTP/2 send a window update once half the
   window is consumed), so four senders on eight slots need one update per two transfers, not
   one per transfer.
5. A top-up adds whole units, never a part of one: credit a key holds below one unit (a
   *fragment*) is not completed, its sender returns it (docs/credit_protocol.md#uncovered-credit).

Everything here is pure integer arithmetic on resource vectors (``{resource: amount}``); the
allocator and the endpoints call it. Nothing in this module reads a clock or changes state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs

from ._types import CreditResource

__all__ = [
    "Shape",
    "Standing",
    "in_heads",
    "position",
    "quantum",
    "shape_of",
    "standing",
    "unit_of",
    "whole_units",
]

Vector = Mapping[CreditResource, int]


def unit_of(level: Vector) -> dict[CreditResource, int]:
    """One charge of the work a level describes: ``level / gcd(level)`` over its non-zero
    amounts (``{}`` for an empty or all-zero level).

    post: all(v > 0 for v in __return__.values())
    """
    amounts = {r: a for r, a in level.items() if a > 0}
    if not amounts:
        return {}
    scale = math.gcd(*amounts.values())
    return {r: a // scale for r, a in amounts.items()}


def whole_units(amounts: Vector, unit: Vector) -> int:
    """How many whole units ``amounts`` covers: ``min over the unit's resources of
    floor(amount / unit amount)``, never below 0 (0 for an empty unit)."""
    least = None
    for r, u in unit.items():  # a loop, not min() over a generator: asked per landing
        units = amounts.get(r, 0) // u
        if least is None or units < least:
            least = units
    return 0 if least is None or least < 0 else least


def in_heads(level: Vector, head: Vector) -> dict[CreditResource, int]:
    """``level`` stated in whole charges of ``head`` (an empty head: the level itself, without
    zero amounts): ``m × head`` with ``m = max ceil(level / head)`` over the head's resources
    (at least 1), the fewest heads that cover it. Its unit (:func:`unit_of`) is the head's, so
    a receiver grants in charges the head can use (docs/credit_protocol.md#mixed-charges).

    post: not head or all(__return__.get(r, 0) >= a for r, a in level.items() if a and r in head)
    """
    heads = {r: a for r, a in head.items() if a > 0}
    if not heads:
        return {r: a for r, a in level.items() if a}
    m = 1
    for r, h in heads.items():
        m = max(m, -(-level.get(r, 0) // h))
    return {r: m * h for r, h in heads.items()}


def quantum(hold: int, *, capped: bool) -> int:
    """The fewest units a top-up carries (rule 4 of the module docstring).

    A key that is not capped may be the receiver's only work: its top-up then comes while at
    least one of its units is still in flight (``hold − 1``), so its pipeline never runs dry
    (a lone sender with two transfers in flight is topped up as each lands). A capped key
    shares the receiver with others, whose data keeps it busy meanwhile.

    pre: hold >= 0
    post: __return__ >= 1
    post: hold < 1 or __return__ <= hold
    """
    if hold <= 1:
        return 1
    size = 2 if hold <= 3 else -(-hold // 2)
    return size if capped else min(size, hold - 1)


@attrs.frozen(kw_only=True)
class Standing:
    """One key's grant-ahead position (see the module docstring): its unit and, in units, its
    level, hold, unlanded credit, deficit and quantum. ``capped``: the level exceeds the hold
    (the key wants more than its share; it waits for its own data to land)."""

    unit: Mapping[CreditResource, int]
    level: int
    hold: int
    unlanded: int
    deficit: int
    quantum: int

    @property
    def capped(self) -> bool:
        return self.level > self.hold

    @property
    def due(self) -> bool:
        """A top-up is due: the deficit reached the quantum."""
        return self.hold > 0 and self.deficit >= self.quantum

    def top_up(self, units: int) -> dict[CreditResource, int]:
        """The grant that adds ``units`` whole units to the key (``units`` ≤ the deficit):
        ``units`` charges, never a part of one. A fragment the key holds below one unit is not
        completed: its sender returns it (docs/credit_protocol.md#uncovered-credit)."""
        return {r: u * units for r, u in self.unit.items()}


@attrs.frozen
class Shape:
    """What a key's level and the number of keys with a level decide (recomputed only when
    either changes): its unit, its level in units and its hold before any per-key cap."""

    unit: Mapping[CreditResource, int]
    level: int
    hold: int


def shape_of(level: Vector, pool: Vector, *, active: int, static: int) -> Shape:
    """Rules 1-3 of the module docstring, before the per-key cap.

    pre: active >= 1 and static >= 0
    post: 0 <= __return__.hold <= __return__.level
    """
    unit = unit_of(level)
    level_units = whole_units(level, unit) if unit else 0
    if not level_units:
        return Shape(unit=unit, level=0, hold=0)
    # adaptive: the fair share, rounded up (8 slots among 3 keys hold 3 each: the third key's
    # last unit waits in the line for capacity, rather than 2 each and 2 slots idle)
    chunk = static or max(1, min(-(-pool.get(r, 0) // (u * active)) for r, u in unit.items()))
    return Shape(unit=unit, level=level_units, hold=min(level_units, chunk))


def position(
    shape: Shape,
    unlanded: Vector,
    *,
    settled: bool = False,
    cap_room: Vector | None = None,
) -> Standing:
    """The key's position now: ``unlanded`` from the receiver's books, ``settled`` that
    nothing of the key is in flight (every charge its sender consumed has landed: its unlanded
    credit is then all unused and counts in whole units down: a fragment smaller than one
    charge, an activation grant below the charge say, holds no unit, and the key is topped up
    beside it while its sender returns it), ``cap_room`` what the key's per-key cap still
    leaves for unlanded credit (``None``: no cap).

    post: __return__.deficit >= 0
    """
    unit = shape.unit
    if not shape.level:
        return Standing(unit=unit, level=0, hold=0, unlanded=0, deficit=0, quantum=1)
    hold = shape.hold
    if cap_room is not None:
        hold = min(hold, whole_units(cap_room, unit))
    # loops, not min()/max() over generators: a receiver asks this on every landing
    held = 0
    first = True
    for r, u in unit.items():
        units = unlanded.get(r, 0) // u if settled else -(-unlanded.get(r, 0) // u)
        if first or (units < held if settled else units > held):
            held, first = units, False
    held = max(0, held)
    return Standing(
        unit=unit,
        level=shape.level,
        hold=hold,
        unlanded=held,
        deficit=max(0, hold - held),
        quantum=quantum(hold, capped=shape.level > hold),
    )


def standing(
    level: Vector,
    unlanded: Vector,
    pool: Vector,
    *,
    active: int,
    static: int,
    cap_room: Vector | None = None,
    settled: bool = False,
) -> Standing:
    """The key's position (module docstring): ``level`` from its report, ``unlanded`` from
    the receiver's books, ``pool`` what its allocation class may hold in total per resource,
    ``active`` the keys with a level (this one included), ``static`` the fixed chunk in units
    (0: adaptive); ``cap_room`` and ``settled`` as :func:`position`.

    pre: active >= 1 and static >= 0
    post: 0 <= __return__.hold <= __return__.level
    post: __return__.deficit >= 0
    """
    shape = shape_of(level, pool, active=active, static=static)
    return position(shape, unlanded, settled=settled, cap_room=cap_room)
