"""When a sender's usage report goes out: paced by the usage interval, except the report of a
sender that starts wanting (its demand is unmet and the receiver believes it needs nothing)."""

from __future__ import annotations

from test_endpoints import CHARGE, config, demand

from tent_credit._endpoints import CreditReceiver, SenderEndpoint
from tent_credit._ledger import ReservationToken
from tent_credit._messages import SenderCreditUsage
from tent_credit._types import CreditResource, SessionId
from tent_credit._wire import decode

INTERVAL = 1_000_000


def _usages(tx: SenderEndpoint, now: int) -> list[SenderCreditUsage]:
    return [m for m in map(decode, tx.messages_to_send(now)) if isinstance(m, SenderCreditUsage)]


def _active_pair() -> tuple[SenderEndpoint, CreditReceiver]:
    # the pacing of version 1's demand reports (version 2 reports only news:
    # tests/credit/test_grant_ahead.py)
    rx = CreditReceiver(config(slots=8, max_grant_slots=8), SessionId(1), versions=(1,))
    ep = rx.accept(7)
    tx = SenderEndpoint(sender_peer=7, usage_interval_ns=INTERVAL)
    tx.connect(0)
    for data in tx.messages_to_send(0):
        ep.receive_message(data, 0)
    tx.receive_batch(ep.messages_to_send(0), 0)
    return tx, rx


def _grant(tx: SenderEndpoint, rx: CreditReceiver, now: int) -> None:
    ep = rx.endpoints()[0]
    for data in tx.messages_to_send(now):
        ep.receive_message(data, now)
    tx.receive_batch(ep.messages_to_send(now), now)


def _consume_one(tx: SenderEndpoint, now: int) -> None:
    token = tx.try_reserve(CHARGE, now)
    assert isinstance(token, ReservationToken)
    tx.commit(token)


def test_a_sender_that_starts_wanting_reports_within_the_interval() -> None:
    tx, rx = _active_pair()
    demand(tx, 1)
    _grant(tx, rx, 10)  # reported at 10 and granted one transfer's worth
    _consume_one(tx, 20)
    demand(tx, 1)  # the next transfer: consumed + 1 is beyond the grant
    (usage,) = _usages(tx, 30)  # 20 ns after the last report, not an interval
    wanted = {a.resource: a.amount for a in usage.pending_demand}
    assert wanted[CreditResource.REQUEST_SLOTS] == 2


def test_a_demand_the_receiver_already_knows_is_unmet_waits_the_interval() -> None:
    tx, rx = _active_pair()
    demand(tx, 100)  # far beyond the 8 slots the receiver has
    _grant(tx, rx, 10)
    demand(tx, 101)  # more of the same: the receiver still holds the unmet report
    assert _usages(tx, 20) == []
    assert tx.get_timer() == 10 + INTERVAL
    (usage,) = _usages(tx, 10 + INTERVAL)  # re-reported one interval later, with the new target
    wanted = {a.resource: a.amount for a in usage.pending_demand}
    assert wanted[CreditResource.REQUEST_SLOTS] == 101


def test_consumption_alone_waits_the_interval() -> None:
    tx, rx = _active_pair()
    demand(tx, 2)
    _grant(tx, rx, 10)
    _consume_one(tx, 20)  # consumption changed; demand (2) is still covered by the grant
    assert _usages(tx, 30) == []
    assert len(_usages(tx, 10 + INTERVAL)) == 1


def test_the_timer_asks_for_an_immediate_report_when_a_sender_starts_wanting() -> None:
    tx, rx = _active_pair()
    demand(tx, 1)
    _grant(tx, rx, 10)
    _consume_one(tx, 20)
    demand(tx, 1)
    timer = tx.get_timer()
    assert timer is not None and timer <= 20  # due now, not at 10 + INTERVAL
