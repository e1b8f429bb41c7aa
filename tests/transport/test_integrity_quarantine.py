"""Issue 27 item 5: a sender whose writes keep failing their CRC32C is quarantined after a
bound (a leaky bucket, ``INTEGRITY_FAILURES``), never for an honest link's rare corruption."""

from __future__ import annotations

import types

from tent_transport.devices.tcp import Flags, Request, WireOpcode
from tent_transport.engine._receiving import (
    INTEGRITY_FAILURES,
    INTEGRITY_REFUND,
    ReceiverSide,
)
from tent_transport.segments import SegmentTable

PEER, OLD, NEW = 4, 10, 11


def _side() -> tuple[ReceiverSide, list[str]]:
    closed: list[str] = []
    current = types.SimpleNamespace(
        session=NEW, connection=types.SimpleNamespace(close=closed.append)
    )
    side = ReceiverSide(credit=None, segments=SegmentTable(), max_pending_landed=1)
    side.control = types.SimpleNamespace(session_of={PEER: current}.get)  # type: ignore[assignment]
    return side, closed


def _request(n: int = 1) -> Request:
    return Request(
        opcode=WireOpcode.WRITE,
        flags=Flags.NONE,
        qos_class=0,
        write_id=n,
        request=n,
        segment=1,
        offset=0,
        length=8,
        session=NEW,
        lease_session=0,
        epoch=0,
        checksum=0,
        charge=(0, 0, 0, 0),
    )


def test_a_sender_whose_writes_keep_failing_their_crc_is_quarantined_at_the_bound() -> None:
    side, closed = _side()
    for _ in range(INTEGRITY_FAILURES - 1):
        side.integrity_failed(PEER, NEW, _request())
    assert side.statistics().quarantined == () and closed == []
    side.integrity_failed(PEER, NEW, _request())
    assert side.statistics().quarantined == (PEER,) and not side.admit_peer(PEER)
    assert closed == [f"quarantined: {INTEGRITY_FAILURES} checksum failures"]
    assert side.statistics().aborted == INTEGRITY_FAILURES  # each one released as aborted


def test_rare_corruption_between_verified_writes_is_never_quarantined() -> None:
    side, closed = _side()
    for _ in range(4 * INTEGRITY_FAILURES):  # bounded: far past the bound in failures
        side.integrity_failed(PEER, NEW, _request())
        for _ in range(INTEGRITY_REFUND):
            side.landed(PEER, NEW, _request())
    assert side.statistics().quarantined == () and closed == []


def test_failures_interleaved_with_too_few_good_writes_still_reach_the_bound() -> None:
    side, _ = _side()
    rounds = 0
    while not side.statistics().quarantined and rounds < 100 * INTEGRITY_FAILURES:
        side.integrity_failed(PEER, NEW, _request())
        for _ in range(INTEGRITY_REFUND // 2):  # one failure per 32 good writes
            side.landed(PEER, NEW, _request())
        rounds += 1
    assert side.statistics().quarantined == (PEER,)
    assert rounds <= 2 * INTEGRITY_FAILURES  # the bucket fills at half the rate


def test_failures_on_a_superseded_session_quarantine_nobody() -> None:
    side, closed = _side()
    for _ in range(2 * INTEGRITY_FAILURES):
        side.integrity_failed(PEER, OLD, _request())
    assert side.statistics().quarantined == () and closed == []
