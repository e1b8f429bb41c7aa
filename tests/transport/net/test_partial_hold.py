"""The held partial grant at the engine (docs/credit_protocol.md#partial-hold): a consumer that
keeps what lands until more arrives is served when the receiver's hold runs out."""

from __future__ import annotations

import os

import pytest
from net_helpers import sync_pair, write_request
from tent_transport.config import load_engine_config
from tent_transport.engine import SyncEngine

from tent_sched import TaskStatus

BLOCK = 64 << 10


def _pair(hold_ns: int) -> tuple[SyncEngine, SyncEngine, int]:
    config = load_engine_config(
        {
            "enable_runtime_queue": True,
            "dispatch": {"slice_bytes": BLOCK},
            "receiver_credit": {
                "enabled": True,
                "mode": "required",
                # three blocks in all: a sender with four waits at a hold of three, capped,
                # so its top-ups come two at a time (its quantum)
                "capacity": {"data_bytes": 3 * BLOCK, "request_slots": 3, "consumer_slots": 3},
                "partial_hold_ns": hold_ns,
            },
        }
    )
    return sync_pair(config)


@pytest.mark.parametrize("hold_ns", [0, 5_000_000])
def test_a_consumer_that_keeps_its_data_gets_the_fourth_block(hold_ns: int) -> None:
    # The consumer keeps the first three blocks until the fourth lands and frees one of them
    # meanwhile: one unit free, below the key's quantum of two, and nothing of the key in
    # flight. Held, only the receiver's timer grants that unit; without the timer the fourth
    # block never comes (the test's 10 s wait fails). Not held: granted at once.
    rx, tx, peer = _pair(hold_ns)
    try:
        memory = bytearray(4 * BLOCK)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, len(memory))
        tx.wait_regions(peer, lambda d: bool(d.regions))
        blocks = [os.urandom(BLOCK) for _ in range(4)]
        handles = [
            tx.submit_nowait([write_request(peer, segment.segment_id, i * BLOCK, b)])
            for i, b in enumerate(blocks)
        ]
        kept = [rx.next_landed(10) for _ in range(3)]
        rx.release(kept[0])
        kept.append(rx.next_landed(10))  # the fourth: granted by the timer when held
        for event in kept[1:]:
            rx.release(event)
        assert [h.result(10).status for h in handles] == [TaskStatus.COMPLETED] * 4
        assert bytes(memory) == b"".join(blocks)
        credit = rx.engine.credit
        assert credit is not None and not credit.partial_waiting
    finally:
        tx.close()
        rx.close()
