"""AdmissionQueue against a plain reference model (Hypothesis stateful,
docs/semantics.md#admission-queue).

The model keeps every owner in a dict and recomputes each answer from scratch: admission in the
§2 check order, the stored order as a sort by ``(key, owner id)``, and a pick as a linear scan
over that order with promotion, drop, head-of-line stop and gate answers. The implementation's
sorted list with a front index and lazy deletion must agree with it after every step.

Invariants checked after every step: the queue never exceeds its limits (and ``at_capacity()``
says when it is at one); ``dispatching_bytes`` equals the sum of the eligible DISPATCHING
lengths; deadline owners are in EDF order in ``queued_ids()``; owner ids are never reused; an
owner without a deadline is never dropped; and a failing call changes nothing.
"""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from tent_sched._mlu import deadline_mlu
from tent_sched._queue import (
    NO_DEADLINE_KEY,
    AdmissionQueue,
    Blocked,
    EligibilityDecision,
    Eligible,
    OwnerKind,
    OwnerRequest,
    OwnerState,
    OwnerView,
    PickResult,
    QueueLimits,
    Rejected,
    TaskStatus,
)
from tent_sched.errors import (
    ExceedsDispatchWindow,
    InvalidArgument,
    InvalidEntry,
    SchedError,
    TooManyRequests,
)

MAX_DISPATCH_BYTES = 45
GATE_KEYS = (None, "a", "b")
BANDWIDTHS = (None, -1.0, 0.0, 2e8, 1e9, 3e9)


@attrs.define
class ModelOwner:
    owner_id: int
    token: int
    public_ids: tuple[int, ...]
    length: int
    kind: OwnerKind
    deadline_ns: int
    eligible: bool
    gate_key: str | None
    state: OwnerState = OwnerState.QUEUED
    status: TaskStatus = TaskStatus.PENDING


owner_shapes = st.fixed_dictionaries(
    {
        "length": st.integers(1, 48),  # > MAX_DISPATCH_BYTES now and then
        "kind": st.sampled_from(OwnerKind),
        # A coarse grid, so deadlines meet ``now`` and ``now + slack`` exactly now and then.
        "window_ns": st.sampled_from([None, -10, 0, 10, 20, 30, 40, 60, 120]),  # None: none
        "degradation_eligible": st.booleans(),
        "derived": st.integers(0, 2),
        "gate_key": st.sampled_from(GATE_KEYS),
    }
)


class QueueMachine(RuleBasedStateMachine):
    """Rules drive queue and model alike; invariants compare them."""

    queue: AdmissionQueue

    @initialize(
        deadline_aware=st.booleans(),
        promotion_slack_ns=st.sampled_from([0, 30, 60]),
        theta=st.sampled_from([0.0, 1.0, 1.5, 0.6]),
        max_owners=st.integers(3, 16),
        max_bytes=st.integers(150, 600),
        owner_reserve=st.integers(0, 3),
        byte_reserve=st.integers(0, 40),
    )
    def build(
        self,
        *,
        deadline_aware: bool,
        promotion_slack_ns: int,
        theta: float,
        max_owners: int,
        max_bytes: int,
        owner_reserve: int,
        byte_reserve: int,
    ) -> None:
        self.limits = QueueLimits(
            max_outstanding_owners=max_owners,
            max_outstanding_bytes=max_bytes,
            staging_owner_reserve=min(owner_reserve, max_owners),
            staging_byte_reserve=byte_reserve,
        )
        self.deadline_aware = deadline_aware
        self.slack = promotion_slack_ns if deadline_aware else 0
        self.theta = theta
        self.queue = AdmissionQueue(
            self.limits,
            deadline_aware=deadline_aware,
            promotion_slack_ns=promotion_slack_ns,
            mlu_local_threshold=theta,
            allow_aggressive_threshold=True,
            max_dispatch_bytes=MAX_DISPATCH_BYTES,
        )
        self.owners: dict[int, ModelOwner] = {}
        self.mapped: dict[tuple[int, int], int] = {}
        self.issued_ids: list[int] = []
        self.next_id = 1
        self.next_public_id = 1
        self.now_ns = 100
        self.hook_calls: list[tuple[int, float]] = []
        self.queue.add_degradation_hook(lambda o, mlu: self.hook_calls.append((o.owner_id, mlu)))

    # ------------------------------------------------------------------ model helpers

    def key(self, owner: ModelOwner) -> int:
        if not self.deadline_aware:
            return 0
        return owner.deadline_ns or NO_DEADLINE_KEY

    def model_order(self) -> list[ModelOwner]:
        queued = [o for o in self.owners.values() if o.state is OwnerState.QUEUED]
        return sorted(queued, key=lambda o: (self.key(o), o.owner_id))

    def outstanding(self, *, user_only: bool = False) -> tuple[int, int]:
        live = [
            o
            for o in self.owners.values()
            if o.state is not OwnerState.TERMINAL and (not user_only or o.kind is OwnerKind.USER)
        ]
        return len(live), sum(o.length for o in live)

    def snapshot(self) -> tuple[object, ...]:
        return (
            self.queue.statistics(),
            self.queue.queued_ids(),
            tuple(self.queue.owner_state(i) for i in self.owners),
        )

    def expect_failure(self, error: type[SchedError], call: Any, *args: Any) -> None:
        before = self.snapshot()
        try:
            call(*args)
        except SchedError as exc:
            assert type(exc) is error, (exc, error)
        else:
            raise AssertionError(f"expected {error.__name__}")
        assert self.snapshot() == before  # a failure changes nothing

    def expected_admit_error(
        self, token: int, slots: int, requests: list[OwnerRequest]
    ) -> type[SchedError] | None:
        seen: list[int] = []
        for request in requests:
            if request.length > MAX_DISPATCH_BYTES:
                return ExceedsDispatchWindow
            for public_id in (request.public_id, *request.derived_ids):
                if public_id in seen:
                    return InvalidArgument
                seen.append(public_id)
        if len(seen) > slots:
            return TooManyRequests
        if any((token, public_id) in self.mapped for public_id in seen):
            return InvalidEntry
        owners, nbytes = self.outstanding()
        user_owners, user_bytes = self.outstanding(user_only=True)
        users = [r for r in requests if r.kind is OwnerKind.USER]
        limits = self.limits
        if (
            owners + len(requests) > limits.max_outstanding_owners
            or nbytes + sum(r.length for r in requests) > limits.max_outstanding_bytes
            or user_owners + len(users)
            > limits.max_outstanding_owners - limits.staging_owner_reserve
            or user_bytes + sum(r.length for r in users)
            > limits.max_outstanding_bytes - limits.staging_byte_reserve
        ):
            return TooManyRequests
        return None

    def model_pick(
        self,
        max_owners: int,
        max_bytes: int,
        bandwidth: float | None,
        answers: dict[str | None, str],
        reject_residue: int,
    ) -> tuple[list[int], list[int], list[int], list[int]]:
        """Reference pick: (picked, dropped, blocked, rejected) owner ids."""
        if max_owners == 0 or max_bytes == 0:
            return [], [], [], []
        order = self.model_order()
        if self.slack > 0:
            now = self.now_ns

            def urgent(o: ModelOwner) -> bool:
                return o.deadline_ns != 0 and now < o.deadline_ns < now + self.slack

            order = [o for o in order if urgent(o)] + [o for o in order if not urgent(o)]
        drop_on = self.deadline_aware and self.theta > 0 and bandwidth is not None
        ahead = sum(
            o.length
            for o in self.owners.values()
            if o.state is OwnerState.DISPATCHING and o.eligible
        )
        used = 0
        picked: list[int] = []
        dropped: list[int] = []
        blocked: list[int] = []
        rejected: list[int] = []
        blocked_keys: set[str] = set()
        for o in order:
            if len(picked) == max_owners:
                break
            if drop_on and o.eligible:
                assert bandwidth is not None
                mlu = deadline_mlu(ahead, o.length, o.deadline_ns, self.now_ns, bandwidth)
                if mlu >= self.theta:
                    dropped.append(o.owner_id)
                    continue
            if o.length > max_bytes - used:
                break
            if o.gate_key is not None and o.gate_key in blocked_keys:
                blocked.append(o.owner_id)
                continue
            answer = self.gate_answer(o.owner_id, o.gate_key, answers, reject_residue)
            if isinstance(answer, Blocked):
                blocked.append(o.owner_id)
                if o.gate_key is not None:
                    blocked_keys.add(o.gate_key)
                continue
            if isinstance(answer, Rejected):
                rejected.append(o.owner_id)
                continue
            picked.append(o.owner_id)
            used += o.length
            if o.eligible:
                ahead += o.length
        return picked, dropped, blocked, rejected

    @staticmethod
    def gate_answer(
        owner_id: int, gate_key: str | None, answers: dict[str | None, str], reject_residue: int
    ) -> EligibilityDecision:
        if owner_id % 5 == reject_residue:
            return Rejected(TaskStatus.FAILED)
        if answers.get(gate_key) == "blocked":
            return Blocked(gate_key)
        return Eligible(("token", owner_id))

    # ------------------------------------------------------------------ rules

    @rule(
        token=st.integers(1, 3),
        shapes=st.lists(owner_shapes, min_size=1, max_size=3),
        spare_slots=st.sampled_from([-1, 0, 0, 1, 3]),
        collision=st.sampled_from(["none"] * 6 + ["inside", "mapped"]),
    )
    def admit(
        self, *, token: int, shapes: list[dict[str, Any]], spare_slots: int, collision: str
    ) -> None:
        requests: list[OwnerRequest] = []
        for shape in shapes:
            public_id, *derived = range(
                self.next_public_id, self.next_public_id + 1 + shape["derived"]
            )
            self.next_public_id += 1 + shape["derived"]
            window = shape["window_ns"]
            requests.append(
                OwnerRequest(
                    public_id=public_id,
                    length=shape["length"],
                    kind=shape["kind"],
                    deadline_ns=0 if window is None else max(1, self.now_ns + window),
                    degradation_eligible=shape["degradation_eligible"],
                    derived_ids=tuple(derived),
                    gate_key=shape["gate_key"],
                )
            )
        if collision == "inside":  # a public id twice in the submit
            requests[-1] = attrs.evolve(requests[-1], derived_ids=(requests[0].public_id,))
        mapped = [public_id for (t, public_id) in self.mapped if t == token]
        if collision == "mapped" and mapped:  # a public id already mapped
            requests[0] = attrs.evolve(requests[0], public_id=mapped[0])
        slots = max(0, sum(1 + len(r.derived_ids) for r in requests) + spare_slots)

        error = self.expected_admit_error(token, slots, requests)
        if error is not None:
            self.expect_failure(error, self.queue.try_admit, token, slots, requests)
            return
        ids = self.queue.try_admit(token, slots, requests)
        assert ids == tuple(range(self.next_id, self.next_id + len(requests)))
        for owner_id, request in zip(ids, requests, strict=True):
            public_ids = (request.public_id, *request.derived_ids)
            self.owners[owner_id] = ModelOwner(
                owner_id=owner_id,
                token=token,
                public_ids=public_ids,
                length=request.length,
                kind=request.kind,
                deadline_ns=request.deadline_ns,
                eligible=request.degradation_eligible,
                gate_key=request.gate_key,  # type: ignore[arg-type]
            )
            for public_id in public_ids:
                self.mapped[(token, public_id)] = owner_id
        self.issued_ids.extend(ids)
        self.next_id += len(requests)

    @precondition(lambda self: any(o.state is OwnerState.QUEUED for o in self.owners.values()))
    @rule(
        max_owners=st.integers(0, 4),
        max_bytes=st.integers(0, 120),
        advance_ns=st.sampled_from([0, 0, 10, 30]),
        bandwidth=st.sampled_from(BANDWIDTHS),
        use_gate=st.booleans(),
        answers=st.dictionaries(st.sampled_from(GATE_KEYS), st.sampled_from(["ok", "blocked"])),
        reject_residue=st.integers(0, 9),  # 5..9: never reject
    )
    def pick(
        self,
        *,
        max_owners: int,
        max_bytes: int,
        advance_ns: int,
        bandwidth: float | None,
        use_gate: bool,
        answers: dict[str | None, str],
        reject_residue: int,
    ) -> None:
        self.now_ns += advance_ns
        if not use_gate:
            answers, reject_residue = {}, 9
        expected = self.model_pick(max_owners, max_bytes, bandwidth, answers, reject_residue)

        def gate(owner: OwnerView, now_ns: int) -> EligibilityDecision:
            assert now_ns == self.now_ns
            key = owner.gate_key
            assert key is None or isinstance(key, str)
            return self.gate_answer(owner.owner_id, key, answers, reject_residue)

        self.hook_calls.clear()
        result: PickResult = self.queue.pick_for_dispatch(
            max_owners,
            max_bytes,
            now_ns=self.now_ns,
            bandwidth_bps=bandwidth,
            eligibility=gate if use_gate else None,
        )
        picked = [p.owner.owner_id for p in result.picked]
        actual = (picked, list(result.dropped), list(result.blocked), list(result.rejected))
        assert actual == expected, (actual, expected)
        for p in result.picked:
            assert p.token == (("token", p.owner.owner_id) if use_gate else None)
        assert [owner_id for owner_id, _mlu in self.hook_calls] == list(result.dropped)
        for owner_id in result.dropped:
            assert self.owners[owner_id].deadline_ns != 0  # never drop a no-deadline owner
            assert self.owners[owner_id].eligible
        for owner_id in picked:
            self.owners[owner_id].state = OwnerState.DISPATCHING
        for owner_id in result.dropped:
            self.owners[owner_id].state = OwnerState.TERMINAL
            self.owners[owner_id].status = TaskStatus.CANCELED
        for owner_id in result.rejected:
            self.owners[owner_id].state = OwnerState.TERMINAL
            self.owners[owner_id].status = TaskStatus.FAILED

    @rule(
        pick_index=st.integers(0, 1000),
        status=st.sampled_from([s for s in TaskStatus if s is not TaskStatus.PENDING]),
        misuse=st.integers(0, 9),
    )
    def complete(self, *, pick_index: int, status: TaskStatus, misuse: int) -> None:
        dispatching = [o for o in self.owners.values() if o.state is OwnerState.DISPATCHING]
        if misuse == 0 or not dispatching:  # a queued, terminal or unknown owner
            others = [o.owner_id for o in self.owners.values() if o not in dispatching]
            owner_id = others[pick_index % len(others)] if others else self.next_id
            self.expect_failure(InvalidEntry, self.queue.complete, owner_id, status)
            return
        owner = dispatching[pick_index % len(dispatching)]
        self.queue.complete(owner.owner_id, status)
        owner.state, owner.status = OwnerState.TERMINAL, status

    @rule(pick_index=st.integers(0, 1000))
    def cancel(self, pick_index: int) -> None:
        if not self.owners:
            return
        owner = list(self.owners.values())[pick_index % len(self.owners)]
        if owner.state is OwnerState.DISPATCHING or (
            owner.state is OwnerState.TERMINAL and owner.status is not TaskStatus.CANCELED
        ):
            self.expect_failure(InvalidEntry, self.queue.cancel, owner.owner_id)
            return
        self.queue.cancel(owner.owner_id)
        owner.state, owner.status = OwnerState.TERMINAL, TaskStatus.CANCELED

    @rule(token=st.integers(1, 3))
    def retire(self, token: int) -> None:
        batch = [o for o in self.owners.values() if o.token == token]
        if any(o.state is not OwnerState.TERMINAL for o in batch):
            self.expect_failure(InvalidEntry, self.queue.retire_batch, token)
            return
        self.queue.retire_batch(token)
        for owner in batch:
            del self.owners[owner.owner_id]
            for public_id in owner.public_ids:
                del self.mapped[(token, public_id)]
        for owner in batch:
            self.expect_failure(InvalidEntry, self.queue.owner, owner.owner_id)
            self.expect_failure(InvalidEntry, self.queue.status, token, owner.public_ids[0])

    # ------------------------------------------------------------------ invariants

    @invariant()
    def stored_order_matches_the_model(self) -> None:
        assert list(self.queue.queued_ids()) == [o.owner_id for o in self.model_order()]

    @invariant()
    def deadline_owners_are_in_edf_order(self) -> None:
        if not self.deadline_aware:
            return
        deadlines = [self.owners[i].deadline_ns for i in self.queue.queued_ids()]
        with_deadline = [d for d in deadlines if d != 0]
        assert with_deadline == sorted(with_deadline)
        assert deadlines[: len(with_deadline)] == with_deadline  # no-deadline owners last

    @invariant()
    def statistics_match_the_model_and_stay_within_limits(self) -> None:
        stats = self.queue.statistics()
        owners, nbytes = self.outstanding()
        user_owners, user_bytes = self.outstanding(user_only=True)
        assert (stats.outstanding_owners, stats.outstanding_bytes) == (owners, nbytes)
        assert (stats.outstanding_user_owners, stats.outstanding_user_bytes) == (
            user_owners,
            user_bytes,
        )
        limits = self.limits
        assert owners <= limits.max_outstanding_owners
        assert nbytes <= limits.max_outstanding_bytes
        assert user_owners <= limits.max_outstanding_owners - limits.staging_owner_reserve
        assert user_bytes <= limits.max_outstanding_bytes - limits.staging_byte_reserve
        dispatching = [o for o in self.owners.values() if o.state is OwnerState.DISPATCHING]
        assert stats.dispatching_owners == len(dispatching)
        assert stats.queued_owners == len(self.model_order())
        assert self.queue.at_capacity() == (
            owners >= limits.max_outstanding_owners or nbytes >= limits.max_outstanding_bytes
        )

    @invariant()
    def dispatching_bytes_is_the_sum_of_eligible_dispatching_lengths(self) -> None:
        expected = sum(
            o.length
            for o in self.owners.values()
            if o.state is OwnerState.DISPATCHING and o.eligible
        )
        assert self.queue.dispatching_bytes == expected

    @invariant()
    def owner_ids_are_never_reused(self) -> None:
        assert self.issued_ids == list(range(1, len(self.issued_ids) + 1))

    @invariant()
    def public_status_matches_the_model(self) -> None:
        for (token, public_id), owner_id in self.mapped.items():
            owner = self.owners[owner_id]
            assert self.queue.owner_state(owner_id) == (owner.state, owner.status)
            assert self.queue.status(token, public_id) is owner.status


QueueMachine.TestCase.settings = settings(QueueMachine.TestCase.settings, stateful_step_count=100)
TestAdmissionQueueAgainstModel = QueueMachine.TestCase


# Drop candidates: eligible, a deadline, sizes comparable to the window (MLU near 1 at 1 GB/s).
urgent_shapes = st.fixed_dictionaries(
    {
        "length": st.integers(15, 48),
        "kind": st.sampled_from(OwnerKind),
        "window_ns": st.sampled_from([40, 60]),
        "degradation_eligible": st.just(True),
        "derived": st.just(0),
        "gate_key": st.sampled_from(GATE_KEYS),
    }
)


@given(
    promotion_slack_ns=st.sampled_from([0, 30, 60]),
    theta=st.sampled_from([1.0, 1.0, 1.5, 0.6]),
    dispatched=st.lists(owner_shapes, max_size=2),
    queued=st.lists(st.one_of(owner_shapes, urgent_shapes), min_size=1, max_size=3),
    max_owners=st.integers(1, 6),
    max_bytes=st.integers(1, 150),
    bandwidth=st.sampled_from([1e9, 1e9, 2e8, 3e9]),
    use_gate=st.booleans(),
    answers=st.dictionaries(st.sampled_from(GATE_KEYS), st.sampled_from(["ok", "blocked"])),
    reject_residue=st.integers(0, 9),
)
def test_a_pick_behind_dispatched_bytes_agrees_with_the_model(
    *,
    promotion_slack_ns: int,
    theta: float,
    dispatched: list[dict[str, Any]],
    queued: list[dict[str, Any]],
    max_owners: int,
    max_bytes: int,
    bandwidth: float,
    use_gate: bool,
    answers: dict[str | None, str],
    reject_residue: int,
) -> None:
    """The drop, promotion and gate paths with bytes already in flight, every example."""
    machine = QueueMachine()
    machine.build(
        deadline_aware=True,
        promotion_slack_ns=promotion_slack_ns,
        theta=theta,
        max_owners=16,
        max_bytes=600,
        owner_reserve=0,
        byte_reserve=0,
    )
    if dispatched:
        machine.admit(token=1, shapes=dispatched, spare_slots=0, collision="none")
    machine.pick(  # no provider: nothing dropped, everything that fits dispatched
        max_owners=16,
        max_bytes=600,
        advance_ns=0,
        bandwidth=None,
        use_gate=False,
        answers={},
        reject_residue=9,
    )
    machine.admit(token=2, shapes=queued, spare_slots=0, collision="none")
    machine.admit(token=3, shapes=queued, spare_slots=0, collision="none")
    machine.pick(
        max_owners=max_owners,
        max_bytes=max_bytes,
        advance_ns=10,
        bandwidth=bandwidth,
        use_gate=use_gate,
        answers=answers,
        reject_residue=reject_residue,
    )
    machine.stored_order_matches_the_model()
    machine.statistics_match_the_model_and_stay_within_limits()
    machine.dispatching_bytes_is_the_sum_of_eligible_dispatching_lengths()
    machine.public_status_matches_the_model()
