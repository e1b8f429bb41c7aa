"""DispatchGate: plan charges, the policy table, stalls, tokens, modes, metrics, independence.

Each test drives a real ``tent_sched.AdmissionQueue`` with a ``tent_credit.DispatchGate`` as its
eligibility callback, and real sans-IO endpoints exchanging encoded messages without loss.
Failing calls are checked to leave the gate, the ledger and the queue exactly as they were.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.registry import CollectorRegistry

from tent_credit import (
    GATE_POLICY,
    TICKET_TRANSITIONS,
    AllocationClass,
    AllocatorConfig,
    BackpressureSource,
    CreditCharge,
    CreditMode,
    CreditReceiver,
    CreditResource,
    DispatchContext,
    DispatchGate,
    GateAction,
    GateConfig,
    GateToken,
    NegotiationState,
    Plan,
    RejectReason,
    SenderEndpoint,
    SessionId,
    TicketState,
    charge_for_plan,
)
from tent_credit.errors import InvalidArgument, InvalidEntry, TooManyRequests
from tent_credit.metrics import CreditCollector, GateCollector
from tent_sched import AdmissionQueue, OwnerRequest, OwnerState, PickResult, QueueLimits, TaskStatus

R = CreditResource
SLOT = 4096
RX, RX2 = 1, 2
ROOT = Path(__file__).resolve().parents[2]
LIMITS = QueueLimits(max_outstanding_owners=64, max_outstanding_bytes=1 << 40)
_DIRECT = charge_for_plan(Plan.REMOTE_DIRECT_WRITE, SLOT)
assert _DIRECT is not None
DIRECT: CreditCharge = _DIRECT


def rx_config(slots: int = 8, *, staging_reserve: int = 0) -> AllocatorConfig:
    resources = (R.DATA_BYTES, R.REQUEST_SLOTS, R.STAGING_SLOTS, R.CONSUMER_SLOTS)
    unit = {R.DATA_BYTES: SLOT}
    return AllocatorConfig(
        capacity={r: slots * unit.get(r, 1) for r in resources},
        staging_reserve={r: staging_reserve * unit.get(r, 1) for r in resources},
        control_slots=2,
        max_grant={r: slots * unit.get(r, 1) for r in resources},
        max_keys=8,
        retry_after_us=100,
    )


def grant_of(owners: int, plan: Plan = Plan.REMOTE_DIRECT_WRITE) -> dict[CreditResource, int]:
    charge = charge_for_plan(plan, SLOT)
    assert charge is not None
    return {r: a * owners for r, a in charge.parts}


def pump(tx: SenderEndpoint, rx: CreditReceiver, now: int, rounds: int = 3) -> None:
    """Lossless exchange between one sender endpoint and its receiver until quiet."""
    for _ in range(rounds):
        ep = next(e for e in rx.endpoints() if e.qos_class == tx.qos_class and not e.closed)
        for data in tx.messages_to_send(now):
            ep.receive_message(data, now)
        tx.receive_batch(ep.messages_to_send(now), now)


class Rig:
    """One sender: a queue, a gate and, per receiver, a CreditReceiver and a SenderEndpoint."""

    def __init__(self, mode: CreditMode = CreditMode.REQUIRED, **config: Any) -> None:
        self.gate = DispatchGate(GateConfig(mode=mode, **config))
        self.queue = AdmissionQueue(LIMITS)
        self.receivers: dict[int, CreditReceiver] = {}
        self.endpoints: dict[tuple[int, int], SenderEndpoint] = {}
        self.now = 1_000
        self.public = itertools.count(1)
        self.tokens: dict[int, object] = {}

    def connect(
        self,
        receiver: int,
        *,
        qos: int = 0,
        initial: int = 0,
        allocation_class: AllocationClass = AllocationClass.USER,
        config: AllocatorConfig | None = None,
        receiver_versions: tuple[int, ...] = (1,),
        mode: CreditMode | None = None,
    ) -> SenderEndpoint:
        rx = self.receivers.get(receiver)
        if rx is None:
            rx = CreditReceiver(
                config or rx_config(),
                SessionId(receiver * 100),
                initial_grant=grant_of(initial),
                versions=receiver_versions,
            )
            self.receivers[receiver] = rx
        rx.accept(7, qos, allocation_class=allocation_class)
        tx = SenderEndpoint(sender_peer=7, qos_class=qos, mode=mode or self.gate.mode)
        self.gate.add_endpoint(receiver, tx)
        self.endpoints[(receiver, qos)] = tx
        tx.connect(self.now)
        pump(tx, rx, self.now)
        return tx

    def admit(self, receiver: int = RX, plan: Plan = Plan.REMOTE_DIRECT_WRITE, qos: int = 0) -> int:
        ctx = self.gate.context(plan, receiver, qos)
        request = OwnerRequest(
            public_id=next(self.public), length=SLOT, gate_key=ctx.gate_key, context=ctx
        )
        (owner_id,) = self.queue.try_admit(1, 1 << 20, [request])
        return owner_id

    def pick(self, max_owners: int = 16, *, commit: bool = True) -> PickResult:
        result = self.queue.pick_for_dispatch(
            max_owners, 1 << 40, now_ns=self.now, eligibility=self.gate
        )
        self.gate.observe_pick(result, self.queue.owner, self.now)
        for picked in result.picked:
            self.tokens[picked.owner.owner_id] = picked.token
            if commit:
                self.gate.commit(picked.token)
        return result

    def finish(self, owner_id: int) -> None:
        self.gate.complete(self.tokens[owner_id], self.now)
        self.queue.complete(owner_id, TaskStatus.COMPLETED)

    def exchange(self, receiver: int = RX, qos: int = 0) -> None:
        """Let a usage interval pass, then exchange control messages with the receiver."""
        self.now += 1_000_000
        pump(self.endpoints[(receiver, qos)], self.receivers[receiver], self.now)

    def consumed(self, receiver: int = RX, qos: int = 0) -> dict[CreditResource, int]:
        tx = self.endpoints[(receiver, qos)]
        assert tx.key is not None
        return {r: a for r, a in tx.ledger.entry(tx.key).consumed.items() if a}


def picked_ids(result: PickResult) -> list[int]:
    return [p.owner.owner_id for p in result.picked]


# --------------------------------------------------------------------------- independence


def imported_modules(package: str) -> set[str]:
    names: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return names


def test_neither_core_package_imports_the_other() -> None:
    assert "tent_sched" not in imported_modules("tent_credit")
    assert "tent_credit" not in imported_modules("tent_sched")
    assert "attrs" in imported_modules("tent_credit")  # the scan does see imports


# --------------------------------------------------------------------------- context and charges


def test_dispatch_context_gate_key_is_receiver_and_class_for_remote_plans_only() -> None:
    for plan in (Plan.REMOTE_DIRECT_WRITE, Plan.REMOTE_STAGED_WRITE):
        assert DispatchContext(plan=plan, receiver=3, qos_class=2).gate_key == (3, 2)
    for plan in (Plan.RDMA_READ, Plan.LOCAL):
        assert DispatchContext(plan=plan, receiver=3, qos_class=2).gate_key is None


@pytest.mark.parametrize(
    "fields",
    [
        {"plan": "write", "receiver": 1},
        {"plan": Plan.LOCAL, "receiver": -1},
        {"plan": Plan.LOCAL, "receiver": 1, "qos_class": 1 << 32},
        {"plan": Plan.LOCAL, "receiver": 1, "snapshot": (SessionId(1), 0)},
        {"plan": Plan.LOCAL, "receiver": 1, "snapshot": (1, 1)},
        {"plan": Plan.LOCAL, "receiver": 1, "snapshot": (SessionId(1), 1, 2)},
    ],
)
def test_an_invalid_dispatch_context_cannot_be_constructed(fields: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        DispatchContext(**fields)


@pytest.mark.parametrize("plan", [Plan.REMOTE_DIRECT_WRITE, Plan.REMOTE_STAGED_WRITE])
def test_remote_writes_reserve_exactly_their_plan_charge(plan: Plan) -> None:
    rig = Rig()
    tx = rig.connect(RX)
    tx.set_pending_demand(grant_of(1, plan))  # exactly one owner's charge of this plan
    rig.exchange()
    owner = rig.admit(plan=plan)
    (picked,) = rig.pick().picked
    assert picked.owner.owner_id == owner
    token = picked.token
    assert isinstance(token, GateToken) and token.reservation is not None
    assert token.charge == charge_for_plan(plan, SLOT)
    assert rig.consumed() == token.charge.as_dict()
    assert (R.STAGING_SLOTS in rig.consumed()) is (plan is Plan.REMOTE_STAGED_WRITE)


@pytest.mark.parametrize("plan", [Plan.RDMA_READ, Plan.LOCAL])
def test_read_and_local_plans_dispatch_without_a_token_while_the_receiver_is_exhausted(
    plan: Plan,
) -> None:
    rig = Rig()
    rig.connect(RX)  # no credit at all
    blocked = rig.admit()
    local = rig.admit(plan=plan)
    result = rig.pick()
    assert result.blocked == (blocked,)
    assert [(p.owner.owner_id, p.token) for p in result.picked] == [(local, None)]
    assert rig.gate.statistics().no_credit_dispatches == 1
    rig.finish(local)  # a None token settles as a no-op


# --------------------------------------------------------------------------- blocking


def test_blocked_owner_keeps_its_place_same_key_owners_are_skipped_and_other_receivers_go() -> None:
    rig = Rig()
    rig.connect(RX)  # exhausted
    rig.connect(RX2, initial=4)
    a1, b1, a2, b2 = rig.admit(RX), rig.admit(RX2), rig.admit(RX), rig.admit(RX2)
    asked: list[int] = []
    gate = rig.gate

    def spy(owner: Any, now_ns: int) -> Any:
        asked.append(owner.owner_id)
        return gate(owner, now_ns)

    result = rig.queue.pick_for_dispatch(16, 1 << 40, now_ns=rig.now, eligibility=spy)
    assert picked_ids(result) == [b1, b2]  # no head-of-line blocking across receivers
    assert result.blocked == (a1, a2)
    assert asked == [a1, b1, b2]  # a2 skipped behind a1: order within the key is kept
    assert rig.queue.queued_ids() == (a1, a2)
    assert rig.queue.owner_state(a1) == (OwnerState.QUEUED, TaskStatus.PENDING)
    info = gate.stall(a1)
    assert info is not None and gate.stall(a2) is None  # a2 is known only after observe_pick
    gate.observe_pick(result, rig.queue.owner, rig.now)
    stall = gate.stall(a2)
    assert stall is not None and stall.info.source is BackpressureSource.RECEIVER_CREDIT
    assert stall.info.fallback_allowed is False and stall.receiver == RX


def test_a_stall_is_recorded_fed_as_demand_and_measured_until_dispatch() -> None:
    rig = Rig()
    tx = rig.connect(RX)
    a, b = rig.admit(), rig.admit()
    rig.pick()
    route = rig.gate.statistics().routes[0]
    assert (route.stalled_owners, route.stalled_bytes) == (2, 2 * SLOT)
    assert dict(route.waiting) == grant_of(2)
    assert dict(tx.statistics().demand_target) == grant_of(2)  # both owners were asked for
    stall = rig.gate.stall(a)
    assert stall is not None and stall.since_ns == rig.now and stall.charge == DIRECT
    assert stall.info.exhausted == tuple(sorted(DIRECT.as_dict()))
    first_block = rig.now
    rig.now += 3_000_000
    rig.exchange()  # the usage report carries the demand; the receiver grants it
    assert picked_ids(rig.pick()) == [a, b]
    route = rig.gate.statistics().routes[0]
    assert (route.stalled_owners, route.stalled_bytes, dict(route.waiting)) == (0, 0, {})
    assert route.stalls_ended == 2 and route.stall_ns_total == 2 * (rig.now - first_block)
    assert dict(route.stall_buckets)[10_000_000] == 2 and dict(route.stall_buckets)[1_000_000] == 0
    assert rig.gate.stall(a) is None


def test_oldest_stall_is_per_receiver_the_first_blocked_one() -> None:
    rig = Rig()
    rig.connect(RX)  # both exhausted
    rig.connect(RX2)
    a = rig.admit(RX)
    rig.pick()  # a blocks at 1000
    rig.now = 2_000
    b = rig.admit(RX2)
    c = rig.admit(RX)
    rig.pick()  # b blocks at 2000, c behind a at 2000; a keeps its first block time
    stalls = [rig.gate.stall(o) for o in (a, b, c)]
    assert [s.since_ns for s in stalls if s is not None] == [1_000, 2_000, 2_000]
    answers = [rig.gate.oldest_stall(r) for r in (RX, RX2, 99)]
    assert answers == [stalls[0], stalls[1], None]
    # the full scan, which the gate falls back to if stalls were ever recorded out of time
    # order (a caller's clock going back), gives the same answers
    rig.gate._stalls_in_order = False
    assert [rig.gate.oldest_stall(r) for r in (RX, RX2, 99)] == answers
    rig.queue.cancel(a)
    rig.gate.forget(a)  # c is RX's oldest now
    assert rig.gate.oldest_stall(RX) == stalls[2]
    for owner in (b, c):
        rig.queue.cancel(owner)
        rig.gate.forget(owner)
    assert rig.gate.oldest_stall(RX) is None and rig.gate.oldest_stall(RX2) is None
    assert rig.gate._stalls_in_order  # nothing left to be out of order
    with pytest.raises(InvalidArgument):
        rig.gate.oldest_stall(-1)


def test_dropped_canceled_and_rejected_owners_lose_their_stall_record() -> None:
    rig = Rig()
    rig.connect(RX)
    a, b = rig.admit(), rig.admit()
    rig.pick()
    rig.queue.cancel(b)
    rig.gate.forget(b)
    rig.gate.forget(b)  # idempotent
    route = rig.gate.statistics().routes[0]
    assert route.stalled_owners == 1 and rig.gate.stall(b) is None
    rig.gate.observe_pick(
        PickResult(picked=(), dropped=(), blocked=(), rejected=(a,)), rig.queue.owner, rig.now
    )
    assert rig.gate.statistics().routes[0].stalled_owners == 0
    assert rig.gate.statistics().routes[0].stalls_ended == 0  # not dispatched: no duration


def test_misaddressed_owners_raise_and_leave_queue_gate_and_ledger_unchanged() -> None:
    rig = Rig()
    rig.connect(RX, initial=4)
    ctx = rig.gate.context(Plan.REMOTE_DIRECT_WRITE, RX)
    good = rig.admit()
    bad = [
        OwnerRequest(public_id=900, length=SLOT, gate_key=None, context=ctx),  # key not set
        OwnerRequest(public_id=901, length=SLOT, gate_key=(RX, 0), context="plan"),
        OwnerRequest(
            public_id=902,
            length=SLOT,
            gate_key=(9, 0),
            context=DispatchContext(plan=Plan.REMOTE_DIRECT_WRITE, receiver=9),
        ),
    ]
    errors = [InvalidArgument, InvalidArgument, InvalidEntry]
    for request, error in zip(bad, errors, strict=True):
        queue = AdmissionQueue(LIMITS)
        queue.try_admit(
            1, 8, [OwnerRequest(public_id=1, length=SLOT, gate_key=(RX, 0), context=ctx), request]
        )
        before = (queue.statistics(), queue.queued_ids(), rig.consumed())
        with pytest.raises(error):
            queue.pick_for_dispatch(8, 1 << 40, now_ns=rig.now, eligibility=rig.gate)
        assert (queue.statistics(), queue.queued_ids()) == before[:2]
        # the first owner was reserved in the failed pass: the gate reclaims it exactly
        assert rig.gate.rollback_unsettled() == 1
        assert rig.consumed() == before[2] == {}
        assert rig.gate.statistics().unsettled_tokens == 0
    assert picked_ids(rig.pick()) == [good]


# --------------------------------------------------------------------------- tokens


def test_token_lifecycle_is_the_table_and_misuse_changes_nothing() -> None:
    assert set(TICKET_TRANSITIONS) == {
        (TicketState.RESERVED, "commit"),
        (TicketState.RESERVED, "rollback"),
        (TicketState.COMMITTED, "complete"),
    }
    rig = Rig()
    rig.connect(RX, initial=2)
    rig.admit()
    (picked,) = rig.pick(commit=False).picked
    token = picked.token
    assert isinstance(token, GateToken) and token.state is TicketState.RESERVED
    other = DispatchGate(GateConfig(mode=CreditMode.REQUIRED))
    before = (rig.gate.statistics(), rig.consumed())
    misuse: list[tuple[Callable[[], object], type[Exception]]] = [
        (lambda: rig.gate.complete(token, rig.now), InvalidEntry),  # not committed yet
        (lambda: rig.gate.commit("token"), InvalidArgument),
        (lambda: other.commit(token), InvalidEntry),  # another gate's token
        (lambda: rig.gate.complete(token, -1), InvalidArgument),
    ]
    for call, error in misuse:
        with pytest.raises(error):
            call()
        assert (rig.gate.statistics(), rig.consumed()) == before
    rig.gate.commit(token)
    assert token.state.name == "COMMITTED"  # read through the property: mypy narrowed it
    for call in (lambda: rig.gate.commit(token), lambda: rig.gate.rollback(token)):
        with pytest.raises(InvalidEntry):
            call()
    assert rig.gate.complete(token, rig.now) == []
    assert token.state.name == "COMPLETED"
    with pytest.raises(InvalidEntry):
        rig.gate.complete(token, rig.now)
    route = rig.gate.statistics().routes[0]
    assert (route.reserved, route.committed, route.completed, route.rolled_back) == (1, 1, 1, 0)
    rig.gate.commit(None)  # an owner that needed no credit settles as a no-op
    rig.gate.rollback(None)
    assert rig.gate.complete(None, rig.now) == []


def test_rollback_of_a_token_fenced_since_the_pick_settles_it_without_touching_the_new_epoch() -> (
    None
):
    rig = Rig()
    tx = rig.connect(RX, initial=2)
    rig.admit()
    (picked,) = rig.pick(commit=False).picked
    rx = rig.receivers[RX]
    tx.disconnect(rig.now)
    rx.accept(7)  # reconnect: a new epoch fences the old entry
    tx.reconnect(rig.now)
    pump(tx, rx, rig.now)
    assert tx.epoch == 2
    with pytest.raises(InvalidEntry):
        rig.gate.commit(picked.token)  # its epoch is gone: never in flight on the new one
    rig.gate.rollback(picked.token)
    assert rig.consumed() == {} and rig.gate.statistics().unsettled_tokens == 0


# --------------------------------------------------------------------------- modes


def test_the_policy_table_is_total_over_modes_states_and_fallbacks() -> None:
    keys = {
        (mode, state, fallback)
        for mode in (CreditMode.OPTIONAL, CreditMode.REQUIRED)
        for state in NegotiationState
        for fallback in ((False,) if mode is CreditMode.OPTIONAL else (False, True))
    }
    assert set(GATE_POLICY) == keys
    assert GATE_POLICY[(CreditMode.OPTIONAL, NegotiationState.LEGACY, False)] is GateAction.LEGACY
    assert GATE_POLICY[(CreditMode.REQUIRED, NegotiationState.FAILED, False)] is GateAction.REJECT
    assert GATE_POLICY[(CreditMode.REQUIRED, NegotiationState.FAILED, True)] is GateAction.LEGACY
    assert GATE_POLICY[(CreditMode.REQUIRED, NegotiationState.STALE, False)] is GateAction.RESERVE


def test_disabled_is_the_default_and_dispatches_everything_without_reading_contexts() -> None:
    gate = DispatchGate()
    assert gate.mode is CreditMode.DISABLED
    queue = AdmissionQueue(LIMITS)
    queue.try_admit(
        1, 8, [OwnerRequest(public_id=1, length=SLOT, gate_key="any", context=object())]
    )
    result = queue.pick_for_dispatch(8, 1 << 40, now_ns=5, eligibility=gate)
    assert [p.token for p in result.picked] == [None]
    assert gate.statistics().routes == () and gate.statistics().no_credit_dispatches == 0


def test_optional_mode_keeps_legacy_peers_on_a_bounded_window_and_counts_fallbacks() -> None:
    rig = Rig(CreditMode.OPTIONAL, legacy_window=2)
    tx = rig.connect(RX, receiver_versions=(9,))  # no common version: legacy
    assert tx.state is NegotiationState.LEGACY
    a, b, c = rig.admit(), rig.admit(), rig.admit()
    result = rig.pick()
    assert picked_ids(result) == [a, b] and result.blocked == (c,)
    tokens = [p.token for p in result.picked]
    assert all(isinstance(t, GateToken) and t.legacy for t in tokens)
    stall = rig.gate.stall(c)
    assert stall is not None and stall.info.source is BackpressureSource.LOCAL_QUEUE
    assert stall.info.fallback_allowed is True and stall.info.exhausted == ()
    assert rig.pick().picked == ()  # still two in flight
    rig.finish(a)
    assert picked_ids(rig.pick()) == [c]
    route = rig.gate.statistics().routes[0]
    assert (route.legacy_fallbacks, route.legacy_in_flight) == (3, 2)
    rig.finish(b)
    rig.finish(c)
    assert rig.gate.statistics().routes[0].legacy_in_flight == 0


def test_required_mode_blocks_without_fallback_until_the_peer_is_active() -> None:
    rig = Rig(CreditMode.REQUIRED)
    rx = CreditReceiver(rx_config(), SessionId(100), initial_grant=grant_of(4))
    rig.receivers[RX] = rx
    tx = SenderEndpoint(sender_peer=7, mode=CreditMode.REQUIRED)
    rig.gate.add_endpoint(RX, tx)
    rig.endpoints[(RX, 0)] = tx
    owner = rig.admit()
    for state_setup in ("disabled", "negotiating"):
        if state_setup == "negotiating":
            tx.connect(rig.now)
        result = rig.pick()
        assert result.blocked == (owner,)
        stall = rig.gate.stall(owner)
        assert stall is not None and stall.info.fallback_allowed is False
    rx.accept(7)
    pump(tx, rx, rig.now)
    assert picked_ids(rig.pick()) == [owner]
    rig.finish(owner)
    tx.disconnect(rig.now)  # STALE: no new credit-gated dispatch, even with credit left
    second = rig.admit()
    assert tx.state is NegotiationState.STALE and rig.pick().blocked == (second,)


@pytest.mark.parametrize("fallback", [False, True])
def test_required_mode_fails_a_failed_peer_unless_a_fallback_is_configured(fallback: bool) -> None:
    rig = Rig(CreditMode.REQUIRED, required_fallback=fallback, legacy_window=1)
    tx = rig.connect(RX, receiver_versions=(9,))
    assert tx.state is NegotiationState.FAILED
    a, b = rig.admit(), rig.admit()
    result = rig.pick()
    route = rig.gate.statistics().routes[0]
    if fallback:
        assert picked_ids(result) == [a] and result.blocked == (b,)
        assert route.legacy_fallbacks == 1 and route.rejected_failed == 0
    else:
        assert result.rejected == (a, b) and result.picked == ()
        assert rig.queue.owner_state(a) == (OwnerState.TERMINAL, TaskStatus.FAILED)
        assert route.rejected_failed == 2 and route.reserved == 0


@pytest.mark.parametrize(
    "fields",
    [
        {"mode": "required"},
        {"legacy_window": 0},
        {"max_routes": 0},
        {"required_fallback": 1, "mode": CreditMode.REQUIRED},
        {"required_fallback": True, "mode": CreditMode.OPTIONAL},
        {"stall_buckets_ns": (10, 10)},
        {"stall_buckets_ns": ()},
    ],
)
def test_an_invalid_gate_config_cannot_be_constructed(fields: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        GateConfig(**fields)


def test_add_endpoint_validates_before_registering() -> None:
    gate = DispatchGate(GateConfig(mode=CreditMode.REQUIRED, max_routes=1))
    with pytest.raises(InvalidArgument):
        gate.add_endpoint(RX, SenderEndpoint(sender_peer=7, mode=CreditMode.OPTIONAL))
    with pytest.raises(InvalidArgument):
        gate.add_endpoint(-1, SenderEndpoint(sender_peer=7))
    with pytest.raises(InvalidArgument):
        DispatchGate(GateConfig(mode=CreditMode.REQUIRED)).add_endpoint(RX, "endpoint")  # type: ignore[arg-type]
    assert gate.statistics().routes == ()
    gate.add_endpoint(RX, SenderEndpoint(sender_peer=7))
    with pytest.raises(InvalidEntry):
        gate.add_endpoint(RX, SenderEndpoint(sender_peer=7))
    with pytest.raises(TooManyRequests):
        gate.add_endpoint(RX2, SenderEndpoint(sender_peer=7))
    assert [(r.receiver, r.qos_class) for r in gate.statistics().routes] == [(RX, 0)]
    with pytest.raises(InvalidEntry):
        gate.snapshot(RX2)
    with pytest.raises(InvalidArgument):
        DispatchGate("config")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- separate budgets


def test_staging_internal_work_draws_on_its_reserved_class_while_user_payload_is_exhausted() -> (
    None
):
    rig = Rig()
    config = rx_config(slots=4, staging_reserve=1)
    user_tx = rig.connect(RX, qos=0, config=config)
    staging_tx = rig.connect(RX, qos=1, allocation_class=AllocationClass.STAGING_INTERNAL)
    users = [rig.admit(qos=0) for _ in range(5)]
    staged = rig.admit(qos=1, plan=Plan.REMOTE_STAGED_WRITE)
    rig.pick()
    rig.now += 2_000_000
    rig.exchange(qos=0)  # user demand first: it takes all the user part (4 - 1 reserved)
    rig.exchange(qos=1)
    result = rig.pick()
    assert picked_ids(result) == [*users[:3], staged]
    assert result.blocked == tuple(users[3:])
    alloc = rig.receivers[RX].allocator.statistics()
    assert alloc.user_outstanding[R.REQUEST_SLOTS] == 3
    assert alloc.outstanding[R.REQUEST_SLOTS] == 4
    assert user_tx.available()[R.REQUEST_SLOTS] == 0 and staging_tx.key is not None


def test_control_traffic_reopens_dispatch_at_zero_data_credit() -> None:
    rig = Rig()
    tx = rig.connect(RX, initial=1, config=rx_config(slots=1))
    rx = rig.receivers[RX]
    first, second = rig.admit(), rig.admit()
    assert picked_ids(rig.pick()) == [first]
    assert rig.pick().blocked == (second,)
    rig.exchange()  # the demand reaches the receiver, which has nothing free: it stalls
    assert rx.endpoints()[0].stalled and rig.pick().blocked == (second,)
    assert all(v == 0 for v in tx.available().values())
    assert rx.allocator.statistics().free[R.REQUEST_SLOTS] == 0
    # zero data credit: the control budget is separate and still usable
    assert rx.allocator.try_acquire_control()
    rx.allocator.release_control()
    consumed = rig.consumed()
    amounts = DIRECT.as_dict()
    rx.data_landed(7, 0, 1, amounts)
    rig.finish(first)
    rx.release(7, 0, 1, amounts)  # the consumer frees the slot: the receiver pushes an update
    rig.now += 2_000_000
    messages = rx.messages_to_send(rig.now)[(7, 0)]
    assert messages  # a control update went out while the data window was zero
    events = tx.receive_batch(messages, rig.now)
    assert "grant_applied" in [e.kind for e in events]
    assert rig.consumed() == consumed  # control never consumed data credit
    rig.exchange()
    assert picked_ids(rig.pick()) == [second]


# --------------------------------------------------------------------------- metrics


def test_metrics_export_stalls_legacy_and_rejections_beside_the_credit_collector() -> None:
    registry = CollectorRegistry()
    rig = Rig(CreditMode.REQUIRED)
    tx = rig.connect(RX)
    GateCollector(registry, rig.gate)
    CreditCollector(registry).watch_sender(tx)
    rig.admit()
    rig.admit()
    rig.pick()
    labels = {"peer": str(RX), "qos_class": "0"}
    assert registry.get_sample_value("tent_credit_gate_stalled_owners", labels) == 2
    assert registry.get_sample_value("tent_credit_gate_stalled_bytes", labels) == 2 * SLOT
    assert (
        registry.get_sample_value(
            "tent_credit_gate_waiting", {**labels, "resource": "REQUEST_SLOTS"}
        )
        == 2
    )
    rig.now += 2_000_000
    rig.exchange()
    rig.pick()
    assert registry.get_sample_value("tent_credit_gate_stall_seconds_count", labels) == 2
    assert (
        registry.get_sample_value("tent_credit_gate_stall_seconds_bucket", {**labels, "le": "0.01"})
        == 2
    )
    assert registry.get_sample_value("tent_credit_gate_stalled_owners", labels) == 0
    assert registry.get_sample_value("tent_credit_gate_legacy_fallbacks_total", labels) == 0
    assert registry.get_sample_value("tent_credit_gate_rejected_snapshots_total", labels) == 0
    # the ledger series come from the CreditCollector, not duplicated by the gate
    assert (
        registry.get_sample_value("tent_credit_reservations_total", {"peer": "7", "qos_class": "0"})
        == 2
    )
    families = {m.name: m for m in registry.collect()}
    gate_names = {n for n in families if n.startswith("tent_credit_gate_")}
    assert gate_names and all(
        not n.startswith("tent_credit_gate_") for n in families if n not in gate_names
    )
    label_names = {key for m in families.values() for s in m.samples for key in s.labels}
    assert label_names <= {"peer", "qos_class", "resource", "le"}  # never owner ids
    peers = {s.labels["peer"] for m in families.values() for s in m.samples if "peer" in s.labels}
    assert peers == {str(RX), "7"}  # the gate's receiver and the endpoint's bound identity
    with pytest.raises(InvalidArgument):
        GateCollector(registry, "gate")  # type: ignore[arg-type]


def test_a_restart_between_admission_and_pick_rejects_the_snapshot_and_counts_it() -> None:
    rig = Rig()
    tx = rig.connect(RX, initial=2)
    owner = rig.admit()
    ctx = rig.queue.owner(owner).context
    assert isinstance(ctx, DispatchContext) and ctx.snapshot == (SessionId(100), 1)
    new = CreditReceiver(rx_config(), SessionId(101), initial_grant=grant_of(2), versions=(1,))
    rig.receivers[RX] = new
    tx.disconnect(rig.now)
    new.accept(7)
    tx.reconnect(rig.now)
    pump(tx, new, rig.now)
    result = rig.pick()
    assert result.rejected == (owner,) and result.picked == ()
    assert rig.gate.statistics().routes[0].rejected_snapshots == 1
    assert rig.consumed() == {} and rig.gate.stall(owner) is None
    decision = rig.gate(rig.queue.owner(owner), rig.now)  # asked directly: the typed reason
    assert decision.verdict == "rejected"
    assert getattr(decision, "reason", None) is RejectReason.SNAPSHOT_FENCED
