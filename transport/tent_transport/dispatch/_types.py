"""The values of the dispatch core's API: what a caller submits, sees and is told.

All frozen attrs classes validated on construction: an invalid request cannot be built,
so :meth:`DispatchCore.submit` only has to check what depends on the core's state.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import attrs

from tent_credit import BackpressureInfo
from tent_sched import OwnerKind, TaskStatus

from ..devices._base import U32_MAX, U64_MAX, Opcode
from ..errors import InvalidArgument

__all__ = [
    "EndReason",
    "TransferEvent",
    "TransferIntent",
    "TransferPhase",
    "TransferPlan",
    "TransferRequest",
    "TransferState",
]


class TransferPlan(enum.Enum):
    """How a WRITE reaches its target (RFC "Staging and Deadlock Avoidance").

    ``DIRECT`` lands in the target segment; ``STAGED`` lands in the receiver's staging pool
    (charged STAGING_SLOTS on top of the direct charge) and an inner transfer moves it on.
    """

    DIRECT = "direct"
    STAGED = "staged"


class TransferIntent(enum.IntEnum):
    """What a transfer is for: Deadline Scheduling's ``intent_type`` ("Request Fields"; the
    reference's ``IntentType``, default ``INTENT_UNSPEC``), with the reference's values 0-6
    (``INTENT_UNSPEC`` is an alias of ``UNSPEC``).

    Validated, carried through merging (only requests of one intent merge) and reported on
    the transfer's :class:`TransferEvent`. Nothing here schedules by it: Deadline
    Scheduling's own mechanisms do not read it, and its reader in the reference (the
    transport selector's intent policies) has no counterpart in this project. The staged
    path's inner transfers carry ``STAGING_INTERNAL``; any request may carry any value, as in
    the reference, since it is a label only.
    """

    UNSPEC = 0
    INTENT_UNSPEC = 0
    FOREGROUND_GET = 1
    BACKGROUND_PREFETCH = 2
    MIGRATION = 3
    CHECKPOINT = 4
    WEIGHT_LOADING = 5
    STAGING_INTERNAL = 6


class TransferPhase(enum.Enum):
    """Where a transfer is in the dispatch core."""

    QUEUED = "queued"
    """In the admission queue (possibly held back by a credit stall)."""
    DISPATCHED = "dispatched"
    """Handed to the rails: its slices are waiting for a QP slot or posted."""
    TERMINAL = "terminal"
    """Ended; its event is delivered by the next :meth:`DispatchCore.progress`."""


class EndReason(enum.Enum):
    """Why a transfer ended (its :class:`TaskStatus` says how)."""

    __hash__ = object.__hash__  # as tent_sched's TaskStatus: a dict key on every transfer

    COMPLETED = "completed"
    """Every slice succeeded (COMPLETED)."""
    SLICE_FAILED = "slice_failed"
    """A slice ended without moving its bytes (FAILED); ``detail`` names the first one."""
    CANCELED = "canceled"
    """The caller canceled it (CANCELED)."""
    DROPPED = "dropped"
    """The admission queue's deadline-infeasible drop (CANCELED; ``dropped_mlu`` is set)."""
    REJECTED = "rejected"
    """The dispatch gate refused it for good: a fenced snapshot or no credit protocol (FAILED)."""
    PEER_FAILED = "peer_failed"
    """The driver declared its peer dead before its slices were posted (FAILED)."""


def _u64(minimum: int = 0) -> Callable[[object, attrs.Attribute[int], int], None]:
    def check(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
        if type(value) is not int or not minimum <= value <= U64_MAX:
            raise InvalidArgument(
                f"{attr.name} must be an int in [{minimum}, 2**64 - 1], got {value!r}"
            )

    return check


def _any_int(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int:
        raise InvalidArgument(f"{attr.name} must be an int, got {value!r}")


def _enum(kind: type[enum.Enum]) -> Callable[[object, attrs.Attribute[Any], object], None]:
    def check(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, kind):
            raise InvalidArgument(f"{attr.name} must be a {kind.__name__}, got {value!r}")

    return check


def _qos(_inst: object, _attr: attrs.Attribute[int | None], value: object) -> None:
    if value is not None and (type(value) is not int or not 0 <= value <= U32_MAX):
        raise InvalidArgument(f"qos_class must be a u32 int or None, got {value!r}")


def _as_memoryview(value: object) -> memoryview:
    """Any buffer → a flat byte view of it (no copy); InvalidArgument if it is no buffer."""
    try:
        view = value if isinstance(value, memoryview) else memoryview(value)  # type: ignore[arg-type]
    except TypeError:
        raise InvalidArgument(
            f"local must support the buffer protocol, got {type(value).__name__}"
        ) from None
    if not view.c_contiguous:
        raise InvalidArgument("local must be a contiguous buffer")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


@attrs.frozen(kw_only=True)
class TransferRequest:
    """One transfer, Deadline Scheduling's ``Request``: opcode, local buffer, peer, target,
    deadline, tier.

    1. ``local`` is any contiguous buffer (``bytes``, ``bytearray``, ``mmap``, a memoryview);
       it must hold exactly ``length`` bytes and, for a READ, be writable. It is not copied:
       the caller must not reuse it before the transfer's terminal event.
    2. ``remote_offset + length`` must fit the u64 address space.
    3. ``deadline_ns`` is absolute, on the driver's clock (0 = none); ``priority`` is the QoS
       tier (lower posts first; 0 is the highest); ``intent_type`` says what the transfer is
       for (:class:`TransferIntent`; reported, not scheduled by).
    4. ``plan`` STAGED applies to WRITE only. ``qos_class`` ``None`` takes the configured
       ``receiver_credit/default_qos_class``.
    5. ``kind`` STAGING_INTERNAL marks the inner transfers of the staged path (they may use the
       queue's staging reserve and are never drop-eligible); they carry the intent
       ``TransferIntent.STAGING_INTERNAL``, a label any request may carry.

    Raises :class:`InvalidArgument` when any rule is broken.
    """

    opcode: Opcode = attrs.field(validator=_enum(Opcode))
    local: memoryview = attrs.field(converter=_as_memoryview, eq=False)
    peer: int = attrs.field(validator=_u64())
    remote_segment: int = attrs.field(validator=_u64())
    remote_offset: int = attrs.field(validator=_u64())
    length: int = attrs.field(validator=_u64(1))
    deadline_ns: int = attrs.field(default=0, validator=_u64())
    priority: int = attrs.field(default=0, validator=_any_int)
    plan: TransferPlan = attrs.field(default=TransferPlan.DIRECT, validator=_enum(TransferPlan))
    qos_class: int | None = attrs.field(default=None, validator=_qos)
    kind: OwnerKind = attrs.field(default=OwnerKind.USER, validator=_enum(OwnerKind))
    intent_type: TransferIntent = attrs.field(
        default=TransferIntent.UNSPEC, validator=_enum(TransferIntent)
    )

    def __attrs_post_init__(self) -> None:
        if self.local.nbytes != self.length:
            raise InvalidArgument(
                f"local buffer holds {self.local.nbytes} bytes, the transfer is {self.length}"
            )
        if self.remote_offset + self.length > U64_MAX + 1:
            raise InvalidArgument("remote_offset + length overflows the u64 address space")
        if self.opcode is Opcode.READ:
            if self.plan is not TransferPlan.DIRECT:
                raise InvalidArgument("a READ has no staged plan")
            if self.local.readonly:
                raise InvalidArgument("a READ needs a writable local buffer")


@attrs.frozen(kw_only=True)
class TransferEvent:
    """A transfer ended: what :meth:`DispatchCore.progress` returns, once per transfer.

    ``end_ns`` is the poll pass (or call) that ended it; ``dropped_mlu`` the predicted MLU of a
    DROPPED transfer (else ``None``); ``moved_bytes`` the bytes of its successful slices.
    """

    transfer_id: int
    status: TaskStatus
    reason: EndReason
    detail: str
    peer: int
    length: int
    moved_bytes: int
    deadline_ns: int
    priority: int
    submit_ns: int
    end_ns: int
    dropped_mlu: float | None = None
    intent_type: TransferIntent = TransferIntent.UNSPEC


@attrs.frozen(kw_only=True)
class TransferState:
    """A snapshot of one transfer (:meth:`DispatchCore.status`).

    ``status`` is PENDING until the transfer ends. ``backpressure`` is the typed reason a
    QUEUED transfer is held back (a credit stall, or the legacy window), else ``None``.
    ``slices_*`` count its slices: waiting for a QP slot, posted and not ended, ended.
    """

    transfer_id: int
    status: TaskStatus
    phase: TransferPhase
    backpressure: BackpressureInfo | None
    slices_waiting: int
    slices_posted: int
    slices_ended: int
    moved_bytes: int
