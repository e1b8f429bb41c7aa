"""A DISABLED DispatchGate is invisible: the queue behaves exactly as with no gate at all.

Hypothesis generates whole workloads (queue configuration, then admits, picks with windows,
time and bandwidth, completions and cancels, misuse included) and runs each on two queues: one
picking with ``eligibility=None``, one with a default (DISABLED) gate. Every result, every
raised error and every statistics snapshot must be equal.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tent_credit import CreditMode, DispatchContext, DispatchGate, Plan
from tent_sched import AdmissionQueue, OwnerKind, OwnerRequest, QueueLimits, TaskStatus

CONTEXTS = [
    None,
    DispatchContext(plan=Plan.REMOTE_DIRECT_WRITE, receiver=1),
    DispatchContext(plan=Plan.REMOTE_STAGED_WRITE, receiver=2, qos_class=1),
    DispatchContext(plan=Plan.LOCAL, receiver=1),
]
TERMINAL = [s for s in TaskStatus if s is not TaskStatus.PENDING]

owners: st.SearchStrategy[dict[str, Any]] = st.builds(
    dict,
    length=st.integers(1, 64),
    kind=st.sampled_from(OwnerKind),
    window_ns=st.one_of(st.none(), st.integers(-20, 200)),
    degradation_eligible=st.booleans(),
    context=st.sampled_from(CONTEXTS),
)
admits = st.tuples(st.just("admit"), st.integers(1, 2), st.lists(owners, min_size=1, max_size=3))
picks = st.tuples(
    st.just("pick"),
    st.integers(0, 4),
    st.integers(0, 160),
    st.sampled_from([0, 0, 7, 50]),
    st.sampled_from([None, 0.0, 1.0, 5.0, 1e9]),
)
operations = st.one_of(  # admits and picks weighted up, so most workloads dispatch
    admits,
    admits,
    picks,
    picks,
    st.tuples(st.just("complete"), st.integers(0, 12), st.sampled_from(TERMINAL)),
    st.tuples(st.just("cancel"), st.integers(0, 12)),
    st.tuples(st.just("retire"), st.integers(1, 2)),
)
configs: st.SearchStrategy[dict[str, Any]] = st.builds(
    dict,
    deadline_aware=st.booleans(),
    promotion_slack_ns=st.sampled_from([0, 30]),
    mlu_local_threshold=st.sampled_from([0.0, 1.0, 2.0]),
    max_owners=st.integers(3, 16),
)


def run(queue: AdmissionQueue, gate: DispatchGate | None, ops: list[tuple[Any, ...]]) -> list[Any]:
    """Apply ``ops``; return every observable outcome (results, errors, statistics)."""
    trace: list[Any] = []
    now = 1_000
    public = 0
    dispatching: list[int] = []  # completes and cancels mostly name live owners (index % len)
    for op in ops:
        outcome: Any
        try:
            if op[0] == "admit":
                requests = []
                for shape in op[2]:
                    public += 1
                    window = shape["window_ns"]
                    ctx = shape["context"]
                    requests.append(
                        OwnerRequest(
                            public_id=public,
                            length=shape["length"],
                            kind=shape["kind"],
                            deadline_ns=0 if window is None else max(1, now + window),
                            degradation_eligible=shape["degradation_eligible"],
                            gate_key=None if ctx is None else ctx.gate_key,
                            context=ctx,
                        )
                    )
                outcome = queue.try_admit(op[1], 8, requests)
            elif op[0] == "pick":
                now += op[3]
                outcome = queue.pick_for_dispatch(
                    op[1], op[2], now_ns=now, bandwidth_bps=op[4], eligibility=gate
                )
                dispatching.extend(p.owner.owner_id for p in outcome.picked)
            elif op[0] == "complete":
                live = op[1] < 10 and dispatching
                owner_id = dispatching.pop(op[1] % len(dispatching)) if live else op[1]
                queue.complete(owner_id, op[2])
                outcome = None
            elif op[0] == "cancel":
                queued = queue.queued_ids()
                live = op[1] < 10 and queued
                queue.cancel(queued[op[1] % len(queued)] if live else op[1])
                outcome = None
            else:
                queue.retire_batch(op[1])
                outcome = None
        except Exception as exc:  # misuse is part of the workload: compare the errors too
            outcome = (type(exc), str(exc))
        trace.append((op[0], outcome, queue.statistics(), queue.queued_ids()))
    return trace


@given(config=configs, ops=st.lists(operations, min_size=5, max_size=40))
def test_a_disabled_gate_changes_no_pick_result_error_or_statistic(
    config: dict[str, Any], ops: list[tuple[Any, ...]]
) -> None:
    max_owners = config.pop("max_owners")

    def queue() -> AdmissionQueue:
        limits = QueueLimits(max_outstanding_owners=max_owners, max_outstanding_bytes=400)
        return AdmissionQueue(limits, **config)

    gate = DispatchGate()
    assert gate.mode is CreditMode.DISABLED
    ungated = run(queue(), None, ops)
    gated = run(queue(), gate, ops)
    assert gated == ungated
    assert gate.statistics().unsettled_tokens == 0 and gate.statistics().no_credit_dispatches == 0


def test_the_workloads_do_pick_owners() -> None:
    """Guard against a vacuous comparison: a plain workload dispatches through the gate."""
    ops: list[tuple[Any, ...]] = [
        (
            "admit",
            1,
            [
                {
                    "length": 5,
                    "kind": OwnerKind.USER,
                    "window_ns": None,
                    "degradation_eligible": True,
                    "context": CONTEXTS[1],
                }
            ],
        ),
        ("pick", 4, 100, 0, None),
    ]
    limits = QueueLimits(max_outstanding_owners=4, max_outstanding_bytes=200)
    trace = run(AdmissionQueue(limits), DispatchGate(), ops)
    result = trace[1][1]
    assert [p.token for p in result.picked] == [None] and len(result.picked) == 1
