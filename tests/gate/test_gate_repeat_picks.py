"""A blocked owner is asked again at every dispatch pass until credit comes (issue 25's profile:
about three picks per transfer, most of them blocked). The repeats reuse what they already made
(the charge, the backpressure signal, the stated level) and must still answer exactly as a first
pick would."""

from __future__ import annotations

import pytest
from test_gate import RX, SLOT, Rig, picked_ids

from tent_credit import BackpressureSource, CreditResource, Plan
from tent_credit._gate_values import DispatchContext
from tent_credit.errors import InvalidArgument


def test_a_repeated_blocked_pick_answers_as_the_first_and_states_the_same_level() -> None:
    rig = Rig()
    tx = rig.connect(RX, receiver_versions=(1, 2))  # grant-ahead: the level is what is stated
    assert tx.ahead
    a, b = rig.admit(), rig.admit()
    first = rig.pick()
    infos = [rig.gate.stall(a), rig.gate.stall(b)]
    level = dict(tx.level())
    due = tx.messages_to_send(rig.now)  # the level's rise is news once
    assert due
    for _ in range(3):
        again = rig.pick()
        assert again.blocked == first.blocked == (a, b)
        assert [rig.gate.stall(a), rig.gate.stall(b)] == infos
        assert dict(tx.level()) == level
        assert tx.messages_to_send(rig.now) == []  # restating the same level is no news
    stall = rig.gate.stall(a)
    assert stall is not None and stall.info.source is BackpressureSource.RECEIVER_CREDIT
    assert rig.gate.statistics().routes[0].blocked == 4  # every blocked pick is still counted
    receiver = next(e for e in rig.receivers[RX].endpoints() if not e.closed)
    for data in due:  # the one report reaches the receiver, which grants the stated level
        receiver.receive_message(data, rig.now)
    rig.exchange()
    assert picked_ids(rig.pick()) == [a, b]


def test_a_changed_retry_hint_is_a_new_signal_not_the_remembered_one() -> None:
    rig = Rig()
    tx = rig.connect(RX)
    rig.admit()
    blocked = tx.try_reserve(rig.gate.context(Plan.REMOTE_DIRECT_WRITE, RX).charge(SLOT), rig.now)
    assert not hasattr(blocked, "token_id") and blocked.retry_after_us == 0
    tx._retry_after_us = 250  # what a receiver update's hint sets
    again = tx.try_reserve(rig.gate.context(Plan.REMOTE_DIRECT_WRITE, RX).charge(SLOT), rig.now)
    assert again.retry_after_us == 250
    assert again.exhausted == tuple(sorted(CreditResource(r) for r in again.exhausted))


def test_the_remembered_charge_refuses_a_bool_length_after_the_int_one() -> None:
    ctx = DispatchContext(plan=Plan.REMOTE_DIRECT_WRITE, receiver=RX)
    assert ctx.charge(1) is ctx.charge(1)  # one frozen object per (plan, length, requests)
    with pytest.raises(InvalidArgument):
        ctx.charge(True)  # True == 1 and hashes alike: the memo must not answer it
