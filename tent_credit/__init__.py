"""Receiver-advertised credits for TENT: a sans-IO implementation of the credit RFC."""

from __future__ import annotations

from ._arith import U64_MAX, U128_MAX, checked_add, checked_sub
from ._types import (
    CreditAmount,
    CreditCharge,
    CreditKey,
    CreditResource,
    Plan,
    SessionId,
    charge_for_plan,
)

__all__ = [
    "U64_MAX",
    "U128_MAX",
    "CreditAmount",
    "CreditCharge",
    "CreditKey",
    "CreditResource",
    "Plan",
    "SessionId",
    "charge_for_plan",
    "checked_add",
    "checked_sub",
]
