"""The bounded coalescing control inbox."""

from __future__ import annotations

import contextlib
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import receiver_credit_updates

from tent_credit._inbox import ControlInbox, InboxOutcome, InboxStatistics
from tent_credit._ledger import SenderCreditLedger
from tent_credit._messages import Heartbeat, ReceiverCreditUpdate
from tent_credit._types import CreditAmount, CreditKey, CreditResource, SessionId
from tent_credit.errors import GrantDecreased, InvalidArgument, InvalidEntry

SESSION = SessionId(7)
KEY = CreditKey(receiver_session=SESSION, sender_peer=1, qos_class=0)


def update(epoch: int, sequence: int, data_bytes: int = 0) -> ReceiverCreditUpdate:
    return ReceiverCreditUpdate(
        qos_class=0,
        receiver_session_id=SESSION,
        epoch=epoch,
        sequence=sequence,
        grants=(CreditAmount(resource=CreditResource.DATA_BYTES, amount=data_bytes),),
    )


def snapshot(inbox: ControlInbox[Any]) -> tuple[InboxStatistics, int]:
    return inbox.statistics(), len(inbox)


def test_first_update_of_a_key_is_queued() -> None:
    inbox: ControlInbox[str] = ControlInbox(max_keys=2)
    assert inbox.offer("a", update(1, 1)) is InboxOutcome.QUEUED
    assert len(inbox) == 1
    assert inbox.drain() == [("a", update(1, 1))]
    assert len(inbox) == 0


def test_newer_sequence_replaces_the_pending_update() -> None:
    inbox: ControlInbox[str] = ControlInbox(max_keys=2)
    inbox.offer("a", update(1, 1, data_bytes=10))
    assert inbox.offer("a", update(1, 3, data_bytes=30)) is InboxOutcome.COALESCED
    assert inbox.drain() == [("a", update(1, 3, data_bytes=30))]


def test_older_or_equal_sequence_is_discarded_as_stale() -> None:
    inbox: ControlInbox[str] = ControlInbox(max_keys=2)
    inbox.offer("a", update(1, 5, data_bytes=50))
    assert inbox.offer("a", update(1, 4, data_bytes=99)) is InboxOutcome.STALE_DISCARDED
    assert inbox.offer("a", update(1, 5, data_bytes=99)) is InboxOutcome.STALE_DISCARDED
    assert inbox.drain() == [("a", update(1, 5, data_bytes=50))]


def test_a_new_epoch_wins_even_with_a_lower_sequence() -> None:
    # docs/semantics.md#receiver-allocator: sequences restart with each epoch, so compare (epoch,
    # sequence).
    inbox: ControlInbox[str] = ControlInbox(max_keys=1)
    inbox.offer("a", update(1, 99))
    assert inbox.offer("a", update(2, 1)) is InboxOutcome.COALESCED
    assert inbox.offer("a", update(1, 100)) is InboxOutcome.STALE_DISCARDED
    assert inbox.drain() == [("a", update(2, 1))]


def test_a_new_key_past_the_bound_is_rejected_without_growing() -> None:
    inbox: ControlInbox[str] = ControlInbox(max_keys=2)
    inbox.offer("a", update(1, 1))
    inbox.offer("b", update(1, 1))
    before = snapshot(inbox)
    assert inbox.offer("c", update(1, 1)) is InboxOutcome.REJECTED_FULL
    stats, length = snapshot(inbox)
    assert length == 2 == stats.pending
    assert stats.rejected_full == before[0].rejected_full + 1
    # keys already pending still coalesce while the inbox is full
    assert inbox.offer("a", update(1, 2)) is InboxOutcome.COALESCED
    assert [key for key, _ in inbox.drain()] == ["a", "b"]
    # draining frees the slots
    assert inbox.offer("c", update(1, 1)) is InboxOutcome.QUEUED


def test_drain_keeps_first_offered_key_order_across_coalescing() -> None:
    inbox: ControlInbox[int] = ControlInbox(max_keys=4)
    for key in (3, 1, 2):
        inbox.offer(key, update(1, 1))
    inbox.offer(3, update(1, 2))
    inbox.offer(1, update(2, 1))
    assert inbox.drain() == [(3, update(1, 2)), (1, update(2, 1)), (2, update(1, 1))]
    assert inbox.drain() == []


def test_statistics_count_every_outcome_and_the_high_water_mark() -> None:
    inbox: ControlInbox[str] = ControlInbox(max_keys=2)
    inbox.offer("a", update(1, 1))
    inbox.offer("b", update(1, 1))
    inbox.offer("a", update(1, 2))
    inbox.offer("a", update(1, 2))
    inbox.offer("c", update(1, 1))
    inbox.drain()
    inbox.offer("c", update(1, 1))
    assert inbox.statistics() == InboxStatistics(
        queued=3,
        coalesced=1,
        rejected_decreasing=0,
        stale_discarded=1,
        rejected_full=1,
        pending=1,
        high_water=2,
    )


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, None, "3"])
def test_max_keys_must_be_a_positive_int(bad: Any) -> None:
    with pytest.raises(InvalidArgument):
        ControlInbox(max_keys=bad)


def test_max_keys_is_readable() -> None:
    assert ControlInbox[str](max_keys=3).max_keys == 3


def test_offering_something_else_than_an_update_changes_nothing() -> None:
    inbox: ControlInbox[str] = ControlInbox(max_keys=2)
    inbox.offer("a", update(1, 1))
    before = snapshot(inbox)
    with pytest.raises(InvalidArgument):
        inbox.offer("a", Heartbeat(receiver_session_id=SESSION, epoch=1))  # type: ignore[arg-type]
    assert snapshot(inbox) == before
    assert inbox.drain() == [("a", update(1, 1))]


def test_an_unhashable_key_is_rejected_and_changes_nothing() -> None:
    inbox: ControlInbox[Any] = ControlInbox(max_keys=2)
    inbox.offer("a", update(1, 1))
    before = snapshot(inbox)
    with pytest.raises(InvalidArgument):
        inbox.offer(["a"], update(1, 2))
    assert snapshot(inbox) == before


# Operations: ("offer", key, epoch, sequence, tag) or ("drain",). Small ranges make collisions,
# equal (epoch, sequence) pairs and epoch changes common.
_offers = st.tuples(
    st.just("offer"),
    st.integers(0, 4),
    st.integers(1, 3),
    st.integers(1, 4),
    st.integers(0, 1000),
)
_operations = st.lists(st.one_of(_offers, _offers, _offers, st.just(("drain",))), max_size=60)


@given(max_keys=st.integers(1, 4), operations=_operations)
def test_inbox_agrees_with_a_model_and_never_loses_the_latest_update(
    max_keys: int, operations: list[tuple[Any, ...]]
) -> None:
    """Model: per key, every accepted offer since the last drain; a drain must return, per
    key in first-accepted order, the first offer with the greatest (epoch, sequence)."""
    inbox: ControlInbox[int] = ControlInbox(max_keys=max_keys)
    accepted: dict[int, list[ReceiverCreditUpdate]] = {}
    for operation in [*operations, ("drain",)]:
        if operation[0] == "drain":
            expected = [
                (key, max(offers, key=lambda u: (u.epoch, u.sequence)))
                for key, offers in accepted.items()
            ]
            assert inbox.drain() == expected
            accepted.clear()
            continue
        _, key, epoch, sequence, tag = operation
        offered = update(epoch, sequence, data_bytes=tag)
        outcome = inbox.offer(key, offered)
        if key not in accepted:
            if len(accepted) == max_keys:
                assert outcome is InboxOutcome.REJECTED_FULL
            else:
                assert outcome is InboxOutcome.QUEUED
                accepted[key] = [offered]
        else:
            newest = max(accepted[key], key=lambda u: (u.epoch, u.sequence))
            newer = (epoch, sequence) > (newest.epoch, newest.sequence)
            if newer and epoch == newest.epoch and tag < newest.grants[0].amount:
                # a lower total within the epoch: invalid, never displaces the valid one
                assert outcome is InboxOutcome.REJECTED_DECREASING
                continue
            assert outcome is (InboxOutcome.COALESCED if newer else InboxOutcome.STALE_DISCARDED)
            accepted[key].append(offered)
        stats = inbox.statistics()
        assert len(inbox) == stats.pending == len(accepted) <= max_keys
        assert stats.high_water <= max_keys


def _serially(ledger: SenderCreditLedger, update: ReceiverCreditUpdate) -> None:
    # What the ledger does with one update on arrival (the epoch fence included).
    if update.epoch == 0 or update.sequence == 0:
        return
    if update.epoch > ledger.entry(KEY).epoch:
        ledger.activate(KEY, update.epoch)
    with contextlib.suppress(InvalidEntry, GrantDecreased):
        ledger.apply_update(KEY, update)


@given(updates=st.lists(receiver_credit_updates(), max_size=10))
def test_coalescing_one_key_equals_applying_every_update_in_order(
    updates: list[ReceiverCreditUpdate],
) -> None:
    """An invalid update never displaces a valid one (issue 10 item 3): the one drained update
    leaves the ledger exactly where applying every offered update in order would."""
    # epoch or sequence 0 never reaches an inbox: the endpoint refuses it before offering
    updates = [
        attrs.evolve(u, receiver_session_id=SESSION, qos_class=0)
        for u in updates
        if u.epoch and u.sequence
    ]
    inbox: ControlInbox[str] = ControlInbox(max_keys=1)
    serial, coalesced = SenderCreditLedger(max_entries=1), SenderCreditLedger(max_entries=1)
    serial.activate(KEY, 1)
    coalesced.activate(KEY, 1)
    for u in updates:
        inbox.offer("k", u)
        _serially(serial, u)
    drained = inbox.drain()
    assert len(drained) == (1 if updates else 0)
    for _, u in drained:
        _serially(coalesced, u)
    want, got = serial.entry(KEY), coalesced.entry(KEY)
    assert (got.epoch, got.last_sequence, got.grant_total) == (
        want.epoch,
        want.last_sequence,
        want.grant_total,
    )


def test_a_bogus_higher_sequence_never_displaces_the_valid_update() -> None:
    inbox: ControlInbox[str] = ControlInbox(max_keys=1)
    assert inbox.offer("k", update(1, 2, data_bytes=100)) is InboxOutcome.QUEUED
    assert inbox.offer("k", update(1, 3, data_bytes=50)) is InboxOutcome.REJECTED_DECREASING
    assert inbox.drain() == [("k", update(1, 2, data_bytes=100))]
    assert inbox.statistics().rejected_decreasing == 1


def test_a_newer_update_that_omits_a_resource_keeps_the_pending_total() -> None:
    inbox: ControlInbox[str] = ControlInbox(max_keys=1)
    inbox.offer("k", update(1, 1, data_bytes=100))
    slots = CreditAmount(resource=CreditResource.REQUEST_SLOTS, amount=3)
    inbox.offer("k", attrs.evolve(update(1, 2), grants=(slots,)))
    ((_, drained),) = inbox.drain()
    assert drained.sequence == 2
    assert {g.resource: g.amount for g in drained.grants} == {
        CreditResource.REQUEST_SLOTS: 3,
        CreditResource.DATA_BYTES: 100,
    }
