"""The dispatch pick: :meth:`~tent_sched._queue.AdmissionQueue.pick_for_dispatch`.

One pass over the sorted queue (the promoted key range first, found by bisection) decides every
visited owner (dispatched, dropped by the MLU prediction, blocked or rejected by the eligibility
gate) and then commits them at once; ``_remove_visited`` then cuts the decided owners out of the
list. A mixin of :class:`~tent_sched._queue.AdmissionQueue` over :mod:`._queue_state`: the hot
path, kept as one method body so the pick's loop makes no extra calls.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable

from ._describe import describe
from ._mlu import mlu as unchecked_mlu
from ._queue_state import _COMPACT_MIN, _ORDER_KEY, _Owner, _QueueState
from ._queue_values import (
    _EMPTY_PICK,
    _NO_TOKEN,
    NO_DEADLINE_KEY,
    Eligibility,
    OwnerState,
    Picked,
    PickResult,
    TaskStatus,
    _check_u64,
    _is_float_number,
)
from .errors import InvalidArgument


class _QueuePick(_QueueState):
    """The dispatch pick of an :class:`AdmissionQueue` (module docstring)."""

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
