"""Read-only queries of :class:`~tent_sched._queue.AdmissionQueue`: a task's status, the owner
a public id resolves to, an owner's view and state, the queued order, and the statistics
snapshot. A mixin over :mod:`._queue_state`; nothing here changes the queue.
"""

from __future__ import annotations

from ._queue_state import _QueueState
from ._queue_values import (
    NO_DEADLINE_KEY,
    CompletionCounts,
    OwnerState,
    OwnerView,
    QueueStatistics,
    TaskStatus,
    _check_u64,
)
from .errors import InvalidEntry


class _QueueQueries(_QueueState):
    """The queries of an :class:`AdmissionQueue` (module docstring)."""

    def status(self, batch_token: int, public_id: int) -> TaskStatus:
        """Public status of a task id (own or derived): PENDING until terminal, then its status.

        Raises InvalidArgument for a non-u64 argument, InvalidEntry if the id is not mapped.
        """
        owner = self._owners[self.owner_id_of(batch_token, public_id)]
        return owner.status

    def owner_id_of(self, batch_token: int, public_id: int) -> int:
        """The owner id a public task id (own or derived) of a batch resolves to.

        Raises InvalidArgument for a non-u64 argument, InvalidEntry if the id is not mapped.
        """
        _check_u64(batch_token, "batch_token")
        _check_u64(public_id, "public_id")
        try:
            return self._public_ids[(batch_token, public_id)]
        except KeyError:
            raise InvalidEntry(
                f"public id {public_id} is not mapped in batch {batch_token}"
            ) from None

    def owner(self, owner_id: int) -> OwnerView:
        """The immutable view of an owner. Raises InvalidArgument / InvalidEntry (unknown id)."""
        _check_u64(owner_id, "owner_id")
        return self._lookup(owner_id).view

    def owner_state(self, owner_id: int) -> tuple[OwnerState, TaskStatus]:
        """``(state, status)`` of an owner; status is PENDING until TERMINAL.

        Raises InvalidArgument for a non-u64 id, InvalidEntry for an unknown (or retired) one.
        """
        _check_u64(owner_id, "owner_id")
        owner = self._lookup(owner_id)
        return owner.state, owner.status

    def queued_ids(self) -> tuple[int, ...]:
        """Ids of the QUEUED owners in stored dispatch order (promotion not applied). O(n)."""
        queued = OwnerState.QUEUED
        return tuple(
            owner.view.owner_id for owner in self._entries[self._head :] if owner.state is queued
        )

    def pick_reads_clock(self) -> bool:
        """Whether the clock alone can change what :meth:`pick_for_dispatch` does with the
        owners now queued: only promotion and the MLU drop read ``now_ns``, and only for an
        owner with a deadline (``deadline_aware``, with a promotion slack or θ > 0). A driver
        whose pick dispatched nothing may skip the next one while nothing else changed only
        when this is ``False``. O(1): the queue is in deadline order, so the first stored owner
        tells (a terminal leftover there answers ``True``, which only costs a skipped skip)."""
        if not self._deadline_aware or not (self._drop_configured or self._promotion_slack_ns):
            return False
        entries = self._entries
        return self._head < len(entries) and entries[self._head].key != NO_DEADLINE_KEY

    def at_capacity(self) -> bool:
        """Whether the outstanding owners or bytes are at their limit (``max_outstanding_owners``
        or ``max_outstanding_bytes``): what :meth:`statistics` would show against
        :attr:`limits`, without building the snapshot (a driver asks at every pass). O(1)."""
        limits = self._limits
        return (
            self._outstanding_owners >= limits.max_outstanding_owners
            or self._outstanding_bytes >= limits.max_outstanding_bytes
        )

    def statistics(self) -> QueueStatistics:
        """A frozen snapshot of the queue's gauges and counters."""
        completions = self._completions
        return QueueStatistics(
            outstanding_owners=self._outstanding_owners,
            outstanding_bytes=self._outstanding_bytes,
            outstanding_user_owners=self._outstanding_user_owners,
            outstanding_user_bytes=self._outstanding_user_bytes,
            queued_owners=self._queued,
            dispatching_owners=self._dispatching_owners,
            dispatching_bytes=self._dispatching_bytes,
            admitted_total=self._admitted,
            dispatched_total=self._dispatched,
            dropped_total=self._dropped,
            canceled_total=self._canceled,
            rejected_total=self._rejected,
            blocked_total=self._blocked,
            completions=CompletionCounts(
                completed=completions[TaskStatus.COMPLETED],
                failed=completions[TaskStatus.FAILED],
                timeout=completions[TaskStatus.TIMEOUT],
                canceled=completions[TaskStatus.CANCELED],
                invalid=completions[TaskStatus.INVALID],
            ),
        )
