"""Tests added for mutants that survived the whole suite (benchmarks/mutants.py).

Each test names the mutant it kills; each was checked to fail with that mutant applied.
"""

from __future__ import annotations

from tent_credit import SessionId
from tent_credit._allocator import AllocatorConfig, ReceiverCreditAllocator
from tent_credit._types import CreditResource

D = CreditResource.DATA_BYTES
Q = CreditResource.REQUEST_SLOTS


def _allocator() -> ReceiverCreditAllocator:
    config = AllocatorConfig(
        capacity={D: 1000, Q: 10},
        staging_reserve={D: 200, Q: 2},
        control_slots=2,
        max_grant={D: 400, Q: 4},
        min_grant={D: 100},
        max_keys=4,
        retry_after_us=250,
    )
    return ReceiverCreditAllocator(config, SessionId(0xABC))


def test_key_totals_names_the_key_and_epoch_it_describes() -> None:
    # tool mutant tent_credit/_allocator.py:296 NumberReplacer (qos_class=ident[0]), in
    # key_totals (line 123 since the allocator's split): every earlier test used qos class 0
    # with sender 0 or 1, where the fields coincide.
    alloc = _allocator()
    assert alloc.open_epoch(7, 3) == 1
    assert alloc.open_epoch(7, 3) == 2
    for epoch in (1, 2):
        totals = alloc.key_totals(7, 3, epoch)
        assert (totals.sender_peer, totals.qos_class, totals.epoch) == (7, 3, epoch)
