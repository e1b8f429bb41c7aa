"""Direct allocator calls with an integer of 20,000 bits (past CPython's int → str limit) raise
the documented typed errors and change nothing (issue 10 item 1: no error message formats an
unbounded value)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tent_credit import AllocatorConfig, CreditResource, ReceiverCreditAllocator, SessionId
from tent_credit.errors import InvalidArgument, InvalidEntry

BIG = 1 << 20_000
SLOTS = CreditResource.REQUEST_SLOTS


def _allocator() -> ReceiverCreditAllocator:
    config = AllocatorConfig(
        capacity={SLOTS: 8}, control_slots=1, max_grant={SLOTS: 8}, max_keys=4, retry_after_us=1
    )
    alloc = ReceiverCreditAllocator(config, SessionId(1))
    alloc.open_epoch(1, 0)
    alloc.grant(1, 0, {SLOTS: 2})
    return alloc


CALLS: dict[str, Callable[[ReceiverCreditAllocator], object]] = {
    "open_epoch peer": lambda a: a.open_epoch(BIG, 0),
    "open_epoch qos": lambda a: a.open_epoch(1, BIG),
    "grant demand": lambda a: a.grant(1, 0, {SLOTS: BIG}),
    "fence epoch": lambda a: a.fence(1, 0, BIG),
    "fence_complete epoch": lambda a: a.fence_complete(1, 0, BIG),
    "data_landed amount": lambda a: a.data_landed(1, 0, 1, {SLOTS: BIG}),
    "release peer": lambda a: a.release(BIG, 0, 1, {}),
    "on_usage totals": lambda a: a.on_usage(
        1, 0, 1, consumed_totals={SLOTS: BIG}, returned_totals={}
    ),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_bignum_argument_is_a_typed_error_and_changes_nothing(name: str) -> None:
    alloc = _allocator()
    before = alloc.statistics()
    with pytest.raises((InvalidArgument, InvalidEntry)) as raised:
        CALLS[name](alloc)
    assert len(str(raised.value)) < 400  # the message never carries the number
    after = alloc.statistics()
    assert after == before
