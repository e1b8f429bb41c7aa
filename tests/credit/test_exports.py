"""The public names of ``tent_credit`` are pinned: adding or dropping one is a reviewed change."""

from __future__ import annotations

import tent_credit
import tent_credit.errors

# docs/seams.md "Write admission": other packages code against WriteAdmission / WriteRefusal.
CONTRACT_NAMES = {"CreditReceiver", "WriteAdmission", "WriteRefusal"}

EXPECTED = {
    "DEFAULT_STALL_BUCKETS_NS", "GATE_POLICY", "MAX_MESSAGE_BYTES", "MAX_RESOURCES_PER_MESSAGE",
    "GRANT_AHEAD_VERSION", "SCHEMA_VERSION", "SUPPORTED_VERSIONS", "TICKET_TRANSITIONS",
    "TOKEN_TRANSITIONS",
    "TRANSITIONS", "U32_MAX", "U64_MAX", "U128_MAX", "AllocationClass", "AllocatorConfig",
    "AllocatorStatistics", "BackpressureInfo", "BackpressureSource", "Blocked",
    "CapabilityActivation", "CapabilityOffer", "ControlInbox", "ControlMessage", "CreditAmount",
    "CreditCharge", "CreditKey", "CreditMode", "CreditReceiver", "CreditResource",
    "CreditReturn", "CreditStall", "DispatchContext", "DispatchGate", "EndpointEvent",
    "EpochState", "GateAction", "GateBlocked", "GateConfig", "GateEligible", "GateRejected",
    "GateStatistics", "GateToken", "GatedOwner", "GrantDecision", "GrantSplit", "Heartbeat",
    "InboxOutcome",
    "InboxStatistics", "KeyTotalsSnapshot", "LedgerEntrySnapshot", "LedgerStatistics",
    "NegotiationEvent", "NegotiationSnapshot", "NegotiationState", "PeerNegotiation",
    "PickOutcome", "Plan", "ReceiverCreditAllocator", "ReceiverCreditUpdate",
    "ReceiverEndpoint", "ReceiverEndpointStatistics", "RejectReason", "ReservationToken",
    "RouteRemoval", "RouteStatistics", "SenderCreditLedger", "SenderCreditUsage", "SenderEndpoint",
    "SenderEndpointStatistics", "SessionId", "TicketState", "TokenState", "TransferBook",
    "UpdateDisposition",
    "WireErrorCode", "WriteAdmission", "WriteRefusal", "charge_for_plan", "check_u64",
    "checked_add", "checked_sub", "compute_grant", "decode", "encode",
}  # fmt: skip


def test_public_names_are_pinned() -> None:
    assert set(tent_credit.__all__) == EXPECTED
    assert len(tent_credit.__all__) == len(EXPECTED)  # no duplicates
    for name in tent_credit.__all__:
        assert hasattr(tent_credit, name), name


def test_contract_names_are_exported() -> None:
    assert set(tent_credit.__all__) >= CONTRACT_NAMES
    assert tent_credit.CreditReceiver.admit_write.__doc__
    assert "KeyQuarantined" in tent_credit.errors.__all__
