"""Admission conformance: ``tent_sched.AdmissionQueue`` against ``tent_spec.admission``.

:class:`AdmissionAdapter` turns every action of :class:`~tent_spec.admission.AdmissionSpec` into
the implementation's call and maps the queue's public state back to an
:class:`~tent_spec.admission.AdmissionState` (the abstraction function). The generic runner in
:mod:`tent_models.conformance._lockstep` compares the two after every step.

The mapping, rule by rule:

1. ``admit(batch, owner_specs)`` → ``try_admit(batch, slots, requests)``. The spec does not model
   public task ids, derived ids or batch slots, so the workload's owners get generated public ids
   ``1..N`` (unique across the whole workload, so two submits sharing a batch token never
   collide), no derived ids, and a slot budget that never binds.
2. Gate key ``0`` (local accounting, never stalled) ↔ ``gate_key=None``. The implementation asks
   its eligibility callback about *every* owner it reaches; for a ``None`` key the harness answers
   ``Eligible(None)``, exactly what ``tent_credit.DispatchGate`` answers for a local plan. A
   gated owner is answered from the spec's ``eligibility`` argument, which lists the gated owners
   the spec's scan consults in scan order: the implementation must ask the same owners in the
   same order, no more, no fewer (else :class:`ConformanceFailure`).
3. ``pick(max_owners, max_bytes, eligibility)`` → ``pick_for_dispatch`` with ``now_ns`` and
   ``bandwidth_bps`` from the harness clock and bandwidth. The implementation reports one
   ``blocked`` list; the spec splits it into ``blocked`` (the gate answered BLOCKED) and
   ``skipped`` (same key as an owner blocked earlier in the pick). The harness splits the
   implementation's list the same way by whether its callback was asked, so both keep scan order.
4. The pick record's ``stop``, ``head_of_line_length`` and ``promotion_reordered`` are not
   observable through the implementation; :func:`project_state` erases them (they are checked by
   the spec's own invariants on the spec side of the run).
5. ``advance_time`` / ``set_bandwidth`` change the harness clock and bandwidth only (sans-IO: the
   queue takes both as pick arguments).
6. The owner flags ``dropped`` and ``was_blocked`` are read from the picks' results (an owner in
   a ``dropped`` list; an owner the callback answered BLOCKED).

A spec guard that is false maps to the implementation's typed error (or documented no-op) in
:meth:`AdmissionAdapter.refusal`; guards that only bound the model (the workload's one-shot
submits, the configured windows, statuses and clock) have no implementation counterpart.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import cast

from tent_spec.admission import (
    BLOCKED,
    DISPATCHING,
    ELIGIBLE,
    STAGING_INTERNAL,
    STOP_END_OF_QUEUE,
    TERMINAL_STATUSES,
    USER,
    AdmissionConfig,
    AdmissionSpec,
    AdmissionState,
    Owner,
    OwnerSpec,
    PickRecord,
)

from tent_models.model_api import SpecModel
from tent_sched import (
    AdmissionQueue,
    Blocked,
    EligibilityDecision,
    Eligible,
    OwnerKind,
    OwnerRequest,
    OwnerView,
    QueueLimits,
    Rejected,
    TaskStatus,
)
from tent_sched.errors import InvalidArgument, InvalidEntry, SchedError, TooManyRequests

from ._lockstep import ActionInstance, ConformanceFailure, Divergence, Lockstep, Outcome

__all__ = [
    "BATCH_SLOTS",
    "AdmissionAdapter",
    "admission_lockstep",
    "project_state",
    "queue_for",
    "run_admission",
]

BATCH_SLOTS = 1 << 32
"""``batch_slots_left`` passed to every admit: slots are not modelled, so they never bind."""

_KIND = {USER: OwnerKind.USER, STAGING_INTERNAL: OwnerKind.STAGING_INTERNAL}
_KIND_NAME = {kind: name for name, kind in _KIND.items()}


def queue_for(config: AdmissionConfig) -> AdmissionQueue:
    """A fresh implementation queue with the configuration's limits and policy.

    The spec accepts any θ ≥ 0, so the queue is built with ``allow_aggressive_threshold`` (the
    implementation otherwise refuses 0 < θ < 1 as a configuration error,
    docs/semantics.md#admission-queue). Raises ``tent_sched.errors.ConfigError`` for limits the
    implementation refuses.
    """
    limits = QueueLimits(
        max_outstanding_owners=config.max_outstanding_owners,
        max_outstanding_bytes=config.max_outstanding_bytes,
        staging_owner_reserve=config.staging_owner_reserve,
        staging_byte_reserve=config.staging_byte_reserve,
    )
    return AdmissionQueue(
        limits,
        deadline_aware=config.deadline_aware,
        promotion_slack_ns=config.promotion_slack_ns,
        mlu_local_threshold=config.mlu_local_threshold,
        allow_aggressive_threshold=True,
    )


def project_state(state: AdmissionState) -> AdmissionState:
    """The spec state with the pick record's unobservable fields erased (rule 4)."""
    if state.last_pick is None:
        return state
    erased = state.last_pick._replace(
        stop=STOP_END_OF_QUEUE, head_of_line_length=0, promotion_reordered=False
    )
    return state._replace(last_pick=erased)


class _ScriptedGate:
    """The eligibility callback of one pick: answers exactly as the spec's argument says."""

    def __init__(self, answers: tuple[tuple[int, str], ...], now_ns: int) -> None:
        self._answers = answers
        self._now_ns = now_ns
        self._next = 0
        self.blocked: set[int] = set()

    def __call__(self, owner: OwnerView, now_ns: int, /) -> EligibilityDecision:
        if now_ns != self._now_ns:
            raise ConformanceFailure(
                f"the gate was asked at now_ns={now_ns}, the pick's clock is {self._now_ns}"
            )
        if owner.gate_key is None:  # gate key 0: local accounting, eligible without credit
            return Eligible(None)
        if self._next >= len(self._answers):
            raise ConformanceFailure(
                f"the implementation consulted the gate about owner {owner.owner_id}; the spec's "
                f"scan consults only {self._answers!r}"
            )
        expected_id, answer = self._answers[self._next]
        if owner.owner_id != expected_id:
            raise ConformanceFailure(
                f"the implementation consulted owner {owner.owner_id} where the spec's scan "
                f"consults owner {expected_id} (consultation {self._next + 1} of "
                f"{self._answers!r})"
            )
        self._next += 1
        if answer == ELIGIBLE:
            return Eligible(_token(owner.owner_id))
        if answer == BLOCKED:
            self.blocked.add(owner.owner_id)
            return Blocked(None)
        return Rejected()

    def finish(self) -> None:
        """Raise :class:`ConformanceFailure` if the scan stopped before the spec's last answer."""
        if self._next != len(self._answers):
            raise ConformanceFailure(
                f"the implementation consulted {self._next} gated owner(s); the spec's scan "
                f"consults {self._answers!r}"
            )


def _token(owner_id: int) -> tuple[str, int]:
    return ("token", owner_id)


class AdmissionAdapter:
    """One :class:`~tent_sched.AdmissionQueue` driven by admission spec actions.

    Satisfies :class:`~tent_models.conformance.ImplementationAdapter` for
    :class:`~tent_spec.admission.AdmissionState`. The harness state beside the queue: the clock,
    the bandwidth estimate, which workload submits were admitted (and not retired), the batch of
    every owner id, the owners observed dropped or blocked, and the last pick's record.
    """

    def __init__(self, config: AdmissionConfig) -> None:
        """Build the queue (:func:`queue_for`); raises its ConfigError for refused limits."""
        self.config = config
        self.queue = queue_for(config)
        self._now_ns = 0
        self._bandwidth_bps = config.initial_bandwidth_bps
        self._submitted = [False] * len(config.submits)
        self._live: set[int] = set()  # submit indices admitted and not retired
        self._public_ids: list[tuple[int, ...]] = []
        first = 1
        for submit in config.submits:
            self._public_ids.append(tuple(range(first, first + len(submit.owners))))
            first += len(submit.owners)
        self._batch_of: dict[int, int] = {}
        self._dropped: set[int] = set()
        self._was_blocked: set[int] = set()
        self._last_pick: PickRecord | None = None

    # --- the implementation calls ----------------------------------------------------------------

    def perform(self, action: str, args: tuple[Hashable, ...]) -> Outcome:
        """Apply one spec action instance to the queue (see the module docstring's mapping)."""
        try:
            if action == "admit":
                return self._admit(args[0], args[1])  # type: ignore[arg-type]
            if action == "pick":
                return self._pick(args[0], args[1], args[2])  # type: ignore[arg-type]
            if action == "complete":
                self.queue.complete(args[0], TaskStatus[args[1]])  # type: ignore[arg-type, misc]
            elif action == "cancel":
                self.queue.cancel(args[0])  # type: ignore[arg-type]
            elif action == "retire":
                return self._retire(args[0])  # type: ignore[arg-type]
            elif action == "advance_time":
                self._now_ns += args[0]  # type: ignore[operator]
            elif action == "set_bandwidth":
                self._bandwidth_bps = args[0]  # type: ignore[assignment]
            else:
                raise ConformanceFailure(f"the admission adapter has no action {action!r}")
        except SchedError as error:
            return Outcome.raised(type(error), str(error))
        self._last_pick = None
        return Outcome.applied()

    def _admit(self, batch: int, owner_specs: tuple[OwnerSpec, ...]) -> Outcome:
        index = self._submit_index(batch, owner_specs)
        if index is None:
            raise ConformanceFailure(f"admit({batch}, ...) is not a submit of the workload")
        requests = [
            OwnerRequest(
                public_id=public_id,
                length=spec.length,
                kind=_KIND[spec.kind],
                deadline_ns=spec.deadline_ns,
                degradation_eligible=spec.degradation_eligible,
                gate_key=None if spec.gate_key == 0 else spec.gate_key,
            )
            for public_id, spec in zip(self._public_ids[index], owner_specs, strict=True)
        ]
        owner_ids = self.queue.try_admit(batch, BATCH_SLOTS, requests)
        self._submitted[index] = True
        self._live.add(index)
        for owner_id in owner_ids:
            self._batch_of[owner_id] = batch
        self._last_pick = None
        return Outcome.applied()

    def _pick(
        self, max_owners: int, max_bytes: int, answers: tuple[tuple[int, str], ...]
    ) -> Outcome:
        was_empty = not self.queue.queued_ids()
        gate = _ScriptedGate(answers, self._now_ns)
        result = self.queue.pick_for_dispatch(
            max_owners,
            max_bytes,
            now_ns=self._now_ns,
            bandwidth_bps=self._bandwidth_bps,
            eligibility=gate,
        )
        gate.finish()
        for picked in result.picked:
            view = picked.owner
            expected = None if view.gate_key is None else _token(view.owner_id)
            if picked.token != expected:
                raise ConformanceFailure(
                    f"owner {view.owner_id} was dispatched with token {picked.token!r}, "
                    f"its gate answer carried {expected!r}"
                )
        nothing = not (result.picked or result.dropped or result.blocked or result.rejected)
        # docs/semantics.md#admission-queue: a pick over an empty queue returns []
        if was_empty and nothing:
            return Outcome.unchanged()
        self._dropped.update(result.dropped)
        self._was_blocked.update(gate.blocked)
        self._last_pick = PickRecord(
            max_owners=max_owners,
            max_bytes=max_bytes,
            picked=tuple(p.owner.owner_id for p in result.picked),
            dropped=result.dropped,
            blocked=tuple(i for i in result.blocked if i in gate.blocked),
            skipped=tuple(i for i in result.blocked if i not in gate.blocked),
            failed=result.rejected,
            picked_bytes=sum(p.owner.length for p in result.picked),
            stop=STOP_END_OF_QUEUE,
            head_of_line_length=0,
            promotion_reordered=False,
        )
        return Outcome.applied()

    def _retire(self, batch: int) -> Outcome:
        self.queue.retire_batch(batch)
        retired = {i for i in self._live if self.config.submits[i].batch == batch}
        # docs/semantics.md#admission-queue: retiring a token without records is a no-op
        if not retired:
            return Outcome.unchanged()
        self._live -= retired
        self._last_pick = None
        return Outcome.applied()

    def _submit_index(self, batch: int, owner_specs: tuple[OwnerSpec, ...]) -> int | None:
        """The first pending workload submit equal to ``(batch, owner_specs)``, else a live one,
        else any equal one; ``None`` when the workload has no such submit."""
        matches = [
            i
            for i, submit in enumerate(self.config.submits)
            if submit.batch == batch and submit.owners == owner_specs
        ]
        for candidates in (
            [i for i in matches if not self._submitted[i]],
            [i for i in matches if i in self._live],
            matches,
        ):
            if candidates:
                return candidates[0]
        return None

    # --- refusals ----------------------------------------------------------------------------

    def refusal(
        self, state: AdmissionState, action: str, args: tuple[Hashable, ...]
    ) -> Outcome | None:
        """The implementation's answer when the spec's guard is false
        (docs/semantics.md#admission-queue).

        1. admit of a pending submit → TooManyRequests (capacity); of a submit already admitted
           and not retired → InvalidEntry (its public ids are still mapped); of a retired one →
           no counterpart (the implementation lets a retired token be reused; the workload's
           submits are one-shot).
        2. pick over an empty queue with no gate answers → unchanged; any other refused pick (an
           unconfigured window, answers the scan would not consult) → no counterpart.
        3. complete: unknown or retired owner, or not DISPATCHING → InvalidEntry; a status that
           is not terminal → InvalidArgument (when it names a TaskStatus); a terminal status the
           configuration does not list → no counterpart.
        4. cancel: unknown or retired owner, DISPATCHING, or terminal but not CANCELED →
           InvalidEntry.
        5. retire: a batch without records → unchanged; with a non-terminal owner → InvalidEntry.
        6. advance_time / set_bandwidth → no counterpart (harness bounds).
        """
        if action == "admit":
            batch, owner_specs = args
            index = self._submit_index(batch, owner_specs)  # type: ignore[arg-type]
            if index is None:
                return None
            if not state.submitted[index]:
                return Outcome.raised(TooManyRequests)
            return Outcome.raised(InvalidEntry) if index in self._live else None
        if action == "pick":
            windows = self.config.dispatch_windows
            if not state.queue and args[2] == () and tuple(args[:2]) in windows:
                return Outcome.unchanged()
            return None
        if action == "complete":
            owner_id, status = args
            if status not in TERMINAL_STATUSES:
                return Outcome.raised(InvalidArgument) if status in TaskStatus.__members__ else None
            owner = _owner(state.owners, owner_id)  # type: ignore[arg-type]
            if owner is None or owner.state != DISPATCHING:
                return Outcome.raised(InvalidEntry)
            return None  # a terminal status outside the configured ones
        if action == "cancel":
            # The spec refuses only an unknown owner or one neither QUEUED nor CANCELED.
            return Outcome.raised(InvalidEntry)
        if action == "retire":
            if any(o.batch == args[0] for o in state.owners):
                return Outcome.raised(InvalidEntry)
            return Outcome.unchanged()
        return None

    # --- abstraction and projection -------------------------------------------------------------

    def abstract(self) -> AdmissionState:
        """The abstraction function: the queue's public state as an admission spec state.

        Owners are every id from 1 to ``admitted_total`` the queue still knows (``owner_state``
        raises InvalidEntry for a retired one), in id order; queue order is ``queued_ids()``; the
        counters are ``statistics()``; ``next_owner_id`` is ``admitted_total + 1``.
        """
        queue = self.queue
        stats = queue.statistics()
        owners: list[Owner] = []
        for owner_id in range(1, stats.admitted_total + 1):
            try:
                owner_state, status = queue.owner_state(owner_id)
            except InvalidEntry:
                continue
            view = queue.owner(owner_id)
            gate_key = view.gate_key
            owners.append(
                Owner(
                    owner_id=owner_id,
                    batch=self._batch_of.get(owner_id, 0),
                    kind=_KIND_NAME[view.kind],
                    length=view.length,
                    deadline_ns=view.deadline_ns,
                    degradation_eligible=view.degradation_eligible,
                    gate_key=0 if gate_key is None else gate_key,  # type: ignore[arg-type]
                    state=owner_state.name,
                    status=None if status is TaskStatus.PENDING else status.name,
                    dropped=owner_id in self._dropped,
                    was_blocked=owner_id in self._was_blocked,
                )
            )
        return AdmissionState(
            now_ns=self._now_ns,
            bandwidth_bps=self._bandwidth_bps,
            next_owner_id=stats.admitted_total + 1,
            submitted=tuple(self._submitted),
            owners=tuple(owners),
            queue=queue.queued_ids(),
            outstanding_owners=stats.outstanding_owners,
            outstanding_bytes=stats.outstanding_bytes,
            user_owners=stats.outstanding_user_owners,
            user_bytes=stats.outstanding_user_bytes,
            dispatching_bytes=stats.dispatching_bytes,
            last_pick=self._last_pick,
        )

    def project(self, state: AdmissionState) -> AdmissionState:
        """:func:`project_state`."""
        return project_state(state)


def _owner(owners: Sequence[Owner], owner_id: int) -> Owner | None:
    for owner in owners:
        if owner.owner_id == owner_id:
            return owner
    return None


def admission_lockstep(
    spec: AdmissionSpec, *, initial: AdmissionState | None = None
) -> Lockstep[AdmissionState]:
    """A :class:`Lockstep` of ``spec`` and a fresh :class:`AdmissionAdapter` for its config."""
    # The spec restates model_api's Step/Invariant shapes as its own NamedTuples
    # (docs/design.md#principle-2), so it is a SpecModel structurally but not to mypy's nominal
    # tuple check.
    model = cast("SpecModel[AdmissionState]", spec)
    return Lockstep(model, AdmissionAdapter(spec.config), initial=initial)


def run_admission(spec: AdmissionSpec, actions: Iterable[ActionInstance]) -> Divergence | None:
    """Replay ``actions`` on ``spec`` and a fresh queue in lockstep; the first divergence."""
    lockstep = admission_lockstep(spec)
    for action, args in actions:
        verdict = lockstep.step(action, args)
        if isinstance(verdict, Divergence):
            return verdict
    return lockstep.divergence
