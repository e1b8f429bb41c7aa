"""The gate gives back a route's idle credit once none of its waiting owners needs it.

Issue 10 item 8, the gate half (``gated/hoarding`` in docs/spec_review_gated.md): two QoS
classes of one sender share a receiver whose capacity is one owner's worth. Class 0 is granted
that owner, then its owner leaves without using it (the submit is refused, the owner is
canceled, or it dispatches and the grant was larger than its need). Without the return path the
credit stays idle on class 0 and class 1 waits forever; with it, the gate returns the idle
credit (``SenderEndpoint.return_unused``), withdraws class 0's demand, the receiver reclaims the
return and pushes the freed capacity to class 1, which dispatches.
"""

from __future__ import annotations

import itertools

import pytest
from prometheus_client.registry import CollectorRegistry

from tent_credit import (
    AllocatorConfig,
    CreditMode,
    CreditReceiver,
    CreditResource,
    DispatchGate,
    GateConfig,
    Plan,
    SenderEndpoint,
    SessionId,
    charge_for_plan,
)
from tent_credit.errors import InvalidArgument, InvalidEntry
from tent_credit.metrics import GateCollector
from tent_sched import AdmissionQueue, OwnerRequest, PickResult, QueueLimits, TaskStatus

R = CreditResource
SLOT = 4096
RX = 1
PEER = 7
_CHARGE = charge_for_plan(Plan.REMOTE_DIRECT_WRITE, SLOT)
assert _CHARGE is not None
ONE = _CHARGE.as_dict()


def owners(n: int) -> dict[CreditResource, int]:
    return {r: a * n for r, a in ONE.items()}


class TwoClasses:
    """One sender (queue, gate, an endpoint per class) and one receiver of ``capacity`` owners."""

    def __init__(self, capacity: int = 1) -> None:
        config = AllocatorConfig(
            capacity=owners(capacity),
            control_slots=2,
            max_grant=owners(capacity),
            max_keys=4,
            retry_after_us=100,
        )
        # version 1's demand targets (the idle return itself is version-independent)
        self.receiver = CreditReceiver(config, SessionId(100), versions=(1,))
        self.gate = DispatchGate(GateConfig(mode=CreditMode.REQUIRED))
        self.queue = AdmissionQueue(
            QueueLimits(max_outstanding_owners=16, max_outstanding_bytes=1 << 30)
        )
        self.now = 1_000
        self.public = itertools.count(1)
        self.tokens: dict[int, object] = {}
        self.endpoints: list[SenderEndpoint] = []
        for qos in (0, 1):
            self.receiver.accept(PEER, qos)
            tx = SenderEndpoint(sender_peer=PEER, qos_class=qos, mode=CreditMode.REQUIRED)
            self.gate.add_endpoint(RX, tx)
            tx.connect(self.now)
            self.endpoints.append(tx)
        self.exchange()

    def exchange(self) -> None:
        """A usage interval passes; both classes exchange control messages until quiet."""
        self.now += 1_000_000
        for _ in range(3):
            for tx in self.endpoints:
                ep = self.receiver.endpoint(PEER, tx.qos_class)
                assert ep is not None
                for data in tx.messages_to_send(self.now):
                    ep.receive_message(data, self.now)
            for tx in self.endpoints:
                ep = self.receiver.endpoint(PEER, tx.qos_class)
                assert ep is not None
                tx.receive_batch(ep.messages_to_send(self.now), self.now)

    def admit(self, qos: int) -> int:
        ctx = self.gate.context(Plan.REMOTE_DIRECT_WRITE, RX, qos)
        request = OwnerRequest(
            public_id=next(self.public), length=SLOT, gate_key=ctx.gate_key, context=ctx
        )
        (owner_id,) = self.queue.try_admit(1, 1 << 20, [request])
        return owner_id

    def pick(self, max_owners: int = 8) -> PickResult:
        result = self.queue.pick_for_dispatch(
            max_owners, 1 << 40, now_ns=self.now, eligibility=self.gate
        )
        self.gate.observe_pick(result, self.queue.owner, self.now)
        for picked in result.picked:
            self.tokens[picked.owner.owner_id] = picked.token
        return result

    def available(self, qos: int) -> dict[CreditResource, int]:
        return {r: a for r, a in self.endpoints[qos].available().items() if a}

    def returned(self, qos: int) -> dict[CreditResource, int]:
        tx = self.endpoints[qos]
        assert tx.key is not None
        return {r: a for r, a in tx.ledger.entry(tx.key).returned.items() if a}

    def outstanding(self, qos: int) -> dict[CreditResource, int]:
        totals = self.receiver.allocator.key_totals(PEER, qos, self.endpoints[qos].epoch)
        return {r: a for r, a in totals.outstanding.items() if a}


def picked_ids(result: PickResult) -> list[int]:
    return [p.owner.owner_id for p in result.picked]


def granted_to_class_0() -> tuple[TwoClasses, int]:
    """Class 0's owner stalls, asks and is granted the receiver's only owner of capacity."""
    rig = TwoClasses()
    a = rig.admit(0)
    assert picked_ids(rig.pick()) == [] and rig.gate.stall(a) is not None
    rig.exchange()
    assert rig.available(0) == ONE and rig.outstanding(0) == ONE
    return rig, a


def class_1_waits_then_dispatches(rig: TwoClasses) -> None:
    """Class 1's owner stalls; after one exchange the freed capacity reaches it."""
    b = rig.admit(1)
    assert picked_ids(rig.pick()) == []
    rig.exchange()
    assert rig.outstanding(0) == {}, "class 0 still holds the receiver's only owner"
    assert picked_ids(rig.pick()) == [b]


def test_a_refused_submit_returns_the_idle_credit_to_the_waiting_class() -> None:
    # The gated/hoarding counterexample: class 0 dispatches, its submit is refused (exact
    # rollback: the credit is available again on class 0) and nothing of class 0 waits.
    rig, a = granted_to_class_0()
    assert picked_ids(rig.pick()) == [a]
    rig.gate.rollback(rig.tokens[a])
    rig.queue.complete(a, TaskStatus.FAILED)
    class_1_waits_then_dispatches(rig)
    assert rig.available(0) == {} and rig.returned(0) == ONE


def test_a_canceled_stalled_owner_withdraws_its_demand_and_returns_its_grant() -> None:
    rig, a = granted_to_class_0()
    rig.queue.cancel(a)
    rig.gate.forget(a)
    class_1_waits_then_dispatches(rig)
    assert rig.returned(0) == ONE
    tx = rig.endpoints[0]
    assert tx.key is not None
    granted = tx.ledger.entry(tx.key).grant_total
    demand = tx.statistics().demand_target
    assert all(t <= granted[r] for r, t in demand.items()), "a withdrawn demand asks no more"


def test_a_canceled_owner_before_the_grant_withdraws_the_demand() -> None:
    # The demand half (gap b): the stalled owner leaves before the receiver answered, so the
    # report the receiver sees asks for nothing and the capacity stays free for class 1.
    rig = TwoClasses()
    a = rig.admit(0)
    rig.pick()
    assert dict(rig.endpoints[0].statistics().demand_target) == ONE
    rig.queue.cancel(a)
    rig.gate.forget(a)
    assert dict(rig.endpoints[0].statistics().demand_target) == {}
    rig.exchange()
    assert rig.outstanding(0) == {} and rig.available(0) == {}
    class_1_waits_then_dispatches(rig)


def test_only_the_credit_no_waiting_owner_needs_goes_back_when_one_of_two_leaves() -> None:
    # Two class-0 owners stall and are granted two owners of capacity; one is canceled: the
    # other still waits for one owner's worth, which stays; the other owner's worth goes back
    # and class 1 gets it.
    rig = TwoClasses(capacity=2)
    a, a2 = rig.admit(0), rig.admit(0)
    rig.pick()
    rig.exchange()
    assert rig.available(0) == owners(2)
    rig.queue.cancel(a2)
    rig.gate.forget(a2)
    assert rig.returned(0) == ONE and rig.available(0) == ONE  # a still waits for this one
    assert dict(rig.endpoints[0].statistics().demand_target) == owners(2)  # granted, not more
    assert picked_ids(rig.pick()) == [a]
    assert rig.available(0) == {}
    rig.gate.commit(rig.tokens[a])
    b, b2 = rig.admit(1), rig.admit(1)
    rig.pick()
    rig.exchange()
    assert picked_ids(rig.pick()) == [b]  # one owner of capacity is free: the returned one
    assert rig.gate.stall(b2) is not None


def test_credit_a_stalled_owner_waits_for_stays_when_another_owner_rolls_back() -> None:
    rig = TwoClasses(capacity=2)
    a, a2 = rig.admit(0), rig.admit(0)
    rig.pick()
    rig.exchange()
    assert picked_ids(rig.pick(max_owners=1)) == [a]
    rig.gate.rollback(rig.tokens[a])
    rig.queue.complete(a, TaskStatus.FAILED)
    # a2 is still credit-stalled on this route: its owner of credit stays, a's goes back
    assert rig.returned(0) == ONE and rig.available(0) == ONE
    assert picked_ids(rig.pick()) == [a2]
    assert rig.gate.statistics().routes[0].idle_returns == 1
    registry = CollectorRegistry()
    GateCollector(registry, rig.gate)
    labels = {"peer": str(RX), "qos_class": "0"}
    assert registry.get_sample_value("tent_credit_gate_idle_returns_total", labels) == 1


def test_an_owner_that_dispatches_returns_nothing_and_a_pick_that_raised_neither() -> None:
    # Work that used its credit, and owners still queued after a pick that raised, keep it.
    rig, a = granted_to_class_0()
    assert picked_ids(rig.pick()) == [a]
    assert rig.returned(0) == {} and rig.gate.statistics().routes[0].idle_returns == 0
    rig.gate.rollback_unsettled()  # as if the pick had raised: a's owner is still queued
    assert rig.returned(0) == {} and rig.available(0) == ONE


@pytest.mark.parametrize("bad", [None, -1, 1 << 64, "1"])
def test_a_refused_forget_returns_nothing(bad: object) -> None:
    rig, _a = granted_to_class_0()
    with pytest.raises(InvalidArgument):
        rig.gate.forget(bad)  # type: ignore[arg-type]
    assert rig.returned(0) == {} and rig.available(0) == ONE


def test_a_refused_rollback_returns_nothing() -> None:
    rig, a = granted_to_class_0()
    assert picked_ids(rig.pick()) == [a]
    token = rig.tokens[a]
    rig.gate.commit(token)
    with pytest.raises(InvalidEntry):
        rig.gate.rollback(token)  # COMMITTED: misuse, nothing changes
    assert rig.returned(0) == {} and rig.available(0) == {}


def test_a_grant_that_answers_a_withdrawn_demand_goes_back_at_the_next_pick() -> None:
    # The race the model checker found (gated/hoarding/ci): class 0's report asking for its
    # stalled owner is in flight when the owner is canceled; the receiver then grants the old
    # demand. Nothing of class 0 waits, so the next pick (for class 1) gives the grant back.
    rig = TwoClasses()
    a = rig.admit(0)
    rig.pick()
    rig.now += 1_000_000
    in_flight = rig.endpoints[0].messages_to_send(rig.now)  # the report with the demand
    rig.queue.cancel(a)
    rig.gate.forget(a)
    ep = rig.receiver.endpoint(PEER, 0)
    assert ep is not None
    for data in in_flight:
        ep.receive_message(data, rig.now)
    rig.endpoints[0].receive_batch(ep.messages_to_send(rig.now), rig.now)  # the late grant
    assert rig.available(0) == ONE and rig.returned(0) == {}
    b = rig.admit(1)
    assert picked_ids(rig.pick()) == []
    assert rig.available(0) == {} and rig.returned(0) == ONE
    rig.exchange()
    assert picked_ids(rig.pick()) == [b]


@pytest.mark.parametrize("how", ["dropped", "rejected"])
def test_a_stalled_owner_the_pick_dropped_or_rejected_returns_the_grant(how: str) -> None:
    # observe_pick forgets dropped (deadline-infeasible) and rejected owners; a stalled one
    # leaves without using its grant, so the grant goes back as for a cancel.
    rig, a = granted_to_class_0()
    if how == "dropped":
        rig.queue.cancel(a)  # what the queue's drop does to it: CANCELED, capacity released
    ended = PickResult(
        picked=(),
        dropped=(a,) if how == "dropped" else (),
        blocked=(),
        rejected=(a,) if how == "rejected" else (),
    )
    rig.gate.observe_pick(ended, rig.queue.owner, rig.now)
    assert rig.gate.stall(a) is None and rig.returned(0) == ONE
    if how == "rejected":
        rig.queue.cancel(a)
    class_1_waits_then_dispatches(rig)
