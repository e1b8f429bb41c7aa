"""The batch API (TENT's allocateBatch / submitTransfer / getTransferStatus / cancelTransfer /
freeBatch) on the synchronous engine, beside the handle API, over TCP with receiver credit."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

import pytest
from procs import KEY, credit_config
from tent_transport.config import load_engine_config
from tent_transport.control import PskIdentity
from tent_transport.devices import Opcode
from tent_transport.dispatch import TransferRequest
from tent_transport.engine import EngineOptions, Request, SyncEngine, TaskState
from tent_transport.errors import InvalidArgument, InvalidEntry, TooManyRequests

from tent_credit import BackpressureSource
from tent_sched import TaskStatus

BLOCK = 64 << 10


class Pair:
    """A receiver of ``slots`` blocks, a sender, and the segment it exposed to the sender."""

    def __init__(self, slots: int) -> None:
        config = load_engine_config(credit_config("required", slots=slots, block=BLOCK, batch=1))
        self.rx = SyncEngine(
            config, EngineOptions(peer_id=2, identity=PskIdentity(local_peer=2, keys={1: KEY}))
        )
        self.tx = SyncEngine(
            config, EngineOptions(peer_id=1, identity=PskIdentity(local_peer=1, keys={2: KEY}))
        )
        host, port = self.rx.start()
        self.tx.start()
        self.peer = self.tx.connect(host, port)
        self.memory = bytearray(8 * BLOCK)
        segment = self.rx.register(self.memory)
        self.rx.expose(1, segment.segment_id, 0, len(self.memory))
        self.tx.wait_regions(self.peer, lambda d: bool(d.regions))
        self.segment = segment.segment_id
        self.target = self.tx.open_segment(self.peer, segment.segment_id)

    def block(self, index: int, data: bytes) -> Request:
        return Request(Opcode.WRITE, data, self.target, index * BLOCK, len(data))

    def transfer(self, index: int, data: bytes) -> TransferRequest:
        return TransferRequest(
            opcode=Opcode.WRITE,
            local=data,
            peer=self.peer,
            remote_segment=self.segment,
            remote_offset=index * BLOCK,
            length=len(data),
        )

    def settle(self, batch: int, tasks: int, timeout: float = 10.0) -> tuple[TaskState, ...]:
        """Release every landed write until ``tasks`` tasks ended (bounded)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            states = self.tx.batch_status(batch)
            if sum(s.status is not TaskStatus.PENDING for s in states) >= tasks:
                return states
            with contextlib.suppress(TimeoutError):  # nothing landed yet
                self.rx.release(self.rx.next_landed(0.05))
        raise AssertionError(f"batch {batch}: fewer than {tasks} tasks ended")

    def close(self) -> None:
        self.tx.close()
        self.rx.close()


@pytest.fixture
def pair() -> Iterator[Pair]:
    p = Pair(slots=2)
    try:
        yield p
    finally:
        p.close()


def test_a_submit_into_a_batch_is_all_or_nothing_within_its_capacity(pair: Pair) -> None:
    batch = pair.tx.allocate_batch(3)
    blocks = [os.urandom(BLOCK) for _ in range(4)]
    assert pair.tx.submit_transfer(batch, [pair.block(0, blocks[0]), pair.block(1, blocks[1])]) == (
        0,
        1,
    )
    with pytest.raises(TooManyRequests):  # two more would make four of three: nothing published
        pair.tx.submit_transfer(batch, [pair.block(2, blocks[2]), pair.block(3, blocks[3])])
    assert pair.tx.submit_transfer(batch, [pair.block(2, blocks[2])]) == (2,)
    states = pair.settle(batch, 3)
    assert [(s.status, s.transferred_bytes) for s in states] == [(TaskStatus.COMPLETED, BLOCK)] * 3
    assert bytes(pair.memory[: 3 * BLOCK]) == b"".join(blocks[:3])
    assert bytes(pair.memory[3 * BLOCK : 4 * BLOCK]) == bytes(BLOCK)  # the refused one: never
    assert pair.tx.transfer_status(batch, 1).status is TaskStatus.COMPLETED  # still readable


def test_task_statuses_are_per_batch_and_task_and_typed_when_unknown(pair: Pair) -> None:
    first, second = pair.tx.allocate_batch(2), pair.tx.allocate_batch(2)
    pair.tx.submit_transfer(first, [pair.block(0, os.urandom(BLOCK))])
    pair.tx.submit_transfer(second, [pair.block(1, os.urandom(BLOCK))])
    pair.settle(first, 1)
    pair.settle(second, 1)
    assert pair.tx.transfer_status(second, 0).status is TaskStatus.COMPLETED
    with pytest.raises(InvalidEntry):
        pair.tx.transfer_status(first, 1)  # no such task in that batch
    with pytest.raises(InvalidEntry):
        pair.tx.submit_transfer(first + second + 1, [pair.block(2, bytes(BLOCK))])
    with pytest.raises(InvalidEntry):  # a segment handle never opened
        pair.tx.submit_transfer(first, [Request(Opcode.WRITE, bytes(8), 999, 0, 8)])
    with pytest.raises(InvalidArgument):
        pair.tx.allocate_batch(0)
    assert len(pair.tx.batch_status(first)) == 1  # the refused submits published nothing


def test_a_freed_batch_answers_a_typed_error_and_its_work_runs_on() -> None:
    """Free while a task still waits for credit: the id is gone at once; the work still runs to
    its end (a handle never lies) and the receiver sees it land."""
    p = Pair(slots=1)
    try:
        batch = p.tx.allocate_batch(2)
        blocks = [os.urandom(BLOCK), os.urandom(BLOCK)]
        p.tx.submit_transfer(batch, [p.block(0, blocks[0]), p.block(1, blocks[1])])
        first = p.rx.next_landed(10)  # the one slot: the second task waits for credit
        waiting = p.tx.transfer_status(batch, 1)
        assert waiting.status is TaskStatus.PENDING
        assert waiting.backpressure is not None
        assert waiting.backpressure.source is BackpressureSource.RECEIVER_CREDIT
        p.tx.free_batch(batch)
        with pytest.raises(InvalidEntry):
            p.tx.transfer_status(batch, 0)
        with pytest.raises(InvalidEntry):
            p.tx.free_batch(batch)
        p.rx.release(first)  # credit back: the freed batch's task runs on and lands
        second = p.rx.next_landed(10)
        assert (second.offset, bytes(p.memory[BLOCK : 2 * BLOCK])) == (BLOCK, blocks[1])
        p.rx.release(second)
        again = p.tx.allocate_batch(1)
        assert again != batch  # ids are never reused
    finally:
        p.close()


def test_cancel_of_a_queued_task_and_the_handle_api_beside_it(pair: Pair) -> None:
    batch = pair.tx.allocate_batch(4)
    blocks = [os.urandom(BLOCK) for _ in range(3)]
    pair.tx.submit_transfer(batch, [pair.block(i, b) for i, b in enumerate(blocks)])
    landed = [pair.rx.next_landed(10), pair.rx.next_landed(10)]  # two slots: the third waits
    assert pair.tx.cancel_transfer(batch, 2) is True
    assert pair.tx.cancel_transfer(batch, 2) is True  # idempotent
    for event in landed:
        pair.rx.release(event)
    states = pair.settle(batch, 3)
    assert [s.status for s in states] == [TaskStatus.COMPLETED] * 2 + [TaskStatus.CANCELED]
    # the handle API beside the batch API, on the same engine and queue
    handle = pair.tx.submit([pair.transfer(3, bytes(BLOCK))])
    pair.rx.release(pair.rx.next_landed(10))
    assert handle.wait(10).status is TaskStatus.COMPLETED
