"""Issue 27 item 4 end to end: an authenticated peer flooding control frames is not read past
its frame budget, then closed and quarantined; another peer's control traffic goes on."""

from __future__ import annotations

import asyncio
import gc
import threading
import time

import pytest
from attackers import RawControl
from net_helpers import run, until
from procs import KEY
from tent_transport.control import (
    ControlClient,
    ControlServer,
    FrameKind,
    PskIdentity,
    encode_frame,
)
from tent_transport.control._connection import READ_BATCH
from test_control import _Hooks, _SenderHooks

RATE, BURST, FLOOD_S = 200.0, 200, 0.5


def _flood(port: int, claim: int, burst: bytes, stop: threading.Event, sent: list[int]) -> None:
    """Peer ``claim`` authenticates, then writes ``burst`` again and again until ``stop``, the
    receiver closes it or its window stays shut (20 s at most); ``sent[0]`` counts bursts."""
    raw = RawControl(port, claim=claim)
    raw.hello()
    raw.prove(KEY)
    raw.sock.settimeout(1.0)
    start = time.monotonic()
    try:
        while not stop.is_set() and time.monotonic() - start < 20:  # bounded
            raw.sock.sendall(burst)
            sent[0] += 1
    except OSError:
        pass  # closed by the receiver, or its window stayed shut
    raw.close()


def _server(hooks: _Hooks, peers: tuple[int, ...], flood_s: float) -> ControlServer:
    """A control server for ``peers`` (PSK ``KEY``) held to ``RATE`` and ``BURST``."""
    return ControlServer(
        PskIdentity(local_peer=2, keys=dict.fromkeys(peers, KEY)),
        credit=None,
        rails=lambda: [("127.0.0.1", 9)],
        hooks=hooks,
        control_rate=(RATE, BURST, flood_s),
    )


def test_a_control_flood_is_held_to_its_rate_then_quarantined_and_others_are_served() -> None:
    async def scenario() -> None:
        hooks = _Hooks()
        server = _server(hooks, (1, 3), FLOOD_S)
        _, port = await server.listen("127.0.0.1", 0)
        frame = encode_frame(FrameKind.CREDIT, b"\x80" * 8)  # a heartbeat's size
        bursts = [0]
        stop = threading.Event()
        flooder = asyncio.ensure_future(
            asyncio.to_thread(_flood, port, 1, frame * 500, stop, bursts)
        )
        await until(lambda: [s.peer for s in hooks.opened] == [1], what="the flooder's session")
        started = time.monotonic()
        flooder_session = hooks.opened[0]
        # another peer connects and is served meanwhile
        honest = ControlClient(
            PskIdentity(local_peer=3, keys={2: KEY}), "127.0.0.1", port, endpoint=None,
            hooks=_SenderHooks(),
        )  # fmt: skip
        await honest.start()
        await until(lambda: len(hooks.opened) == 2, what="the other session")
        await until(lambda: flooder_session.connection.closed, timeout=15, what="the flood's end")
        elapsed = time.monotonic() - started
        handled = flooder_session.connection.statistics().frames_received
        # never more than its budget: the burst, the rate and one batch (the 1 s: frames
        # handled before `started`)
        assert handled <= BURST + RATE * (elapsed + 1) + READ_BATCH
        assert handled < bursts[0] * 500  # the rest waited in the kernel, unread
        rate = flooder_session.connection.rate
        assert rate is not None
        # held back first, unread for real (about twice the flood bound), not closed at its
        # first excess
        assert rate.throttled > 1 and rate.throttled_s >= FLOOD_S and elapsed >= FLOOD_S
        assert flooder_session.connection.close_reason.startswith("control flood")
        assert "flooded 1" in hooks.log
        stats = server.statistics()
        assert stats.control_floods == 1 and stats.control_throttled > 0
        other = hooks.opened[1]
        assert not other.connection.closed  # the other peer was not touched
        assert other.connection.rate is not None and other.connection.rate.throttled == 0
        stop.set()
        await flooder
        await honest.close()
        await server.close()

    run(scenario(), timeout=60)


def _decoded_frames_held() -> int:
    """The most decoded frames one live list holds (a reader's batch of ``(kind, payload)``)."""
    most = 0
    for obj in gc.get_objects():
        head = obj[0] if type(obj) is list and obj else None
        if type(head) is tuple and len(head) == 2 and type(head[0]) is FrameKind:
            most = max(most, len(obj))
    return most


def test_a_peer_held_to_its_rate_costs_its_bytes_not_decoded_frames() -> None:
    """While a flooder waits for its frame budget, the read loop holds what it read as bytes
    and decodes one batch at a time: a 64 KiB read of heartbeats is about 5,000 frames, and
    decoded at once they were about 1 MiB of Python objects per flooding peer."""

    async def scenario() -> None:
        hooks = _Hooks()
        server = _server(hooks, (1,), 30.0)  # held back, not closed, for the whole test
        _, port = await server.listen("127.0.0.1", 0)
        frame = encode_frame(FrameKind.CREDIT, b"\x80" * 8)
        stop = threading.Event()
        flooder = asyncio.ensure_future(asyncio.to_thread(_flood, port, 1, frame * 5000, stop, [0]))
        await until(lambda: bool(hooks.opened), what="the flooder's session")
        connection = hooks.opened[0].connection
        rate = connection.rate
        assert rate is not None
        await until(lambda: rate.throttled >= 3, timeout=20, what="the flooder held back")
        # the read loop is parked in its pause now: what it holds is one batch at most
        assert not connection.closed
        assert _decoded_frames_held() <= READ_BATCH
        stop.set()
        await flooder
        await server.close()

    run(scenario(), timeout=60)


def test_an_engine_quarantines_a_control_flooder_while_an_honest_sender_streams() -> None:
    """Two authenticated senders; one floods heartbeats. The honest one's transfers all
    complete, the flooder is quarantined and cannot come back."""
    import os

    from procs import credit_config
    from tent_transport.config import load_engine_config
    from tent_transport.devices import Opcode
    from tent_transport.dispatch import TransferRequest
    from tent_transport.engine import EngineOptions, SyncEngine

    from tent_credit import Heartbeat, SessionId, encode
    from tent_sched import TaskStatus

    block = 64 << 10
    config = load_engine_config(credit_config("required", slots=4, block=block, batch=2))
    rx = SyncEngine(
        config,
        EngineOptions(
            peer_id=2,
            identity=PskIdentity(local_peer=2, keys={1: KEY, 3: KEY}),
            release_on_landing=True,
            control_rate=(RATE, BURST, FLOOD_S),
        ),
    )
    tx = SyncEngine(
        config, EngineOptions(peer_id=1, identity=PskIdentity(local_peer=1, keys={2: KEY}))
    )
    stop = threading.Event()
    try:
        host, port = rx.start()
        tx.start()
        peer = tx.connect(host, port)
        memory = bytearray(4 * block)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, len(memory))
        tx.wait_regions(peer, lambda d: bool(d.regions))
        beat = encode_frame(
            FrameKind.CREDIT, encode(Heartbeat(receiver_session_id=SessionId(1), epoch=1))
        )
        flooder = threading.Thread(
            target=_flood, args=(port, 3, beat * 500, stop, [0]), daemon=True
        )
        flooder.start()
        data = os.urandom(block)
        for i in range(40):  # bounded: the honest stream, while the flood runs
            request = TransferRequest(
                opcode=Opcode.WRITE, local=data, peer=peer, remote_segment=segment.segment_id,
                remote_offset=(i % 4) * block, length=block,
            )  # fmt: skip
            assert tx.submit([request]).result(30).status is TaskStatus.COMPLETED
        for _ in range(1500):  # bounded: the flooder's quarantine
            if 3 in rx._call(rx.engine.receiver.statistics).quarantined:
                break
            time.sleep(0.01)
        stats = rx._call(rx.engine.receiver.statistics)
        assert stats.quarantined == (3,)  # the flooder, and only it
        honest = rx._call(lambda: rx.engine.control.session_of(1))
        assert honest is not None and honest.connection.rate is not None
        assert honest.connection.rate.throttled == 0  # the honest sender is within its budget
        assert rx._call(rx.engine.control.statistics).control_floods == 1
        registry = rx.engine.registry  # the metrics count it too
        throttled = rx._call(
            lambda: registry.get_sample_value("tent_transport_control_throttled_total")
        )
        assert throttled is not None and throttled > 0
        floods = rx._call(lambda: registry.get_sample_value("tent_transport_control_floods_total"))
        assert floods == 1
        stop.set()
        flooder.join(10)
        again = RawControl(port, claim=3)  # a quarantined peer cannot come back:
        with pytest.raises(ConnectionError):  # refused at its hello, before any MAC
            again.hello()
        again.close()
    finally:
        stop.set()
        tx.close()
        rx.close()
