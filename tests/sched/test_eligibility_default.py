"""Degradation eligibility is opt-in (issue 10 item 13; reference #2816 and the seed).

An owner the caller did not mark (TCP, staged, local) is never dropped and its bytes never
count in ``dispatching_bytes``; only an explicitly eligible owner can be.
"""

from __future__ import annotations

from tent_sched import AdmissionQueue, OwnerRequest, QueueLimits, TaskStatus

MS = 1_000_000
NOW = 1_000 * MS


def _queue() -> AdmissionQueue:
    return AdmissionQueue(
        QueueLimits(max_outstanding_owners=8, max_outstanding_bytes=1 << 30),
        deadline_aware=True,
        mlu_local_threshold=1.0,
    )


def test_the_default_is_not_eligible() -> None:
    assert OwnerRequest(public_id=1, length=1).degradation_eligible is False


def test_an_unmarked_past_due_owner_is_dispatched_not_dropped() -> None:
    queue = _queue()
    (owner,) = queue.try_admit(1, 1, [OwnerRequest(public_id=1, length=4096, deadline_ns=NOW - MS)])
    result = queue.pick_for_dispatch(8, 1 << 20, now_ns=NOW, bandwidth_bps=1e9)
    assert result.dropped == ()
    assert [p.owner.owner_id for p in result.picked] == [owner]
    assert queue.dispatching_bytes == 0  # its bytes inflate nobody's prediction
    queue.complete(owner, TaskStatus.COMPLETED)


def test_an_eligible_past_due_owner_is_dropped() -> None:
    queue = _queue()
    request = OwnerRequest(
        public_id=1, length=4096, deadline_ns=NOW - MS, degradation_eligible=True
    )
    (owner,) = queue.try_admit(1, 1, [request])
    result = queue.pick_for_dispatch(8, 1 << 20, now_ns=NOW, bandwidth_bps=1e9)
    assert result.dropped == (owner,)
