"""Usage reports on the receiver: validated whole, then applied (issue 10 items 4 and 7)."""

from __future__ import annotations

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from tent_credit import (
    CreditCharge,
    CreditReceiver,
    CreditResource,
    SenderEndpoint,
    SessionId,
    encode,
)
from tent_credit._allocator import AllocatorConfig
from tent_credit._messages import CreditAmount, SenderCreditUsage

Q = CreditResource.REQUEST_SLOTS
STAGING = CreditResource.STAGING_SLOTS  # not modelled by this receiver
SESSION = SessionId(9)


def receiver(slots: int = 8) -> CreditReceiver:
    config = AllocatorConfig(
        capacity={Q: slots}, control_slots=2, max_grant={Q: slots}, max_keys=8, retry_after_us=50
    )
    # version 1's absolute demand targets (version 2: tests/credit/test_grant_ahead.py)
    return CreditReceiver(config, SESSION, versions=(1,))


def usage(
    seq: int,
    *,
    returned: dict[CreditResource, int] | None = None,
    demand: dict[CreditResource, int] | None = None,
) -> bytes:
    return encode(
        SenderCreditUsage(
            receiver_session_id=SESSION,
            epoch=1,
            sequence=seq,
            qos_class=0,
            returned_totals=tuple(
                CreditAmount(resource=r, amount=a) for r, a in (returned or {}).items()
            ),
            pending_demand=tuple(
                CreditAmount(resource=r, amount=a) for r, a in (demand or {}).items()
            ),
        )
    )


def test_a_report_with_an_unmodelled_demand_is_refused_whole_and_stalled_senders_are_pushed() -> (
    None
):
    rx = receiver()
    a, b = rx.accept(1), rx.accept(2)
    a.receive_message(usage(1, demand={Q: 8}), 0)
    assert rx.allocator.free(Q) == 0
    b.receive_message(usage(1, demand={Q: 1}), 0)
    assert b.stalled
    # a's returns ride with a demand this receiver cannot model: nothing of it applies
    events = a.receive_message(usage(2, returned={Q: 8}, demand={STAGING: 1}), 1)
    assert [e.kind for e in events] == ["protocol_violation"]
    assert rx.allocator.free(Q) == 0 and b.stalled
    assert rx.allocator.key_totals(1, 0, 1).reclaimed_by_return[Q] == 0
    # totals are cumulative: the next valid report carries the same returns, and they push b
    a.receive_message(usage(3, returned={Q: 8}), 2)
    assert not b.stalled
    assert rx.allocator.key_totals(2, 0, 1).granted[Q] == 1


_VECTORS = st.dictionaries(st.sampled_from(list(CreditResource)), st.integers(0, 12), max_size=3)


@settings(max_examples=150, deadline=None)
@given(reports=st.lists(st.tuples(_VECTORS, _VECTORS), min_size=1, max_size=8))
def test_a_refused_report_changes_nothing(
    reports: list[tuple[dict[CreditResource, int], dict[CreditResource, int]]],
) -> None:
    """The class of item 4: any report answered with a violation left the receiver as it was."""
    rx = receiver()
    a, b = rx.accept(1), rx.accept(2)
    a.receive_message(usage(1, demand={Q: 6}), 0)
    b.receive_message(usage(1, demand={Q: 4}), 0)
    for seq, (returned, demand) in enumerate(reports, start=2):
        before = (rx.allocator.statistics(), rx.allocator.key_totals(1, 0, 1), b.stalled)
        events = a.receive_message(usage(seq, returned=returned, demand=demand), seq)
        if any(e.kind == "protocol_violation" for e in events):
            after = (rx.allocator.statistics(), rx.allocator.key_totals(1, 0, 1), b.stalled)
            assert attrs.evolve(after[0], protocol_violations=0) == attrs.evolve(
                before[0], protocol_violations=0
            )
            assert after[1:] == before[1:]
        # never reclaimed without pushing: free capacity and a stalled sender do not coexist
        assert not (rx.allocator.free(Q) > 0 and b.stalled)


# ---- item 7: demand withdrawal -----------------------------------------------------------------


def _pump(
    sender: SenderEndpoint, rx: CreditReceiver, now: int, *, lose_usage: bool = False
) -> None:
    ep = rx.endpoint(sender.sender_peer)
    assert ep is not None
    for data in sender.messages_to_send(now):
        if not lose_usage:
            ep.receive_message(data, now)
    sender.receive_batch(ep.messages_to_send(now), now)


def _sender(peer: int, rx: CreditReceiver) -> SenderEndpoint:
    tx = SenderEndpoint(sender_peer=peer, usage_interval_ns=0)
    rx.accept(peer)
    tx.connect(0)
    for now in range(3):
        _pump(tx, rx, now)
    return tx


def test_withdrawn_demand_lets_freed_capacity_reach_the_key_that_still_waits() -> None:
    # Item 7: an idle sender's demand could never go down within an epoch, so it absorbed
    # freed capacity while another key starved.
    rx = receiver()
    idle, starved, holder = _sender(1, rx), _sender(2, rx), _sender(3, rx)
    holder.set_pending_demand({Q: 8})
    _pump(holder, rx, 10)
    assert rx.allocator.free(Q) == 0
    idle.set_pending_demand({Q: 8})
    _pump(idle, rx, 11)
    starved.set_pending_demand({Q: 8})
    _pump(starved, rx, 12)
    idle.set_pending_demand({})  # its work was cancelled
    _pump(idle, rx, 13)
    holder.return_unused(CreditCharge.of({Q: 8}))
    _pump(holder, rx, 14)
    assert rx.allocator.key_totals(2, 0, 1).granted[Q] == 8
    assert rx.allocator.key_totals(1, 0, 1).granted[Q] == 0


def test_a_lost_withdrawal_is_reported_again_when_the_receiver_still_answers_blocked() -> None:
    config = AllocatorConfig(
        capacity={Q: 8}, control_slots=2, max_grant={Q: 8}, max_keys=8, retry_after_us=50
    )
    rx = CreditReceiver(config, SESSION, refresh_interval_ns=5, versions=(1,))
    idle, holder = _sender(1, rx), _sender(3, rx)
    holder.set_pending_demand({Q: 8})
    _pump(holder, rx, 10)
    idle.set_pending_demand({Q: 4})
    _pump(idle, rx, 11)  # blocked: the receiver answers with retry_after_us
    ep = rx.endpoint(1)
    assert ep is not None and ep.stalled
    idle.set_pending_demand({})
    _pump(idle, rx, 12, lose_usage=True)  # the withdrawal is lost
    assert ep.stalled and idle.messages_to_send(13) == []
    idle.receive_batch(ep.messages_to_send(20), 20)  # the refresh still says "blocked"
    for data in idle.messages_to_send(21):  # ... so the sender reports its withdrawal again
        ep.receive_message(data, 21)
    assert not ep.stalled
    assert rx.allocator.statistics().keys_with_demand == 0
