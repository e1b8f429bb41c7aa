"""The admission queue's values (docs/semantics.md#admission-queue): owner kinds, states and
statuses with the lifecycle table :data:`OWNER_TRANSITIONS`, the request and its limits, the
eligibility protocol and its answers, pick results and statistics. The queue itself is
:mod:`._queue`, which re-exports every public name here.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Hashable, Mapping
from types import MappingProxyType
from typing import ClassVar, Literal, Protocol, TypeAlias

import attrs

from ._describe import describe
from .errors import ConfigError, InvalidArgument

U64_MAX = (1 << 64) - 1
NO_DEADLINE_KEY = U64_MAX
"""Order key of an owner without a deadline (§2: EDF, no-deadline owners last, FIFO)."""


class OwnerKind(enum.Enum):
    """Who submitted the owner: user payload or staging-internal work (Deadline Scheduling "What
    Enters the Queue")."""

    USER = "user"
    STAGING_INTERNAL = "staging_internal"


class _IdentityEnum(enum.Enum):
    """Members hash by identity: ``Enum.__hash__`` is a Python call (the name's hash), and the
    queue keys dicts by these on every owner's move; members are singletons, so identity is
    already their equality."""

    __hash__ = object.__hash__


class OwnerState(_IdentityEnum):
    """Lifecycle state of an owner (§2)."""

    QUEUED = "queued"
    DISPATCHING = "dispatching"
    TERMINAL = "terminal"


class TaskStatus(_IdentityEnum):
    """Public task status (§2: QUEUED/DISPATCHING read as PENDING, TERMINAL as its status)."""

    PENDING = "pending"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMEOUT = "timeout"
    CANCELED = "canceled"
    INVALID = "invalid"


TERMINAL_STATUSES: frozenset[TaskStatus] = frozenset(TaskStatus) - {TaskStatus.PENDING}

OWNER_TRANSITIONS: Mapping[tuple[OwnerState, str], OwnerState] = MappingProxyType(
    {
        (OwnerState.QUEUED, "dispatch"): OwnerState.DISPATCHING,
        (OwnerState.QUEUED, "cancel"): OwnerState.TERMINAL,
        (OwnerState.QUEUED, "drop"): OwnerState.TERMINAL,
        (OwnerState.QUEUED, "reject"): OwnerState.TERMINAL,
        (OwnerState.DISPATCHING, "complete"): OwnerState.TERMINAL,
    }
)
"""The owner lifecycle, the only place it is written. A missing key is misuse (IE)."""


# --------------------------------------------------------------------------- validation


def _check_u64(value: object, what: str, *, minimum: int = 0) -> int:
    """Return ``value`` if it is an ``int`` (not a bool) in [minimum, 2**64 - 1]; else IA."""
    if type(value) is not int:
        raise InvalidArgument(f"{what} must be an int, got {type(value).__name__}")
    if not minimum <= value <= U64_MAX:
        raise InvalidArgument(f"{what} must be in [{minimum}, 2**64 - 1], got {describe(value)}")
    return value


def _is_float_number(value: float) -> bool:
    """Not NaN, and (an int) within the float range: the MLU divides by it."""
    try:
        return not math.isnan(value)
    except OverflowError:
        return False


def _u64_field(minimum: int = 0) -> Callable[[object, attrs.Attribute[int], int], None]:
    def check(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
        _check_u64(value, attr.name, minimum=minimum)

    return check


def _config_u64(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or not 0 <= value <= U64_MAX:
        raise ConfigError(f"{attr.name} must be a u64 int, got {describe(value)}")


def _is_bool(_inst: object, attr: attrs.Attribute[bool], value: bool) -> None:
    if type(value) is not bool:
        raise InvalidArgument(f"{attr.name} must be a bool, got {describe(value)}")


def _is_int(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int:
        raise InvalidArgument(f"{attr.name} must be an int, got {describe(value)}")


def _is_kind(_inst: object, _attr: attrs.Attribute[OwnerKind], value: OwnerKind) -> None:
    if not isinstance(value, OwnerKind):
        raise InvalidArgument(f"unknown owner kind {describe(value)}")


def _derived_ids(_inst: object, _attr: attrs.Attribute[tuple[int, ...]], value: object) -> None:
    if type(value) is not tuple:
        raise InvalidArgument(f"derived_ids must be a tuple, got {type(value).__name__}")
    for derived in value:
        _check_u64(derived, "derived id")


def _hashable(_inst: object, _attr: attrs.Attribute[Hashable | None], value: object) -> None:
    try:
        hash(value)
    except TypeError:
        raise InvalidArgument(f"gate_key must be hashable, got {type(value).__name__}") from None


def check_terminal_status(value: object) -> None:
    """Raise :class:`InvalidArgument` unless ``value`` is a terminal :class:`TaskStatus`.

    The message names the enum and its terminal members; for a string naming a member (the
    common slip: ``"COMPLETED"`` or ``"completed"``) it says which member to pass instead.
    """
    if isinstance(value, TaskStatus) and value in TERMINAL_STATUSES:
        return
    members = ", ".join(f"TaskStatus.{m.name}" for m in TaskStatus if m in TERMINAL_STATUSES)
    if isinstance(value, str):
        match = next((m for m in TaskStatus if value.lower() in (m.name.lower(), m.value)), None)
        if match is not None:
            raise InvalidArgument(
                f"status must be a tent_sched.TaskStatus member, not the string {describe(value)}: "
                f"pass TaskStatus.{match.name}"
                + ("" if match in TERMINAL_STATUSES else f" (and a terminal one: {members})")
            )
    raise InvalidArgument(
        f"status must be a terminal tent_sched.TaskStatus ({members}), got {describe(value)}"
    )


def _terminal(_inst: object, _attr: attrs.Attribute[TaskStatus], value: object) -> None:
    check_terminal_status(value)


# --------------------------------------------------------------------------- values


@attrs.frozen(kw_only=True)
class OwnerRequest:
    """One owner of a submit, as the engine hands it to :meth:`AdmissionQueue.try_admit`.

    The per-owner value rules of §2 (known kind, non-zero length, u64 ids and deadline) are
    enforced here, so an invalid owner cannot be constructed (raises InvalidArgument). Public
    ids are the caller's task ids, 0 included (the reference numbers a batch's tasks from 0);
    the queue's own owner ids start at 1.
    ``gate_key`` is the credit key an eligibility gate blocks on; ``context`` is opaque to the
    queue (plan, credit key, ...) and handed back in :class:`OwnerView`.

    ``degradation_eligible`` is opt-in (default ``False``): only an RDMA-routed, non-staged
    owner may be dropped by the MLU check (Deadline Scheduling; reference #2816). An owner the
    caller forgot to mark (TCP, staged, local) is then never cancelled, and its bytes never inflate
    the ``dispatching_bytes`` every prediction starts from.
    """

    public_id: int = attrs.field(validator=_u64_field())
    length: int = attrs.field(validator=_u64_field(minimum=1))
    kind: OwnerKind = attrs.field(default=OwnerKind.USER, validator=_is_kind)
    deadline_ns: int = attrs.field(default=0, validator=_u64_field())
    degradation_eligible: bool = attrs.field(default=False, validator=_is_bool)
    derived_ids: tuple[int, ...] = attrs.field(default=(), validator=_derived_ids)
    priority: int = attrs.field(default=0, validator=_is_int)
    gate_key: Hashable | None = attrs.field(default=None, validator=_hashable)
    context: object = None


@attrs.frozen(kw_only=True)
class QueueLimits:
    """Capacity limits of a queue (Deadline Scheduling ``runtime_queue/max_outstanding_*``,
    ``staging_*``).

    Raises ConfigError if a value is not a u64 int or a reserve exceeds its maximum (§2: the
    reference stores that and fails every later admit; we reject it here). A maximum of 0 is
    accepted, as in the reference: such a queue answers every admit it cannot hold with
    TooManyRequests.
    """

    max_outstanding_owners: int = attrs.field(validator=_config_u64)
    max_outstanding_bytes: int = attrs.field(validator=_config_u64)
    staging_owner_reserve: int = attrs.field(default=0, validator=_config_u64)
    staging_byte_reserve: int = attrs.field(default=0, validator=_config_u64)

    def __attrs_post_init__(self) -> None:
        if self.staging_owner_reserve > self.max_outstanding_owners:
            raise ConfigError(
                f"staging_owner_reserve {self.staging_owner_reserve} exceeds "
                f"max_outstanding_owners {self.max_outstanding_owners}"
            )
        if self.staging_byte_reserve > self.max_outstanding_bytes:
            raise ConfigError(
                f"staging_byte_reserve {self.staging_byte_reserve} exceeds "
                f"max_outstanding_bytes {self.max_outstanding_bytes}"
            )


@attrs.frozen(kw_only=True)
class OwnerView:
    """What eligibility callbacks, hooks and picks see of an owner (immutable after admission).

    ``enqueue_seq`` counts admissions queue-wide from 0: the FIFO tie-break of the order.
    """

    owner_id: int
    public_id: int
    length: int
    kind: OwnerKind
    deadline_ns: int
    degradation_eligible: bool
    priority: int
    gate_key: Hashable | None
    context: object
    enqueue_seq: int


Verdict: TypeAlias = Literal["eligible", "blocked", "rejected"]
"""What an eligibility decision says; the queue dispatches on it (never on the class)."""


class EligibilityDecision(Protocol):
    """What an eligibility callback answers, read structurally (docs/design.md#gate-at-eligibility:
    neither package imports the other, so a gate returns its own values).

    The queue reads ``verdict`` and then, by verdict: ``"eligible"`` → ``token`` (attached to
    the pick); ``"blocked"`` → nothing more (``info`` is for the caller); ``"rejected"`` → the
    optional ``status`` (a terminal :class:`TaskStatus`; ``FAILED`` when the value has none).
    :class:`Eligible`, :class:`Blocked` and :class:`Rejected` are tent_sched's own such values.
    """

    @property
    def verdict(self) -> Verdict: ...


@attrs.frozen
class Eligible:
    """The gate admits the owner; ``token`` (e.g. a credit reservation) rides with the pick."""

    verdict: ClassVar[Literal["eligible"]] = "eligible"
    token: object


@attrs.frozen
class Blocked:
    """The gate holds the owner back; ``info`` (e.g. a BackpressureInfo) says why.

    An eligibility verdict (the queue reads ``verdict``). Not to be confused with
    ``tent_credit.Blocked``, the sender ledger's ``try_reserve`` outcome ("not enough credit,
    nothing reserved"), which a credit gate turns into this verdict.
    """

    verdict: ClassVar[Literal["blocked"]] = "blocked"
    info: object


@attrs.frozen
class Rejected:
    """The gate refuses the owner for good (its key was fenced); it ends in ``status``."""

    verdict: ClassVar[Literal["rejected"]] = "rejected"
    status: TaskStatus = attrs.field(default=TaskStatus.FAILED, validator=_terminal)


class Eligibility(Protocol):
    """Dispatch-eligibility callback (docs/design.md#gate-at-eligibility).

    ``tent_credit.DispatchGate`` implements it structurally and answers with its own
    :class:`EligibilityDecision` values (the queue reads ``verdict``, never the class). It is
    called at most once per owner per pick, must return a decision (not raise) and must not
    call back into the queue.
    """

    def __call__(self, owner: OwnerView, now_ns: int, /) -> EligibilityDecision: ...


DegradationHook: TypeAlias = Callable[[OwnerView, float], None]
"""``on_local_decode_suggested``: called with a dropped owner and its predicted MLU."""


@attrs.frozen
class Picked:
    """A dispatched owner and the eligibility token attached to it (``None`` without a gate)."""

    owner: OwnerView
    token: object | None


@attrs.frozen(kw_only=True)
class PickResult:
    """Outcome of one pick: owners dispatched, dropped, blocked and rejected, in visit order."""

    picked: tuple[Picked, ...]
    dropped: tuple[int, ...]
    blocked: tuple[int, ...]
    rejected: tuple[int, ...]


_NO_TOKEN = object()  # an "eligible" answer without a ``token`` attribute is malformed
_EMPTY_PICK = PickResult(picked=(), dropped=(), blocked=(), rejected=())


@attrs.frozen(kw_only=True)
class CompletionCounts:
    """Owners that left DISPATCHING through :meth:`AdmissionQueue.complete`, by status."""

    completed: int
    failed: int
    timeout: int
    canceled: int
    invalid: int


@attrs.frozen(kw_only=True)
class QueueStatistics:
    """A snapshot of an :class:`AdmissionQueue` (as trio's ``statistics()``).

    ``outstanding_*`` count owners admitted and not yet terminal (queued or dispatching);
    ``*_total`` fields are cumulative counters since construction.
    """

    outstanding_owners: int
    outstanding_bytes: int
    outstanding_user_owners: int
    outstanding_user_bytes: int
    queued_owners: int
    dispatching_owners: int
    dispatching_bytes: int
    admitted_total: int
    dispatched_total: int
    dropped_total: int
    canceled_total: int
    rejected_total: int
    blocked_total: int
    completions: CompletionCounts
