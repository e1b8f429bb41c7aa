"""Unit tests of the receiver's global credit allocator (docs/semantics.md#receiver-allocator)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import pytest

from tent_credit import CreditResource, SessionId
from tent_credit._allocator import (
    AllocationClass,
    AllocatorConfig,
    AllocatorStatistics,
    EpochState,
    KeyTotalsSnapshot,
    ReceiverCreditAllocator,
    compute_grant,
)
from tent_credit._arith import U64_MAX
from tent_credit.errors import (
    ArithmeticOverflow,
    InvalidArgument,
    InvalidEntry,
    LocalProtocolError,
    RemoteProtocolError,
    TooManyRequests,
)

D = CreditResource.DATA_BYTES
Q = CreditResource.REQUEST_SLOTS
S = CreditResource.STAGING_SLOTS
C = CreditResource.CONSUMER_SLOTS
USER = AllocationClass.USER
STAGING = AllocationClass.STAGING_INTERNAL


def make_config(**overrides: Any) -> AllocatorConfig:
    fields: dict[str, Any] = {
        "capacity": {D: 1000, Q: 10},
        "staging_reserve": {D: 200, Q: 2},
        "control_slots": 2,
        "max_grant": {D: 400, Q: 4},
        "min_grant": {D: 100},
        "max_keys": 4,
        "retry_after_us": 250,
    }
    fields.update(overrides)
    return AllocatorConfig(**fields)


def make_allocator(**overrides: Any) -> ReceiverCreditAllocator:
    return ReceiverCreditAllocator(make_config(**overrides), SessionId(0xABC))


def snapshot(
    alloc: ReceiverCreditAllocator,
) -> tuple[AllocatorStatistics, tuple[KeyTotalsSnapshot | None, ...]]:
    """Everything observable: statistics plus every key+epoch record still known."""
    records: list[KeyTotalsSnapshot | None] = []
    for sender in range(4):
        for qos in range(2):
            try:
                current = alloc.current_epoch(sender, qos)
            except InvalidEntry:
                continue
            for epoch in range(1, current + 1):
                try:
                    records.append(alloc.key_totals(sender, qos, epoch))
                except InvalidEntry:
                    records.append(None)
    return (alloc.statistics(), tuple(records))


def assert_refused_unchanged(
    alloc: ReceiverCreditAllocator,
    error: type[Exception],
    call: Callable[[], object],
    *,
    violations: int = 0,
) -> None:
    """``call`` raises ``error`` and leaves everything as it was (bar the violation counter)."""
    before = snapshot(alloc)
    with pytest.raises(error):
        call()
    stats_before, records_before = before
    stats_after, records_after = snapshot(alloc)
    assert records_after == records_before
    # Only the protocol-violation counter may move (RemoteProtocolError is counted).
    assert stats_after == attrs.evolve(
        stats_before, protocol_violations=stats_before.protocol_violations + violations
    )


# -- configuration --


@pytest.mark.parametrize(
    "overrides",
    [
        {"capacity": {}},
        {"capacity": {D: -1}},
        {"capacity": {D: U64_MAX + 1}},
        {"capacity": {D: True}},
        {"capacity": {1: 10}},
        {"capacity": [(D, 10)]},
        {"staging_reserve": {D: 1001}},
        {"staging_reserve": {S: 1}},
        {"max_grant": {D: 400}},
        {"max_grant": {D: 0, Q: 4}},
        {"max_grant": {D: 400, Q: 4, C: 1}},
        {"min_grant": {D: 401}},
        {"min_grant": {S: 1}},
        {"control_slots": 0},
        {"max_keys": 0},
        {"retry_after_us": 0},
        {"retry_after_us": 1.5},
    ],
)
def test_invalid_config_is_rejected(overrides: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        make_config(**overrides)


def test_config_copies_its_mappings() -> None:
    capacity = {D: 1000, Q: 10}
    config = make_config(capacity=capacity)
    capacity[D] = 1
    assert config.capacity[D] == 1000
    with pytest.raises(TypeError):
        config.capacity[D] = 5  # type: ignore[index]


def test_allocator_rejects_wrong_constructor_arguments() -> None:
    with pytest.raises(InvalidArgument):
        ReceiverCreditAllocator(make_config(), 7)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        ReceiverCreditAllocator({}, SessionId(1))  # type: ignore[arg-type]


# -- the pure grant function --


def test_compute_grant_gives_min_of_demand_max_and_free() -> None:
    got = compute_grant({D: 300, Q: 10}, {D: 500, Q: 2}, {D: 400, Q: 4}, {})
    assert got == {D: 300, Q: 2}


def test_compute_grant_skips_resources_not_demanded() -> None:
    got = compute_grant({D: 300, Q: 10}, {D: 50, Q: 0}, {D: 400, Q: 4}, {})
    assert got == {D: 50}


def test_compute_grant_is_all_or_nothing_against_the_minimum() -> None:
    # REQUEST_SLOTS could be met, DATA_BYTES only below its minimum: nothing at all.
    got = compute_grant({D: 99, Q: 10}, {D: 500, Q: 2}, {D: 400, Q: 4}, {D: 100})
    assert got == {D: 0, Q: 0}


def test_compute_grant_meets_a_demand_smaller_than_the_minimum_exactly() -> None:
    assert compute_grant({D: 1000}, {D: 30}, {D: 400}, {D: 100}) == {D: 30}


def test_compute_grant_gives_nothing_when_a_demanded_resource_has_no_free_capacity() -> None:
    assert compute_grant({D: 1000, Q: 0}, {D: 10, Q: 1}, {D: 400, Q: 4}, {}) == {D: 0, Q: 0}
    assert compute_grant({D: -5}, {D: 10}, {D: 400}, {}) == {D: 0}


# -- epochs --


def test_first_open_is_epoch_one_and_reconnect_bumps_it() -> None:
    alloc = make_allocator()
    assert alloc.open_epoch(1, 0) == 1
    assert alloc.current_epoch(1, 0) == 1
    assert alloc.open_epoch(1, 0) == 2
    assert alloc.current_epoch(1, 0) == 2
    assert alloc.key_totals(1, 0, 1).state is EpochState.FENCING
    assert alloc.key_totals(1, 0, 2).state is EpochState.ACTIVE
    assert alloc.session == SessionId(0xABC)


def test_reconnect_keeps_the_old_epoch_outstanding_committed() -> None:
    alloc = make_allocator()
    alloc.open_epoch(1, 0)
    alloc.grant(1, 0, {D: 400})
    alloc.open_epoch(1, 0)
    old = alloc.key_totals(1, 0, 1)
    assert old.state is EpochState.FENCING
    assert old.outstanding[D] == 400
    assert alloc.outstanding(D) == 400


def test_new_key_beyond_max_keys_is_refused_and_changes_nothing() -> None:
    alloc = make_allocator(max_keys=2)
    alloc.open_epoch(1, 0)
    alloc.open_epoch(2, 0)
    assert_refused_unchanged(alloc, TooManyRequests, lambda: alloc.open_epoch(3, 0))
    # A reconnect of a known key is not a new key.
    assert alloc.open_epoch(2, 0) == 2


def test_a_key_keeps_its_allocation_class() -> None:
    alloc = make_allocator()
    alloc.open_epoch(1, 0, allocation_class=STAGING)
    assert_refused_unchanged(
        alloc, InvalidArgument, lambda: alloc.open_epoch(1, 0, allocation_class=USER)
    )
    assert alloc.key_totals(1, 0, 1).allocation_class is STAGING


@pytest.mark.parametrize(
    ("sender", "qos"), [(-1, 0), (U64_MAX + 1, 0), (1, -1), (1, 1 << 32), (True, 0), (1, "0")]
)
def test_malformed_ids_are_invalid_arguments(sender: Any, qos: Any) -> None:
    alloc = make_allocator()
    alloc.open_epoch(1, 0)
    assert_refused_unchanged(alloc, InvalidArgument, lambda: alloc.open_epoch(sender, qos))
    assert_refused_unchanged(alloc, InvalidArgument, lambda: alloc.grant(sender, qos, {D: 1}))


def test_open_epoch_rejects_an_unknown_allocation_class() -> None:
    alloc = make_allocator()
    assert_refused_unchanged(
        alloc,
        InvalidArgument,
        lambda: alloc.open_epoch(1, 0, allocation_class="user"),  # type: ignore[arg-type]
    )


def test_unknown_key_or_epoch_is_an_invalid_entry() -> None:
    alloc = make_allocator()
    with pytest.raises(InvalidEntry):
        alloc.current_epoch(9, 0)
    alloc.open_epoch(1, 0)
    assert_refused_unchanged(alloc, InvalidEntry, lambda: alloc.grant(9, 0, {D: 1}))
    assert_refused_unchanged(alloc, InvalidEntry, lambda: alloc.key_totals(1, 0, 2))
    assert_refused_unchanged(alloc, InvalidEntry, lambda: alloc.data_landed(1, 0, 2, {D: 1}))
    assert_refused_unchanged(alloc, InvalidArgument, lambda: alloc.key_totals(1, 0, 0))


def test_fence_is_idempotent_and_stops_grants() -> None:
    alloc = make_allocator()
    alloc.open_epoch(1, 0)
    alloc.grant(1, 0, {D: 100})
    alloc.fence(1, 0, 1)
    alloc.fence(1, 0, 1)
    assert alloc.key_totals(1, 0, 1).state is EpochState.FENCING
    assert_refused_unchanged(alloc, InvalidEntry, lambda: alloc.grant(1, 0, {D: 100}))


def test_fence_complete_requires_a_fencing_epoch() -> None:
    alloc = make_allocator()
    alloc.open_epoch(1, 0)
    alloc.grant(1, 0, {D: 300})
    assert_refused_unchanged(alloc, InvalidEntry, lambda: alloc.fence_complete(1, 0, 1))
    alloc.fence(1, 0, 1)
    alloc.data_landed(1, 0, 1, {D: 50})
    alloc.fence_complete(1, 0, 1)
    # FENCED (still holding landed data): completing again is refused.
    assert_refused_unchanged(alloc, InvalidEntry, lambda: alloc.fence_complete(1, 0, 1))


def test_fence_complete_reclaims_everything_that_never_landed() -> None:
    alloc = make_allocator()
    alloc.open_epoch(1, 0)
    alloc.grant(1, 0, {D: 400, Q: 4})
    alloc.data_landed(1, 0, 1, {D: 150, Q: 1})
    alloc.on_usage(1, 0, 1, consumed_totals={D: 150, Q: 1}, returned_totals={D: 50})
    alloc.fence(1, 0, 1)
    reclaimed = alloc.fence_complete(1, 0, 1)
    assert dict(reclaimed) == {D: 400 - 150 - 50, Q: 3}
    totals = alloc.key_totals(1, 0, 1)
    assert totals.state is EpochState.FENCED
    assert dict(totals.outstanding) == {D: 150, Q: 1}  # landed, not yet released
    assert alloc.outstanding(D) == 150
    stats = alloc.statistics()
    assert stats.reclaimed_by_fence[D] == 200
    assert stats.reclaimed_by_return[D] == 50


def test_fenced_epoch_is_forgotten_once_released() -> None:
    alloc = make_allocator()
    alloc.open_epoch(1, 0)
    alloc.grant(1, 0, {D: 400})
    alloc.data_landed(1, 0, 1, {D: 150})
    alloc.open_epoch(1, 0)  # reconnect fences epoch 1
    alloc.fence_complete(1, 0, 1)
    assert alloc.statistics().epochs_fenced == 1
    alloc.release(1, 0, 1, {D: 150})
    assert alloc.outstanding(D) == 0
    assert alloc.statistics().epochs_fenced == 0
    with pytest.raises(InvalidEntry):
        alloc.key_totals(1, 0, 1)


def test_fence_complete_without_landed_data_frees_everything_and_forgets_the_epoch() -> None:
    alloc = make_allocator()
    alloc.open_epoch(1, 0)
    alloc.grant(1, 0, {D: 400})
    alloc.fence(1, 0, 1)
    assert dict(alloc.fence_complete(1, 0, 1)) == {D: 400, Q: 0}
    assert alloc.free(D) == 1000
    with pytest.raises(InvalidEntry):
        alloc.key_totals(1, 0, 1)
    # The key's epoch counter is kept: its grants are refused until it reconnects.
    assert alloc.current_epoch(1, 0) == 1
    assert_refused_unchanged(alloc, InvalidEntry, lambda: alloc.grant(1, 0, {D: 1}))
    assert alloc.open_epoch(1, 0) == 2


def test_old_epoch_outstanding_is_not_reusable_until_fence_complete() -> None:
    alloc = make_allocator(staging_reserve={}, capacity={D: 400, Q: 10})
    alloc.open_epoch(1, 0)
    alloc.grant(1, 0, {D: 400})
    assert alloc.open_epoch(1, 0) == 2
    blocked = alloc.grant(1, 0, {D: 400})
    assert dict(blocked.granted_now) == {D: 0, Q: 0}
    assert blocked.blocked == (D,)
    assert blocked.retry_after_us == 250
    alloc.fence_complete(1, 0, 1)
    granted = alloc.grant(1, 0, {D: 400})
    assert granted.epoch == 2
    assert granted.granted_now[D] == 400


# -- grants --


def test_grant_is_cumulative_and_bounded_by_max_grant() -> None:
    alloc = make_allocator()
    alloc.open_epoch(1, 0)
    first = alloc.grant(1, 0, {D: 500, Q: 1})
    assert dict(first.granted_now) == {D: 400, Q: 1}
    assert dict(first.grant_totals) == {D: 400, Q: 1}
    assert first.retry_after_us == 250  # DATA_BYTES demand was not met in full
    assert first.blocked == ()
    second = alloc.grant(1, 0, {D: 100})
    assert dict(second.grant_totals) == {D: 500, Q: 1}
    assert second.retry_after_us == 0
    assert (second.sender_peer, second.qos_class, second.epoch) == (1, 0, 1)
    stats = alloc.statistics()
    assert stats.grants_issued == 2
    assert stats.demands_blocked == 0
    assert stats.outstanding[D] == 500


def test_empty_demand_is_a_refresh_that_grants_nothing() -> None:
    alloc = make_allocator()
    alloc.open_epoch(1, 0)
    alloc.grant(1, 0, {D: 100})
    refresh = alloc.grant(1, 0, {})
    assert dict(refresh.grant_totals) == {D: 100, Q: 0}
    assert dict(refresh.granted_now) == {D: 0, Q: 0}
    assert refresh.retry_after_us == 0
    assert alloc.grant(1, 0, {D: 0, Q: 0}).blocked == ()
    assert alloc.statistics().grants_issued == 1


def test_blocked_demand_grants_nothing_and_answers_retry_after() -> None:
    alloc = make_allocator()
    alloc.open_epoch(1, 0)
    alloc.open_epoch(2, 0)
    alloc.grant(1, 0, {D: 400})
    alloc.grant(1, 0, {D: 350})  # user limit is 1000 - 200 = 800
    before = alloc.statistics()
    decision = alloc.grant(2, 0, {D: 400, Q: 1})  # only 50 left for users, minimum is 100
    assert dict(decision.granted_now) == {D: 0, Q: 0}
    assert decision.blocked == (D,)
    assert decision.retry_after_us == 250
    after = alloc.statistics()
    assert after.outstanding == before.outstanding
    assert after.demands_blocked == before.demands_blocked + 1


def test_user_keys_can_never_take_the_staging_reserve() -> None:
    alloc = make_allocator(min_grant={})
    alloc.open_epoch(1, 0)
    alloc.open_epoch(2, 0)
    for _ in range(5):
        alloc.grant(1, 0, {D: 400, Q: 4})
        alloc.grant(2, 0, {D: 400, Q: 4})
    stats = alloc.statistics()
    assert stats.user_outstanding == {D: 800, Q: 8}
    assert alloc.free(D) == 200
    assert alloc.free_for(D, USER) == 0
    assert alloc.grant(2, 0, {D: 1}).blocked == (D,)


def test_staging_internal_keys_may_use_the_reserve() -> None:
    alloc = make_allocator(min_grant={})
    alloc.open_epoch(1, 0)
    alloc.open_epoch(5, 1, allocation_class=STAGING)
    alloc.grant(1, 0, {D: 400})
    alloc.grant(1, 0, {D: 400})
    staged = alloc.grant(5, 1, {D: 400, Q: 4})
    assert dict(staged.granted_now) == {D: 200, Q: 4}
    assert alloc.free(D) == 0
    stats = alloc.statistics()
    assert stats.outstanding[D] == 1000
    assert stats.user_outstanding[D] == 800


def test_staging_usage_shrinks_what_users_may_take() -> None:
    # Users are bounded by both their own limit and the total free capacity.
    alloc = make_allocator(min_grant={}, capacity={D: 1000, Q: 10}, max_grant={D: 1000, Q: 4})
    alloc.open_epoch(5, 1, allocation_class=STAGING)
    alloc.open_epoch(1, 0)
    alloc.grant(5, 1, {D: 900})
    assert alloc.free_for(D, USER) == 100
    assert alloc.grant(1, 0, {D: 500}).granted_now[D] == 100


def test_grant_for_an_unmodelled_or_malformed_resource_is_refused() -> None:
    alloc = make_allocator()
    alloc.open_epoch(1, 0)
    for demand in ({S: 1}, {D: -1}, {D: U64_MAX + 1}, {"DATA_BYTES": 1}, [(D, 1)]):
        assert_refused_unchanged(
            alloc,
            InvalidArgument,
            lambda demand=demand: alloc.grant(1, 0, demand),  # type: ignore[misc]
        )


def test_cumulative_grant_overflow_is_refused_and_changes_nothing() -> None:
    alloc = ReceiverCreditAllocator(
        AllocatorConfig(
            capacity={D: U64_MAX},
            control_slots=1,
            max_grant={D: U64_MAX},
            max_keys=1,
            retry_after_us=1,
        ),
        SessionId(1),
    )
    alloc.open_epoch(1, 0)
    alloc.grant(1, 0, {D: U64_MAX})
    alloc.data_landed(1, 0, 1, {D: U64_MAX})
    alloc.release(1, 0, 1, {D: U64_MAX})
    assert alloc.free(D) == U64_MAX
    assert_refused_unchanged(alloc, ArithmeticOverflow, lambda: alloc.grant(1, 0, {D: 1}))


def test_outstanding_and_free_reject_unmodelled_resources() -> None:
    alloc = make_allocator()
    with pytest.raises(InvalidArgument):
        alloc.outstanding(S)
    with pytest.raises(InvalidArgument):
        alloc.free(C)
    with pytest.raises(InvalidArgument):
        alloc.free_for(D, "user")  # type: ignore[arg-type]


# -- return --


def granted_key(alloc: ReceiverCreditAllocator, amounts: Mapping[CreditResource, int]) -> None:
    alloc.open_epoch(1, 0)
    alloc.grant(1, 0, amounts)


def test_returned_credit_is_reclaimed_once() -> None:
    alloc = make_allocator()
    granted_key(alloc, {D: 400, Q: 4})
    reclaimed = alloc.on_usage(1, 0, 1, consumed_totals={D: 100}, returned_totals={D: 150, Q: 1})
    assert dict(reclaimed) == {D: 150, Q: 1}
    assert alloc.outstanding(D) == 250
    # The same report again (duplicated on the control path) reclaims nothing.
    again = alloc.on_usage(1, 0, 1, consumed_totals={D: 100}, returned_totals={D: 150, Q: 1})
    assert dict(again) == {D: 0, Q: 0}
    assert alloc.outstanding(D) == 250
    totals = alloc.key_totals(1, 0, 1)
    assert dict(totals.reclaimed_by_return) == {D: 150, Q: 1}
    assert dict(totals.consumed_reported) == {D: 100, Q: 0}


def test_a_lower_returned_total_is_an_old_report_and_is_ignored() -> None:
    alloc = make_allocator()
    granted_key(alloc, {D: 400})
    alloc.on_usage(1, 0, 1, consumed_totals={D: 100}, returned_totals={D: 150})
    older = alloc.on_usage(1, 0, 1, consumed_totals={D: 50}, returned_totals={D: 100})
    assert dict(older) == {D: 0, Q: 0}
    totals = alloc.key_totals(1, 0, 1)
    assert totals.returned_reported[D] == 150
    assert totals.consumed_reported[D] == 100
    assert alloc.outstanding(D) == 250
    newer = alloc.on_usage(1, 0, 1, consumed_totals={}, returned_totals={D: 200})
    assert newer[D] == 50
    assert alloc.outstanding(D) == 200


def test_overdrawn_usage_report_is_a_counted_protocol_violation() -> None:
    alloc = make_allocator()
    granted_key(alloc, {D: 400})
    assert_refused_unchanged(
        alloc,
        RemoteProtocolError,
        lambda: alloc.on_usage(1, 0, 1, consumed_totals={D: 300}, returned_totals={D: 101}),
        violations=1,
    )
    # An omitted resource keeps its previous total, which still counts against the grant.
    alloc.on_usage(1, 0, 1, consumed_totals={D: 300}, returned_totals={})
    assert_refused_unchanged(
        alloc,
        RemoteProtocolError,
        lambda: alloc.on_usage(1, 0, 1, consumed_totals={}, returned_totals={D: 101}),
        violations=1,
    )


def test_returning_credit_that_landed_data_used_is_a_protocol_violation() -> None:
    alloc = make_allocator()
    granted_key(alloc, {D: 400})
    alloc.data_landed(1, 0, 1, {D: 300})
    assert_refused_unchanged(
        alloc,
        RemoteProtocolError,
        lambda: alloc.on_usage(1, 0, 1, consumed_totals={}, returned_totals={D: 101}),
        violations=1,
    )


def test_usage_is_accepted_while_fencing_and_refused_once_fenced() -> None:
    alloc = make_allocator()
    granted_key(alloc, {D: 400})
    alloc.data_landed(1, 0, 1, {D: 100})
    alloc.fence(1, 0, 1)
    assert alloc.on_usage(1, 0, 1, consumed_totals={D: 100}, returned_totals={D: 50})[D] == 50
    assert alloc.fence_complete(1, 0, 1)[D] == 250
    assert_refused_unchanged(
        alloc,
        InvalidEntry,
        lambda: alloc.on_usage(1, 0, 1, consumed_totals={D: 100}, returned_totals={D: 300}),
    )


def test_usage_with_malformed_totals_is_refused() -> None:
    alloc = make_allocator()
    granted_key(alloc, {D: 400})
    assert_refused_unchanged(
        alloc,
        InvalidArgument,
        lambda: alloc.on_usage(1, 0, 1, consumed_totals={S: 1}, returned_totals={}),
    )
    assert_refused_unchanged(
        alloc,
        InvalidArgument,
        lambda: alloc.on_usage(1, 0, 1, consumed_totals={}, returned_totals={D: -1}),
    )


# -- landing and release --


def test_release_frees_capacity_only_for_landed_data() -> None:
    alloc = make_allocator()
    granted_key(alloc, {D: 400, Q: 2})
    alloc.data_landed(1, 0, 1, {D: 100, Q: 1})
    assert_refused_unchanged(alloc, InvalidArgument, lambda: alloc.release(1, 0, 1, {D: 101}))
    alloc.release(1, 0, 1, {D: 60, Q: 1})
    alloc.release(1, 0, 1, {D: 40})
    assert_refused_unchanged(alloc, InvalidArgument, lambda: alloc.release(1, 0, 1, {D: 1}))
    assert alloc.outstanding(D) == 300
    assert alloc.outstanding(Q) == 1
    stats = alloc.statistics()
    assert stats.released == {D: 100, Q: 1}
    totals = alloc.key_totals(1, 0, 1)
    assert dict(totals.landed) == dict(totals.released) == {D: 100, Q: 1}


def test_landing_beyond_the_credit_is_a_counted_protocol_violation() -> None:
    alloc = make_allocator()
    granted_key(alloc, {D: 400})
    alloc.on_usage(1, 0, 1, consumed_totals={}, returned_totals={D: 100})
    alloc.data_landed(1, 0, 1, {D: 250})
    assert_refused_unchanged(
        alloc, RemoteProtocolError, lambda: alloc.data_landed(1, 0, 1, {D: 51}), violations=1
    )


def test_no_data_can_land_after_fence_complete() -> None:
    alloc = make_allocator()
    granted_key(alloc, {D: 400})
    alloc.data_landed(1, 0, 1, {D: 10})
    alloc.fence(1, 0, 1)
    alloc.data_landed(1, 0, 1, {D: 10})  # in-flight data of a fencing epoch still lands
    alloc.fence_complete(1, 0, 1)
    assert_refused_unchanged(alloc, InvalidEntry, lambda: alloc.data_landed(1, 0, 1, {D: 10}))
    assert alloc.outstanding(D) == 20


# -- the control budget --


def test_control_slots_do_not_depend_on_data_capacity() -> None:
    alloc = make_allocator(capacity={D: 0}, staging_reserve={}, max_grant={D: 1}, min_grant={})
    alloc.open_epoch(1, 0)
    assert alloc.grant(1, 0, {D: 1}).blocked == (D,)
    assert alloc.try_acquire_control()
    assert alloc.try_acquire_control()
    assert not alloc.try_acquire_control()
    assert alloc.statistics().control_slots_in_use == 2
    alloc.release_control()
    assert alloc.try_acquire_control()


def test_control_slots_survive_exhausted_data_capacity() -> None:
    alloc = make_allocator(min_grant={})
    alloc.open_epoch(5, 1, allocation_class=STAGING)
    for _ in range(3):
        alloc.grant(5, 1, {D: 400, Q: 4})
    assert alloc.free(D) == alloc.free(Q) == 0
    assert alloc.try_acquire_control()


def test_releasing_an_unheld_control_slot_is_a_local_protocol_error() -> None:
    alloc = make_allocator()
    assert_refused_unchanged(alloc, LocalProtocolError, alloc.release_control)


@pytest.mark.parametrize("ask", ["grant_exact", "top_up", "_top_up_own"])
def test_an_exact_grant_stays_within_the_key_cap_the_user_pool_and_max_grant(ask: str) -> None:
    # The grant-ahead loop computes its amounts within these bounds already; the allocator
    # checks them again (its last line before the commit), and so must a direct caller. The
    # loop's own entry (_top_up_own) skips only the argument's validation, never these.
    alloc = make_allocator(max_key_outstanding={Q: 3})
    for peer in (1, 2, 3):
        alloc.open_epoch(peer, 0)
    grant = getattr(alloc, ask)
    refused: object = None if ask == "grant_exact" else False

    def granted(peer: int) -> int:
        return alloc.key_totals(peer, 0, 1).granted.get(Q, 0)

    assert grant(1, 0, {Q: 4}) == refused  # past the key's cap of 3
    assert grant(1, 0, {Q: 3}) not in (None, False)
    assert grant(1, 0, {Q: 1}) == refused  # the cap is reached
    assert grant(2, 0, {Q: 3}) not in (None, False)
    assert grant(3, 0, {Q: 3}) == refused  # the USER pool (10 - 2 reserved) has 2 left
    assert grant(3, 0, {Q: 2}) not in (None, False)
    assert grant(3, 0, {D: 401}) == refused  # past max_grant
    assert (granted(1), granted(2), granted(3)) == (3, 3, 2)
    assert grant(3, 0, {}) == refused  # nothing asked: nothing granted


def test_top_up_refuses_what_is_not_a_grant_before_it_changes_anything() -> None:
    alloc = make_allocator()
    alloc.open_epoch(1, 0)
    before = snapshot(alloc)
    for amounts in ({S: 1}, {Q: -1}, {Q: U64_MAX + 1}, {Q: 1.0}, {"Q": 1}):
        with pytest.raises(InvalidArgument):
            alloc.top_up(1, 0, amounts)  # type: ignore[dict-item]
    with pytest.raises(InvalidEntry):
        alloc.top_up(9, 0, {Q: 1})  # no such key
    # the grant-ahead loop's own entry still refuses an amount that would lower a total
    with pytest.raises(InvalidArgument):
        alloc._top_up_own(1, 0, {Q: -1})
    assert snapshot(alloc) == before
