"""The processes of one incast run: the receiver and the senders (``multiprocessing`` spawn).

Each worker gets a plain ``spec`` dict and a pipe, runs one :class:`~tent_transport.engine.Engine`
on its own asyncio loop and answers over the pipe. Blocks carry a header (sender, slot, seq)
and a body drawn from a small seeded pool, so the receiver checks every landed block against
what its sender wrote without the runner moving any data.

The receiver's occupancy is counted at its data plane (``ReceiverSide``): a write occupies a
request slot and its bytes from its admission until its consumer releases it (or the transport
aborts it), and a consumer slot from landing to release. Those are the resources credit mode
grants, counted the same way in every mode. On TCP the admission is the write's header,
before any byte lands; on the soft verbs device it is the write's notice, which the receiver
reads when the one-sided write's immediate completes, that is once its bytes have landed (the
verbs receiver learns of a write only then).

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
import contextlib
import cProfile
import faulthandler
import json
import os
import random
import resource
import signal
import socket
import struct
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from tent_sched import TaskStatus

from ..config import load_engine_config
from ..control import PskIdentity
from ..devices import Opcode, checksum
from ..dispatch import TransferPlan, TransferRequest
from ..engine import DataLanded, Engine, EngineOptions
from ..segments import Access
from ._netns import NetnsError, enter_netns

__all__ = ["engine_config", "receiver_main", "sender_main", "staged"]

KEY = b"tent-bench-incast-shared-key-32b"
RECEIVER = 1000
HEADER = struct.Struct("!IIQ")  # sender, slot, seq
MAX_SAMPLES = 4000
RESOURCES = ("request_slots", "data_bytes", "consumer_slots")


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


def _outstanding(engine: Engine) -> dict[str, int]:
    """The user keys' outstanding credit that is non-zero (granted, not reclaimed): the
    receiver's own staging key stays connected and keeps its live grant."""
    if engine.credit is None:
        return {}
    a = engine.credit.allocator.statistics()
    return {r.name.lower(): int(v) for r, v in a.user_outstanding.items() if v}


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


# ------------------------------------------------------------------------------ receiver


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
    ``<name>.prof`` per process: where a slow run's CPU went)."""
    folder = os.environ.get("TENT_INCAST_PROFILE")
    if not folder:
        asyncio.run(main)
        return
    profiler = cProfile.Profile()
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


# ------------------------------------------------------------------------------ sender


def _tcp_bytes(sock: socket.socket | None) -> int:
    """Bytes acked + received on a control socket (Linux ``tcp_info``; 0 elsewhere)."""
    if sock is None or not hasattr(socket, "TCP_INFO"):
        return 0
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 144)
    except OSError:
        return 0
    if len(info) < 136:
        return 0
    acked, received = struct.unpack_from("=QQ", info, 120)  # tcpi_bytes_acked, _received
    return int(acked + received)


def _name(sock: socket.socket | None, which: str) -> str:
    """A socket's local or peer host ("" when unknown)."""
    try:
        return str(getattr(sock, which)()[0]) if sock is not None else ""
    except OSError:
        return ""


def sender_main(conn: Connection, spec: dict[str, Any]) -> None:
    if not _enter(conn, spec.get("netns_tx", "")):
        return
    _diagnosable()
    _run(_sender(conn, spec), f"sender-{spec['peer_id']}")


async def _sender(conn: Connection, spec: dict[str, Any]) -> None:
    me, block, depth = spec["peer_id"], spec["block"], spec["depth"]
    _use_fabric(spec)
    host = spec.get("tx_address", "127.0.0.1")
    engine = Engine(
        load_engine_config(engine_config(spec, "sender")),
        EngineOptions(
            peer_id=me,
            identity=_identity(me, [RECEIVER]),
            control_address=(host, 0),
            rail_addresses=((host, 0),),
            peer_dead_after_s=30.0,
            trace=_trace(f"sender-{me}", spec),
            device=spec.get("device", "tcp"),
        ),
    )
    posted: dict[int, int] = {}  # seq -> when its (last) slice went to the rail

    def hook(rail: Any) -> None:
        # the engine has no post observer: wrap this rail instance's post
        post = rail.post

        def timed_post(slices: Any, now_ns: int) -> None:
            t = time.monotonic_ns()  # before the bytes can leave: a post starts the occupancy
            post(slices, now_ns)  # raises PostRefused (nothing posted): no timestamp then
            for s in slices:
                if s.opcode is Opcode.WRITE and len(s.local) >= HEADER.size:
                    posted[HEADER.unpack_from(s.local)[2]] = t

        rail.post = timed_post

    for rail in engine.rails:
        hook(rail)
    await engine.start()
    receiver = spec.get("rx_address", "127.0.0.1")
    peer = await engine.connect(receiver, spec["control_port"], expect_peer=RECEIVER)
    await engine.wait_regions(peer, lambda d: bool(d.regions), timeout=60)
    pool = [body(i, block) for i in range(pool_size(depth))]
    buffers = [engine.allocate(block) for _ in range(depth)]
    loop = asyncio.get_running_loop()
    pipe = _Pipe(conn, loop)
    conn.send(("ready",))
    command = await pipe.queue.get()
    if command[0] != "go":
        await engine.close()
        return
    cpu_go = _cpu_s()
    results: list[tuple[int, int, str, str, int, int]] = []  # t0, t_end, status, detail, seq, post
    seqs = iter(range(spec["blocks_per_sender"]))
    link = engine._links[peer]

    async def region() -> Any:
        # after a receiver restart: the new session's descriptors (bounded wait)
        return await engine.wait_regions(peer, lambda d: bool(d.regions), timeout=60)

    async def lane(slot: int) -> None:
        buf = buffers[slot]
        for seq in seqs:
            buf[HEADER.size :] = pool[pool_index(me, seq, depth)]
            HEADER.pack_into(buf, 0, me, slot, seq)
            try:
                d = await region()
            except TimeoutError:
                t = time.monotonic_ns()
                results.append((t, t, "NO_REGION", "", seq, 0))
                continue
            desc = d.regions[0]
            request = TransferRequest(
                opcode=Opcode.WRITE,
                local=buf,
                peer=peer,
                remote_segment=desc.segment_id,
                remote_offset=desc.offset + slot * block,
                length=block,
                plan=TransferPlan.STAGED if staged(spec, seq) else TransferPlan.DIRECT,
            )
            t0 = time.monotonic_ns()  # before credit acquisition: the submit itself
            try:
                handle = engine.submit([request])
                state = await handle.wait(min(30.0, spec["timeout_s"] / 3))
            except Exception as exc:  # a typed submit refusal is an outcome, not a crash
                t = time.monotonic_ns()
                results.append((t0, t, "SUBMIT_ERROR", type(exc).__name__, seq, 0))
                continue
            status = state.status
            end = time.monotonic_ns()
            detail = state.detail or ""
            if status is TaskStatus.PENDING:  # stuck: say at what, then give it up
                detail = f"timed out; backpressure {state.backpressure}"[:200]
                handle.cancel()
            results.append((t0, end, status.name, detail, seq, posted.pop(seq, 0)))
            if status is not TaskStatus.COMPLETED and spec["condition"] == "restart":
                await asyncio.sleep(0.05)  # the session is being replaced; no resubmit

    await asyncio.gather(*(lane(s) for s in range(depth)))
    stalls = stall_ns = 0
    if engine.gate is not None:
        for route in engine.gate.statistics().routes:
            stalls += route.stalls_ended
            stall_ns += route.stall_ns_total
    messages = repeated = 0
    if link.endpoint is not None:
        es = link.endpoint.statistics()
        messages = es.messages_sent + es.messages_received
        repeated = es.reports_repeated
    connection = link.client._connection
    frames = 0
    sock = None
    if connection is not None:
        cs = connection.statistics()
        frames = cs.frames_sent + cs.frames_received
        sock = connection._writer.get_extra_info("socket")
    conn.send(
        (
            "done",
            {
                "peer_id": me,
                "cpu_s": _cpu_s(),
                "cpu_run_s": _cpu_s() - cpu_go,
                "results": results,
                "stalls": stalls,
                "stall_ns": stall_ns,
                "credit_messages": messages,
                "control_frames": frames,
                "control_bytes": _tcp_bytes(sock),
                "reconnects": link.client.statistics().reconnects,
                "repeats_held": link.client.repeats_held,
                "reports_repeated": repeated,
                # where the control connection ran (netns: the two veth addresses)
                "control_sockname": _name(sock, "getsockname"),
                "control_peername": _name(sock, "getpeername"),
            },
        )
    )
    with contextlib.suppress(EOFError, OSError):
        await pipe.queue.get()
    await engine.close()
