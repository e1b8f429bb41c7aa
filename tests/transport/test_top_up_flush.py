"""When the receiver sends a top-up its write admissions made (``engine/_receiving.py``): a
large write's at once, at its header, before its payload arrives; a small write's with its
landing, after its release on landing (nothing is owed then) or, when the consumer holds the
data, on its own. Never only at the consumer's next release."""

from __future__ import annotations

import types

from tent_transport.devices.tcp import Request
from tent_transport.engine._receiving import EARLY_GRANT_FROM, ReceiverSide
from tent_transport.segments import SegmentTable
from transport_fakes import write_header

SESSION, EPOCH, LEASE_SESSION, PEER = 7, 3, 99, 1


class _Credit:
    """The credit core as admission sees it: every write admitted; ``owing`` says whether an
    endpoint became due (a top-up was made) since the last flush."""

    def __init__(self) -> None:
        self.session = types.SimpleNamespace(value=LEASE_SESSION)
        self.owing = False
        self.partial_waiting = False  # no head held for its release (the hold is off)
        # no slot resource: each write is its own transfer (tests/transport/test_transfers.py)
        self.allocator = types.SimpleNamespace(config=types.SimpleNamespace(capacity={}))

    @property
    def needs_flush(self) -> bool:  # CreditReceiver.needs_flush
        return self.owing or self.partial_waiting

    def admit_write(self, peer: int, qos: int, epoch: int, amounts: object) -> object:
        self.owing = True  # the key's top-up was due at this landing
        return types.SimpleNamespace(accepted=True, reason=None)

    def release(self, peer: int, qos: int, epoch: int, amounts: object) -> None:
        pass


def _side(*, release_on_landing: bool) -> tuple[ReceiverSide, _Credit, list[str]]:
    credit = _Credit()
    side = ReceiverSide(
        credit=credit,  # type: ignore[arg-type]
        segments=SegmentTable(),
        release_on_landing=release_on_landing,
    )
    calls: list[str] = []

    def flush() -> None:  # what the control service's flush does with what is owed
        calls.append("flush")
        credit.owing = False

    ps = types.SimpleNamespace(
        session=SESSION, endpoint=types.SimpleNamespace(version=2), epoch=EPOCH
    )
    side.control = types.SimpleNamespace(  # type: ignore[assignment]
        session_of=lambda peer: ps, flush=flush, flush_soon=lambda: calls.append("soon")
    )
    return side, credit, calls


def _write(length: int) -> Request:
    return write_header(SESSION, EPOCH, length, length)


def test_a_large_writes_top_up_leaves_at_its_header() -> None:
    side, _, calls = _side(release_on_landing=False)
    assert side.admit(PEER, SESSION, _write(EARLY_GRANT_FROM)) is None
    assert calls == ["soon"]  # before its payload arrives


def test_a_small_writes_top_up_leaves_with_its_landing_even_if_the_consumer_holds_it() -> None:
    side, _, calls = _side(release_on_landing=False)
    request = _write(EARLY_GRANT_FROM - 1)
    assert side.admit(PEER, SESSION, request) is None
    assert calls == []  # its payload is about to land: one wake of the sender, not two
    side.landed(PEER, SESSION, request)
    assert calls == ["soon"]  # not at the consumer's release, which may never come


def test_a_release_on_landing_sends_it_and_nothing_is_owed_after() -> None:
    side, _, calls = _side(release_on_landing=True)
    request = _write(4096)
    assert side.admit(PEER, SESSION, request) is None
    side.landed(PEER, SESSION, request)
    assert calls == ["flush"]  # the release's flush took it; no second, empty one
