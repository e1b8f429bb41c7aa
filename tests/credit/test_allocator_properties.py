"""Stateful property test of the receiver allocator against a reference model
(docs/semantics.md#receiver-allocator).

Random sequences of connect/reconnect, grants (with lost updates), honest sender usage (consume,
return, report, replayed old reports), landing, in-flight failure, release, fence and
fence-complete, plus overdrawn reports, never over-commit any resource, never drive an outstanding
negative, always agree with an independent bookkeeping of what each key+epoch should hold, and
after fencing and releasing everything leave all capacity free (no leak).
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from tent_credit import CreditResource, SessionId
from tent_credit._allocator import (
    AllocationClass,
    AllocatorConfig,
    EpochState,
    ReceiverCreditAllocator,
)
from tent_credit.errors import RemoteProtocolError, TooManyRequests

D = CreditResource.DATA_BYTES
Q = CreditResource.REQUEST_SLOTS
RESOURCES = (D, Q)
CONFIG = AllocatorConfig(
    capacity={D: 60, Q: 6},
    staging_reserve={D: 15, Q: 1},
    control_slots=1,
    max_grant={D: 25, Q: 3},
    min_grant={D: 5},
    max_keys=3,
    retry_after_us=10,
    max_fencing_epochs=2,
)
KEYS = [(sender, qos) for sender in range(3) for qos in range(2)]

Vector = dict[CreditResource, int]


def zero() -> Vector:
    return dict.fromkeys(RESOURCES, 0)


@attrs.define
class EpochModel:
    """What one key+epoch should hold, kept independently of the allocator."""

    allocation_class: AllocationClass
    state: EpochState = EpochState.ACTIVE
    granted: Vector = attrs.field(factory=zero)  # receiver side
    sender_granted: Vector = attrs.field(factory=zero)  # the last update the sender got
    consumed: Vector = attrs.field(factory=zero)
    returned: Vector = attrs.field(factory=zero)
    in_flight: Vector = attrs.field(factory=zero)
    landed: Vector = attrs.field(factory=zero)
    released: Vector = attrs.field(factory=zero)
    reclaimed: Vector = attrs.field(factory=zero)
    reports: list[tuple[Vector, Vector]] = attrs.field(factory=list)

    def available(self, r: CreditResource) -> int:
        return self.sender_granted[r] - self.consumed[r] - self.returned[r]

    def outstanding(self, r: CreditResource) -> int:
        return self.granted[r] - self.released[r] - self.reclaimed[r]


Ident = tuple[int, int, int]


class AllocatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.alloc = ReceiverCreditAllocator(CONFIG, SessionId(42))
        self.epochs: dict[tuple[int, int], int] = {}
        self.model: dict[Ident, EpochModel] = {}
        self.control_held = 0

    # -- helpers --

    def pick(self, index: int, *states: EpochState) -> Ident | None:
        idents = sorted(i for i, m in self.model.items() if m.state in states)
        return idents[index % len(idents)] if idents else None

    def has(self, *states: EpochState) -> bool:
        return any(m.state in states for m in self.model.values())

    def forget_if_settled(self, ident: Ident) -> None:
        m = self.model[ident]
        if m.state is EpochState.FENCED and all(m.outstanding(r) == 0 for r in RESOURCES):
            del self.model[ident]

    def report(self, ident: Ident, consumed: Vector, returned: Vector) -> None:
        m = self.model[ident]
        reclaimed = self.alloc.on_usage(*ident, consumed_totals=consumed, returned_totals=returned)
        for r in RESOURCES:
            expected = max(0, returned[r] - m.reclaimed[r])
            assert reclaimed[r] == expected
            m.reclaimed[r] += expected

    # -- rules --

    @rule(key=st.sampled_from(KEYS))
    def connect(self, key: tuple[int, int]) -> None:
        allocation_class = AllocationClass.STAGING_INTERNAL if key[1] else AllocationClass.USER
        if key not in self.epochs and len(self.epochs) >= CONFIG.max_keys:
            with pytest.raises(TooManyRequests):
                self.alloc.open_epoch(*key, allocation_class=allocation_class)
            return
        previous = self.epochs.get(key)
        fencing = sum(
            1
            for (p, q, _e), m in self.model.items()
            if (p, q) == key and m.state is EpochState.FENCING
        )
        current = self.model.get((*key, previous)) if previous is not None else None
        if current is not None and current.state is EpochState.ACTIVE:
            fencing += 1
        if fencing > CONFIG.max_fencing_epochs:  # item 9: superseded epochs are bounded
            with pytest.raises(TooManyRequests):
                self.alloc.open_epoch(*key, allocation_class=allocation_class)
            return
        epoch = self.alloc.open_epoch(*key, allocation_class=allocation_class)
        assert epoch == (previous or 0) + 1
        if previous is not None and (*key, previous) in self.model:
            old = self.model[(*key, previous)]
            if old.state is EpochState.ACTIVE:
                old.state = EpochState.FENCING
        self.epochs[key] = epoch
        self.model[(*key, epoch)] = EpochModel(allocation_class=allocation_class)

    @precondition(lambda self: self.has(EpochState.ACTIVE))
    @rule(
        index=st.integers(0, 10),
        data_bytes=st.integers(0, 40),
        slots=st.integers(0, 4),
        delivered=st.booleans(),
    )
    def grant(self, index: int, data_bytes: int, slots: int, delivered: bool) -> None:
        ident = self.pick(index, EpochState.ACTIVE)
        assert ident is not None
        m = self.model[ident]
        demand = {D: data_bytes, Q: slots}
        decision = self.alloc.grant(ident[0], ident[1], demand)
        assert decision.epoch == ident[2]
        for r in RESOURCES:
            now = decision.granted_now[r]
            assert 0 <= now <= min(demand[r], CONFIG.max_grant[r])
            m.granted[r] += now
            assert decision.grant_totals[r] == m.granted[r]
        if any(decision.granted_now.values()):
            assert not decision.blocked
        if delivered:  # a lost update leaves the sender on its older totals
            m.sender_granted = dict(decision.grant_totals)

    @precondition(lambda self: self.has(EpochState.ACTIVE))
    @rule(index=st.integers(0, 10), data=st.data())
    def sender_dispatches(self, index: int, data: st.DataObject) -> None:
        ident = self.pick(index, EpochState.ACTIVE)
        assert ident is not None
        m = self.model[ident]
        for r in RESOURCES:
            amount = data.draw(st.integers(0, m.available(r)))
            m.consumed[r] += amount
            m.in_flight[r] += amount

    @precondition(lambda self: self.has(EpochState.ACTIVE, EpochState.FENCING))
    @rule(index=st.integers(0, 10), data=st.data(), lands=st.booleans())
    def in_flight_settles(self, index: int, data: st.DataObject, lands: bool) -> None:
        ident = self.pick(index, EpochState.ACTIVE, EpochState.FENCING)
        assert ident is not None
        m = self.model[ident]
        amounts = {r: data.draw(st.integers(0, m.in_flight[r])) for r in RESOURCES}
        if lands:
            self.alloc.data_landed(*ident, amounts)
            for r in RESOURCES:
                m.landed[r] += amounts[r]
        for r in RESOURCES:  # failed transfers never land; their credit waits for the fence
            m.in_flight[r] -= amounts[r]

    @precondition(lambda self: bool(self.model))
    @rule(index=st.integers(0, 10), data=st.data())
    def consumer_releases(self, index: int, data: st.DataObject) -> None:
        ident = self.pick(index, *EpochState)
        assert ident is not None
        m = self.model[ident]
        amounts = {r: data.draw(st.integers(0, m.landed[r] - m.released[r])) for r in RESOURCES}
        self.alloc.release(*ident, amounts)
        for r in RESOURCES:
            m.released[r] += amounts[r]
        self.forget_if_settled(ident)

    @precondition(lambda self: self.has(EpochState.ACTIVE, EpochState.FENCING))
    @rule(index=st.integers(0, 10), data=st.data())
    def sender_returns_and_reports(self, index: int, data: st.DataObject) -> None:
        ident = self.pick(index, EpochState.ACTIVE, EpochState.FENCING)
        assert ident is not None
        m = self.model[ident]
        for r in RESOURCES:
            m.returned[r] += data.draw(st.integers(0, m.available(r)))
        m.reports.append((dict(m.consumed), dict(m.returned)))
        self.report(ident, dict(m.consumed), dict(m.returned))

    @precondition(
        lambda self: any(
            m.reports and m.state is not EpochState.FENCED for m in self.model.values()
        )
    )
    @rule(index=st.integers(0, 10), which=st.integers(0, 10))
    def old_report_is_replayed(self, index: int, which: int) -> None:
        idents = sorted(
            i for i, m in self.model.items() if m.reports and m.state is not EpochState.FENCED
        )
        ident = idents[index % len(idents)]
        m = self.model[ident]
        consumed, returned = m.reports[which % len(m.reports)]
        before = self.alloc.statistics().outstanding
        self.report(ident, consumed, returned)
        assert self.alloc.statistics().outstanding == before  # cumulative: idempotent

    @precondition(lambda self: self.has(EpochState.ACTIVE, EpochState.FENCING))
    @rule(index=st.integers(0, 10), excess=st.integers(1, 5))
    def overdrawn_report_is_refused(self, index: int, excess: int) -> None:
        ident = self.pick(index, EpochState.ACTIVE, EpochState.FENCING)
        assert ident is not None
        m = self.model[ident]
        before = self.alloc.key_totals(*ident)
        outstanding = self.alloc.statistics().outstanding
        consumed = {D: m.granted[D] + excess}
        with pytest.raises(RemoteProtocolError):
            self.alloc.on_usage(*ident, consumed_totals=consumed, returned_totals={})
        assert self.alloc.key_totals(*ident) == before
        assert self.alloc.statistics().outstanding == outstanding

    @precondition(lambda self: self.has(EpochState.ACTIVE))
    @rule(index=st.integers(0, 10))
    def sender_disconnects(self, index: int) -> None:
        ident = self.pick(index, EpochState.ACTIVE)
        assert ident is not None
        self.alloc.fence(*ident)
        self.model[ident].state = EpochState.FENCING

    @precondition(lambda self: self.has(EpochState.FENCING))
    @rule(index=st.integers(0, 10))
    def fence_completes(self, index: int) -> None:
        ident = self.pick(index, EpochState.FENCING)
        assert ident is not None
        self.complete_fence(ident)

    def complete_fence(self, ident: Ident) -> None:
        m = self.model[ident]
        m.in_flight = zero()  # drained or failed: nothing of the epoch is in flight any more
        reclaimed = self.alloc.fence_complete(*ident)
        for r in RESOURCES:
            expected = m.granted[r] - m.landed[r] - m.reclaimed[r]
            assert reclaimed[r] == expected
            m.reclaimed[r] += expected
        m.state = EpochState.FENCED
        self.forget_if_settled(ident)

    @rule(acquire=st.booleans())
    def control_message(self, acquire: bool) -> None:
        if acquire:
            got = self.alloc.try_acquire_control()
            assert got == (self.control_held < CONFIG.control_slots)
            self.control_held += got
        elif self.control_held:
            self.alloc.release_control()
            self.control_held -= 1

    # -- invariants --

    @invariant()
    def never_over_committed(self) -> None:
        stats = self.alloc.statistics()
        for r in RESOURCES:
            assert 0 <= stats.outstanding[r] <= CONFIG.capacity[r]
            assert 0 <= stats.user_outstanding[r] <= CONFIG.limit_for(r, AllocationClass.USER)
            assert stats.free[r] == CONFIG.capacity[r] - stats.outstanding[r]
        assert stats.control_slots_in_use == self.control_held

    @invariant()
    def agrees_with_the_model(self) -> None:
        total = zero()
        user = zero()
        for ident, m in self.model.items():
            totals = self.alloc.key_totals(*ident)
            assert totals.state is m.state
            for r in RESOURCES:
                assert totals.outstanding[r] == m.outstanding(r) >= 0
                assert totals.granted[r] == m.granted[r]
                assert totals.landed[r] == m.landed[r]
                assert totals.released[r] == m.released[r]
                assert totals.reclaimed[r] == m.reclaimed[r]
                total[r] += m.outstanding(r)
                if m.allocation_class is AllocationClass.USER:
                    user[r] += m.outstanding(r)
        stats = self.alloc.statistics()
        assert dict(stats.outstanding) == total
        assert dict(stats.user_outstanding) == user

    def teardown(self) -> None:
        # Fence everything, drain it, release all landed data: every unit of capacity is free.
        for ident in sorted(self.model):
            if self.model[ident].state is EpochState.ACTIVE:
                self.alloc.fence(*ident)
                self.model[ident].state = EpochState.FENCING
        for ident in sorted(self.model):
            if self.model[ident].state is EpochState.FENCING:
                self.complete_fence(ident)
        for ident in sorted(self.model):
            m = self.model[ident]
            self.alloc.release(*ident, {r: m.landed[r] - m.released[r] for r in RESOURCES})
        stats = self.alloc.statistics()
        assert dict(stats.free) == dict(CONFIG.capacity)
        assert dict(stats.outstanding) == zero()
        assert stats.epochs_active == stats.epochs_fencing == stats.epochs_fenced == 0


AllocatorMachine.TestCase.settings = settings(stateful_step_count=40)
TestAllocatorStateMachine = AllocatorMachine.TestCase
