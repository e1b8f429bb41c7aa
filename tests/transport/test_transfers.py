"""Issue 27 item 1: the receiver holds state per transfer, bounded by its sender's slot credit.

A credited write charging only DATA_BYTES (a non-last slice) used to be held, and announced, on
its own: a peer with 8 consumer slots made the receiver hold hundreds of thousands of tiny
writes. Now slices add up to their transfer, a transfer is announced once, when whole, and a
write opening a transfer past the sender's slot credit is refused (``_transfers``).
"""

from __future__ import annotations

import asyncio
import types

import pytest
from tent_transport.devices import first_write_id
from tent_transport.devices.tcp import Flags, Request, WireOpcode
from tent_transport.engine._receiving import ReceiverSide
from tent_transport.engine._transfers import FAILED_REMEMBERED
from tent_transport.segments import SegmentTable

from tent_credit import (
    AllocatorConfig,
    CreditReceiver,
    CreditResource,
    SessionId,
    TransferBook,
)

R = CreditResource
PEER, SESSION = 4, 11
SLOTS = 2
GRANT = {R.DATA_BYTES: 1 << 20, R.REQUEST_SLOTS: SLOTS, R.CONSUMER_SLOTS: SLOTS}


def _credit() -> tuple[CreditReceiver, int]:
    config = AllocatorConfig(
        capacity=GRANT, control_slots=2, max_grant=GRANT, max_keys=4, retry_after_us=100
    )
    credit = CreditReceiver(config, SessionId(99))
    epoch = credit.accept(PEER, 0).epoch
    credit.allocator.grant(PEER, 0, GRANT)
    return credit, epoch


def _side() -> tuple[ReceiverSide, CreditReceiver, int, list[str]]:
    credit, epoch = _credit()
    side = ReceiverSide(credit=credit, segments=SegmentTable())
    closed: list[str] = []
    ps = types.SimpleNamespace(
        session=SESSION,
        epoch=epoch,
        endpoint=types.SimpleNamespace(version=1),
        connection=types.SimpleNamespace(close=closed.append),
    )
    side.control = types.SimpleNamespace(  # type: ignore[assignment]
        session_of=lambda peer: ps, flush=lambda: None
    )
    return side, credit, epoch, closed


def _slice(
    epoch: int, write_id: int, index: int, offset: int, length: int, *, last: bool
) -> Request:
    slots = 1 if last else 0
    return Request(
        opcode=WireOpcode.WRITE, flags=Flags.CREDITED, qos_class=0, write_id=write_id,
        request=write_id, segment=1, offset=offset, length=length, session=SESSION,
        lease_session=99, epoch=epoch, checksum=0, charge=(length, slots, 0, slots),
        slice_index=index,
    )  # fmt: skip


def _land(side: ReceiverSide, request: Request) -> str | None:
    reason = side.admit(PEER, SESSION, request)
    if reason is None:
        side.landed(PEER, SESSION, request)
    return reason


def test_the_first_write_id_of_a_transfer_follows_the_write_id_cycle() -> None:
    assert first_write_id(10, 0) == 10 and first_write_id(10, 3) == 7
    assert first_write_id(1, 1) == 2**32 - 1  # the cycle skips 0
    assert first_write_id(2, 3) == 2**32 - 2


def test_tiny_slot_less_writes_cannot_open_more_transfers_than_the_sender_holds_slots() -> None:
    """The attack: every tiny write a transfer of its own, far within the byte grant."""
    side, credit, epoch, _ = _side()
    outcomes = [_land(side, _slice(epoch, w, 0, w, 1, last=False)) for w in range(1, 6)]
    assert outcomes[:SLOTS] == [None] * SLOTS
    assert outcomes[SLOTS] == "a write opening more transfers than the sender holds slots for"
    assert side.statistics().transfers_held == SLOTS  # was one per write
    assert side.pending_landed() == 0  # none is whole: nothing announced
    assert credit.allocator.key_totals(PEER, 0, epoch).landed[R.DATA_BYTES] == SLOTS
    # refused before admit_write, then quarantined as any write past its credit
    assert credit.allocator.statistics().writes_admitted == SLOTS
    assert credit.allocator.is_quarantined(PEER, 0)


def test_an_honest_transfer_in_slices_is_held_and_announced_once_whatever_their_order() -> None:
    side, credit, epoch, _ = _side()
    size, first = 4096, 7
    slices = [_slice(epoch, first + i, i, i * size, size, last=i == 3) for i in range(4)]
    for request in (slices[3], slices[0], slices[2], slices[1]):  # rails reorder them
        assert _land(side, request) is None
    assert side.pending_landed() == 1
    stats = side.statistics()
    assert (stats.landed, stats.unreleased, stats.transfers_held) == (1, 1, 1)
    event = side._queue[0]
    assert (event.offset, event.length, event.write_id) == (0, 4 * size, first)
    assert side.release(event)
    totals = credit.allocator.key_totals(PEER, 0, epoch)
    assert totals.released == totals.landed  # every slice's charge went back
    assert totals.landed[R.DATA_BYTES] == 4 * size and totals.landed[R.REQUEST_SLOTS] == 1
    assert side.statistics().transfers_held == 0


def test_slot_credit_held_by_honest_transfers_never_refuses_their_slices() -> None:
    """As many transfers in flight as slots, each in many slices: all admitted."""
    side, _, epoch, _ = _side()
    write_id = 1
    for t in range(SLOTS):
        for i in range(8):
            request = _slice(epoch, write_id, i, t * 8192 + i * 1024, 1024, last=i == 7)
            assert side.admit(PEER, SESSION, request) is None
            write_id += 1
    assert side.statistics().transfers_held == SLOTS


def test_a_failed_slice_drops_its_transfer_and_gives_every_charge_back() -> None:
    side, credit, epoch, _ = _side()
    slices = [_slice(epoch, 20 + i, i, i * 512, 512, last=i == 2) for i in range(3)]
    for request in slices:
        assert side.admit(PEER, SESSION, request) is None
    side.landed(PEER, SESSION, slices[0])
    side.integrity_failed(PEER, SESSION, slices[1])
    side.landed(PEER, SESSION, slices[2])  # a late slice of the failed transfer
    assert side.pending_landed() == 0
    totals = credit.allocator.key_totals(PEER, 0, epoch)
    assert totals.released == totals.landed and totals.landed[R.DATA_BYTES] == 3 * 512
    assert side.statistics().transfers_held == 0
    assert FAILED_REMEMBERED >= SLOTS


def test_slices_that_do_not_tile_a_range_are_a_lie() -> None:
    side, credit, epoch, closed = _side()
    gap = [_slice(epoch, 30, 0, 0, 512, last=False), _slice(epoch, 31, 1, 4096, 512, last=True)]
    for request in gap:
        assert _land(side, request) is None
    assert side.pending_landed() == 0  # never announced
    assert side.statistics().quarantined == (PEER,)
    assert closed == ["quarantined: slices that do not tile one range of one segment"]
    totals = credit.allocator.key_totals(PEER, 0, epoch)
    assert totals.released == totals.landed  # and nothing of it stays held


def test_a_retired_session_drops_its_open_transfers() -> None:
    side, credit, epoch, _ = _side()
    half = _slice(epoch, 40, 0, 0, 512, last=False)
    assert _land(side, half) is None
    assert side.statistics().transfers_held == 1
    side.data = []
    asyncio.run(side.retire_session(PEER, SESSION))  # type: ignore[arg-type]
    assert side.statistics().transfers_held == 0
    totals = credit.allocator.key_totals(PEER, 0, epoch)
    assert totals.released == totals.landed


def test_the_book_bounds_by_granted_minus_released_minus_returned_slots() -> None:
    credit, epoch = _credit()
    book = TransferBook(credit.allocator)
    assert book.slot_resources == (R.REQUEST_SLOTS, R.CONSUMER_SLOTS)
    assert book.budget(PEER, 0, epoch) == SLOTS
    for _ in range(SLOTS):
        assert book.may_open(PEER, 0, epoch)
        book.opened(PEER, 0, epoch)
    assert not book.may_open(PEER, 0, epoch)
    assert book.budget(PEER, 0, epoch + 5) == 0  # an epoch never opened
    assert book.budget("x", 0, epoch) == 0  # type: ignore[arg-type]  # never raises
    book.closed(PEER, 0, epoch)
    assert book.may_open(PEER, 0, epoch)
    with pytest.raises(ValueError):
        book.closed(PEER, 1, epoch)  # none held there: a local bug, nothing changes
    assert book.snapshot() == {(PEER, 0, epoch): SLOTS - 1}
