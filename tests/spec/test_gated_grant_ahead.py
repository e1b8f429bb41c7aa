"""The gated spec's grant-ahead rules by hand (credit protocol version 2,
docs/credit_protocol.md#grant-ahead, docs/spec_review_gated.md#gated-grant-ahead): the arithmetic,
the top-up as data lands, the news rule and the answer to a repeat, idle credit going back, and
the retry hint.

The arithmetic is the spec's own (``tent_spec.gated._ahead``); the expected figures are the
ones ``tests/credit/test_grant_ahead.py`` asks of the implementation's, so the two agree on the
documented examples without sharing code.
"""

from __future__ import annotations

from typing import Any

from gated_steps import only_message, small_config, step
from tent_spec.gated import GatedSpec, GatedState, OwnerSpec, Report, Update
from tent_spec.gated._ahead import quantum, standing, unit_of

ONE = (4, 1, 1)  # one 4-byte write


def units(n: int) -> tuple[int, ...]:
    return tuple(a * n for a in ONE)


def _lone_key(**changes: Any) -> GatedSpec:
    """One key, two 1-byte owners, capacity for four, no activation grant."""
    fields: dict[str, Any] = {
        "capacity": (4, 4, 4),
        "max_grant": (4, 4, 4),
        "initial_grant": (0, 0, 0),
    }
    return GatedSpec(small_config(**{**fields, **changes}))


def _streaming(spec: GatedSpec) -> GatedState:
    """Both owners stall, the level (2) is reported and granted in one update, both dispatch
    and commit: two transfers in flight, a level of 2 reported, nothing idle."""
    state = spec.initial_states()[0]
    state = step(spec, step(spec, state, "admit", 0), "admit", 1)
    state = step(spec, state, "pick", 2, 2)
    state = step(spec, state, "sender_flush", 0)
    state = step(spec, state, "deliver", 0, only_message(state.to_receiver[0]))
    state = step(spec, state, "receiver_flush", 0)
    update = only_message(state.to_sender[0])
    assert isinstance(update, Update) and update.grants == (2, 2, 2)  # the whole level at once
    state = step(spec, state, "deliver", 0, update)
    state = step(spec, state, "pick", 2, 2)
    state = step(spec, step(spec, state, "submit", 1, True), "submit", 2, True)
    assert spec.level(state, 1) == (2, 2, 2) == state.senders[0].reported
    assert not spec.report_due(state, 1)  # committing the waiting work changes no level
    return state


# --- the arithmetic -------------------------------------------------------------------------------


def test_the_unit_is_one_charge_and_the_quantum_leaves_an_uncapped_key_in_flight() -> None:
    assert unit_of(units(4)) == ONE
    assert unit_of((0, 0, 0)) == (0, 0, 0)
    assert [quantum(h, capped=True) for h in (1, 2, 3, 4, 8)] == [1, 2, 2, 2, 4]
    assert [quantum(h, capped=False) for h in (1, 2, 3, 4, 8)] == [1, 1, 2, 2, 4]


def test_the_chunk_is_the_fair_share_rounded_up_and_a_level_never_buys_more() -> None:
    pool = units(8)
    alone = standing(units(4), (0, 0, 0), pool, active=1, chunk=0, settled=True)
    assert (alone.hold, alone.deficit, alone.capped) == (4, 4, False)
    sixteen = standing(units(4), (0, 0, 0), pool, active=16, chunk=0, settled=True)
    assert (sixteen.hold, sixteen.capped, sixteen.quantum) == (1, True, 1)
    three = standing(units(4), (0, 0, 0), pool, active=3, chunk=0, settled=True)
    assert three.hold == 3  # ceil(8 / 3): the third key's last unit waits in the line
    liar = standing(units(1000), (0, 0, 0), pool, active=2, chunk=0, settled=True)
    assert liar.hold == 4 and liar.capped
    lease = standing(units(4), (0, 0, 0), pool, active=1, chunk=2, settled=True)
    assert lease.hold == 2  # the RFC's static lease batch


def test_a_partly_landed_charge_counts_as_held_and_a_settled_fragment_holds_no_unit() -> None:
    half = (2, 1, 1)
    flying = standing(units(2), half, units(8), active=1, chunk=0, settled=False)
    assert flying.held == 1 and flying.deficit == 1
    assert flying.top_up(1) == ONE  # one more whole charge
    settled = standing(units(2), half, units(8), active=1, chunk=0, settled=True)
    assert settled.held == 0 and settled.deficit == 2
    # never a part of a charge: the fragment is not completed (its sender returns it)
    assert settled.top_up(1) == ONE


# --- the receiver ---------------------------------------------------------------------------------


def test_a_lone_key_is_topped_up_as_its_data_lands_without_a_report() -> None:
    spec = _lone_key()
    state = _streaming(spec)
    reports = state.receivers[0].usage_seq
    state = step(spec, state, "land", 1)
    # unlanded 1 of a hold of 2: the deficit (1) reaches the quantum (1, not capped): one more
    # charge, before the landed data is even released
    assert state.receivers[0].granted == (3, 3, 3)
    assert state.receivers[0].released == (0, 0, 0)
    assert state.receivers[0].usage_seq == reports and not state.line


def test_no_update_without_news_and_a_repeated_report_is_answered() -> None:
    spec = _lone_key()
    streaming = _streaming(spec)
    state = step(spec, streaming, "land", 1)
    state = step(spec, state, "receiver_flush", 0)  # the top-up is news
    update = only_message(state.to_sender[0])
    assert update.grants == (3, 3, 3)
    state = step(spec, state, "deliver", 0, update)
    assert "nothing to send" in spec.explain(state, "receiver_flush", (0,))
    # The refreshes: the receiver re-publishes its vector, the sender re-sends its report.
    state = step(spec, streaming, "refresh_tick")
    refresh = only_message(state.to_sender[0])
    assert refresh.grants == (2, 2, 2)
    state = step(spec, state, "deliver", 0, refresh)
    repeat = only_message(state.to_receiver[0])
    assert isinstance(repeat, Report) and repeat.demand == (4, 4, 4)  # consumed 2 + level 2
    state = step(spec, state, "deliver", 0, repeat)
    assert state.receivers[0].push_due  # the same report again: answered with the full vector
    state = step(spec, state, "receiver_flush", 0)
    answer = only_message(state.to_sender[0])
    assert answer.grants == (2, 2, 2) and answer.seq == refresh.seq + 1


def test_idle_credit_goes_back_once_the_work_drained_and_a_lower_level_alone_is_not_news() -> None:
    spec = _lone_key()
    state = step(spec, _streaming(spec), "land", 1)
    state = step(spec, state, "complete", 1)  # the level falls to 1: not news
    assert spec.level(state, 1) == (1, 1, 1) and not spec.report_due(state, 1)
    state = step(spec, state, "receiver_flush", 0)
    state = step(spec, state, "deliver", 0, only_message(state.to_sender[0]))
    # The top-up arrived and nothing waits for it, but owner 2 is still in flight: not idle
    # yet (a return now would be topped straight back up while owner 2's landing is pending).
    assert spec.available(state.senders[0]) == (1, 1, 1) and not spec.report_due(state, 1)
    state = step(spec, step(spec, state, "land", 2), "complete", 2)
    assert spec.report_due(state, 1)  # drained: idle, due after its hold (the next flush)
    state = step(spec, state, "sender_flush", 0)
    back = only_message(state.to_receiver[0])
    assert back.returned == (1, 1, 1) and back.demand == (0, 0, 0)  # no level left
    state = step(spec, state, "deliver", 0, back)
    assert state.receivers[0].reclaimed == (1, 1, 1)
    assert state.receivers[0].level == (0, 0, 0) and not state.line


def test_the_activation_grant_is_not_idle_before_the_first_report() -> None:
    spec = _lone_key(initial_grant=(2, 2, 2))
    state = spec.initial_states()[0]
    assert spec.available(state.senders[0]) == (2, 2, 2) and not spec.report_due(state, 1)
    state = step(spec, step(spec, state, "admit", 0), "pick", 2, 2)
    state = step(spec, step(spec, state, "submit", 1, True), "sender_flush", 0)
    rise = only_message(state.to_receiver[0])
    assert rise.returned == (0, 0, 0) and rise.demand == (2, 2, 2)  # consumed 1 + level 1
    assert not spec.report_due(state, 1)  # the unused half waits while owner 1 is in flight
    state = step(spec, step(spec, state, "land", 1), "complete", 1)
    # after the first report, with the work drained, the unused half is idle: it goes back
    assert spec.report_due(state, 1)
    state = step(spec, state, "sender_flush", 0)
    back = max(m for m, _n in state.to_receiver[0])
    assert back.returned == (1, 1, 1)


def test_retry_is_set_while_a_key_waits_in_the_line_or_is_capped() -> None:
    # Two keys, capacity for one charge: key 1 is granted it; key 2 waits in the line.
    config = small_config(
        keys=2,
        workload=(OwnerSpec(1, 1), OwnerSpec(2, 1)),
        capacity=(1, 1, 1),
        max_grant=(1, 1, 1),
        initial_grant=(0, 0, 0),
    )
    spec = GatedSpec(config)
    state = spec.initial_states()[0]
    state = step(spec, step(spec, state, "admit", 0), "admit", 1)
    state = step(spec, state, "pick", 2, 2)
    for k in (0, 1):
        state = step(spec, state, "sender_flush", k)
        state = step(spec, state, "deliver", k, only_message(state.to_receiver[k]))
    assert state.line == (1,) and state.receivers[0].granted == (1, 1, 1)
    for k in (0, 1):
        state = step(spec, state, "receiver_flush", k)
    first, second = (only_message(state.to_sender[k]) for k in (0, 1))
    assert (first.grants, first.retry) == ((1, 1, 1), False)
    assert (second.grants, second.retry) == ((0, 0, 0), True)
    # A key whose level exceeds its share is capped: told to wait, even when granted.
    capped = _lone_key(capacity=(1, 1, 1), max_grant=(1, 1, 1))
    state = capped.initial_states()[0]
    state = step(capped, step(capped, state, "admit", 0), "admit", 1)
    state = step(capped, state, "pick", 2, 2)
    state = step(capped, state, "sender_flush", 0)
    state = step(capped, state, "deliver", 0, only_message(state.to_receiver[0]))
    state = step(capped, state, "receiver_flush", 0)
    update = only_message(state.to_sender[0])
    assert (update.grants, update.retry) == ((1, 1, 1), True) and not state.line
