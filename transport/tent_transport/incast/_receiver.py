"""The receiver process of one incast run: its engine, the occupancy it counts and the
integrity of every landed block, and its answers to the runner (``count``, ``drain``).

The receiver's occupancy is counted at its data plane (``ReceiverSide``): a write occupies a
request slot and its bytes from its admission until its consumer releases it (or the transport
aborts it), and a consumer slot from landing to release. Those are the resources credit mode
grants, counted the same way in every mode. On TCP the admission is the write's header,
before any byte lands; on the soft verbs device it is the write's notice, which the receiver
reads when the one-sided write's immediate completes, that is once its bytes have landed (the
verbs receiver learns of a write only then).

What both kinds of process share (the block layout, the engine configuration, the pipe, the
start-up) is :mod:`._worker`'s.
"""

from __future__ import annotations

import asyncio
import os
import time
from multiprocessing.connection import Connection
from typing import Any

from ..config import load_engine_config
from ..devices import checksum
from ..engine import DataLanded, Engine, EngineOptions
from ..segments import Access
from ._worker import (
    HEADER,
    RECEIVER,
    _cpu_s,
    _diagnosable,
    _enter,
    _identity,
    _Pipe,
    _run,
    _trace,
    _use_fabric,
    body,
    engine_config,
    pool_index,
    pool_size,
)

__all__ = ["Occupancy", "receiver_main"]

MAX_SAMPLES = 4000
RESOURCES = ("request_slots", "data_bytes", "consumer_slots")


def _outstanding(engine: Engine) -> dict[str, int]:
    """The user keys' outstanding credit that is non-zero (granted, not reclaimed): the
    receiver's own staging key stays connected and keeps its live grant."""
    if engine.credit is None:
        return {}
    a = engine.credit.allocator.statistics()
    return {r.name.lower(): int(v) for r, v in a.user_outstanding.items() if v}


class Occupancy:
    """Receiver occupancy per resource against the nominal capacity, with a bounded series."""

    def __init__(self, capacity: dict[str, int], t0_ns: int) -> None:
        self.capacity = capacity
        self.now = dict.fromkeys(RESOURCES, 0)
        self.peak = dict.fromkeys(RESOURCES, 0)
        self.violations = dict.fromkeys(RESOURCES, 0)
        self.samples: list[tuple[int, int]] = []  # (t_ns since t0, request slots)
        self._t0 = t0_ns
        self._stride = 1
        self._changes = 0

    def add(self, resource: str, amount: int) -> None:
        value = self.now[resource] + amount
        self.now[resource] = value
        if amount > 0:
            self.peak[resource] = max(self.peak[resource], value)
            if value > self.capacity[resource]:
                self.violations[resource] += 1
        if resource == "request_slots":
            self._sample(value)

    def _sample(self, value: int) -> None:
        self._changes += 1
        if self._changes % self._stride:
            return
        self.samples.append((time.monotonic_ns() - self._t0, value))
        if len(self.samples) >= MAX_SAMPLES:  # keep the series bounded: halve, sample sparser
            self.samples = self.samples[::2]
            self._stride *= 2


def receiver_main(conn: Connection, spec: dict[str, Any]) -> None:
    if not _enter(conn, spec.get("netns_rx", "")):
        return
    _diagnosable()
    _run(_receiver(conn, spec), f"receiver-{os.getpid()}")


async def _receiver(conn: Connection, spec: dict[str, Any]) -> None:
    senders: list[int] = spec["sender_ids"]
    block, depth = spec["block"], spec["depth"]
    host = spec.get("rx_address", "127.0.0.1")
    control = spec["control_port"]
    # In a namespace of its own the receiver's listeners are the only ones there, so its data
    # listener takes the port beside the control port: one bound at 0 (it listens first) could
    # draw the control port itself, which the runner chose free in its own namespace
    data = (control + 1 if control < 0xFFFF else control - 1) if spec.get("netns_rx") else 0
    options = EngineOptions(
        peer_id=RECEIVER,
        identity=_identity(RECEIVER, senders),
        control_address=(host, control),
        rail_addresses=((host, data),),
        peer_dead_after_s=30.0,
        staging_slots=spec["slots"] if spec.get("path", "direct") != "direct" else 0,
        staging_slot_bytes=block,
        trace=_trace("receiver", spec),
        device=spec.get("device", "tcp"),
        data_congestion_control=spec.get("congestion") or None,
    )
    _use_fabric(spec)
    engine = Engine(load_engine_config(engine_config(spec, "receiver")), options)
    region = depth * block  # each sender's own region: its whole pipeline, never overwritten live
    memory = engine.allocate(region * len(senders))  # verbs: memory the senders' HCAs reach
    sums = [checksum(body(i, block)) for i in range(pool_size(depth))]
    base = {peer: i * region for i, peer in enumerate(senders)}
    capacity = {
        "request_slots": spec["slots"],
        "data_bytes": spec["slots"] * block,
        "consumer_slots": spec["slots"],
    }
    occ = Occupancy(capacity, spec["t0_ns"])
    integrity = {"header": 0, "body": 0}
    landed_bytes = 0
    side = engine.receiver
    admit, landed, aborted, release = side.admit, side.landed, side.aborted, side.release
    stage = side.staged
    live: set[int] = set()  # landed ids not yet released
    writes: dict[tuple[int, int], list[int]] = {}  # (sender, write_id) -> [seq, landed, released]

    # The engine has no occupancy observer: wrap the data plane's calls on this instance.
    cpu_first: list[float] = []  # CPU at the first admission: the run's work starts there

    def admit_hook(peer: int, session: int, request: Any) -> str | None:
        if not cpu_first:
            cpu_first.append(_cpu_s())
        answer = admit(peer, session, request)
        if answer is None:
            occ.add("request_slots", 1)
            occ.add("data_bytes", request.length)
        return answer

    def check_landed(peer: int, request: Any) -> None:
        nonlocal landed_bytes
        view = memoryview(memory)[request.offset : request.offset + request.length]
        sender, slot, seq = HEADER.unpack_from(view)
        if sender != peer or request.offset != base.get(peer, -1) + slot * block:
            integrity["header"] += 1
        elif checksum(view[HEADER.size :]) != sums[pool_index(sender, seq, depth)]:
            integrity["body"] += 1
        landed_bytes += request.length
        writes[(peer, request.write_id)] = [seq, time.monotonic_ns(), 0]
        occ.add("consumer_slots", 1)

    def landed_hook(peer: int, session: int, request: Any) -> None:
        check_landed(peer, request)
        landed(peer, session, request)

    def staged_hook(peer: int, session: int, request: Any, slot: int, finish: Any) -> None:
        # a staged block is at its target once the inner move finished: check it there
        def finished(ok: bool) -> None:
            if ok:
                check_landed(peer, request)
            finish(ok)

        stage(peer, session, request, slot, finished)

    def aborted_hook(peer: int, session: int, request: Any, reason: str) -> None:
        occ.add("request_slots", -1)
        occ.add("data_bytes", -request.length)
        aborted(peer, session, request, reason)

    def release_hook(event: DataLanded) -> bool:
        if event.landed_id in live:
            live.discard(event.landed_id)
            entry = writes.get((event.sender, event.write_id))
            if entry is not None:
                entry[2] = time.monotonic_ns()
            occ.add("request_slots", -1)
            occ.add("data_bytes", -event.length)
            occ.add("consumer_slots", -1)
        return release(event)

    side.admit = admit_hook  # type: ignore[method-assign]
    side.landed = landed_hook  # type: ignore[method-assign]
    side.aborted = aborted_hook  # type: ignore[method-assign]
    side.staged = staged_hook  # type: ignore[method-assign]
    await engine.start()
    segment = engine.register(memory)
    loop = asyncio.get_running_loop()
    pipe = _Pipe(conn, loop)
    exposed: set[tuple[int, int]] = set()
    delay = spec["release_delay_ms"] / 1000.0

    async def expose_sessions() -> None:
        while True:
            for ps in engine.control.sessions():
                if (ps.peer, ps.session) not in exposed and ps.peer in base:
                    engine.expose(ps.peer, segment.segment_id, base[ps.peer], region, Access.WRITE)
                    exposed.add((ps.peer, ps.session))
            await asyncio.sleep(0.002)

    async def consume() -> None:
        # One consumer, serial: a slowdown of d ms per block caps it at 1/d blocks per second.
        # Its service is paced on the clock (a block is done d after the later of its landing
        # and the previous block's release), not slept d after the loop got to it: a sleep
        # would add this event loop's latency to every block, a consumer slower than d, and
        # slower the busier the receiver (only credit mode waits for the consumer).
        ready = 0.0
        while True:
            event = await engine.landed()
            live.add(event.landed_id)
            if delay:
                entry = writes.get((event.sender, event.write_id))
                landed_s = entry[1] / 1e9 if entry else time.monotonic()
                ready = max(landed_s, ready) + delay
                await asyncio.sleep(max(0.0, ready - time.monotonic()))
            release_hook(event)

    tasks = [asyncio.ensure_future(expose_sessions()), asyncio.ensure_future(consume())]
    conn.send(("ready", engine.address, segment.segment_id))
    try:
        while True:
            command = await pipe.queue.get()
            if command[0] == "exit":
                break
            if command[0] == "count":
                conn.send(("count", side.statistics().landed))
                continue
            if command[0] == "drain":
                end = time.monotonic() + command[1]

                def busy(command: Any = command) -> bool:
                    if side.pending_landed() or live:
                        return True
                    # senders gone (final drain): their unused grants must come back too
                    return bool(command[2:] and command[2] and _outstanding(engine))

                while busy() and time.monotonic() < end:
                    await asyncio.sleep(0.01)
                stats = side.statistics()
                outstanding = _outstanding(engine)
                frames, updates_repeated = engine.control.control_frames()
                conn.send(
                    (
                        "drained",
                        {
                            "peak": occ.peak,
                            "violations": occ.violations,
                            "final": dict(occ.now),
                            "credit_outstanding": outstanding,
                            "samples": occ.samples,
                            "writes": [[p, *e] for (p, _w), e in writes.items()],
                            "integrity": integrity,
                            "refused": stats.refused,
                            "quarantined": list(stats.quarantined),
                            "landed": stats.landed,
                            "landed_bytes": landed_bytes,
                            "cpu_s": _cpu_s(),
                            "cpu_run_s": _cpu_s() - cpu_first[0] if cpu_first else 0.0,
                            "control_frames": frames,
                            "updates_repeated": updates_repeated,
                            "unreleased": stats.unreleased + len(live) + side.pending_landed(),
                        },
                    )
                )
    finally:
        for task in tasks:
            task.cancel()
        await engine.close()
