"""Deadline Scheduling's worked example "Three Requests" (R1–R4), with its numbers.

Two RNICs whose transmit estimates sum to 100 GB/s, deadline_aware on, θ_local = 1.2,
max_dispatch_bytes raised to 1 GiB, an empty queue; R3 is routed to TCP (not eligible).
"""

from __future__ import annotations

import pytest

from tent_sched._mlu import deadline_mlu
from tent_sched._queue import (
    AdmissionQueue,
    OwnerRequest,
    OwnerState,
    OwnerView,
    QueueLimits,
    TaskStatus,
)

MiB = 1 << 20
GiB = 1 << 30
MS = 1_000_000
BANDWIDTH_BPS = 1e11  # 800 Gb/s = 100 GB/s, the sum of the two NICs
NOW = 5_000_000_000
# Deadline Scheduling's defaults
LIMITS = QueueLimits(max_outstanding_owners=1024, max_outstanding_bytes=GiB)


def make_queue(theta: float, *, aggressive: bool = False) -> AdmissionQueue:
    return AdmissionQueue(
        LIMITS,
        deadline_aware=True,
        mlu_local_threshold=theta,
        allow_aggressive_threshold=aggressive,
        max_dispatch_bytes=GiB,
    )


def submit_r1_r2_r3(queue: AdmissionQueue) -> tuple[int, int, int]:
    r1 = queue.try_admit(
        1,
        1,
        [
            OwnerRequest(
                public_id=1, length=64 * MiB, deadline_ns=NOW + 20 * MS, degradation_eligible=True
            )
        ],
    )
    r2 = queue.try_admit(
        2,
        1,
        [
            OwnerRequest(
                public_id=1, length=512 * MiB, deadline_ns=NOW + 5 * MS, degradation_eligible=True
            )
        ],
    )
    r3 = queue.try_admit(
        3,
        1,
        [
            OwnerRequest(
                public_id=1, length=16 * MiB, deadline_ns=NOW + 3 * MS, degradation_eligible=False
            )
        ],
    )
    return r1[0], r2[0], r3[0]


def pick(queue: AdmissionQueue) -> tuple[tuple[int, ...], tuple[int, ...]]:
    result = queue.pick_for_dispatch(64, GiB, now_ns=NOW, bandwidth_bps=BANDWIDTH_BPS)
    return tuple(p.owner.owner_id for p in result.picked), result.dropped


def test_admission_orders_r3_r2_r1_regardless_of_arrival() -> None:
    queue = make_queue(1.2)
    r1, r2, r3 = submit_r1_r2_r3(queue)
    assert queue.queued_ids() == (r3, r2, r1)


def test_the_predicted_mlus_are_the_seeds() -> None:
    r2_mlu = deadline_mlu(0, 512 * MiB, NOW + 5 * MS, NOW, BANDWIDTH_BPS)
    r1_mlu = deadline_mlu(512 * MiB, 64 * MiB, NOW + 20 * MS, NOW, BANDWIDTH_BPS)
    r4_mlu = deadline_mlu(576 * MiB, 256 * MiB, NOW + 6 * MS, NOW, BANDWIDTH_BPS)
    assert round(r2_mlu, 2) == pytest.approx(1.07)
    assert round(r1_mlu, 2) == pytest.approx(0.30)
    assert round(r4_mlu, 2) == pytest.approx(1.45)


def test_pass_one_dispatches_all_three_and_r3_adds_no_bytes() -> None:
    queue = make_queue(1.2)
    r1, r2, r3 = submit_r1_r2_r3(queue)
    assert pick(queue) == ((r3, r2, r1), ())
    assert queue.dispatching_bytes == 576 * MiB  # R2 + R1; R3 (TCP) is not eligible


def test_r4_is_dropped_at_pick_time_and_the_hook_fires() -> None:
    queue = make_queue(1.2)
    submit_r1_r2_r3(queue)
    pick(queue)
    suggested: list[tuple[OwnerView, float]] = []
    queue.add_degradation_hook(lambda owner, mlu: suggested.append((owner, mlu)))
    (r4,) = queue.try_admit(
        4,
        1,
        [
            OwnerRequest(
                public_id=1, length=256 * MiB, deadline_ns=NOW + 6 * MS, degradation_eligible=True
            )
        ],
    )
    assert pick(queue) == ((), (r4,))
    assert queue.owner_state(r4) == (OwnerState.TERMINAL, TaskStatus.CANCELED)
    assert queue.status(4, 1) is TaskStatus.CANCELED
    ((owner, mlu),) = suggested
    assert owner.owner_id == r4
    assert mlu == pytest.approx(1.45, abs=0.005)
    assert queue.dispatching_bytes == 576 * MiB  # a dropped owner adds nothing


def test_with_theta_0_9_r2_is_dropped_in_pass_one() -> None:
    queue = make_queue(0.9, aggressive=True)
    r1, r2, r3 = submit_r1_r2_r3(queue)
    assert pick(queue) == ((r3, r1), (r2,))
    assert queue.dispatching_bytes == 64 * MiB


def test_completion_of_r2_subtracts_its_bytes() -> None:
    queue = make_queue(1.2)
    _r1, r2, _r3 = submit_r1_r2_r3(queue)
    pick(queue)
    queue.complete(r2, TaskStatus.COMPLETED)
    assert queue.dispatching_bytes == 64 * MiB
