"""Which stalled sender the receiver pushes freed capacity to first (issue 13).

The receiver used to visit its endpoints in connection order, so with capacity freed one unit
at a time the first-connected stalled sender took every unit (in a 16-sender incast, 11 of 16
senders waited 10 s). Under the default max-min split it now pushes longest waiting first: a
sender takes the back of the order when it stalls, and again once it was served a full grant
(``max_grant``) while stalled.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tent_credit import CreditReceiver, CreditResource, GrantSplit, SessionId, encode
from tent_credit._allocator import AllocatorConfig
from tent_credit._messages import CreditAmount, SenderCreditUsage

Q = CreditResource.REQUEST_SLOTS
HUGE = 2**64 - 1
SESSION = SessionId(3)


def config(capacity: int, max_grant: int = 1, **overrides: Any) -> AllocatorConfig:
    fields: dict[str, Any] = {
        "capacity": {Q: capacity},
        "control_slots": 2,
        "max_grant": {Q: max_grant},  # 1: a full grant is one unit, every free a push decision
        "max_keys": 64,
        "retry_after_us": 10,
    }
    fields.update(overrides)
    return AllocatorConfig(**fields)


def report(seq: int, target: int) -> bytes:
    """A usage report whose demand target is ``target`` (cumulative)."""
    return encode(
        SenderCreditUsage(
            receiver_session_id=SESSION,
            epoch=1,
            sequence=seq,
            qos_class=0,
            pending_demand=(CreditAmount(resource=Q, amount=target),) if target else (),
        )
    )


def outstanding(rx: CreditReceiver, peer: int) -> int:
    return rx.allocator.key_totals(peer, 0, 1).outstanding[Q]


def granted(rx: CreditReceiver, peer: int) -> int:
    return rx.allocator.key_totals(peer, 0, 1).granted[Q]


def incast(senders: int, capacity: int, frees: int, max_grant: int = 1) -> list[int]:
    """``senders`` keys that always want more, ``capacity`` units, and a consumer that frees
    the oldest landed unit, one at a time, ``frees`` times. Returns who each free went to."""
    rx = CreditReceiver(config(capacity, max_grant), SESSION)
    endpoints = {peer: rx.accept(peer) for peer in range(1, senders + 1)}
    for peer, endpoint in endpoints.items():  # connection order = report order
        endpoint.receive_message(report(1, HUGE), peer)
    assert all(endpoint.stalled for endpoint in endpoints.values())
    held = [peer for peer in endpoints for _ in range(outstanding(rx, peer))]  # landing order
    assert len(held) == capacity and rx.allocator.free(Q) == 0
    assert all(endpoint.stalled for endpoint in endpoints.values())
    served: list[int] = []
    for _ in range(frees):
        peer = held.pop(0)
        before = {p: granted(rx, p) for p in endpoints}
        rx.data_landed(peer, 0, 1, {Q: 1})
        rx.release(peer, 0, 1, {Q: 1})  # one unit frees: the receiver pushes it
        (winner,) = [p for p in endpoints if granted(rx, p) > before[p]]
        assert granted(rx, winner) == before[winner] + 1 and rx.allocator.free(Q) == 0
        served.append(winner)
        held.append(winner)
    return served


@pytest.mark.parametrize(("senders", "capacity"), [(4, 1), (16, 1), (16, 8), (5, 3)])
def test_every_stalled_sender_is_granted_within_one_free_per_sender(
    senders: int, capacity: int
) -> None:
    frees = 4 * senders
    served = incast(senders, capacity, frees)
    # the bound: between two grants to a sender (and before its first) at most `senders` frees
    for peer in range(1, senders + 1):
        at = [i for i, winner in enumerate(served) if winner == peer]
        assert at, f"sender {peer} was never granted in {frees} frees"
        gaps = [at[0] + 1] + [b - a for a, b in itertools.pairwise(at)]
        gaps.append(frees - at[-1])
        assert max(gaps) <= senders, (peer, served)
    # and it is a rotation: any `senders` consecutive frees reach every sender once
    for i in range(frees - senders + 1):
        assert sorted(served[i : i + senders]) == list(range(1, senders + 1))


def test_the_push_order_is_longest_waiting_first_and_a_serve_goes_to_the_back() -> None:
    rx = CreditReceiver(config(1), SESSION)
    holder, a, b, c = (rx.accept(peer) for peer in (1, 2, 3, 4))
    holder.receive_message(report(1, 1), 0)  # takes the only unit, wants no more
    assert not holder.stalled
    for seq, endpoint in ((1, c), (1, a), (1, b)):  # stalled in the order c, a, b
        endpoint.receive_message(report(seq, HUGE), 1)
    assert [ep.sender_peer for ep in rx.stalled_endpoints()] == [4, 2, 3]
    # a re-report while blocked keeps the sender's place (a chatty sender cannot jump ahead
    # and does not lose its turn)
    a.receive_message(report(2, HUGE), 2)
    b.receive_message(report(2, HUGE), 2)
    assert [ep.sender_peer for ep in rx.stalled_endpoints()] == [4, 2, 3]
    rx.data_landed(1, 0, 1, {Q: 1})
    rx.release(1, 0, 1, {Q: 1})
    assert granted(rx, 4) == 1  # c waited longest, though it connected last
    assert [ep.sender_peer for ep in rx.stalled_endpoints()] == [2, 3, 4]
    # a withdrawn demand leaves the order; asking again queues at the back
    a.receive_message(report(3, 0), 3)
    assert [ep.sender_peer for ep in rx.stalled_endpoints()] == [3, 4]
    a.receive_message(report(4, HUGE), 4)
    assert [ep.sender_peer for ep in rx.stalled_endpoints()] == [3, 4, 2]
    assert a.waiting_since > c.waiting_since > b.waiting_since


def test_closed_and_quarantined_endpoints_are_not_pushed() -> None:
    rx = CreditReceiver(config(1), SESSION)
    holder, a, b = (rx.accept(peer) for peer in (1, 2, 3))
    holder.receive_message(report(1, 1), 0)
    a.receive_message(report(1, HUGE), 1)
    b.receive_message(report(1, HUGE), 1)
    rx.disconnect(2)
    assert [ep.sender_peer for ep in rx.stalled_endpoints()] == [3]
    assert not rx.admit_write(3, 0, 1, {Q: 1}).accepted  # over its credit: quarantined
    assert rx.stalled_endpoints() == ()


def test_first_come_keeps_the_old_connection_order() -> None:
    # GrantSplit.FIRST_COME is the old policy kept for comparison (and the one tent_spec.gated
    # models, pushing in key order): the first-connected stalled sender takes every free unit.
    rx = CreditReceiver(config(1, grant_split=GrantSplit.FIRST_COME), SESSION)
    endpoints = [rx.accept(peer) for peer in (1, 2, 3)]
    for endpoint in reversed(endpoints):
        endpoint.receive_message(report(1, HUGE), 0)
    assert [ep.sender_peer for ep in rx.stalled_endpoints()] == [1, 2, 3]
    holder = next(p for p in (1, 2, 3) if outstanding(rx, p))
    rx.data_landed(holder, 0, 1, {Q: 1})
    rx.release(holder, 0, 1, {Q: 1})
    assert outstanding(rx, 1) == 1


def test_a_served_sender_keeps_its_place_until_it_had_a_full_grant() -> None:
    # max_grant 2 (the RFC's lease batch 2): a sender is served two units in a row, then goes
    # to the back, so a lease batch still costs one turn, not two
    senders, frees = 5, 40
    served = incast(senders, 1, frees, max_grant=2)
    # (sender 1's unit at its own report came with its stall: a new stall counts from zero)
    assert served[:10] == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert served[10:20] == served[:10]  # a rotation
    for peer in range(1, senders + 1):
        at = [i for i, winner in enumerate(served) if winner == peer]
        gaps = [at[0] + 1] + [b - a for a, b in itertools.pairwise(at)] + [frees - at[-1]]
        assert max(gaps) <= (senders - 1) * 2 + 1, (peer, served)
