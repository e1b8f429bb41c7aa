"""A sender process of one incast run: its engine, one lane per pipeline slot writing its
blocks to the receiver, and its report to the runner (per-block results, credit stalls, control
traffic).

A lane times each write from its submit (before credit is acquired) to its end, and notes when
its (last) slice went to the rail. What both kinds of process share (the block layout, the
engine configuration, the pipe, the start-up) is :mod:`._worker`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from multiprocessing.connection import Connection
from typing import Any

from tent_sched import TaskStatus

from ..config import load_engine_config
from ..devices import Opcode
from ..dispatch import TransferPlan, TransferRequest
from ..engine import Engine, EngineOptions
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
    staged,
)

__all__ = ["sender_main"]


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
            data_congestion_control=spec.get("congestion") or None,
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
