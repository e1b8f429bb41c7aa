"""Issue 27 item 1 end to end: two engines on loopback. A sender that writes tiny credited
writes, each a transfer of its own within its byte grant, is refused at the transfer past its
slot credit and quarantined, and what the receiver holds for it never exceeds its slots; an
honest transfer cut into slices is announced once, whole."""

from __future__ import annotations

import os
import time
from typing import Any

from net_helpers import sync_pair
from procs import credit_config
from tent_transport.config import load_engine_config
from tent_transport.devices import Opcode, SliceRequest, SliceStatus, WriteLease
from tent_transport.dispatch import TransferRequest
from tent_transport.engine import SyncEngine

from tent_credit import CreditResource
from tent_sched import TaskStatus

BLOCK = 64 << 10
SLOTS = 4


def _pair(**dispatch: Any) -> tuple[SyncEngine, SyncEngine, int]:
    spec = credit_config("required", slots=SLOTS, block=BLOCK, batch=SLOTS)
    spec["dispatch"] = {"slice_bytes": BLOCK // 4, **dispatch}
    config = load_engine_config(spec)
    return sync_pair(config)


def test_an_honest_transfer_in_slices_is_announced_once_whole() -> None:
    rx, tx, peer = _pair()
    try:
        memory = bytearray(2 * BLOCK)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, len(memory))
        tx.wait_regions(peer, lambda d: bool(d.regions))
        data = os.urandom(BLOCK)  # four slices of BLOCK / 4
        request = TransferRequest(
            opcode=Opcode.WRITE, local=data, peer=peer, remote_segment=segment.segment_id,
            remote_offset=BLOCK, length=BLOCK,
        )  # fmt: skip
        assert tx.submit([request]).result(30).status is TaskStatus.COMPLETED
        event = rx.next_landed(10)
        assert (event.offset, event.length) == (BLOCK, BLOCK)  # one notification, whole
        assert memory[BLOCK:] == data
        assert rx._call(rx.engine.receiver.pending_landed) == 0
        assert rx._call(lambda: rx.engine.receiver.statistics().transfers_held) == 1
        assert rx.release(event)
        assert rx._call(lambda: rx.engine.receiver.statistics().transfers_held) == 0
    finally:
        tx.close()
        rx.close()


def test_tiny_writes_past_the_slot_credit_are_refused_and_the_sender_quarantined() -> None:
    rx, tx, peer = _pair()
    try:
        memory = bytearray(BLOCK)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, len(memory))
        tx.wait_regions(peer, lambda d: bool(d.regions))
        endpoint = tx.engine._links[peer].endpoint
        assert endpoint is not None
        rail = tx.engine.rails[0]

        def ready() -> bool:  # the initial grant (SLOTS blocks) and the data connection
            assert endpoint is not None
            granted = endpoint.available().get(CreditResource.REQUEST_SLOTS, 0) >= SLOTS
            return granted and endpoint.key is not None and rail.ready(peer)

        for _ in range(1000):  # bounded
            if tx._call(ready):
                break
            time.sleep(0.01)
        assert endpoint.key is not None
        lease = WriteLease(
            session=endpoint.key.receiver_session.value, epoch=endpoint.epoch, qos_class=0,
            charge=((1, 1),),  # one byte of DATA_BYTES, no slot: a "non-last slice"
        )  # fmt: skip
        done: list[Any] = []
        poll = rail.poll

        def tee(max_entries: int, now_ns: int) -> list[Any]:
            out = poll(max_entries, now_ns)
            done.extend(c for c in out if c.wr_id >= 1 << 40)
            return out

        rail.poll = tee  # type: ignore[method-assign]
        attempts = 4 * SLOTS
        tiny = [
            SliceRequest(
                wr_id=(1 << 40) + i,
                opcode=Opcode.WRITE,
                peer=peer,
                local=memoryview(b"\xab"),
                remote_segment=segment.segment_id,
                remote_offset=i,
                length=1,
                lease=lease,
                write_id=100_000 + i,
                slice_index=0,
            )
            for i in range(attempts)
        ]
        tx._call(lambda: rail.post(tiny, 0))
        for _ in range(1000):  # bounded
            if len(done) == attempts:
                break
            time.sleep(0.01)
        statuses = [c.status for c in sorted(done, key=lambda c: c.wr_id)]
        # the first SLOTS were admitted, none after (acknowledgements may be lost when the
        # refused connection is reset, so the sender's statuses say no more than that)
        assert SliceStatus.SUCCESS not in statuses[SLOTS:]
        assert set(statuses) <= {
            SliceStatus.SUCCESS,
            SliceStatus.WRITE_REFUSED,
            SliceStatus.FLUSHED,
        }
        assert rx._call(rx.engine.credit.allocator.statistics).writes_admitted == SLOTS
        for _ in range(500):  # bounded: the quarantine retires its session (a task)
            stats = rx._call(rx.engine.receiver.statistics)
            if stats.transfers_held == 0:
                break
            time.sleep(0.01)
        assert stats.quarantined == (1,) and stats.refused == 1
        assert stats.transfers_held == 0  # its open transfers were dropped with its session
        assert rx._call(rx.engine.receiver.pending_landed) == 0  # none was whole
    finally:
        tx.close()
        rx.close()
