"""Real processes on loopback: integrity end to end in every credit mode, faults, liars."""

from __future__ import annotations

import time
from typing import Any

import pytest
from procs import Proc, block_bytes, credit_config, receiver, sender
from tent_transport.devices.tcp import checksum

BLOCK = 256 << 10


def _blocks(n: int, *, seed0: int = 0, base: int = 0) -> list[list[int]]:
    return [[base + i * BLOCK, BLOCK, seed0 + i] for i in range(n)]


def _start_receiver(spec: dict[str, Any]) -> tuple[Proc, tuple[str, int], int]:
    proc = Proc(receiver, spec)
    kind, address, _rails, segment = proc.recv()
    assert kind == "ready"
    return proc, tuple(address), segment


def _run_sender(spec: dict[str, Any], timeout: float = 90) -> dict[str, Any]:
    proc = Proc(sender, spec)
    try:
        kind, report = proc.recv(timeout)
        assert kind == "done"
        return report
    finally:
        proc.stop()


def _verify(landed: list[list[int]], blocks: list[list[int]], sender_id: int) -> None:
    expected = {offset: checksum(block_bytes(seed, length)) for offset, length, seed in blocks}
    seen = {offset: crc for peer, offset, _length, crc, _t in landed if peer == sender_id}
    assert seen == expected  # every block landed exactly where it was sent, bytes intact


@pytest.mark.parametrize(
    ("sender_mode", "receiver_mode", "outcome"),
    [
        ("disabled", "disabled", "COMPLETED"),
        ("optional", "disabled", "COMPLETED"),  # an old peer: the bounded legacy window
        ("required", "required", "COMPLETED"),
        ("required", "disabled", "FAILED"),  # no credit, no dispatch: an explicit failure
    ],
    ids=["disabled", "optional-old-peer", "required", "required-old-peer"],
)
def test_two_processes_move_verified_bytes_in_each_credit_mode(
    sender_mode: str, receiver_mode: str, outcome: str
) -> None:
    blocks = _blocks(24)
    rx, address, segment = _start_receiver(
        {
            "config": credit_config(receiver_mode, slots=4, block=BLOCK),
            "senders": [1],
            "segment_bytes": 24 * BLOCK,
            "regions": {1: [0, 24 * BLOCK]},
            "release": "delay",
            "release_delay_s": 0.001,
        }
    )
    try:
        report = _run_sender(
            {
                "config": credit_config(sender_mode, block=BLOCK),
                "peer_id": 1,
                "receiver": address,
                "segment": segment,
                "phases": [{"blocks": blocks}],
            }
        )
        statuses = {r["status"] for r in report["phases"][0]["results"]}
        assert statuses == {outcome}
        time.sleep(0.05)  # the last delayed releases
        stats = rx.ask("stats")[1]
        assert stats["refused"] == 0 and stats["quarantined"] == []
        if outcome == "COMPLETED":
            _verify(stats["landed"], blocks, 1)
        else:
            assert stats["landed"] == []
            assert report["endpoint"]["state"] == "FAILED"
        if receiver_mode != "disabled":
            assert set(stats["outstanding"].values()) == {0}  # every credit came back
            assert stats["violations"] == 0
        if sender_mode == "optional":
            assert report["endpoint"]["state"] == "LEGACY"
    finally:
        rx.stop()
