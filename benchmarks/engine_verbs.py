"""The engine over soft verbs against the engine over TCP, same workload, same run; one JSON.

Two engines in one process (a sender, a receiver under required credit: an 8-slot receiver,
lease batch 2, release on landing, so credit cycles), ``--blocks`` 4 MiB writes, repeated
``--reps`` times interleaving the devices. Reports MB/s per device and the ratio verbs / TCP.
Usage: ``python benchmarks/engine_verbs.py [--blocks 32] [--reps 3]``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import click
from tent_transport.config import load_engine_config
from tent_transport.control import PskIdentity
from tent_transport.devices import Opcode
from tent_transport.dispatch import TransferRequest
from tent_transport.engine import Engine, EngineOptions

BLOCK = 4 << 20
KEY = b"bench-shared-key-0123456789abcdef"


def _config() -> dict[str, object]:
    return {
        "enable_runtime_queue": True,
        "receiver_credit": {
            "enabled": True,
            "mode": "required",
            "capacity": {
                "data_bytes": 8 * BLOCK,
                "request_slots": 8,
                "staging_slots": 8,
                "consumer_slots": 8,
            },
            "grant": {
                "initial_grant": {
                    "data_bytes": 2 * BLOCK,
                    "request_slots": 2,
                    "consumer_slots": 2,
                }
            },
        },
    }


async def _run(device: str, blocks: int) -> float:
    config = load_engine_config(_config())
    rx = Engine(
        config,
        EngineOptions(
            peer_id=2,
            identity=PskIdentity(local_peer=2, keys={1: KEY}),
            device=device,
            release_on_landing=True,
        ),
    )
    tx = Engine(
        config,
        EngineOptions(peer_id=1, identity=PskIdentity(local_peer=1, keys={2: KEY}), device=device),
    )
    host, port = await rx.start()
    await tx.start()
    try:
        peer = await tx.connect(host, port)
        memory = rx.allocate(8 * BLOCK)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, 8 * BLOCK)
        await tx.wait_regions(peer, lambda d: bool(d.regions))
        data = os.urandom(BLOCK)
        for _ in range(200):  # the rkeys (verbs) or data connection (TCP) are in place
            if tx.rails[0].ready(peer):
                break
            await asyncio.sleep(0.005)

        async def drain() -> None:
            for _ in range(blocks):
                await rx.landed()

        consumer = asyncio.ensure_future(drain())
        start = time.perf_counter()
        handles = [
            tx.submit(
                [
                    TransferRequest(
                        opcode=Opcode.WRITE,
                        local=data,
                        peer=peer,
                        remote_segment=segment.segment_id,
                        remote_offset=(i % 8) * BLOCK,
                        length=BLOCK,
                    )
                ]
            )
            for i in range(blocks)
        ]
        for handle in handles:
            await handle.wait(60)
        await asyncio.wait_for(consumer, 60)
        elapsed = time.perf_counter() - start
        return blocks * BLOCK / elapsed / 1e6
    finally:
        await tx.close()
        await rx.close()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--blocks",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="4 MiB writes per run.",
)
@click.option(
    "--reps",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Interleaved runs per device.",
)
def main(blocks: int, reps: int) -> None:
    """The engine over soft verbs against the engine over TCP, same load; prints JSON."""
    fabric = tempfile.mkdtemp(
        prefix="tent-sv-bench-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None
    )
    os.environ["TENT_SOFTVERBS_FABRIC"] = fabric
    rates: dict[str, list[float]] = {"tcp": [], "softverbs": []}
    try:
        for _ in range(reps):
            for device, series in rates.items():  # interleaved: both see the same load
                series.append(asyncio.run(_run(device, blocks)))
    finally:
        shutil.rmtree(fabric, ignore_errors=True)
    medians = {d: statistics.median(r) for d, r in rates.items()}
    print(
        json.dumps(
            {
                "block_bytes": BLOCK,
                "blocks": blocks,
                "reps": reps,
                "mb_per_s": rates,
                "median_mb_per_s": medians,
                "ratio_softverbs_over_tcp": medians["softverbs"] / medians["tcp"],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
