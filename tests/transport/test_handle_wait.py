"""``TransferHandle.wait``: an ended handle answers at once, a pending one waits for its end or
its timeout (PENDING, nothing handed back), and ``result`` raises only on a pending or failed
end."""

from __future__ import annotations

import asyncio

import pytest
from tent_transport.dispatch import EndReason, TransferEvent, TransferPhase, TransferState
from tent_transport.engine import TransferHandle
from tent_transport.errors import TransferFailed

from tent_sched import TaskStatus


def _event(transfer_id: int, status: TaskStatus = TaskStatus.COMPLETED) -> TransferEvent:
    reason = EndReason.COMPLETED if status is TaskStatus.COMPLETED else EndReason.SLICE_FAILED
    return TransferEvent(
        transfer_id=transfer_id,
        status=status,
        reason=reason,
        detail="",
        peer=2,
        length=4096,
        moved_bytes=4096 if status is TaskStatus.COMPLETED else 0,
        deadline_ns=0,
        priority=0,
        submit_ns=0,
        end_ns=1,
    )


def _handle(*ids: int) -> TransferHandle:
    def lookup(tid: int) -> TransferState:
        return TransferState(
            transfer_id=tid,
            status=TaskStatus.PENDING,
            phase=TransferPhase.DISPATCHED,
            backpressure=None,
            slices_waiting=0,
            slices_posted=1,
            slices_ended=0,
            moved_bytes=0,
        )

    return TransferHandle(
        ids, lookup=lookup, cancel=lambda _ids: False, peers_connected=lambda: True
    )


def test_an_ended_handle_answers_without_waiting() -> None:
    async def run() -> None:
        handle = _handle(1)
        handle._ended(_event(1))
        ran: list[str] = []
        asyncio.get_running_loop().call_soon(ran.append, "loop")
        state = await handle.wait(5.0)
        assert (await handle.result(5.0)).status is TaskStatus.COMPLETED
        # neither call gave the loop a turn: no task, no timer, no round trip per transfer
        assert ran == []
        assert state.status is TaskStatus.COMPLETED and state.moved_bytes == 4096

    asyncio.run(run())


def test_a_pending_handle_times_out_pending_and_result_raises() -> None:
    async def run() -> None:
        handle = _handle(1, 2)
        handle._ended(_event(1))
        state = await handle.wait(0.01)
        assert state.pending and state.ended == 1 and state.in_flight_slices == 1
        with pytest.raises(TimeoutError, match="1 transfers still pending"):
            await handle.result(0.01)
        assert not handle.done  # a timeout hands nothing back

    asyncio.run(run())


def test_a_pending_handle_wakes_when_its_last_transfer_ends() -> None:
    async def run() -> None:
        handle = _handle(1, 2)
        loop = asyncio.get_running_loop()
        loop.call_soon(handle._ended, _event(1))
        loop.call_soon(handle._ended, _event(2, TaskStatus.FAILED))
        state = await handle.wait(30)
        assert state.status is TaskStatus.FAILED and state.ended == 2
        with pytest.raises(TransferFailed):
            await handle.result(None)

    asyncio.run(run())
