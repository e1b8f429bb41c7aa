"""Cancellation and failure: transfers the caller cancels, and those of a peer declared dead.

``cancel``/``cancel_many`` end a queued transfer at once and a dispatched one once its posted
slices ended (its unposted slices withdrawn, its posted ones canceled on their devices);
``fail_peer`` fails the dispatched (and, if asked, the queued) transfers of a dead peer. Both
validate everything before changing anything, and end transfers through :mod:`._completion`.
A mixin of :class:`DispatchCore` over :mod:`._submit`, off the per-slice path.
"""

from __future__ import annotations

from collections.abc import Sequence

from tent_sched import TaskStatus

from ..devices._base import U64_MAX, Cancellable
from ..errors import InvalidArgument, NotSupported
from ._records import TransferRecord
from ._submit import _CoreSubmit
from ._types import EndReason, TransferPhase


class _CoreCancel(_CoreSubmit):
    """Cancellation and peer failure of a :class:`DispatchCore` (module docstring)."""

    # ---------------------------------------------------------------- cancel and failure

    def cancel(self, transfer_id: int, now_ns: int) -> bool:
        """Cancel one transfer: :meth:`cancel_many` of ``(transfer_id,)``."""
        return self.cancel_many((transfer_id,), now_ns)

    def cancel_many(self, transfer_ids: Sequence[int], now_ns: int) -> bool:
        """Cancel transfers; return whether every one of them ends CANCELED.

        Per transfer (the id of any request of a merged owner cancels the whole owner):

        1. QUEUED: it ends CANCELED at once (reported by the next :meth:`progress`); no device
           is touched.
        2. DISPATCHED: its slices not yet posted are withdrawn and its posted slices are
           canceled on their devices (:class:`~tent_transport.devices.Cancellable`, each device
           asked once); it ends CANCELED once every posted slice ended (handles never lie:
           bytes may move until the device reports the slice's end; ``moved_bytes`` says how
           many did). Its credit, if never posted, is rolled back.
        3. Already canceled: nothing changes (idempotent: no device is asked again); counts as
           ending CANCELED.
        4. Ended, or ending FAILED (a slice failed, its peer was declared dead): nothing changes;
           counts as not ending CANCELED.

        Validates every id first: raises InvalidArgument / InvalidEntry for a bad time or an
        unknown id, and :class:`~tent_transport.errors.NotSupported` when a transfer has a slice
        posted on a device that cannot cancel; nothing changes then.
        """
        self._check_now(now_ns)
        if not isinstance(transfer_ids, Sequence):
            raise InvalidArgument(f"transfer_ids must be a sequence, got {transfer_ids!r}")
        records = {r.transfer_id: r for r in map(self._record, transfer_ids)}.values()
        posted: dict[int, dict[int, list[int]]] = {}
        for record in records:
            if record.phase is not TransferPhase.DISPATCHED or record.canceled or record.failed:
                continue
            on_rails = self._rails.posted_of(record)
            for index in on_rails:
                device = self._rails.devices[index]
                if not isinstance(device, Cancellable):
                    raise NotSupported(
                        f"transfer {record.transfer_id} has slices posted on {device.name}, "
                        "which cannot cancel posted work"
                    )
            posted[record.transfer_id] = on_rails
        every = True
        for record in records:
            every = self._cancel_one(record, posted.get(record.transfer_id), now_ns) and every
        return every

    def _cancel_one(
        self, record: TransferRecord, posted: dict[int, list[int]] | None, now_ns: int
    ) -> bool:
        if record.canceled:
            return True
        if record.phase is TransferPhase.TERMINAL or record.failed:
            return record.status is TaskStatus.CANCELED
        if record.phase is TransferPhase.QUEUED:
            assert self._queue is not None
            self._queue.cancel(record.owner_id)
            if self._gate is not None:
                self._gate.forget(record.owner_id)
            self._queued -= 1
            self._end(record, TaskStatus.CANCELED, EndReason.CANCELED, "canceled", now_ns)
            return True
        record.canceled = True
        self._withdraw(record)
        for index, wr_ids in (posted or {}).items():
            device = self._rails.devices[index]
            assert isinstance(device, Cancellable)
            device.cancel(wr_ids, now_ns)
        self._maybe_finish(record, now_ns)
        return True

    def fail_peer(self, peer: int, now_ns: int, detail: str, *, queued: bool = False) -> int:
        """The driver declared ``peer`` dead: fail its dispatched transfers' unposted slices.

        Each such transfer ends FAILED (PEER_FAILED) once its posted slices ended (the device
        flushes them). With ``queued``, transfers to the peer still queued end FAILED
        (PEER_FAILED) too, reported by the next :meth:`progress`: work submitted for a session
        that was replaced names that session's regions and must not be posted on the next one.
        Otherwise queued transfers stay queued (cancel them to end them). Returns how many
        transfers were failed. Raises InvalidArgument for a bad argument; nothing changes then.
        """
        self._check_now(now_ns)
        if (
            type(peer) is not int
            or not 0 <= peer <= U64_MAX
            or type(detail) is not str
            or type(queued) is not bool
        ):
            raise InvalidArgument("fail_peer needs a u64 peer, a str detail and a bool queued")
        records = {r.transfer_id: r for r in self._records.values()}.values()  # merged: once
        hit = [
            r
            for r in records
            if r.phase is TransferPhase.DISPATCHED and r.request.peer == peer and r.waiting
        ]
        waiting = [
            r
            for r in records
            if queued and r.phase is TransferPhase.QUEUED and r.request.peer == peer
        ]
        for record in hit:
            if not record.failed:
                record.failed = True
                record.reason = EndReason.PEER_FAILED
                record.detail = detail
            self._withdraw(record)
            self._maybe_finish(record, now_ns)
        for record in waiting:
            assert self._queue is not None  # only the runtime queue holds QUEUED transfers
            self._queue.cancel(record.owner_id)
            if self._gate is not None:
                self._gate.forget(record.owner_id)
            self._queued -= 1
            self._end(record, TaskStatus.FAILED, EndReason.PEER_FAILED, detail, now_ns)
        return len(hit) + len(waiting)
