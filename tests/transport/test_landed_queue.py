"""The receiver's data-landed notification queue is bounded, and never at a release's cost."""

from __future__ import annotations

import asyncio

import pytest
from tent_transport.control import PskIdentity
from tent_transport.devices.tcp import Flags, Request, WireOpcode
from tent_transport.engine import EngineOptions
from tent_transport.engine._receiving import ReceiverSide
from tent_transport.segments import SegmentTable


def _request(n: int, *, credited: bool) -> Request:
    return Request(
        opcode=WireOpcode.WRITE,
        flags=Flags.CREDITED if credited else Flags.NONE,
        qos_class=0,
        write_id=n,
        request=n,
        segment=1,
        offset=n,
        length=1,
        session=1,
        lease_session=1,
        epoch=1,
        checksum=0,
        charge=(1, 1, 0, 0) if credited else (0, 0, 0, 0),
    )


def _side(bound: int, *, release_on_landing: bool = False) -> ReceiverSide:
    return ReceiverSide(
        credit=None,
        segments=SegmentTable(),
        release_on_landing=release_on_landing,
        max_pending_landed=bound,
    )


def test_notifications_with_nothing_to_release_stop_at_the_bound_and_are_counted() -> None:
    side = _side(3)
    for n in range(5):
        side.landed(7, 1, _request(n, credited=False))
    assert side.pending_landed() == 3
    stats = side.statistics()
    assert stats.landed == 5 and stats.notifications_dropped == 2

    async def take() -> list[int]:
        return [(await side.next_landed()).write_id for _ in range(3)]

    assert asyncio.run(take()) == [0, 1, 2]  # the oldest are kept, in order
    side.landed(7, 1, _request(9, credited=False))  # room again
    assert side.pending_landed() == 1


def test_a_notification_whose_charge_is_held_is_always_queued() -> None:
    side = _side(2)
    for n in range(6):
        side.landed(7, 1, _request(n, credited=True))
    # the consumer needs every one of them to release its credit: none dropped
    assert side.pending_landed() == 6
    assert side.statistics().notifications_dropped == 0
    assert side.statistics().unreleased == 6


def test_released_on_landing_notifications_are_bounded_like_uncredited_ones() -> None:
    side = _side(2, release_on_landing=True)
    for n in range(6):
        side.landed(7, 1, _request(n, credited=True))
    assert side.statistics().unreleased == 0
    assert side.pending_landed() == 2
    assert side.statistics().notifications_dropped == 4


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, None])
def test_a_bad_bound_is_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        _side(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -5, 1.5, False])
def test_engine_options_refuse_a_bad_notification_bound(bad: object) -> None:
    identity = PskIdentity(local_peer=1, keys={2: b"k" * 32})
    assert EngineOptions(peer_id=1, identity=identity).max_pending_landed == 65_536
    with pytest.raises(ValueError, match="max_pending_landed"):
        EngineOptions(peer_id=1, identity=identity, max_pending_landed=bad)  # type: ignore[arg-type]
