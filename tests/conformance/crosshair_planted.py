"""Deliberately wrong contracts: CrossHair must refute every one (proof that it explores).

Each function is a faithful copy of a checked target with one postcondition made false; the
copies keep this module independent of the packages, so the planted errors cannot leak into them.
"""

from __future__ import annotations

U64_MAX = (1 << 64) - 1


class ArithmeticOverflow(Exception):
    """The copy's overflow error."""


def checked_add(a: int, b: int) -> int:
    """``tent_credit._arith.checked_add`` with a false postcondition (the sum is never smaller).

    pre: 0 <= a <= U64_MAX
    pre: 0 <= b <= U64_MAX
    raises: ArithmeticOverflow
    post: __return__ < a + b
    """
    total = a + b
    if total > U64_MAX:
        raise ArithmeticOverflow(f"u64 overflow: {a} + {b}")
    return total


def compute_grant(
    free: dict[int, int],
    demand: dict[int, int],
    max_grant: dict[int, int],
    min_grant: dict[int, int],
) -> dict[int, int]:
    """``tent_credit._grant_plan.compute_grant`` (its ``_plan_grant``) over int keys, with the
    all-or-nothing postcondition missing its ``min(min_grant, demand)``: false when a demand
    below the minimum is met exactly.

    pre: all(v >= 0 for v in demand.values())
    pre: all(v >= 0 for v in max_grant.values())
    pre: all(v >= 0 for v in min_grant.values())
    post: all(a == 0 for a in __return__.values()) or all(a >= max(1, min_grant.get(r, 0)) for r, a in __return__.items())
    """  # noqa: E501 (CrossHair reads each contract from one docstring line)
    offers: dict[int, int] = {}
    blocked: list[int] = []
    for resource in sorted(demand):
        wanted = demand[resource]
        if wanted <= 0:
            continue
        offer = max(0, min(wanted, max_grant.get(resource, 0), free.get(resource, 0)))
        threshold = max(1, min(min_grant.get(resource, 0), wanted))
        offers[resource] = offer
        if offer < threshold:
            blocked.append(resource)
    if blocked:
        return dict.fromkeys(offers, 0)
    return offers


APPLIED = "applied"
DUPLICATE_OR_OLD = "duplicate_or_old"
SEQUENCE_GAP = "sequence_gap"


def update_acceptance(
    last_sequence: int,
    sequence: int,
    previous_totals: list[int],
    new_totals: list[tuple[int, int]],
) -> str | None:
    """``tent_credit._ledger.update_acceptance`` with a gap postcondition that forgets the first
    update may carry any sequence: false for ``last_sequence == 0, sequence == 2``.

    pre: last_sequence >= 0 and sequence >= 1
    pre: all(0 <= r < len(previous_totals) for r, _ in new_totals)
    post: (__return__ == SEQUENCE_GAP) == (__return__ is not None and sequence > last_sequence and sequence != last_sequence + 1)
    """  # noqa: E501 (CrossHair reads each contract from one docstring line)
    if sequence <= last_sequence:
        return DUPLICATE_OR_OLD
    for r, total in new_totals:
        if total < previous_totals[r]:
            return None
    if last_sequence != 0 and sequence != last_sequence + 1:
        return SEQUENCE_GAP
    return APPLIED
