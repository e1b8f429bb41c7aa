"""Control-plane messages of the credit protocol (wire-neutral values; the codec is ``_wire``).

Every message carries ``schema_version``. Field ranges (u16/u32/u64, session ids) are validated on
construction; protocol rules that depend on state (epoch match, sequence order, monotone totals)
are checked by the ledger, allocator and endpoints that receive them. The two messages the RFC
spells out as structs take its defaults: ``qos_class``, ``epoch`` and ``sequence`` 0 and empty
amount vectors (``ReceiverCreditUpdateV1``, ``SenderCreditUsageV1``); only the session id has
none. A message with the default epoch 0 constructs, but the ledger and the allocator refuse
epoch 0, and the ledger an update of sequence 0 (both start at 1).

Direction and purpose (docs/design.md#control-flow):

=========================  ==================  ==============================================
message                    direction           purpose
=========================  ==================  ==============================================
``CapabilityOffer``        sender → receiver   versions the sender speaks (connection setup)
``CapabilityActivation``   receiver → sender   chosen version (0 = none), session, epoch, TTL
``ReceiverCreditUpdate``   receiver → sender   the *full* cumulative grant vector of a key
``SenderCreditUsage``      sender → receiver   cumulative consumed / returned, pending demand
``CreditReturn``           sender → receiver   explicit return of unused credit (cumulative)
``Heartbeat``              either direction    liveness of (session, epoch) without new grants
=========================  ==================  ==============================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ._arith import U32_MAX, U64_MAX
from ._describe import describe
from ._types import CreditAmount, SessionId
from .errors import InvalidArgument

__all__ = [
    "GRANT_AHEAD_VERSION",
    "MAX_RESOURCES_PER_MESSAGE",
    "MAX_VERSIONS",
    "SCHEMA_VERSION",
    "SUPPORTED_VERSIONS",
    "CapabilityActivation",
    "CapabilityOffer",
    "ControlMessage",
    "CreditReturn",
    "Heartbeat",
    "ReceiverCreditUpdate",
    "SenderCreditUsage",
]

SCHEMA_VERSION = 1
GRANT_AHEAD_VERSION = 2
"""The credit protocol version whose usage reports state a level the receiver grants ahead of
(docs/credit_protocol.md "Grant-ahead"); version 1 reports absolute demand targets."""
SUPPORTED_VERSIONS: tuple[int, ...] = (1, GRANT_AHEAD_VERSION)
MAX_RESOURCES_PER_MESSAGE = 4  # one amount per CreditResource at most
MAX_VERSIONS = 8  # bound on a capability offer's version list


def _uint(bits: int) -> Callable[[Any, attrs.Attribute[int], int], None]:
    top = (1 << bits) - 1

    def check(_inst: Any, attr: attrs.Attribute[int], value: int) -> None:
        if type(value) is not int or not 0 <= value <= top:
            raise InvalidArgument(f"{attr.name} must be a u{bits} int, got {describe(value)}")

    return check


def _schema(_inst: Any, _attr: attrs.Attribute[int], value: int) -> None:
    if value != SCHEMA_VERSION:
        raise InvalidArgument(f"unsupported schema_version {describe(value)}")


def _amounts(_inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    # loops, not all() over a generator: every update and report is built through this
    if not isinstance(value, tuple):
        raise InvalidArgument(f"{attr.name} must be a tuple of CreditAmount")
    for a in value:
        if not isinstance(a, CreditAmount):
            raise InvalidArgument(f"{attr.name} must be a tuple of CreditAmount")
    if len(value) > MAX_RESOURCES_PER_MESSAGE:
        raise InvalidArgument(f"{attr.name} has more than {MAX_RESOURCES_PER_MESSAGE} amounts")
    resources = [a.resource for a in value]
    if len(set(resources)) != len(resources):
        raise InvalidArgument(f"{attr.name} names a resource twice")


def _session(_inst: Any, _attr: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, SessionId):
        raise InvalidArgument(f"expected a SessionId, got {type(value).__name__}")


U16 = _uint(16)
U32 = _uint(32)
U64 = _uint(64)
assert U32_MAX == (1 << 32) - 1 and U64_MAX == (1 << 64) - 1


@attrs.frozen(kw_only=True)
class ReceiverCreditUpdate:
    """RFC ``ReceiverCreditUpdateV1``: the full cumulative grant vector of one credit key.

    ``retry_after_us`` (0 = none) tells a sender whose demand could not be met when to ask again.
    """

    schema_version: int = attrs.field(default=SCHEMA_VERSION, validator=_schema)
    flags: int = attrs.field(default=0, validator=U16)
    qos_class: int = attrs.field(default=0, validator=U32)
    receiver_session_id: SessionId = attrs.field(validator=_session)
    epoch: int = attrs.field(default=0, validator=U64)
    sequence: int = attrs.field(default=0, validator=U64)
    freshness_ttl_ms: int = attrs.field(default=0, validator=U32)
    grants: tuple[CreditAmount, ...] = attrs.field(default=(), validator=_amounts)
    retry_after_us: int = attrs.field(default=0, validator=U64)


@attrs.frozen(kw_only=True)
class SenderCreditUsage:
    """RFC ``SenderCreditUsageV1`` plus cumulative ``returned_totals`` (explicit return)."""

    schema_version: int = attrs.field(default=SCHEMA_VERSION, validator=_schema)
    receiver_session_id: SessionId = attrs.field(validator=_session)
    epoch: int = attrs.field(default=0, validator=U64)
    sequence: int = attrs.field(default=0, validator=U64)
    qos_class: int = attrs.field(default=0, validator=U32)
    consumed_totals: tuple[CreditAmount, ...] = attrs.field(default=(), validator=_amounts)
    returned_totals: tuple[CreditAmount, ...] = attrs.field(default=(), validator=_amounts)
    pending_demand: tuple[CreditAmount, ...] = attrs.field(default=(), validator=_amounts)


@attrs.frozen(kw_only=True)
class CreditReturn:
    """Explicit return of unused credit: cumulative ``returned_totals`` (idempotent on replay)."""

    schema_version: int = attrs.field(default=SCHEMA_VERSION, validator=_schema)
    receiver_session_id: SessionId = attrs.field(validator=_session)
    epoch: int = attrs.field(validator=U64)
    sequence: int = attrs.field(validator=U64)
    qos_class: int = attrs.field(validator=U32)
    returned_totals: tuple[CreditAmount, ...] = attrs.field(validator=_amounts)


def _versions(_inst: Any, _attr: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, tuple) or not 0 < len(value) <= MAX_VERSIONS:
        raise InvalidArgument(f"versions must be a non-empty tuple of at most {MAX_VERSIONS}")
    for v in value:
        if type(v) is not int or not 0 < v <= 0xFFFF:
            raise InvalidArgument(f"protocol version must be a non-zero u16, got {describe(v)}")
    if len(set(value)) != len(value):
        raise InvalidArgument("versions must be unique")


@attrs.frozen(kw_only=True)
class CapabilityOffer:
    """Sender → receiver at connection setup: the protocol versions the sender speaks."""

    schema_version: int = attrs.field(default=SCHEMA_VERSION, validator=_schema)
    versions: tuple[int, ...] = attrs.field(validator=_versions)
    qos_class: int = attrs.field(default=0, validator=U32)


@attrs.frozen(kw_only=True)
class CapabilityActivation:
    """Receiver → sender: the receiver's versions, the selected one (0 = no common version),
    and, when selected, the session and the receiver-chosen epoch of this sender's key."""

    schema_version: int = attrs.field(default=SCHEMA_VERSION, validator=_schema)
    versions: tuple[int, ...] = attrs.field(validator=_versions)
    selected_version: int = attrs.field(validator=U16)
    receiver_session_id: SessionId = attrs.field(validator=_session)
    epoch: int = attrs.field(validator=U64)
    qos_class: int = attrs.field(default=0, validator=U32)
    freshness_ttl_ms: int = attrs.field(default=0, validator=U32)


@attrs.frozen(kw_only=True)
class Heartbeat:
    """Liveness of (session, epoch) in either direction; never changes grants."""

    schema_version: int = attrs.field(default=SCHEMA_VERSION, validator=_schema)
    receiver_session_id: SessionId = attrs.field(validator=_session)
    epoch: int = attrs.field(validator=U64)
    qos_class: int = attrs.field(default=0, validator=U32)


ControlMessage = (
    ReceiverCreditUpdate
    | SenderCreditUsage
    | CreditReturn
    | CapabilityOffer
    | CapabilityActivation
    | Heartbeat
)
