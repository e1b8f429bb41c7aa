"""The engine in one process: the synchronous facade, credit stalls, release, READ, metrics."""

from __future__ import annotations

import os
import time
import urllib.request

import attrs
import memory_transport
import pytest
from net_helpers import data_server, write_request
from procs import KEY, credit_config, free_ports
from tent_transport.config import load_engine_config
from tent_transport.control import PskIdentity
from tent_transport.devices import Opcode
from tent_transport.dispatch import TransferPlan, TransferRequest
from tent_transport.engine import EngineOptions, SyncEngine
from tent_transport.errors import InvalidArgument, LocalProtocolError, TransferFailed
from tent_transport.segments import Access

from tent_credit import BackpressureSource, CreditResource
from tent_sched import TaskStatus

BLOCK = 64 << 10


memory_transport.install()
DEVICES = pytest.mark.parametrize("device", ["tcp", "memory"])
"""The engine's tests that no transport's specifics decide run on TCP and on the in-memory
transport built from docs/transport.md ("Adding a transport")."""


def _pair(mode: str, *, slots: int, metrics_port: int | None = None, device: str = "tcp"):
    config = load_engine_config(credit_config(mode, slots=slots, block=BLOCK, batch=1))
    rx = SyncEngine(
        config,
        EngineOptions(
            peer_id=2,
            identity=PskIdentity(local_peer=2, keys={1: KEY}),
            metrics_port=metrics_port,
            device=device,
        ),
    )
    tx = SyncEngine(
        config,
        EngineOptions(peer_id=1, identity=PskIdentity(local_peer=1, keys={2: KEY}), device=device),
    )
    host, port = rx.start()
    tx.start()
    peer = tx.connect(host, port)
    return rx, tx, peer


@DEVICES
def test_credit_stall_keeps_handles_pending_with_backpressure_until_release(device: str) -> None:
    rx, tx, peer = _pair("required", slots=2, device=device)
    try:
        memory = bytearray(8 * BLOCK)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, len(memory))
        tx.wait_regions(peer, lambda d: bool(d.regions))
        blocks = [os.urandom(BLOCK) for _ in range(4)]
        handles = [
            tx.submit_nowait([write_request(peer, segment.segment_id, i * BLOCK, b)])
            for i, b in enumerate(blocks)
        ]
        landed = [rx.next_landed(10), rx.next_landed(10)]  # the receiver's two slots
        stalled = handles[2].wait(0.3)
        assert stalled.pending  # a stall is not an error, and not a hang
        assert stalled.backpressure is not None
        assert stalled.backpressure.source is BackpressureSource.RECEIVER_CREDIT
        assert CreditResource.DATA_BYTES in stalled.backpressure.exhausted
        info = tx.pressure(peer)  # the connector's non-blocking query
        assert info is not None and info.source is BackpressureSource.RECEIVER_CREDIT
        for event in landed:
            assert rx.release(event)
        for _ in range(2):
            rx.release(rx.next_landed(10))
        for handle, block, offset in zip(handles, blocks, range(0, 4 * BLOCK, BLOCK), strict=True):
            assert handle.result(10).status is TaskStatus.COMPLETED
            assert memory[offset : offset + BLOCK] == block
        assert tx.pressure(peer) is None
        # Grant-ahead (version 2): credit granted ahead of writes that never came goes back once
        # it has been idle for the sender's hold (20 usage intervals by default); wait for that
        # report, bounded, then every byte and slot is back with the receiver.
        allocator = rx.engine.credit.allocator  # type: ignore[union-attr]
        deadline = time.monotonic() + 10
        while set(allocator.statistics().outstanding.values()) != {0}:
            assert time.monotonic() < deadline, allocator.statistics().outstanding
            time.sleep(0.01)
    finally:
        tx.close()
        rx.close()


@DEVICES
def test_a_top_up_made_when_writes_land_reaches_the_sender_while_the_consumer_holds_them(
    device: str,
) -> None:
    # Grant-ahead tops a key up as its writes land (are admitted), from capacity nobody holds;
    # that update must leave at once, not wait for the consumer's next release (which may
    # never come): the sender's next writes then go ahead while every landed block is held.
    rx, tx, peer = _pair("required", slots=8, device=device)
    try:
        memory = bytearray(8 * BLOCK)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, len(memory))
        tx.wait_regions(peer, lambda d: bool(d.regions))
        first = [
            tx.submit_nowait(
                [write_request(peer, segment.segment_id, i * BLOCK, os.urandom(BLOCK))]
            )
            for i in range(4)
        ]
        for handle in first:
            assert handle.result(10).status is TaskStatus.COMPLETED
        held = [rx.next_landed(10) for _ in range(4)]  # the consumer keeps them all
        blocks = [os.urandom(BLOCK) for _ in range(4)]
        second = [
            tx.submit_nowait([write_request(peer, segment.segment_id, (4 + i) * BLOCK, b)])
            for i, b in enumerate(blocks)
        ]
        for handle, block, i in zip(second, blocks, range(4, 8), strict=True):
            assert handle.result(10).status is TaskStatus.COMPLETED
            assert memory[i * BLOCK : (i + 1) * BLOCK] == block
        assert len(held) == 4 and rx.engine.receiver.statistics().released == 0
    finally:
        tx.close()
        rx.close()


def test_read_and_a_write_outside_the_exposure_fail_typed() -> None:
    rx, tx, peer = _pair("disabled", slots=4)
    try:
        memory = bytearray(os.urandom(4 * BLOCK))
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, 2 * BLOCK, Access.READ | Access.WRITE)
        tx.wait_regions(peer, lambda d: bool(d.regions))
        local = bytearray(BLOCK)
        read = TransferRequest(
            opcode=Opcode.READ,
            local=local,
            peer=peer,
            remote_segment=segment.segment_id,
            remote_offset=BLOCK,
            length=BLOCK,
        )
        assert tx.submit([read]).result(10).status is TaskStatus.COMPLETED
        assert local == memory[BLOCK : 2 * BLOCK]
        outside = write_request(peer, segment.segment_id, 3 * BLOCK, b"x" * BLOCK)
        with pytest.raises(TransferFailed) as failure:
            tx.submit([outside]).result(10)
        assert failure.value.status == "failed"
        assert rx.engine.quarantined() == (1,)
    finally:
        tx.close()
        rx.close()


@DEVICES
def test_a_write_outside_the_exposure_or_past_credit_fails_typed_and_quarantines(
    device: str,
) -> None:
    rx, tx, peer = _pair("required", slots=2, device=device)
    try:
        memory = bytearray(4 * BLOCK)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, 2 * BLOCK)
        tx.wait_regions(peer, lambda d: bool(d.regions))
        inside = os.urandom(BLOCK)
        tx.submit([write_request(peer, segment.segment_id, 0, inside)]).result(10)
        assert rx.release(rx.next_landed(10))
        assert memory[:BLOCK] == inside
        outside = write_request(peer, segment.segment_id, 3 * BLOCK, b"x" * BLOCK)
        with pytest.raises(TransferFailed):
            tx.submit([outside]).result(10)
        assert rx.engine.quarantined() == (1,)
        assert memory[3 * BLOCK :] == bytes(BLOCK)  # nothing landed outside the exposure
    finally:
        tx.close()
        rx.close()


@DEVICES
def test_metrics_are_served_over_http_from_real_completions(device: str) -> None:
    (port,) = free_ports(1)
    rx, tx, peer = _pair("required", slots=4, metrics_port=port, device=device)
    try:
        memory = bytearray(4 * BLOCK)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, len(memory))
        tx.wait_regions(peer, lambda d: bool(d.regions))
        deadline = time.monotonic_ns() + 10**10
        request = TransferRequest(
            opcode=Opcode.WRITE,
            local=os.urandom(BLOCK),
            peer=peer,
            remote_segment=segment.segment_id,
            remote_offset=0,
            length=BLOCK,
            deadline_ns=deadline,
        )
        tx.submit([request]).result(10)
        rx.release(rx.next_landed(10))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        assert "tent_credit_" in text  # the receiver's allocator is exported
        assert 'tent_transport_receiver_writes_total{outcome="landed"} 1.0' in text
        sender_text = tx.engine.registry  # the sender's deadline histogram saw the write
        from prometheus_client import generate_latest

        assert b"tent_deadline_mlu_permille_count 1.0" in generate_latest(sender_text)
    finally:
        tx.close()
        rx.close()


def test_the_metrics_endpoint_is_local_by_default_and_closes_with_the_engine() -> None:
    def engine(port: int) -> SyncEngine:
        config = load_engine_config(credit_config("required", slots=2, block=BLOCK, batch=1))
        identity = PskIdentity(local_peer=2, keys={1: KEY})
        return SyncEngine(config, EngineOptions(peer_id=2, identity=identity, metrics_port=port))

    first = engine(0)  # any free port
    first.start()
    assert first.engine.metrics_address is not None
    host, port = first.engine.metrics_address
    assert host == "127.0.0.1" and port > 0  # not every interface unless asked
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        assert b"tent_transport_" in reply.read()
    first.close()
    # closed with the engine: the port is free, and a restarted engine serves on it again
    second = engine(port)
    second.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            assert reply.status == 200
    finally:
        second.close()


@pytest.mark.parametrize(
    "bad",
    [
        {"metrics_port": -1},
        {"metrics_port": 70000},
        {"metrics_port": "9100"},
        {"metrics_address": ""},
    ],
)
def test_bad_metrics_options_are_refused(bad: dict[str, object]) -> None:
    identity = PskIdentity(local_peer=2, keys={1: KEY})
    with pytest.raises(ValueError, match="metrics_"):
        EngineOptions(peer_id=2, identity=identity, **bad)  # type: ignore[arg-type]


@DEVICES
def test_misuse_of_the_facade_is_refused_typed_and_a_closed_engine_says_so(device: str) -> None:
    rx, tx, peer = _pair("required", slots=2, device=device)
    try:
        memory = bytearray(BLOCK)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, len(memory))
        tx.wait_regions(peer, lambda d: bool(d.regions))
        one = write_request(peer, segment.segment_id, 0, b"x" * 64)
        with pytest.raises(InvalidArgument):
            tx.submit(one)  # type: ignore[arg-type]  # a request, not a batch
        with pytest.raises(InvalidArgument):
            tx.submit_nowait(iter([one]))  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            rx.release("not an event")  # type: ignore[arg-type]
        for host, port in (("127.0.0.1", 70000), ("127.0.0.1", 0), ("", 1), (None, 1)):
            with pytest.raises(InvalidArgument):
                tx.connect(host, port)  # type: ignore[arg-type]
        assert tx.engine.core.statistics().submitted_total == 0  # nothing was submitted
        tx.submit([one]).result(10)  # and the engine still works
        assert rx.release(rx.next_landed(10))
    finally:
        tx.close()
        rx.close()
    tx.close()  # a second close does nothing
    for call in (
        lambda: tx.submit([one]),
        lambda: tx.submit_nowait([one]),
        lambda: tx.connect("127.0.0.1", 1),
        lambda: rx.register(bytearray(8)),
        lambda: rx.next_landed(1),
    ):
        with pytest.raises(LocalProtocolError, match="closed"):
            call()


def test_a_staged_write_to_a_receiver_without_a_staging_pool_waits_and_nobody_is_quarantined() -> (
    None
):
    rx, tx, peer = _pair("required", slots=4)  # capacity names 4 STAGING_SLOTS; no pool
    try:
        memory = bytearray(BLOCK)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, len(memory))
        tx.wait_regions(peer, lambda d: bool(d.regions))
        staged = attrs.evolve(
            write_request(peer, segment.segment_id, 0, os.urandom(4096)), plan=TransferPlan.STAGED
        )
        handle = tx.submit([staged])
        state = handle.wait(1)
        # credit never promised a slot the receiver lacks: the write waits, typed
        assert state.status is TaskStatus.PENDING
        assert state.backpressure is not None
        assert CreditResource.STAGING_SLOTS in state.backpressure.exhausted
        assert rx.engine.receiver.statistics().quarantined == ()
        # the sender was not punished: once the staged write is withdrawn, a direct one lands
        assert handle.cancel()
        tx.submit([write_request(peer, segment.segment_id, 0, b"ok" * 32)]).result(10)
        assert memory[:64] == b"ok" * 32
    finally:
        tx.close()
        rx.close()


def test_a_lost_data_connection_restarts_the_session_and_work_goes_on() -> None:
    rx, tx, peer = _pair("required", slots=4)
    try:
        memory = bytearray(4 * BLOCK)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, len(memory))
        first = tx.wait_regions(peer, lambda d: bool(d.regions))
        tx.submit([write_request(peer, segment.segment_id, 0, b"a" * BLOCK)]).result(10)
        rx.release(rx.next_landed(10))
        # the network drops the data connection (the control connection stays up)
        tx._call(tx.engine.rails[0]._peers[peer].close)

        def new_session() -> bool:
            ps = rx.engine.control.session_of(1)
            return ps is not None and ps.session != first.session

        for _ in range(1000):  # bounded: the sender restarts its session
            if rx._call(new_session):
                break
            time.sleep(0.01)
        rx.expose(1, segment.segment_id, 0, len(memory))
        tx.wait_regions(peer, lambda d: d.session != first.session and bool(d.regions))
        data = os.urandom(BLOCK)
        assert (
            tx.submit([write_request(peer, segment.segment_id, BLOCK, data)]).result(10).status
            is TaskStatus.COMPLETED
        )
        assert memory[BLOCK : 2 * BLOCK] == data
    finally:
        tx.close()
        rx.close()


def _fixed_pair(window: int = 2) -> tuple[SyncEngine, SyncEngine, int]:
    """A fixed-window sender (OPTIONAL, legacy ``window``) and a receiver offering no credit."""
    rx = SyncEngine(
        load_engine_config(credit_config("disabled")),
        EngineOptions(peer_id=2, identity=PskIdentity(local_peer=2, keys={1: KEY})),
    )
    sender_config = {
        "enable_runtime_queue": True,
        "receiver_credit": {"enabled": True, "mode": "optional", "legacy_window": window},
    }
    tx = SyncEngine(
        load_engine_config(sender_config),
        EngineOptions(peer_id=1, identity=PskIdentity(local_peer=1, keys={2: KEY})),
    )
    host, port = rx.start()
    peer = tx.connect(host, port)
    return rx, tx, peer


def _until(what: str, predicate: object) -> None:
    assert callable(predicate)
    for _ in range(1500):  # bounded
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_new_session_whose_data_connection_fails_ends_submits_typed_then_recovers() -> None:
    """A restarted session whose data connection cannot be opened (the receiver's data
    listener refuses) must not leave a submit pending forever: the sender restarts the session
    and the work ends FAILED; once the listener is back, new work completes."""
    rx, tx, peer = _fixed_pair()
    try:
        memory = bytearray(4 * BLOCK)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, len(memory))
        first = tx.wait_regions(peer, lambda d: bool(d.regions))
        assert tx.submit([write_request(peer, segment.segment_id, 0, b"a" * BLOCK)]).result(10)
        server = data_server(rx.engine)
        host, port = server.address

        async def stop_listening() -> None:
            assert server._server is not None
            server._server.close()

        rx._run(stop_listening())
        tx._call(tx.engine.rails[0]._peers[peer].close)  # the old data connection is lost

        def new_session() -> bool:
            ps = rx.engine.control.session_of(1)
            return ps is not None and ps.session != first.session

        _until("a new control session", lambda: rx._call(new_session))
        state = tx.submit([write_request(peer, segment.segment_id, BLOCK, b"b" * BLOCK)]).wait(20)
        assert state.status is TaskStatus.FAILED, state  # typed, never pending forever

        async def listen_again() -> None:
            await server.listen(host, port)

        rx._run(listen_again())
        _until("a data connection", lambda: tx._call(lambda: tx.engine.rails[0].ready(peer)))
        data = os.urandom(BLOCK)
        for _ in range(50):  # bounded: a session may still be replaced once meanwhile
            ps = rx._call(lambda: rx.engine.control.session_of(1))
            if ps is None:
                time.sleep(0.05)
                continue
            rx.expose(1, segment.segment_id, 0, len(memory))
            tx.wait_regions(peer, lambda d, s=ps.session: d.session == s and bool(d.regions))
            state = tx.submit([write_request(peer, segment.segment_id, 2 * BLOCK, data)]).wait(20)
            if state.status is TaskStatus.COMPLETED:
                break
        assert state.status is TaskStatus.COMPLETED, state
        assert memory[2 * BLOCK : 3 * BLOCK] == data
    finally:
        tx.close()
        rx.close()


def test_work_queued_behind_the_fixed_window_fails_with_its_session_not_on_the_next() -> None:
    """A fixed-window sender's transfer still queued behind its window when the session is
    replaced (the receiver restarted) names the old session's descriptors: posted on the new
    session, before the receiver exposed anything to it, the receiver refuses it and
    quarantines an honest sender (which can then never reconnect: every later submit would
    wait forever). It ends FAILED with its session instead, and the sender stays admitted."""
    rx, tx, peer = _fixed_pair(window=1)
    try:
        memory = bytearray(4 * BLOCK)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, len(memory))
        tx.wait_regions(peer, lambda d: bool(d.regions))
        sid = segment.segment_id
        host, port = rx.engine.address
        rx.close()  # the receiver goes away
        _until("the sender to see it", lambda: not tx._call(lambda: tx.engine.connected(peer)))
        # while it is away: one transfer takes the window (its slice waits for a connection),
        # the next queues behind it; both name the old session's region
        dispatched = tx.submit([write_request(peer, sid, 0, b"a" * BLOCK)])
        queued = tx.submit([write_request(peer, sid, BLOCK, b"b" * BLOCK)])
        rx = SyncEngine(
            load_engine_config(credit_config("disabled")),
            EngineOptions(
                peer_id=2,
                identity=PskIdentity(local_peer=2, keys={1: KEY}),
                control_address=(host, port),
            ),
        )
        rx.start()  # restarted on the same control port, nothing exposed yet
        memory = bytearray(4 * BLOCK)
        assert rx.register(memory).segment_id == sid  # the old descriptors would resolve
        states = [dispatched.wait(20), queued.wait(20)]
        assert [s.status for s in states] == [TaskStatus.FAILED, TaskStatus.FAILED], states
        assert "session replaced" in states[1].detail, states[1]
        assert rx._call(rx.engine.quarantined) == ()  # nothing of the old session was posted
        assert rx._call(lambda: rx.engine.receiver.statistics().refused) == 0
        ps = None
        for _ in range(1500):  # bounded
            ps = rx._call(lambda: rx.engine.control.session_of(1))
            if ps is not None:
                break
            time.sleep(0.01)
        assert ps is not None
        rx.expose(1, sid, 0, len(memory))
        tx.wait_regions(peer, lambda d: d.session == ps.session and bool(d.regions))
        data = os.urandom(BLOCK)
        state = tx.submit([write_request(peer, sid, 2 * BLOCK, data)]).wait(20)
        assert state.status is TaskStatus.COMPLETED, state  # new work proceeds
        assert memory[2 * BLOCK : 3 * BLOCK] == data
    finally:
        tx.close()
        rx.close()


def test_a_dead_peers_work_ends_failed_and_new_submits_to_it_are_refused() -> None:
    """Declared dead (no session for ``peer_dead_after_s``), a peer's queued and dispatched
    work ends FAILED and a new submit raises: nothing waits for a session that may never come."""
    rx = SyncEngine(
        load_engine_config(credit_config("disabled")),
        EngineOptions(peer_id=2, identity=PskIdentity(local_peer=2, keys={1: KEY})),
    )
    tx = SyncEngine(
        load_engine_config(
            {
                "enable_runtime_queue": True,
                "receiver_credit": {"enabled": True, "mode": "optional", "legacy_window": 1},
            }
        ),
        EngineOptions(
            peer_id=1, identity=PskIdentity(local_peer=1, keys={2: KEY}), peer_dead_after_s=0.2
        ),
    )
    rx_open = True
    try:
        host, port = rx.start()
        peer = tx.connect(host, port)
        memory = bytearray(2 * BLOCK)
        segment = rx.register(memory)
        rx.expose(1, segment.segment_id, 0, len(memory))
        tx.wait_regions(peer, lambda d: bool(d.regions))
        rx.close()
        rx_open = False
        _until("the sender to see it", lambda: not tx._call(lambda: tx.engine.connected(peer)))
        handles = [
            tx.submit([write_request(peer, segment.segment_id, 0, b"a" * BLOCK)]) for _ in "ab"
        ]
        states = [h.wait(20) for h in handles]  # one dispatched, one queued behind window 1
        assert [s.status for s in states] == [TaskStatus.FAILED] * 2, states
        assert all(s.detail == "peer unreachable" for s in states), states
        with pytest.raises(LocalProtocolError, match="unreachable"):
            tx.submit([write_request(peer, segment.segment_id, 0, b"c" * BLOCK)])
    finally:
        tx.close()
        if rx_open:
            rx.close()
