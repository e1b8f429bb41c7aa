"""Write admission: the receiver's last check before a credited write touches memory.

docs/transport_design.md#leases and docs/seams.md "Write admission". A sender's usage report is a
claim; a write is a fact. A lying sender can report as *returned* credit whose payload is still in
flight, the receiver then re-grants that capacity to someone else, and the late payload would
overfill the receiver. :meth:`ReceiverCreditAllocator.admit_write` refuses such a write before its
bytes land, so physical occupancy never exceeds capacity whatever a sender claims.

This module holds the values of that decision and the peer-input parsing that must never raise
(everything in a write's lease came from the peer). The decision itself lives in the allocator,
which owns the accounting it checks (its write-admission part, :mod:`._allocator_admission`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import TypeGuard

import attrs

from ._arith import U64_MAX
from ._types import CreditResource

__all__ = ["WriteAdmission", "WriteRefusal", "parse_write_amounts"]


class WriteRefusal(enum.Enum):
    """Why a credited write was refused (each one is a protocol violation of the sender)."""

    OVER_CREDIT = "over_credit"  # landed + reclaimed-by-return + amount > granted of that epoch
    FENCED_SESSION = "fenced_session"  # the epoch's fence completed (or it was forgotten)
    UNKNOWN_EPOCH = "unknown_epoch"  # an epoch (or key) this receiver session never opened
    QUARANTINED = "quarantined"  # the key was quarantined by an earlier violation
    MALFORMED = "malformed"  # ids or amounts that are not well-formed (wrong type, range, empty)


@attrs.frozen(kw_only=True)
class WriteAdmission:
    """The answer of :meth:`~tent_credit.CreditReceiver.admit_write`.

    ``accepted`` is ``True`` exactly when ``reason`` is ``None``: the write was counted as landed
    (it now awaits :meth:`~tent_credit.CreditReceiver.release`). A refusal changed nothing but the
    protocol-violation counter and, when the key is known, its quarantine.
    """

    accepted: bool
    reason: WriteRefusal | None = None

    def __attrs_post_init__(self) -> None:
        if self.accepted is not (self.reason is None):
            raise ValueError("a WriteAdmission is accepted exactly when it has no reason")


ACCEPTED = WriteAdmission(accepted=True)

_RESOURCE_COUNT = len(CreditResource)
_RESOURCE_OF = {r.value: r for r in CreditResource}  # a wire value's member, one lookup


def refused(reason: WriteRefusal) -> WriteAdmission:
    return WriteAdmission(accepted=False, reason=reason)


def is_u64(value: object) -> TypeGuard[int]:
    return type(value) is int and 0 <= value <= U64_MAX


def parse_write_amounts(
    amounts: object, modelled: Iterable[CreditResource]
) -> dict[CreditResource, int] | None:
    """A write's charge as ``{resource: amount}``, or ``None`` if it is not well-formed.

    Well-formed: a mapping of at most one entry per :class:`CreditResource` (members, or the
    plain ints of their wire values), each a modelled resource with a u64 amount, and at least one
    amount above zero (an uncharged credited write is a sender bug). Never raises: the charge is
    peer input, and its size is checked before anything iterates it.
    """
    if type(amounts) is not dict and not isinstance(amounts, Mapping):  # dict: no ABC check
        return None
    try:
        size = len(amounts)
    except Exception:  # a hostile Mapping subclass; nothing of it is trusted
        return None
    if not 0 < size <= _RESOURCE_COUNT:
        return None
    known = set(modelled)
    out: dict[CreditResource, int] = {}
    try:
        items = list(amounts.items())
    except Exception:
        return None
    for key, amount in items:
        if isinstance(key, CreditResource):
            resource = key
        elif type(key) is int and key in _RESOURCE_OF:
            resource = _RESOURCE_OF[key]
        else:
            return None
        if resource not in known or resource in out:
            return None
        if type(amount) is not int or not 0 <= amount <= U64_MAX:  # is_u64, inline
            return None
        out[resource] = amount
    if not any(out.values()):
        return None
    return out
