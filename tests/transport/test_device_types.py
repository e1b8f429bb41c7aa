"""The Device protocol's values: invalid slices, leases and completions cannot be built."""

from __future__ import annotations

import pickle

import pytest
from tent_transport.devices import Opcode, SliceCompletion, SliceRequest, SliceStatus, WriteLease
from tent_transport.errors import InvalidArgument, PostRefused, TooManyRequests, TransferFailed


def _slice(**overrides: object) -> SliceRequest:
    fields: dict[str, object] = {
        "wr_id": 1,
        "opcode": Opcode.WRITE,
        "peer": 7,
        "local": memoryview(bytes(16)),
        "remote_segment": 1,
        "remote_offset": 0,
        "length": 16,
    }
    fields.update(overrides)
    return SliceRequest(**fields)  # type: ignore[arg-type]


def test_a_valid_slice() -> None:
    lease = WriteLease(session=1 << 100, epoch=2, qos_class=0, charge=((1, 16), (2, 1)))
    item = _slice(lease=lease, write_id=5)
    assert item.lease is lease
    assert SliceStatus.SUCCESS.moved and not SliceStatus.FLUSHED.moved


@pytest.mark.parametrize(
    "overrides",
    [
        {"length": 15},  # buffer and length disagree
        {"length": 0, "local": memoryview(b"")},
        {"opcode": 1},
        {"peer": -1},
        {"write_id": 1 << 32},
        {"local": b"x" * 16},
        {"remote_offset": (1 << 64) - 8},  # end beyond the address space
        {
            "opcode": Opcode.READ,
            "local": memoryview(bytearray(16)),
            "lease": WriteLease(session=1, epoch=1, qos_class=0, charge=((1, 16),)),
        },
        {"opcode": Opcode.READ},  # read-only destination
    ],
)
def test_invalid_slices_are_refused(overrides: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument):
        _slice(**overrides)


@pytest.mark.parametrize(
    "charge",
    [(), ((2, 1), (1, 16)), ((1, 0),), ((1, 1), (1, 1)), ((0, 1),), [(1, 1)], ((1, True),)],
)
def test_invalid_lease_charges_are_refused(charge: object) -> None:
    with pytest.raises(InvalidArgument):
        WriteLease(session=1, epoch=1, qos_class=0, charge=charge)  # type: ignore[arg-type]


def test_completion_validates() -> None:
    assert SliceCompletion(wr_id=1, status=SliceStatus.FLUSHED, length=4).detail == ""
    with pytest.raises(InvalidArgument):
        SliceCompletion(wr_id=1, status="success", length=4)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        SliceCompletion(wr_id=1, status=SliceStatus.SUCCESS, length=0)


def test_errors_keep_their_fields_across_pickling() -> None:
    refused = pickle.loads(pickle.dumps(PostRefused("not ready", ready=False)))
    assert isinstance(refused, TooManyRequests) and refused.ready is False
    failed = pickle.loads(pickle.dumps(TransferFailed("x", status="failed", detail="flushed")))
    assert (failed.status, failed.detail) == ("failed", "flushed")
