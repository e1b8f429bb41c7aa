"""The dispatch core's completion path: a slice posted or ended, a transfer finished and settled.

The rails call back here for every slice: ``_posted`` when a device accepted it (the first post
commits the transfer's gate token, ``_settle.py``), ``_slice_ended`` when it ended (its bytes
counted, or the transfer failed and its unposted slices withdrawn). ``_maybe_finish`` ends a
transfer once no slice of it is waiting or posted, and ``_end`` settles every transfer that ends,
however it ends (queue ``complete``, gate token, dispatch window, deadline metrics, batch
retirement, one :class:`TransferEvent` per request). A mixin of :class:`DispatchCore` over
:mod:`._state`, below every other part: each of them ends transfers through it. ``_posted`` and
``_slice_ended`` run once per slice: the hot path of every transfer.
"""

from __future__ import annotations

from tent_sched import TaskStatus

from ..devices._base import SliceStatus
from ._records import PendingSlice, TransferRecord
from ._state import _CoreState
from ._types import EndReason, TransferEvent, TransferPhase


class _CoreCompletion(_CoreState):
    """Slice completions and the end of a transfer, of a :class:`DispatchCore` (module
    docstring)."""

    def _posted(self, item: PendingSlice) -> None:
        record = item.owner
        record.waiting.discard(item)
        record.slices_posted += 1
        self._settle.posted(record)  # the first post commits (RFC "submit-success commit")

    def _slice_ended(self, item: PendingSlice, status: SliceStatus, detail: str, now: int) -> None:
        record = item.owner
        if item in record.waiting:  # refused by a ready device before it was posted
            record.waiting.discard(item)
        else:
            record.slices_posted -= 1
        record.slices_ended += 1
        if status.moved:
            record.moved_bytes += item.request.length
            record.part_moved[item.part] += item.request.length
        elif not record.failed:
            record.failed = True
            record.reason = EndReason.SLICE_FAILED
            rail = self._rails.devices[item.rail].name
            record.detail = f"{rail}: {status.value}" + (f": {detail}" if detail else "")
            self._withdraw(record)  # its other slices would only move bytes for nothing
        self._maybe_finish(record, now)

    def _withdraw(self, record: TransferRecord) -> None:
        if record.waiting:
            self._rails.withdraw(record.waiting)
            record.waiting = set()

    def _maybe_finish(self, record: TransferRecord, now_ns: int) -> None:
        if record.phase is not TransferPhase.DISPATCHED or record.waiting or record.slices_posted:
            return
        self._dispatched -= 1
        if record.canceled:
            self._end(record, TaskStatus.CANCELED, EndReason.CANCELED, "canceled", now_ns)
        elif record.failed:
            self._end(record, TaskStatus.FAILED, record.reason, record.detail, now_ns)
        else:
            self._end(record, TaskStatus.COMPLETED, EndReason.COMPLETED, "", now_ns)

    def _end(
        self,
        record: TransferRecord,
        status: TaskStatus,
        reason: EndReason,
        detail: str,
        now_ns: int,
    ) -> None:
        """Settle a transfer that just ended: queue, gate, window, metrics, its event."""
        record.phase = TransferPhase.TERMINAL
        record.status = status
        record.reason = reason
        record.detail = detail
        request = record.request
        if record.in_window:
            assert self._queue is not None
            self._queue.complete(record.owner_id, status)
            self._window_owners -= 1
            self._window_bytes -= request.length
        self._endpoint_events.extend(self._settle.ended(record, now_ns))
        if self._metrics is not None:
            self._metrics.record_completion(
                status=status,
                deadline_ns=request.deadline_ns,
                submit_ns=record.submit_ns,
                complete_ns=now_ns,
            )
        if record.owner_id:
            del self._by_owner[record.owner_id]
            left = self._batch_live[record.batch] - 1
            if left:
                self._batch_live[record.batch] = left
            else:
                del self._batch_live[record.batch]
                assert self._queue is not None
                self._queue.retire_batch(record.batch)
        self._ended[reason] += len(record.parts)
        self._events.extend(  # one per request: a merged owner's requests end with it
            TransferEvent(
                transfer_id=transfer_id,
                status=status,
                reason=reason,
                detail=detail,
                peer=request.peer,
                length=length,
                moved_bytes=moved,
                deadline_ns=request.deadline_ns,
                priority=request.priority,
                submit_ns=record.submit_ns,
                end_ns=now_ns,
                dropped_mlu=record.dropped_mlu,
                intent_type=request.intent_type,
            )
            for (transfer_id, length), moved in zip(record.parts, record.part_moved, strict=True)
        )
