"""The admission queue of deadline scheduling (docs/semantics.md#admission-queue, Deadline
Scheduling "Admission Queue").

An owner is one scheduled request. Its lifecycle is the table :data:`OWNER_TRANSITIONS`
(QUEUED → DISPATCHING → TERMINAL); every state change goes through that table, a missing
``(state, event)`` key is the misuse error.

Data structure (as trio's ``_core/_run.py`` Deadlines): the queued owners live in one list kept
sorted by their order key (the deadline, or ``2**64 - 1`` without one; a constant in FIFO mode) from
a front index ``_head``; entries below the head are consumed. An owner leaves the list when a pick
visits it (dispatched, dropped, rejected); an owner canceled while queued stays as a terminal
leftover (lazy deletion) that the next pick over it, or a periodic compaction, removes. Costs:
admit O(log n) comparisons plus a memmove, pick O(visited + log n), complete/cancel O(1)
amortised.

:class:`AdmissionQueue` is one class over private mixins split by responsibility:
:mod:`._queue_state` (the owner record, construction and the shared lifecycle helpers),
:mod:`._queue_admit` (:meth:`~AdmissionQueue.try_admit`), :mod:`._queue_pick`
(:meth:`~AdmissionQueue.pick_for_dispatch`) and :mod:`._queue_queries` (status and statistics).
This module holds the configuration views, the degradation hooks, completion, cancel and batch
retirement, and re-exports the public values of :mod:`._queue_values`.
"""

from __future__ import annotations

from collections.abc import Callable

from ._queue_admit import _QueueAdmission
from ._queue_pick import _QueuePick
from ._queue_queries import _QueueQueries
from ._queue_state import _COMPACT_MIN
from ._queue_values import (
    NO_DEADLINE_KEY,
    OWNER_TRANSITIONS,
    TERMINAL_STATUSES,
    U64_MAX,
    Blocked,
    CompletionCounts,
    DegradationHook,
    Eligibility,
    EligibilityDecision,
    Eligible,
    OwnerKind,
    OwnerRequest,
    OwnerState,
    OwnerView,
    Picked,
    PickResult,
    QueueLimits,
    QueueStatistics,
    Rejected,
    TaskStatus,
    Verdict,
    _check_u64,
    check_terminal_status,
)
from .errors import InvalidArgument, InvalidEntry

__all__ = [
    "NO_DEADLINE_KEY",
    "OWNER_TRANSITIONS",
    "TERMINAL_STATUSES",
    "U64_MAX",
    "AdmissionQueue",
    "Blocked",
    "CompletionCounts",
    "DegradationHook",
    "Eligibility",
    "EligibilityDecision",
    "Eligible",
    "OwnerKind",
    "OwnerRequest",
    "OwnerState",
    "OwnerView",
    "PickResult",
    "Picked",
    "QueueLimits",
    "QueueStatistics",
    "Rejected",
    "TaskStatus",
    "Verdict",
]


class AdmissionQueue(_QueueAdmission, _QueuePick, _QueueQueries):
    """Capacity-bounded queue of owners, dispatched FIFO or earliest-deadline-first (§2).

    Sans-IO: time (``now_ns``) and the bandwidth estimate (bytes per second) are arguments of
    :meth:`pick_for_dispatch`. Every public call validates fully before it changes anything; a
    raised error leaves the queue exactly as it was.

    Where we differ from the reference (docs/semantics.md#admission-queue):

    1. Promotion is computed at pick time over an always-sorted queue: the promoted owners
       (``now < deadline < now + promotion_slack_ns``) form one contiguous key range, found by
       bisection and visited first. The reference re-partitions its deque in place on each
       pick, after which later EDF inserts can land in the wrong place; here the stored order
       is always plain EDF and :meth:`queued_ids` shows it.
    2. Past-due owners (``deadline <= now``) are not promoted; they keep their place behind the
       promoted group. This follows the reference rather than Deadline Scheduling's wording ("any
       owner whose slack has fallen below"): a past-due owner can no longer make its window, so the
       still-feasible urgent ones go first; with the drop on it is dropped anyway.
    3. A deadline of exactly ``2**64 - 1`` shares the no-deadline order key (as in the
       reference, it sorts FIFO among no-deadline owners) and is never promoted.
    4. ``staging_*_reserve > max_*`` is a configuration error when the limits are built (the
       reference accepts the limits and refuses the submit). An ``mlu_local_threshold`` in
       (0, 1) is accepted, as in the reference, and logged as a warning unless
       ``allow_aggressive_threshold`` acknowledges it.
    5. Degradation hooks have a public registration API (:meth:`add_degradation_hook`). They
       run after the pick is committed, so a hook may call back into the queue.
    """

    # ------------------------------------------------------------------ configuration views

    @property
    def limits(self) -> QueueLimits:
        """The capacity limits the queue was built with."""
        return self._limits

    @property
    def deadline_aware(self) -> bool:
        """Whether the queue orders earliest-deadline-first (else FIFO)."""
        return self._deadline_aware

    @property
    def dispatching_bytes(self) -> int:
        """Bytes of degradation-eligible owners dispatched and not yet completed (§2)."""
        return self._dispatching_bytes

    def add_degradation_hook(self, hook: DegradationHook) -> Callable[[], None]:
        """Register an ``on_local_decode_suggested`` hook; return its unregister function.

        Hooks are called once per dropped owner, in drop order and registration order, after the
        pick that dropped it is committed. The same callable may be registered twice (it is then
        called twice). The unregister function is idempotent. Raises InvalidArgument if ``hook``
        is not callable (nothing registered).
        """
        if not callable(hook):
            raise InvalidArgument(f"hook must be callable, got {type(hook).__name__}")
        handle = self._next_hook
        self._next_hook += 1
        self._hooks[handle] = hook

        def unregister() -> None:
            self._hooks.pop(handle, None)

        return unregister

    # ------------------------------------------------------------------ completion and cancel

    def complete(self, owner_id: int, status: TaskStatus) -> None:
        """Record the terminal ``status`` of a DISPATCHING owner (§2).

        ``dispatching_bytes`` drops by the owner's length if it is degradation-eligible,
        whatever the status; its capacity is released. Raises InvalidArgument for owner id 0,
        a non-u64 id or a non-terminal status; InvalidEntry for an unknown owner or one not
        DISPATCHING (queued or already terminal). A failure changes nothing. ``status`` must be
        the enum member (``TaskStatus.COMPLETED``), not its name or value as a string: the
        error then names the member to pass.
        """
        self._check_not_picking("complete")
        _check_u64(owner_id, "owner_id", minimum=1)
        check_terminal_status(status)
        owner = self._lookup(owner_id)
        self._transition(owner, "complete", status)
        self._dispatching_owners -= 1
        if owner.view.degradation_eligible:
            self._dispatching_bytes -= owner.view.length
        self._release(owner)
        self._completions[status] += 1

    def cancel(self, owner_id: int) -> None:
        """Cancel a QUEUED owner: it becomes CANCELED and its capacity is released (§2).

        Canceling an owner that is already CANCELED (also by a drop) is an idempotent no-op.
        Raises InvalidArgument for owner id 0 or a non-u64 id; InvalidEntry for an unknown owner,
        a DISPATCHING one (cancel it through its transport) or one terminal with another status.
        A failure changes nothing.
        """
        self._check_not_picking("cancel")
        _check_u64(owner_id, "owner_id", minimum=1)
        owner = self._lookup(owner_id)
        if owner.state is OwnerState.TERMINAL and owner.status is TaskStatus.CANCELED:
            return  # §2: idempotent
        self._transition(owner, "cancel", TaskStatus.CANCELED)
        self._release(owner)
        self._queued -= 1
        self._canceled += 1
        # The entry stays as a leftover; compact once leftovers outnumber the live owners.
        leftovers = len(self._entries) - self._head - self._queued
        if leftovers > _COMPACT_MIN and leftovers > self._queued:
            self._entries = [o for o in self._entries[self._head :] if o.state is OwnerState.QUEUED]
            self._head = 0

    def retire_batch(self, batch_token: int) -> None:
        """Erase the records and public-id mappings of a batch; the token may then be reused.

        Raises InvalidArgument for token 0 or a non-u64 token; InvalidEntry (nothing erased)
        while any owner of the batch is not terminal. Retiring a token with no owners (never
        used, or already retired) is a no-op.
        """
        self._check_not_picking("retire_batch")
        _check_u64(batch_token, "batch_token")
        if batch_token == 0:
            raise InvalidArgument("batch token 0 is reserved")
        owner_ids = self._batches.get(batch_token, [])
        for owner_id in owner_ids:
            if self._owners[owner_id].state is not OwnerState.TERMINAL:
                raise InvalidEntry(f"batch {batch_token} has a non-terminal owner {owner_id}")
        for owner_id in owner_ids:
            owner = self._owners.pop(owner_id)
            for public_id in (owner.view.public_id, *owner.derived_ids):
                del self._public_ids[(batch_token, public_id)]
        self._batches.pop(batch_token, None)
