"""DispatchGate route removal and replacement with fencing semantics (issue 10, item 14).

Before: a route could be added but never removed or replaced, so past ``max_routes`` every new
receiver got TMR and a REQUIRED peer that failed negotiation once stayed stuck until the gate
was rebuilt.
"""

from __future__ import annotations

import pytest
from test_gate import RX, RX2, SLOT, Rig, picked_ids, pump, rx_config

from tent_credit import (
    CreditMode,
    CreditReceiver,
    DispatchContext,
    DispatchGate,
    GateConfig,
    GateRejected,
    NegotiationState,
    Plan,
    RejectReason,
    SenderEndpoint,
    SessionId,
    TicketState,
)
from tent_credit.errors import InvalidArgument, InvalidEntry, TooManyRequests
from tent_sched import OwnerRequest, OwnerState, TaskStatus


def test_removing_a_route_frees_a_slot_for_a_new_receiver() -> None:
    gate = DispatchGate(GateConfig(mode=CreditMode.REQUIRED, max_routes=1))
    old = SenderEndpoint(sender_peer=7)
    gate.add_endpoint(RX, old)
    with pytest.raises(TooManyRequests):
        gate.add_endpoint(RX2, SenderEndpoint(sender_peer=7))
    removal = gate.remove_endpoint(RX)
    assert (removal.receiver, removal.qos_class, removal.endpoint) == (RX, 0, old)
    gate.add_endpoint(RX2, SenderEndpoint(sender_peer=7))
    assert [(r.receiver, r.qos_class) for r in gate.statistics().routes] == [(RX2, 0)]
    with pytest.raises(InvalidEntry):
        gate.endpoint(RX)


def test_removal_rolls_back_reserved_tokens_exactly() -> None:
    rig = Rig(CreditMode.REQUIRED)
    rig.connect(RX, initial=2)
    a, b = rig.admit(), rig.admit()
    result = rig.pick(commit=False)
    assert picked_ids(result) == [a, b]
    assert rig.consumed()  # both reserved
    removal = rig.gate.remove_endpoint(RX)
    assert (removal.rolled_back, removal.in_flight) == (2, 0)
    tx = removal.endpoint
    assert tx.key is not None
    assert not any(tx.ledger.entry(tx.key).consumed.values())  # exact credit restored
    token = rig.tokens[a]
    assert token.state is TicketState.ROLLED_BACK  # type: ignore[attr-defined]
    with pytest.raises(InvalidEntry):
        rig.gate.commit(token)
    assert rig.gate.statistics().unsettled_tokens == 0


def test_queued_owners_of_a_removed_route_are_rejected_not_raised() -> None:
    rig = Rig(CreditMode.REQUIRED)
    rig.connect(RX, initial=1)
    first, stalled = rig.admit(), rig.admit()
    result = rig.pick()
    assert picked_ids(result) == [first] and result.blocked == (stalled,)
    assert rig.gate.stall(stalled) is not None
    removal = rig.gate.remove_endpoint(RX)
    assert (removal.stalls_dropped, removal.in_flight) == (1, 1)
    assert rig.gate.stall(stalled) is None
    later = rig.pick()
    assert later.rejected == (stalled,)
    assert rig.queue.owner_state(stalled) == (OwnerState.TERMINAL, TaskStatus.FAILED)
    # an unpinned owner of the recently removed route is rejected too (not InvalidEntry)
    unpinned = DispatchContext(plan=Plan.REMOTE_DIRECT_WRITE, receiver=RX)
    request = OwnerRequest(public_id=99, length=SLOT, gate_key=unpinned.gate_key, context=unpinned)
    (late,) = rig.queue.try_admit(2, 1 << 20, [request])
    verdict = rig.gate(rig.queue.owner(late), rig.now)
    assert verdict == GateRejected(RejectReason.ROUTE_REMOVED)
    assert rig.pick().rejected == (late,)
    with pytest.raises(InvalidEntry):  # a route that never existed is misuse
        rig.gate.context(Plan.REMOTE_DIRECT_WRITE, RX2)
    # the committed owner still completes on the old endpoint
    rig.finish(first)
    assert rig.tokens[first].state is TicketState.COMPLETED  # type: ignore[attr-defined]


def test_replacing_a_failed_required_peer_re_points_unpinned_owners() -> None:
    rig = Rig(CreditMode.REQUIRED)
    failed = rig.connect(RX, receiver_versions=(9,))  # no common version: FAILED
    assert failed.state is NegotiationState.FAILED
    owner = rig.admit()  # unpinned: the failed route has no snapshot
    # the peer is fixed and reconnects: a new endpoint on the same route
    rx = CreditReceiver(rx_config(), SessionId(777), initial_grant={}, versions=(1,))
    rx.accept(7, 0)
    fresh = SenderEndpoint(sender_peer=7)
    removal = rig.gate.replace_endpoint(RX, fresh)
    assert removal.endpoint is failed
    fresh.connect(rig.now)
    pump(fresh, rx, rig.now)
    assert fresh.state is NegotiationState.ACTIVE
    rig.receivers[RX], rig.endpoints[(RX, 0)] = rx, fresh
    assert rig.gate.endpoint(RX) is fresh
    blocked = rig.pick()  # re-pointed: the new endpoint asks its receiver for credit
    assert blocked.blocked == (owner,) and blocked.rejected == ()
    rig.exchange()
    assert picked_ids(rig.pick()) == [owner]


def test_owners_pinned_to_the_replaced_endpoint_are_fenced() -> None:
    rig = Rig(CreditMode.REQUIRED)
    rig.connect(RX, initial=1)
    pinned = rig.admit()
    assert rig.queue.owner(pinned).context.snapshot is not None  # type: ignore[attr-defined]
    rig.gate.replace_endpoint(RX, SenderEndpoint(sender_peer=7))
    result = rig.pick()
    assert result.rejected == (pinned,)


def test_remove_and_replace_validate_before_changing_anything() -> None:
    rig = Rig(CreditMode.REQUIRED)
    tx = rig.connect(RX, initial=1)
    rig.pick(commit=False)
    before = rig.gate.statistics()
    with pytest.raises(InvalidEntry):
        rig.gate.remove_endpoint(RX2)
    with pytest.raises(InvalidArgument):
        rig.gate.remove_endpoint(-1)
    with pytest.raises(InvalidArgument):
        rig.gate.remove_endpoint(RX, 1 << 32)
    with pytest.raises(InvalidArgument):
        rig.gate.replace_endpoint(RX, tx)  # already the route's endpoint
    with pytest.raises(InvalidArgument):
        rig.gate.replace_endpoint(RX, SenderEndpoint(sender_peer=7, mode=CreditMode.OPTIONAL))
    with pytest.raises(InvalidArgument):
        rig.gate.replace_endpoint(RX, "endpoint")  # type: ignore[arg-type]
    with pytest.raises(InvalidEntry):
        rig.gate.replace_endpoint(RX2, SenderEndpoint(sender_peer=7))
    assert rig.gate.statistics() == before
    assert rig.gate.endpoint(RX) is tx
