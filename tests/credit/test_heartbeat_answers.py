"""A heartbeat buys at most one refresh per HEARTBEAT_ANSWER_NS per key (issue 27 item 4).

An authenticated peer that sent 1,500 heartbeats a second, within its control rate, made the
receiver encode and send 1,500 refreshes a second. The honest sender's heartbeat (once per
half TTL, when no update came) is still answered.
"""

from __future__ import annotations

import pytest
from test_endpoints import config, pump

from tent_credit import SessionId
from tent_credit._endpoints import CreditReceiver, SenderEndpoint
from tent_credit._messages import Heartbeat, ReceiverCreditUpdate
from tent_credit._receiver_endpoint import HEARTBEAT_ANSWER_NS, ReceiverEndpoint
from tent_credit._wire import decode, encode

MS = 1_000_000


def _active(ttl_ms: int = 0) -> tuple[CreditReceiver, ReceiverEndpoint]:
    rx = CreditReceiver(config(), SessionId(1), freshness_ttl_ms=ttl_ms)
    ep = rx.accept(7)
    tx = SenderEndpoint(sender_peer=7)
    tx.connect(0)
    pump(tx, rx, 0)
    assert ep.version
    return rx, ep


def _beat(rx: CreditReceiver, ep: ReceiverEndpoint) -> bytes:
    return encode(Heartbeat(receiver_session_id=rx.session, epoch=ep.epoch))


def _refreshes(ep: ReceiverEndpoint, now: int) -> int:
    return sum(isinstance(decode(m), ReceiverCreditUpdate) for m in ep.messages_to_send(now))


def test_a_lone_heartbeat_is_answered_with_a_refresh() -> None:
    rx, ep = _active()
    now = 50 * MS  # long after the activation's update
    assert ep.receive_message(_beat(rx, ep), now) == []
    assert _refreshes(ep, now) == 1
    assert ep.statistics().heartbeats_unanswered == 0


def test_a_burst_of_heartbeats_gets_one_refresh_per_interval() -> None:
    rx, ep = _active()
    now = 50 * MS
    for i in range(100):  # one read batch: all before the flush, all answered by one refresh
        ep.receive_message(_beat(rx, ep), now + i)
    assert _refreshes(ep, now + 100) == 1
    assert ep.statistics().heartbeats_unanswered == 0
    # more within the interval after that refresh: counted, not answered
    for i in range(100):
        ep.receive_message(_beat(rx, ep), now + 200 + i * 1000)
        assert _refreshes(ep, now + 200 + i * 1000) == 0
    assert ep.statistics().heartbeats_unanswered == 100
    # the interval over: the next heartbeat is answered again
    later = now + 100 + HEARTBEAT_ANSWER_NS
    ep.receive_message(_beat(rx, ep), later)
    assert _refreshes(ep, later) == 1
    assert ep.statistics().heartbeats_unanswered == 100


def test_a_heartbeat_just_after_an_update_is_not_answered() -> None:
    rx, ep = _active()
    now = 50 * MS
    ep.receive_message(_beat(rx, ep), now)
    assert _refreshes(ep, now) == 1  # an update went out at ``now``
    ep.receive_message(_beat(rx, ep), now + HEARTBEAT_ANSWER_NS - 1)
    assert _refreshes(ep, now + HEARTBEAT_ANSWER_NS - 1) == 0
    ep.receive_message(_beat(rx, ep), now + HEARTBEAT_ANSWER_NS)
    assert _refreshes(ep, now + HEARTBEAT_ANSWER_NS) == 1


@pytest.mark.parametrize(("ttl_ms", "interval_ns"), [(8, 2 * MS), (1000, HEARTBEAT_ANSWER_NS)])
def test_a_short_freshness_ttl_shortens_the_interval_to_a_quarter_of_it(
    ttl_ms: int, interval_ns: int
) -> None:
    # an honest sender with an 8 ms TTL heartbeats every 4 ms when no update comes: each must
    # be answered, or it would go stale between them
    rx, ep = _active(ttl_ms)
    now = 50 * MS
    ep.receive_message(_beat(rx, ep), now)
    assert _refreshes(ep, now) == 1
    ep.receive_message(_beat(rx, ep), now + interval_ns - 1)
    assert _refreshes(ep, now + interval_ns - 1) == 0
    ep.receive_message(_beat(rx, ep), now + interval_ns)
    assert _refreshes(ep, now + interval_ns) == 1
