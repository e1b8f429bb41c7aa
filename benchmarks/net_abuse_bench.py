"""The receiver's side of the network-abuse benchmark (``net_abuse.py``): :class:`Bench`, a
real receiver and an honest sender streaming to it in this process, with the region between
two guards the attacks aim at, and what the benchmark reads of the process around each attack
(RSS, Python objects, descriptors). The attacks and the rows are ``net_abuse.py``; this module
never imports it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import os
import sys
import time
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "transport" / "net"))

from attackers import (  # the tests' hostile peers
    RawControl,
)
from net_abuse_lies import (  # the receiver's memory layout and the lies
    BLOCK,
    GUARD,
    HONEST,
    LIAR_BLOCKS,
    LIAR_OFFSET,
    LIARS,
    REGION_BLOCKS,
)
from procs import KEY, credit_config
from tent_transport.config import load_engine_config
from tent_transport.control import PskIdentity
from tent_transport.devices import Opcode
from tent_transport.dispatch import TransferRequest
from tent_transport.engine import EngineOptions, SyncEngine
from tent_transport.segments import Access

from tent_sched import TaskStatus

DEPTH = 8  # the honest sender's transfers in flight
NEWCOMER = 11
ATTACKERS = {"wrong_psk": 6, "control_flood": 3, "oversized_frame": 4, "slowloris_after_auth": 5}


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _py_blocks() -> int:
    """Python objects this process holds (after a collection): what RSS cannot tell apart, a
    reference kept against memory the allocator keeps mapped after it was freed."""
    gc.collect()
    return sys.getallocatedblocks()


def _fd_targets() -> dict[str, str]:
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own fd is gone by now
            out[fd] = os.readlink(f"/proc/self/fd/{fd}")
    return out


def _new_fds(before: dict[str, str]) -> dict[str, int]:
    """Descriptors opened since ``before`` and still open, counted by kind (socket, pipe...)."""
    kinds: collections.Counter[str] = collections.Counter()
    for fd, target in _fd_targets().items():
        if before.get(fd) != target:
            kinds[target.split(":")[0]] += 1
    return dict(kinds)


class Bench:
    """The receiver (peer 2), the honest sender (peer 1) and the region between two guards."""

    def __init__(self, *, trim_heap: bool = True) -> None:
        resource_tracker.ensure_running()  # the spawn children's helper: its pipe is not ours
        config = load_engine_config(credit_config("required", slots=8, block=BLOCK, batch=2))
        # The receiver takes the explicit legacy fallback (required_fallback): the stale-session
        # rounds of fenced_session write on sessions opened by hand, which never negotiate
        # credit. Without it, the default, a legacy peer's writes are refused at the header
        # (tests/transport/net/test_legacy_writes.py), never_negotiated's included.
        fallback = credit_config("required", slots=8, block=BLOCK, batch=2, fallback=True)
        peers = {HONEST: KEY, NEWCOMER: KEY, **{p: KEY for p in ATTACKERS.values()}}
        peers |= {p: KEY for p in LIARS.values()}
        self.rx = SyncEngine(
            load_engine_config(fallback),
            EngineOptions(
                peer_id=2,
                identity=PskIdentity(local_peer=2, keys=peers),
                release_on_landing=True,
                trim_heap=trim_heap,
            ),
        )
        self.tx = SyncEngine(
            config, EngineOptions(peer_id=1, identity=PskIdentity(local_peer=1, keys={2: KEY}))
        )
        host, self.control_port = self.rx.start()
        self.tx.start()
        self.peer = self.tx.connect(host, self.control_port)
        # guard | the honest region | guard | the liars' region | guard
        self.memory = bytearray(LIAR_OFFSET + LIAR_BLOCKS * BLOCK + GUARD)
        self.segment = self.rx.register(self.memory).segment_id
        self.hidden = bytearray(LIAR_BLOCKS * BLOCK)  # registered, exposed to nobody
        self.hidden_segment = self.rx.register(self.hidden).segment_id
        self.rx.expose(HONEST, self.segment, GUARD, REGION_BLOCKS * BLOCK)
        self.tx.wait_regions(self.peer, lambda d: bool(d.regions))
        self.data_port = self.rx.engine.receivers[0].address[1]
        self.payload = os.urandom(BLOCK)
        self._next = 0
        self._exposing: Any = None

    def layout(self) -> dict[str, int]:
        """What a liar may aim at: the segment exposed to nobody, the honest region."""
        return {"hidden": self.hidden_segment, "honest": GUARD}

    def expose_liars(self, on: bool) -> None:
        """While on, every new session of a liar gets the liars' region (write and read), as
        an application exposes a region to each sender that connects."""
        if not on:
            if self._exposing is not None:
                self._exposing.cancel()
                self._exposing = None
            return
        engine, liars = self.rx.engine, set(LIARS.values())

        async def expose() -> None:
            done: set[tuple[int, int]] = set()
            while True:  # until canceled
                for ps in engine.control.sessions():
                    if ps.peer in liars and (ps.peer, ps.session) not in done:
                        done.add((ps.peer, ps.session))
                        with contextlib.suppress(Exception):  # gone meanwhile
                            engine.expose(
                                ps.peer, self.segment, LIAR_OFFSET, LIAR_BLOCKS * BLOCK,
                                Access.WRITE | Access.READ,
                            )  # fmt: skip
                await asyncio.sleep(0.005)

        self._exposing = asyncio.run_coroutine_threadsafe(expose(), self.rx._loop)

    def close(self) -> None:
        self.tx.close()
        self.rx.close()

    def outside(self) -> int:
        """Bytes written outside every grant: of the guard zones and the segment exposed to
        nobody, those not zero; of the honest region, those neither zero nor the honest
        payload's (the honest sender writes nothing else there)."""
        end = GUARD + REGION_BLOCKS * BLOCK
        zones = (
            self.memory[:GUARD],
            self.memory[end:LIAR_OFFSET],
            self.memory[LIAR_OFFSET + LIAR_BLOCKS * BLOCK :],
            self.hidden,
        )
        count = sum(len(z) - bytes(z).count(0) for z in zones)
        for i in range(REGION_BLOCKS):
            block = bytes(self.memory[GUARD + i * BLOCK : GUARD + (i + 1) * BLOCK])
            if block != self.payload and block.count(0) != BLOCK:  # the slow path: rare
                count += sum(1 for a, b in zip(block, self.payload, strict=True) if a not in (0, b))
        return count

    def stream(self, seconds: float) -> float:
        """The honest sender's throughput (MiB/s) over ``seconds``, ``DEPTH`` in flight."""
        pending: collections.deque[Any] = collections.deque()
        done = 0
        start = time.monotonic()
        while time.monotonic() - start < seconds and self._next < 10_000_000:  # bounded
            while len(pending) < DEPTH:
                offset = GUARD + (self._next % REGION_BLOCKS) * BLOCK
                self._next += 1
                request = TransferRequest(
                    opcode=Opcode.WRITE, local=self.payload, peer=self.peer,
                    remote_segment=self.segment, remote_offset=offset, length=BLOCK,
                )  # fmt: skip
                pending.append(self.tx.submit([request]))
            done += pending.popleft().result(30).status is TaskStatus.COMPLETED
        while pending:
            done += pending.popleft().result(30).status is TaskStatus.COMPLETED
        elapsed = time.monotonic() - start
        self.drain_landed()
        return done * BLOCK / elapsed / 2**20

    def drain_landed(self) -> int:
        """Take the receiver's data-landed notifications, as its application would: left
        unread they pile up to ``max_pending_landed`` (65,536) and their memory would count
        in the receiver's RSS as if an attack had left it there."""
        engine = self.rx.engine

        async def take() -> int:
            taken = 0
            while engine.receiver.pending_landed() and taken < 1_000_000:  # bounded
                await engine.landed()
                taken += 1
            return taken

        return self.rx._run(take(), 30)

    def newcomer(self, budget_s: float = 5.0) -> tuple[float | None, int]:
        """``(seconds, attempts)`` a new honest peer takes to complete its handshake, retrying
        after each refusal or eviction on the engine's control client's back-off (20 ms,
        doubling to 1 s), as a real peer would (``None``: not within ``budget_s``).

        One attempt is evicted when the flood makes ``limit`` arrivals within its handshake's
        round trip (docs/abuse.md "The doors"); on a loaded machine that round trip can be
        long enough, and the retry is what the honest client does next."""
        start = time.monotonic()
        delay, attempts = 0.02, 0
        while attempts < 20:  # bounded: the budget ends it first
            attempts += 1
            left = budget_s - (time.monotonic() - start)
            if left <= 0:
                break
            try:
                raw = RawControl(self.control_port, claim=NEWCOMER, timeout_s=min(left, 5.0))
                try:
                    raw.hello()
                    raw.prove(KEY)
                    ok = raw.server_proof_ok(KEY)
                finally:
                    raw.close()
            except OSError:
                ok = False
            if ok:
                return round(time.monotonic() - start, 4), attempts
            time.sleep(min(delay, max(0.0, budget_s - (time.monotonic() - start))))
            delay = min(delay * 2, 1.0)
        return None, attempts

    def other_frames(self) -> int:
        """Control frames exchanged with anyone but the honest sender (every session held)."""
        control = self.rx.engine.control

        def count() -> int:  # one turn of the receiver's loop: the honest session's credit
            total, _ = control.control_frames()  # loop runs on between two calls
            ps = control.session_of(HONEST)
            if ps is None:
                return total
            honest = ps.connection.statistics()
            return total - honest.frames_sent - honest.frames_received

        return self.rx._call(count)

    def loop_cpu(self) -> float:
        """CPU seconds the receiver's event-loop thread has used (``time.thread_time`` read on
        that thread): what the receiver spends, apart from this process's other threads."""
        return self.rx._call(time.thread_time)

    def counters(self) -> dict[str, Any]:
        engine = self.rx.engine
        control = self.rx._call(engine.control.statistics)
        receiver = self.rx._call(engine.receiver.statistics)
        data = self.rx._call(engine.receivers[0].statistics)
        assert engine.credit is not None
        credit = self.rx._call(engine.credit.allocator.statistics)
        return {
            "handshakes_failed": control.handshakes_failed,
            "handshakes_evicted": control.handshakes_evicted,
            "binds_evicted": data.binds_evicted,
            "binds_refused": data.binds_refused,
            "data_writes_refused": data.writes_refused,
            "integrity_errors": data.integrity_errors,
            "reads_served": data.reads_served,
            "writes_refused": receiver.refused,
            "stale_refused": receiver.stale_refused,
            "writes_aborted": receiver.aborted,
            "credit_writes_refused": credit.writes_refused,
            "control_throttled": control.control_throttled,
            "control_floods": control.control_floods,
            "protocol_violations": control.protocol_violations,
            "quarantined": list(receiver.quarantined),
            "heap_trims": receiver.heap_trims,
        }

    def backlog(self) -> dict[str, int]:
        """What the receiver holds now towards the liars: their data connections (those not
        read because they do not take their answers), the bytes buffered in those and in
        their control connections, and their control frames queued and refused."""

        def look() -> dict[str, int]:
            out = collections.Counter[str]()
            server = self.rx.engine.receivers[0]
            for (peer, _), held in server._sessions.items():
                if peer in LIARS.values():
                    for protocol in held:
                        out["data_connections"] += 1
                        out["data_paused"] += protocol.reading_paused
                        transport = protocol._transport
                        if transport is not None:
                            out["data_buffered_bytes"] += transport.get_write_buffer_size()
            for ps in self.rx.engine.control.sessions():
                if ps.peer in LIARS.values():
                    stats = ps.connection.statistics()
                    out["control_sent"] += stats.frames_sent
                    out["control_queued"] += stats.queued
                    out["control_refused"] += stats.frames_refused
                    out["control_buffered_bytes"] += (
                        ps.connection._writer.transport.get_write_buffer_size()
                    )
            return dict(out)

        return self.rx._call(look)
