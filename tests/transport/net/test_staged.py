"""The staged plan: staging pool, inner transfers on the reserved staging class, no deadlock."""

from __future__ import annotations

import os
import time

import pytest
from net_helpers import connect_exposed, sync_pair, write_request
from procs import KEY
from tent_transport.config import load_engine_config
from tent_transport.control import PskIdentity
from tent_transport.dispatch import TransferPlan, TransferRequest
from tent_transport.engine import EngineOptions, SyncEngine
from tent_transport.errors import LocalProtocolError

from tent_credit import CreditResource
from tent_sched import TaskStatus

BLOCK = 64 << 10
R = CreditResource


def _config(reserve_blocks: int) -> dict[str, object]:
    reserve = (
        {
            "data_bytes": reserve_blocks * BLOCK,
            "request_slots": reserve_blocks,
            "consumer_slots": reserve_blocks,
        }
        if reserve_blocks
        else {}
    )
    return {
        "enable_runtime_queue": True,
        "dispatch": {"slice_bytes": BLOCK},
        "receiver_credit": {
            "enabled": True,
            "mode": "required",
            "capacity": {
                "data_bytes": 4 * BLOCK,
                "request_slots": 4,
                "staging_slots": 4,
                "consumer_slots": 4,
            },
            "staging_reserve": reserve,
            "grant": {
                "initial_grant": {
                    "data_bytes": 2 * BLOCK,
                    "request_slots": 2,
                    "consumer_slots": 2,
                    "staging_slots": 2,
                }
            },
        },
    }


def _pair(reserve_blocks: int) -> tuple[SyncEngine, SyncEngine, int]:
    config = load_engine_config(_config(reserve_blocks))
    return sync_pair(config, staging_slots=4, staging_slot_bytes=BLOCK)


def _staged(peer: int, segment: int, offset: int, data: bytes) -> TransferRequest:
    return write_request(peer, segment, offset, data, plan=TransferPlan.STAGED)


def test_inner_transfers_complete_while_the_user_class_is_full() -> None:
    rx, tx, peer = _pair(reserve_blocks=1)
    try:
        memory = bytearray(8 * BLOCK)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, len(memory))
        tx.wait_regions(peer, lambda d: bool(d.regions))
        blocks = [os.urandom(BLOCK) for _ in range(6)]
        handles = [
            tx.submit_nowait([_staged(peer, segment.segment_id, i * BLOCK, b)])
            for i, b in enumerate(blocks)
        ]
        # the consumer holds what lands: the user class (capacity - reserve = 3 blocks) fills
        landed = [rx.next_landed(10) for _ in range(3)]
        allocator = rx.engine.credit.allocator  # type: ignore[union-attr]
        user = allocator.statistics().user_outstanding[R.DATA_BYTES]
        assert user == 3 * BLOCK == allocator.config.limit_for(R.DATA_BYTES, _user())
        # ... and yet their inner transfers ran on the staging class and the outer writes ended
        assert [h.result(10).status for h in handles[:3]] == [TaskStatus.COMPLETED] * 3
        staging = rx.engine.receiver.staging
        assert staging is not None and staging.moved == 3
        assert handles[3].status().pending  # later writes wait for user credit, not a deadlock
        for event in landed:
            rx.release(event)
        for _ in range(3):
            rx.release(rx.next_landed(10))
        for i, (handle, block) in enumerate(zip(handles, blocks, strict=True)):
            assert handle.result(10).status is TaskStatus.COMPLETED
            assert memory[i * BLOCK : (i + 1) * BLOCK] == block  # moved to its target
        time.sleep(0.05)
        outer = allocator.key_totals(1, 0, 1)
        assert set(outer.outstanding.values()) == {0}  # every outer reservation came back
        assert outer.landed == outer.released
    finally:
        tx.close()
        rx.close()


def test_a_staged_write_larger_than_a_slice_is_refused_at_submit() -> None:
    rx, tx, peer = _pair(reserve_blocks=1)
    try:
        with pytest.raises(LocalProtocolError):
            tx.submit([_staged(peer, 1, 0, bytes(2 * BLOCK))])
    finally:
        tx.close()
        rx.close()


def _user():  # type: ignore[no-untyped-def]
    from tent_credit import AllocationClass

    return AllocationClass.USER


def test_a_mixed_submit_without_credit_bypasses_the_queue_as_the_seed_says() -> None:
    # Deadline Scheduling "What Enters the Queue": a submit with a staged user owner bypasses the
    # queue as a whole (credit off: nothing charges STAGING_SLOTS, the write lands directly)
    config = load_engine_config({"enable_runtime_queue": True, "dispatch": {"slice_bytes": BLOCK}})
    rx = SyncEngine(
        config, EngineOptions(peer_id=2, identity=PskIdentity(local_peer=2, keys={1: KEY}))
    )
    tx = SyncEngine(
        config, EngineOptions(peer_id=1, identity=PskIdentity(local_peer=1, keys={2: KEY}))
    )
    try:
        peer, memory, segment = connect_exposed(rx, tx, 2 * BLOCK)
        direct, staged = os.urandom(BLOCK), os.urandom(BLOCK)
        direct_request = write_request(peer, segment.segment_id, 0, direct)
        handle = tx.submit([direct_request, _staged(peer, segment.segment_id, BLOCK, staged)])
        assert handle.result(10).status is TaskStatus.COMPLETED
        assert memory == direct + staged
        assert tx.engine.core.statistics().bypassed_total == 2
    finally:
        tx.close()
        rx.close()
