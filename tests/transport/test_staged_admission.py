"""Write admission at the receiver: the staging pool is leased, so a staged write must be a
credited one charging exactly one STAGING_SLOTS (a legacy sender's staged writes would take
slots credited senders were promised, and those senders would be refused for it)."""

from __future__ import annotations

import types

import pytest
from tent_transport.devices.tcp import Flags, Request, WireOpcode
from tent_transport.engine._receiving import ReceiverSide
from tent_transport.segments import SegmentTable

SESSION, EPOCH, LEASE_SESSION = 7, 3, 99


def _side(*, negotiated: bool) -> ReceiverSide:
    admitted: list[dict[object, int]] = []

    def admit_write(peer: int, qos: int, epoch: int, amounts: dict[object, int]) -> object:
        admitted.append(amounts)
        return types.SimpleNamespace(accepted=True, reason=None)

    credit = types.SimpleNamespace(
        session=types.SimpleNamespace(value=LEASE_SESSION),
        admit_write=admit_write,
        owing=False,
        # no slot resource: each write is its own transfer (the transfer bound is
        # tests/transport/test_transfers.py's)
        allocator=types.SimpleNamespace(config=types.SimpleNamespace(capacity={})),
    )
    endpoint = types.SimpleNamespace(version=1 if negotiated else 0)
    ps = types.SimpleNamespace(session=SESSION, endpoint=endpoint, epoch=EPOCH)
    side = ReceiverSide(credit=credit, segments=SegmentTable())  # type: ignore[arg-type]
    side.control = types.SimpleNamespace(session_of=lambda peer: ps)  # type: ignore[assignment]
    side.admitted = admitted  # type: ignore[attr-defined]
    return side


def _write(flags: Flags, charge: tuple[int, int, int, int]) -> Request:
    return Request(
        opcode=WireOpcode.WRITE,
        flags=flags,
        qos_class=0,
        write_id=1,
        request=1,
        segment=1,
        offset=0,
        length=64,
        session=SESSION,
        lease_session=LEASE_SESSION if flags & Flags.CREDITED else 0,
        epoch=EPOCH if flags & Flags.CREDITED else 0,
        checksum=0,
        charge=charge,
    )


def test_an_uncredited_staged_write_is_refused_where_an_uncredited_direct_one_is_admitted() -> None:
    side = _side(negotiated=False)  # a legacy sender: no credit negotiated
    assert side.admit(1, SESSION, _write(Flags.NONE, (0, 0, 0, 0))) is None
    assert side.admit(1, SESSION, _write(Flags.STAGED, (0, 0, 0, 0))) == (
        "a staged write without a lease"
    )


@pytest.mark.parametrize(
    ("flags", "charge", "ok"),
    [
        # charge: (DATA_BYTES, REQUEST_SLOTS, STAGING_SLOTS, CONSUMER_SLOTS)
        (Flags.CREDITED, (64, 1, 0, 1), True),  # direct
        (Flags.CREDITED | Flags.STAGED, (64, 1, 1, 1), True),  # staged, one slot
        (Flags.CREDITED | Flags.STAGED, (64, 1, 0, 1), False),  # a slot without its charge
        (Flags.CREDITED | Flags.STAGED, (64, 1, 2, 1), False),  # two slots for one write
        (Flags.CREDITED, (64, 1, 1, 1), False),  # a direct write charging a staging slot
    ],
)
def test_a_credited_write_charges_exactly_the_staging_slots_its_plan_uses(
    flags: Flags, charge: tuple[int, int, int, int], ok: bool
) -> None:
    side = _side(negotiated=True)
    reason = side.admit(1, SESSION, _write(flags, charge))
    if ok:
        assert reason is None
        assert side.admitted  # type: ignore[attr-defined]  # the credit core decided
    else:
        assert reason == "a staged write leases exactly one staging slot, a direct one none"
        assert not side.admitted  # type: ignore[attr-defined]  # refused before the core
