"""The sender's plaintext data writer against asyncio's socket transport; prints one JSON document.

Each pair runs the same engine benchmark (:func:`tent_transport.bench.engine_run`: one sender,
one receiver process, 4 MiB writes under credit) twice, in alternating order: once on the
zero-copy transport the engine uses (``devices/tcp/_raw.py``) and once with the data
connections opened by ``loop.create_connection`` (asyncio's transport, fed in 1 MiB chunks, as
the engine did before). The bare ``sendall`` / ``recv_into`` loop runs at the start of every pair
as the baseline. Figures are medians over the pairs; ``per_pair`` keeps each one.

Usage: ``python benchmarks/transport_writer.py [--pairs 8] [--blocks 128]``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from collections.abc import Callable
from typing import Any

import click
from tent_transport import bench
from tent_transport.devices.tcp import _sender

_NAME = "open_raw_connection"  # the opener TcpRail.attach calls for plaintext connections
_RAW = getattr(_sender, _NAME)


async def _via_asyncio(factory: Callable[[], Any], host: str, port: int) -> Any:
    return await asyncio.get_running_loop().create_connection(factory, host, port)


def _one(writer: str, blocks: int) -> dict[str, float]:
    setattr(_sender, _NAME, _RAW if writer == "zero_copy" else _via_asyncio)
    try:
        return bench.engine_run(blocks, bench.BLOCK)
    finally:
        setattr(_sender, _NAME, _RAW)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--pairs", default=8, show_default=True, type=click.IntRange(1, 100))
@click.option("--blocks", default=128, show_default=True, type=click.IntRange(1, 1000))
def main(pairs: int, blocks: int) -> None:
    """Zero-copy writer against asyncio's transport, interleaved pairs, JSON on stdout."""
    rows: list[dict[str, Any]] = []
    for index in range(pairs):
        bare = bench.bare(blocks, 0)["throughput_mib_s"]
        order = ("zero_copy", "asyncio") if index % 2 == 0 else ("asyncio", "zero_copy")
        row: dict[str, Any] = {"bare_mib_s": bare}
        for writer in order:
            result = _one(writer, blocks)
            row[writer] = {
                "ratio": result["throughput_mib_s"] / bare,
                "sender_cpu_us_per_block": result["sender_cpu_us_per_transfer"],
                "receiver_cpu_us_per_block": result.get("receiver_cpu_us_per_transfer", 0.0),
            }
        rows.append(row)

    def median(writer: str, key: str) -> float:
        return float(statistics.median(row[writer][key] for row in rows))

    out = {
        "pairs": pairs,
        "blocks": blocks,
        "block_bytes": bench.BLOCK,
        "per_pair": rows,
        "median": {
            writer: {
                key: median(writer, key)
                for key in ("ratio", "sender_cpu_us_per_block", "receiver_cpu_us_per_block")
            }
            for writer in ("zero_copy", "asyncio")
        },
        # per pair, so both sides of one quotient ran on the same machine state
        "sender_cpu_zero_copy_over_asyncio": statistics.median(
            row["zero_copy"]["sender_cpu_us_per_block"] / row["asyncio"]["sender_cpu_us_per_block"]
            for row in rows
        ),
        "throughput_zero_copy_over_asyncio": statistics.median(
            row["zero_copy"]["ratio"] / row["asyncio"]["ratio"] for row in rows
        ),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main(prog_name="transport_writer.py")
