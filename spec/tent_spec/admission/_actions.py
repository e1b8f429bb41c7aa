"""Every action of the admission spec as guard + effect: ``admit``, ``pick`` (the EDF/FIFO
scan, promotion, the MLU drop and the abstract credit gate), ``complete``, ``cancel``,
``retire``, ``advance_time`` and ``set_bandwidth``. Each returns the successor state, or
``None`` when its guard is false; the ``_explain_*`` helpers say which guard fails, in words.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple

from tent_spec.admission._state import (
    BLOCKED,
    CANCELED,
    DISPATCHING,
    ELIGIBLE,
    FAILED,
    GATE_ANSWERS,
    OWNER_TRANSITIONS,
    QUEUED,
    REJECTED,
    STOP_END_OF_QUEUE,
    STOP_HEAD_OF_LINE,
    STOP_OWNER_BUDGET,
    STOP_ZERO_BUDGET,
    TERMINAL,
    TERMINAL_STATUSES,
    USER,
    AdmissionConfig,
    AdmissionState,
    Owner,
    OwnerSpec,
    PickRecord,
)
from tent_spec.mlu import deadline_mlu


class _NeedAnswer(NamedTuple):
    """The scan reached a gated owner whose gate answer the arguments do not give."""

    owner_id: int


class _ScanResult(NamedTuple):
    record: PickRecord
    consulted: tuple[tuple[int, str], ...]  # (owner_id, answer) of every gated owner asked


class AdmissionActions:
    """The actions and their guards for one :class:`AdmissionConfig` (the first link of
    :class:`~tent_spec.admission.AdmissionSpec`'s class chain: actions → invariants → model)."""

    ACTIONS = (
        "admit",
        "pick",
        "complete",
        "cancel",
        "retire",
        "advance_time",
        "set_bandwidth",
    )

    def __init__(self, config: AdmissionConfig) -> None:
        self.config = config
        self.name = config.name

    # --- actions -----------------------------------------------------------------------------

    def admit(
        self, state: AdmissionState, batch: int, owner_specs: tuple[OwnerSpec, ...]
    ) -> AdmissionState | None:
        """Admit one workload submit all or nothing (docs/semantics.md#admission-queue try_admit).

        Guard: ``(batch, owner_specs)`` is a configured submit not admitted yet, and the four
        capacity inequalities hold after it. Effect:

        1. owners get the next ids in submit order (never reused);
        2. each is inserted after every queued owner with a key ≤ its own (deadline_aware), or
           appended (FIFO);
        3. outstanding owners/bytes (and user owners/bytes for USER owners) grow.
        """
        index = self._submit_index(state, batch, owner_specs)
        if index is None or not self._fits(state, owner_specs):
            return None
        owners = list(state.owners)
        queue = list(state.queue)
        by_id = {o.owner_id: o for o in state.owners}
        next_id = state.next_owner_id
        user_owners, user_bytes = state.user_owners, state.user_bytes
        for spec in owner_specs:
            owner = Owner(
                owner_id=next_id,
                batch=batch,
                kind=spec.kind,
                length=spec.length,
                deadline_ns=spec.deadline_ns,
                degradation_eligible=bool(spec.degradation_eligible),
                gate_key=spec.gate_key,
                state=QUEUED,
                status=None,
                dropped=False,
                was_blocked=False,
            )
            next_id += 1
            owners.append(owner)
            by_id[owner.owner_id] = owner
            queue.insert(self.insertion_index([by_id[i] for i in queue], owner), owner.owner_id)
            if owner.kind == USER:
                user_owners += 1
                user_bytes += owner.length
        submitted = list(state.submitted)
        submitted[index] = True
        return state._replace(
            next_owner_id=next_id,
            submitted=tuple(submitted),
            owners=tuple(owners),
            queue=tuple(queue),
            outstanding_owners=state.outstanding_owners + len(owner_specs),
            outstanding_bytes=state.outstanding_bytes + sum(s.length for s in owner_specs),
            user_owners=user_owners,
            user_bytes=user_bytes,
            last_pick=None,
        )

    def insertion_index(self, queued: Sequence[Owner], owner: Owner) -> int:
        """Where a new owner enters the queue.

        docs/semantics.md#admission-queue Order: "deadline_aware off → FIFO. On → insert after every
        owner with a key ≤ its own (bisect_right) … EDF, ties FIFO, no-deadline owners last FIFO."
        """
        if not self.config.deadline_aware:
            return len(queued)
        return bisect.bisect_right([o.key for o in queued], owner.key)

    def pick(
        self,
        state: AdmissionState,
        max_owners: int,
        max_bytes: int,
        eligibility: tuple[tuple[int, str], ...],
    ) -> AdmissionState | None:
        """One dispatch pass (docs/semantics.md#admission-queue pick_for_dispatch) with explicit
        gate answers.

        Guard: the window is configured, the queue is non-empty and ``eligibility`` is exactly
        the ``(owner_id, answer)`` pairs of the gated owners this scan consults, in scan order.
        The policy is :meth:`scan`'s; the effect applies its :class:`PickRecord`.
        """
        if (max_owners, max_bytes) not in self.config.dispatch_windows or not state.queue:
            return None
        if not _well_formed_answers(eligibility):
            return None
        result = self.scan(state, max_owners, max_bytes, dict(eligibility))
        if isinstance(result, _NeedAnswer) or result.consulted != eligibility:
            return None
        return self._apply_pick(state, result.record)

    def pick_outcome(
        self,
        state: AdmissionState,
        max_owners: int,
        max_bytes: int,
        eligibility: tuple[tuple[int, str], ...],
    ) -> PickRecord | None:
        """The :class:`PickRecord` ``pick(max_owners, max_bytes, eligibility)`` produces, or
        ``None`` when the pick is not enabled with these arguments."""
        nxt = self.pick(state, max_owners, max_bytes, eligibility)
        return None if nxt is None else nxt.last_pick

    def scan(
        self,
        state: AdmissionState,
        max_owners: int,
        max_bytes: int,
        answers: Mapping[int, str],
        *,
        promote: bool = True,
        default_answer: str | None = None,
    ) -> _ScanResult | _NeedAnswer:
        """The dispatch policy, pure: what one pick does given the gate's answers.

        1. A zero budget (``max_owners == 0`` or ``max_bytes == 0``) stops before anything else.
        2. Scan order: the promoted owners (deadline_aware, slack > 0, ``now < deadline`` and
           ``deadline - now < slack``) first, in queue (EDF) order, then every other queued owner
           in queue order; past-due owners are not promoted.
        3. Drop check first: drop on (deadline_aware, θ > 0, a provider), owner eligible with a
           deadline and bandwidth > 0, ``deadline_mlu(dispatching, length, …) ≥ θ`` → dropped
           (CANCELED), no budget used, the scan continues.
        4. Byte window: ``length > max_bytes − used_bytes`` → stop (head of line).
        5. Gate: an owner whose gate key was blocked earlier in this pick is skipped (stays
           queued, not asked). Otherwise a gated owner (key ≠ 0) is asked: BLOCKED → stays
           queued, its key is blocked for the rest of the pick; REJECTED → FAILED; ELIGIBLE →
           dispatched. Owners with gate key 0 are always eligible.
        6. Dispatch: ``used_bytes += length``; ``dispatching += length`` if eligible; the scan
           stops (owner budget) before the next owner once ``max_owners`` owners are picked.

        Returns :class:`_NeedAnswer` when a gated owner is consulted whose answer ``answers``
        does not give (and ``default_answer`` is ``None``). ``promote=False`` scans in plain
        queue order; it is used to tell whether promotion changed the pick.
        """
        cfg = self.config
        if (
            max_owners == 0 or max_bytes == 0
            # docs/semantics.md#admission-queue: "A zero budget returns [] before any promotion
            # or drop"
        ):
            record = PickRecord(
                max_owners, max_bytes, (), (), (), (), (), 0, STOP_ZERO_BUDGET, 0, False
            )
            return _ScanResult(record, ())
        by_id = {o.owner_id: o for o in state.owners}
        queued = [by_id[i] for i in state.queue]
        order = self.scan_order(state, queued) if promote else queued
        bandwidth = state.bandwidth_bps
        drop_on = cfg.deadline_aware and cfg.mlu_local_threshold > 0 and bandwidth is not None
        dispatching = state.dispatching_bytes
        used_owners = used_bytes = 0
        picked: list[int] = []
        dropped: list[int] = []
        blocked: list[int] = []
        skipped: list[int] = []
        failed: list[int] = []
        consulted: list[tuple[int, str]] = []
        blocked_keys: set[int] = set()
        stop, head_of_line_length = STOP_END_OF_QUEUE, 0
        for owner in order:
            if used_owners >= max_owners:  # the owner window is full
                stop = STOP_OWNER_BUDGET
                break
            if (
                drop_on
                and bandwidth is not None
                and owner.degradation_eligible
                and owner.deadline_ns != 0
                and bandwidth > 0
            ):
                mlu = deadline_mlu(
                    dispatching, owner.length, owner.deadline_ns, state.now_ns, bandwidth
                )
                if (
                    mlu >= cfg.mlu_local_threshold
                ):  # seed: "if the value reaches θ_local … CANCELED"
                    dropped.append(owner.owner_id)
                    charge_owners, charge_bytes = self.drop_charge(owner)
                    used_owners += charge_owners
                    used_bytes += charge_bytes
                    continue
            if owner.length > max_bytes - used_bytes:  # head of line: nothing behind goes
                stop, head_of_line_length = STOP_HEAD_OF_LINE, owner.length
                break
            if owner.gate_key != 0:
                if owner.gate_key in blocked_keys:  # order within a credit key is kept
                    skipped.append(owner.owner_id)
                    continue
                answer = answers.get(owner.owner_id, default_answer)
                if answer is None:
                    return _NeedAnswer(owner.owner_id)
                consulted.append((owner.owner_id, answer))
                if answer == BLOCKED:
                    blocked.append(owner.owner_id)
                    blocked_keys.add(owner.gate_key)
                    continue
                if answer == REJECTED:
                    failed.append(owner.owner_id)
                    continue
            picked.append(owner.owner_id)
            used_owners += 1
            used_bytes += owner.length
            if owner.degradation_eligible:  # seed: bytes_ahead "grows by each owner dispatched"
                dispatching += owner.length
        record = PickRecord(
            max_owners=max_owners,
            max_bytes=max_bytes,
            picked=tuple(picked),
            dropped=tuple(dropped),
            blocked=tuple(blocked),
            skipped=tuple(skipped),
            failed=tuple(failed),
            picked_bytes=sum(by_id[i].length for i in picked),
            stop=stop,
            head_of_line_length=head_of_line_length,
            promotion_reordered=False,
        )
        if promote and [o.owner_id for o in order] != list(state.queue):
            unpromoted = self.scan(
                state, max_owners, max_bytes, answers, promote=False, default_answer=ELIGIBLE
            )
            assert isinstance(unpromoted, _ScanResult)  # every answer defaults to eligible
            record = record._replace(promotion_reordered=unpromoted.record.picked != record.picked)
        return _ScanResult(record, tuple(consulted))

    def scan_order(self, state: AdmissionState, queued: Sequence[Owner]) -> list[Owner]:
        """Queue order with the promoted group moved to the front (a stable partition).

        docs/semantics.md#admission-queue Promotion: "owners with now < deadline and deadline - now
        < slack go first, in EDF order; past-due owners are *not* promoted".
        """
        slack = self.config.promotion_slack_ns
        if not (self.config.deadline_aware and slack > 0):
            return list(queued)
        now = state.now_ns
        promoted = [o for o in queued if o.deadline_ns != 0 and now < o.deadline_ns < now + slack]
        rest = [o for o in queued if not (o.deadline_ns != 0 and now < o.deadline_ns < now + slack)]
        return promoted + rest

    def drop_charge(self, owner: Owner) -> tuple[int, int]:
        """Dispatch budget ``(owners, bytes)`` a dropped owner uses: none.

        Deadline Scheduling "Deadline-Infeasible Drop": "A dropped owner does not consume dispatch
        budget."
        """
        del owner
        return (0, 0)

    def complete(self, state: AdmissionState, owner_id: int, status: str) -> AdmissionState | None:
        """complete(id, status): a DISPATCHING owner becomes TERMINAL(status).

        Guard: the owner exists and is DISPATCHING, ``status`` is a configured terminal status.
        Effect: outstanding released; ``dispatching_bytes -= length`` if eligible, whatever the
        status (docs/semantics.md#admission-queue).
        """
        owner = self._owner(state, owner_id)
        if owner is None or owner.state != DISPATCHING:
            return None
        if status not in TERMINAL_STATUSES or status not in self.config.complete_statuses:
            return None
        nxt = self._terminate(state, owner, "complete", status)
        return nxt._replace(
            dispatching_bytes=nxt.dispatching_bytes - self.dispatching_release(owner, status)
        )

    def dispatching_release(self, owner: Owner, status: str) -> int:
        """Bytes ``complete`` removes from ``dispatching_bytes``.

        docs/semantics.md#admission-queue complete: "dispatching_bytes -= length if eligible,
        whatever the status".
        """
        del status
        return owner.length if owner.degradation_eligible else 0

    def cancel(self, state: AdmissionState, owner_id: int) -> AdmissionState | None:
        """cancel(id): QUEUED → CANCELED, capacity released; CANCELED → no-op (idempotent).

        Guard false (the implementation raises InvalidEntry) for an unknown owner, a DISPATCHING
        owner or another terminal status.
        """
        owner = self._owner(state, owner_id)
        if owner is None:
            return None
        # docs/semantics.md#admission-queue: "CANCELED already (incl. dropped) → OK"
        if owner.status == CANCELED:
            return state._replace(last_pick=None)
        if owner.state != QUEUED:
            return None
        nxt = self._terminate(state, owner, "cancel", CANCELED)
        return nxt._replace(queue=tuple(i for i in state.queue if i != owner_id))

    def retire(self, state: AdmissionState, batch: int) -> AdmissionState | None:
        """retire_batch(token): erase every record of the batch once all are terminal.

        Guard: the batch has records and all of them are TERMINAL
        (docs/semantics.md#admission-queue: "fails with IE
        (nothing erased) while any owner of the batch is non-terminal").
        """
        batch_owners = [o for o in state.owners if o.batch == batch]
        if not batch_owners or any(o.state != TERMINAL for o in batch_owners):
            return None
        return state._replace(
            owners=tuple(o for o in state.owners if o.batch != batch), last_pick=None
        )

    def advance_time(self, state: AdmissionState, dt_ns: int) -> AdmissionState | None:
        """The clock moves forward by a configured step, up to ``max_time_ns``."""
        if dt_ns not in self.config.time_steps_ns or state.now_ns + dt_ns > self.config.max_time_ns:
            return None
        return state._replace(now_ns=state.now_ns + dt_ns, last_pick=None)

    def set_bandwidth(
        self, state: AdmissionState, bandwidth_bps: int | None
    ) -> AdmissionState | None:
        """The bandwidth estimate changes to another configured value (``None`` = no provider)."""
        if bandwidth_bps not in self.config.bandwidths or bandwidth_bps == state.bandwidth_bps:
            return None
        return state._replace(bandwidth_bps=bandwidth_bps, last_pick=None)

    # --- helpers -------------------------------------------------------------------------------

    def _owner(self, state: AdmissionState, owner_id: int) -> Owner | None:
        for owner in state.owners:
            if owner.owner_id == owner_id:
                return owner
        return None

    def _submit_index(
        self, state: AdmissionState, batch: int, owner_specs: tuple[OwnerSpec, ...]
    ) -> int | None:
        for index, submit in enumerate(self.config.submits):
            if (
                not state.submitted[index]
                and submit.batch == batch
                and submit.owners == owner_specs
            ):
                return index
        return None

    def _fits(self, state: AdmissionState, owner_specs: tuple[OwnerSpec, ...]) -> bool:
        """The four inclusive capacity inequalities of docs/semantics.md#admission-queue
        try_admit."""
        cfg = self.config
        users = [s for s in owner_specs if s.kind == USER]
        return (
            state.outstanding_owners + len(owner_specs) <= cfg.max_outstanding_owners
            and state.outstanding_bytes + sum(s.length for s in owner_specs)
            <= cfg.max_outstanding_bytes
            and state.user_owners + len(users)
            <= cfg.max_outstanding_owners - cfg.staging_owner_reserve
            and state.user_bytes + sum(s.length for s in users)
            <= cfg.max_outstanding_bytes - cfg.staging_byte_reserve
        )

    def _terminate(
        self, state: AdmissionState, owner: Owner, event: str, status: str
    ) -> AdmissionState:
        """Owner → TERMINAL(status) through ``event``; its capacity is released."""
        new_state = OWNER_TRANSITIONS[(owner.state, event)]
        done = owner._replace(state=new_state, status=status, dropped=event == "drop")
        is_user = owner.kind == USER
        return state._replace(
            owners=tuple(done if o.owner_id == owner.owner_id else o for o in state.owners),
            outstanding_owners=state.outstanding_owners - 1,
            outstanding_bytes=state.outstanding_bytes - owner.length,
            user_owners=state.user_owners - int(is_user),
            user_bytes=state.user_bytes - (owner.length if is_user else 0),
            last_pick=None,
        )

    def _apply_pick(self, state: AdmissionState, record: PickRecord) -> AdmissionState:
        by_id = {o.owner_id: o for o in state.owners}
        nxt = state
        for owner_id in record.dropped:
            nxt = self._terminate(nxt, by_id[owner_id], "drop", CANCELED)
        for owner_id in record.failed:
            nxt = self._terminate(nxt, by_id[owner_id], "reject", FAILED)
        picked = set(record.picked)
        blocked = set(record.blocked)
        owners = []
        dispatching = nxt.dispatching_bytes
        for owner in nxt.owners:
            if owner.owner_id in picked:
                owners.append(owner._replace(state=OWNER_TRANSITIONS[(owner.state, "dispatch")]))
                if owner.degradation_eligible:
                    dispatching += owner.length
            elif owner.owner_id in blocked:
                owners.append(owner._replace(was_blocked=True))
            else:
                owners.append(owner)
        gone = picked | set(record.dropped) | set(record.failed)
        return nxt._replace(
            owners=tuple(owners),
            queue=tuple(i for i in state.queue if i not in gone),
            dispatching_bytes=dispatching,
            last_pick=record,
        )

    def _pick_branches(
        self, state: AdmissionState, max_owners: int, max_bytes: int
    ) -> Iterator[tuple[tuple[tuple[int, str], ...], AdmissionState]]:
        """Every distinct gate-answer vector the scan can consult, with its successor."""
        pending: list[dict[int, str]] = [{}]
        while pending:
            answers = pending.pop()
            result = self.scan(state, max_owners, max_bytes, answers)
            if isinstance(result, _NeedAnswer):
                for answer in reversed(GATE_ANSWERS):
                    pending.append({**answers, result.owner_id: answer})
                continue
            yield result.consulted, self._apply_pick(state, result.record)

    def _explain_admit(
        self, state: AdmissionState, batch: int, owner_specs: tuple[OwnerSpec, ...]
    ) -> str:
        if self._submit_index(state, batch, owner_specs) is None:
            return f"admit: ({batch}, {owner_specs!r}) is not a pending submit of the workload"
        if not self._fits(state, owner_specs):
            return "admit: capacity exceeded (a limit, or a user limit minus its reserve): TMR"
        return "enabled"

    def _explain_pick(
        self,
        state: AdmissionState,
        max_owners: int,
        max_bytes: int,
        eligibility: tuple[tuple[int, str], ...],
    ) -> str:
        if (max_owners, max_bytes) not in self.config.dispatch_windows:
            return f"pick: window ({max_owners}, {max_bytes}) is not configured"
        if not state.queue:
            return "pick: the queue is empty"
        if not _well_formed_answers(eligibility):
            return f"pick: malformed eligibility {eligibility!r}"
        result = self.scan(state, max_owners, max_bytes, dict(eligibility))
        if isinstance(result, _NeedAnswer):
            return f"pick: no gate answer for consulted owner {result.owner_id}"
        if result.consulted != eligibility:
            return f"pick: the scan consults {result.consulted!r}, not {eligibility!r}"
        return "enabled"


def _well_formed_answers(eligibility: object) -> bool:
    return isinstance(eligibility, tuple) and all(
        isinstance(pair, tuple)
        and len(pair) == 2  # (owner_id, answer)
        and isinstance(pair[0], int)
        and pair[1] in GATE_ANSWERS
        for pair in eligibility
    )
