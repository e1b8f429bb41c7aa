"""A status given as a string gets an error that names the enum member to pass."""

from __future__ import annotations

import pytest

from tent_sched import AdmissionQueue, OwnerRequest, QueueLimits, Rejected, TaskStatus
from tent_sched.errors import InvalidArgument


def _dispatching_queue() -> AdmissionQueue:
    queue = AdmissionQueue(QueueLimits(max_outstanding_owners=4, max_outstanding_bytes=1 << 20))
    assert queue.try_admit(1, 8, [OwnerRequest(public_id=1, length=10)]) == (1,)
    (picked,) = queue.pick_for_dispatch(1, 1 << 20, now_ns=0).picked
    assert picked.owner.public_id == 1
    return queue


@pytest.mark.parametrize("given", ["COMPLETED", "completed"])
def test_complete_with_the_status_as_a_string_names_the_member(given: str) -> None:
    queue = _dispatching_queue()
    with pytest.raises(
        InvalidArgument, match=r"tent_sched\.TaskStatus member, not the string"
    ) as err:
        queue.complete(1, given)  # type: ignore[arg-type]
    assert "pass TaskStatus.COMPLETED" in str(err.value)
    queue.complete(1, TaskStatus.COMPLETED)  # the failure changed nothing


def test_a_non_terminal_or_foreign_status_lists_the_terminal_members() -> None:
    queue = _dispatching_queue()
    with pytest.raises(InvalidArgument, match=r"pass TaskStatus\.PENDING \(and a terminal one"):
        queue.complete(1, "pending")  # type: ignore[arg-type]
    with pytest.raises(
        InvalidArgument, match=r"terminal tent_sched\.TaskStatus \(TaskStatus\.COMPLETED, "
    ):
        queue.complete(1, 3)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=r"TaskStatus\.FAILED"):
        Rejected("FAILED")  # type: ignore[arg-type]
