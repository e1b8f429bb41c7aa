"""The admission spec's vocabulary and values: the owner lifecycle table, statuses, kinds and
gate answers, the owner, pick and queue values, and :class:`AdmissionConfig`.

Read next: :mod:`tent_spec.admission._actions` (every action as guard + effect).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

# --- the owner lifecycle, as data (one table in one place, as h11's ``_state.py``) ----------------

QUEUED = "QUEUED"
DISPATCHING = "DISPATCHING"
TERMINAL = "TERMINAL"
OWNER_STATES = (QUEUED, DISPATCHING, TERMINAL)
OWNER_EVENTS = ("dispatch", "complete", "cancel", "drop", "reject")

#: ``(state, event) -> next state``. A missing key is a forbidden transition
#: (docs/semantics.md#admission-queue: "QUEUED → DISPATCHING → TERMINAL(status)"). Cancelling an
#: owner that is already CANCELED is an idempotent no-op of the ``cancel`` action, not a transition.
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

#: EDF key of an owner without a deadline (docs/semantics.md#admission-queue: "key = deadline_ns or
#: 2**64-1 when 0").
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


# --- the packed encoding (pack()) -----------------------------------------------------------


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
