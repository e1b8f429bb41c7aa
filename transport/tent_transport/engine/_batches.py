"""Batches, as TENT's users know them: the batch API beside the handle API.

TENT's ``TransferEngine`` runs a submit inside a *batch*: ``allocateBatch(capacity)``,
``submitTransfer(batch, requests)``, ``getTransferStatus(batch, task)``,
``cancelTransfer(batch, task)``, ``freeBatch(batch)``. The engine offers the same, on the same
dispatch core as its handles:

1. A batch holds at most ``capacity`` tasks over its life. A submit into it is all or nothing:
   one that would take it past its capacity is refused (TooManyRequests) before anything is
   published, as is one into an unknown or freed batch (:class:`UnknownHandle`: an InvalidEntry
   that is also an InvalidArgument, TENT's answer for such a handle).
2. Its tasks are numbered from 0 in submit order, across submits; a task's status stays
   readable after it ended, until the batch is freed.
3. A batch may be freed at any time: its id answers UnknownHandle from then on; its unfinished
   work runs on to a terminal state (handles never lie: a buffer is not handed back while bytes
   may move) and is reclaimed then.
4. A :class:`Request` names its target by a *segment handle* (TENT's ``SegmentID``), which
   :meth:`BatchTable.open_segment` makes from a peer and the segment id it exposed.
"""

from __future__ import annotations

import attrs

from tent_credit import BackpressureInfo
from tent_sched import TaskStatus

from ..devices._base import U64_MAX, Opcode
from ..dispatch import TransferEvent, TransferIntent, TransferRequest, TransferState
from ..dispatch._types import _any_int, _as_memoryview, _enum, _u64
from ..errors import InvalidArgument, InvalidEntry, TooManyRequests, UnknownHandle

__all__ = ["BatchTable", "Request", "TaskState"]


@attrs.frozen
class Request:
    """The seed's ``Request``: ``Request(opcode, source, target_id, target_offset, length,
    deadline_ns=..., priority=..., intent_type=...)``.

    ``source`` is any contiguous buffer of exactly ``length`` bytes (writable for a READ), not
    copied; ``target_id`` a segment handle (:meth:`Engine.open_segment`); ``deadline_ns`` is
    absolute on the engine's clock, ``time.monotonic_ns()`` (0 = none); ``priority`` the QoS
    tier; ``intent_type`` what the transfer is for (:class:`TransferIntent`, reported on its
    event, not scheduled by). Raises :class:`InvalidArgument` when a field is malformed.
    """

    opcode: Opcode = attrs.field(validator=_enum(Opcode))
    source: memoryview = attrs.field(converter=_as_memoryview, eq=False)
    target_id: int = attrs.field(validator=_u64(1))
    target_offset: int = attrs.field(validator=_u64())
    length: int = attrs.field(validator=_u64(1))
    deadline_ns: int = attrs.field(default=0, kw_only=True, validator=_u64())
    priority: int = attrs.field(default=0, kw_only=True, validator=_any_int)
    intent_type: TransferIntent = attrs.field(
        default=TransferIntent.UNSPEC, kw_only=True, validator=_enum(TransferIntent)
    )

    def __attrs_post_init__(self) -> None:
        if self.source.nbytes != self.length:
            raise InvalidArgument(
                f"source holds {self.source.nbytes} bytes, the request is {self.length}"
            )
        if self.opcode is Opcode.READ and self.source.readonly:
            raise InvalidArgument("a READ needs a writable source buffer")


@attrs.frozen(kw_only=True)
class TaskState:
    """One task of a batch (TENT's ``TransferStatus``): PENDING until it ended, then its
    terminal status. ``transferred_bytes`` are the bytes of its slices that moved;
    ``backpressure`` is why a pending task waits (a credit stall), else ``None``; ``detail``
    says why it failed."""

    status: TaskStatus
    transferred_bytes: int
    backpressure: BackpressureInfo | None = None
    detail: str = ""


class _Batch:
    __slots__ = ("capacity", "ended", "freed", "transfers")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.transfers: list[int] = []  # task id -> transfer id
        self.ended: dict[int, TransferEvent] = {}  # task id -> its terminal event
        self.freed = False


class BatchTable:
    """The engine's batches and segment handles (module docstring). Loop-thread object."""

    def __init__(self) -> None:
        self._batches: dict[int, _Batch] = {}
        self._tasks: dict[int, tuple[_Batch, int]] = {}  # transfer id -> (batch, task id)
        self._next_batch = 1
        self._handles: dict[tuple[int, int], int] = {}
        self._targets: list[tuple[int, int]] = []  # handle - 1 -> (peer, segment)

    # ---------------------------------------------------------------- segments

    def open_segment(self, peer: int, segment_id: int) -> int:
        """The handle of ``segment_id`` at ``peer`` (the same handle for the same pair).
        Raises InvalidArgument for a non-u64 argument."""
        for value, name in ((peer, "peer"), (segment_id, "segment_id")):
            if type(value) is not int or not 0 <= value <= U64_MAX:
                raise InvalidArgument(f"{name} must be a u64 int, got {value!r}")
        handle = self._handles.get((peer, segment_id))
        if handle is None:
            self._targets.append((peer, segment_id))
            handle = self._handles[(peer, segment_id)] = len(self._targets)
        return handle

    def resolve(self, requests: object) -> tuple[TransferRequest, ...]:
        """The dispatch core's requests for a submit's :class:`Request` list. Raises
        InvalidArgument (not a list or tuple of Request) or InvalidEntry (an unknown segment
        handle)."""
        if not isinstance(requests, list | tuple):
            kind = type(requests).__name__
            raise InvalidArgument(f"requests must be a list or tuple, got {kind}")
        out = []
        for position, request in enumerate(requests):
            if not isinstance(request, Request):
                raise InvalidArgument(f"requests[{position}] is not a Request")
            if request.target_id > len(self._targets):
                raise InvalidEntry(f"unknown segment handle {request.target_id}")
            peer, segment = self._targets[request.target_id - 1]
            out.append(
                TransferRequest(
                    opcode=request.opcode,
                    local=request.source,
                    peer=peer,
                    remote_segment=segment,
                    remote_offset=request.target_offset,
                    length=request.length,
                    deadline_ns=request.deadline_ns,
                    priority=request.priority,
                    intent_type=request.intent_type,
                )
            )
        return tuple(out)

    # ---------------------------------------------------------------- batches

    def allocate(self, capacity: int) -> int:
        """A new batch of ``capacity`` tasks; ids start at 1 and are never reused. Raises
        InvalidArgument for a capacity that is not an int in [1, 2**32]."""
        if type(capacity) is not int or not 1 <= capacity <= 1 << 32:
            raise InvalidArgument(f"capacity must be an int in [1, 2**32], got {capacity!r}")
        batch_id = self._next_batch
        self._next_batch += 1
        self._batches[batch_id] = _Batch(capacity)
        return batch_id

    def check(self, batch_id: int, count: int) -> None:
        """Raise what a submit of ``count`` tasks into ``batch_id`` must: InvalidEntry for an
        unknown or freed batch, TooManyRequests past its capacity."""
        batch = self._batch(batch_id)
        if count > batch.capacity - len(batch.transfers):
            raise TooManyRequests(
                f"batch {batch_id} holds {len(batch.transfers)} of {batch.capacity} tasks; "
                f"{count} more do not fit"
            )

    def bind(self, batch_id: int, transfer_ids: tuple[int, ...]) -> tuple[int, ...]:
        """Record a submit the core admitted (after :meth:`check`); return its task ids."""
        batch = self._batches[batch_id]
        first = len(batch.transfers)
        for offset, transfer_id in enumerate(transfer_ids):
            batch.transfers.append(transfer_id)
            self._tasks[transfer_id] = (batch, first + offset)
        return tuple(range(first, len(batch.transfers)))

    def transfer_of(self, batch_id: int, task_id: int) -> tuple[int, TransferEvent | None]:
        """The transfer id of a task and its terminal event (``None`` while it runs). Raises
        InvalidArgument for a non-int task, InvalidEntry for an unknown or freed batch or a
        task it does not hold."""
        batch = self._batch(batch_id)
        if type(task_id) is not int:
            raise InvalidArgument(f"task_id must be an int, got {task_id!r}")
        if not 0 <= task_id < len(batch.transfers):
            raise UnknownHandle(f"batch {batch_id} has no task {task_id}")
        return batch.transfers[task_id], batch.ended.get(task_id)

    def tasks(self, batch_id: int) -> int:
        """How many tasks ``batch_id`` holds (InvalidEntry for an unknown or freed batch)."""
        return len(self._batch(batch_id).transfers)

    def ended(self, event: TransferEvent) -> None:
        """A transfer ended: its task keeps the event; a freed batch is reclaimed with its
        last task."""
        entry = self._tasks.pop(event.transfer_id, None)
        if entry is None:
            return  # a handle-API transfer
        batch, task_id = entry
        batch.ended[task_id] = event
        if batch.freed and len(batch.ended) == len(batch.transfers):
            batch.ended.clear()

    def free(self, batch_id: int) -> None:
        """Free a batch: its id is invalid from now on; unfinished tasks run on and are
        reclaimed when they end. Raises InvalidEntry for an unknown or freed batch."""
        batch = self._batch(batch_id)
        batch.freed = True
        del self._batches[batch_id]
        if len(batch.ended) == len(batch.transfers):
            batch.ended.clear()

    def live(self) -> int:
        """Transfers of batch tasks not yet ended (freed batches' included)."""
        return len(self._tasks)

    def _batch(self, batch_id: int) -> _Batch:
        if type(batch_id) is not int:
            raise InvalidArgument(f"batch_id must be an int, got {batch_id!r}")
        batch = self._batches.get(batch_id)
        if batch is None:
            raise UnknownHandle(f"unknown or freed batch {batch_id}")
        return batch


def task_state(state: TransferState | TransferEvent) -> TaskState:
    """A task's state from the core's live snapshot or its terminal event."""
    if isinstance(state, TransferEvent):
        return TaskState(
            status=state.status, transferred_bytes=state.moved_bytes, detail=state.detail
        )
    return TaskState(
        status=state.status, transferred_bytes=state.moved_bytes, backpressure=state.backpressure
    )
