"""The sender's plaintext data writers against each other; prints one JSON document.

Each round runs the same engine benchmark (:func:`tent_transport.bench.engine_run`: one sender,
one receiver process, 4 MiB writes under credit) once per writer, in an order that rotates from
round to round:

- ``send_thread``: the zero-copy transport (``devices/tcp/_raw.py``) with payloads sent on a
  thread of their own (``_send_thread.py``; the engine's default with more than two CPUs);
- ``zero_copy``: the same transport sending everything from the loop thread;
- ``asyncio``: data connections opened by ``loop.create_connection`` (asyncio's transport, fed
  in 1 MiB chunks, as the engine did first).

The bare ``sendall`` / ``recv_into`` loop runs at the start of every round as the baseline.
Besides throughput and CPU per block (all threads of each process) it reports the sender's
loop-thread CPU per block (``loop_cpu_us_per_block``, the main thread's ``thread_time``): with
cores to spare, that thread is what bounds one sender. Figures are medians over the rounds;
``per_pair`` keeps each round.

Usage: ``python benchmarks/transport_writer.py [--pairs 8] [--blocks 128]``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import click
from tent_transport import bench
from tent_transport.devices.tcp import _sender

_NAME = "open_raw_connection"  # the opener TcpRail.attach calls for plaintext connections
_RAW = getattr(_sender, _NAME)


WRITERS = ("send_thread", "zero_copy", "asyncio")


async def _via_asyncio(factory: Callable[[], Any], host: str, port: int, **_: Any) -> Any:
    return await asyncio.get_running_loop().create_connection(factory, host, port)


def _raw_forced(send_thread: bool) -> Callable[..., Any]:
    """The zero-copy opener with its send thread forced, whatever the rail's default here."""

    async def opener(factory: Callable[[], Any], host: str, port: int, **_: Any) -> Any:
        return await _RAW(factory, host, port, send_thread=send_thread)

    return opener


_OPENERS = {
    "send_thread": _raw_forced(True),
    "zero_copy": _raw_forced(False),
    "asyncio": _via_asyncio,
}


def _one(writer: str, blocks: int) -> dict[str, float]:
    setattr(_sender, _NAME, _OPENERS[writer])
    loop_cpu = time.thread_time()  # the engine's sender runs its loop on this thread
    try:
        out = bench.engine_run(blocks, bench.BLOCK)
    finally:
        setattr(_sender, _NAME, _RAW)
    out["loop_cpu_us_per_block"] = (time.thread_time() - loop_cpu) / blocks * 1e6
    return out


def _quotient(rows: list[dict[str, Any]], top: str, bottom: str, key: str) -> float:
    return float(statistics.median(row[top][key] / row[bottom][key] for row in rows))


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--pairs", default=8, show_default=True, type=click.IntRange(1, 100))
@click.option("--blocks", default=128, show_default=True, type=click.IntRange(1, 1000))
def main(pairs: int, blocks: int) -> None:
    """The three writers in rotating order, JSON on stdout."""
    keys = (
        "ratio",
        "sender_cpu_us_per_block",
        "loop_cpu_us_per_block",
        "receiver_cpu_us_per_block",
    )
    rows: list[dict[str, Any]] = []
    for index in range(pairs):
        bare = bench.bare(blocks, 0)["throughput_mib_s"]
        shift = index % len(WRITERS)
        row: dict[str, Any] = {"bare_mib_s": bare}
        for writer in WRITERS[shift:] + WRITERS[:shift]:
            result = _one(writer, blocks)
            row[writer] = {
                "ratio": result["throughput_mib_s"] / bare,
                "sender_cpu_us_per_block": result["sender_cpu_us_per_transfer"],
                "loop_cpu_us_per_block": result["loop_cpu_us_per_block"],
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
        "median": {writer: {key: median(writer, key) for key in keys} for writer in WRITERS},
        # per round, so both sides of one quotient ran on the same machine state
        "sender_cpu_zero_copy_over_asyncio": _quotient(
            rows, "zero_copy", "asyncio", "sender_cpu_us_per_block"
        ),
        "throughput_zero_copy_over_asyncio": _quotient(rows, "zero_copy", "asyncio", "ratio"),
        "loop_cpu_send_thread_over_zero_copy": _quotient(
            rows, "send_thread", "zero_copy", "loop_cpu_us_per_block"
        ),
        "sender_cpu_send_thread_over_zero_copy": _quotient(
            rows, "send_thread", "zero_copy", "sender_cpu_us_per_block"
        ),
        "throughput_send_thread_over_zero_copy": _quotient(
            rows, "send_thread", "zero_copy", "ratio"
        ),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main(prog_name="transport_writer.py")
