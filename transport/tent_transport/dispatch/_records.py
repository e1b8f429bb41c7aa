"""The dispatch core's per-transfer record and the plan → charge mapping (core-private)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tent_credit import CreditResource, GateToken, Plan
from tent_sched import TaskStatus

from ..devices._base import Opcode, WriteLease
from ._types import EndReason, TransferPhase, TransferPlan, TransferRequest

if TYPE_CHECKING:
    from ._rails import PendingSlice

__all__ = ["TransferRecord", "credit_plan", "slice_lease"]


def credit_plan(request: TransferRequest) -> Plan:
    """The plan decides the charge (RFC "Terminology and Direction"): a WRITE charges the
    receiver (direct, or staged with STAGING_SLOTS); a READ uses local accounting only."""
    if request.opcode is Opcode.READ:
        return Plan.RDMA_READ
    if request.plan is TransferPlan.STAGED:
        return Plan.REMOTE_STAGED_WRITE
    return Plan.REMOTE_DIRECT_WRITE


def slice_lease(token: object, length: int, *, last: bool) -> WriteLease | None:
    """The lease one slice of a credited WRITE carries, or ``None`` (no credit token).

    The token's charge is split over the transfer's slices: each slice carries its own
    DATA_BYTES, the slot resources ride on the last slice, so the slices sum to the charge the
    gate reserved (what the receiver's write admission counts as landed).
    """
    if not isinstance(token, GateToken) or token.reservation is None:
        return None  # no credit needed, a DISABLED gate, or the bounded legacy window
    reservation = token.reservation
    parts: list[tuple[int, int]] = []
    for resource, amount in token.charge.parts:
        if resource is CreditResource.DATA_BYTES:
            parts.append((int(resource), length))
        elif last:
            parts.append((int(resource), amount))
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
        "canceled",
        "detail",
        "dropped_mlu",
        "failed",
        "in_window",
        "moved_bytes",
        "owner_id",
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
        self, transfer_id: int, request: TransferRequest, submit_ns: int, batch: int
    ) -> None:
        self.transfer_id = transfer_id
        self.request = request
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
