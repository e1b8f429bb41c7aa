"""Benchmark of the TCP transport on loopback (``tent bench transport``; JSON).

Usage: ``tent bench transport [--blocks 512] [--small 2000] [--seconds 2] [--no-tls]
[--rounds 1] [--no-uvloop]`` or ``python benchmarks/transport.py`` with the same options. TLS
needs ``trustme`` (test extra).

Two processes, one sender and one receiver, every figure measured in the same run:

* ``bare``: a plain ``socket.sendall`` loop into a ``recv_into`` loop moving the same 4 MiB
  blocks (the ceiling), and a 4 KiB ``sendall`` / 1-byte-ack ping-pong (µs per round trip);
  ``checksum_ceiling``: the same loop computing every block's CRC32C at both ends, as the
  engine's wire does, over the plain loop; and ``bare_landing``: that checksumming loop with
  its receiver landing each block where the engine's does (block ``i`` at place ``i % PLACES``
  of a region of ``PLACES`` blocks) instead of reusing one cache-warm buffer, and waking for
  :data:`LANDING_MARK` bytes at a time as the engine's receiver does;
* ``engine``: the engine with credit gating: a receiver of 8 blocks, grant-ahead at its adaptive
  default (the activation grants two blocks), release on landing, so credit really cycles;
  throughput,
  ``ratio`` against the bare loop, ``verified_ratio`` against the checksumming one (goal ≥ 0.9
  on two cores: the same bytes and checksums), ``landing_ratio`` against the loop that also
  lands where the engine does (what is left is the engine's own cost),
  credit stalls and control messages per transfer; ``uvloop_ratio``, the same with both
  processes on uvloop (when installed); and ``engine_tls``, the same with the data
  connections under TLS;
* ``engine_no_credit``: the same engine with credit disabled at both ends (no gate, no
  control frame): ``credit_ratio`` = engine / engine_no_credit, what credit itself costs on
  this path (the RFC's claim: nothing material);
* ``overhead``: 4 KiB writes submitted one at a time, submit → completion, µs per transfer
  against the bare ping-pong (on uvloop too, beside it), and without credit beside it.

Every throughput run moves at least ``--seconds`` of data at the bare loop's rate (its block
count is raised after a first, shorter bare run), so start-up weighs little on any figure.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import importlib.util
import json
import multiprocessing
import os
import socket
import ssl
import statistics
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypeVar

import click

from tent_transport.config import load_engine_config
from tent_transport.control import PskIdentity, TlsIdentity
from tent_transport.devices import Opcode, checksum
from tent_transport.devices._congestion import (
    apply_congestion,
    check_congestion,
    system_congestion,
)
from tent_transport.dispatch import TransferRequest
from tent_transport.engine import Engine, EngineOptions

_Command = TypeVar("_Command", bound=Callable[..., Any])

BLOCK = 4 << 20
SMALL = 4 << 10


PIPELINE = 64
"""Transfers the engine runs keep submitted (each of the receiver's 8 slots eight times over)."""
PLACES = 16
"""Blocks of the engine receiver's segment; write ``i`` lands at block ``i % PLACES``, so no two
of the (at most 8) writes in flight share a place. 64 MiB of 4 MiB blocks outgrow the caches
a single reused 4 MiB buffer stays in (docs/benchmarks.md#transport-landing)."""
LANDING_MARK = 2 << 20
"""The landing loop's receive low-water mark: the TCP transport's (``READ_MARK`` of
devices/tcp/_mark.py, docs/transport.md#transport-read-mark), so the loop wakes as rarely."""
KEY = b"benchmark-shared-key-0123456789!"
SPAWN = multiprocessing.get_context("spawn")


def congestion_option(
    help_text: str = "The data connections' TCP congestion control (default: the system's).",
) -> Callable[[_Command], _Command]:
    """The ``--congestion`` option of ``tent bench transport`` and ``incast`` and of the credit
    benchmarks: a name :func:`checked_congestion` accepts (``""``: the system's)."""
    return click.option(
        "--congestion",
        default="",
        callback=lambda _ctx, _param, name: checked_congestion(name),
        help=help_text,
    )


def engine_config(slots: int, block: int, credit: bool = True) -> dict[str, Any]:
    if not credit:
        return {"enable_runtime_queue": True, "receiver_credit": {"enabled": False}}
    return {
        "enable_runtime_queue": True,
        "receiver_credit": {
            "enabled": True,
            "mode": "required",
            "capacity": {
                "data_bytes": slots * block,
                "request_slots": slots,
                "staging_slots": slots,
                "consumer_slots": slots,
            },
            "grant": {
                "initial_grant": {"data_bytes": 2 * block, "request_slots": 2, "consumer_slots": 2}
            },
        },
    }


# ------------------------------------------------------------------------------ bare loops


def bare_receiver(  # noqa: PLR0917 (a spawned process's arguments)
    conn: Connection,
    total: int,
    small: int,
    verify: bool = False,
    congestion: str | None = None,
    places: int = 1,
    mark: int = 0,
) -> None:
    """Receive ``total`` bytes in whole blocks (each checksummed with ``verify``), then answer
    ``small`` 4 KiB messages with one byte each (``congestion``: the accepted socket's TCP
    congestion control, which it takes from the listener; ``None``: the system's). Block ``i``
    lands at block ``i % places`` of a region of ``places`` blocks; ``mark`` > 0: each read
    waits for that many bytes of the block, or for the rest of it (``SO_RCVLOWAT``)."""
    server = socket.create_server(("127.0.0.1", 0))
    apply_congestion(server, congestion)
    conn.send(server.getsockname()[1])
    peer, _ = server.accept()
    region = memoryview(bytearray(BLOCK * places))
    lowat = 1
    received = 0
    cpu = time.process_time()
    while received < total:
        size = min(BLOCK, total - received)
        place = received // BLOCK % places * BLOCK
        buffer = region[place : place + BLOCK]
        filled = 0
        while filled < size:
            if mark and min(mark, size - filled) != lowat:
                lowat = min(mark, size - filled)
                peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, lowat)
            n = peer.recv_into(buffer[filled:size])
            if not n:
                return
            filled += n
        if verify:
            checksum(buffer[:size])
        received += size
    if lowat != 1:
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
    peer.sendall(b"k")
    conn.send(time.process_time() - cpu)
    small_buffer = memoryview(bytearray(SMALL))
    for _ in range(small):
        got = 0
        while got < SMALL:
            got += peer.recv_into(small_buffer[got:])
        peer.sendall(b"k")
    peer.close()


def bare(
    blocks: int,
    small: int,
    *,
    verify: bool = False,
    congestion: str | None = None,
    places: int = 1,
    mark: int = 0,
) -> dict[str, float]:
    """The ceiling: ``sendall`` of 4 MiB blocks into ``recv_into``, and (``small`` > 0) a 4 KiB
    ping-pong. With ``verify`` both ends compute each block's CRC32C, as the engine's wire
    does (the sender for the header, the receiver to verify), so the loop carries that cost
    too; with ``places`` the receiver lands block ``i`` at block ``i % places`` of a region that
    large (the engine run's :data:`PLACES`) instead of reusing one buffer, and with ``mark``
    wakes for that many bytes at a time (:data:`LANDING_MARK`)."""
    total = blocks * BLOCK
    parent, child = SPAWN.Pipe()
    process = SPAWN.Process(
        target=bare_receiver, args=(child, total, small, verify, congestion, places, mark)
    )
    process.start()
    port = parent.recv()
    sock = socket.socket()
    apply_congestion(sock, congestion)  # before it connects (devices/_congestion.py)
    sock.connect(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload = os.urandom(BLOCK)
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(blocks):
        if verify:
            checksum(payload)
        sock.sendall(payload)
    assert sock.recv(1) == b"k"
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    receiver_cpu = parent.recv()
    out = {"throughput_mib_s": blocks * BLOCK / elapsed / 2**20}
    if blocks:
        out["sender_cpu_us_per_block"] = cpu / blocks * 1e6
        out["receiver_cpu_us_per_block"] = receiver_cpu / blocks * 1e6
    if small:
        message = os.urandom(SMALL)
        start = time.perf_counter()
        for _ in range(small):
            sock.sendall(message)
            assert sock.recv(1) == b"k"
        out["us_per_4kib"] = (time.perf_counter() - start) / small * 1e6
    sock.close()
    process.join(10)
    return out


# ------------------------------------------------------------------------------ engine


def _tls_files(directory: Path) -> dict[str, str]:
    import trustme  # noqa: PLC0415 - a test-extra dependency, needed only for the TLS figure

    ca = trustme.CA()
    files = {"ca": str(directory / "ca.pem")}
    ca.cert_pem.write_to_path(files["ca"])
    for name in ("sender", "receiver"):
        path = directory / f"{name}.pem"
        ca.issue_cert(f"{name}.tent").private_key_and_cert_chain_pem.write_to_path(str(path))
        files[name] = str(path)
    return files


def _identity(peer: int, other: int, tls: dict[str, str] | None) -> PskIdentity | TlsIdentity:
    if tls is None:
        return PskIdentity(local_peer=peer, keys={other: KEY})
    me = "sender" if peer == 1 else "receiver"
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.verify_mode = ssl.CERT_REQUIRED
    client = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    client.check_hostname = False
    for ctx in (server, client):
        ctx.load_cert_chain(tls[me])
        ctx.load_verify_locations(tls["ca"])
    return TlsIdentity(
        local_peer=peer,
        server_context=server,
        client_context=client,
        peer_names={1: "sender.tent", 2: "receiver.tent"},
    )


def _runner(use_uvloop: bool) -> asyncio.Runner:
    if not use_uvloop:
        return asyncio.Runner()
    import uvloop  # noqa: PLC0415 - optional at run time; the figure is skipped without it

    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


def engine_receiver(
    conn: Connection,
    slots: int,
    block: int,
    tls: dict[str, str] | None,
    use_uvloop: bool = False,
    *,
    credit: bool = True,
    congestion: str | None = None,
) -> None:
    async def run() -> None:
        options = EngineOptions(
            peer_id=2,
            identity=_identity(2, 1, tls),
            release_on_landing=True,
            data_tls=tls is not None,
            data_congestion_control=congestion,
        )
        engine = Engine(load_engine_config(engine_config(slots, block, credit)), options)
        address = await engine.start()
        segment = engine.register(bytearray(PLACES * block))
        conn.send((address, segment.segment_id))
        while 1 not in engine.sender_sessions():
            await asyncio.sleep(0.002)
        engine.expose(1, segment.segment_id, 0, PLACES * block)
        cpu = time.process_time()
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        conn.send(time.process_time() - cpu)  # the waiting thread spends none of it
        await engine.close()

    with _runner(use_uvloop) as runner:
        runner.run(run())


async def _engine_sender(
    address: tuple[str, int],
    segment: int,
    count: int,
    block: int,
    tls: dict[str, str] | None,
    *,
    sequential: bool,
    credit: bool = True,
    congestion: str | None = None,
) -> dict[str, float]:
    options = EngineOptions(
        peer_id=1,
        identity=_identity(1, 2, tls),
        data_tls=tls is not None,
        data_congestion_control=congestion,
    )
    engine = Engine(load_engine_config(engine_config(8, block, credit)), options)
    await engine.start()
    peer = await engine.connect(*address)
    await engine.wait_regions(peer, lambda d: bool(d.regions), timeout=30)
    payload = os.urandom(block)

    def request(i: int) -> TransferRequest:
        return TransferRequest(
            opcode=Opcode.WRITE,
            local=payload,
            peer=peer,
            remote_segment=segment,
            remote_offset=(i % PLACES) * block,
            length=block,
        )

    stalls = 0
    start, cpu = time.perf_counter(), time.process_time()
    if sequential:
        for i in range(count):
            await engine.submit([request(i)]).result(30)
    else:
        # a pipeline of at most PIPELINE submits (the admission queue bounds outstanding bytes
        # at 1 GiB by default, and a real sender keeps a bounded window too)
        handles: collections.deque[Any] = collections.deque()
        for i in range(count):
            if len(handles) >= PIPELINE:
                await handles.popleft().result(60)
            handle = engine.submit([request(i)])
            stalls += handle.status().backpressure is not None
            handles.append(handle)
        for handle in handles:
            await handle.result(60)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    endpoint = engine._links[peer].endpoint
    messages = 0
    if endpoint is not None:  # None: credit off, no control messages to count
        stats = endpoint.statistics()
        messages = stats.messages_sent + stats.messages_received
    await engine.close()
    return {
        "elapsed_s": elapsed,
        "throughput_mib_s": count * block / elapsed / 2**20,
        "us_per_transfer": elapsed / count * 1e6,
        "sender_cpu_us_per_transfer": cpu / count * 1e6,
        "credit_stalls": stalls,
        "control_messages_per_transfer": messages / count,
    }


def engine_run(
    count: int,
    block: int,
    *,
    tls: dict[str, str] | None = None,
    sequential: bool = False,
    use_uvloop: bool = False,
    credit: bool = True,
    congestion: str | None = None,
    receiver: Callable[..., None] = engine_receiver,
) -> dict[str, float]:
    """One engine run: a receiver process and this process as the sender, both on the same
    event loop implementation (asyncio's, or uvloop's with ``use_uvloop``), with credit at
    both ends or (``credit=False``) at neither; ``congestion``: the data connections' TCP
    congestion control (``None``: the system's). ``receiver``: the receiver process's target,
    :func:`engine_receiver` or a picklable function that calls it (a profiler around it,
    benchmarks/credit_calls.py)."""
    parent, child = SPAWN.Pipe()
    process = SPAWN.Process(
        target=receiver,
        args=(child, 8, block, tls, use_uvloop),
        kwargs={"credit": credit, "congestion": congestion},
    )
    process.start()
    address, segment = parent.recv()
    try:
        with _runner(use_uvloop) as runner:
            out = runner.run(
                _engine_sender(
                    tuple(address),
                    segment,
                    count,
                    block,
                    tls,
                    sequential=sequential,
                    credit=credit,
                    congestion=congestion,
                )
            )
    finally:
        parent.send("exit")
        process.join(10)
    if parent.poll(0):  # the receiver's CPU, sent as it was told to exit (the pipe keeps it)
        out["receiver_cpu_us_per_transfer"] = parent.recv() / count * 1e6
    return out


def _median_index(values: list[float]) -> int:
    order = sorted(range(len(values)), key=values.__getitem__)
    return order[(len(order) - 1) // 2]


def _long_enough(
    loop_run: Callable[..., dict[str, float]], blocks: int, seconds: float
) -> tuple[int, dict[str, float]]:
    """A block count whose bare run (``loop_run``: :func:`bare` as the run configures it) lasts
    at least ``seconds``, and that run."""
    plain = loop_run(blocks, 0)
    elapsed = blocks * BLOCK / (plain["throughput_mib_s"] * 2**20)
    while elapsed < seconds:
        blocks = int(blocks * seconds / max(elapsed, 1e-3) * 1.1) + 1
        plain = loop_run(blocks, 0)
        elapsed = blocks * BLOCK / (plain["throughput_mib_s"] * 2**20)
    return blocks, plain


def run(
    *,
    blocks: int = 512,
    small: int = 2000,
    tls: bool = True,
    rounds: int = 1,
    use_uvloop: bool = True,
    seconds: float = 2.0,
    congestion: str | None = None,
) -> dict[str, Any]:
    """Every figure of the benchmark, measured in one run (the module docstring).

    Each round measures its own baselines right before the engine runs it is compared with
    (these machines are shared and noisy); ratios are per round, the reported ones medians.
    ``congestion``: every socket's TCP congestion control, the bare loop's and the engine's
    (``None``: the system's, docs/benchmarks.md#control-admission-flush).
    """
    if rounds < 1:
        raise click.BadParameter(f"rounds must be >= 1, got {rounds}")
    loop_run = functools.partial(bare, congestion=congestion)
    engine_at = functools.partial(engine_run, congestion=congestion)
    uvloop_on = use_uvloop and importlib.util.find_spec("uvloop") is not None
    rows: list[dict[str, Any]] = []
    for _ in range(rounds):
        blocks, plain = _long_enough(loop_run, blocks, seconds)
        checked = loop_run(blocks, 0, verify=True)
        verified = checked["throughput_mib_s"]
        landing = loop_run(blocks, 0, verify=True, places=PLACES, mark=LANDING_MARK)
        engine = engine_at(blocks, BLOCK)
        plain_engine = engine_at(blocks, BLOCK, credit=False)
        row: dict[str, Any] = {
            "bare_mib_s": plain["throughput_mib_s"],
            "bare_sender_cpu_us_per_block": plain["sender_cpu_us_per_block"],
            "bare_receiver_cpu_us_per_block": plain["receiver_cpu_us_per_block"],
            "bare_verified_mib_s": verified,
            "bare_verified_receiver_cpu_us_per_block": checked["receiver_cpu_us_per_block"],
            "engine": engine,
            "ratio": engine["throughput_mib_s"] / plain["throughput_mib_s"],
            "checksum_ceiling": verified / plain["throughput_mib_s"],
            "verified_ratio": engine["throughput_mib_s"] / verified,
            "bare_landing_mib_s": landing["throughput_mib_s"],
            "bare_landing_receiver_cpu_us_per_block": landing["receiver_cpu_us_per_block"],
            "landing_ratio": engine["throughput_mib_s"] / landing["throughput_mib_s"],
            "engine_no_credit": plain_engine,
            "credit_ratio": engine["throughput_mib_s"] / plain_engine["throughput_mib_s"],
        }
        if uvloop_on:
            fast = engine_at(blocks, BLOCK, use_uvloop=True)
            row["engine_uvloop"] = fast
            row["uvloop_ratio"] = fast["throughput_mib_s"] / plain["throughput_mib_s"]
        rows.append(row)
    middle = rows[_median_index([r["ratio"] for r in rows])]
    ping = loop_run(0, small)
    out: dict[str, Any] = {
        "benchmark": "transport",
        "block_bytes": BLOCK,
        "blocks": blocks,
        "rounds": rounds,
        "receiver_slots": 8,
        "grant": "grant-ahead, adaptive chunk; activation grant 2 blocks",
        "congestion": congestion or system_congestion(),
        "bare": {
            "throughput_mib_s": middle["bare_mib_s"],
            "sender_cpu_us_per_block": middle["bare_sender_cpu_us_per_block"],
            "receiver_cpu_us_per_block": middle["bare_receiver_cpu_us_per_block"],
            "us_per_4kib": ping["us_per_4kib"],
            "verified_mib_s": middle["bare_verified_mib_s"],
            "verified_receiver_cpu_us_per_block": middle["bare_verified_receiver_cpu_us_per_block"],
            "landing_mib_s": middle["bare_landing_mib_s"],
            "landing_receiver_cpu_us_per_block": middle["bare_landing_receiver_cpu_us_per_block"],
        },
        "engine": middle["engine"],
        "ratio": middle["ratio"],
        "goal_ratio": 0.9,
        # what the bare loop keeps when it also checksums every block at both ends
        "checksum_ceiling": statistics.median(r["checksum_ceiling"] for r in rows),
        # the engine against the loop that checksums too: the same work but the engine's own
        "verified_ratio": statistics.median(r["verified_ratio"] for r in rows),
        "goal_verified_ratio": 0.9,
        # the engine against that loop with its receiver landing where the engine's does
        # (PLACES blocks, not one warm buffer): what is left is the engine's own cost
        "landing_ratio": statistics.median(r["landing_ratio"] for r in rows),
        "engine_no_credit": middle["engine_no_credit"],
        # credit at both ends against none, same path, same round (RFC criterion 7's claim)
        "credit_ratio": statistics.median(r["credit_ratio"] for r in rows),
    }
    if uvloop_on:
        out["uvloop_ratio"] = statistics.median(r["uvloop_ratio"] for r in rows)
    if rounds > 1:
        out["per_round"] = rows
    if tls:
        with tempfile.TemporaryDirectory() as directory:
            secured = engine_at(blocks, BLOCK, tls=_tls_files(Path(directory)))
        out["engine_tls"] = secured
        out["tls_ratio"] = secured["throughput_mib_s"] / middle["bare_mib_s"]
    overhead = engine_at(small, SMALL, sequential=True)
    plain_overhead = engine_at(small, SMALL, sequential=True, credit=False)
    out["overhead"] = {
        "engine_us_per_4kib": overhead["us_per_transfer"],
        "bare_us_per_4kib": ping["us_per_4kib"],
        "ratio": overhead["us_per_transfer"] / ping["us_per_4kib"],
        "goal_ratio": 5.0,
        "sender_cpu_us_per_transfer": overhead["sender_cpu_us_per_transfer"],
        "receiver_cpu_us_per_transfer": overhead.get("receiver_cpu_us_per_transfer", 0.0),
        "control_messages_per_transfer": overhead["control_messages_per_transfer"],
        "no_credit_us_per_4kib": plain_overhead["us_per_transfer"],
        "no_credit_ratio": plain_overhead["us_per_transfer"] / ping["us_per_4kib"],
        "no_credit_sender_cpu_us_per_transfer": plain_overhead["sender_cpu_us_per_transfer"],
        "no_credit_receiver_cpu_us_per_transfer": plain_overhead.get(
            "receiver_cpu_us_per_transfer", 0.0
        ),
    }
    if uvloop_on:
        fast = engine_at(small, SMALL, sequential=True, use_uvloop=True)
        out["overhead"]["uvloop_us_per_4kib"] = fast["us_per_transfer"]
        out["overhead"]["uvloop_ratio"] = fast["us_per_transfer"] / ping["us_per_4kib"]
    out["load_1m"] = os.getloadavg()[0]
    return out


@click.group("bench", context_settings={"help_option_names": ["-h", "--help"]})
def bench() -> None:
    """Benchmarks of the transport (JSON, baselines measured in the same run)."""


@bench.command("transport", context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--blocks",
    type=click.IntRange(min=1),
    default=512,
    show_default=True,
    help="4 MiB writes per run (raised until the bare run lasts --seconds).",
)
@click.option(
    "--small",
    type=click.IntRange(min=1),
    default=2000,
    show_default=True,
    help="4 KiB round trips.",
)
@click.option(
    "--seconds", type=click.FloatRange(min=0.0), default=2.0, show_default=True,
    help="Shortest bare run: the block count is raised until it lasts this long.",
)  # fmt: skip
@click.option("--tls/--no-tls", default=True, show_default=True, help="Also measure TLS data.")
@click.option(
    "--rounds", type=click.IntRange(min=1), default=1, show_default=True,
    help="Interleaved rounds of baselines and engine runs (ratios: their medians).",
)  # fmt: skip
@click.option(
    "--uvloop/--no-uvloop", "use_uvloop", default=True, show_default=True,
    help="Also run the engine on uvloop (both processes), when it is installed.",
)  # fmt: skip
@congestion_option("Every socket's TCP congestion control, e.g. cubic (default: the system's).")
def transport_command(
    *,
    blocks: int,
    small: int,
    seconds: float,
    tls: bool,
    rounds: int,
    use_uvloop: bool,
    congestion: str,
) -> None:
    """Engine vs a bare socket loop on loopback: throughput, TLS, per-transfer overhead."""
    figures = run(
        blocks=blocks,
        small=small,
        tls=tls,
        rounds=rounds,
        use_uvloop=use_uvloop,
        seconds=seconds,
        congestion=congestion or None,
    )
    click.echo(json.dumps(figures, indent=1))


def checked_congestion(name: str) -> str:
    """What a ``--congestion`` option was given (``""``: the system's), if this process may use
    it here; else :class:`click.BadParameter` (``tent bench transport`` and ``incast``)."""
    try:
        check_congestion(name or None)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return name
