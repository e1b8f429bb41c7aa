"""The gated harness's shared vocabulary: its ids and the spec values of implementation values.

The receiver's and sender's ids (:data:`RX`, :data:`PEER`), the refresh interval
:data:`REFRESH_NS`, the resource order of a spec vector, and the conversions that
:class:`~tent_models.conformance.gated.GatedAdapter`'s drivers and its abstraction function both
need: resource mappings and message amounts to spec vectors (and back), and encoded control
messages to their spec values (one: :func:`spec_message`; a bag in flight: ``_bag``). Plain
functions of their arguments: no harness state.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from tent_spec.credit import ACTIVATION, UPDATE, Activation
from tent_spec.gated import OFFER, REPORT, Offer, Report, Update

from tent_credit import (
    CapabilityActivation,
    CapabilityOffer,
    CreditAmount,
    CreditResource,
    ReceiverCreditUpdate,
    SenderCreditUsage,
    decode,
)

__all__ = ["PEER", "REFRESH_NS", "RX", "spec_message"]

RX = 1
"""The receiver's id as registered with the gate."""
PEER = 7
"""The sender's peer id (bound at connection setup)."""
REFRESH_NS = 10**12
"""The receiver's refresh interval: only ``refresh_tick`` advances the clock that far."""

_RESOURCES = (
    CreditResource.DATA_BYTES,
    CreditResource.REQUEST_SLOTS,
    CreditResource.CONSUMER_SLOTS,
)


def _vec(amounts: Mapping[CreditResource, int]) -> tuple[int, ...]:
    """A spec vector from a resource mapping."""
    return tuple(amounts.get(r, 0) for r in _RESOURCES)


def _wire_vec(amounts: tuple[CreditAmount, ...]) -> tuple[int, ...]:
    """A spec vector from a message's ``CreditAmount`` tuple."""
    return _vec({a.resource: a.amount for a in amounts})


def _amounts(vector: tuple[int, ...]) -> dict[CreditResource, int]:
    return dict(zip(_RESOURCES, vector, strict=True))


def spec_message(data: bytes) -> Any:
    """The spec value of one encoded control message (the message part of the abstraction)."""
    message = decode(data)
    if isinstance(message, CapabilityOffer):
        return Offer(OFFER)
    if isinstance(message, SenderCreditUsage):
        return Report(
            REPORT,
            message.receiver_session_id.value,
            message.sequence,
            _wire_vec(message.consumed_totals),
            _wire_vec(message.returned_totals),
            _wire_vec(message.pending_demand),
        )
    if isinstance(message, CapabilityActivation):
        return Activation(ACTIVATION, message.receiver_session_id.value, message.epoch)
    if isinstance(message, ReceiverCreditUpdate):
        return Update(
            UPDATE,
            message.receiver_session_id.value,
            message.epoch,
            message.sequence,
            _wire_vec(message.grants),
            bool(message.retry_after_us),
        )
    raise TypeError(f"unexpected message {message!r}")  # pragma: no cover - never sent here


def _bag(counter: Counter[bytes]) -> tuple[tuple[Any, int], ...]:
    bag: Counter[Any] = Counter()
    for data, count in counter.items():
        bag[spec_message(data)] += count
    return tuple(sorted(bag.items()))
