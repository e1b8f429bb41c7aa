"""The receiver's staged path (RFC "Staging and Deadlock Avoidance").

A staged WRITE (its lease charges STAGING_SLOTS) lands in a slot of the receiver's staging pool
instead of its target. An inner *staging-internal* transfer then moves it to the target and
frees the slot; only then is the outer write acknowledged and announced as landed. The inner
transfer is a real transfer through a dispatch core of its own, with its own credit:

1. its key is this receiver's own peer id, accepted by the receiver's ``CreditReceiver`` with
   ``AllocationClass.STAGING_INTERNAL``, so it is granted from the whole capacity, including
   the ``staging_reserve`` that user keys can never take: when user payload holds every byte
   it may, inner transfers still get credit, complete, and release the outer reservations;
2. its owners are ``OwnerKind.STAGING_INTERNAL`` in that core's admission queue (they may use
   the queue's staging reserve);
3. the device is :class:`LocalCopyRail`: it admits each inner write with ``admit_write`` (the
   same core call as the TCP receiver) before it copies, and releases the inner charge once the
   bytes are in place (the move is the inner transfer's consumer).

The endpoints of the inner key talk in process (no socket): messages are moved between the
sender endpoint and the receiver endpoint after every pass. Every decision is a core call.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Sequence

from tent_credit import (
    AllocationClass,
    CreditReceiver,
    CreditResource,
    DispatchGate,
    SenderEndpoint,
)
from tent_sched import OwnerKind, TaskStatus

from ..config import EngineConfig
from ..devices import Opcode, SliceCompletion, SliceRequest, SliceStatus
from ..dispatch import DispatchCore, TransferIntent, TransferRequest
from ..errors import PostRefused
from ..segments import SegmentError, SegmentTable

__all__ = ["LocalCopyRail", "StagingPath"]

_R = CreditResource


class LocalCopyRail:
    """A Device that moves bytes within this process: staging slot → target segment."""

    def __init__(self, *, credit: CreditReceiver, peer: int, segments: SegmentTable) -> None:
        self._credit = credit
        self._peer = peer
        self._segments = segments
        self._completions: collections.deque[SliceCompletion] = collections.deque()
        self._wakeup: Callable[[], None] | None = None
        self.copies = 0

    @property
    def name(self) -> str:
        return "staging-copy"

    @property
    def link_speed_gbps(self) -> float:
        return 0.0

    def post_budget(self, peer: int) -> int:
        return 256 if peer == self._peer else 0

    def post(self, slices: Sequence[SliceRequest], now_ns: int) -> None:
        if any(s.peer != self._peer or s.opcode is not Opcode.WRITE for s in slices):
            raise PostRefused("the staging rail only moves writes within this node", ready=True)
        for s in slices:
            self._completions.append(self._move(s))
        if slices and self._wakeup is not None:
            asyncio.get_running_loop().call_soon(self._wakeup)

    def _move(self, s: SliceRequest) -> SliceCompletion:
        amounts = {} if s.lease is None else {_R(r): a for r, a in s.lease.charge}
        if s.lease is not None:
            admission = self._credit.admit_write(
                self._peer, s.lease.qos_class, s.lease.epoch, amounts
            )
            if not admission.accepted:
                return SliceCompletion(
                    wr_id=s.wr_id,
                    status=SliceStatus.WRITE_REFUSED,
                    length=s.length,
                    detail=str(admission.reason),
                )
        try:
            target = self._segments.segment(s.remote_segment).view
        except SegmentError:
            target = memoryview(b"")
        end = s.remote_offset + s.length
        if end > len(target):
            status = SliceStatus.REMOTE_ACCESS_ERROR
        else:
            target[s.remote_offset : end] = s.local
            self.copies += 1
            status = SliceStatus.SUCCESS
        if s.lease is not None:
            # the move consumed the inner write: its credit goes back at once
            self._credit.release(self._peer, s.lease.qos_class, s.lease.epoch, amounts)
        return SliceCompletion(wr_id=s.wr_id, status=status, length=s.length)

    def poll(self, max_entries: int, now_ns: int) -> list[SliceCompletion]:
        out: list[SliceCompletion] = []
        while self._completions and len(out) < max_entries:
            out.append(self._completions.popleft())
        return out

    def next_completion_ns(self) -> int | None:
        return None

    def set_wakeup(self, callback: Callable[[], None] | None) -> None:
        self._wakeup = callback

    def close(self) -> None:
        self._completions.clear()


Done = Callable[[bool, str], None]


class StagingPath:
    """The staging pool and the inner transfers of one receiver (loop thread only)."""

    def __init__(
        self,
        *,
        config: EngineConfig,
        credit: CreditReceiver,
        segments: SegmentTable,
        peer: int,
        slots: int,
        slot_bytes: int,
    ) -> None:
        if slots < 1 or slot_bytes < 1:
            raise ValueError("a staging pool needs at least one slot of at least one byte")
        rc = config.receiver_credit
        self.slot_bytes = slot_bytes
        self._pool = memoryview(bytearray(slots * slot_bytes))
        self._free = list(range(slots))
        self._credit = credit
        self._qos = rc.default_qos_class
        self.endpoint = SenderEndpoint(
            sender_peer=peer, qos_class=self._qos, mode=rc.credit_mode, usage_interval_ns=0
        )
        self._remote = credit.accept(
            peer, self._qos, allocation_class=AllocationClass.STAGING_INTERNAL
        )
        gate = DispatchGate(rc.gate_config())
        gate.add_endpoint(peer, self.endpoint)
        self.rail = LocalCopyRail(credit=credit, peer=peer, segments=segments)
        self.core = DispatchCore(config, [self.rail], gate=gate)
        self._peer = peer
        self._pending: dict[int, tuple[int, Done]] = {}
        self._scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self.rail.set_wakeup(self.wake)
        self.moved = 0
        self.endpoint.connect(time.monotonic_ns())
        self._pump()

    def slot(self, length: int) -> tuple[int, memoryview] | None:
        """A free slot for a staged write of ``length`` bytes, or ``None``."""
        if length > self.slot_bytes or not self._free:
            return None
        index = self._free.pop()
        return index, self._pool[index * self.slot_bytes : index * self.slot_bytes + length]

    def free_slot(self, index: int) -> None:
        self._free.append(index)

    def move(self, index: int, segment: int, offset: int, length: int, done: Done) -> None:
        """Submit the inner transfer of slot ``index`` to its target; ``done(ok, detail)``
        runs when it ended (the slot is free again by then)."""
        view = self._pool[index * self.slot_bytes : index * self.slot_bytes + length]
        request = TransferRequest(
            opcode=Opcode.WRITE,
            local=view,
            peer=self._peer,
            remote_segment=segment,
            remote_offset=offset,
            length=length,
            kind=OwnerKind.STAGING_INTERNAL,
            intent_type=TransferIntent.STAGING_INTERNAL,
        )
        try:
            (tid,) = self.core.submit([request], time.monotonic_ns())
        except Exception as exc:  # the queue refused it (a bound): fail the outer write
            self.free_slot(index)
            done(False, f"inner transfer refused: {exc}")
            return
        self._pending[tid] = (index, done)
        self.wake()

    def wake(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._pass)

    def _pass(self) -> None:
        self._scheduled = False
        for event in self.core.progress(time.monotonic_ns()):
            index, done = self._pending.pop(event.transfer_id)
            self.free_slot(index)
            ok = event.status is TaskStatus.COMPLETED
            self.moved += ok
            done(ok, event.detail)
        self._pump()

    def _pump(self) -> None:
        # the inner key's control messages, in process, until both sides are quiet (bounded);
        # a grant may make a queued inner transfer eligible: then run another pass
        moved = False
        for _ in range(8):
            now = time.monotonic_ns()
            out = self.endpoint.messages_to_send(now)
            back = [] if self._remote.closed else self._remote.messages_to_send(now)
            if not out and not back:
                break
            moved = True
            for message in out:
                if not self._remote.closed:
                    self._remote.receive_message(message, now)
            for message in back:
                self.endpoint.receive_message(message, now)
        if moved:
            self.wake()
        timers = [
            t
            for t in (
                self.core.next_timer_ns(),
                self.endpoint.get_timer(),
                self._remote.get_timer(),
            )
            if t is not None
        ]
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if timers:
            delay = max(0.0, (min(timers) - time.monotonic_ns()) / 1e9)
            self._timer = asyncio.get_running_loop().call_later(delay, self.wake)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.rail.close()
