"""Regenerate ``verbs_vectors.json``, the golden vectors of the verbs out-of-band messages.

Usage (from the repository root)::

    python tests/golden/regen_verbs.py          # rewrite the file from the codec
    python tests/golden/regen_verbs.py --check  # exit 1 if the checked-in file is stale

``tests/transport/verbs/test_verbs_golden.py`` fails when the file is stale, when the codec's
bytes of a vector change, or when a vector does not conform to ``spec/verbs.cddl``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tent_transport.devices.verbs import (
    AckOutcome,
    VerbsAck,
    VerbsEndpoint,
    VerbsRegion,
    encode_verbs_message,
)

VECTORS_PATH = Path(__file__).with_name("verbs_vectors.json")
U64 = (1 << 64) - 1

# Schema 1 (no acknowledgements): kept byte for byte, an old peer still speaks it.
VECTORS: tuple[tuple[str, VerbsEndpoint | VerbsRegion | VerbsAck], ...] = (
    (
        "endpoint_roce",
        VerbsEndpoint(
            qp_num=0x1A2B3, psn=0x55AA11, gid=bytes.fromhex("fe80000000000000" "0202c9fffe001122"),
            lid=0, port_num=1, mtu=5, schema=1,
        ),
    ),
    (
        "endpoint_ib_maxima",
        VerbsEndpoint(
            qp_num=(1 << 24) - 1, psn=(1 << 24) - 1, gid=b"\xff" * 16, lid=0xFFFF, port_num=255,
            mtu=1, schema=1,
        ),
    ),
    (
        "region_kv_block_write",
        VerbsRegion(
            segment=1, session=1_733_000_000_000_000, offset=4 << 20, length=4 << 20,
            addr=0x7F00_1234_0000, rkey=0x00A1B2, readable=False, schema=1,
        ),
    ),
    (
        "region_read_u128_session",
        VerbsRegion(
            segment=U64, session=(1 << 128) - 1, offset=0, length=1, addr=U64 - 1,
            rkey=0xFFFFFFFF, readable=True, schema=1,
        ),
    ),
    # Schema 2: the same messages, and the receiver's acknowledgements.
    (
        "endpoint_roce_v2",
        VerbsEndpoint(
            qp_num=0x1A2B3, psn=0x55AA11, gid=bytes.fromhex("fe80000000000000" "0202c9fffe001122"),
            lid=0, port_num=1, mtu=5,
        ),
    ),
    (
        "region_kv_block_write_v2",
        VerbsRegion(
            segment=1, session=1_733_000_000_000_000, offset=4 << 20, length=4 << 20,
            addr=0x7F00_1234_0000, rkey=0x00A1B2, readable=False,
        ),
    ),
    ("ack_admitted", VerbsAck(session=1_733_000_000_000_000, through=17)),
    ("ack_nothing_yet", VerbsAck(session=1, through=0)),
    (
        "ack_superseded",
        VerbsAck(session=1_733_000_000_000_000, through=18, outcome=AckOutcome.SUPERSEDED),
    ),
    (
        "ack_refused_u128_session",
        VerbsAck(session=(1 << 128) - 1, through=U64, outcome=AckOutcome.REFUSED),
    ),
)


def vectors() -> list[dict[str, Any]]:
    return [
        {"name": name, "cbor_hex": encode_verbs_message(message).hex()}
        for name, message in VECTORS
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
