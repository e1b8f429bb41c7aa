"""Receiver-advertised credits for TENT: a sans-IO implementation of the credit RFC.

The public face of the package; implementation lives in private ``_*.py`` modules. Submodules
``tent_credit.errors``, ``tent_credit.metrics`` and ``tent_credit.testing`` are public too.
"""

from __future__ import annotations

from ._allocator import (
    AllocationClass,
    AllocatorConfig,
    AllocatorStatistics,
    EpochState,
    GrantDecision,
    KeyTotalsSnapshot,
    ReceiverCreditAllocator,
    compute_grant,
)
from ._arith import U32_MAX, U64_MAX, U128_MAX, check_u64, checked_add, checked_sub
from ._backpressure import BackpressureInfo, BackpressureSource
from ._endpoints import (
    CreditReceiver,
    EndpointEvent,
    ReceiverEndpoint,
    ReceiverEndpointStatistics,
    SenderEndpoint,
    SenderEndpointStatistics,
)
from ._inbox import ControlInbox, InboxOutcome, InboxStatistics
from ._ledger import (
    TOKEN_TRANSITIONS,
    Blocked,
    LedgerEntrySnapshot,
    LedgerStatistics,
    ReservationToken,
    SenderCreditLedger,
    TokenState,
    UpdateDisposition,
)
from ._messages import (
    MAX_RESOURCES_PER_MESSAGE,
    SCHEMA_VERSION,
    SUPPORTED_VERSIONS,
    CapabilityActivation,
    CapabilityOffer,
    ControlMessage,
    CreditReturn,
    Heartbeat,
    ReceiverCreditUpdate,
    SenderCreditUsage,
)
from ._negotiation import (
    TRANSITIONS,
    CreditMode,
    NegotiationEvent,
    NegotiationSnapshot,
    NegotiationState,
    PeerNegotiation,
)
from ._types import (
    CreditAmount,
    CreditCharge,
    CreditKey,
    CreditResource,
    Plan,
    SessionId,
    charge_for_plan,
)
from ._wire import MAX_MESSAGE_BYTES, WireErrorCode, decode, encode

__all__ = [
    "MAX_MESSAGE_BYTES",
    "MAX_RESOURCES_PER_MESSAGE",
    "SCHEMA_VERSION",
    "SUPPORTED_VERSIONS",
    "TOKEN_TRANSITIONS",
    "TRANSITIONS",
    "U32_MAX",
    "U64_MAX",
    "U128_MAX",
    "AllocationClass",
    "AllocatorConfig",
    "AllocatorStatistics",
    "BackpressureInfo",
    "BackpressureSource",
    "Blocked",
    "CapabilityActivation",
    "CapabilityOffer",
    "ControlInbox",
    "ControlMessage",
    "CreditAmount",
    "CreditCharge",
    "CreditKey",
    "CreditMode",
    "CreditReceiver",
    "CreditResource",
    "CreditReturn",
    "EndpointEvent",
    "EpochState",
    "GrantDecision",
    "Heartbeat",
    "InboxOutcome",
    "InboxStatistics",
    "KeyTotalsSnapshot",
    "LedgerEntrySnapshot",
    "LedgerStatistics",
    "NegotiationEvent",
    "NegotiationSnapshot",
    "NegotiationState",
    "PeerNegotiation",
    "Plan",
    "ReceiverCreditAllocator",
    "ReceiverCreditUpdate",
    "ReceiverEndpoint",
    "ReceiverEndpointStatistics",
    "ReservationToken",
    "SenderCreditLedger",
    "SenderCreditUsage",
    "SenderEndpoint",
    "SenderEndpointStatistics",
    "SessionId",
    "TokenState",
    "UpdateDisposition",
    "WireErrorCode",
    "charge_for_plan",
    "check_u64",
    "checked_add",
    "checked_sub",
    "compute_grant",
    "decode",
    "encode",
]
