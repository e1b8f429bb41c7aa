"""Writes of different sizes from one sender under grant-ahead
(docs/credit_protocol.md#mixed-charges).

A version-2 receiver grants in units of the sender's level over the gcd of its amounts. Before
7 December 2026 a level of a one-block and a two-block write, ``(3 blocks, 2, 2)``, had the
whole level as its unit, more than a two-block capacity could hold: the key was never granted
ahead and the second write waited for good (every case below hung). The sender now states its
level in whole charges of its first waiting write, so the unit is always a write it can send.

Two senders that each held a fragment of their first write's charge (credit below it) waited
for each other (docs/credit_protocol.md#uncovered-credit): a sender now returns such credit.
"""

from __future__ import annotations

import os

import pytest
from net_helpers import sync_pair, write_request
from procs import identity
from tent_transport.config import load_engine_config
from tent_transport.engine import EngineOptions, SyncEngine

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


def test_two_senders_holding_part_of_a_write_each_do_not_wait_for_each_other() -> None:
    # Hold and wait: each sender's activation grant (one block) is half of its two-block
    # write's charge, and the two grants fill the receiver's two blocks. Before report rule 5
    # nothing was free for either other half and both writes waited for good.
    block = {"data_bytes": BLOCK, "request_slots": 1, "consumer_slots": 1}
    config = load_engine_config(
        {
            "enable_runtime_queue": True,
            "dispatch": {"slice_bytes": 2 * BLOCK},
            "receiver_credit": {
                "enabled": True,
                "mode": "required",
                "capacity": {"data_bytes": 2 * BLOCK, "request_slots": 2, "consumer_slots": 2},
                "grant": {"initial_grant": block, "min_grant": block},
            },
        }
    )
    senders = (10, 11)
    rx = SyncEngine(config, EngineOptions(peer_id=2, identity=identity(2, list(senders))))
    txs: list[SyncEngine] = []
    try:
        host, port = rx.start()
        pairs = []
        for p in senders:
            tx = SyncEngine(config, EngineOptions(peer_id=p, identity=identity(p, [2])))
            txs.append(tx)
            tx.start()
            pairs.append((tx, tx.connect(host, port)))
        memory = bytearray(len(senders) * 2 * BLOCK)
        segment = rx.register(memory)
        for p in senders:
            rx.expose(p, segment.segment_id, 0, len(memory))
        data = [os.urandom(2 * BLOCK) for _ in senders]
        handles = []
        for i, (tx, peer) in enumerate(pairs):
            tx.wait_regions(peer, lambda d: bool(d.regions))
            request = write_request(peer, segment.segment_id, i * 2 * BLOCK, data[i])
            handles.append(tx.submit_nowait([request]))
        for _ in senders:
            rx.release(rx.next_landed(10))
        assert [h.result(10).status for h in handles] == [TaskStatus.COMPLETED] * len(senders)
        assert bytes(memory) == b"".join(data)
    finally:
        for tx in txs:
            tx.close()
        rx.close()
