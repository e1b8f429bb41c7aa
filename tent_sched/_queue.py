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
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Hashable, Sequence
from operator import attrgetter

from ._describe import describe
from ._mlu import mlu as unchecked_mlu
from .errors import ConfigError, InvalidArgument, InvalidEntry, TooManyRequests

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

from ._queue_values import (
    _EMPTY_PICK,
    _NO_TOKEN,
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
    _is_float_number,
    check_terminal_status,
)

# --------------------------------------------------------------------------- the queue


class _Owner:
    """Mutable per-owner record; the immutable part is ``view``."""

    __slots__ = ("batch_token", "derived_ids", "key", "state", "status", "view")

    def __init__(self, view: OwnerView, batch_token: int, derived_ids: tuple[int, ...], key: int):
        self.view = view
        self.batch_token = batch_token
        self.derived_ids = derived_ids
        self.key = key
        self.state = OwnerState.QUEUED
        self.status = TaskStatus.PENDING


_ORDER_KEY = attrgetter("key")
_COMPACT_MIN = 64  # below this many dead slots, compaction is not worth a pass


class AdmissionQueue:
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
    4. ``staging_*_reserve > max_*`` and an ``mlu_local_threshold`` in (0, 1) (unless
       ``allow_aggressive_threshold``) are configuration errors; the reference accepts both.
    5. Degradation hooks have a public registration API (:meth:`add_degradation_hook`). They
       run after the pick is committed, so a hook may call back into the queue.
    """

    def __init__(
        self,
        limits: QueueLimits,
        *,
        deadline_aware: bool = False,
        promotion_slack_ns: int = 0,
        mlu_local_threshold: float = 0.0,
        allow_aggressive_threshold: bool = False,
        max_dispatch_bytes: int | None = None,
    ) -> None:
        """Create an empty queue.

        ``mlu_local_threshold`` (θ): 0 disables the drop; θ ≥ 1.0 is accepted; 0 < θ < 1
        needs ``allow_aggressive_threshold=True`` (it drops requests the predictor expects to
        make their window). ``max_dispatch_bytes``: when given, a longer owner is refused at
        submit (it could never fit a dispatch window). Promotion and drop act only with
        ``deadline_aware``.

        Raises ConfigError on any invalid argument (wrong type, negative or non-finite θ,
        aggressive θ without the flag, zero ``max_dispatch_bytes``).
        """
        if not isinstance(limits, QueueLimits):
            raise ConfigError(f"limits must be QueueLimits, got {type(limits).__name__}")
        for name, flag in (
            ("deadline_aware", deadline_aware),
            ("allow_aggressive_threshold", allow_aggressive_threshold),
        ):
            if type(flag) is not bool:
                raise ConfigError(f"{name} must be a bool, got {describe(flag)}")
        if type(promotion_slack_ns) is not int or not 0 <= promotion_slack_ns <= U64_MAX:
            raise ConfigError(
                f"promotion_slack_ns must be a u64 int, got {describe(promotion_slack_ns)}"
            )
        theta = mlu_local_threshold
        if type(theta) not in (int, float) or not math.isfinite(theta) or theta < 0:
            raise ConfigError(
                f"mlu_local_threshold must be a finite number >= 0, got {describe(theta)}"
            )
        if 0 < theta < 1.0 and not allow_aggressive_threshold:
            raise ConfigError(
                f"mlu_local_threshold {theta} < 1.0 drops requests predicted to succeed; "
                "set allow_aggressive_threshold to accept it"
            )
        if max_dispatch_bytes is not None and (
            type(max_dispatch_bytes) is not int or not 1 <= max_dispatch_bytes <= U64_MAX
        ):
            raise ConfigError(
                f"max_dispatch_bytes must be a u64 int > 0, got {describe(max_dispatch_bytes)}"
            )

        self._limits = limits
        self._deadline_aware = deadline_aware
        self._promotion_slack_ns = promotion_slack_ns if deadline_aware else 0
        self._theta = float(theta)
        self._drop_configured = deadline_aware and theta > 0  # §2: + a bandwidth provider
        self._max_dispatch_bytes = max_dispatch_bytes
        self._user_owner_limit = limits.max_outstanding_owners - limits.staging_owner_reserve
        self._user_byte_limit = limits.max_outstanding_bytes - limits.staging_byte_reserve

        self._entries: list[_Owner] = []  # sorted by key from _head; see the module docstring
        self._head = 0
        self._queued = 0
        self._owners: dict[int, _Owner] = {}
        self._public_ids: dict[tuple[int, int], int] = {}
        self._batches: dict[int, list[int]] = {}
        self._hooks: dict[int, DegradationHook] = {}
        self._next_hook = 0
        self._next_owner_id = 1  # §2: from 1, monotonic, never reused
        self._next_seq = 0
        self._picking = False

        self._outstanding_owners = 0
        self._outstanding_bytes = 0
        self._outstanding_user_owners = 0
        self._outstanding_user_bytes = 0
        self._dispatching_owners = 0
        self._dispatching_bytes = 0
        self._admitted = 0
        self._dispatched = 0
        self._dropped = 0
        self._canceled = 0
        self._rejected = 0
        self._blocked = 0
        self._completions: dict[TaskStatus, int] = dict.fromkeys(TERMINAL_STATUSES, 0)

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

    # ------------------------------------------------------------------ admission

    def try_admit(
        self, batch_token: int, batch_slots_left: int, owners: Sequence[OwnerRequest]
    ) -> tuple[int, ...]:
        """Admit a submit's owners, all or nothing; return their owner ids in submit order.

        Checks, in this order (§2); the first failing one raises and nothing changes:

        1. ``batch_token`` not a u64 or 0, ``batch_slots_left`` not a u64 → InvalidArgument.
        2. An empty submit → ``()``, nothing changes.
        3. Per owner: not an :class:`OwnerRequest` (kind, length and id ranges are its own
           validators), longer than ``max_dispatch_bytes``, a public id (own or derived) seen
           twice in the submit → InvalidArgument.
        4. The byte charge overflows u64 → InvalidArgument.
        5. More public ids (own + derived) than ``batch_slots_left`` → TooManyRequests.
        6. A public id already mapped for this token (batch not yet retired) → InvalidEntry.
        7. Capacity, limits inclusive → TooManyRequests: ``next_owners > max_owners``,
           ``next_bytes > max_bytes``, ``next_user_owners > max_owners - staging_owner_reserve``,
           ``next_user_bytes > max_bytes - staging_byte_reserve``. Staging-internal owners are
           bound by the totals only; user owners also by ``max - reserve``.

        Admitted owners are QUEUED: appended (FIFO) or inserted after every owner with a key
        ≤ theirs (EDF; key = deadline, or ``2**64 - 1`` without one).
        """
        self._check_not_picking("try_admit")
        _check_u64(batch_token, "batch_token")
        if batch_token == 0:
            raise InvalidArgument("batch token 0 is reserved")
        _check_u64(batch_slots_left, "batch_slots_left")
        if not isinstance(owners, Sequence):
            raise InvalidArgument(f"owners must be a sequence, got {describe(owners)}")
        if not owners:
            return ()
        requests = tuple(owners)

        public_ids: list[int] = []
        seen: set[int] = set()
        charge_bytes = charge_user_owners = charge_user_bytes = 0
        for request in requests:
            if not isinstance(request, OwnerRequest):
                raise InvalidArgument(f"owners must be OwnerRequest, got {type(request).__name__}")
            if self._max_dispatch_bytes is not None and request.length > self._max_dispatch_bytes:
                raise InvalidArgument(
                    f"owner {request.public_id}: length {request.length} exceeds "
                    f"max_dispatch_bytes {self._max_dispatch_bytes}"
                )
            for public_id in (request.public_id, *request.derived_ids):
                if public_id in seen:
                    raise InvalidArgument(f"public id {public_id} appears twice in the submit")
                seen.add(public_id)
                public_ids.append(public_id)
            charge_bytes += request.length
            if request.kind is OwnerKind.USER:
                charge_user_owners += 1
                charge_user_bytes += request.length

        next_bytes = self._outstanding_bytes + charge_bytes
        if next_bytes > U64_MAX:
            raise InvalidArgument(f"byte charge {charge_bytes} overflows u64")
        if len(public_ids) > batch_slots_left:
            raise TooManyRequests(
                f"{len(public_ids)} public ids exceed the {batch_slots_left} batch slots left"
            )
        for public_id in public_ids:
            if (batch_token, public_id) in self._public_ids:
                raise InvalidEntry(
                    f"public id {public_id} is already mapped in batch {batch_token}"
                )

        limits = self._limits
        next_owners = self._outstanding_owners + len(requests)
        next_user_owners = self._outstanding_user_owners + charge_user_owners
        next_user_bytes = self._outstanding_user_bytes + charge_user_bytes
        if next_owners > limits.max_outstanding_owners:
            raise TooManyRequests(
                f"{next_owners} owners would exceed max_outstanding_owners "
                f"{limits.max_outstanding_owners}"
            )
        if next_bytes > limits.max_outstanding_bytes:
            raise TooManyRequests(
                f"{next_bytes} bytes would exceed max_outstanding_bytes "
                f"{limits.max_outstanding_bytes}"
            )
        if next_user_owners > self._user_owner_limit:
            raise TooManyRequests(
                f"{next_user_owners} user owners would exceed max_outstanding_owners - "
                f"staging_owner_reserve = {self._user_owner_limit}"
            )
        if next_user_bytes > self._user_byte_limit:
            raise TooManyRequests(
                f"{next_user_bytes} user bytes would exceed max_outstanding_bytes - "
                f"staging_byte_reserve = {self._user_byte_limit}"
            )

        # Validated: commit.
        owner_ids: list[int] = []
        batch = self._batches.setdefault(batch_token, [])
        for request in requests:
            owner = self._new_owner(batch_token, request)
            owner_id = owner.view.owner_id
            self._owners[owner_id] = owner
            for public_id in (request.public_id, *request.derived_ids):
                self._public_ids[(batch_token, public_id)] = owner_id
            batch.append(owner_id)
            owner_ids.append(owner_id)
            if self._deadline_aware:  # §2: bisect_right insert, EDF with FIFO ties
                bisect.insort_right(self._entries, owner, lo=self._head, key=_ORDER_KEY)
            else:
                self._entries.append(owner)
        self._queued += len(requests)
        self._admitted += len(requests)
        self._outstanding_owners = next_owners
        self._outstanding_bytes = next_bytes
        self._outstanding_user_owners = next_user_owners
        self._outstanding_user_bytes = next_user_bytes
        return tuple(owner_ids)

    def _new_owner(self, batch_token: int, request: OwnerRequest) -> _Owner:
        owner_id = self._next_owner_id
        self._next_owner_id += 1
        view = OwnerView(
            owner_id=owner_id,
            public_id=request.public_id,
            length=request.length,
            kind=request.kind,
            deadline_ns=request.deadline_ns,
            degradation_eligible=request.degradation_eligible,
            priority=request.priority,
            gate_key=request.gate_key,
            context=request.context,
            enqueue_seq=self._next_seq,
        )
        self._next_seq += 1
        if not self._deadline_aware:
            key = 0
        elif request.deadline_ns == 0:
            key = NO_DEADLINE_KEY
        else:
            key = request.deadline_ns
        return _Owner(view, batch_token, request.derived_ids, key)

    # ------------------------------------------------------------------ dispatch

    def pick_for_dispatch(
        self,
        max_owners: int,
        max_bytes: int,
        *,
        now_ns: int,
        bandwidth_bps: float | None = None,
        eligibility: Eligibility | None = None,
    ) -> PickResult:
        """Dispatch up to ``max_owners`` owners and ``max_bytes`` bytes from the front (§2).

        ``bandwidth_bps`` is the provider's estimate read once for this pick (``None``: no
        provider, drop off; ≤ 0: no usable estimate, nothing is dropped).

        1. A zero budget returns an empty result before any promotion or drop.
        2. Visit order: with promotion on (deadline_aware and ``promotion_slack_ns > 0``) the
           owners with ``now < deadline < now + slack`` first, in EDF order, then the rest in
           queue order (past-due owners are not promoted). Terminal leftovers are skipped.
        3. Drop (on iff deadline_aware, θ > 0 and ``bandwidth_bps`` given): an eligible owner
           with ``deadline_mlu(dispatching_bytes, length, deadline, now, bandwidth) >= θ`` is
           CANCELED, its capacity released at once, uses no budget; the scan continues.
           ``dispatching_bytes`` includes the owners dispatched earlier in this same pick.
        4. Head of line: ``length > max_bytes - used_bytes`` stops the pick; nothing behind it
           is dispatched or dropped.
        5. Eligibility (if given): an owner whose ``gate_key`` already blocked in this pick is
           reported blocked without asking again; otherwise the answer's ``verdict`` decides:
           ``"blocked"`` → stays QUEUED in place, no budget; ``"rejected"`` → TERMINAL(its
           ``status``, FAILED when it has none), capacity released; ``"eligible"`` → dispatched
           with its ``token``.
        6. Dispatch: DISPATCHING, ``dispatching_bytes += length`` if degradation-eligible;
           the pick stops once ``max_owners`` are dispatched.

        The pass is decided first and committed at once; degradation hooks run after the
        commit. Raises InvalidArgument on a malformed argument, if ``eligibility`` returns
        something that is not a decision (no known ``verdict``, an eligible answer without a
        ``token``, a rejected one with a non-terminal ``status``), or if called re-entrantly
        from an eligibility callback; the queue is then unchanged. An exception raised by
        ``eligibility`` also propagates with the queue unchanged (tokens it issued in this pass
        are the gate's to reclaim). An exception from a hook propagates after the commit.
        """
        self._check_not_picking("pick_for_dispatch")
        _check_u64(max_owners, "max_owners")
        _check_u64(max_bytes, "max_bytes")
        _check_u64(now_ns, "now_ns")
        if bandwidth_bps is not None and (
            type(bandwidth_bps) not in (int, float) or not _is_float_number(bandwidth_bps)
        ):
            raise InvalidArgument(
                f"bandwidth_bps must be a number or None, got {describe(bandwidth_bps)}"
            )
        if eligibility is not None and not callable(eligibility):
            raise InvalidArgument(f"eligibility must be callable, got {describe(eligibility)}")
        if max_owners == 0 or max_bytes == 0:  # §2: before any promotion or drop
            return _EMPTY_PICK

        entries = self._entries
        head = self._head
        end = len(entries)
        if self._promotion_slack_ns > 0:
            # The queue is sorted by deadline, so the promoted set is one key range.
            upper = min(now_ns + self._promotion_slack_ns, NO_DEADLINE_KEY)
            low = bisect.bisect_left(entries, now_ns + 1, head, end, key=_ORDER_KEY)
            high = bisect.bisect_left(entries, upper, low, end, key=_ORDER_KEY)
        else:
            low = high = head
        segments = ((low, high), (head, low), (high, end))

        drop_on = self._drop_configured and bandwidth_bps is not None
        bandwidth = 0.0 if bandwidth_bps is None else bandwidth_bps
        theta = self._theta
        ahead_bytes = self._dispatching_bytes
        budget_bytes = max_bytes
        picked: list[tuple[_Owner, object | None]] = []
        dropped: list[tuple[_Owner, float]] = []
        blocked: list[_Owner] = []
        rejected: list[tuple[_Owner, TaskStatus]] = []
        blocked_keys: set[Hashable] = set()
        visited: list[tuple[int, int]] = []
        queued = OwnerState.QUEUED
        leftovers = 0  # terminal owners visited: with none and nothing decided, no compaction

        self._picking = True
        try:
            stopped = False
            for start, stop in segments:
                index = start
                while index < stop:
                    owner = entries[index]
                    if owner.state is not queued:  # terminal leftover (lazy deletion)
                        leftovers += 1
                        index += 1
                        continue
                    view = owner.view
                    if drop_on and view.degradation_eligible:
                        mlu = unchecked_mlu(
                            ahead_bytes, view.length, view.deadline_ns, now_ns, bandwidth
                        )
                        if mlu >= theta:  # §2: drop before the byte check, no budget used
                            dropped.append((owner, mlu))
                            index += 1
                            continue
                    if view.length > budget_bytes:  # §2: head of line, stop
                        stopped = True
                        break
                    index += 1
                    token: object | None = None
                    if eligibility is not None:
                        gate_key = view.gate_key
                        if gate_key is not None and gate_key in blocked_keys:
                            blocked.append(owner)  # keep order within a credit key
                            continue
                        decision = eligibility(view, now_ns)
                        # Structural, not isinstance: a gate from another package answers with
                        # its own values (EligibilityDecision); a malformed answer is IA.
                        verdict = getattr(decision, "verdict", None)
                        if verdict == "blocked":
                            blocked.append(owner)
                            if gate_key is not None:
                                blocked_keys.add(gate_key)
                            continue
                        if verdict == "rejected":
                            status = getattr(decision, "status", TaskStatus.FAILED)
                            if not isinstance(status, TaskStatus) or status is TaskStatus.PENDING:
                                raise InvalidArgument(
                                    "eligibility rejected with non-terminal status "
                                    + describe(status)
                                )
                            rejected.append((owner, status))
                            continue
                        token = getattr(decision, "token", _NO_TOKEN)
                        if verdict != "eligible" or token is _NO_TOKEN:
                            raise InvalidArgument(
                                f"eligibility returned {describe(decision)}, not an eligible, "
                                "blocked or rejected decision"
                            )
                    picked.append((owner, token))
                    budget_bytes -= view.length
                    if view.degradation_eligible:
                        ahead_bytes += view.length
                    if len(picked) == max_owners:
                        stopped = True
                        break
                visited.append((start, index))
                if stopped:
                    break
        finally:
            self._picking = False

        # Decided: commit.
        for owner, _token in picked:
            self._transition(owner, "dispatch", TaskStatus.PENDING)
            self._dispatching_owners += 1
            if owner.view.degradation_eligible:
                self._dispatching_bytes += owner.view.length
        for owner, _mlu in dropped:
            self._transition(owner, "drop", TaskStatus.CANCELED)
            self._release(owner)
        for owner, status in rejected:
            self._transition(owner, "reject", status)
            self._release(owner)
        self._queued -= len(picked) + len(dropped) + len(rejected)
        self._dispatched += len(picked)
        self._dropped += len(dropped)
        self._rejected += len(rejected)
        self._blocked += len(blocked)
        if leftovers or picked or dropped or rejected:  # else every visited owner stays QUEUED
            self._remove_visited(visited)

        # list comprehensions: a blocked pick reports every owner it visited (the hot path)
        result = PickResult(
            picked=tuple([Picked(owner.view, token) for owner, token in picked]),
            dropped=tuple([owner.view.owner_id for owner, _mlu in dropped]),
            blocked=tuple([owner.view.owner_id for owner in blocked]),
            rejected=tuple([owner.view.owner_id for owner, _status in rejected]),
        )
        if dropped and self._hooks:
            hooks = tuple(self._hooks.values())
            for owner, mlu in dropped:
                for hook in hooks:
                    hook(owner.view, mlu)
        return result

    def _remove_visited(self, visited: list[tuple[int, int]]) -> None:
        """Remove the owners a pick visited and no longer QUEUED; blocked ones keep their place.

        The visited index ranges are merged and processed right to left, so removing from one
        range never shifts another. The range at the head is compacted towards its end and the
        head advanced (no memmove); any other range is cut out of the list.
        """
        merged: list[list[int]] = []
        for start, stop in sorted(r for r in visited if r[0] < r[1]):
            if merged and merged[-1][1] == start:
                merged[-1][1] = stop
            else:
                merged.append([start, stop])
        entries = self._entries
        queued = OwnerState.QUEUED
        for start, stop in reversed(merged):
            kept = [owner for owner in entries[start:stop] if owner.state is queued]
            if start == self._head:
                entries[stop - len(kept) : stop] = kept
                self._head = stop - len(kept)
            else:
                entries[start:stop] = kept
        if self._head > _COMPACT_MIN and 2 * self._head > len(entries):
            del entries[: self._head]  # amortised O(1): the dead prefix is most of the list
            self._head = 0

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

    # ------------------------------------------------------------------ queries

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

    # ------------------------------------------------------------------ internals

    def _check_not_picking(self, call: str) -> None:
        if self._picking:
            raise InvalidArgument(f"{call} called from an eligibility callback during a pick")

    def _lookup(self, owner_id: int) -> _Owner:
        try:
            return self._owners[owner_id]
        except KeyError:
            raise InvalidEntry(f"unknown owner {owner_id}") from None

    @staticmethod
    def _transition(owner: _Owner, event: str, status: TaskStatus) -> None:
        """Apply ``event`` through :data:`OWNER_TRANSITIONS`; a missing key raises IE."""
        try:
            state = OWNER_TRANSITIONS[(owner.state, event)]
        except KeyError:
            raise InvalidEntry(
                f"owner {owner.view.owner_id}: cannot {event} in state {owner.state.name}"
                + (f" ({owner.status.name})" if owner.state is OwnerState.TERMINAL else "")
            ) from None
        owner.state = state
        owner.status = status if state is OwnerState.TERMINAL else TaskStatus.PENDING

    def _release(self, owner: _Owner) -> None:
        """Give back the outstanding capacity of an owner that just became terminal."""
        view = owner.view
        self._outstanding_owners -= 1
        self._outstanding_bytes -= view.length
        if view.kind is OwnerKind.USER:
            self._outstanding_user_owners -= 1
            self._outstanding_user_bytes -= view.length
