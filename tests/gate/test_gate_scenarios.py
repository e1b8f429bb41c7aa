"""The RFC's dispatch-gate claims, each as a scenario: pick → submit → commit / rollback.

A test double stands in for the transport (it accepts or fails a submit and counts calls); the
receiver and the sender endpoint exchange real encoded control messages without loss. Mirrors
the RFC's "Key deterministic observations" table (successful submit, injected submit failure,
exhausted credit, stale snapshot after restart, two owners under a one-owner grant).
"""

from __future__ import annotations

import itertools

import attrs

from tent_credit import (
    AllocatorConfig,
    CreditMode,
    CreditReceiver,
    CreditResource,
    DispatchGate,
    GateConfig,
    GateToken,
    LedgerEntrySnapshot,
    Plan,
    SenderEndpoint,
    SessionId,
    charge_for_plan,
)
from tent_sched import AdmissionQueue, OwnerRequest, OwnerState, PickResult, QueueLimits, TaskStatus

R = CreditResource
SLOT = 4096
RX = 1
CHARGE = charge_for_plan(Plan.REMOTE_DIRECT_WRITE, SLOT)
assert CHARGE is not None


def one_owner() -> dict[CreditResource, int]:
    assert CHARGE is not None
    return CHARGE.as_dict()


class FakeTransport:
    """The transport double: ``submit`` accepts unless the owner is scripted to fail."""

    def __init__(self, failing: frozenset[int] = frozenset()) -> None:
        self.failing = failing
        self.calls: list[int] = []

    def submit(self, owner_id: int) -> bool:
        self.calls.append(owner_id)
        return owner_id not in self.failing


@attrs.define
class Sender:
    """One sender process: queue, gate, endpoint, and the receiver it sends to."""

    receiver: CreditReceiver
    endpoint: SenderEndpoint
    gate: DispatchGate
    queue: AdmissionQueue
    now: int = 1_000
    public: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1))
    tokens: dict[int, object] = attrs.field(factory=dict)

    def exchange(self) -> None:
        """A usage interval passes; control messages go both ways until quiet."""
        self.now += 1_000_000
        for _ in range(3):
            ep = next(e for e in self.receiver.endpoints() if not e.closed)
            for data in self.endpoint.messages_to_send(self.now):
                ep.receive_message(data, self.now)
            self.endpoint.receive_batch(ep.messages_to_send(self.now), self.now)

    def admit(self, count: int = 1) -> tuple[int, ...]:
        ctx = self.gate.context(Plan.REMOTE_DIRECT_WRITE, RX)
        return self.queue.try_admit(
            1,
            1 << 20,
            [
                OwnerRequest(
                    public_id=next(self.public), length=SLOT, gate_key=ctx.gate_key, context=ctx
                )
                for _ in range(count)
            ],
        )

    def dispatch(self, transport: FakeTransport) -> PickResult:
        """The minimal driver: pick with the gate, submit each picked owner, settle its token."""
        result = self.queue.pick_for_dispatch(8, 1 << 40, now_ns=self.now, eligibility=self.gate)
        self.gate.observe_pick(result, self.queue.owner, self.now)
        for picked in result.picked:
            owner_id = picked.owner.owner_id
            if transport.submit(owner_id):
                self.gate.commit(picked.token)
                self.tokens[owner_id] = picked.token
            else:
                self.gate.rollback(picked.token)
                self.queue.complete(owner_id, TaskStatus.FAILED)
        return result

    def complete(self, owner_id: int) -> None:
        self.gate.complete(self.tokens.pop(owner_id), self.now)
        self.queue.complete(owner_id, TaskStatus.COMPLETED)

    def entry(self) -> LedgerEntrySnapshot:
        assert self.endpoint.key is not None
        return self.endpoint.ledger.entry(self.endpoint.key)


def receiver(*, initial_owners: int, capacity_owners: int = 8, session: int = 1) -> CreditReceiver:
    config = AllocatorConfig(
        capacity={r: a * capacity_owners for r, a in one_owner().items()},
        control_slots=2,
        max_grant={r: a * capacity_owners for r, a in one_owner().items()},
        max_keys=4,
        retry_after_us=100,
    )
    initial = {r: a * initial_owners for r, a in one_owner().items()}
    return CreditReceiver(config, SessionId(session), initial_grant=initial)


def sender(*, initial_owners: int, capacity_owners: int = 8) -> Sender:
    rx = receiver(initial_owners=initial_owners, capacity_owners=capacity_owners)
    rx.accept(7)
    endpoint = SenderEndpoint(sender_peer=7, mode=CreditMode.REQUIRED)
    gate = DispatchGate(GateConfig(mode=CreditMode.REQUIRED))
    gate.add_endpoint(RX, endpoint)
    endpoint.connect(1_000)
    limits = QueueLimits(max_outstanding_owners=32, max_outstanding_bytes=1 << 30)
    s = Sender(rx, endpoint, gate, AdmissionQueue(limits))
    s.exchange()
    return s


def picked_ids(result: PickResult) -> list[int]:
    return [p.owner.owner_id for p in result.picked]


def test_two_owners_under_a_one_owner_grant_dispatch_one_until_the_cumulative_grant_grows() -> None:
    s = sender(initial_owners=1)
    a, b = s.admit(2)
    transport = FakeTransport()
    first = s.dispatch(transport)
    assert picked_ids(first) == [a] and first.blocked == (b,)
    assert transport.calls == [a]
    assert s.entry().grant_total[R.REQUEST_SLOTS] == 1  # no overdraw: exactly one owner's worth
    assert s.entry().available[R.REQUEST_SLOTS] == 0
    # the blocked owner's charge went out as demand; the receiver grows the cumulative grant
    s.exchange()
    assert s.entry().grant_total[R.REQUEST_SLOTS] == 2
    second = s.dispatch(transport)
    assert picked_ids(second) == [b] and transport.calls == [a, b]
    s.complete(a)
    s.complete(b)
    assert s.queue.statistics().completions.completed == 2
    assert s.entry().consumed[R.DATA_BYTES] == 2 * SLOT


def test_a_failed_submit_restores_the_exact_bytes_and_slots() -> None:
    s = sender(initial_owners=2)
    (owner,) = s.admit()
    before = s.entry()
    assert before.available[R.DATA_BYTES] == 2 * SLOT
    transport = FakeTransport(failing=frozenset({owner}))
    result = s.dispatch(transport)
    assert picked_ids(result) == [owner] and transport.calls == [owner]  # one failed call
    after = s.entry()
    # the rollback is exact (grant and consumed as before); then nothing of this key waits, so
    # the gate gives the idle credit back to the receiver (issue 10 item 8)
    assert (after.grant_total, after.consumed) == (before.grant_total, before.consumed)
    assert after.returned == before.available and not any(after.available.values())
    token = result.picked[0].token
    assert isinstance(token, GateToken) and token.state.name == "ROLLED_BACK"
    assert s.queue.owner_state(owner) == (OwnerState.TERMINAL, TaskStatus.FAILED)
    stats = s.gate.statistics().routes[0]
    assert (stats.reserved, stats.rolled_back, stats.committed) == (1, 1, 0)


def test_credit_exhaustion_means_zero_transport_submissions() -> None:
    s = sender(initial_owners=0, capacity_owners=1)
    s.receiver.accept(8)  # another sender holds the receiver's only slot
    s.receiver.allocator.grant(8, 0, one_owner())
    ids = s.admit(3)
    transport = FakeTransport()
    for _ in range(5):
        result = s.dispatch(transport)
        assert result.picked == () and result.blocked == ids
    assert transport.calls == []
    assert s.entry().consumed[R.REQUEST_SLOTS] == 0
    assert s.queue.queued_ids() == ids  # deferred in their original order, retryable
    route = s.gate.statistics().routes[0]
    assert route.stalled_owners == 3 and route.stalled_bytes == 3 * SLOT


def test_a_receiver_restart_rejects_queued_owners_of_the_old_snapshot_without_reserving() -> None:
    s = sender(initial_owners=2)
    old = s.admit(2)
    assert s.gate.snapshot(RX) == (SessionId(1), 1)
    # the receiver restarts (session 2) and accepts our reconnect; the old session is gone
    restarted = receiver(initial_owners=2, session=2)
    s.endpoint.disconnect(s.now)
    restarted.accept(7)
    s.endpoint.reconnect(s.now)
    s.receiver = restarted
    s.exchange()
    assert s.gate.snapshot(RX) == (SessionId(2), 1)
    reservations = s.endpoint.ledger.statistics().reservations
    transport = FakeTransport()
    result = s.dispatch(transport)
    assert result.rejected == old and result.picked == () and transport.calls == []
    for owner_id in old:
        assert s.queue.owner_state(owner_id) == (OwnerState.TERMINAL, TaskStatus.FAILED)
    assert s.endpoint.ledger.statistics().reservations == reservations  # nothing reserved
    assert s.entry().consumed[R.REQUEST_SLOTS] == 0
    assert s.gate.statistics().routes[0].rejected_snapshots == 2
    # owners admitted under the new session dispatch on its credit
    (fresh,) = s.admit()
    assert picked_ids(s.dispatch(transport)) == [fresh]


def test_a_sender_reconnect_rejects_old_epoch_snapshots() -> None:
    s = sender(initial_owners=2)
    (old,) = s.admit()
    s.endpoint.disconnect(s.now)
    s.receiver.accept(7)  # the receiver bumps the epoch
    s.endpoint.reconnect(s.now)
    s.exchange()
    assert s.gate.snapshot(RX) == (SessionId(1), 2)
    result = s.dispatch(FakeTransport())
    assert result.rejected == (old,)
