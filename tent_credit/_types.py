"""Protocol value types: resources, session ids, credit keys, amounts, charges and plans.

All values are frozen attrs classes validated on construction: an invalid value cannot exist.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping

import attrs

from ._arith import U32_MAX, U64_MAX, U128_MAX
from ._describe import describe
from .errors import InvalidArgument

__all__ = [
    "CreditAmount",
    "CreditCharge",
    "CreditKey",
    "CreditResource",
    "Plan",
    "QosClass",
    "SessionId",
    "charge_for_plan",
    "normalise_charge_parts",
]


class _IdentityEnum(enum.Enum):
    """An enum whose members hash by identity. ``Enum.__hash__`` is a Python call (the hash of
    the member's name), and the enums built on this one key dicts on every transfer (a plan's
    charge, a token's transition, a peer's policy); members are singletons, so identity is
    already their equality. Hashes differ between processes, as salted name hashes do."""

    __hash__ = object.__hash__


class CreditResource(enum.IntEnum):
    """Receiver resources a charge can draw on (RFC "Credit Key and Resource Model")."""

    DATA_BYTES = 1
    REQUEST_SLOTS = 2
    STAGING_SLOTS = 3
    CONSUMER_SLOTS = 4


QosClass = int  # u32 on the wire
_Validator = Callable[[object, "attrs.Attribute[int]", int], None]


def _u64(name: str) -> _Validator:
    def check(_inst: object, _attr: attrs.Attribute[int], value: int) -> None:
        if type(value) is not int or not 0 <= value <= U64_MAX:
            raise InvalidArgument(f"{name} must be a u64 int, got {describe(value)}")

    return check


def _u32(name: str) -> _Validator:
    def check(_inst: object, _attr: attrs.Attribute[int], value: int) -> None:
        if type(value) is not int or not 0 <= value <= U32_MAX:
            raise InvalidArgument(f"{name} must be a u32 int, got {describe(value)}")

    return check


def _resource(_inst: object, _attr: attrs.Attribute[CreditResource], value: object) -> None:
    if not isinstance(value, CreditResource):
        raise InvalidArgument(f"unknown credit resource {describe(value)}")


def _session(_inst: object, _attr: attrs.Attribute[SessionId], value: object) -> None:
    if not isinstance(value, SessionId):
        raise InvalidArgument(f"expected a SessionId, got {type(value).__name__}")


@attrs.frozen(order=True, cache_hash=True)  # a dict key on every credit call: hashed once
class SessionId:
    """A peer session id: u128, never zero. A restart of the receiver mints a new, *larger* one
    (e.g. a boot counter in the high 64 bits), so a sender can tell a dead incarnation's late
    activation from a newer one and ignore it."""

    value: int = attrs.field()

    @value.validator
    def _check(self, _attr: attrs.Attribute[int], value: int) -> None:
        if type(value) is not int or not 0 < value <= U128_MAX:
            raise InvalidArgument(f"session id must be a non-zero u128, got {describe(value)}")

    def __int__(self) -> int:
        return self.value


@attrs.frozen(kw_only=True, order=True, cache_hash=True)  # the ledger's key, hashed once
class CreditKey:
    """The ledger key: (receiver session, sender peer, QoS class) (RFC ``struct CreditKey``).

    ``sender_peer`` is the peer id bound at connection setup (u64), never read from a payload.
    """

    receiver_session: SessionId = attrs.field(validator=_session)
    sender_peer: int = attrs.field(validator=_u64("sender_peer"))
    qos_class: int = attrs.field(validator=_u32("qos_class"))


@attrs.frozen(kw_only=True)
class CreditAmount:
    """One resource and an amount: a cumulative ``grant_total`` on the wire, or a charge part."""

    resource: CreditResource = attrs.field(validator=_resource)
    amount: int = attrs.field(validator=_u64("amount"))

    @property
    def grant_total(self) -> int:
        """``amount`` under the RFC's name for it in an update (``CreditAmount.grant_total``)."""
        return self.amount


def normalise_charge_parts(
    items: list[tuple[CreditResource, int]],
) -> tuple[tuple[CreditResource, int], ...]:
    """Charge normalisation: the ``(resource, amount)`` pairs sorted by resource (pure).

    Raises :class:`InvalidArgument` for a part whose resource is not a :class:`CreditResource`
    (checked first, so an unhashable value is a typed error too) or a resource named twice.
    Amounts are :class:`CreditCharge`'s to validate.

    pre: all(isinstance(item, tuple) and len(item) == 2 for item in items)
    raises: InvalidArgument
    post: sorted(__return__) == sorted(items)
    post: all(a[0] < b[0] for a, b in zip(__return__, __return__[1:]))
    """
    for r, _ in items:
        if not isinstance(r, CreditResource):
            raise InvalidArgument(f"unknown credit resource {describe(r)}")
    if len({r for r, _ in items}) != len(items):
        raise InvalidArgument("duplicate resource in charge")
    return tuple(sorted(items))


@attrs.frozen
class CreditCharge:
    """A charge vector: non-empty, unique resources, every amount > 0 (RFC ``CreditCharge``).

    Stored as a tuple of ``(resource, amount)`` sorted by resource, so two charges with the same
    content are equal whatever order they were given in (charge normalisation).
    """

    parts: tuple[tuple[CreditResource, int], ...] = attrs.field()

    @parts.validator
    def _check(
        self,
        _attr: attrs.Attribute[tuple[tuple[CreditResource, int], ...]],
        parts: tuple[tuple[CreditResource, int], ...],
    ) -> None:
        if not parts:
            raise InvalidArgument("a credit charge must not be empty")
        seen: set[CreditResource] = set()
        for resource, amount in parts:
            if not isinstance(resource, CreditResource):
                raise InvalidArgument(f"unknown credit resource {describe(resource)}")
            if resource in seen:
                raise InvalidArgument(f"duplicate resource {resource.name} in charge")
            seen.add(resource)
            if type(amount) is not int or not 0 < amount <= U64_MAX:
                raise InvalidArgument(f"charge amount for {resource.name} must be in (0, 2**64)")
        if list(parts) != sorted(parts):
            raise InvalidArgument("charge parts must be sorted by resource; use CreditCharge.of")

    @classmethod
    def of(
        cls, parts: Mapping[CreditResource, int] | Iterable[tuple[CreditResource, int]]
    ) -> CreditCharge:
        """Build a normalised charge; raises :class:`InvalidArgument` on any invalid part."""
        try:
            items = list(parts.items()) if isinstance(parts, Mapping) else list(parts)
        except TypeError:
            raise InvalidArgument(
                f"charge parts must be a mapping or pairs, got {describe(parts)}"
            ) from None
        for item in items:
            if not isinstance(item, tuple) or len(item) != 2:
                raise InvalidArgument(
                    f"charge part must be a (resource, amount) pair: {describe(item)}"
                )
        return cls(normalise_charge_parts(items))

    def amount(self, resource: CreditResource) -> int:
        """The amount charged for ``resource`` (0 when the charge does not include it)."""
        for r, a in self.parts:
            if r is resource:
                return a
        return 0

    def as_dict(self) -> dict[CreditResource, int]:
        return dict(self.parts)


class Plan(_IdentityEnum):
    """How a transfer moves its bytes: decides which remote resources it charges (RFC table)."""

    REMOTE_DIRECT_WRITE = "remote_direct_write"
    REMOTE_STAGED_WRITE = "remote_staged_write"
    RDMA_READ = "rdma_read"
    LOCAL = "local"


def charge_for_plan(plan: Plan, length: int, requests: int = 1) -> CreditCharge | None:
    """The remote receiver charge of a transfer of ``length`` bytes under ``plan``.

    Direct WRITE = DATA_BYTES + REQUEST_SLOTS + CONSUMER_SLOTS; staged WRITE adds STAGING_SLOTS;
    RDMA READ and local copies return ``None``: they use local accounting and are never stalled
    by a remote ledger (RFC "Terminology and Direction"). ``requests`` > 1 is one owner carrying
    that many merged requests (``length`` their total): the slots are charged per request, so
    the owner reserves exactly what its requests would have reserved one by one.
    """
    if not isinstance(plan, Plan):
        raise InvalidArgument(f"unknown plan {describe(plan)}")
    if type(length) is not int or not 0 < length <= U64_MAX:
        raise InvalidArgument(f"transfer length must be in (0, 2**64), got {describe(length)}")
    if type(requests) is not int or not 0 < requests <= min(length, U32_MAX):
        raise InvalidArgument(
            f"requests must be in [1, min(length, 2**32 - 1)], got {describe(requests)}"
        )
    if plan in (Plan.RDMA_READ, Plan.LOCAL):
        return None
    parts = {
        CreditResource.DATA_BYTES: length,
        CreditResource.REQUEST_SLOTS: requests,
        CreditResource.CONSUMER_SLOTS: requests,
    }
    if plan is Plan.REMOTE_STAGED_WRITE:
        parts[CreditResource.STAGING_SLOTS] = requests
    return CreditCharge.of(parts)
