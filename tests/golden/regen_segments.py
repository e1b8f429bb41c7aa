"""Regenerate ``segment_vectors.json``, the golden vectors of the segment-descriptor message.

Usage (from the repository root)::

    python tests/golden/regen_segments.py          # rewrite the file from the codec
    python tests/golden/regen_segments.py --check  # exit 1 if the checked-in file is stale

``tests/transport/test_segments.py`` fails when the file is stale, when the codec's bytes of
a vector change, or when a vector does not conform to ``spec/wire.cddl``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tent_transport.segments import (
    MAX_DESCRIPTORS,
    SegmentDescriptor,
    SegmentDescriptors,
    encode_descriptors,
)

VECTORS_PATH = Path(__file__).with_name("segment_vectors.json")
U64 = (1 << 64) - 1

VECTORS: tuple[tuple[str, SegmentDescriptors], ...] = (
    ("no_regions", SegmentDescriptors(session=1, generation=0)),
    (
        "one_kv_block",
        SegmentDescriptors(
            session=1_733_000_000_000_000,
            generation=1,
            regions=(
                SegmentDescriptor(
                    segment_id=1, segment_length=1 << 30, offset=4 << 20, length=4 << 20, access=1
                ),
            ),
        ),
    ),
    (
        "read_write_and_verbs_rkey",
        SegmentDescriptors(
            session=7,
            generation=3,
            regions=(
                SegmentDescriptor(
                    segment_id=2,
                    segment_length=4096,
                    offset=0,
                    length=4096,
                    access=3,
                    rkey=0x1234,
                ),
                SegmentDescriptor(
                    segment_id=3, segment_length=65536, offset=1024, length=1, access=2
                ),
            ),
        ),
    ),
    (
        "u64_maxima",
        SegmentDescriptors(
            session=U64,
            generation=U64,
            regions=(
                SegmentDescriptor(
                    segment_id=U64,
                    segment_length=U64,
                    offset=U64 - 1,
                    length=1,
                    access=1,
                    rkey=U64,
                ),
            ),
        ),
    ),
    (
        "max_regions",
        SegmentDescriptors(
            session=2,
            generation=5,
            regions=tuple(
                SegmentDescriptor(
                    segment_id=1, segment_length=MAX_DESCRIPTORS, offset=i, length=1, access=1
                )
                for i in range(MAX_DESCRIPTORS)
            ),
        ),
    ),
)


def vectors() -> list[dict[str, Any]]:
    return [
        {"name": name, "cbor_hex": encode_descriptors(message).hex()} for name, message in VECTORS
    ]


def main(argv: list[str]) -> int:
    text = json.dumps(vectors(), indent=1) + "\n"
    if "--check" in argv:
        if VECTORS_PATH.read_text() != text:
            print(f"{VECTORS_PATH} is stale: run python {Path(__file__).name}")
            return 1
        return 0
    VECTORS_PATH.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
