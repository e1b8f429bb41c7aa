"""Abuse bounds of the allocator: per-key cap, max-min fair split, bounded fencing epochs
(issue 10 items 8 and 9; docs/abuse.md)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from tent_credit import CreditReceiver, CreditResource, GrantSplit, SessionId, encode
from tent_credit._allocator import AllocatorConfig, ReceiverCreditAllocator
from tent_credit._fairness import max_min_share
from tent_credit._messages import CreditAmount, SenderCreditUsage
from tent_credit.errors import InvalidArgument, TooManyRequests
from tent_credit.metrics import CreditCollector

Q = CreditResource.REQUEST_SLOTS
HUGE = 2**64 - 1
SESSION = SessionId(5)


def config(**overrides: Any) -> AllocatorConfig:
    fields: dict[str, Any] = {
        "capacity": {Q: 8},
        "control_slots": 2,
        "max_grant": {Q: 8},
        "max_keys": 32,
        "retry_after_us": 10,
    }
    fields.update(overrides)
    return AllocatorConfig(**fields)


def demand_report(seq: int, amount: int, returned: int = 0) -> bytes:
    return encode(
        SenderCreditUsage(
            receiver_session_id=SESSION,
            epoch=1,
            sequence=seq,
            qos_class=0,
            returned_totals=(CreditAmount(resource=Q, amount=returned),) if returned else (),
            pending_demand=(CreditAmount(resource=Q, amount=amount),) if amount else (),
        )
    )


# ---- max_min_share ------------------------------------------------------------------------


def test_share_is_water_filling_on_holdings() -> None:
    assert max_min_share(8, (0, HUGE), [(0, 2)]) == 6
    assert max_min_share(8, (0, 2), [(0, HUGE)]) == 2
    assert max_min_share(8, (0, HUGE), [(0, HUGE)]) == 4
    assert max_min_share(8, (6, HUGE), [(0, HUGE)]) == 1  # level 7: 1 for me, 7 for the other
    assert max_min_share(4, (5, 3), [(0, HUGE)]) == 0  # above the level: nothing new
    assert max_min_share(5, (0, 3), []) == 3
    assert max_min_share(0, (0, 3), [(1, 1)]) == 0


_ENTRIES = st.lists(st.tuples(st.integers(0, 20), st.integers(0, 30)), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(free=st.integers(0, 60), entries=_ENTRIES, order=st.randoms(use_true_random=False))
def test_grants_carved_one_key_at_a_time_split_the_same_in_any_order(
    free: int, entries: list[tuple[int, int]], order: Any
) -> None:
    def carve(sequence: list[int]) -> dict[int, int]:
        held = [h for h, _ in entries]
        want = [w for _, w in entries]
        pool = free
        out: dict[int, int] = {}
        for i in sequence:
            others = [(held[j], want[j]) for j in range(len(entries)) if j != i]
            share = max_min_share(pool, (held[i], want[i]), others)
            assert 0 <= share <= min(want[i], pool)
            out[i] = share
            held[i] += share
            want[i] -= share
            pool -= share
        return out

    forward = carve(list(range(len(entries))))
    shuffled = list(range(len(entries)))
    order.shuffle(shuffled)
    assert carve(shuffled) == forward
    # max-min: nobody who got less than they wanted ends below anyone else's new holding
    final = [h + forward[i] for i, (h, _) in enumerate(entries)]
    for i, (_h, w) in enumerate(entries):
        if forward[i] < w:
            assert all(final[i] + 1 >= final[j] for j in range(len(entries)) if forward[j] > 0)


# ---- item 8: a greedy key against an honest one --------------------------------------------


def test_a_greedy_demand_does_not_take_what_an_honest_stalled_key_waits_for() -> None:
    # Item 8: with first-come grants, the greedy key (accepted first, so pushed first) absorbed
    # all 8 freed slots while the honest one starved.
    rx = CreditReceiver(config(), SESSION)
    greedy, honest, holder = rx.accept(1), rx.accept(2), rx.accept(3)
    holder.receive_message(demand_report(1, 8), 0)
    assert rx.allocator.free(Q) == 0
    honest.receive_message(demand_report(1, 2), 1)
    greedy.receive_message(demand_report(1, HUGE), 2)
    assert honest.stalled and greedy.stalled
    holder.receive_message(demand_report(2, 0, returned=8), 3)  # capacity frees: push
    assert rx.allocator.key_totals(2, 0, 1).granted[Q] == 2
    assert rx.allocator.key_totals(1, 0, 1).granted[Q] == 6
    assert not honest.stalled


def test_first_come_is_still_available_as_a_configured_policy() -> None:
    rx = CreditReceiver(config(grant_split=GrantSplit.FIRST_COME), SESSION)
    greedy, honest, holder = rx.accept(1), rx.accept(2), rx.accept(3)
    holder.receive_message(demand_report(1, 8), 0)
    honest.receive_message(demand_report(1, 2), 1)
    greedy.receive_message(demand_report(1, HUGE), 2)
    holder.receive_message(demand_report(2, 0, returned=8), 3)
    assert rx.allocator.key_totals(1, 0, 1).granted[Q] == 8  # the documented old behaviour
    assert honest.stalled


def test_the_per_key_cap_holds_across_reports_and_epochs() -> None:
    alloc = ReceiverCreditAllocator(config(max_key_outstanding={Q: 3}), SESSION)
    alloc.open_epoch(1, 0)
    assert alloc.grant(1, 0, {Q: HUGE}).granted_now[Q] == 3
    decision = alloc.grant(1, 0, {Q: HUGE})
    assert decision.granted_now[Q] == 0 and decision.retry_after_us
    alloc.open_epoch(1, 0)  # the old epoch's 3 stay committed while it fences
    assert alloc.grant(1, 0, {Q: HUGE}).granted_now[Q] == 0
    alloc.fence_complete(1, 0, 1)
    assert alloc.grant(1, 0, {Q: HUGE}).granted_now[Q] == 3
    assert alloc.free(Q) == 5


def test_withdrawn_demand_leaves_the_split() -> None:
    alloc = ReceiverCreditAllocator(config(), SESSION)
    for peer in (1, 2, 3):
        alloc.open_epoch(peer, 0)
    assert alloc.grant(3, 0, {Q: 8}).granted_now[Q] == 8
    alloc.grant(1, 0, {Q: HUGE})  # blocked: registered as live demand
    alloc.on_usage(3, 0, 1, consumed_totals={}, returned_totals={Q: 8})
    alloc.withdraw_demand(1, 0)
    assert alloc.statistics().keys_with_demand == 0
    assert alloc.grant(2, 0, {Q: 8}).granted_now[Q] == 8  # nobody else wants any


def test_a_cap_that_can_never_be_granted_is_a_configuration_error() -> None:
    with pytest.raises(InvalidArgument):
        config(max_key_outstanding={Q: 1}, min_grant={Q: 2})
    with pytest.raises(InvalidArgument):
        config(max_key_outstanding={CreditResource.DATA_BYTES: 1})
    with pytest.raises(InvalidArgument):
        config(grant_split="fair")


# ---- item 9: superseded epochs are bounded ---------------------------------------------------


def test_reconnects_beyond_the_fencing_bound_are_refused_and_change_nothing() -> None:
    # Item 9: 100k reconnects kept 100k records; each reconnect's initial grant stays pinned.
    alloc = ReceiverCreditAllocator(config(max_fencing_epochs=3), SESSION)
    refused = 0
    for _ in range(1000):
        try:
            alloc.open_epoch(1, 0)
        except TooManyRequests:
            refused += 1
            continue
        alloc.grant(1, 0, {Q: 1})
    stats = alloc.statistics()
    assert refused == 1000 - 4
    assert stats.epochs_fencing == 3 and stats.epochs_active == 1
    assert stats.fencing_outstanding[Q] == 3
    before = alloc.statistics()
    with pytest.raises(TooManyRequests):
        alloc.open_epoch(1, 0)
    assert alloc.statistics() == before
    alloc.fence_complete(1, 0, 1)  # the bound frees up as fences complete
    assert alloc.open_epoch(1, 0) == 5
    assert alloc.statistics().fencing_outstanding[Q] == 3


def test_unfenced_capacity_is_a_metric() -> None:
    rx = CreditReceiver(config(), SESSION)
    registry = CollectorRegistry()
    CreditCollector(registry).watch_receiver(rx)
    rx.accept(1)
    rx.allocator.grant(1, 0, {Q: 2})
    rx.accept(1)  # reconnect: epoch 1's 2 slots are unfenced until its fence completes
    sample = registry.get_sample_value
    assert sample("tent_credit_receiver_unfenced", {"resource": "REQUEST_SLOTS"}) == 2
    rx.fence_complete(1, 0, 1)
    assert sample("tent_credit_receiver_unfenced", {"resource": "REQUEST_SLOTS"}) == 0
    assert sample("tent_credit_receiver_keys_quarantined", {}) == 0


@settings(max_examples=300, deadline=None)
@given(
    free=st.integers(0, 60), me=st.tuples(st.integers(0, 20), st.integers(0, 30)), others=_ENTRIES
)
def test_share_matches_a_brute_force_water_level(
    free: int, me: tuple[int, int], others: list[tuple[int, int]]
) -> None:
    entries = [me, *others]

    def rise(level: int) -> int:
        return sum(min(w, max(0, level - h)) for h, w in entries)

    top = max(h + w for h, w in entries)
    level = max(lv for lv in range(top + 1) if rise(lv) <= free)
    expected = me[1] if rise(top) <= free else min(me[1], max(0, level - me[0]))
    assert max_min_share(free, me, others) == expected


# ---- the split's unit comes from the waiting work (issue 13) -------------------------------


def _incast_split(*, waiting_unit: bool) -> list[int]:
    """16 stalled senders that hold slot credit and wait for 2 blocks each; 8 blocks free at
    once. Returns the DATA_BYTES each sender is pushed."""
    b, c = CreditResource.DATA_BYTES, CreditResource.CONSUMER_SLOTS
    block = 4 << 20
    rx = CreditReceiver(
        config(
            capacity={b: 8 * block, Q: 64, c: 64},
            max_grant={b: 8 * block, Q: 64, c: 64},
        ),
        SESSION,
    )

    def usage(seq: int, target: dict[CreditResource, int], returned: int = 0) -> bytes:
        return encode(
            SenderCreditUsage(
                receiver_session_id=SESSION,
                epoch=1,
                sequence=seq,
                qos_class=0,
                returned_totals=(CreditAmount(resource=b, amount=returned),) if returned else (),
                pending_demand=tuple(CreditAmount(resource=r, amount=a) for r, a in target.items()),
            )
        )

    holder = rx.accept(100)
    holder.receive_message(usage(1, {b: 8 * block}), 0)  # takes every byte
    senders = [rx.accept(peer) for peer in range(1, 17)]
    for endpoint in senders:
        endpoint.receive_message(usage(1, {Q: 2, c: 2}), 1)  # slot credit on hand ...
        endpoint.receive_message(usage(2, {b: 2 * block, Q: 2, c: 2}), 2)  # ... 2 blocks wait
        assert endpoint.stalled
    if not waiting_unit:
        for endpoint in senders:
            endpoint._waiting = None  # the split as it was: units of the demand alone
    holder.receive_message(usage(2, {}, returned=8 * block), 3)  # 8 blocks free: push
    return [rx.allocator.key_totals(peer, 0, 1).granted[b] for peer in range(1, 17)]


def test_a_bytes_only_demand_is_split_in_whole_charges_of_the_waiting_work() -> None:
    # The demand of a sender that holds slot credit names DATA_BYTES only; split in units of
    # that demand (one byte), 16 senders got half a block each and none could reserve one
    # (docs/incast.md, 14 of 128 blocks in 60 s, until the runner set min_grant). The waiting
    # work (target - consumed - returned) still says one charge is a block with its slots.
    block = 4 << 20
    assert _incast_split(waiting_unit=False) == [block // 2] * 16  # the old split
    split = _incast_split(waiting_unit=True)
    assert sorted(split) == [0] * 8 + [block] * 8  # whole blocks, to 8 of the 16
