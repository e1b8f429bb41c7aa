"""RDMA bandwidth arbitration: ``order_by_deadline``, tiers and the QP budget
(docs/semantics.md#arbitration)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tent_sched._arbitration import (
    EXACT_SLOTS,
    Slice,
    order_by_deadline,
    order_tiers,
    postable_prefix,
)
from tent_sched._mlu import deadline_mlu
from tent_sched.errors import InvalidArgument

MIB = 1 << 20
MS = 1_000_000
BW = 5e10  # 400 Gb/s


def reference_order(
    slices: Sequence[Slice], bandwidth_bps: float, posted_bytes: int, now_ns: int
) -> list[int]:
    """docs/semantics.md#arbitration written literally: score every unplaced slice in every exact
    slot."""
    count = len(slices)
    if count < 2 or bandwidth_bps <= 0 or not any(s.deadline_ns for s in slices):
        return list(range(count))
    unplaced = list(range(count))
    order: list[int] = []
    ahead = posted_bytes
    for _ in range(min(count, 64)):
        best, best_score = -1, -1.0
        for index in unplaced:
            s = slices[index]
            score = deadline_mlu(ahead, s.length, s.deadline_ns, now_ns, bandwidth_bps)
            if score > best_score:
                best, best_score = index, score
        unplaced.remove(best)
        order.append(best)
        ahead += slices[best].length
    scores = {
        i: deadline_mlu(ahead, slices[i].length, slices[i].deadline_ns, now_ns, bandwidth_bps)
        for i in unplaced
    }
    return order + sorted(unplaced, key=lambda i: scores[i], reverse=True)


# -- Slice -------------------------------------------------------------------------------------


def test_slice_defaults_to_no_deadline_in_the_highest_tier() -> None:
    item = Slice(length=4096)
    assert (item.deadline_ns, item.priority, item.ident) == (0, 0, None)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"length": 0},
        {"length": -1},
        {"length": 1.0},
        {"length": True},
        {"length": 1, "deadline_ns": -1},
        {"length": 1, "priority": 0.5},
        {"length": 1, "ident": []},
    ],
)
def test_invalid_slice_cannot_be_built(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument):
        Slice(**kwargs)  # type: ignore[arg-type]


# -- order_by_deadline: when the order is left alone -------------------------------------------


def test_fewer_than_two_slices_keep_their_order() -> None:
    assert order_by_deadline([], BW, 0, 0) == []
    assert order_by_deadline([Slice(length=1, deadline_ns=1)], BW, 0, 0) == [0]


@pytest.mark.parametrize("bandwidth", [0.0, -1.0, 0])
def test_no_usable_bandwidth_keeps_arrival_order(bandwidth: float) -> None:
    slices = [Slice(length=MIB, deadline_ns=9 * MS), Slice(length=MIB, deadline_ns=1)]
    assert order_by_deadline(slices, bandwidth, 0, 5) == [0, 1]


def test_no_deadline_anywhere_keeps_arrival_order() -> None:
    slices = [Slice(length=MIB * (5 - i)) for i in range(5)]
    assert order_by_deadline(slices, BW, 0, 0) == [0, 1, 2, 3, 4]


# -- order_by_deadline: the greedy --------------------------------------------------------------


def test_most_urgent_slice_posts_first_and_no_deadline_posts_last() -> None:
    slices = [
        Slice(length=MIB),
        Slice(length=MIB, deadline_ns=30 * MS),
        Slice(length=MIB, deadline_ns=10 * MS),
    ]
    assert order_by_deadline(slices, BW, 0, 0) == [2, 1, 0]


def test_past_due_slices_take_the_first_slots_in_arrival_order() -> None:
    now = 100 * MS
    slices = [
        Slice(length=MIB, deadline_ns=now + MS),
        Slice(length=MIB, deadline_ns=now),  # equal counts as past
        Slice(length=8 * MIB, deadline_ns=1),
    ]
    assert order_by_deadline(slices, BW, 0, now) == [1, 2, 0]


def test_equal_scores_go_to_the_lowest_index() -> None:
    slices = [Slice(length=MIB, deadline_ns=5 * MS, ident=i) for i in range(4)]
    assert order_by_deadline(slices, BW, 0, 0) == [0, 1, 2, 3]


def test_bytes_placed_ahead_change_the_ranking_of_later_slots() -> None:
    # Slot 1 (ahead = 0): the big slice needs 100 MiB / 50 GB/s = 2.1 ms of its 4 ms (0.52);
    # the small one 1 MiB in 0.05 ms (0.35): the big one wins. Slot 2 is then the small one.
    # With 300 MiB already posted the small one's wait dominates both and it wins by window.
    big = Slice(length=100 * MIB, deadline_ns=4 * MS)
    small = Slice(length=MIB, deadline_ns=60_000)
    assert order_by_deadline([small, big], BW, 0, 0) == [1, 0]
    assert order_by_deadline([small, big], BW, 300 * MIB, 0) == [0, 1]


def test_beyond_the_exact_slots_the_rest_is_ranked_once_against_the_accumulated_bytes() -> None:
    # 64 past-due slices (score DBL_MAX) take the exact slots; the tail is then ranked once.
    past_due = [Slice(length=MIB, deadline_ns=1) for _ in range(EXACT_SLOTS)]
    tail = [
        Slice(length=MIB),  # 64: no deadline
        Slice(length=MIB, deadline_ns=50 * MS),  # 65
        Slice(length=MIB, deadline_ns=20 * MS),  # 66
        Slice(length=MIB, deadline_ns=50 * MS),  # 67: ties 65, keeps arrival order
    ]
    order = order_by_deadline(past_due + tail, BW, 0, 10)
    assert order[:EXACT_SLOTS] == list(range(EXACT_SLOTS))
    assert order[EXACT_SLOTS:] == [66, 65, 67, 64]


def test_tail_ranking_uses_one_score_not_a_greedy() -> None:
    # Past slot 64 a greedy would let the short-window small slice overtake once bytes pile up;
    # the one-shot ranking scores both against the same bytes_ahead.
    past_due = [Slice(length=MIB, deadline_ns=1) for _ in range(EXACT_SLOTS)]
    big = Slice(length=100 * MIB, deadline_ns=10 * MS)
    small = Slice(length=MIB, deadline_ns=5 * MS)
    slices = [*past_due, big, small, Slice(length=MIB, deadline_ns=400 * MS)]
    order = order_by_deadline(slices, BW, 0, 10)
    assert order == reference_order(slices, BW, 0, 10)


def test_never_drops_and_returns_a_permutation() -> None:
    slices = [Slice(length=(i % 7 + 1) * MIB, deadline_ns=(i % 5) * MS) for i in range(200)]
    order = order_by_deadline(slices, BW, 4 * MIB, MS)
    assert sorted(order) == list(range(200))


def test_does_not_mutate_the_input_sequence() -> None:
    slices = [Slice(length=MIB, deadline_ns=3 * MS), Slice(length=MIB, deadline_ns=MS)]
    copy = list(slices)
    order_by_deadline(slices, BW, 0, 0)
    assert slices == copy


@pytest.mark.parametrize(
    ("slices", "bandwidth", "posted", "now"),
    [
        ([Slice(length=1), "slice"], BW, 0, 0),
        ([Slice(length=1)], float("nan"), 0, 0),
        ([Slice(length=1)], float("inf"), 0, 0),
        ([Slice(length=1)], True, 0, 0),
        ([Slice(length=1)], BW, -1, 0),
        ([Slice(length=1)], BW, 0.0, 0),
        ([Slice(length=1)], BW, 0, -5),
    ],
)
def test_bad_arguments_are_rejected(
    slices: list[Slice], bandwidth: float, posted: int, now: int
) -> None:
    with pytest.raises(InvalidArgument):
        order_by_deadline(slices, bandwidth, posted, now)
    with pytest.raises(InvalidArgument):
        order_tiers(slices, bandwidth, posted, now)


slice_lists = st.lists(
    st.builds(
        Slice,
        length=st.sampled_from([1, 4096, MIB, 16 * MIB]) | st.integers(1, 1 << 30),
        deadline_ns=st.sampled_from([0, 0, 1, 2 * MS, 5 * MS]) | st.integers(0, 10**10),
        priority=st.integers(0, 2),
    ),
    max_size=90,
)
bandwidths = st.sampled_from([-1.0, 0.0, 1e3, 1.25e9, 5e10, 1e12]) | st.floats(1.0, 1e13)


@given(slice_lists, bandwidths, st.integers(0, 1 << 34), st.integers(0, 6 * MS))
def test_matches_the_literal_rule(
    slices: list[Slice], bandwidth: float, posted: int, now: int
) -> None:
    assert order_by_deadline(slices, bandwidth, posted, now) == reference_order(
        slices, bandwidth, posted, now
    )


@given(slice_lists, st.floats(1.0, 1e13), st.integers(0, 1 << 34), st.integers(0, 6 * MS))
def test_is_a_permutation_and_no_deadline_slice_precedes_a_deadline_one(
    slices: list[Slice], bandwidth: float, posted: int, now: int
) -> None:
    order = order_by_deadline(slices, bandwidth, posted, now)
    assert sorted(order) == list(range(len(slices)))
    has_deadline = [slices[index].deadline_ns != 0 for index in order]
    # Every deadline slice comes before every no-deadline slice: the flags only ever fall.
    assert has_deadline == sorted(has_deadline, reverse=True)


long_slice_lists = st.lists(
    st.builds(
        Slice,
        length=st.sampled_from([4096, MIB, 16 * MIB]),
        deadline_ns=st.sampled_from([0, 1, 2 * MS, 3 * MS, 5 * MS, 8 * MS]),
    ),
    min_size=EXACT_SLOTS - 4,
    max_size=EXACT_SLOTS + 40,
)


@settings(max_examples=40)
@given(long_slice_lists, st.floats(1e8, 1e12), st.integers(0, 1 << 34), st.integers(0, 4 * MS))
def test_matches_the_literal_rule_across_the_exact_slot_boundary(
    slices: list[Slice], bandwidth: float, posted: int, now: int
) -> None:
    assert order_by_deadline(slices, bandwidth, posted, now) == reference_order(
        slices, bandwidth, posted, now
    )


# -- order_tiers -------------------------------------------------------------------------------


def test_lower_priority_value_is_a_higher_tier_and_posts_first() -> None:
    slices = [
        Slice(length=MIB, deadline_ns=1 * MS, priority=2),
        Slice(length=MIB, priority=0),
        Slice(length=MIB, deadline_ns=9 * MS, priority=1),
        Slice(length=MIB, deadline_ns=2 * MS, priority=0),
    ]
    assert order_tiers(slices, BW, 0, 0) == [3, 1, 2, 0]


def test_each_tier_counts_the_higher_tiers_bytes_ahead() -> None:
    # Alone, the small slice (window 60 µs) beats the big one; behind 300 MiB of a higher tier
    # their ranking flips exactly as order_by_deadline does with 300 MiB posted.
    big = Slice(length=100 * MIB, deadline_ns=4 * MS, priority=1)
    small = Slice(length=MIB, deadline_ns=60_000, priority=1)
    high = Slice(length=300 * MIB, priority=0)
    assert order_tiers([small, big], BW, 0, 0) == [1, 0]
    assert order_tiers([small, big, high], BW, 0, 0) == [2, 0, 1]


@given(slice_lists, bandwidths, st.integers(0, 1 << 34), st.integers(0, 6 * MS))
def test_tiers_are_contiguous_and_each_is_arbitrated(
    slices: list[Slice], bandwidth: float, posted: int, now: int
) -> None:
    order = order_tiers(slices, bandwidth, posted, now)
    assert sorted(order) == list(range(len(slices)))
    priorities = [slices[i].priority for i in order]
    assert priorities == sorted(priorities)
    ahead = posted
    for priority in sorted(set(priorities)):
        indices = [i for i, s in enumerate(slices) if s.priority == priority]
        tier = [slices[i] for i in indices]
        expected = [indices[k] for k in order_by_deadline(tier, bandwidth, ahead, now)]
        assert [i for i in order if slices[i].priority == priority] == expected
        ahead += sum(s.length for s in tier)


# -- postable_prefix ---------------------------------------------------------------------------


def test_prefix_is_bounded_by_the_remaining_qp_budget() -> None:
    order = list(range(300))
    post_now, later = postable_prefix(order, outstanding_wr=200)
    assert post_now == list(range(56))
    assert later == list(range(56, 300))


def test_prefix_with_room_posts_everything() -> None:
    assert postable_prefix(["b", "a"], max_qp_wr=4, outstanding_wr=1) == (["b", "a"], [])


def test_full_qp_posts_nothing_this_tick() -> None:
    assert postable_prefix([3, 1, 2], max_qp_wr=8, outstanding_wr=8) == ([], [3, 1, 2])


@pytest.mark.parametrize(
    ("max_qp_wr", "outstanding_wr"),
    [(0, 0), (-1, 0), (8, 9), (8, -1), (8, 1.0), (True, 0)],
)
def test_bad_budget_is_rejected(max_qp_wr: int, outstanding_wr: int) -> None:
    with pytest.raises(InvalidArgument):
        postable_prefix([1, 2], max_qp_wr=max_qp_wr, outstanding_wr=outstanding_wr)


extreme_slice_lists = st.lists(
    st.builds(
        Slice,
        length=st.sampled_from([1, 2, 3, 1 << 53, (1 << 53) + 1, 1 << 62])
        | st.integers(1, 1 << 62),
        deadline_ns=st.sampled_from([0, 1, 1 << 60, (1 << 60) + 1, (1 << 64) - 1])
        | st.integers(0, (1 << 64) - 1),
    ),
    max_size=80,
)


@given(
    extreme_slice_lists,
    st.sampled_from([5e-324, 1e-300, 1e-9, 1e300, 1.7e308]) | st.floats(1e-300, 1e300),
    st.integers(0, 1 << 63),
    st.integers(0, 1 << 61),
)
def test_matches_the_literal_rule_at_float_extremes(
    slices: list[Slice], bandwidth: float, posted: int, now: int
) -> None:
    # Rounding ties (deadlines beyond 2**53), scores that overflow to inf (above DBL_MAX) and
    # scores that underflow to 0 all keep the literal rule's order.
    assert order_by_deadline(slices, bandwidth, posted, now) == reference_order(
        slices, bandwidth, posted, now
    )
