"""What the processes of one incast run share (``multiprocessing`` spawn): the block layout,
the engine configuration, the pipe to the runner, and the start-up, tracing and profiling.

Each worker gets a plain ``spec`` dict and a pipe, runs one :class:`~tent_transport.engine.Engine`
on its own asyncio loop and answers over the pipe. Blocks carry a header (sender, slot, seq)
and a body drawn from a small seeded pool, so the receiver checks every landed block against
what its sender wrote without the runner moving any data. The receiver process is
:mod:`._receiver`'s, the senders' :mod:`._sender`'s.

On ``softverbs`` both sides' memory comes from :meth:`Engine.allocate` (the fabric, which the
other node's HCA reaches) and every process of a run opens its device on the run's private
fabric (``spec["fabric"]``, made and removed by the runner).

On the ``netns`` network the receiver enters ``spec["netns_rx"]`` and every sender
``spec["netns_tx"]`` before anything else (no thread yet, no socket); each binds its control
and rail listeners to its own namespace's address, and the senders connect to the
receiver's (a restarted receiver is a new process: it enters the namespace again).
"""

from __future__ import annotations

import asyncio
import cProfile
import faulthandler
import json
import os
import random
import resource
import signal
import struct
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from ..control import PskIdentity
from ._netns import NetnsError, enter_netns

__all__ = [
    "HEADER",
    "KEY",
    "RECEIVER",
    "body",
    "engine_config",
    "pool_index",
    "pool_size",
    "staged",
]

KEY = b"tent-bench-incast-shared-key-32b"
RECEIVER = 1000
HEADER = struct.Struct("!IIQ")  # sender, slot, seq


def pool_size(depth: int) -> int:
    return depth + 1  # coprime to the slot count: a slot's consecutive writes differ in body


def body(index: int, length: int) -> bytes:
    return random.Random(0x7E47 + index).randbytes(length - HEADER.size)


def pool_index(sender: int, seq: int, depth: int) -> int:
    return (sender + seq) % pool_size(depth)


def engine_config(spec: dict[str, Any], side: str) -> dict[str, Any]:
    """The engine JSON of one side for ``spec``'s mode (see :class:`..Mode`)."""
    mode, block, slots, batch = spec["mode"], spec["block"], spec["slots"], spec["lease_batch"]
    if mode == "disabled" or (mode == "fixed" and side == "receiver"):
        return {"enable_runtime_queue": True, "receiver_credit": {"enabled": False}}
    if mode == "fixed":
        # an OPTIONAL sender whose receiver offers no credit falls back to the gate's bounded
        # legacy window: the engine's own fixed local window
        return {
            "enable_runtime_queue": True,
            "receiver_credit": {
                "enabled": True,
                "mode": "optional",
                "legacy_window": spec["window"],
            },
        }
    # the activation grants one block (small: RFC principle 3), or a static lease's batch;
    # grant-ahead then keeps each sender topped up (chunk 0: its fair share of the slots)
    first = max(1, batch)
    grant = {"data_bytes": first * block, "request_slots": first, "consumer_slots": first}
    credit: dict[str, Any] = {
        "enabled": True,
        "mode": "required",
        "capacity": {
            "data_bytes": slots * block,
            "request_slots": slots,
            "staging_slots": slots,
            "consumer_slots": slots,
        },
        # min_grant: one whole block, all or nothing, for a version-1 peer (its max-min fair
        # split cut DATA_BYTES below a block, and 16 senders each held part of a block none
        # could use); grant-ahead grants whole blocks by itself
        "grant": {
            "initial_grant": grant,
            "min_grant": {"data_bytes": block, "request_slots": 1, "consumer_slots": 1},
            "chunk": batch,
        },
    }
    if spec.get("path", "direct") != "direct":
        # staged writes lease a staging slot too; one block of the capacity is the staging
        # reserve no user key may take, so the inner moves always get credit (no deadlock)
        credit["grant"]["initial_grant"] = dict(grant, staging_slots=first)
        credit["staging_reserve"] = {"data_bytes": block, "request_slots": 1, "consumer_slots": 1}
    return {"enable_runtime_queue": True, "receiver_credit": credit}


def staged(spec: dict[str, Any], seq: int) -> bool:
    """Whether block ``seq`` of a sender takes the staged plan on ``spec``'s path."""
    path = spec.get("path", "direct")
    return path == "staged" or (path == "mixed" and seq % 2 == 1)


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return float(usage.ru_utime + usage.ru_stime)


def _use_fabric(spec: dict[str, Any]) -> None:
    """Open the soft verbs device on the run's fabric: the engine's soft device reads
    ``TENT_SOFTVERBS_FABRIC`` (its default, a per-user folder, would be shared by every run)."""
    if spec.get("fabric"):
        os.environ["TENT_SOFTVERBS_FABRIC"] = spec["fabric"]


def _identity(me: int, others: list[int]) -> PskIdentity:
    return PskIdentity(local_peer=me, keys={p: KEY for p in others})


class _Pipe:
    """Blocking ``conn.recv`` in a thread, handed to the loop as a queue."""

    def __init__(self, conn: Connection, loop: asyncio.AbstractEventLoop) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self._conn, self._loop = conn, loop
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        while True:
            try:
                item = self._conn.recv()
            except (EOFError, OSError):
                item = ("exit",)
            self._loop.call_soon_threadsafe(self.queue.put_nowait, item)
            if item[0] == "exit":
                return


def _diagnosable() -> None:
    # a worker that stops answering dumps its threads' stacks on SIGUSR1 (the runner sends it)
    faulthandler.register(signal.SIGUSR1, all_threads=True)


class _TraceFile:
    """``TENT_INCAST_TRACE=<dir>``: the credit endpoints' events of one process, one JSON line
    each with its monotonic time (ns) and every field the endpoint recorded (docs/traces.md),
    after a ``config`` line naming the run's mode, sender ids and receiver credit capacity.
    Follows a grant through the processes; ``tent trace from-incast`` turns the folder into
    traces ``tent trace validate`` checks against the spec (docs/charts.md)."""

    def __init__(self, folder: str, name: str, spec: dict[str, Any]) -> None:
        self._file = open(os.path.join(folder, f"{name}.jsonl"), "a")  # noqa: SIM115
        credit = engine_config(spec, "receiver")["receiver_credit"]
        self._write(
            {
                "t": time.monotonic_ns(),
                "node": name,
                "kind": "config",
                "mode": spec["mode"],
                "senders": spec["sender_ids"],
                "capacity": credit.get("capacity", {}),
            }
        )

    def record(self, node: str, kind: str, fields: Any) -> None:
        self._write({"t": time.monotonic_ns(), "node": node, "kind": kind, **fields})

    def _write(self, line: dict[str, Any]) -> None:
        self._file.write(json.dumps(line, default=str) + "\n")


def _trace(name: str, spec: dict[str, Any]) -> _TraceFile | None:
    folder = os.environ.get("TENT_INCAST_TRACE")
    return None if not folder else _TraceFile(folder, name, spec)


def _run(main: Any, name: str) -> None:
    """``asyncio.run(main)``, under cProfile when ``TENT_INCAST_PROFILE`` names a folder (one
    ``<name>.prof`` per process: where a slow run's CPU went). Timed by the event-loop thread's
    CPU clock, not the wall: with 17 processes on 2 cores a wall clock charges each function
    the time its process waited for a core."""
    folder = os.environ.get("TENT_INCAST_PROFILE")
    if not folder:
        asyncio.run(main)
        return
    profiler = cProfile.Profile(time.thread_time)
    try:
        profiler.runcall(asyncio.run, main)
    finally:
        profiler.dump_stats(os.path.join(folder, f"{name}.prof"))


def _enter(conn: Connection, name: str) -> bool:
    """Enter namespace ``name`` ("" stays); on a failure tell the runner (it expects
    ``ready``, so the run fails with this message) and say False."""
    if not name:
        return True
    try:
        enter_netns(name)
    except NetnsError as exc:
        conn.send(("error", str(exc)))
        return False
    return True
