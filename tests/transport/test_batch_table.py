"""The engine's batch table: capacity, task ids, freeing and reclamation, segment handles."""

from __future__ import annotations

import pytest
from tent_transport.devices import Opcode
from tent_transport.dispatch import EndReason, TransferEvent, TransferIntent
from tent_transport.engine import Request
from tent_transport.engine._batches import BatchTable
from tent_transport.errors import InvalidArgument, InvalidEntry, TooManyRequests, UnknownHandle

from tent_sched import TaskStatus


def ended(transfer_id: int) -> TransferEvent:
    return TransferEvent(
        transfer_id=transfer_id,
        status=TaskStatus.COMPLETED,
        reason=EndReason.COMPLETED,
        detail="",
        peer=1,
        length=8,
        moved_bytes=8,
        deadline_ns=0,
        priority=0,
        submit_ns=0,
        end_ns=1,
    )


def test_a_freed_batch_is_reclaimed_when_its_last_task_ends() -> None:
    table = BatchTable()
    batch = table.allocate(3)
    table.check(batch, 3)
    assert table.bind(batch, (10, 11)) == (0, 1)
    with pytest.raises(TooManyRequests):
        table.check(batch, 2)
    table.ended(ended(10))
    table.free(batch)
    assert table.live() == 1  # task 1 still runs
    with pytest.raises(InvalidEntry):
        table.transfer_of(batch, 0)
    table.ended(ended(11))
    assert table.live() == 0
    assert table.allocate(1) == batch + 1


@pytest.mark.parametrize("error", [InvalidEntry, InvalidArgument, UnknownHandle])
def test_a_handle_that_names_nothing_is_caught_as_entry_or_argument(error: type) -> None:
    # TENT's getTransferStatus answers InvalidArgument for such a handle, ours InvalidEntry: both
    table = BatchTable()
    batch = table.allocate(2)
    table.bind(batch, (10,))
    for call in (
        lambda: table.transfer_of(batch, 1),  # never published
        lambda: table.transfer_of(batch + 1, 0),  # never allocated
        lambda: table.check(batch + 1, 1),
    ):
        with pytest.raises(error):
            call()
    table.free(batch)
    with pytest.raises(error):
        table.transfer_of(batch, 0)  # freed
    with pytest.raises(error):
        table.free(batch)


def test_segment_handles_are_stable_per_pair_and_requests_resolve_through_them() -> None:
    table = BatchTable()
    handle = table.open_segment(5, 7)
    assert table.open_segment(5, 7) == handle and table.open_segment(5, 8) != handle
    (request,) = table.resolve([Request(Opcode.WRITE, b"x" * 8, handle, 16, 8, deadline_ns=9)])
    assert (request.peer, request.remote_segment, request.remote_offset, request.deadline_ns) == (
        5,
        7,
        16,
        9,
    )
    with pytest.raises(InvalidEntry):
        table.resolve([Request(Opcode.WRITE, b"x", handle + 5, 0, 1)])
    with pytest.raises(InvalidArgument):
        table.resolve(Request(Opcode.WRITE, b"x", handle, 0, 1))  # type: ignore[arg-type]


def test_a_requests_intent_reaches_its_transfer_whatever_it_is() -> None:
    table = BatchTable()
    handle = table.open_segment(5, 7)
    plain, tagged = table.resolve(
        [
            Request(Opcode.WRITE, b"x", handle, 0, 1),
            Request(Opcode.WRITE, b"x", handle, 1, 1, intent_type=TransferIntent.WEIGHT_LOADING),
        ]
    )
    assert (plain.intent_type, tagged.intent_type) == (
        TransferIntent.UNSPEC,
        TransferIntent.WEIGHT_LOADING,
    )
    (staging,) = table.resolve(
        [Request(Opcode.WRITE, b"x", handle, 0, 1, intent_type=TransferIntent.STAGING_INTERNAL)]
    )  # a label only, as the reference's AllValuesAssignable
    assert staging.intent_type is TransferIntent.STAGING_INTERNAL
    with pytest.raises(InvalidArgument, match="intent_type"):
        Request(Opcode.WRITE, b"x", handle, 0, 1, intent_type=3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "args",
    [
        ("write", b"x", 1, 0, 1),
        (Opcode.WRITE, b"xy", 1, 0, 1),
        (Opcode.WRITE, b"x", 0, 0, 1),
        (Opcode.READ, b"x", 1, 0, 1),
        (Opcode.WRITE, 5, 1, 0, 1),
    ],
)
def test_a_malformed_request_cannot_be_built(args: tuple[object, ...]) -> None:
    with pytest.raises(InvalidArgument):
        Request(*args)  # type: ignore[arg-type]
