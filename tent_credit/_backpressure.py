"""Structured backpressure: *why* work cannot go now (RFC "Backpressure API").

``TooManyRequests`` alone conflates queue admission, staging exhaustion, transport pressure and a
receiver's credit stall. :class:`BackpressureInfo` names the source, the peer and class, the
exhausted resources, a retry hint and whether a fallback is allowed, so a connector can pause,
retry, pick another receiver or fall back instead of treating every stall alike.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable

import attrs

from ._arith import U32_MAX, U64_MAX
from ._describe import describe
from ._ledger import Blocked
from ._types import CreditResource
from .errors import InvalidArgument

__all__ = ["BackpressureInfo", "BackpressureSource"]


class BackpressureSource(enum.Enum):
    """Where the pressure comes from (RFC ``BackpressureInfo::Source``)."""

    RECEIVER_CREDIT = "receiver_credit"
    LOCAL_QUEUE = "local_queue"
    STAGING = "staging"
    TRANSPORT = "transport"


def _uint(bits_max: int) -> Callable[[object, attrs.Attribute[int], int], None]:
    def check(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
        if type(value) is not int or not 0 <= value <= bits_max:
            raise InvalidArgument(
                f"{attr.name} must be an int in [0, {bits_max}], got {describe(value)}"
            )

    return check


def _source(_inst: object, _attr: attrs.Attribute[BackpressureSource], value: object) -> None:
    if not isinstance(value, BackpressureSource):
        raise InvalidArgument(f"unknown backpressure source {describe(value)}")


def _bool(_inst: object, attr: attrs.Attribute[bool], value: object) -> None:
    if type(value) is not bool:
        raise InvalidArgument(f"{attr.name} must be a bool, got {describe(value)}")


@attrs.frozen(kw_only=True)
class BackpressureInfo:
    """One backpressure signal (RFC ``struct BackpressureInfo``), validated on construction.

    1. ``source`` is a :class:`BackpressureSource`; ``peer`` a u64 peer id; ``qos_class`` a u32.
    2. ``exhausted`` is a tuple of :class:`CreditResource`, unique and sorted by resource. It is
       non-empty when the source is ``RECEIVER_CREDIT`` (a credit stall always names what ran
       out); other sources may leave it empty.
    3. ``retry_after_us`` is a u64 hint (0 = no hint); ``fallback_allowed`` a bool.

    Any violation raises :class:`InvalidArgument`.
    """

    source: BackpressureSource = attrs.field(validator=_source)
    peer: int = attrs.field(validator=_uint(U64_MAX))
    qos_class: int = attrs.field(validator=_uint(U32_MAX))
    exhausted: tuple[CreditResource, ...] = attrs.field()
    retry_after_us: int = attrs.field(validator=_uint(U64_MAX))
    fallback_allowed: bool = attrs.field(validator=_bool)

    @exhausted.validator
    def _check_exhausted(
        self, _attr: attrs.Attribute[tuple[CreditResource, ...]], value: object
    ) -> None:
        if not isinstance(value, tuple):
            raise InvalidArgument("exhausted must be a tuple of CreditResource")
        if not all(isinstance(r, CreditResource) for r in value):
            raise InvalidArgument("exhausted must hold CreditResource members only")
        if any(a >= b for a, b in itertools.pairwise(value)):
            raise InvalidArgument("exhausted must be unique and sorted by resource")
        if self.source is BackpressureSource.RECEIVER_CREDIT and not value:
            raise InvalidArgument("a receiver-credit stall must name the exhausted resources")

    @classmethod
    def from_blocked(
        cls, blocked: Blocked, *, retry_after_us: int, fallback_allowed: bool
    ) -> BackpressureInfo:
        """The ``RECEIVER_CREDIT`` signal of a blocked reserve.

        ``peer`` and ``qos_class`` come from the blocked key (``sender_peer`` is the peer id
        bound to that key's control connection, docs/design.md#identity); ``exhausted`` is the
        blocked resources. Raises :class:`InvalidArgument` for a non-:class:`Blocked` or an
        invalid hint.
        """
        if not isinstance(blocked, Blocked):
            raise InvalidArgument(f"expected a Blocked value, got {type(blocked).__name__}")
        return cls(
            source=BackpressureSource.RECEIVER_CREDIT,
            peer=blocked.key.sender_peer,
            qos_class=blocked.key.qos_class,
            exhausted=blocked.exhausted,
            retry_after_us=retry_after_us,
            fallback_allowed=fallback_allowed,
        )
