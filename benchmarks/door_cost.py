"""What a stranger's connection costs the receiver: its event loop's CPU per connection closed
during a door flood, against a bare listener's under the same flood; prints one JSON document.

Usage: ``python benchmarks/door_cost.py [--seconds 4] [--rounds 1] [--flood KIND]``.

Per flood (``silent``: connections that send nothing; ``stalled_hellos``: a well-formed hello
of the honest peer's id, then nothing; ``unbound_data``: silent connections to a data port),
an attacker process keeps 128 connections open and reopens each one the listener closes
(``tests/transport/net/attackers.SilentFlood``). Measured in the same round:

- ``engine``: a receiver engine's loop thread (``time.thread_time``, user and system), over the
  flood, per connection it closed (evicted, refused or past its deadline);
- ``bare``: a selector loop in a thread that does only what the door must (accepts paced as the
  engine's, a 64-place door evicting the oldest, the challenge or hello answer the protocol
  sends, the close): the floor a listener written in Python pays per connection.

``ratio`` = engine / bare (medians over the rounds). Only loopback; every flood is bounded in
time and connections.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import selectors
import socket
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "transport" / "net"))

from attackers import SilentFlood  # noqa: E402 - the tests' hostile peers
from procs import KEY, credit_config  # noqa: E402
from tent_transport.config import load_engine_config  # noqa: E402
from tent_transport.control import PskIdentity  # noqa: E402
from tent_transport.control._listener import (  # noqa: E402
    ACCEPT_BACKLOG,
    ACCEPT_BURST,
    ACCEPT_RATE,
    AcceptPacer,
)
from tent_transport.engine import EngineOptions, SyncEngine  # noqa: E402

FLOODS = ("silent", "stalled_hellos", "unbound_data")
HELLO = b"TENT" + (1).to_bytes(2, "big") + b"\x01" + (1).to_bytes(8, "big")  # peer 1, PSK
DOOR = 64  # the engine's default max_pending_handshakes and max_unbound


def _flood(port: int, greeting: bytes, seconds: float, out: Any) -> None:
    flood = SilentFlood(
        port, keep=128, max_connections=50_000, duration_s=seconds, greeting=greeting
    )
    flood.start()
    flood.join(seconds + 10)  # bounded: the flood ends itself
    flood.stop()
    out.put((flood.opened, flood.closed_by_peer))


def _run_flood(port: int, greeting: bytes, seconds: float) -> tuple[int, int]:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_flood, args=(port, greeting, seconds, queue), daemon=True)
    proc.start()
    try:
        return queue.get(timeout=seconds + 60)
    finally:
        proc.join(10)


def _greeting(kind: str) -> bytes:
    return HELLO + os.urandom(32) if kind == "stalled_hellos" else b""


def engine_round(kind: str, seconds: float) -> dict[str, float]:
    rx = SyncEngine(
        load_engine_config(credit_config("required", slots=8, block=65536, batch=2)),
        EngineOptions(peer_id=2, identity=PskIdentity(local_peer=2, keys={1: KEY})),
    )
    _, control = rx.start()
    try:
        port = rx.engine.receivers[0].address[1] if kind == "unbound_data" else control
        cpu = rx._call(time.thread_time)
        opened, closed = _run_flood(port, _greeting(kind), seconds)
        cpu = rx._call(time.thread_time) - cpu
    finally:
        rx.close()
    return {"opened": opened, "closed": closed, "us_per_connection": cpu / max(closed, 1) * 1e6}


class _Bare(threading.Thread):
    """The floor: a listener that accepts (paced as the engine's), sends what the protocol
    sends first, answers a hello, keeps a door of 64 and closes the oldest past it."""

    def __init__(self, kind: str) -> None:
        super().__init__(daemon=True)
        self.kind = kind
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(ACCEPT_BACKLOG)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.halt = threading.Event()
        self.closed = 0
        self.cpu = 0.0

    def run(self) -> None:
        start = time.thread_time()
        sel = selectors.DefaultSelector()
        sel.register(self.listener, selectors.EVENT_READ)
        pacer = AcceptPacer(ACCEPT_RATE, ACCEPT_BURST, time.monotonic())
        door: dict[socket.socket, None] = {}
        answer = os.urandom(80)  # a server hello and its proof
        resume = 0.0  # paced: the listener is not watched until then
        while not self.halt.is_set():
            now = time.monotonic()
            if resume and now >= resume:
                sel.register(self.listener, selectors.EVENT_READ)
                resume = 0.0
            for key, _ in sel.select(min(0.05, resume - now) if resume else 0.05):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self.listener:
                    paced = len(door) >= DOOR
                    if paced and pacer.wait(time.monotonic()) > 0:
                        sel.unregister(self.listener)
                        resume = time.monotonic() + pacer.wait(time.monotonic())
                        continue
                    try:
                        conn, _ = sock.accept()
                    except BlockingIOError:
                        continue
                    if paced:
                        pacer.take()
                    conn.setblocking(False)
                    if self.kind == "unbound_data":
                        conn.send(os.urandom(32))  # the challenge
                    sel.register(conn, selectors.EVENT_READ)
                    door[conn] = None
                    if len(door) > DOOR:
                        self._close(sel, door, next(iter(door)))
                    continue
                if sock not in door:
                    continue  # evicted earlier in this batch
                try:
                    data = sock.recv(47)
                except OSError:
                    data = b""
                if not data:
                    self._close(sel, door, sock)
                elif len(data) == 47:
                    sock.send(answer)
        for sock in list(door):
            self._close(sel, door, sock)
        self.cpu = time.thread_time() - start

    def _close(
        self, sel: selectors.BaseSelector, door: dict[socket.socket, None], sock: Any
    ) -> None:
        sel.unregister(sock)
        del door[sock]
        sock.close()
        self.closed += 1


def bare_round(kind: str, seconds: float) -> dict[str, float]:
    bare = _Bare(kind)
    bare.start()
    opened, closed = _run_flood(bare.port, _greeting(kind), seconds)
    bare.halt.set()
    bare.join(10)
    bare.listener.close()
    return {
        "opened": opened,
        "closed": closed,
        "us_per_connection": bare.cpu / max(closed, 1) * 1e6,
    }


@click.command(
    context_settings={"help_option_names": ["-h", "--help"]},
    help=(__doc__ or "").split("\n\n")[0],
)
@click.option(
    "--seconds", type=click.FloatRange(0.5, 60), default=4.0, show_default=True, help="Each flood."
)
@click.option(
    "--rounds",
    type=click.IntRange(1, 20),
    default=1,
    show_default=True,
    help="Interleaved rounds of the engine and the bare loop (medians).",
)
@click.option(
    "--flood",
    "floods",
    type=click.Choice(FLOODS),
    multiple=True,
    help="Only these floods (default: all).",
)
def main(seconds: float, rounds: int, floods: tuple[str, ...]) -> None:
    out: dict[str, Any] = {"benchmark": "door_cost", "seconds": seconds, "floods": {}}
    for kind in floods or FLOODS:
        runs: dict[str, list[dict[str, float]]] = {"engine": [], "bare": []}
        for i in range(rounds):  # alternate which runs first
            order = ("engine", "bare") if i % 2 == 0 else ("bare", "engine")
            for which in order:
                fn = engine_round if which == "engine" else bare_round
                runs[which].append(fn(kind, seconds))
        engine = statistics.median(r["us_per_connection"] for r in runs["engine"])
        bare = statistics.median(r["us_per_connection"] for r in runs["bare"])
        out["floods"][kind] = {
            "engine_us_per_connection": round(engine, 1),
            "bare_us_per_connection": round(bare, 1),
            "ratio": round(engine / bare, 2) if bare else None,
            "rounds": runs,
        }
    out["cpus"] = os.cpu_count()
    out["load"] = os.getloadavg()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
