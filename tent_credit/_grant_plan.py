"""The grant policy as a pure function: how much of each demanded resource one grant adds.

:func:`compute_grant` (and :func:`_plan_grant`, which also names the resources that blocked the
grant) is the all-or-nothing rule of docs/semantics.md#receiver-allocator over plain vectors:
no allocator state, no clock. It is separate from :mod:`._allocator` so that CrossHair checks its
contracts (``tent_models.contracts``) and a reader sees the policy without the bookkeeping that
feeds it ``free``.
"""

from __future__ import annotations

from ._allocator_config import ResourceVector
from ._types import CreditResource

__all__ = ["compute_grant"]


def _plan_grant(
    free: ResourceVector,
    demand: ResourceVector,
    max_grant: ResourceVector,
    min_grant: ResourceVector,
) -> tuple[dict[CreditResource, int], tuple[CreditResource, ...]]:
    offers: dict[CreditResource, int] = {}
    blocked: list[CreditResource] = []
    for resource in sorted(demand):
        wanted = demand[resource]
        if wanted <= 0:
            continue  # a resource the key does not need is not granted
        offer = max(0, min(wanted, max_grant.get(resource, 0), free.get(resource, 0)))
        threshold = max(1, min(min_grant.get(resource, 0), wanted))
        offers[resource] = offer
        if offer < threshold:
            blocked.append(resource)
    if blocked:
        return dict.fromkeys(offers, 0), tuple(blocked)
    return offers, ()


def compute_grant(
    free: ResourceVector,
    demand: ResourceVector,
    max_grant: ResourceVector,
    min_grant: ResourceVector,
) -> dict[CreditResource, int]:
    """How much of each demanded resource one grant adds (pure; docs/semantics.md#receiver-allocator
    grant policy).

    1. Only resources with ``demand > 0`` appear in the result; others are never granted.
    2. Each gets ``min(demand, max_grant, free)`` (a missing ``max_grant``/``free`` counts as 0,
       a negative ``free`` as 0).
    3. All or nothing: if any demanded resource would get less than
       ``max(1, min(min_grant, demand))`` (a demand smaller than the minimum may be met exactly),
       every resource gets 0, so a charge never ends up half-backed.

    pre: all(v >= 0 for v in demand.values())
    pre: all(v >= 0 for v in max_grant.values())
    pre: all(v >= 0 for v in min_grant.values())
    post: set(__return__) == {r for r, v in demand.items() if v > 0}
    post: all(0 <= a <= demand[r] for r, a in __return__.items())
    post: all(a <= max_grant.get(r, 0) and a <= max(0, free.get(r, 0)) for r, a in __return__.items())
    post: all(a == 0 for a in __return__.values()) or all(a >= max(1, min(min_grant.get(r, 0), demand[r])) for r, a in __return__.items())
    """  # noqa: E501 (CrossHair reads each contract from one docstring line)
    return _plan_grant(free, demand, max_grant, min_grant)[0]
