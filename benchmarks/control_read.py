"""What receiving one control frame costs: a real :class:`ControlConnection` reading credit-sized
frames one at a time, as shipped (64 KiB socket reads) against the same connection reading
with asyncio's default size (256 KiB, ``_SelectorTransport.max_size``); prints one JSON document.

Usage: ``python benchmarks/control_read.py [--frames 20000] [--rounds 3] [--payload 60]``.

One event loop, one socket pair: the peer end writes a frame, the loop reads it through the
connection's read loop and hands it to ``on_frame``, and the next frame follows only then (a
credit update per transfer arrives alone). Per frame: the thread's CPU (``time.thread_time``,
user and system) over the whole exchange, the write included. ``ratio`` = bounded / default,
medians over interleaved rounds. On glibc a 256 KiB allocation per read is what the default
costs (docs/benchmarks.md, "Receiving a control frame").
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import time

import click
from tent_transport.control import AuthenticatedPeer, ControlConnection
from tent_transport.control._frames import FrameKind, encode_frame

ASYNCIO_DEFAULT_READ = 256 * 1024  # asyncio.selector_events._SelectorTransport.max_size


async def _per_frame_us(frames: int, payload: int, *, default_reads: bool) -> float:
    ours, theirs = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=ours)
    got = asyncio.Event()
    connection = ControlConnection(
        reader,
        writer,
        AuthenticatedPeer(peer=1, data_key=b"k" * 32),
        on_frame=lambda kind, data: got.set(),
        on_closed=lambda: None,
    )
    if default_reads:
        writer.transport.max_size = ASYNCIO_DEFAULT_READ  # type: ignore[attr-defined]
    connection.start()
    frame = encode_frame(FrameKind.CREDIT, b"\x80" * payload)
    try:
        for _ in range(200):  # warm up
            got.clear()
            theirs.send(frame)
            await got.wait()
        start = time.thread_time()
        for _ in range(frames):
            got.clear()
            theirs.send(frame)
            await got.wait()
        return (time.thread_time() - start) / frames * 1e6
    finally:
        connection.close()
        theirs.close()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--frames", default=20_000, show_default=True, type=click.IntRange(100, 1_000_000))
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1, 20))
@click.option(
    "--payload",
    default=60,
    show_default=True,
    type=click.IntRange(1, 4096),
    help="Frame payload bytes (a credit update is about 40-60).",
)
def main(frames: int, rounds: int, payload: int) -> None:
    """Per-frame CPU of a control connection's reads: 64 KiB against asyncio's 256 KiB."""
    bounded: list[float] = []
    default: list[float] = []
    for r in range(rounds):  # interleaved, alternating which goes first
        order = (False, True) if r % 2 else (True, False)
        for default_reads in order:
            us = asyncio.run(_per_frame_us(frames, payload, default_reads=default_reads))
            (default if default_reads else bounded).append(round(us, 2))
    print(
        json.dumps(
            {
                "benchmark": "control_read",
                "frames": frames,
                "payload_bytes": payload,
                "bounded_us_per_frame": bounded,
                "default_us_per_frame": default,
                "ratio": round(statistics.median(bounded) / statistics.median(default), 3),
                "cpus": os.cpu_count(),
                "load_1m": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()
