"""Configuration and result values of the receiver's allocator (split from ``_allocator``).

What a receiver is configured with (:class:`AllocatorConfig`) and what the allocator answers
(:class:`GrantDecision`, :class:`KeyTotalsSnapshot`, :class:`AllocatorStatistics`): frozen
values, validated on construction. The allocator itself is :mod:`tent_credit._allocator`.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Callable, Mapping

import attrs

from ._arith import U64_MAX
from ._describe import describe
from ._fairness import GrantSplit
from ._types import CreditResource, _IdentityEnum
from .errors import InvalidArgument

__all__ = [
    "AllocationClass",
    "AllocatorConfig",
    "AllocatorStatistics",
    "EpochState",
    "GrantDecision",
    "KeyTotalsSnapshot",
    "ResourceVector",
]

ResourceVector = Mapping[CreditResource, int]


class AllocationClass(enum.Enum):
    """Which part of capacity a key may be granted from (RFC "Staging and Deadlock Avoidance")."""

    USER = "user"  # user payload: never the staging reserve
    STAGING_INTERNAL = "staging_internal"  # inner staging transfers: the whole capacity


class EpochState(_IdentityEnum):
    """Lifecycle of one key's epoch on the receiver."""

    ACTIVE = "active"  # current epoch of a connected sender: may be granted more
    FENCING = "fencing"  # disconnected or superseded: no grants; in-flight data may still land
    FENCED = "fenced"  # in-flight work drained or failed: everything that never landed reclaimed


def _frozen(values: Mapping[CreditResource, int]) -> ResourceVector:
    return types.MappingProxyType(dict(sorted(values.items())))


def _resource_map(value: object, what: str) -> ResourceVector:
    """Validate a ``{CreditResource: u64}`` mapping and return a read-only sorted copy."""
    # a dict skips the ABC's isinstance (a Python-level check): the receiver's own calls
    # (a release, a top-up) pass a dict several times per landed write
    if type(value) is not dict and not isinstance(value, Mapping):
        raise InvalidArgument(f"{what} must be a mapping of CreditResource to int")
    out: dict[CreditResource, int] = {}
    for resource, amount in value.items():
        if not isinstance(resource, CreditResource):
            raise InvalidArgument(f"{what}: unknown credit resource {describe(resource)}")
        if type(amount) is not int or not 0 <= amount <= U64_MAX:
            raise InvalidArgument(
                f"{what}[{resource.name}] must be a u64 int, got {describe(amount)}"
            )
        out[resource] = amount
    return _frozen(out)


def _positive_int(what: str) -> Callable[[object, attrs.Attribute[int], int], None]:
    def check(_inst: object, _attr: attrs.Attribute[int], value: int) -> None:
        if type(value) is not int or not 0 < value <= U64_MAX:
            raise InvalidArgument(f"{what} must be an int in [1, 2**64), got {describe(value)}")

    return check


def _capacity_vector(value: object) -> ResourceVector:
    return _resource_map(value, "capacity")


def _staging_reserve_vector(value: object) -> ResourceVector:
    return _resource_map(value, "staging_reserve")


def _max_grant_vector(value: object) -> ResourceVector:
    return _resource_map(value, "max_grant")


def _min_grant_vector(value: object) -> ResourceVector:
    return _resource_map(value, "min_grant")


def _key_cap_vector(value: object) -> ResourceVector:
    return _resource_map(value, "max_key_outstanding")


def _split(_inst: object, _attr: attrs.Attribute[GrantSplit], value: object) -> None:
    if not isinstance(value, GrantSplit):
        raise InvalidArgument(f"grant_split must be a GrantSplit, got {describe(value)}")


@attrs.frozen(kw_only=True)
class AllocatorConfig:
    """Capacity and grant policy of one receiver (all amounts u64, per resource).

    ``capacity`` names the resources this receiver models; every other mapping may only name
    those. ``max_grant`` must give every modelled resource a per-grant maximum ≥ 1 (a resource
    that can never be granted is a configuration error, not a silent stall). Raises
    :class:`InvalidArgument` on any violation: an invalid configuration cannot be constructed.

    Abuse bounds (docs/abuse.md): ``max_key_outstanding`` caps what one key may hold at once over
    all its epochs (a resource it omits: no cap below capacity; each cap ≥ ``max(1,
    min_grant)``); ``grant_split`` decides how free capacity is split among keys with live
    demand (max-min fair by default); ``max_fencing_epochs`` bounds the superseded epochs a key
    may keep awaiting :meth:`ReceiverCreditAllocator.fence_complete` (a reconnect beyond it is
    refused with :class:`TooManyRequests` until one completes).
    """

    capacity: ResourceVector = attrs.field(converter=_capacity_vector)
    staging_reserve: ResourceVector = attrs.field(factory=dict, converter=_staging_reserve_vector)
    control_slots: int = attrs.field(validator=_positive_int("control_slots"))
    max_grant: ResourceVector = attrs.field(converter=_max_grant_vector)
    min_grant: ResourceVector = attrs.field(factory=dict, converter=_min_grant_vector)
    max_keys: int = attrs.field(validator=_positive_int("max_keys"))
    retry_after_us: int = attrs.field(validator=_positive_int("retry_after_us"))
    max_key_outstanding: ResourceVector = attrs.field(factory=dict, converter=_key_cap_vector)
    grant_split: GrantSplit = attrs.field(default=GrantSplit.MAX_MIN_FAIR, validator=_split)
    max_fencing_epochs: int = attrs.field(default=4, validator=_positive_int("max_fencing_epochs"))
    grant_chunk: int = attrs.field(default=0)
    """Grant-ahead (protocol version 2): the standing credit of a key in whole charges of its
    work, the RFC's lease batch (0: adaptive, the key's fair share of the pool; see
    :mod:`tent_credit._ahead`)."""

    def __attrs_post_init__(self) -> None:
        if type(self.grant_chunk) is not int or not 0 <= self.grant_chunk <= U64_MAX:
            raise InvalidArgument(
                f"grant_chunk must be a u64 int, got {describe(self.grant_chunk)}"
            )
        if not self.capacity:
            raise InvalidArgument("capacity must name at least one resource")
        for what, mapping in (
            ("staging_reserve", self.staging_reserve),
            ("max_grant", self.max_grant),
            ("min_grant", self.min_grant),
            ("max_key_outstanding", self.max_key_outstanding),
        ):
            for resource in mapping:
                if resource not in self.capacity:
                    raise InvalidArgument(f"{what} names {resource.name}, which has no capacity")
        for resource, capacity in self.capacity.items():
            if self.staging_reserve.get(resource, 0) > capacity:
                raise InvalidArgument(f"staging_reserve[{resource.name}] exceeds its capacity")
            maximum = self.max_grant.get(resource, 0)
            if maximum == 0:
                raise InvalidArgument(f"max_grant[{resource.name}] must be at least 1")
            if self.min_grant.get(resource, 0) > maximum:
                raise InvalidArgument(f"min_grant[{resource.name}] exceeds max_grant")
            cap = self.max_key_outstanding.get(resource)
            if cap is not None and cap < max(1, self.min_grant.get(resource, 0)):
                raise InvalidArgument(
                    f"max_key_outstanding[{resource.name}] is below max(1, min_grant): "
                    "no demand of the resource could ever be granted"
                )

    def limit_for(self, resource: CreditResource, allocation_class: AllocationClass) -> int:
        """How much of ``resource`` keys of ``allocation_class`` may hold outstanding in total."""
        if allocation_class is AllocationClass.USER:
            return self.capacity[resource] - self.staging_reserve.get(resource, 0)
        return self.capacity[resource]


@attrs.frozen(kw_only=True)
class GrantDecision:
    """The outcome of :meth:`ReceiverCreditAllocator.grant` (a value, also when blocked).

    ``grant_totals`` is the key+epoch's full cumulative vector over every modelled resource (what
    the ``ReceiverCreditUpdate`` carries); ``granted_now`` what this call added (zero everywhere
    when blocked). ``retry_after_us`` is 0 exactly when every demanded amount was granted in full;
    ``blocked`` names the resources whose shortage made the call grant nothing.
    """

    sender_peer: int
    qos_class: int
    epoch: int
    grant_totals: ResourceVector
    granted_now: ResourceVector
    retry_after_us: int
    blocked: tuple[CreditResource, ...]


@attrs.frozen(kw_only=True)
class KeyTotalsSnapshot:
    """Cumulative accounting of one key+epoch, per modelled resource.

    ``reclaimed = reclaimed_by_return + reclaimed_by_fence`` and
    ``outstanding = granted − released − reclaimed`` (what this epoch still holds of capacity).
    """

    sender_peer: int
    qos_class: int
    epoch: int
    allocation_class: AllocationClass
    state: EpochState
    granted: ResourceVector
    consumed_reported: ResourceVector
    returned_reported: ResourceVector
    landed: ResourceVector
    released: ResourceVector
    reclaimed_by_return: ResourceVector
    reclaimed_by_fence: ResourceVector
    reclaimed: ResourceVector
    outstanding: ResourceVector


@attrs.frozen(kw_only=True)
class AllocatorStatistics:
    """A snapshot of the allocator (per-resource vectors cover every modelled resource).

    ``outstanding`` is committed capacity over all keys and epochs, ``user_outstanding`` its USER
    part, ``free = capacity − outstanding``. Counters are cumulative since construction.
    """

    capacity: ResourceVector
    staging_reserve: ResourceVector
    outstanding: ResourceVector
    user_outstanding: ResourceVector
    free: ResourceVector
    keys: int
    epochs_active: int
    epochs_fencing: int
    epochs_fenced: int
    grants_issued: int
    demands_blocked: int
    reclaimed_by_return: ResourceVector
    reclaimed_by_fence: ResourceVector
    released: ResourceVector
    protocol_violations: int
    control_slots: int
    control_slots_in_use: int
    writes_admitted: int = 0
    writes_refused: int = 0
    quarantined_keys: int = 0
    fencing_outstanding: ResourceVector = attrs.field(factory=dict)
    keys_with_demand: int = 0
