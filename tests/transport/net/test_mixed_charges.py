"""Writes of different sizes from one sender under grant-ahead
(docs/credit_protocol.md#mixed-charges).

A version-2 receiver grants in units of the sender's level over the gcd of its amounts. Before
7 December 2026 a level of a one-block and a two-block write, ``(3 blocks, 2, 2)``, had the
whole level as its unit, more than a two-block capacity could hold: the key was never granted
ahead and the second write waited for good (every case below hung). The sender now states its
level in whole charges of its first waiting write, so the unit is always a write it can send.
"""

from __future__ import annotations

import os

import pytest
from net_helpers import sync_pair, write_request
from tent_transport.config import load_engine_config

from tent_sched import TaskStatus

BLOCK = 64 << 10


@pytest.mark.parametrize(
    ("blocks", "slice_blocks", "capacity_blocks"),
    [
        ((1, 2), 2, 2),  # the one-block write in flight, the two-block one waits
        ((2, 1, 1), 2, 2),  # the two-block write first: the activation's block cannot carry it
        ((3, 4, 5, 6, 7), 4, 8),  # transfers sliced into 4-block writes and their remainders
    ],
)
def test_a_sender_with_writes_of_different_sizes_gets_all_of_them_through(
    blocks: tuple[int, ...], slice_blocks: int, capacity_blocks: int
) -> None:
    config = load_engine_config(
        {
            "enable_runtime_queue": True,
            "dispatch": {"slice_bytes": slice_blocks * BLOCK},
            "receiver_credit": {
                "enabled": True,
                "mode": "required",
                "capacity": {
                    "data_bytes": capacity_blocks * BLOCK,
                    "request_slots": 8,
                    "consumer_slots": 8,
                },
            },
        }
    )
    rx, tx, peer = sync_pair(config)
    try:
        memory = bytearray(sum(blocks) * BLOCK)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, len(memory))
        tx.wait_regions(peer, lambda d: bool(d.regions))
        data = [os.urandom(n * BLOCK) for n in blocks]
        offsets = [sum(blocks[:i]) * BLOCK for i in range(len(blocks))]
        handles = [
            tx.submit_nowait([write_request(peer, segment.segment_id, offset, chunk)])
            for offset, chunk in zip(offsets, data, strict=True)
        ]
        for _ in blocks:  # the consumer releases each transfer as it lands
            rx.release(rx.next_landed(10))
        assert [h.result(10).status for h in handles] == [TaskStatus.COMPLETED] * len(blocks)
        assert bytes(memory) == b"".join(data)
    finally:
        tx.close()
        rx.close()
