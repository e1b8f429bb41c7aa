"""The device probe's "no device" cases, and the out-of-band verbs messages' CBOR codec."""

from __future__ import annotations

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import verbs_endpoints, verbs_regions
from tent_transport.devices.verbs import (
    MAX_VERBS_MESSAGE_BYTES,
    VerbsBackend,
    VerbsEndpoint,
    VerbsMessageError,
    VerbsRegion,
    decode_verbs_message,
    encode_verbs_message,
    probe,
    soft,
    soft_backend,
)
from tent_transport.errors import InvalidArgument, RemoteProtocolError


def _missing() -> VerbsBackend:
    raise ImportError("No module named 'pyverbs'")


def _with_devices(devices: object) -> VerbsBackend:
    base = soft_backend()

    def listing() -> list[object]:
        if isinstance(devices, Exception):
            raise devices
        assert isinstance(devices, list)
        return devices

    import attrs

    return attrs.evolve(base, get_device_list=listing)


def test_probe_reports_import_error_as_no_device() -> None:
    result = probe(_missing)
    assert not result.found
    assert "pyverbs is not installed" in result.reason


def test_probe_reports_a_failing_device_list_as_no_device() -> None:
    result = probe(lambda: _with_devices(soft.PyverbsRDMAError("Failed to get devices list")))
    assert not result.found
    assert "get_device_list() failed" in result.reason


def test_probe_reports_an_empty_device_list_as_no_device() -> None:
    result = probe(lambda: _with_devices([]))
    assert (result.found, result.devices) == (False, ())
    assert "returned none" in result.reason


def test_probe_finds_listed_devices() -> None:
    result = probe(soft_backend)
    assert (result.found, result.devices) == (True, ("soft0",))


def test_probe_never_raises_here() -> None:
    # on this machine: pyverbs may be installed but there is no kernel RDMA
    result = probe()
    assert isinstance(result.found, bool)
    assert result.reason


@given(verbs_endpoints())
def test_endpoint_round_trips(endpoint: VerbsEndpoint) -> None:
    wire = encode_verbs_message(endpoint)
    assert len(wire) <= MAX_VERBS_MESSAGE_BYTES
    assert decode_verbs_message(wire) == endpoint
    assert VerbsEndpoint.gid_bytes(endpoint.gid_text) == endpoint.gid


@given(verbs_regions())
def test_region_round_trips(region: VerbsRegion) -> None:
    wire = encode_verbs_message(region)
    assert len(wire) <= MAX_VERBS_MESSAGE_BYTES
    assert decode_verbs_message(wire) == region


@given(st.binary(max_size=MAX_VERBS_MESSAGE_BYTES + 8))
def test_any_bytes_decode_to_a_message_or_a_typed_error(data: bytes) -> None:
    try:
        message = decode_verbs_message(data)
    except VerbsMessageError as exc:
        assert isinstance(exc, RemoteProtocolError)
    else:
        assert encode_verbs_message(message) == data


@given(verbs_endpoints(), st.integers(0, 8), st.data())
def test_a_mutated_field_is_refused_or_still_valid(
    endpoint: VerbsEndpoint, index: int, data: st.DataObject
) -> None:
    fields = cbor2.loads(encode_verbs_message(endpoint))
    index %= len(fields)
    values = st.one_of(
        st.integers(-5, 1 << 70), st.booleans(), st.binary(min_size=15, max_size=17)
    )
    fields[index] = data.draw(values)
    raw = cbor2.dumps(fields, canonical=True)
    try:
        decoded = decode_verbs_message(raw)
    except VerbsMessageError:
        return
    assert encode_verbs_message(decoded) == raw


@pytest.mark.parametrize(
    "structure",
    [
        [0x5601, 1, 1, 0, b"\0" * 16, 0, 1],  # one field short
        [0x5601, 3, 1, 0, b"\0" * 16, 0, 1, 3],  # schema 3
        [0x5603, 1, 1, 1, 0],  # an acknowledgement in schema 1
        [0x5604, 2],  # unknown tag
        [0x5601, 1, True, 0, b"\0" * 16, 0, 1, 3],  # bool is not an int
        [0x5601, 1, 0, 0, b"\0" * 16, 0, 1, 3],  # QP number 0
        [0x5601, 1, 1 << 24, 0, b"\0" * 16, 0, 1, 3],  # QP number > 24 bits
        [0x5601, 1, 1, 0, b"\0" * 15, 0, 1, 3],  # short GID
        [0x5602, 1, 1, 2, 3, 0, 5, 6, 1],  # zero-length region
        [0x5602, 1, 1, 2, 3, 4, 5, 6, True],  # access is a uint, not a bool
        [0x5602, 1, 1, 2, 3, 4, 5, 6, 2],  # READ without WRITE is no exposure
        [0x5602, 1, 1, 2, 3, 4, 5, 6, 0],  # no access
        [0x5602, 1, 1, 2, (1 << 64) - 2, 4, 5, 6, 1],  # range overflows
    ],
)
def test_malformed_messages_are_refused(structure: list[object]) -> None:
    with pytest.raises(VerbsMessageError):
        decode_verbs_message(cbor2.dumps(structure, canonical=True))


def test_non_canonical_and_oversized_bytes_are_refused() -> None:
    good = encode_verbs_message(
        VerbsEndpoint(qp_num=1, psn=2, gid=b"\1" * 16, lid=3, port_num=1, mtu=3)
    )
    indefinite = b"\x9f" + good[1:] + b"\xff"  # same array, indefinite length
    with pytest.raises(VerbsMessageError):
        decode_verbs_message(indefinite)
    with pytest.raises(VerbsMessageError):
        decode_verbs_message(b"\0" * (MAX_VERBS_MESSAGE_BYTES + 1))
    with pytest.raises(VerbsMessageError):
        decode_verbs_message("text")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        encode_verbs_message("text")  # type: ignore[arg-type]


def test_newer_pyverbs_enum_classes_flatten_into_one_namespace() -> None:
    """rdma-core >= 50 groups constants in IntEnum classes (``ibv_access_flags.IBV_...``)."""
    import enum
    import types

    from tent_transport.devices.verbs._backend import _flat_enums

    class ibv_access_flags(enum.IntEnum):  # noqa: N801 (pyverbs' own class name)
        IBV_ACCESS_LOCAL_WRITE = 1
        IBV_ACCESS_REMOTE_WRITE = 2

    new = types.ModuleType("pyverbs.libibverbs_enums")
    new.ibv_access_flags = ibv_access_flags  # type: ignore[attr-defined]
    old = types.ModuleType("pyverbs.enums")
    old.IBV_WC_SUCCESS = 0  # type: ignore[attr-defined]
    flat = _flat_enums(old, new)
    assert (flat.IBV_ACCESS_LOCAL_WRITE, flat.IBV_ACCESS_REMOTE_WRITE, flat.IBV_WC_SUCCESS) == (
        1, 2, 0
    )
