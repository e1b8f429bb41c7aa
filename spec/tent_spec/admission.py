"""Executable specification of the admission queue's owner states.

SEMANTICS §2 and the seed's "Admission Queue" section.

A small, pure state machine written for review. Every action is a guard plus an effect on a frozen
:class:`AdmissionState`; every invariant is a named predicate citing the rule it encodes. The module
imports nothing from the implementation (DESIGN principle 2): only the stdlib and the spec's own
:func:`tent_spec.mlu.deadline_mlu`.

What is modelled, per owner: kind, length, deadline, degradation eligibility, credit gate key and
the lifecycle ``QUEUED → DISPATCHING → TERMINAL(status)`` (:data:`OWNER_TRANSITIONS`). Queue-wide:
outstanding owners/bytes (total and user), ``dispatching_bytes``, the EDF/FIFO queue order, owner
ids from 1 that are never reused, a discrete clock and the bandwidth estimate. The credit gate is
abstract: ``pick`` takes one explicit answer (eligible / blocked / rejected) for every gated owner
the scan consults, so a conformance runner can replay the same answers on the implementation.

Deliberately *not* modelled: public task ids, derived ids and batch slots (a mapping layer on top
of owners, orthogonal to their lifecycle), the degradation hook (a notification without state) and
the gate's reservation tokens (the credit spec owns them).

Actions (explicit arguments, enumerated from the configuration's bounds):

* ``admit(batch, owner_specs)``: one submit of the configured workload, all or nothing.
* ``pick(max_owners, max_bytes, eligibility)``: one dispatch pass; ``eligibility`` lists
  ``(owner_id, answer)`` for every gated owner the scan consults, in scan order.
* ``complete(owner_id, status)``, ``cancel(owner_id)``, ``retire(batch)``.
* ``advance_time(dt_ns)`` and ``set_bandwidth(bandwidth_bps)`` (``None`` = no provider).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from tent_spec.mlu import deadline_mlu

__all__ = [
    "BLOCKED",
    "ELIGIBLE",
    "GATE_ANSWERS",
    "NO_DEADLINE_KEY",
    "OWNER_EVENTS",
    "OWNER_STATES",
    "OWNER_TRANSITIONS",
    "REJECTED",
    "STAGING_INTERNAL",
    "TERMINAL_STATUSES",
    "USER",
    "AdmissionConfig",
    "AdmissionSpec",
    "AdmissionState",
    "Invariant",
    "Owner",
    "OwnerSpec",
    "PickRecord",
    "SpecConfigError",
    "Step",
    "Submit",
    "Witness",
]

# --- the owner lifecycle, as data (STYLE: one table in one place) ------------------------------

QUEUED = "QUEUED"
DISPATCHING = "DISPATCHING"
TERMINAL = "TERMINAL"
OWNER_STATES = (QUEUED, DISPATCHING, TERMINAL)
OWNER_EVENTS = ("dispatch", "complete", "cancel", "drop", "reject")

#: ``(state, event) -> next state``. A missing key is a forbidden transition (SEMANTICS §2:
#: "QUEUED → DISPATCHING → TERMINAL(status)"). Cancelling an owner that is already CANCELED is an
#: idempotent no-op of the ``cancel`` action, not a transition.
OWNER_TRANSITIONS: Mapping[tuple[str, str], str] = {
    (QUEUED, "dispatch"): DISPATCHING,  # picked inside the dispatch window
    (QUEUED, "drop"): TERMINAL,  # MLU ≥ θ at pick time → CANCELED
    (QUEUED, "reject"): TERMINAL,  # the credit gate answered REJECTED → FAILED
    (QUEUED, "cancel"): TERMINAL,  # cancel(id) of a queued owner → CANCELED
    (DISPATCHING, "complete"): TERMINAL,  # complete(id, status) → status
}

COMPLETED = "COMPLETED"
FAILED = "FAILED"
TIMEOUT = "TIMEOUT"
CANCELED = "CANCELED"
INVALID = "INVALID"
TERMINAL_STATUSES = (COMPLETED, FAILED, TIMEOUT, CANCELED, INVALID)

USER = "USER"
STAGING_INTERNAL = "STAGING_INTERNAL"
KINDS = (USER, STAGING_INTERNAL)

ELIGIBLE = "eligible"
BLOCKED = "blocked"
REJECTED = "rejected"
GATE_ANSWERS = (ELIGIBLE, BLOCKED, REJECTED)

#: EDF key of an owner without a deadline (SEMANTICS §2: "key = deadline_ns or 2**64-1 when 0").
NO_DEADLINE_KEY = 2**64 - 1

# Why a pick stopped (PickRecord.stop).
STOP_ZERO_BUDGET = "zero_budget"
STOP_OWNER_BUDGET = "owner_budget"
STOP_HEAD_OF_LINE = "head_of_line"
STOP_END_OF_QUEUE = "end_of_queue"
STOP_REASONS = (STOP_ZERO_BUDGET, STOP_OWNER_BUDGET, STOP_HEAD_OF_LINE, STOP_END_OF_QUEUE)

# Integer codes for pack(); positions in these tuples are the codes.
_STATE_CODE = {name: code for code, name in enumerate(OWNER_STATES)}
_STATUS_CODE: dict[str | None, int] = {None: 0} | {
    name: code + 1 for code, name in enumerate(TERMINAL_STATUSES)
}
_KIND_CODE = {name: code for code, name in enumerate(KINDS)}
_STOP_CODE = {name: code for code, name in enumerate(STOP_REASONS)}


# --- the model_api shapes, restated structurally (the spec imports nothing from tent_models) ---


class Step(NamedTuple):
    """One enabled action instance and the state it leads to."""

    action: str
    args: tuple[Hashable, ...]
    state: Any


class Invariant(NamedTuple):
    """A named safety predicate; ``cites`` quotes the rule it encodes."""

    name: str
    cites: str
    holds: Callable[[Any], bool]


class Witness(NamedTuple):
    """A "sometimes" property: some reachable state must satisfy ``holds``."""

    name: str
    holds: Callable[[Any], bool]


class SpecConfigError(ValueError):
    """An :class:`AdmissionConfig` is inconsistent; the configuration was not built."""


# --- values -------------------------------------------------------------------------------------


class OwnerSpec(NamedTuple):
    """One owner of a submit, as the caller describes it (``admit`` passes these as args)."""

    kind: str
    length: int
    deadline_ns: int  # 0 = no deadline
    degradation_eligible: bool  # RDMA-routed and not staged: droppable, counted in dispatching
    gate_key: int  # credit key the gate answers for; 0 = local accounting, never stalled


class Submit(NamedTuple):
    """One submit of the bounded workload: a batch token and its owners, admitted all or nothing."""

    batch: int
    owners: tuple[OwnerSpec, ...]


class Owner(NamedTuple):
    """An admitted owner: its spec fields plus its lifecycle state."""

    owner_id: int
    batch: int
    kind: str
    length: int
    deadline_ns: int
    degradation_eligible: bool
    gate_key: int
    state: str  # one of OWNER_STATES
    status: str | None  # terminal status when state is TERMINAL, else None
    dropped: bool  # canceled by the MLU drop (as opposed to cancel())
    was_blocked: bool  # the credit gate answered BLOCKED at least once

    @property
    def key(self) -> int:
        """EDF key: the deadline, or :data:`NO_DEADLINE_KEY` without one."""
        return self.deadline_ns if self.deadline_ns != 0 else NO_DEADLINE_KEY


class PickRecord(NamedTuple):
    """The observable outcome of the last ``pick`` (an output variable, reset by other actions).

    ``picked`` is in dispatch order; ``dropped``, ``blocked`` (the gate answered BLOCKED),
    ``skipped`` (same gate key as an owner blocked earlier in this pick) and ``failed`` (the gate
    answered REJECTED) in scan order. ``picked_bytes`` is the sum of the picked lengths and
    ``head_of_line_length`` the length of the owner that stopped the scan (0 otherwise).
    """

    max_owners: int
    max_bytes: int
    picked: tuple[int, ...]
    dropped: tuple[int, ...]
    blocked: tuple[int, ...]
    skipped: tuple[int, ...]
    failed: tuple[int, ...]
    picked_bytes: int
    stop: str
    head_of_line_length: int
    promotion_reordered: bool


class AdmissionState(NamedTuple):
    """The whole admission queue: immutable, built from ints, bools, strs, None and tuples."""

    now_ns: int
    bandwidth_bps: int | None  # None = no bandwidth provider installed (drop off)
    next_owner_id: int
    submitted: tuple[bool, ...]  # per workload submit: admitted already
    owners: tuple[Owner, ...]  # records not yet retired, ascending owner id
    queue: tuple[int, ...]  # ids of the QUEUED owners, in queue order
    outstanding_owners: int
    outstanding_bytes: int
    user_owners: int
    user_bytes: int
    dispatching_bytes: int
    last_pick: PickRecord | None


@dataclass(frozen=True, kw_only=True)
class AdmissionConfig:
    """Bounds and policy of one admission model instance.

    Raises :class:`SpecConfigError` on construction when the values are inconsistent (a staging
    reserve above its limit, a negative bound, an owner that can never be admitted, ...).
    """

    name: str
    max_outstanding_owners: int
    max_outstanding_bytes: int
    staging_owner_reserve: int = 0
    staging_byte_reserve: int = 0
    deadline_aware: bool = True
    promotion_slack_ns: int = 0
    mlu_local_threshold: float = 0.0
    submits: tuple[Submit, ...]
    dispatch_windows: tuple[tuple[int, int], ...]  # (max_owners, max_bytes) a pick may use
    bandwidths: tuple[int | None, ...] = (None,)  # values set_bandwidth may choose
    initial_bandwidth_bps: int | None = None
    time_steps_ns: tuple[int, ...] = ()
    max_time_ns: int = 0
    complete_statuses: tuple[str, ...] = (COMPLETED,)

    def __post_init__(self) -> None:
        if self.max_outstanding_owners <= 0 or self.max_outstanding_bytes <= 0:
            raise SpecConfigError("max_outstanding_owners and max_outstanding_bytes must be > 0")
        if not 0 <= self.staging_owner_reserve <= self.max_outstanding_owners:
            raise SpecConfigError("staging_owner_reserve must be in [0, max_outstanding_owners]")
        if not 0 <= self.staging_byte_reserve <= self.max_outstanding_bytes:
            raise SpecConfigError("staging_byte_reserve must be in [0, max_outstanding_bytes]")
        if self.promotion_slack_ns < 0 or self.mlu_local_threshold < 0:
            raise SpecConfigError("promotion_slack_ns and mlu_local_threshold must be >= 0")
        if not self.dispatch_windows or any(o < 0 or b < 0 for o, b in self.dispatch_windows):
            raise SpecConfigError("dispatch_windows must be non-empty pairs of ints >= 0")
        if self.initial_bandwidth_bps not in self.bandwidths:
            raise SpecConfigError("initial_bandwidth_bps must be one of bandwidths")
        if any(dt <= 0 for dt in self.time_steps_ns) or self.max_time_ns < 0:
            raise SpecConfigError("time steps must be > 0 and max_time_ns >= 0")
        if not self.complete_statuses or any(
            s not in TERMINAL_STATUSES for s in self.complete_statuses
        ):
            raise SpecConfigError("complete_statuses must be terminal statuses")
        for submit in self.submits:
            if submit.batch <= 0 or not submit.owners:
                raise SpecConfigError("a workload submit needs a batch token > 0 and owners")
            for spec in submit.owners:
                if spec.kind not in KINDS or spec.length <= 0 or spec.deadline_ns < 0:
                    raise SpecConfigError(f"invalid owner spec {spec!r}")
                if spec.gate_key < 0:
                    raise SpecConfigError("gate_key must be >= 0")


# --- the model --------------------------------------------------------------------------------


class _NeedAnswer(NamedTuple):
    """The scan reached a gated owner whose gate answer the arguments do not give."""

    owner_id: int


class _ScanResult(NamedTuple):
    record: PickRecord
    consulted: tuple[tuple[int, str], ...]  # (owner_id, answer) of every gated owner asked


class AdmissionSpec:
    """The admission queue specification for one :class:`AdmissionConfig`.

    Structurally satisfies ``tent_models.model_api.SpecModel``. The action methods (``admit``,
    ``pick``, ...) return the successor state, or ``None`` when their guard is false; they never
    raise for a disabled action.
    """

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
        self._owner_codes: dict[Owner, tuple[int, ...]] = {}

    # --- model_api plumbing --------------------------------------------------------------------

    def initial_states(self) -> Iterable[AdmissionState]:
        """The empty queue at time 0 with the configured initial bandwidth."""
        return (
            AdmissionState(
                now_ns=0,
                bandwidth_bps=self.config.initial_bandwidth_bps,
                next_owner_id=1,  # SEMANTICS §2: "owner ids from 1, monotonic"
                submitted=(False,) * len(self.config.submits),
                owners=(),
                queue=(),
                outstanding_owners=0,
                outstanding_bytes=0,
                user_owners=0,
                user_bytes=0,
                dispatching_bytes=0,
                last_pick=None,
            ),
        )

    def action_names(self) -> Sequence[str]:
        """Every action of the model."""
        return self.ACTIONS

    def unreachable_actions(self) -> frozenset[str]:
        """Actions the configuration cannot fire (no time steps, a single bandwidth value)."""
        unreachable = set()
        if not self.config.time_steps_ns or self.config.max_time_ns == 0:
            unreachable.add("advance_time")
        if len(set(self.config.bandwidths)) < 2:
            unreachable.add("set_bandwidth")
        return frozenset(unreachable)

    def fault_actions(self) -> frozenset[str]:
        """None: gate rejections are explicit pick arguments, not a separate fault action."""
        return frozenset()

    def canonicalize(self, state: AdmissionState) -> AdmissionState:
        """Identity: owner ids are ordered by admission, so no two owners are interchangeable."""
        return state

    def within_bounds(self, state: AdmissionState) -> bool:
        """The clock is within ``max_time_ns`` (every other bound is an action guard)."""
        return state.now_ns <= self.config.max_time_ns

    def quiescent_by_bound(self, state: AdmissionState) -> bool:
        """The workload is exhausted, every owner is retired and the clock is at its bound."""
        clock_capped = all(
            state.now_ns + dt > self.config.max_time_ns for dt in self.config.time_steps_ns
        )
        return all(state.submitted) and not state.owners and clock_capped

    def recovered(self, state: AdmissionState) -> bool:
        """No owner left non-terminal and every counter back to zero (all capacity usable)."""
        return (
            all(owner.state == TERMINAL for owner in state.owners)
            and state.outstanding_owners == 0
            and state.outstanding_bytes == 0
            and state.user_owners == 0
            and state.user_bytes == 0
            and state.dispatching_bytes == 0
        )

    def pack(self, state: AdmissionState) -> tuple[Any, ...]:
        """A nested tuple of ints, injective on states (owner and pick codes are memoised)."""
        bandwidth = (0, 0) if state.bandwidth_bps is None else (1, state.bandwidth_bps)
        codes = self._owner_codes
        owners = []
        for owner in state.owners:
            code = codes.get(owner)
            if code is None:
                code = codes[owner] = _pack_owner(owner)
            owners.append(code)
        return (
            state.now_ns,
            bandwidth,
            state.next_owner_id,
            tuple(map(int, state.submitted)),
            tuple(owners),
            state.queue,
            state.outstanding_owners,
            state.outstanding_bytes,
            state.user_owners,
            state.user_bytes,
            state.dispatching_bytes,
            () if state.last_pick is None else _pack_pick(state.last_pick),
        )

    def describe(self, state: AdmissionState) -> Mapping[str, object]:
        """A flat ``field -> value`` view for diff-only counterexamples."""
        view: dict[str, object] = {
            "now_ns": state.now_ns,
            "bandwidth_bps": state.bandwidth_bps,
            "next_owner_id": state.next_owner_id,
            "submitted": state.submitted,
            "queue": state.queue,
            "outstanding_owners": state.outstanding_owners,
            "outstanding_bytes": state.outstanding_bytes,
            "user_owners": state.user_owners,
            "user_bytes": state.user_bytes,
            "dispatching_bytes": state.dispatching_bytes,
        }
        for o in state.owners:
            status = o.state if o.status is None else f"{o.state}({o.status})"
            flags = "".join(
                (" dropped" if o.dropped else "", " was_blocked" if o.was_blocked else "")
            )
            view[f"owner[{o.owner_id}]"] = (
                f"{status} batch={o.batch} {o.kind} len={o.length} deadline={o.deadline_ns}"
                f" eligible={o.degradation_eligible} gate={o.gate_key}{flags}"
            )
        if state.last_pick is not None:
            for field, value in state.last_pick._asdict().items():
                view[f"last_pick.{field}"] = value
        return view

    # --- successors / apply / explain ----------------------------------------------------------

    def successors(self, state: AdmissionState) -> Iterator[Step]:
        """Every enabled action instance, with explicit arguments, and its successor."""
        cfg = self.config
        for index, submit in enumerate(cfg.submits):
            if not state.submitted[index]:
                args: tuple[Hashable, ...] = (submit.batch, submit.owners)
                nxt = self.admit(state, submit.batch, submit.owners)
                if nxt is not None:
                    yield Step("admit", args, nxt)
        if state.queue:
            for max_owners, max_bytes in cfg.dispatch_windows:
                for answers, nxt in self._pick_branches(state, max_owners, max_bytes):
                    yield Step("pick", (max_owners, max_bytes, answers), nxt)
        for owner in state.owners:
            if owner.state == DISPATCHING:
                for status in cfg.complete_statuses:
                    nxt = self.complete(state, owner.owner_id, status)
                    if nxt is not None:
                        yield Step("complete", (owner.owner_id, status), nxt)
            if owner.state == QUEUED or owner.status == CANCELED:
                nxt = self.cancel(state, owner.owner_id)
                if nxt is not None:
                    yield Step("cancel", (owner.owner_id,), nxt)
        for batch in sorted({owner.batch for owner in state.owners}):
            nxt = self.retire(state, batch)
            if nxt is not None:
                yield Step("retire", (batch,), nxt)
        for dt in cfg.time_steps_ns:
            nxt = self.advance_time(state, dt)
            if nxt is not None:
                yield Step("advance_time", (dt,), nxt)
        for bandwidth in cfg.bandwidths:
            nxt = self.set_bandwidth(state, bandwidth)
            if nxt is not None:
                yield Step("set_bandwidth", (bandwidth,), nxt)

    def apply(
        self, state: AdmissionState, action: str, args: tuple[Hashable, ...]
    ) -> AdmissionState | None:
        """The successor of one action instance, or ``None`` if its guard is false (or the
        arguments are malformed for the action)."""
        reason = self._malformed(action, args)
        if reason is not None:
            return None
        if action == "admit":
            return self.admit(state, args[0], args[1])  # type: ignore[arg-type]
        if action == "pick":
            return self.pick(state, args[0], args[1], args[2])  # type: ignore[arg-type]
        if action == "complete":
            return self.complete(state, args[0], args[1])  # type: ignore[arg-type]
        if action == "cancel":
            return self.cancel(state, args[0])  # type: ignore[arg-type]
        if action == "retire":
            return self.retire(state, args[0])  # type: ignore[arg-type]
        if action == "advance_time":
            return self.advance_time(state, args[0])  # type: ignore[arg-type]
        return self.set_bandwidth(state, args[0])  # type: ignore[arg-type]

    def explain(self, state: AdmissionState, action: str, args: tuple[Hashable, ...]) -> str:
        """Which guard of ``action(args)`` fails in ``state``, in words ("enabled" if none)."""
        malformed = self._malformed(action, args)
        if malformed is not None:
            return malformed
        if action == "admit":
            return self._explain_admit(state, args[0], args[1])  # type: ignore[arg-type]
        if action == "pick":
            return self._explain_pick(state, args[0], args[1], args[2])  # type: ignore[arg-type]
        if action in ("complete", "cancel"):
            owner = self._owner(state, args[0])  # type: ignore[arg-type]
            if owner is None:
                return f"{action}: no owner {args[0]} (unknown or retired): InvalidEntry"
            if action == "complete":
                if args[1] not in TERMINAL_STATUSES:
                    return f"complete: {args[1]!r} is not a terminal status: InvalidArgument"
                if owner.state != DISPATCHING:
                    return f"complete: owner {owner.owner_id} is {owner.state}, not DISPATCHING"
                if args[1] not in self.config.complete_statuses:
                    return f"complete: status {args[1]} is outside the configured statuses"
                return "enabled"
            if owner.state == QUEUED or owner.status == CANCELED:
                return "enabled"
            return f"cancel: owner {owner.owner_id} is {owner.state}({owner.status}): InvalidEntry"
        if action == "retire":
            batch_owners = [o for o in state.owners if o.batch == args[0]]
            if not batch_owners:
                return f"retire: batch {args[0]} has no records"
            live = [o.owner_id for o in batch_owners if o.state != TERMINAL]
            if live:
                return f"retire: owners {live} of batch {args[0]} are not terminal: InvalidEntry"
            return "enabled"
        if action == "advance_time":
            if args[0] not in self.config.time_steps_ns:
                return f"advance_time: {args[0]} is not a configured time step"
            if state.now_ns + args[0] > self.config.max_time_ns:
                return f"advance_time: now would pass max_time_ns={self.config.max_time_ns}"
            return "enabled"
        if args[0] not in self.config.bandwidths:
            return f"set_bandwidth: {args[0]} is not a configured bandwidth"
        if args[0] == state.bandwidth_bps:
            return "set_bandwidth: the bandwidth is already that value"
        return "enabled"

    def _malformed(self, action: str, args: tuple[Hashable, ...]) -> str | None:
        arity = {
            "admit": 2,
            "pick": 3,
            "complete": 2,
            "cancel": 1,
            "retire": 1,
            "advance_time": 1,
            "set_bandwidth": 1,
        }
        if action not in arity:
            return f"unknown action {action!r}"
        if not isinstance(args, tuple) or len(args) != arity[action]:
            return f"{action} takes {arity[action]} arguments, got {args!r}"
        return None

    # --- actions -----------------------------------------------------------------------------

    def admit(
        self, state: AdmissionState, batch: int, owner_specs: tuple[OwnerSpec, ...]
    ) -> AdmissionState | None:
        """Admit one workload submit all or nothing (SEMANTICS §2 try_admit).

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

        SEMANTICS §2 Order: "deadline_aware off → FIFO. On → insert after every owner with a key
        ≤ its own (bisect_right) … EDF, ties FIFO, no-deadline owners last FIFO."
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
        """One dispatch pass (SEMANTICS §2 pick_for_dispatch) with explicit gate answers.

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
        ):  # SEMANTICS §2: "A zero budget returns [] before any promotion or drop"
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

        SEMANTICS §2 Promotion: "owners with now < deadline and deadline - now < slack go first,
        in EDF order; past-due owners are *not* promoted".
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

        Seed "Deadline-Infeasible Drop": "A dropped owner does not consume dispatch budget."
        """
        del owner
        return (0, 0)

    def complete(self, state: AdmissionState, owner_id: int, status: str) -> AdmissionState | None:
        """complete(id, status): a DISPATCHING owner becomes TERMINAL(status).

        Guard: the owner exists and is DISPATCHING, ``status`` is a configured terminal status.
        Effect: outstanding released; ``dispatching_bytes -= length`` if eligible, whatever the
        status (SEMANTICS §2).
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

        SEMANTICS §2 complete: "dispatching_bytes -= length if eligible, whatever the status".
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
        if owner.status == CANCELED:  # SEMANTICS §2: "CANCELED already (incl. dropped) → OK"
            return state._replace(last_pick=None)
        if owner.state != QUEUED:
            return None
        nxt = self._terminate(state, owner, "cancel", CANCELED)
        return nxt._replace(queue=tuple(i for i in state.queue if i != owner_id))

    def retire(self, state: AdmissionState, batch: int) -> AdmissionState | None:
        """retire_batch(token): erase every record of the batch once all are terminal.

        Guard: the batch has records and all of them are TERMINAL (SEMANTICS §2: "fails with IE
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

    # --- invariants and witnesses --------------------------------------------------------------

    def invariants(self) -> Sequence[Invariant]:
        """The named safety properties, each citing its rule."""
        return (
            Invariant(
                "outstanding_within_limits",
                'SEMANTICS §2: capacity "next_owners > max_owners, next_bytes > max_bytes" → TMR',
                self._inv_outstanding_within_limits,
            ),
            Invariant(
                "user_outstanding_within_limits_minus_reserves",
                'SEMANTICS §2: "User owners see max - reserve; staging-internal owners see '
                'only the totals"',
                self._inv_user_within_limits,
            ),
            Invariant(
                "counters_match_live_owners",
                'seed: "max_outstanding_owners … bound everything admitted and not yet terminal"',
                self._inv_counters_match,
            ),
            Invariant(
                "dispatching_bytes_is_eligible_dispatching_lengths",
                'seed: dispatching_bytes_ is "every eligible owner dispatched and not yet '
                'completed"',
                self._inv_dispatching_bytes,
            ),
            Invariant(
                "queue_holds_exactly_the_queued_owners",
                'SEMANTICS §2: "A blocked owner stays QUEUED in place with its enqueue order"',
                self._inv_queue_is_queued,
            ),
            Invariant(
                "no_deadline_owner_never_dropped",
                'seed: "A request with deadline_ns == 0 … is never reordered, promoted or dropped"',
                self._inv_no_deadline_never_dropped,
            ),
            Invariant(
                "only_eligible_owners_dropped",
                'seed: "Only eligible owners can be dropped"',
                self._inv_only_eligible_dropped,
            ),
            Invariant(
                "dropped_owner_consumes_no_budget",
                'seed: "A dropped owner does not consume dispatch budget."',
                self._inv_drop_consumes_no_budget,
            ),
            Invariant(
                "dispatch_window_respected",
                'seed: "max_dispatch_owners and max_dispatch_bytes bound how much the queue '
                'hands to transports at once"',
                self._inv_window_respected,
            ),
            Invariant(
                "edf_order_ties_fifo",
                'SEMANTICS §2: "insert after every owner with a key ≤ its own (bisect_right) '
                '… EDF, ties FIFO"; deadline_aware off → FIFO',
                self._inv_queue_order,
            ),
            Invariant(
                "owner_ids_never_reused",
                'SEMANTICS §2: "owner ids from 1, monotonic, never reused"',
                self._inv_ids_never_reused,
            ),
            Invariant(
                "terminal_iff_status",
                'SEMANTICS §2: "QUEUED → DISPATCHING → TERMINAL(status)"',
                self._inv_terminal_status,
            ),
        )

    def witnesses(self) -> Sequence[Witness]:
        """Interesting states the model must reach (non-vacuity)."""
        return (
            Witness("an_owner_was_dropped", lambda s: any(o.dropped for o in s.owners)),
            Witness(
                "a_promotion_reordered_a_pick",
                lambda s: s.last_pick is not None and s.last_pick.promotion_reordered,
            ),
            Witness(
                "a_blocked_owner_dispatched_later",
                lambda s: any(o.was_blocked and o.state == DISPATCHING for o in s.owners),
            ),
            Witness(
                "a_blocked_key_skipped_a_later_owner",
                lambda s: s.last_pick is not None and bool(s.last_pick.skipped),
            ),
            Witness(
                "an_owner_was_rejected_by_the_gate",
                lambda s: s.last_pick is not None and bool(s.last_pick.failed),
            ),
            Witness(
                "a_pick_stopped_at_head_of_line",
                lambda s: s.last_pick is not None and s.last_pick.stop == STOP_HEAD_OF_LINE,
            ),
            Witness(
                "staging_admitted_into_the_reserve",
                lambda s: (
                    s.outstanding_owners - s.user_owners > 0
                    and s.user_owners
                    == self.config.max_outstanding_owners - self.config.staging_owner_reserve
                ),
            ),
            Witness("a_batch_was_retired", lambda s: len(s.owners) < s.next_owner_id - 1),
        )

    def _inv_outstanding_within_limits(self, s: AdmissionState) -> bool:
        cfg = self.config
        return (
            s.outstanding_owners <= cfg.max_outstanding_owners
            and s.outstanding_bytes <= cfg.max_outstanding_bytes
        )

    def _inv_user_within_limits(self, s: AdmissionState) -> bool:
        cfg = self.config
        return (
            s.user_owners <= cfg.max_outstanding_owners - cfg.staging_owner_reserve
            and s.user_bytes <= cfg.max_outstanding_bytes - cfg.staging_byte_reserve
        )

    def _inv_counters_match(self, s: AdmissionState) -> bool:
        live = [o for o in s.owners if o.state != TERMINAL]
        user = [o for o in live if o.kind == USER]
        return (
            s.outstanding_owners == len(live)
            and s.outstanding_bytes == sum(o.length for o in live)
            and s.user_owners == len(user)
            and s.user_bytes == sum(o.length for o in user)
        )

    def _inv_dispatching_bytes(self, s: AdmissionState) -> bool:
        expected = sum(
            o.length for o in s.owners if o.state == DISPATCHING and o.degradation_eligible
        )
        return s.dispatching_bytes == expected

    def _inv_queue_is_queued(self, s: AdmissionState) -> bool:
        queued = {o.owner_id for o in s.owners if o.state == QUEUED}
        return len(s.queue) == len(queued) and set(s.queue) == queued

    def _inv_no_deadline_never_dropped(self, s: AdmissionState) -> bool:
        return all(o.deadline_ns != 0 for o in s.owners if o.dropped)

    def _inv_only_eligible_dropped(self, s: AdmissionState) -> bool:
        return all(o.degradation_eligible and o.status == CANCELED for o in s.owners if o.dropped)

    def _inv_drop_consumes_no_budget(self, s: AdmissionState) -> bool:
        pick = s.last_pick
        if pick is None:
            return True
        if pick.stop == STOP_OWNER_BUDGET:  # the owner budget ran out only on picked owners
            return len(pick.picked) == pick.max_owners
        if pick.stop == STOP_HEAD_OF_LINE:  # the byte budget ran out only on picked bytes
            return pick.head_of_line_length > pick.max_bytes - pick.picked_bytes
        return True

    def _inv_window_respected(self, s: AdmissionState) -> bool:
        pick = s.last_pick
        return pick is None or (
            len(pick.picked) <= pick.max_owners and pick.picked_bytes <= pick.max_bytes
        )

    def _inv_queue_order(self, s: AdmissionState) -> bool:
        by_id = {o.owner_id: o for o in s.owners}
        if self.config.deadline_aware:
            keys = [(by_id[i].key, i) for i in s.queue]
        else:
            keys = [(0, i) for i in s.queue]
        return all(a < b for a, b in itertools.pairwise(keys))

    def _inv_ids_never_reused(self, s: AdmissionState) -> bool:
        ids = [o.owner_id for o in s.owners]
        issued = sum(
            len(sub.owners)
            for sub, done in zip(self.config.submits, s.submitted, strict=True)
            if done
        )
        return (
            all(a < b for a, b in itertools.pairwise(ids))
            and all(1 <= i < s.next_owner_id for i in ids)
            and s.next_owner_id == 1 + issued
        )

    def _inv_terminal_status(self, s: AdmissionState) -> bool:
        return all((o.state == TERMINAL) == (o.status is not None) for o in s.owners)

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
        """The four inclusive capacity inequalities of SEMANTICS §2 try_admit."""
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


def _pack_owner(o: Owner) -> tuple[int, ...]:
    return (
        o.owner_id,
        o.batch,
        _KIND_CODE[o.kind],
        o.length,
        o.deadline_ns,
        int(o.degradation_eligible),
        o.gate_key,
        _STATE_CODE[o.state],
        _STATUS_CODE[o.status],
        int(o.dropped),
        int(o.was_blocked),
    )


def _pack_pick(p: PickRecord) -> tuple[Any, ...]:
    return (
        p.max_owners,
        p.max_bytes,
        p.picked,
        p.dropped,
        p.blocked,
        p.skipped,
        p.failed,
        p.picked_bytes,
        _STOP_CODE[p.stop],
        p.head_of_line_length,
        int(p.promotion_reordered),
    )
