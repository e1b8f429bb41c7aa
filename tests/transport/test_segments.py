"""The segment table (regions per peer and session) and the segment-descriptor message."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import mmap
import sys
from pathlib import Path
from typing import Any

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tent_transport.segments import (
    MAX_DESCRIPTORS,
    Access,
    DescriptorError,
    SegmentDescriptor,
    SegmentDescriptors,
    SegmentError,
    SegmentTable,
    decode_descriptors,
    encode_descriptors,
)

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"


def _module(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


cddl = _module(ROOT / "tests" / "credit" / "cddl_subset.py", "cddl_subset_for_segments")
regen = _module(GOLDEN / "regen_segments.py", "regen_segments")
SCHEMA = cddl.Schema.from_file(ROOT / "spec" / "wire.cddl")

u64 = st.integers(0, 2**64 - 1)


@st.composite
def descriptors(draw: st.DrawFn) -> SegmentDescriptors:
    regions = []
    for _ in range(draw(st.integers(0, 5))):
        seg_len = draw(st.integers(1, 2**64 - 1))
        length = draw(st.integers(1, seg_len))
        offset = draw(st.integers(0, seg_len - length))
        regions.append(
            SegmentDescriptor(
                segment_id=draw(u64),
                segment_length=seg_len,
                offset=offset,
                length=length,
                access=draw(st.sampled_from([1, 2, 3])),
                rkey=draw(u64),
            )
        )
    return SegmentDescriptors(session=draw(u64), generation=draw(u64), regions=tuple(regions))


@given(descriptors())
def test_round_trip_and_cddl_conformance(message: SegmentDescriptors) -> None:
    data = encode_descriptors(message)
    assert decode_descriptors(data) == message
    assert SCHEMA.matches("segment-descriptors", cddl.load_cbor(data))


def test_golden_vectors_are_current_and_conform() -> None:
    assert regen.main(["--check"]) == 0
    for vector in json.loads((GOLDEN / "segment_vectors.json").read_text()):
        data = bytes.fromhex(vector["cbor_hex"])
        assert encode_descriptors(decode_descriptors(data)) == data
        assert SCHEMA.matches("segment-descriptors", cddl.load_cbor(data)), vector["name"]


@pytest.mark.parametrize(
    "structure",
    [
        [32, 2, 1, 1, []],  # unknown schema
        [33, 1, 1, 1, []],  # another message type
        [32, 1, -1, 1, []],
        [32, 1, 1, 1, [[1, 10, 5, 6, 1, 0]]],  # region beyond its segment
        [32, 1, 1, 1, [[1, 10, 0, 0, 1, 0]]],  # empty region
        [32, 1, 1, 1, [[1, 10, 0, 1, 4, 0]]],  # unknown access bit
        [32, 1, 1, 1, [[1, 10, 0, 1, 1]]],
        [32, 1, 1, 1, [[1, 10, 0, 1, 1, 0]] * (MAX_DESCRIPTORS + 1)],
        {"type": 32},
    ],
)
def test_malformed_descriptors_are_refused(structure: Any) -> None:
    with pytest.raises(DescriptorError):
        decode_descriptors(cbor2.dumps(structure))


@given(st.binary(max_size=64))
def test_any_bytes_decode_or_raise_descriptor_error(data: bytes) -> None:
    # the property: nothing but DescriptorError escapes (a KeyError or TypeError fails it)
    with contextlib.suppress(DescriptorError):
        decode_descriptors(data)


def test_non_canonical_encoding_is_refused() -> None:
    canonical = encode_descriptors(SegmentDescriptors(session=1, generation=1))
    padded = bytes([0x85, 0x18, 32]) + canonical[2:]  # the type as a 1-byte-argument uint
    with pytest.raises(DescriptorError):
        decode_descriptors(padded)


def test_exposures_are_per_peer_and_session_and_end_at_revoke_or_fence() -> None:
    table = SegmentTable()
    segment = table.register(bytearray(1000))
    mm = mmap.mmap(-1, 4096)
    other = table.register(mm)  # any writable buffer
    e = table.expose(1, 10, segment_id=segment.segment_id, offset=100, length=200)
    table.expose(1, 10, segment_id=other.segment_id, offset=0, length=4096, access=Access.READ)

    def check(peer: int, session: int, offset: int, length: int, access: Access = Access.WRITE):
        return table.check(
            peer,
            session,
            segment_id=segment.segment_id,
            offset=offset,
            length=length,
            access=access,
        )

    assert check(1, 10, 100, 200) is not None
    assert check(1, 10, 99, 10) is None  # starts before the region
    assert check(1, 10, 250, 51) is None  # ends after it
    assert check(2, 10, 100, 10) is None  # another peer
    assert check(1, 11, 100, 10) is None  # another session of the same peer
    assert check(1, 10, 100, 10, Access.READ) is None  # WRITE-only exposure
    assert len(table.descriptors(1, 10).regions) == 2
    generation = table.descriptors(1, 10).generation
    table.revoke(e.exposure_id)
    assert check(1, 10, 100, 10) is None
    assert table.descriptors(1, 10).generation > generation
    assert table.revoke_session(1, 10) == 1
    assert table.descriptors(1, 10).regions == ()
    with pytest.raises(SegmentError):
        table.unregister(999)
    table.unregister(other.segment_id)
    mm.close()


@pytest.mark.parametrize(("offset", "length"), [(0, 0), (900, 101), (-1, 5), (2**64, 1)])
def test_expose_validates_before_changing_anything(offset: int, length: int) -> None:
    table = SegmentTable()
    segment = table.register(bytearray(1000))
    with pytest.raises(SegmentError):
        table.expose(1, 1, segment_id=segment.segment_id, offset=offset, length=length)
    assert table.exposures(1, 1) == ()


def test_read_only_and_empty_buffers_are_refused() -> None:
    table = SegmentTable()
    for bad in (b"read-only", bytearray(), 42):
        with pytest.raises(SegmentError):
            table.register(bad)
