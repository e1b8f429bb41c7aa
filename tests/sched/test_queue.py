"""AdmissionQueue: every rule of docs/semantics.md#admission-queue as a focused test, failure paths
included.

Every failing call is checked to leave the queue exactly as it was: ``snapshot`` compares the
statistics, the stored order and the state of every owner the test knows about.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from tent_sched._mlu import DBL_MAX
from tent_sched._queue import (
    NO_DEADLINE_KEY,
    OWNER_TRANSITIONS,
    U64_MAX,
    AdmissionQueue,
    Blocked,
    EligibilityDecision,
    Eligible,
    OwnerKind,
    OwnerRequest,
    OwnerState,
    OwnerView,
    QueueLimits,
    Rejected,
    TaskStatus,
)
from tent_sched.errors import (
    ConfigError,
    ExceedsDispatchWindow,
    InvalidArgument,
    InvalidEntry,
    TooManyRequests,
)

LIMITS = QueueLimits(max_outstanding_owners=100, max_outstanding_bytes=100_000)
NOW = 1_000_000_000
BIG = 1 << 40  # a byte budget nothing in these tests reaches


def req(public_id: int, length: int = 10, **fields: Any) -> OwnerRequest:
    # These tests exercise the drop: their owners are RDMA-routed unless they say otherwise
    # (eligibility is opt-in, the default is False).
    fields.setdefault("degradation_eligible", True)
    return OwnerRequest(public_id=public_id, length=length, **fields)


def edf_queue(**options: Any) -> AdmissionQueue:
    return AdmissionQueue(LIMITS, deadline_aware=True, **options)


def snapshot(queue: AdmissionQueue, *owner_ids: int) -> tuple[object, ...]:
    return (
        queue.statistics(),
        queue.queued_ids(),
        queue.dispatching_bytes,
        tuple(queue.owner_state(owner_id) for owner_id in owner_ids),
    )


def populated(queue: AdmissionQueue) -> tuple[int, ...]:
    """Two queued owners and one dispatched owner in batch 1."""
    ids = queue.try_admit(1, 10, [req(1), req(2, deadline_ns=NOW + 50), req(3)])
    queue.pick_for_dispatch(1, BIG, now_ns=NOW)
    return ids


def pick_all(queue: AdmissionQueue, **options: Any) -> tuple[int, ...]:
    result = queue.pick_for_dispatch(U64_MAX, BIG, now_ns=options.pop("now_ns", NOW), **options)
    return tuple(p.owner.owner_id for p in result.picked)


# --------------------------------------------------------------------------- construction


def test_limits_reject_a_reserve_above_its_maximum() -> None:
    with pytest.raises(ConfigError, match="staging_owner_reserve"):
        QueueLimits(max_outstanding_owners=4, max_outstanding_bytes=10, staging_owner_reserve=5)
    with pytest.raises(ConfigError, match="staging_byte_reserve"):
        QueueLimits(max_outstanding_owners=4, max_outstanding_bytes=10, staging_byte_reserve=11)
    limits = QueueLimits(
        max_outstanding_owners=4,
        max_outstanding_bytes=10,
        staging_owner_reserve=4,
        staging_byte_reserve=10,
    )
    assert limits.staging_owner_reserve == 4


def test_zero_maxima_make_a_queue_that_admits_nothing() -> None:
    # accepted, as in the reference: every admit it cannot hold is TooManyRequests
    queue = AdmissionQueue(QueueLimits(max_outstanding_owners=0, max_outstanding_bytes=10))
    with pytest.raises(TooManyRequests):
        queue.try_admit(1, 1, [req(1)])
    assert queue.statistics().outstanding_owners == 0


@pytest.mark.parametrize(
    "fields",
    [
        {"max_outstanding_owners": -1, "max_outstanding_bytes": 10},
        {"max_outstanding_owners": True, "max_outstanding_bytes": 10},
        {"max_outstanding_owners": 1, "max_outstanding_bytes": -1},
        {"max_outstanding_owners": 1, "max_outstanding_bytes": 1 << 64},
        {"max_outstanding_owners": 1.0, "max_outstanding_bytes": 10},
    ],
)
def test_limits_reject_invalid_values(fields: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        QueueLimits(**fields)


@pytest.mark.parametrize(
    ("theta", "dropped"),
    [(0.0, False), (0, False), (1.0, True), (1, True), (1.2, False), (5.0, False)],
)
def test_threshold_zero_or_at_least_one_is_accepted_and_applied(
    theta: float, dropped: bool
) -> None:
    # An owner whose MLU is exactly 1.0: θ = 0 disables the drop, θ ≤ 1.0 drops it (>=).
    queue = AdmissionQueue(LIMITS, deadline_aware=True, mlu_local_threshold=theta)
    (owner,) = queue.try_admit(
        1, 10, [req(1, 1000, deadline_ns=NOW + 1000, degradation_eligible=True)]
    )
    result = queue.pick_for_dispatch(10, BIG, now_ns=NOW, bandwidth_bps=BW)
    assert result.dropped == ((owner,) if dropped else ())
    assert len(result.picked) == (0 if dropped else 1)


@pytest.mark.parametrize("theta", [0.5, 0.999, 1e-9])
def test_aggressive_threshold_is_accepted_and_warned_unless_acknowledged(
    theta: float, caplog: pytest.LogCaptureFixture
) -> None:
    # Deadline Scheduling "Known Limits": below 1.0 is accepted (and cancels requests the
    # predictor expects to succeed); the warning says so, the flag acknowledges it
    with caplog.at_level(logging.WARNING, logger="tent_sched"):
        AdmissionQueue(LIMITS, mlu_local_threshold=theta)
    assert f"mlu_local_threshold {theta} < 1.0" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tent_sched"):
        AdmissionQueue(LIMITS, mlu_local_threshold=theta, allow_aggressive_threshold=True)
    assert caplog.text == ""


def test_aggressive_threshold_drops_what_the_predictor_expects_to_make_it() -> None:
    # MLU 0.5: expected to make its window with time to spare, dropped at θ 0.4 and kept at 1.0
    for theta, dropped in ((0.4, True), (1.0, False)):
        queue = AdmissionQueue(LIMITS, deadline_aware=True, mlu_local_threshold=theta)
        (owner,) = queue.try_admit(
            1, 1, [req(1, 1000, deadline_ns=NOW + 2000, degradation_eligible=True)]
        )
        result = queue.pick_for_dispatch(10, BIG, now_ns=NOW, bandwidth_bps=BW)
        assert result.dropped == ((owner,) if dropped else ())


def test_a_tiny_threshold_never_drops_an_owner_without_a_deadline() -> None:
    queue = AdmissionQueue(LIMITS, deadline_aware=True, mlu_local_threshold=1e-9)
    (owner,) = queue.try_admit(1, 1, [req(1, 1000, degradation_eligible=True)])
    result = queue.pick_for_dispatch(10, BIG, now_ns=NOW, bandwidth_bps=BW)
    assert result.dropped == () and [p.owner.owner_id for p in result.picked] == [owner]


@pytest.mark.parametrize("theta", [-0.1, -2.0, -1e300])
def test_a_negative_threshold_turns_the_drop_off(theta: float) -> None:
    # "mlu_local_threshold (θ_local), when positive [...] turns on the drop"
    queue = AdmissionQueue(LIMITS, deadline_aware=True, mlu_local_threshold=theta)
    (owner,) = queue.try_admit(1, 1, [req(1, 1000, deadline_ns=NOW + 1, degradation_eligible=True)])
    result = queue.pick_for_dispatch(10, BIG, now_ns=NOW, bandwidth_bps=BW)
    assert result.dropped == () and [p.owner.owner_id for p in result.picked] == [owner]


@pytest.mark.parametrize("theta", [math.nan, math.inf, -math.inf, True, "1.2", None])
def test_invalid_threshold_is_a_config_error_even_with_the_flag(theta: Any) -> None:
    with pytest.raises(ConfigError, match="mlu_local_threshold"):
        AdmissionQueue(LIMITS, mlu_local_threshold=theta, allow_aggressive_threshold=True)


@pytest.mark.parametrize(
    "options",
    [
        {"max_dispatch_bytes": 0},
        {"max_dispatch_bytes": -1},
        {"max_dispatch_bytes": True},
        {"promotion_slack_ns": -1},
        {"promotion_slack_ns": 1.5},
        {"deadline_aware": 1},
        {"allow_aggressive_threshold": "yes"},
    ],
)
def test_invalid_queue_options_are_config_errors(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        AdmissionQueue(LIMITS, **options)


def test_limits_must_be_a_queue_limits_value() -> None:
    with pytest.raises(ConfigError):
        AdmissionQueue({"max_outstanding_owners": 1})  # type: ignore[arg-type]


# --------------------------------------------------------------------------- owner requests


@pytest.mark.parametrize(
    "fields",
    [
        {"public_id": -1, "length": 1},
        {"public_id": 1 << 64, "length": 1},
        {"public_id": 1, "length": 0},
        {"public_id": 1, "length": -5},
        {"public_id": 1, "length": 1 << 64},
        {"public_id": 1, "length": True},
        {"public_id": 1, "length": 1, "kind": "user"},
        {"public_id": 1, "length": 1, "deadline_ns": -1},
        {"public_id": 1, "length": 1, "degradation_eligible": 1},
        {"public_id": 1, "length": 1, "derived_ids": [2]},
        {"public_id": 1, "length": 1, "derived_ids": (-1,)},
        {"public_id": 1, "length": 1, "priority": 1.0},
        {"public_id": 1, "length": 1, "gate_key": ["not", "hashable"]},
    ],
)
def test_owner_request_rejects_invalid_values(fields: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        OwnerRequest(**fields)


def test_public_task_id_zero_is_a_task_id_like_any_other() -> None:
    # the reference numbers a batch's tasks from 0; the queue's owner ids still start at 1
    queue = AdmissionQueue(LIMITS)
    assert queue.try_admit(1, 3, [req(0, derived_ids=(5,)), req(1)]) == (1, 2)
    assert queue.owner_id_of(1, 0) == queue.owner_id_of(1, 5) == 1
    assert queue.status(1, 0) is TaskStatus.PENDING
    with pytest.raises(InvalidEntry):
        queue.try_admit(1, 3, [req(0)])  # still mapped: the same id of the same batch


# --------------------------------------------------------------------------- try_admit


def test_owner_ids_start_at_one_and_are_monotonic() -> None:
    queue = AdmissionQueue(LIMITS)
    assert queue.try_admit(1, 10, [req(1), req(2)]) == (1, 2)
    assert queue.try_admit(2, 10, [req(1)]) == (3,)


def test_owner_ids_are_never_reused_after_retire() -> None:
    queue = AdmissionQueue(LIMITS)
    (first,) = queue.try_admit(1, 10, [req(1)])
    queue.cancel(first)
    queue.retire_batch(1)
    assert queue.try_admit(1, 10, [req(1)]) == (2,)


@pytest.mark.parametrize("token", [0, -1, 1 << 64, True, 1.0])
def test_invalid_batch_token_is_invalid_argument_before_anything_else(token: Any) -> None:
    queue = AdmissionQueue(LIMITS)
    ids = populated(queue)
    before = snapshot(queue, *ids)
    with pytest.raises(InvalidArgument):
        queue.try_admit(token, 10, [])  # before the empty-submit no-op
    with pytest.raises(InvalidArgument):
        queue.try_admit(token, 10, [req(9)])
    assert snapshot(queue, *ids) == before


def test_empty_submit_is_a_no_op() -> None:
    queue = AdmissionQueue(LIMITS)
    ids = populated(queue)
    before = snapshot(queue, *ids)
    assert queue.try_admit(7, 0, []) == ()
    assert snapshot(queue, *ids) == before
    assert queue.try_admit(7, 10, [req(1)]) == (4,)


def test_non_owner_request_is_invalid_argument() -> None:
    queue = AdmissionQueue(LIMITS)
    with pytest.raises(InvalidArgument):
        queue.try_admit(1, 10, [req(1), {"public_id": 2, "length": 1}])  # type: ignore[list-item]
    assert queue.queued_ids() == ()


@pytest.mark.parametrize(
    "owners",
    [
        [req(1), req(1)],
        [req(1), req(2, derived_ids=(1,))],
        [req(1, derived_ids=(1,))],
        [req(1, derived_ids=(5, 5))],
        [req(1, derived_ids=(5,)), req(2, derived_ids=(5,))],
    ],
)
def test_duplicate_public_id_inside_a_submit_is_invalid_argument(
    owners: list[OwnerRequest],
) -> None:
    queue = AdmissionQueue(LIMITS)
    ids = populated(queue)
    before = snapshot(queue, *ids)
    with pytest.raises(InvalidArgument, match="twice"):
        queue.try_admit(2, 100, owners)
    assert snapshot(queue, *ids) == before


@pytest.mark.parametrize("error", [InvalidArgument, TooManyRequests, ExceedsDispatchWindow])
def test_length_above_max_dispatch_bytes_is_refused_at_submit(error: type) -> None:
    # IA (no retry can dispatch it) and also TMR, the reference's answer: caught either way
    queue = AdmissionQueue(LIMITS, max_dispatch_bytes=64)
    with pytest.raises(error, match="max_dispatch_bytes"):
        queue.try_admit(1, 10, [req(1, 64), req(2, 65)])
    assert queue.statistics().admitted_total == 0
    assert queue.try_admit(1, 10, [req(1, 64)]) == (1,)


def test_u64_overflow_of_the_charge_is_invalid_argument_before_slots_and_capacity() -> None:
    queue = AdmissionQueue(QueueLimits(max_outstanding_owners=10, max_outstanding_bytes=U64_MAX))
    (held,) = queue.try_admit(1, 10, [req(1, U64_MAX - 5)])
    before = snapshot(queue, held)
    with pytest.raises(InvalidArgument, match="overflow"):
        queue.try_admit(2, 0, [req(1, 6)])  # slots (0) and capacity would fail too
    with pytest.raises(InvalidArgument, match="overflow"):
        queue.try_admit(3, 0, [req(1, U64_MAX), req(2, U64_MAX)])
    assert snapshot(queue, held) == before
    with pytest.raises(TooManyRequests):  # exactly u64 max: no overflow, reaches the slots
        queue.try_admit(2, 0, [req(1, 5)])


def test_public_ids_beyond_batch_slots_left_is_too_many_requests() -> None:
    queue = AdmissionQueue(LIMITS)
    ids = populated(queue)
    before = snapshot(queue, *ids)
    owners = [req(10, derived_ids=(11, 12))]  # three public ids
    with pytest.raises(TooManyRequests, match="batch slots"):
        queue.try_admit(2, 2, owners)
    assert snapshot(queue, *ids) == before
    assert queue.try_admit(2, 3, owners) == (4,)


def test_slot_check_comes_before_the_mapped_id_check() -> None:
    queue = AdmissionQueue(LIMITS)
    queue.try_admit(1, 10, [req(1)])
    with pytest.raises(TooManyRequests):
        queue.try_admit(1, 0, [req(1)])


@pytest.mark.parametrize("owner", [req(1), req(9, derived_ids=(2,)), req(3)])
def test_already_mapped_public_id_is_invalid_entry(owner: OwnerRequest) -> None:
    queue = AdmissionQueue(LIMITS)
    queue.try_admit(1, 10, [req(1, derived_ids=(2,)), req(3)])
    before = snapshot(queue, 1, 2)
    with pytest.raises(InvalidEntry, match="already mapped"):
        queue.try_admit(1, 10, [req(20), owner])
    assert snapshot(queue, 1, 2) == before
    # The same public id under another token is a different task.
    assert queue.try_admit(2, 10, [owner]) == (3,)


def test_mapped_id_check_comes_before_capacity() -> None:
    queue = AdmissionQueue(QueueLimits(max_outstanding_owners=1, max_outstanding_bytes=100))
    queue.try_admit(1, 10, [req(1)])
    with pytest.raises(InvalidEntry):
        queue.try_admit(1, 10, [req(1)])


def test_owner_capacity_is_inclusive() -> None:
    queue = AdmissionQueue(QueueLimits(max_outstanding_owners=3, max_outstanding_bytes=1000))
    ids = queue.try_admit(1, 10, [req(1), req(2), req(3)])
    before = snapshot(queue, *ids)
    with pytest.raises(TooManyRequests, match="max_outstanding_owners"):
        queue.try_admit(2, 10, [req(1)])
    assert snapshot(queue, *ids) == before


def test_byte_capacity_is_inclusive() -> None:
    queue = AdmissionQueue(QueueLimits(max_outstanding_owners=10, max_outstanding_bytes=100))
    ids = queue.try_admit(1, 10, [req(1, 60), req(2, 40)])
    before = snapshot(queue, *ids)
    with pytest.raises(TooManyRequests, match="max_outstanding_bytes"):
        queue.try_admit(2, 10, [req(1, 1)])
    assert snapshot(queue, *ids) == before


def test_a_submit_is_admitted_all_or_nothing() -> None:
    queue = AdmissionQueue(QueueLimits(max_outstanding_owners=10, max_outstanding_bytes=100))
    with pytest.raises(TooManyRequests):
        queue.try_admit(1, 10, [req(1, 60), req(2, 41)])
    assert queue.statistics().outstanding_owners == 0
    assert queue.try_admit(1, 10, [req(1, 60), req(2, 40)]) == (1, 2)


RESERVED = QueueLimits(
    max_outstanding_owners=4,
    max_outstanding_bytes=100,
    staging_owner_reserve=1,
    staging_byte_reserve=30,
)


def test_user_owners_see_the_owner_limit_minus_the_reserve() -> None:
    queue = AdmissionQueue(RESERVED)
    ids = queue.try_admit(1, 10, [req(1, 1), req(2, 1), req(3, 1)])
    before = snapshot(queue, *ids)
    with pytest.raises(TooManyRequests, match="user owners"):
        queue.try_admit(2, 10, [req(1, 1)])
    assert snapshot(queue, *ids) == before
    staging = req(1, 1, kind=OwnerKind.STAGING_INTERNAL)
    assert queue.try_admit(2, 10, [staging]) == (4,)
    with pytest.raises(TooManyRequests, match="max_outstanding_owners"):
        queue.try_admit(3, 10, [req(1, 1, kind=OwnerKind.STAGING_INTERNAL)])


def test_user_bytes_see_the_byte_limit_minus_the_reserve() -> None:
    queue = AdmissionQueue(RESERVED)
    ids = queue.try_admit(1, 10, [req(1, 70)])
    before = snapshot(queue, *ids)
    with pytest.raises(TooManyRequests, match="user bytes"):
        queue.try_admit(2, 10, [req(1, 1)])
    assert snapshot(queue, *ids) == before
    assert queue.try_admit(2, 10, [req(1, 30, kind=OwnerKind.STAGING_INTERNAL)]) == (2,)
    with pytest.raises(TooManyRequests, match="max_outstanding_bytes"):
        queue.try_admit(3, 10, [req(1, 1, kind=OwnerKind.STAGING_INTERNAL)])


def test_staging_owners_are_bound_only_by_the_totals() -> None:
    queue = AdmissionQueue(RESERVED)
    staging = [req(i, 25, kind=OwnerKind.STAGING_INTERNAL) for i in range(1, 5)]
    assert queue.try_admit(1, 10, staging) == (1, 2, 3, 4)
    stats = queue.statistics()
    assert (stats.outstanding_owners, stats.outstanding_bytes) == (4, 100)
    assert (stats.outstanding_user_owners, stats.outstanding_user_bytes) == (0, 0)


# --------------------------------------------------------------------------- order


def test_fifo_when_not_deadline_aware_even_with_deadlines() -> None:
    queue = AdmissionQueue(LIMITS)
    ids = queue.try_admit(1, 10, [req(1, deadline_ns=30), req(2, deadline_ns=10), req(3)])
    assert queue.queued_ids() == ids
    assert pick_all(queue) == ids


def test_edf_order_with_fifo_ties_and_no_deadline_owners_last() -> None:
    queue = edf_queue()
    a, b, c, d, e, f = queue.try_admit(
        1,
        10,
        [
            req(1),
            req(2, deadline_ns=300),
            req(3, deadline_ns=100),
            req(4, deadline_ns=300),
            req(5),
            req(6, deadline_ns=200),
        ],
    )
    assert queue.queued_ids() == (c, f, b, d, a, e)
    (g,) = queue.try_admit(2, 10, [req(1, deadline_ns=300)])
    assert queue.queued_ids() == (c, f, b, d, g, a, e)
    assert pick_all(queue) == (c, f, b, d, g, a, e)


def test_deadline_at_u64_max_sorts_fifo_among_no_deadline_owners() -> None:
    queue = edf_queue()
    a, b, c = queue.try_admit(1, 10, [req(1), req(2, deadline_ns=NO_DEADLINE_KEY), req(3)])
    assert queue.queued_ids() == (a, b, c)


# --------------------------------------------------------------------------- pick: budget


@pytest.mark.parametrize(("max_owners", "max_bytes"), [(0, BIG), (5, 0), (0, 0)])
def test_zero_budget_returns_empty_before_promotion_drop_or_eligibility(
    max_owners: int, max_bytes: int
) -> None:
    queue = edf_queue(mlu_local_threshold=1.0, promotion_slack_ns=1000)
    ids = queue.try_admit(1, 10, [req(1, deadline_ns=NOW - 1), req(2, deadline_ns=NOW + 5)])
    before = snapshot(queue, *ids)
    calls: list[int] = []

    def gate(owner: OwnerView, now_ns: int) -> EligibilityDecision:
        calls.append(owner.owner_id)
        return Eligible(None)

    result = queue.pick_for_dispatch(
        max_owners, max_bytes, now_ns=NOW, bandwidth_bps=1e9, eligibility=gate
    )
    assert (result.picked, result.dropped, result.blocked, result.rejected) == ((), (), (), ())
    assert calls == []
    assert snapshot(queue, *ids) == before


def test_pick_stops_at_max_owners() -> None:
    queue = AdmissionQueue(LIMITS)
    a, b, c = queue.try_admit(1, 10, [req(1), req(2), req(3)])
    result = queue.pick_for_dispatch(2, BIG, now_ns=NOW)
    assert [p.owner.owner_id for p in result.picked] == [a, b]
    assert queue.queued_ids() == (c,)
    assert queue.owner_state(a) == (OwnerState.DISPATCHING, TaskStatus.PENDING)


def test_byte_window_stops_at_the_head_of_line() -> None:
    queue = AdmissionQueue(LIMITS)
    a, b, c = queue.try_admit(1, 10, [req(1, 40), req(2, 70), req(3, 5)])
    result = queue.pick_for_dispatch(10, 100, now_ns=NOW)
    # b does not fit the 60 bytes left; c would, but nothing passes the head of line.
    assert [p.owner.owner_id for p in result.picked] == [a]
    assert queue.queued_ids() == (b, c)


def test_an_owner_exactly_filling_the_window_is_dispatched() -> None:
    queue = AdmissionQueue(LIMITS)
    a, b = queue.try_admit(1, 10, [req(1, 40), req(2, 60)])
    assert pick_all(queue) == (a, b)
    queue2 = AdmissionQueue(LIMITS)
    ids = queue2.try_admit(1, 10, [req(1, 40), req(2, 60)])
    result = queue2.pick_for_dispatch(10, 100, now_ns=NOW)
    assert tuple(p.owner.owner_id for p in result.picked) == ids


def test_dispatching_bytes_counts_only_degradation_eligible_owners() -> None:
    queue = AdmissionQueue(LIMITS)
    queue.try_admit(1, 10, [req(1, 40), req(2, 70, degradation_eligible=False)])
    pick_all(queue)
    assert queue.dispatching_bytes == 40
    stats = queue.statistics()
    assert (stats.dispatching_owners, stats.queued_owners, stats.dispatched_total) == (2, 0, 2)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_owners": -1, "max_bytes": 1, "now_ns": 0},
        {"max_owners": 1, "max_bytes": True, "now_ns": 0},
        {"max_owners": 1, "max_bytes": 1, "now_ns": -1},
        {"max_owners": 1, "max_bytes": 1, "now_ns": 0, "bandwidth_bps": math.nan},
        {"max_owners": 1, "max_bytes": 1, "now_ns": 0, "bandwidth_bps": "fast"},
        {"max_owners": 1, "max_bytes": 1, "now_ns": 0, "bandwidth_bps": True},
    ],
)
def test_invalid_pick_arguments_are_invalid_argument(kwargs: dict[str, Any]) -> None:
    queue = AdmissionQueue(LIMITS)
    ids = populated(queue)
    before = snapshot(queue, *ids)
    max_owners = kwargs.pop("max_owners")
    max_bytes = kwargs.pop("max_bytes")
    with pytest.raises(InvalidArgument):
        queue.pick_for_dispatch(max_owners, max_bytes, **kwargs)
    assert snapshot(queue, *ids) == before


def test_canceled_leftovers_are_skipped() -> None:
    queue = edf_queue()
    a, b, c = queue.try_admit(1, 10, [req(1, deadline_ns=5), req(2, deadline_ns=6), req(3)])
    queue.cancel(b)
    assert queue.queued_ids() == (a, c)
    assert pick_all(queue) == (a, c)


# --------------------------------------------------------------------------- pick: drop

BW = 1e9  # 1 GB/s: length L bytes with a window of L ns gives MLU exactly 1.0


def test_drop_cancels_at_or_above_theta_and_keeps_scanning() -> None:
    queue = edf_queue(mlu_local_threshold=1.0)
    exact, below, later = queue.try_admit(
        1,
        10,
        [
            req(1, 1000, deadline_ns=NOW + 1000),  # MLU exactly 1.0: dropped (>=)
            req(2, 1000, deadline_ns=NOW + 2001),  # MLU < 1.0 with nothing ahead
            req(3, 10, deadline_ns=NOW + 10**9),
        ],
    )
    result = queue.pick_for_dispatch(10, BIG, now_ns=NOW, bandwidth_bps=BW)
    assert result.dropped == (exact,)
    assert [p.owner.owner_id for p in result.picked] == [below, later]
    assert queue.owner_state(exact) == (OwnerState.TERMINAL, TaskStatus.CANCELED)
    assert queue.status(1, 1) is TaskStatus.CANCELED


def test_drop_sees_bytes_dispatched_earlier_in_the_same_pick() -> None:
    queue = edf_queue(mlu_local_threshold=1.0)
    first, second = queue.try_admit(
        1, 10, [req(1, 600, deadline_ns=NOW + 1000), req(2, 600, deadline_ns=NOW + 1100)]
    )
    # Alone, second predicts 600/1100 < 1; behind first's 600 bytes it predicts 1200/1100.
    result = queue.pick_for_dispatch(10, BIG, now_ns=NOW, bandwidth_bps=BW)
    assert [p.owner.owner_id for p in result.picked] == [first]
    assert result.dropped == (second,)


def test_drop_sees_bytes_already_dispatching() -> None:
    queue = edf_queue(mlu_local_threshold=1.0)
    queue.try_admit(1, 10, [req(1, 500)])
    pick_all(queue)
    (late,) = queue.try_admit(2, 10, [req(1, 600, deadline_ns=NOW + 1000)])
    assert queue.pick_for_dispatch(10, BIG, now_ns=NOW, bandwidth_bps=BW).dropped == (late,)


def test_non_eligible_bytes_do_not_count_ahead() -> None:
    queue = edf_queue(mlu_local_threshold=1.0)
    tcp, rdma = queue.try_admit(
        1,
        10,
        [
            req(1, 900, deadline_ns=NOW + 1000, degradation_eligible=False),
            req(2, 600, deadline_ns=NOW + 1100),
        ],
    )
    result = queue.pick_for_dispatch(10, BIG, now_ns=NOW, bandwidth_bps=BW)
    assert [p.owner.owner_id for p in result.picked] == [tcp, rdma]


def test_drop_check_runs_before_the_byte_check() -> None:
    queue = edf_queue(mlu_local_threshold=1.0)
    huge, small = queue.try_admit(
        1, 10, [req(1, 5000, deadline_ns=NOW + 10), req(2, 10, deadline_ns=NOW + 10**9)]
    )
    # huge exceeds the 100-byte window but is infeasible: dropped, not a head-of-line stop.
    result = queue.pick_for_dispatch(10, 100, now_ns=NOW, bandwidth_bps=BW)
    assert result.dropped == (huge,)
    assert [p.owner.owner_id for p in result.picked] == [small]


def test_head_of_line_stop_protects_owners_behind_it_from_the_drop() -> None:
    queue = edf_queue(mlu_local_threshold=1.0)
    big, doomed = queue.try_admit(
        1, 10, [req(1, 500, deadline_ns=NOW + 10**9), req(2, 5000, deadline_ns=NOW + 10**9 + 1)]
    )
    before_doomed = queue.owner_state(doomed)
    result = queue.pick_for_dispatch(10, 100, now_ns=NOW, bandwidth_bps=BW)
    assert (result.picked, result.dropped) == ((), ())
    assert queue.owner_state(doomed) == before_doomed
    assert queue.queued_ids() == (big, doomed)


def test_past_due_eligible_owner_is_dropped_with_dbl_max() -> None:
    queue = edf_queue(mlu_local_threshold=1.2)
    (late,) = queue.try_admit(1, 10, [req(1, 1, deadline_ns=NOW)])
    seen: list[tuple[int, float]] = []
    queue.add_degradation_hook(lambda owner, mlu: seen.append((owner.owner_id, mlu)))
    queue.pick_for_dispatch(10, BIG, now_ns=NOW, bandwidth_bps=BW)
    assert seen == [(late, DBL_MAX)]


@pytest.mark.parametrize(
    ("options", "pick_options", "owner"),
    [
        ({"deadline_aware": False, "mlu_local_threshold": 1.0}, {"bandwidth_bps": BW}, {}),
        ({"deadline_aware": True, "mlu_local_threshold": 0.0}, {"bandwidth_bps": BW}, {}),
        ({"deadline_aware": True, "mlu_local_threshold": 1.0}, {}, {}),
        ({"deadline_aware": True, "mlu_local_threshold": 1.0}, {"bandwidth_bps": 0.0}, {}),
        ({"deadline_aware": True, "mlu_local_threshold": 1.0}, {"bandwidth_bps": -1.0}, {}),
        (
            {"deadline_aware": True, "mlu_local_threshold": 1.0},
            {"bandwidth_bps": BW},
            {"degradation_eligible": False},
        ),
    ],
    ids=["fifo", "theta-off", "no-provider", "zero-bw", "negative-bw", "not-eligible"],
)
def test_drop_is_off_unless_every_condition_holds(
    options: dict[str, Any], pick_options: dict[str, Any], owner: dict[str, Any]
) -> None:
    queue = AdmissionQueue(LIMITS, **options)
    (late,) = queue.try_admit(1, 10, [req(1, 10, deadline_ns=NOW - 1, **owner)])
    assert pick_all(queue, **pick_options) == (late,)


def test_owner_without_deadline_is_never_dropped() -> None:
    queue = edf_queue(mlu_local_threshold=1.0)
    queue.try_admit(1, 10, [req(1, 90_000)])
    pick_all(queue)
    (patient,) = queue.try_admit(2, 10, [req(1, 10_000)])
    assert pick_all(queue, bandwidth_bps=1.0) == (patient,)


def test_drop_releases_capacity_at_once() -> None:
    queue = AdmissionQueue(
        QueueLimits(max_outstanding_owners=1, max_outstanding_bytes=100),
        deadline_aware=True,
        mlu_local_threshold=1.0,
    )
    (doomed,) = queue.try_admit(1, 10, [req(1, 100, deadline_ns=NOW)])
    queue.pick_for_dispatch(10, BIG, now_ns=NOW, bandwidth_bps=BW)
    stats = queue.statistics()
    assert (stats.outstanding_owners, stats.outstanding_bytes, stats.dropped_total) == (0, 0, 1)
    assert queue.try_admit(2, 10, [req(1, 100)]) == (doomed + 1,)


def test_hooks_run_after_the_commit_in_drop_then_registration_order() -> None:
    queue = edf_queue(mlu_local_threshold=1.0)
    seen: list[tuple[str, int, OwnerState, int]] = []

    def hook(name: str) -> Callable[[OwnerView, float], None]:
        def record(owner: OwnerView, mlu: float) -> None:
            state, _status = queue.owner_state(owner.owner_id)
            seen.append((name, owner.owner_id, state, queue.statistics().dropped_total))
            assert mlu >= 1.0

        return record

    queue.add_degradation_hook(hook("first"))
    queue.add_degradation_hook(hook("second"))
    a, b = queue.try_admit(1, 10, [req(1, deadline_ns=NOW), req(2, deadline_ns=NOW + 1)])
    queue.pick_for_dispatch(10, BIG, now_ns=NOW + 1, bandwidth_bps=BW)
    terminal = OwnerState.TERMINAL
    assert seen == [
        ("first", a, terminal, 2),
        ("second", a, terminal, 2),
        ("first", b, terminal, 2),
        ("second", b, terminal, 2),
    ]


def test_a_hook_may_call_back_into_the_queue() -> None:
    queue = edf_queue(mlu_local_threshold=1.0)

    def resubmit(owner: OwnerView, _mlu: float) -> None:
        queue.try_admit(9, 10, [req(owner.public_id)])

    queue.add_degradation_hook(resubmit)
    (doomed,) = queue.try_admit(1, 10, [req(1, deadline_ns=NOW)])
    queue.pick_for_dispatch(10, BIG, now_ns=NOW, bandwidth_bps=BW)
    assert queue.queued_ids() == (doomed + 1,)


def test_unregister_stops_a_hook_and_is_idempotent() -> None:
    queue = edf_queue(mlu_local_threshold=1.0)
    calls: list[int] = []
    unregister = queue.add_degradation_hook(lambda owner, _mlu: calls.append(owner.owner_id))
    again = queue.add_degradation_hook(lambda owner, _mlu: calls.append(-owner.owner_id))
    unregister()
    unregister()
    (doomed,) = queue.try_admit(1, 10, [req(1, deadline_ns=NOW)])
    queue.pick_for_dispatch(10, BIG, now_ns=NOW, bandwidth_bps=BW)
    assert calls == [-doomed]
    again()


def test_non_callable_hook_is_invalid_argument() -> None:
    queue = AdmissionQueue(LIMITS)
    with pytest.raises(InvalidArgument):
        queue.add_degradation_hook(42)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- pick: promotion


def test_promotion_puts_owners_inside_the_slack_first_in_edf_order() -> None:
    queue = edf_queue(promotion_slack_ns=100)
    past, equal, urgent_a, urgent_b, edge, relaxed, none = queue.try_admit(
        1,
        10,
        [
            req(1, deadline_ns=NOW - 5),  # past due: not promoted
            req(2, deadline_ns=NOW),  # deadline == now counts as past: not promoted
            req(3, deadline_ns=NOW + 60),
            req(4, deadline_ns=NOW + 1),
            req(5, deadline_ns=NOW + 100),  # slack == promotion_slack_ns: not promoted
            req(6, deadline_ns=NOW + 500),
            req(7),
        ],
    )
    stored = (past, equal, urgent_b, urgent_a, edge, relaxed, none)
    assert queue.queued_ids() == stored
    assert pick_all(queue) == (urgent_b, urgent_a, past, equal, edge, relaxed, none)


def test_promotion_does_not_reorder_the_stored_queue() -> None:
    queue = edf_queue(promotion_slack_ns=100)
    past, urgent, other = queue.try_admit(
        1, 10, [req(1, deadline_ns=NOW - 5), req(2, deadline_ns=NOW + 50), req(3)]
    )
    result = queue.pick_for_dispatch(1, BIG, now_ns=NOW)
    assert [p.owner.owner_id for p in result.picked] == [urgent]
    assert queue.queued_ids() == (past, other)
    (later,) = queue.try_admit(2, 10, [req(1, deadline_ns=NOW - 1)])
    assert queue.queued_ids() == (past, later, other)


def test_promotion_is_inert_without_deadline_awareness() -> None:
    queue = AdmissionQueue(LIMITS, promotion_slack_ns=100)
    ids = queue.try_admit(1, 10, [req(1), req(2, deadline_ns=NOW + 50)])
    assert pick_all(queue) == ids


def test_promotion_then_head_of_line_stop_inside_the_promoted_group() -> None:
    queue = edf_queue(promotion_slack_ns=100)
    past, urgent_small, urgent_big, urgent_after = queue.try_admit(
        1,
        10,
        [
            req(1, 5, deadline_ns=NOW - 5),
            req(2, 5, deadline_ns=NOW + 10),
            req(3, 500, deadline_ns=NOW + 20),
            req(4, 5, deadline_ns=NOW + 30),
        ],
    )
    result = queue.pick_for_dispatch(10, 100, now_ns=NOW)
    assert [p.owner.owner_id for p in result.picked] == [urgent_small]
    assert queue.queued_ids() == (past, urgent_big, urgent_after)


def test_promotion_with_the_drop_drops_urgent_infeasible_owners() -> None:
    queue = edf_queue(promotion_slack_ns=10_000, mlu_local_threshold=1.0)
    past, doomed, fine = queue.try_admit(
        1,
        10,
        [
            req(1, 10, deadline_ns=NOW - 1),
            req(2, 5000, deadline_ns=NOW + 4000),
            req(3, 10, deadline_ns=NOW + 9000),
        ],
    )
    result = queue.pick_for_dispatch(10, BIG, now_ns=NOW, bandwidth_bps=BW)
    assert result.dropped == (doomed, past)
    assert [p.owner.owner_id for p in result.picked] == [fine]


# --------------------------------------------------------------------------- pick: eligibility


def scripted_gate(
    answers: dict[int, EligibilityDecision], calls: list[int]
) -> Callable[[OwnerView, int], EligibilityDecision]:
    def gate(owner: OwnerView, now_ns: int) -> EligibilityDecision:
        assert now_ns == NOW
        calls.append(owner.owner_id)
        return answers.get(owner.owner_id, Eligible(("token", owner.owner_id)))

    return gate


def test_eligible_owners_carry_their_token() -> None:
    queue = AdmissionQueue(LIMITS)
    a, b = queue.try_admit(1, 10, [req(1), req(2)])
    calls: list[int] = []
    result = queue.pick_for_dispatch(10, BIG, now_ns=NOW, eligibility=scripted_gate({}, calls))
    assert [(p.owner.owner_id, p.token) for p in result.picked] == [
        (a, ("token", a)),
        (b, ("token", b)),
    ]


def test_without_a_gate_tokens_are_none() -> None:
    queue = AdmissionQueue(LIMITS)
    queue.try_admit(1, 10, [req(1)])
    (picked,) = queue.pick_for_dispatch(10, BIG, now_ns=NOW).picked
    assert picked.token is None


def test_blocked_owner_stays_in_place_and_blocks_its_key_for_this_pick() -> None:
    queue = AdmissionQueue(LIMITS)
    a, b, c, d = queue.try_admit(
        1,
        10,
        [
            req(1, 40, gate_key="receiver-1"),
            req(2, 40, gate_key="receiver-2"),
            req(3, 40, gate_key="receiver-1"),
            req(4, 40, gate_key="receiver-2"),
        ],
    )
    calls: list[int] = []
    gate = scripted_gate({a: Blocked("no credit")}, calls)
    result = queue.pick_for_dispatch(10, 80, now_ns=NOW, eligibility=gate)
    assert calls == [a, b, d]  # c is skipped without asking: order within a key is kept
    assert [p.owner.owner_id for p in result.picked] == [b, d]  # blocked use no budget
    assert result.blocked == (a, c)
    assert queue.queued_ids() == (a, c)
    assert queue.statistics().blocked_total == 2
    # Next pick, the key is free again and the order within it holds.
    assert pick_all(queue, eligibility=scripted_gate({}, [])) == (a, c)


def test_owners_without_gate_key_do_not_block_each_other() -> None:
    queue = AdmissionQueue(LIMITS)
    a, b = queue.try_admit(1, 10, [req(1), req(2)])
    calls: list[int] = []
    result = queue.pick_for_dispatch(
        10, BIG, now_ns=NOW, eligibility=scripted_gate({a: Blocked(None)}, calls)
    )
    assert calls == [a, b]
    assert [p.owner.owner_id for p in result.picked] == [b]


def test_blocked_owner_keeps_its_place_before_later_inserts() -> None:
    queue = edf_queue()
    (blocked,) = queue.try_admit(1, 10, [req(1, deadline_ns=NOW + 10)])
    queue.pick_for_dispatch(10, BIG, now_ns=NOW, eligibility=scripted_gate({1: Blocked(0)}, []))
    late, early = queue.try_admit(
        2, 10, [req(1, deadline_ns=NOW + 20), req(2, deadline_ns=NOW + 5)]
    )
    assert queue.queued_ids() == (early, blocked, late)


@pytest.mark.parametrize("status", [TaskStatus.FAILED, TaskStatus.INVALID])
def test_rejected_owner_is_terminal_and_releases_capacity(status: TaskStatus) -> None:
    queue = AdmissionQueue(LIMITS)
    a, b = queue.try_admit(1, 10, [req(1, 10), req(2, 20)])
    gate = scripted_gate({a: Rejected(status)}, [])
    result = queue.pick_for_dispatch(10, 20, now_ns=NOW, eligibility=gate)
    assert result.rejected == (a,)
    assert [p.owner.owner_id for p in result.picked] == [b]  # rejected use no budget
    assert queue.owner_state(a) == (OwnerState.TERMINAL, status)
    stats = queue.statistics()
    assert (stats.outstanding_owners, stats.outstanding_bytes, stats.rejected_total) == (1, 20, 1)
    assert stats.dispatching_bytes == 20


def test_rejected_defaults_to_failed_and_refuses_non_terminal_status() -> None:
    assert Rejected().status is TaskStatus.FAILED
    with pytest.raises(InvalidArgument):
        Rejected(TaskStatus.PENDING)


def test_gate_answer_that_is_not_a_decision_leaves_the_queue_unchanged() -> None:
    queue = AdmissionQueue(LIMITS)
    ids = queue.try_admit(1, 10, [req(1), req(2)])
    before = snapshot(queue, *ids)

    def bad_gate(owner: OwnerView, now_ns: int) -> EligibilityDecision:
        return Eligible(1) if owner.owner_id == ids[0] else "yes"  # type: ignore[return-value]

    with pytest.raises(InvalidArgument, match="eligibility returned"):
        queue.pick_for_dispatch(10, BIG, now_ns=NOW, eligibility=bad_gate)
    assert snapshot(queue, *ids) == before


def test_gate_exception_propagates_and_leaves_the_queue_unchanged() -> None:
    queue = edf_queue(mlu_local_threshold=1.0)
    ids = queue.try_admit(1, 10, [req(1, deadline_ns=NOW), req(2), req(3)])

    def failing(owner: OwnerView, now_ns: int) -> EligibilityDecision:
        if owner.owner_id == ids[2]:
            raise RuntimeError("gate broke")
        return Eligible(None)

    before = snapshot(queue, *ids)
    with pytest.raises(RuntimeError, match="gate broke"):
        queue.pick_for_dispatch(10, BIG, now_ns=NOW, bandwidth_bps=BW, eligibility=failing)
    assert snapshot(queue, *ids) == before


def test_reentrant_call_from_a_gate_is_refused() -> None:
    queue = AdmissionQueue(LIMITS)
    ids = queue.try_admit(1, 10, [req(1), req(2)])

    def meddling(owner: OwnerView, now_ns: int) -> EligibilityDecision:
        queue.cancel(ids[1])
        return Eligible(None)

    before = snapshot(queue, *ids)
    with pytest.raises(InvalidArgument, match="eligibility callback"):
        queue.pick_for_dispatch(10, BIG, now_ns=NOW, eligibility=meddling)
    assert snapshot(queue, *ids) == before
    assert pick_all(queue) == ids  # the guard is released after the failed pick


# --------------------------------------------------------------------------- complete


def test_complete_releases_capacity_and_dispatching_bytes_whatever_the_status() -> None:
    queue = AdmissionQueue(LIMITS)
    a, b = queue.try_admit(1, 10, [req(1, 40), req(2, 25, degradation_eligible=False)])
    pick_all(queue)
    queue.complete(a, TaskStatus.FAILED)
    assert queue.dispatching_bytes == 0
    queue.complete(b, TaskStatus.COMPLETED)
    stats = queue.statistics()
    assert (stats.outstanding_owners, stats.outstanding_bytes, stats.dispatching_owners) == (
        0,
        0,
        0,
    )
    assert (stats.completions.failed, stats.completions.completed) == (1, 1)
    assert queue.status(1, 1) is TaskStatus.FAILED
    assert queue.status(1, 2) is TaskStatus.COMPLETED


@pytest.mark.parametrize(
    ("target", "status", "error"),
    [
        (0, TaskStatus.COMPLETED, InvalidArgument),
        (-1, TaskStatus.COMPLETED, InvalidArgument),
        ("running", TaskStatus.PENDING, InvalidArgument),
        ("running", "completed", InvalidArgument),
        (99, TaskStatus.COMPLETED, InvalidEntry),
        ("queued", TaskStatus.COMPLETED, InvalidEntry),
    ],
)
def test_complete_refusals_leave_the_queue_unchanged(
    target: Any, status: Any, error: type[Exception]
) -> None:
    queue = AdmissionQueue(LIMITS)
    running, queued = queue.try_admit(1, 10, [req(1), req(2)])
    queue.pick_for_dispatch(1, BIG, now_ns=NOW)
    owner_id = {"running": running, "queued": queued}.get(target, target)
    before = snapshot(queue, running, queued)
    with pytest.raises(error):
        queue.complete(owner_id, status)
    assert snapshot(queue, running, queued) == before


def test_completing_twice_is_invalid_entry() -> None:
    queue = AdmissionQueue(LIMITS)
    (owner,) = queue.try_admit(1, 10, [req(1)])
    pick_all(queue)
    queue.complete(owner, TaskStatus.TIMEOUT)
    before = snapshot(queue, owner)
    with pytest.raises(InvalidEntry, match="TERMINAL"):
        queue.complete(owner, TaskStatus.COMPLETED)
    assert snapshot(queue, owner) == before
    assert queue.statistics().completions.timeout == 1


# --------------------------------------------------------------------------- cancel


def test_cancel_queued_owner_releases_capacity_and_is_idempotent() -> None:
    queue = AdmissionQueue(LIMITS)
    a, b = queue.try_admit(1, 10, [req(1, 30), req(2, 20)])
    queue.cancel(a)
    assert queue.owner_state(a) == (OwnerState.TERMINAL, TaskStatus.CANCELED)
    assert queue.queued_ids() == (b,)
    before = snapshot(queue, a, b)
    queue.cancel(a)
    assert snapshot(queue, a, b) == before
    stats = queue.statistics()
    assert (stats.outstanding_bytes, stats.canceled_total, stats.queued_owners) == (20, 1, 1)


def test_cancel_of_a_dropped_owner_is_a_no_op() -> None:
    queue = edf_queue(mlu_local_threshold=1.0)
    (doomed,) = queue.try_admit(1, 10, [req(1, deadline_ns=NOW)])
    queue.pick_for_dispatch(10, BIG, now_ns=NOW, bandwidth_bps=BW)
    before = snapshot(queue, doomed)
    queue.cancel(doomed)
    assert snapshot(queue, doomed) == before


@pytest.mark.parametrize(
    ("target", "error"),
    [
        ("dispatching", InvalidEntry),
        ("completed", InvalidEntry),
        (0, InvalidArgument),
        (99, InvalidEntry),
    ],
)
def test_cancel_refusals_leave_the_queue_unchanged(target: Any, error: type[Exception]) -> None:
    queue = AdmissionQueue(LIMITS)
    done, running = queue.try_admit(1, 10, [req(1), req(2)])
    pick_all(queue)
    queue.complete(done, TaskStatus.COMPLETED)
    owner_id = {"dispatching": running, "completed": done}.get(target, target)
    before = snapshot(queue, done, running)
    with pytest.raises(error):
        queue.cancel(owner_id)
    assert snapshot(queue, done, running) == before


def test_many_cancels_keep_the_order_of_the_survivors() -> None:
    limits = QueueLimits(max_outstanding_owners=1000, max_outstanding_bytes=1000)
    queue = AdmissionQueue(limits, deadline_aware=True)
    ids = queue.try_admit(
        1, 1000, [req(i, 1, deadline_ns=NOW + (i * 7919) % 500) for i in range(1, 401)]
    )
    survivors = [owner_id for owner_id in queue.queued_ids() if owner_id % 5 == 0]
    for owner_id in ids:
        if owner_id % 5:
            queue.cancel(owner_id)
    assert queue.queued_ids() == tuple(survivors)
    assert pick_all(queue) == tuple(survivors)


# --------------------------------------------------------------------------- retire and status


def test_retire_refuses_while_an_owner_is_not_terminal_and_erases_nothing() -> None:
    queue = AdmissionQueue(LIMITS)
    a, b = queue.try_admit(1, 10, [req(1, derived_ids=(11,)), req(2)])
    queue.cancel(a)
    before = snapshot(queue, a, b)
    with pytest.raises(InvalidEntry, match="non-terminal"):
        queue.retire_batch(1)
    assert snapshot(queue, a, b) == before
    assert queue.status(1, 11) is TaskStatus.CANCELED


def test_retire_erases_records_and_frees_the_token() -> None:
    queue = AdmissionQueue(LIMITS)
    a, b = queue.try_admit(1, 10, [req(1, derived_ids=(11,)), req(2)])
    pick_all(queue)
    queue.complete(a, TaskStatus.COMPLETED)
    queue.complete(b, TaskStatus.COMPLETED)
    queue.retire_batch(1)
    for public_id in (1, 11, 2):
        with pytest.raises(InvalidEntry):
            queue.status(1, public_id)
    with pytest.raises(InvalidEntry):
        queue.owner(a)
    assert queue.try_admit(1, 10, [req(1, derived_ids=(11,))]) == (3,)


def test_retire_of_an_unknown_token_is_a_no_op_and_token_zero_is_refused() -> None:
    queue = AdmissionQueue(LIMITS)
    ids = populated(queue)
    before = snapshot(queue, *ids)
    queue.retire_batch(42)
    with pytest.raises(InvalidArgument):
        queue.retire_batch(0)
    assert snapshot(queue, *ids) == before


def test_retire_after_cancel_leftovers_keeps_the_queue_consistent() -> None:
    queue = edf_queue()
    gone, kept = queue.try_admit(1, 10, [req(1, deadline_ns=NOW + 5)]) + queue.try_admit(
        2, 10, [req(1, deadline_ns=NOW + 9)]
    )
    queue.cancel(gone)
    queue.retire_batch(1)
    assert queue.queued_ids() == (kept,)
    assert pick_all(queue) == (kept,)


def test_public_status_reads_pending_until_terminal_and_derived_ids_resolve() -> None:
    queue = AdmissionQueue(LIMITS)
    owner, other = queue.try_admit(1, 10, [req(1, derived_ids=(7, 8)), req(2)])
    assert queue.owner_id_of(1, 8) == owner
    assert queue.status(1, 7) is TaskStatus.PENDING
    queue.pick_for_dispatch(1, BIG, now_ns=NOW)
    assert queue.owner_state(owner) == (OwnerState.DISPATCHING, TaskStatus.PENDING)
    assert queue.status(1, 8) is TaskStatus.PENDING
    queue.complete(owner, TaskStatus.TIMEOUT)
    assert {queue.status(1, i) for i in (1, 7, 8)} == {TaskStatus.TIMEOUT}
    assert queue.status(1, 2) is TaskStatus.PENDING
    assert queue.owner(other).public_id == 2


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda q: q.status(1, 99), InvalidEntry),
        (lambda q: q.status(2, 1), InvalidEntry),
        (lambda q: q.status(-1, 1), InvalidArgument),
        (lambda q: q.owner_id_of(1, True), InvalidArgument),
        (lambda q: q.owner(99), InvalidEntry),
        (lambda q: q.owner_state(0), InvalidEntry),
        (lambda q: q.owner_state("1"), InvalidArgument),
    ],
)
def test_queries_of_unknown_ids_raise_typed_errors(
    call: Callable[[AdmissionQueue], object], error: type[Exception]
) -> None:
    queue = AdmissionQueue(LIMITS)
    queue.try_admit(1, 10, [req(1)])
    with pytest.raises(error):
        call(queue)


def test_owner_view_reflects_the_request() -> None:
    queue = edf_queue()
    (owner_id,) = queue.try_admit(
        5,
        10,
        [
            req(
                3,
                77,
                kind=OwnerKind.STAGING_INTERNAL,
                deadline_ns=123,
                degradation_eligible=False,
                priority=2,
                gate_key=("peer", 1),
                context="plan",
            )
        ],
    )
    assert queue.owner(owner_id) == OwnerView(
        owner_id=owner_id,
        public_id=3,
        length=77,
        kind=OwnerKind.STAGING_INTERNAL,
        deadline_ns=123,
        degradation_eligible=False,
        priority=2,
        gate_key=("peer", 1),
        context="plan",
        enqueue_seq=0,
    )
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        queue.owner(owner_id).length = 1  # type: ignore[misc]


# --------------------------------------------------------------------------- lifecycle table


def test_lifecycle_table_is_exactly_the_documented_lifecycle() -> None:
    assert dict(OWNER_TRANSITIONS) == {
        (OwnerState.QUEUED, "dispatch"): OwnerState.DISPATCHING,
        (OwnerState.QUEUED, "cancel"): OwnerState.TERMINAL,
        (OwnerState.QUEUED, "drop"): OwnerState.TERMINAL,
        (OwnerState.QUEUED, "reject"): OwnerState.TERMINAL,
        (OwnerState.DISPATCHING, "complete"): OwnerState.TERMINAL,
    }


def owner_in(state: str) -> tuple[AdmissionQueue, int]:
    queue = AdmissionQueue(LIMITS)
    (owner_id,) = queue.try_admit(1, 10, [req(1)])
    if state != "queued":
        pick_all(queue)
    if state == "completed":
        queue.complete(owner_id, TaskStatus.COMPLETED)
    return queue, owner_id


@pytest.mark.parametrize("state", ["queued", "dispatching", "completed"])
@pytest.mark.parametrize("event", ["complete", "cancel"])
def test_public_calls_follow_the_lifecycle_table(state: str, event: str) -> None:
    queue, owner_id = owner_in(state)
    current, _status = queue.owner_state(owner_id)
    allowed = (current, event) in OWNER_TRANSITIONS
    before = snapshot(queue, owner_id)

    def act() -> None:
        if event == "complete":
            queue.complete(owner_id, TaskStatus.COMPLETED)
        else:
            queue.cancel(owner_id)

    if allowed:
        act()
        assert queue.owner_state(owner_id)[0] is OWNER_TRANSITIONS[(current, event)]
    else:
        with pytest.raises(InvalidEntry):
            act()
        assert snapshot(queue, owner_id) == before
