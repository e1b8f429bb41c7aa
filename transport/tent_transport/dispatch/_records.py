"""The dispatch core's private values: the transfer record, slicing, the plan → charge mapping,
its statistics and error translation."""

from __future__ import annotations

from collections.abc import Callable

import attrs

from tent_credit import (
    BackpressureInfo,
    BackpressureSource,
    CreditResource,
    DispatchGate,
    GateToken,
    Plan,
    RejectReason,
)
from tent_credit import errors as credit_errors
from tent_sched import AdmissionQueue, NicStatistics, QueueStatistics, TaskStatus
from tent_sched import errors as sched_errors

from ..devices._base import MAX_SLICE_INDEX, U32_MAX, Opcode, SliceRequest, WriteLease
from ..errors import (
    ExceedsDispatchWindow,
    InvalidArgument,
    InvalidEntry,
    TooManyRequests,
    TransportError,
)
from ._types import EndReason, TransferPhase, TransferPlan, TransferRequest

__all__ = [
    "REJECT_DETAIL",
    "DispatchStatistics",
    "DropHook",
    "PendingSlice",
    "RailStatistics",
    "SliceCutter",
    "TransferRecord",
    "credit_plan",
    "pressure_of",
    "slice_lease",
    "translate",
]


class PendingSlice:
    """One slice of a transfer, from rail assignment until it ends (mutable, core-private)."""

    __slots__ = ("owner", "part", "rail", "request", "submit_ns")

    def __init__(
        self, owner: TransferRecord, rail: int, request: SliceRequest, part: int = 0
    ) -> None:
        self.owner = owner
        self.rail = rail
        self.request = request
        self.part = part  # which of the owner's (merged) requests it carries
        self.submit_ns = -1  # set when posted


@attrs.frozen(kw_only=True)
class RailStatistics:
    """A snapshot of one rail: its meters and the dispatch core's counters for it."""

    name: str
    nic: NicStatistics
    waiting_slices: int
    waiting_bytes: int
    posted_slices: int
    posts: int
    post_refusals: int
    completions: int
    failed_completions: int
    unknown_completions: int
    transmit_samples_taken: int


DropHook = Callable[[int, float], None]
"""``on_local_decode_suggested``: called with a dropped transfer's id and its predicted MLU."""

REJECT_DETAIL = {
    RejectReason.SNAPSHOT_FENCED: "receiver session or epoch fenced since submit",
    RejectReason.NEGOTIATION_FAILED: "peer has no usable credit protocol (required mode)",
}


def translate(exc: Exception) -> TransportError:
    """A core's typed error as the matching tent_transport error (the cause is kept)."""
    if isinstance(exc, sched_errors.ExceedsDispatchWindow):
        return ExceedsDispatchWindow(str(exc))
    if isinstance(exc, sched_errors.TooManyRequests | credit_errors.TooManyRequests):
        return TooManyRequests(str(exc))
    if isinstance(exc, sched_errors.InvalidEntry | credit_errors.InvalidEntry):
        return InvalidEntry(str(exc))
    return InvalidArgument(str(exc))


@attrs.frozen(kw_only=True)
class DispatchStatistics:
    """A snapshot of a :class:`DispatchCore`; ``*_total`` counters are cumulative and count
    requests (a merged owner's requests each), ``queued_transfers`` and
    ``dispatched_transfers`` count owners (a merged owner once)."""

    submitted_total: int
    bypassed_total: int
    merged_total: int
    """Requests that joined another request's owner (``merge_requests``)."""
    completed_total: int
    failed_total: int
    canceled_total: int
    dropped_total: int
    rejected_total: int
    queued_transfers: int
    dispatched_transfers: int
    window_owners: int
    window_bytes: int
    quiet_refills_total: int
    """Refills skipped because nothing their last empty pick read had changed (quiet passes,
    docs/gate.md#quiet-passes): the gate was not asked, so its ``blocked`` counters do not
    count them."""
    queue: QueueStatistics | None
    rails: tuple[RailStatistics, ...]


def credit_plan(request: TransferRequest) -> Plan:
    """The plan decides the charge (RFC "Terminology and Direction"): a WRITE charges the
    receiver (direct, or staged with STAGING_SLOTS); a READ uses local accounting only."""
    if request.opcode is Opcode.READ:
        return Plan.RDMA_READ
    if request.plan is TransferPlan.STAGED:
        return Plan.REMOTE_STAGED_WRITE
    return Plan.REMOTE_DIRECT_WRITE


def slice_lease(token: object, length: int, *, last: bool, requests: int = 1) -> WriteLease | None:
    """The lease one slice of a credited WRITE carries, or ``None`` (no credit token).

    The token's charge is split over the transfer's slices: each slice carries its own
    DATA_BYTES, the slot resources ride on the last slice of each of the transfer's
    ``requests`` (one share each: a merged owner's slots are charged per request), so the slices
    sum to the charge the gate reserved (what the receiver's write admission counts as landed).
    """
    if not isinstance(token, GateToken) or token.reservation is None:
        return None  # no credit needed, a DISABLED gate, or the bounded legacy window
    reservation = token.reservation
    parts: list[tuple[int, int]] = []
    for resource, amount in token.charge.parts:
        if resource is CreditResource.DATA_BYTES:
            parts.append((int(resource), length))
        elif last:
            parts.append((int(resource), amount // requests))
    return WriteLease(
        session=reservation.key.receiver_session.value,
        epoch=reservation.epoch,
        qos_class=token.qos_class,
        charge=tuple(parts),
    )


class TransferRecord:
    """The mutable state of one transfer in the core (never handed out; see TransferState)."""

    __slots__ = (
        "batch",
        "cancel_sent",
        "canceled",
        "detail",
        "dropped_mlu",
        "failed",
        "in_window",
        "moved_bytes",
        "owner_id",
        "part_moved",
        "parts",
        "phase",
        "reason",
        "request",
        "slices_ended",
        "slices_posted",
        "status",
        "submit_ns",
        "token",
        "transfer_id",
        "waiting",
    )

    def __init__(
        self,
        transfer_id: int,
        request: TransferRequest,
        submit_ns: int,
        batch: int,
        parts: tuple[tuple[int, int], ...] = (),
    ) -> None:
        self.transfer_id = transfer_id
        self.request = request
        # (transfer id, length) of each request the transfer carries, in remote-offset order:
        # one, or several merged requests (their ids resolve to this record)
        self.parts = parts or ((transfer_id, request.length),)
        self.part_moved = [0] * len(self.parts)
        self.submit_ns = submit_ns
        self.batch = batch  # the queue's batch token (0: never queued)
        self.owner_id = 0  # the queue's owner id (0: never queued)
        self.phase = TransferPhase.QUEUED
        self.status = TaskStatus.PENDING
        self.reason = EndReason.COMPLETED
        self.detail = ""
        self.dropped_mlu: float | None = None
        self.token: object | None = None  # the gate's token once picked
        self.in_window = False  # counted in the dispatch window
        self.waiting: set[PendingSlice] = set()  # PendingSlice objects not yet posted
        self.slices_posted = 0
        self.slices_ended = 0
        self.moved_bytes = 0
        self.failed = False
        self.canceled = False
        self.cancel_sent = False  # a device was asked to cancel its posted slices


class SliceCutter:
    """Cuts a dispatched transfer into slices with fresh ids (``wr_id`` unique per core, so per
    device; ``write_id`` a non-zero u32 cycling over the core's writes)."""

    __slots__ = ("_next_wr_id", "_next_write_id")

    def __init__(self) -> None:
        self._next_wr_id = 1
        self._next_write_id = 1

    def cut(self, record: TransferRecord, token: object, slice_bytes: int) -> list[PendingSlice]:
        """The slices of ``record`` (rail 0 until the caller assigns one), in offset order; a
        merged transfer is cut request by request, so each request is its own write(s) and its
        own transfer at the receiver: consecutive write ids and each slice's index in it."""
        out: list[PendingSlice] = []
        start = 0
        for part, (_tid, part_length) in enumerate(record.parts):
            end = start + part_length
            out.extend(self._cut_part(record, token, slice_bytes, part, start, end))
            start = end
        return out

    def _cut_part(  # noqa: PLR0917 (one request's span of the record)
        self,
        record: TransferRecord,
        token: object,
        slice_bytes: int,
        part: int,
        start: int,
        end: int,
    ) -> list[PendingSlice]:
        request = record.request
        requests = len(record.parts)
        out: list[PendingSlice] = []
        # at most MAX_SLICE_INDEX + 1 slices per request: a longer one gets longer slices
        slice_bytes = max(slice_bytes, -(-(end - start) // (MAX_SLICE_INDEX + 1)))
        for index, offset in enumerate(range(start, end, slice_bytes)):
            length = min(slice_bytes, end - offset)
            write_id = 0
            if request.opcode is Opcode.WRITE:
                write_id = self._next_write_id
                self._next_write_id = 1 if write_id == U32_MAX else write_id + 1
            slice_request = SliceRequest(
                wr_id=self._next_wr_id,
                opcode=request.opcode,
                peer=request.peer,
                local=request.local[offset : offset + length],
                remote_segment=request.remote_segment,
                remote_offset=request.remote_offset + offset,
                length=length,
                lease=slice_lease(token, length, last=offset + length == end, requests=requests),
                deadline_ns=request.deadline_ns,
                priority=request.priority,
                write_id=write_id,
                slice_index=index,
            )
            self._next_wr_id += 1
            out.append(PendingSlice(record, 0, slice_request, part))
        return out


def pressure_of(
    peer: int,
    gate: DispatchGate | None,
    queue: AdmissionQueue | None,
    default_qos: int,
) -> BackpressureInfo | None:
    """What :meth:`DispatchCore.backpressure` answers: the oldest stall the gate recorded for a
    queued transfer to ``peer``; else ``LOCAL_QUEUE`` when the queue is at a capacity limit."""
    if gate is not None:
        # the gate holds a stall exactly while its owner is queued (dispatch, drop, reject,
        # cancel and route removal end it), so its oldest one for the peer is the answer
        oldest = gate.oldest_stall(peer)
        if oldest is not None:
            return oldest.info
    if queue is not None and queue.at_capacity():
        return BackpressureInfo(
            source=BackpressureSource.LOCAL_QUEUE,
            peer=peer,
            qos_class=default_qos,
            exhausted=(),
            retry_after_us=0,
            fallback_allowed=True,
        )
    return None
