"""The fault-injecting channel: determinism, fault rates at their extremes, chooser control,
explicit fault hooks, bounds, and the failure-leaves-nothing-changed rule."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import DrawChooser

from tent_credit.errors import InvalidArgument, InvalidEntry, TooManyRequests
from tent_credit.testing import (
    CHOICE_DELAY,
    CHOICE_DROP,
    CHOICE_DUPLICATE,
    CHOICE_REORDER,
    CHOICE_REORDER_PICK,
    ChannelStatistics,
    FaultRates,
    FaultyChannel,
)

MESSAGES = [bytes([i]) * 3 for i in range(8)]


class ScriptedChooser:
    """Answers from a script and records every question."""

    def __init__(self, answers: list[int]) -> None:
        self.answers = list(answers)
        self.questions: list[tuple[str, int]] = []

    def choose(self, what: str, options: int) -> int:
        self.questions.append((what, options))
        return self.answers.pop(0)


def state(channel: FaultyChannel) -> tuple[ChannelStatistics, int, int | None]:
    return channel.statistics(), channel.pending(), channel.next_due_ns()


def conserved(stats: ChannelStatistics) -> bool:
    return stats.sent + stats.duplicated == stats.delivered + stats.dropped + stats.in_flight


def run_schedule(channel: FaultyChannel, count: int, start_ns: int = 0) -> list[list[bytes]]:
    """Send ``count`` messages 10 ns apart, delivering at every step, then flush."""
    out = []
    for i in range(count):
        channel.send(MESSAGES[i % len(MESSAGES)], now_ns=start_ns + 10 * i)
        out.append(channel.deliver(now_ns=start_ns + 10 * i))
    out.append(channel.deliver(now_ns=start_ns + 10**12))
    return out


# --------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    "kwargs",
    [
        {"drop": -0.1},
        {"duplicate": 1.5},
        {"reorder": math.nan},
        {"drop": math.inf},
        {"drop": True},
        {"drop": "0.5"},
        {"max_delay_ns": -1},
        {"max_delay_ns": 1.0},
    ],
)
def test_fault_rates_reject_invalid_values(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        FaultRates(**kwargs)


def test_fault_rates_accept_the_closed_unit_interval() -> None:
    rates = FaultRates(drop=0, duplicate=1, reorder=0.25, max_delay_ns=0)
    assert rates.needs_choices()
    assert not FaultRates(drop=1.0, duplicate=0.0).needs_choices()
    assert FaultRates(max_delay_ns=1).needs_choices()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"seed": 1, "chooser": ScriptedChooser([])},
        {"rates": FaultRates(drop=0.5)},
        {"rates": FaultRates(max_delay_ns=5)},
        {"seed": "1"},
        {"seed": True},
        {"capacity": 0},
        {"capacity": 2.0},
        {"rates": {"drop": 0.5}},
        {"chooser": object()},
    ],
)
def test_channel_rejects_an_invalid_or_irreproducible_configuration(
    kwargs: dict[str, Any],
) -> None:
    with pytest.raises(InvalidArgument):
        FaultyChannel(**kwargs)


# --------------------------------------------------------------------- behaviour


def test_a_channel_without_faults_is_a_fifo() -> None:
    channel = FaultyChannel()
    for i, message in enumerate(MESSAGES):
        channel.send(message, now_ns=i)
    assert channel.pending() == len(MESSAGES)
    assert channel.next_due_ns() == 0
    assert channel.deliver(now_ns=len(MESSAGES)) == MESSAGES
    assert channel.statistics() == ChannelStatistics(
        sent=8, delivered=8, dropped=0, duplicated=0, reordered=0, in_flight=0
    )
    assert channel.next_due_ns() is None


@given(seed=st.integers(0, 2**32), count=st.integers(1, 30))
def test_same_seed_gives_the_same_fault_schedule(seed: int, count: int) -> None:
    rates = FaultRates(drop=0.2, duplicate=0.2, reorder=0.3, max_delay_ns=25)
    first = FaultyChannel(seed=seed, rates=rates)
    second = FaultyChannel(seed=seed, rates=rates)
    assert run_schedule(first, count) == run_schedule(second, count)
    assert first.statistics() == second.statistics()
    assert conserved(first.statistics())


def test_different_seeds_give_different_schedules() -> None:
    rates = FaultRates(drop=0.3, duplicate=0.3, reorder=0.3, max_delay_ns=25)
    schedules = {repr(run_schedule(FaultyChannel(seed=s, rates=rates), 30)) for s in range(5)}
    assert len(schedules) > 1


@given(seed=st.integers(0, 2**32), count=st.integers(1, 30))
def test_zero_rates_never_inject_a_fault(seed: int, count: int) -> None:
    channel = FaultyChannel(seed=seed, rates=FaultRates())
    delivered = [m for batch in run_schedule(channel, count) for m in batch]
    assert delivered == [MESSAGES[i % len(MESSAGES)] for i in range(count)]
    stats = channel.statistics()
    assert (stats.dropped, stats.duplicated, stats.reordered) == (0, 0, 0)


@given(seed=st.integers(0, 2**32), count=st.integers(1, 30))
def test_drop_rate_one_drops_everything(seed: int, count: int) -> None:
    channel = FaultyChannel(seed=seed, rates=FaultRates(drop=1.0, duplicate=1.0))
    assert all(batch == [] for batch in run_schedule(channel, count))
    stats = channel.statistics()
    assert stats.sent == stats.dropped == count
    assert stats.delivered == stats.duplicated == 0


def test_duplicate_rate_one_delivers_every_message_twice() -> None:
    channel = FaultyChannel(rates=FaultRates(duplicate=1.0))
    for message in MESSAGES[:3]:
        channel.send(message, now_ns=0)
    assert channel.deliver(now_ns=0) == [m for m in MESSAGES[:3] for _ in range(2)]
    assert channel.statistics().duplicated == 3


def test_reorder_rate_one_never_delivers_the_head_first() -> None:
    chooser = ScriptedChooser([1, 0])  # which later message overtakes, each time
    channel = FaultyChannel(chooser=chooser, rates=FaultRates(reorder=1.0))
    for message in MESSAGES[:3]:
        channel.send(message, now_ns=0)
    assert channel.deliver(now_ns=0) == [MESSAGES[2], MESSAGES[1], MESSAGES[0]]
    assert chooser.questions == [(CHOICE_REORDER_PICK, 2), (CHOICE_REORDER_PICK, 1)]
    assert channel.statistics().reordered == 2  # 2 overtook 0 and 1; 1 overtook 0


@given(seed=st.integers(0, 2**32))
def test_delays_stay_within_the_bound_and_nothing_arrives_early(seed: int) -> None:
    channel = FaultyChannel(seed=seed, rates=FaultRates(max_delay_ns=50))
    for message in MESSAGES:
        channel.send(message, now_ns=100)
    arrived_at: dict[bytes, int] = {}
    now = 100
    while channel.pending():
        due = channel.next_due_ns()
        assert due is not None and due >= now
        if due > now:
            assert channel.deliver(now_ns=due - 1) == []  # nothing arrives before it is due
        now = due
        for message in channel.deliver(now_ns=due):
            arrived_at[message] = due
    assert set(arrived_at) == set(MESSAGES)
    assert all(100 <= at <= 150 for at in arrived_at.values())


def test_chooser_makes_every_choice() -> None:
    # drop? no; duplicate? yes; delay of copy 1 = 3, of copy 2 = 0; then drop? yes
    chooser = ScriptedChooser([0, 1, 3, 0, 1])
    rates = FaultRates(drop=0.5, duplicate=0.5, max_delay_ns=4)
    channel = FaultyChannel(chooser=chooser, rates=rates)
    channel.send(b"a", now_ns=10)
    channel.send(b"b", now_ns=10)
    assert chooser.questions == [
        (CHOICE_DROP, 2),
        (CHOICE_DUPLICATE, 2),
        (CHOICE_DELAY, 5),
        (CHOICE_DELAY, 5),
        (CHOICE_DROP, 2),
    ]
    assert channel.next_due_ns() == 10
    assert channel.deliver(now_ns=10) == [b"a"]  # the undelayed second copy overtakes
    assert channel.deliver(now_ns=13) == [b"a"]
    assert channel.statistics() == ChannelStatistics(
        sent=2, delivered=2, dropped=1, duplicated=1, reordered=1, in_flight=0
    )


def test_rates_of_zero_and_one_ask_the_chooser_nothing() -> None:
    chooser = ScriptedChooser([])
    channel = FaultyChannel(chooser=chooser, rates=FaultRates(duplicate=1.0, reorder=0.0))
    channel.send(b"a", now_ns=0)
    assert channel.deliver(now_ns=0) == [b"a", b"a"]
    assert chooser.questions == []


def test_a_reorder_choice_is_asked_only_when_two_messages_are_due() -> None:
    chooser = ScriptedChooser([1, 0])
    channel = FaultyChannel(chooser=chooser, rates=FaultRates(reorder=0.5))
    channel.send(b"a", now_ns=0)
    channel.send(b"b", now_ns=0)
    assert channel.deliver(now_ns=0) == [b"b", b"a"]
    assert chooser.questions == [(CHOICE_REORDER, 2), (CHOICE_REORDER_PICK, 1)]


@given(data=st.data())
def test_hypothesis_driven_schedules_conserve_messages(data: st.DataObject) -> None:
    rates = FaultRates(drop=0.5, duplicate=0.5, reorder=0.5, max_delay_ns=20)
    channel = FaultyChannel(chooser=DrawChooser(data), rates=rates, capacity=16)
    sent: Counter[bytes] = Counter()
    delivered: Counter[bytes] = Counter()
    now = 0
    for step in range(data.draw(st.integers(0, 25), label="steps")):
        now += data.draw(st.integers(0, 10), label="advance")
        action = data.draw(st.sampled_from(["send", "deliver", "hook"]), label="action")
        if action == "send" and channel.pending() < channel.capacity:
            message = step.to_bytes(2, "big")
            channel.send(message, now_ns=now)
            sent[message] += 1
        elif action == "hook" and channel.pending():
            i = data.draw(st.integers(0, channel.pending() - 1), label="index")
            hook = data.draw(st.sampled_from(["drop", "duplicate", "deliver"]), label="hook")
            if hook == "drop":
                channel.drop_at(i)
            elif hook == "duplicate" and channel.pending() < channel.capacity:
                channel.duplicate_at(i)
            elif hook == "deliver":
                delivered[channel.deliver_one(i, now_ns=now)] += 1
        else:
            delivered.update(channel.deliver(now_ns=now))
        stats = channel.statistics()
        assert conserved(stats)
        assert stats.in_flight == channel.pending() <= channel.capacity
    delivered.update(channel.deliver(now_ns=now + 10**6))
    stats = channel.statistics()
    assert stats.in_flight == 0 and conserved(stats)
    assert set(delivered) <= set(sent)
    assert sum(delivered.values()) == stats.delivered


# --------------------------------------------------------------------- explicit hooks


def loaded_channel() -> FaultyChannel:
    channel = FaultyChannel()
    for i, message in enumerate(MESSAGES[:3]):
        channel.send(message, now_ns=i)
    return channel


def test_drop_at_loses_exactly_that_message() -> None:
    channel = loaded_channel()
    channel.drop_at(1)
    assert channel.deliver(now_ns=10) == [MESSAGES[0], MESSAGES[2]]
    assert channel.statistics().dropped == 1


def test_duplicate_at_adds_a_copy_due_at_the_same_time() -> None:
    channel = loaded_channel()
    channel.duplicate_at(0)
    assert channel.pending() == 4
    assert channel.deliver(now_ns=2) == [MESSAGES[0], MESSAGES[0], MESSAGES[1], MESSAGES[2]]
    assert channel.statistics().duplicated == 1


def test_deliver_one_delivers_out_of_order_and_counts_the_overtaking() -> None:
    channel = loaded_channel()
    assert channel.deliver_one(2, now_ns=2) == MESSAGES[2]
    assert channel.statistics().reordered == 1
    assert channel.deliver_one(0, now_ns=2) == MESSAGES[0]
    assert channel.statistics().reordered == 1  # nothing earlier was in flight


def test_deliver_one_may_deliver_before_the_due_time() -> None:
    channel = FaultyChannel(chooser=ScriptedChooser([9]), rates=FaultRates(max_delay_ns=9))
    channel.send(b"late", now_ns=0)
    assert channel.deliver(now_ns=8) == []
    assert channel.deliver_one(0, now_ns=8) == b"late"


def test_a_message_that_was_dropped_is_not_counted_as_overtaken() -> None:
    channel = loaded_channel()
    channel.drop_at(0)
    assert channel.deliver_one(0, now_ns=5) == MESSAGES[1]
    assert channel.statistics().reordered == 0


# --------------------------------------------------------------------- failures change nothing


def twin_channels() -> tuple[FaultyChannel, FaultyChannel]:
    """Two identical seeded channels, loaded identically (one will see a failing call)."""
    rates = FaultRates(drop=0.3, duplicate=0.3, reorder=0.5, max_delay_ns=7)
    pair = (FaultyChannel(seed=3, rates=rates), FaultyChannel(seed=3, rates=rates))
    for channel in pair:
        for i in range(4):
            channel.send(MESSAGES[i], now_ns=5)
    return pair


@pytest.mark.parametrize(
    "failing_call,error",
    [
        (lambda c: c.send("text", now_ns=5), InvalidArgument),
        (lambda c: c.send(b"x", now_ns=4), InvalidArgument),  # time went backwards
        (lambda c: c.send(b"x", now_ns=-1), InvalidArgument),
        (lambda c: c.deliver(now_ns=4), InvalidArgument),
        (lambda c: c.deliver_one(0, now_ns=4), InvalidArgument),
        (lambda c: c.deliver_one(99, now_ns=5), InvalidEntry),
        (lambda c: c.drop_at(-1), InvalidEntry),
        (lambda c: c.drop_at(True), InvalidArgument),
        (lambda c: c.duplicate_at(99), InvalidEntry),
    ],
)
def test_a_failing_call_leaves_the_channel_and_its_randomness_unchanged(
    failing_call: Any, error: type[Exception]
) -> None:
    channel, twin = twin_channels()
    before = state(channel)
    with pytest.raises(error):
        failing_call(channel)
    assert state(channel) == before
    assert run_schedule(channel, 5, start_ns=5) == run_schedule(twin, 5, start_ns=5)


def test_a_full_channel_refuses_a_send_and_stays_unchanged() -> None:
    channel = FaultyChannel(capacity=2)
    channel.send(b"a", now_ns=0)
    channel.send(b"b", now_ns=0)
    before = state(channel)
    with pytest.raises(TooManyRequests):
        channel.send(b"c", now_ns=1)
    with pytest.raises(TooManyRequests):
        channel.duplicate_at(0)
    assert state(channel) == before
    assert channel.deliver(now_ns=1) == [b"a", b"b"]


def test_no_duplicate_is_made_without_room_for_two_copies() -> None:
    chooser = ScriptedChooser([])
    channel = FaultyChannel(chooser=chooser, rates=FaultRates(duplicate=0.5), capacity=1)
    channel.send(b"a", now_ns=0)
    assert chooser.questions == []  # no room for a copy: the duplicate choice is not asked
    assert channel.pending() == 1


def test_a_chooser_answer_out_of_range_is_refused_and_changes_nothing() -> None:
    channel = FaultyChannel(chooser=ScriptedChooser([2]), rates=FaultRates(drop=0.5))
    with pytest.raises(InvalidArgument):
        channel.send(b"a", now_ns=0)
    assert channel.statistics() == ChannelStatistics(
        sent=0, delivered=0, dropped=0, duplicated=0, reordered=0, in_flight=0
    )
