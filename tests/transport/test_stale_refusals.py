"""A refused write quarantines its sender only if it came on the sender's current session: bytes
of a superseded session (sent before a reconnect or a restart, read while that session is being
retired) are refused but are not a lie, and must not shut out the new, honest session."""

from __future__ import annotations

import types

from tent_transport.engine._receiving import ReceiverSide
from tent_transport.segments import SegmentTable

PEER, OLD, NEW = 4, 10, 11


def _side() -> tuple[ReceiverSide, list[str]]:
    closed: list[str] = []
    current = types.SimpleNamespace(
        session=NEW, connection=types.SimpleNamespace(close=closed.append)
    )
    side = ReceiverSide(credit=None, segments=SegmentTable())
    sessions = {PEER: current}
    side.control = types.SimpleNamespace(session_of=sessions.get)  # type: ignore[assignment]
    return side, closed


def test_a_refusal_on_a_superseded_session_is_stale_not_a_lie() -> None:
    side, closed = _side()
    side.refused(PEER, OLD, None, "outside every region exposed to the peer")
    stats = side.statistics()
    assert stats.quarantined == () and side.admit_peer(PEER)
    assert (stats.refused, stats.stale_refused) == (1, 1)
    assert closed == []  # the new session's control connection stays open


def test_a_refusal_on_the_current_session_quarantines() -> None:
    side, closed = _side()
    side.refused(PEER, NEW, None, "lease of another receiver session or epoch")
    stats = side.statistics()
    assert stats.quarantined == (PEER,) and not side.admit_peer(PEER)
    assert (stats.refused, stats.stale_refused) == (1, 0)
    assert closed == ["quarantined: lease of another receiver session or epoch"]


def test_a_refusal_with_no_session_left_quarantines_nobody() -> None:
    side, _ = _side()
    side.refused(PEER + 1, OLD, None, "no live control session")  # a peer whose session ended
    assert side.statistics().quarantined == ()
