"""A peer that never negotiates credit (a legacy sender: credit disabled) against each receiver
mode. RFC "Incremental deployment": required mode "fails or falls back explicitly rather than
treating missing credit as unlimited capacity". So a ``required`` receiver refuses a legacy
peer's uncredited write unless ``required_fallback`` is set; an ``optional`` one admits it (the
rollout mode). The refusal is a rollout mismatch, not a lie: the peer is not quarantined."""

from __future__ import annotations

import time

import pytest
from net_helpers import write_request
from procs import KEY, credit_config
from tent_transport.config import load_engine_config
from tent_transport.control import PskIdentity
from tent_transport.engine import EngineOptions, ReceiverStatistics, SyncEngine
from tent_transport.errors import TransferFailed

from tent_sched import TaskStatus

BLOCK = 64 << 10


def _legacy_pair(mode: str, *, fallback: bool = False) -> tuple[SyncEngine, SyncEngine, int]:
    rx = SyncEngine(
        load_engine_config(credit_config(mode, slots=4, block=BLOCK, fallback=fallback)),
        EngineOptions(peer_id=2, identity=PskIdentity(local_peer=2, keys={1: KEY})),
    )
    tx = SyncEngine(
        load_engine_config(credit_config("disabled")),
        EngineOptions(peer_id=1, identity=PskIdentity(local_peer=1, keys={2: KEY})),
    )
    host, port = rx.start()
    return rx, tx, tx.connect(host, port)


def _block(offset: int) -> bytes:
    return bytes([offset // BLOCK + 1]) * BLOCK


def _exposed(rx: SyncEngine, tx: SyncEngine, peer: int) -> tuple[bytearray, int]:
    memory = bytearray(8 * BLOCK)
    segment = rx.register(memory)
    rx.expose(1, segment.segment_id, 0, len(memory))
    tx.wait_regions(peer, lambda d: bool(d.regions))
    return memory, segment.segment_id


def _refusals(rx: SyncEngine, count: int) -> ReceiverStatistics:
    """The receiver's statistics once it counted ``count`` legacy refusals (its ack can reach
    the sender before its own bookkeeping ran: bounded wait)."""
    for _ in range(500):
        stats = rx._call(rx.engine.receiver.statistics)
        if stats.legacy_refused >= count:
            return stats
        time.sleep(0.01)
    return stats


def _next_session(rx: SyncEngine, tx: SyncEngine, peer: int, segment: int, old: int) -> None:
    """The refusal closed the data connection: the sender starts a new session; the receiver
    exposes its region to it, as to any new session."""
    for _ in range(1000):  # bounded
        ps = rx._call(lambda: rx.engine.control.session_of(1))
        if ps is not None and ps.session != old:
            break
        time.sleep(0.01)
    rx.expose(1, segment, 0, 8 * BLOCK)
    tx.wait_regions(peer, lambda d: d.session != old and bool(d.regions))


def test_a_required_receiver_refuses_a_legacy_peers_write_without_quarantining_it() -> None:
    rx, tx, peer = _legacy_pair("required")
    try:
        memory, segment = _exposed(rx, tx, peer)
        first = tx.regions(peer)
        assert first is not None
        with pytest.raises(TransferFailed):
            tx.submit([write_request(peer, segment, 0, _block(0))]).result(10)
        assert memory == bytearray(8 * BLOCK)  # nothing landed
        stats = _refusals(rx, 1)
        assert stats.legacy_refused == 1 and stats.landed == 0
        assert stats.quarantined == ()  # a rollout mismatch, not a lie
        # it is not shut out: its next session is served, and refused the same way
        _next_session(rx, tx, peer, segment, first.session)
        with pytest.raises(TransferFailed):
            tx.submit([write_request(peer, segment, BLOCK, _block(BLOCK))]).result(10)
        stats = _refusals(rx, 2)
        assert stats.legacy_refused == 2 and stats.quarantined == () and stats.landed == 0
        registry = rx.engine.registry  # what an operator sees
        assert (
            rx._call(
                lambda: registry.get_sample_value("tent_transport_legacy_writes_refused_total")
            )
            == 2
        )
    finally:
        tx.close()
        rx.close()


@pytest.mark.parametrize(
    ("mode", "fallback"), [("required", True), ("optional", False)], ids=["fallback", "optional"]
)
def test_the_explicit_fallback_or_optional_mode_admits_a_legacy_peers_writes(
    mode: str, fallback: bool
) -> None:
    rx, tx, peer = _legacy_pair(mode, fallback=fallback)
    try:
        memory, segment = _exposed(rx, tx, peer)
        for i in range(3):
            state = tx.submit([write_request(peer, segment, i * BLOCK, _block(i * BLOCK))]).result(
                10
            )
            assert state.status is TaskStatus.COMPLETED
        assert memory[: 3 * BLOCK] == b"".join(bytes([i + 1]) * BLOCK for i in range(3))
        assert rx.engine.receiver.statistics().legacy_refused == 0
    finally:
        tx.close()
        rx.close()
