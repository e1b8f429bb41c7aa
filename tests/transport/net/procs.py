"""Engine processes for the multi-process transport tests (run with ``multiprocessing`` spawn).

Each worker takes a :class:`multiprocessing.connection.Connection` and a plain ``spec`` dict,
runs one :class:`~tent_transport.engine.Engine` and reports over the connection. Block payloads
are deterministic (``block_bytes(seed, length)``), so the parent checks integrity end to end
without moving the data itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import random
import socket
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from tent_transport.config import load_engine_config
from tent_transport.control import PskIdentity
from tent_transport.devices import Opcode
from tent_transport.devices.tcp import TcpDataServer, checksum
from tent_transport.dispatch import TransferRequest
from tent_transport.engine import DataLanded, Engine, EngineOptions
from tent_transport.segments import Access

KEY = b"test-shared-key-0123456789abcdef"
SPAWN = multiprocessing.get_context("spawn")


def block_bytes(seed: int, length: int) -> bytes:
    return random.Random(seed).randbytes(length)


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def identity(peer: int, others: list[int]) -> PskIdentity:
    return PskIdentity(local_peer=peer, keys={p: KEY for p in others})


def credit_config(
    mode: str, *, slots: int = 8, block: int = 1 << 20, batch: int = 2, fallback: bool = False
) -> dict[str, Any]:
    """A receiver of ``slots`` blocks; the activation grants ``batch`` blocks (the lease batch).
    ``fallback``: ``required_fallback`` (a required receiver then admits a legacy peer's
    uncredited writes)."""
    if mode == "disabled":
        return {"enable_runtime_queue": True, "receiver_credit": {"enabled": False}}
    return {
        "enable_runtime_queue": True,
        "receiver_credit": {
            "enabled": True,
            "mode": mode,
            "required_fallback": fallback,
            "capacity": {
                "data_bytes": slots * block,
                "request_slots": slots,
                "staging_slots": slots,
                "consumer_slots": slots,
            },
            "grant": {
                "initial_grant": {
                    "data_bytes": batch * block,
                    "request_slots": batch,
                    "consumer_slots": batch,
                },
            },
        },
    }


class _Commands:
    """Blocking ``conn.recv`` in a thread, handed to the loop."""

    def __init__(self, conn: Connection, loop: asyncio.AbstractEventLoop) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self._conn = conn
        self._loop = loop
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


# ------------------------------------------------------------------------------ receiver


def enter_netns(name: str | None) -> None:
    """Move this (still single-threaded) process into network namespace ``name``."""
    if name is None:
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
            raise OSError(ctypes.get_errno(), f"setns({name}) failed")
    finally:
        os.close(fd)


def receiver(conn: Connection, spec: dict[str, Any]) -> None:
    enter_netns(spec.get("netns"))
    asyncio.run(_receiver(conn, spec))


async def _receiver(conn: Connection, spec: dict[str, Any]) -> None:
    config = load_engine_config(spec["config"])
    ports = spec.get("ports") or [0, 0]
    options = EngineOptions(
        peer_id=spec.get("peer_id", 100),
        identity=identity(spec.get("peer_id", 100), spec["senders"]),
        control_address=(spec.get("host", "127.0.0.1"), ports[0]),
        rail_addresses=tuple((h, p) for h, p in spec.get("rails", [("127.0.0.1", ports[1])])),
        trace=spec.get("trace"),
        credit_session=spec.get("credit_session"),
        release_on_landing=spec.get("release") == "landing",
        device=spec.get("device", "tcp"),
    )
    engine = Engine(config, options)
    memory = engine.allocate(spec["segment_bytes"])  # verbs: memory its rail can reach
    address = await engine.start()
    segment = engine.register(memory)
    rails = [h.address for h in engine.receivers if isinstance(h, TcpDataServer)]  # none: verbs
    conn.send(("ready", address, rails, segment.segment_id))
    landed: list[tuple[int, int, int, int, int]] = []  # sender, offset, length, crc, t_ns
    held: list[DataLanded] = []
    exposed: set[tuple[int, int]] = set()
    regions: dict[int, tuple[int, int]] = {int(k): tuple(v) for k, v in spec["regions"].items()}
    delay_s = spec.get("release_delay_s", 0.0)
    policy = spec.get("release", "landing")

    def release_mode(peer: int) -> str:
        return (
            str(policy.get(str(peer), policy.get(peer, "landing")))
            if isinstance(policy, dict)
            else str(policy)
        )

    loop = asyncio.get_running_loop()
    commands = _Commands(conn, loop)

    def release_later(event: DataLanded) -> None:
        loop.call_later(delay_s, engine.release, event)

    async def expose_new_sessions() -> None:
        while True:
            for ps in engine.control.sessions():
                key = (ps.peer, ps.session)
                if key not in exposed and ps.peer in regions:
                    offset, length = regions[ps.peer]
                    engine.expose(
                        ps.peer, segment.segment_id, offset, length, Access.WRITE | Access.READ
                    )
                    exposed.add(key)
            await asyncio.sleep(0.002)

    async def consume() -> None:
        while True:
            event = await engine.landed()
            view = memoryview(memory)[event.offset : event.offset + event.length]
            landed.append(
                (event.sender, event.offset, event.length, checksum(view), time.monotonic_ns())
            )
            mode = release_mode(event.sender)
            if mode == "manual":
                held.append(event)
            elif mode == "delay":
                release_later(event)
            else:
                engine.release(event)

    tasks = [asyncio.ensure_future(expose_new_sessions()), asyncio.ensure_future(consume())]
    try:
        while True:
            command = await commands.queue.get()
            if command[0] == "exit":
                break
            if command[0] == "release_all":
                t_release = time.monotonic_ns()
                for event in held:
                    engine.release(event)
                held.clear()
                conn.send(("released", t_release))
            elif command[0] == "crc":
                _, offset, length = command
                conn.send(("crc", checksum(memoryview(memory)[offset : offset + length])))
            elif command[0] == "stats":
                conn.send(("stats", _receiver_stats(engine, landed)))
    finally:
        for task in tasks:
            task.cancel()
        _stop_trace(spec)
        await engine.close()


def _receiver_stats(engine: Engine, landed: list[tuple[int, int, int, int, int]]) -> dict[str, Any]:
    stats = engine.receiver.statistics()
    out: dict[str, Any] = {
        "landed": list(landed),
        "refused": stats.refused,
        "quarantined": list(stats.quarantined),
        "unreleased": stats.unreleased,
        "sessions": list(engine.sender_sessions()),
        "fences": engine.control.statistics().fences_completed,
    }
    if engine.credit is not None:
        a = engine.credit.allocator.statistics()
        out["outstanding"] = {int(r): v for r, v in a.outstanding.items()}
        out["violations"] = a.protocol_violations
        out["session"] = engine.credit.session.value
    return out


# ------------------------------------------------------------------------------ sender


def sender(conn: Connection, spec: dict[str, Any]) -> None:
    enter_netns(spec.get("netns"))
    asyncio.run(_sender(conn, spec))


async def _sender(conn: Connection, spec: dict[str, Any]) -> None:
    config = load_engine_config(spec["config"])
    me = spec["peer_id"]
    engine = Engine(
        config,
        EngineOptions(
            peer_id=me,
            identity=identity(me, [spec.get("receiver_id", 100)]),
            rail_addresses=tuple(tuple(a) for a in spec.get("rails", [("127.0.0.1", 0)])),
            peer_dead_after_s=spec.get("peer_dead_after_s", 5.0),
            trace=spec.get("trace"),
            device=spec.get("device", "tcp"),
            link_speed_gbps=tuple(spec.get("link_speed_gbps", ())),
        ),
    )
    await engine.start()
    host, port = spec["receiver"]
    peer = await engine.connect(host, port)
    report: dict[str, Any] = {"phases": []}
    for phase in spec["phases"]:
        need = phase.get("region_session_not")
        if need == "previous":
            need = report["phases"][-1]["session"]
        descriptors = await engine.wait_regions(
            peer,
            lambda d, need=need: bool(d.regions) and (need is None or d.session != need),
            timeout=30,
        )
        if phase.get("pinned"):
            # the credit activation, not only the regions (they may come first): a transfer
            # submitted before it is pinned to no (session, epoch), so no fence applies to it
            for _ in range(3000):  # bounded: 30 s
                endpoint = engine._links[peer].endpoint
                if endpoint is not None and endpoint.key is not None:
                    break
                await asyncio.sleep(0.01)
        segment = spec["segment"]
        results: list[dict[str, Any]] = []
        stalls = 0
        stopped = False  # the parent's ("stop",) ended the phase, not max_rounds
        # "until_stopped": the blocks again and again until the parent sends ("stop",) (read
        # between rounds; bounded by max_rounds), so the stream outlasts whatever it must
        for _round in range(phase.get("max_rounds", 200) if phase.get("until_stopped") else 1):
            stalls += await _round_of(engine, peer, segment, phase, results)
            if phase.get("until_stopped") and conn.poll():
                conn.recv()
                stopped = True
                break
        report["phases"].append(
            {
                "results": results,
                "stalls": stalls,
                "session": descriptors.session,
                "stopped": stopped,
            }
        )
    report["rails"] = [
        {
            "name": r.name,
            "completed_bytes": r.nic.completed_bytes,
            "busy_ns": r.nic.busy_ns,
            "transmit_bps": r.nic.transmit_bps,
            "selection_bps": r.nic.selection_bps,
            "transmit_samples": r.nic.transmit_samples,
            "completions": r.completions,
        }
        for r in engine.core.rail_statistics()
    ]
    link_stats = engine._links[peer].client.statistics()
    report["reconnects"] = link_stats.reconnects
    report["endpoint"] = None
    if engine._links[peer].endpoint is not None:
        st = engine._links[peer].endpoint.statistics()
        report["endpoint"] = {
            "state": st.state.name,
            "epoch_resets": st.epoch_resets,
            "violations": st.protocol_violations,
        }
    conn.send(("done", report))
    _stop_trace(spec)  # the trace ends with the work it reported (not the teardown)
    # The engine keeps running until the test stops it (a blocking recv here would freeze its
    # loop): grant-ahead credit that nothing will use goes back after the sender's hold.
    with contextlib.suppress(EOFError, OSError):
        await asyncio.to_thread(conn.recv)
    await engine.close()


async def _round_of(
    engine: Engine, peer: int, segment: int, phase: dict[str, Any], results: list[dict[str, Any]]
) -> int:
    """Submit ``phase``'s blocks ([offset, length, seed]), await them, append their results;
    returns how many stalled at submit."""
    submitted = []
    for offset, length, seed in phase["blocks"]:
        data = block_bytes(seed, length)
        request = TransferRequest(
            opcode=Opcode.WRITE,
            local=data,
            peer=peer,
            remote_segment=segment,
            remote_offset=offset,
            length=length,
            deadline_ns=phase.get("deadline_ns", 0),
        )
        handle = engine.submit([request])
        # the submit's own dispatch pass already asked the gate: a stall shows at once
        stalled = handle.status().backpressure is not None
        submitted.append((handle, time.monotonic_ns(), stalled))
    for handle, t0, stalled in submitted:
        state = await handle.wait(phase.get("timeout_s", 60))
        end = handle.events()[-1].end_ns if handle.events() else 0
        results.append(
            {
                "status": state.status.name,
                "detail": state.detail,
                "t0": t0,
                "end": end,
                "stalled": stalled,
            }
        )
    return sum(1 for *_, stalled in submitted if stalled)


def _stop_trace(spec: dict[str, Any]) -> None:
    # a trace ends with the run, before teardown's disconnects
    trace = spec.get("trace")
    if trace is not None:
        trace.stop()


# ------------------------------------------------------------------------------ helpers


class Proc:
    """A spawned worker and its end of the pipe (bounded waits, always reaped)."""

    def __init__(
        self, target: Callable[[Connection, dict[str, Any]], None], spec: dict[str, Any]
    ) -> None:
        self.conn, child = SPAWN.Pipe()
        self.process = SPAWN.Process(target=target, args=(child, spec), daemon=True)
        self.process.start()
        child.close()

    def recv(self, timeout: float = 60.0) -> Any:
        if not self.conn.poll(timeout):
            raise TimeoutError(f"no message from {self.process.name} in {timeout}s")
        return self.conn.recv()

    def ask(self, *command: Any, timeout: float = 30.0) -> Any:
        self.conn.send(command)
        return self.recv(timeout)

    def stop(self) -> None:
        with contextlib.suppress(OSError, BrokenPipeError):
            self.conn.send(("exit",))
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)

    def kill(self) -> None:
        self.process.kill()
        self.process.join(5)


# ------------------------------------------------------------------------------ liars


def liar(conn: Connection, spec: dict[str, Any]) -> None:
    asyncio.run(_liar(conn, spec))


async def _liar(conn: Connection, spec: dict[str, Any]) -> None:
    """A sender that writes around the rules: outside its region (``how="region"``), or with
    a forged lease posted on the rail behind the gate's back: past its credit
    (``how="overcredit"``), or charging half the DATA_BYTES it lands (``how="undercharge"``)."""
    from tent_transport.devices import SliceRequest, WriteLease

    config = load_engine_config(spec["config"])
    me = spec["peer_id"]
    engine = Engine(
        config,
        EngineOptions(peer_id=me, identity=identity(me, [100]), device=spec.get("device", "tcp")),
    )
    await engine.start()
    peer = await engine.connect(*spec["receiver"])
    await engine.wait_regions(peer, lambda d: bool(d.regions), timeout=30)
    data = block_bytes(99, spec["length"])
    if spec["how"] == "claim":
        outcome = await _claim_liar(engine, peer, spec, data)
    elif spec["how"] == "region":
        request = TransferRequest(
            opcode=Opcode.WRITE,
            local=data,
            peer=peer,
            remote_segment=spec["segment"],
            remote_offset=spec["offset"],
            length=len(data),
        )
        state = await engine.submit([request]).wait(30)
        outcome = [state.status.name, state.detail]
    else:
        endpoint = engine._links[peer].endpoint
        assert endpoint is not None
        for _ in range(500):  # bounded: the regions can arrive before the credit activation
            if endpoint.key is not None:
                break
            await asyncio.sleep(0.01)
        assert endpoint.key is not None
        for _ in range(500):
            if endpoint.state.name == "ACTIVE":
                break
            await asyncio.sleep(0.01)
        lease = WriteLease(
            session=endpoint.key.receiver_session.value,
            epoch=endpoint.epoch,
            qos_class=0,
            charge=((1, len(data) // (2 if spec["how"] == "undercharge" else 1)), (2, 1), (4, 1)),
        )
        rail = engine.rails[0]
        for _ in range(500):  # bounded: the regions can arrive before the rail attached
            if rail.ready(peer):
                break
            await asyncio.sleep(0.01)
        done = _tee_completions(rail)  # whoever polls (the engine's core on its timer too)
        rail.post(
            [
                SliceRequest(
                    wr_id=1,
                    opcode=Opcode.WRITE,
                    peer=peer,
                    local=memoryview(data),
                    remote_segment=spec["segment"],
                    remote_offset=spec["offset"],
                    length=len(data),
                    lease=lease,
                    write_id=1,
                )
            ],
            0,
        )
        for _ in range(1000):
            if done:
                break
            await asyncio.sleep(0.01)
        outcome = [done[0].status.name if done else "NONE", ""]
    conn.send(("done", outcome))
    with contextlib.suppress(EOFError, OSError):
        conn.recv()
    await engine.close()


def _tee_completions(device: Any, wr_id: int = 1) -> list[Any]:
    """Collect ``wr_id``'s completion from every ``poll`` of ``device``."""
    seen: list[Any] = []
    poll = device.poll

    def tee(max_entries: int, now_ns: int) -> list[Any]:
        out = poll(max_entries, now_ns)
        seen.extend(c for c in out if c.wr_id == wr_id)
        return out

    device.poll = tee
    return seen


async def _claim_liar(engine: Engine, peer: int, spec: dict[str, Any], data: bytes) -> list[str]:
    """Verbs only: a write into the liar's own region whose notice claims another range
    (``spec["claim"]``), the lie a one-sided write can tell that its registration cannot stop."""
    from tent_transport.devices import SliceRequest
    from tent_transport.devices.verbs._notice import NOTICE, NOTICE_SEGMENT, Notice

    rail = engine.rails[0]
    link = rail._links[peer]  # type: ignore[union-attr]

    def knows_region() -> bool:
        # the rkeys travel after the credit activation, so the QP can be ready before them (a
        # loaded run posted first and the device refused it: no region at that offset)
        state = rail.device._peers.get(peer)  # type: ignore[union-attr]
        regions = () if state is None else state.regions.get(spec["segment"], ())
        return any(r.offset <= spec["offset"] < r.offset + r.length for r in regions)

    for _ in range(1000):  # bounded: 10 s
        if rail.ready(peer) and knows_region():
            break
        await asyncio.sleep(0.01)
    slots = link.ring.length // NOTICE.size
    notice = bytearray(
        Notice(
            write_id=7,
            sequence=link.sequence,
            credited=False,
            segment=spec["segment"],
            offset=spec["claim"],
            length=len(data),
            data_bytes=0,
            qos_class=0,
            checksum=checksum(data),
            request_slots=0,
            staging_slots=0,
            consumer_slots=0,
        ).pack()
    )
    common = {"opcode": Opcode.WRITE, "peer": peer, "lease": None}
    chain = [
        SliceRequest(
            wr_id=1 << 62,
            local=memoryview(notice),
            remote_segment=NOTICE_SEGMENT,
            remote_offset=(link.sequence % slots) * NOTICE.size,
            length=NOTICE.size,
            write_id=link.sequence,
            **common,
        ),
        SliceRequest(
            wr_id=1,
            local=memoryview(data),
            remote_segment=spec["segment"],
            remote_offset=spec["offset"],
            length=len(data),
            write_id=7,
            **common,
        ),
    ]
    done = _tee_completions(rail.device)  # the engine's core polls the device too
    rail.device.post(chain, 0)  # type: ignore[union-attr]
    for _ in range(1000):
        if done:
            break
        await asyncio.sleep(0.01)
    return [done[0].status.name if done else "NONE", ""]


# ------------------------------------------------------------------------------ traces


class HandshakeSkippingRecorder:
    """A trace sink that starts its :class:`TraceRecorder` once the handshake is over.

    A trace starts at the spec's initial state, where the sender is already active at epoch 1
    (docs/traces.md): the receiver's activation send and the sender's activation receive are
    the handshake leading there, so recording begins right after them.
    """

    def __init__(self, recorder: Any, node: str) -> None:
        self.recorder = recorder
        self._node = node
        self._started = False
        self._stopped = False

    def stop(self) -> None:
        self._stopped = True

    def record(self, node: str, kind: str, fields: Any) -> None:
        if self._stopped:
            return
        if self._started:
            self.recorder.record(node, kind, fields)
            return
        message = fields.get("msg", {}) if hasattr(fields, "get") else {}
        if node == self._node and message.get("type") == "CapabilityActivation":
            self._started = True
            self.recorder.begin()


def traced(target: str, conn: Connection, spec: dict[str, Any]) -> None:
    """Run ``receiver`` or ``sender`` with a per-node trace written to ``spec["trace_path"]``."""
    from tent_models.trace import TraceRecorder
    from tent_spec.credit import CreditBounds

    bounds = CreditBounds(**spec["bounds"])
    node = "receiver" if target == "receiver" else f"sender:{spec['peer_id']}"
    recorder = TraceRecorder(bounds, senders=tuple(spec["trace_senders"]), nodes=(node,))
    spec = {**spec, "trace": HandshakeSkippingRecorder(recorder, node)}
    try:
        (receiver if target == "receiver" else sender)(conn, spec)
    finally:
        recorder.write(spec["trace_path"])


def traced_receiver(conn: Connection, spec: dict[str, Any]) -> None:
    traced("receiver", conn, spec)


def traced_sender(conn: Connection, spec: dict[str, Any]) -> None:
    traced("sender", conn, spec)
