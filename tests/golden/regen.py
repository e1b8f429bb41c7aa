"""Regenerate ``wire_vectors.json``, the golden vectors of the wire codec.

Usage (from the repository root)::

    python tests/golden/regen.py          # rewrite the file from the codec
    python tests/golden/regen.py --check  # exit 1 if the checked-in file is stale

``tests/credit/test_wire.py`` fails when the file is stale, when the codec's encoding of any
vector changes, or when a vector does not conform to ``spec/wire.cddl``. A codec change that
alters bytes on the wire is a wire-format change: regenerate, and review the diff as such.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import attrs

from tent_credit._arith import U32_MAX, U64_MAX, U128_MAX
from tent_credit._messages import (
    CapabilityActivation,
    CapabilityOffer,
    ControlMessage,
    CreditReturn,
    Heartbeat,
    ReceiverCreditUpdate,
    SenderCreditUsage,
)
from tent_credit._types import CreditAmount, CreditResource, SessionId
from tent_credit._wire import encode

VECTORS_PATH = Path(__file__).with_name("wire_vectors.json")

_R = CreditResource
_CLASSES: dict[str, type[ControlMessage]] = {
    cls.__name__: cls
    for cls in (
        ReceiverCreditUpdate,
        SenderCreditUsage,
        CreditReturn,
        CapabilityOffer,
        CapabilityActivation,
        Heartbeat,
    )
}
_AMOUNT_FIELDS = frozenset({"grants", "consumed_totals", "returned_totals", "pending_demand"})


def _amounts(*parts: tuple[CreditResource, int]) -> tuple[CreditAmount, ...]:
    return tuple(CreditAmount(resource=r, amount=a) for r, a in parts)


# Named messages: at least one per type, the boundaries of every range, and session ids on both
# sides of 2**64 (a plain integer vs a bignum on the wire).
VECTORS: tuple[tuple[str, ControlMessage], ...] = (
    (
        "receiver_credit_update_minimal",
        ReceiverCreditUpdate(
            qos_class=0, receiver_session_id=SessionId(1), epoch=1, sequence=1, grants=()
        ),
    ),
    (
        "receiver_credit_update_direct_write",
        ReceiverCreditUpdate(
            qos_class=3,
            receiver_session_id=SessionId(0x0123_4567_89AB_CDEF),
            epoch=2,
            sequence=41,
            freshness_ttl_ms=500,
            grants=_amounts(
                (_R.DATA_BYTES, 1 << 20), (_R.REQUEST_SLOTS, 8), (_R.CONSUMER_SLOTS, 8)
            ),
        ),
    ),
    (
        "receiver_credit_update_u128_session_all_maxima",
        ReceiverCreditUpdate(
            flags=0xFFFF,
            qos_class=U32_MAX,
            receiver_session_id=SessionId((1 << 127) + 12345),
            epoch=U64_MAX,
            sequence=U64_MAX,
            freshness_ttl_ms=U32_MAX,
            grants=_amounts(
                (_R.CONSUMER_SLOTS, U64_MAX),
                (_R.STAGING_SLOTS, U64_MAX),
                (_R.REQUEST_SLOTS, U64_MAX),
                (_R.DATA_BYTES, U64_MAX),
            ),
            retry_after_us=U64_MAX,
        ),
    ),
    (
        "sender_credit_usage_with_demand",
        SenderCreditUsage(
            receiver_session_id=SessionId(0xFEDC_BA98_7654_3210_0000_0000_0000_0001),
            epoch=5,
            sequence=17,
            qos_class=1,
            consumed_totals=_amounts((_R.DATA_BYTES, 65536), (_R.REQUEST_SLOTS, 2)),
            returned_totals=_amounts((_R.DATA_BYTES, 4096)),
            pending_demand=_amounts((_R.DATA_BYTES, 1 << 24), (_R.STAGING_SLOTS, 1)),
        ),
    ),
    (
        "sender_credit_usage_empty",
        SenderCreditUsage(receiver_session_id=SessionId(7), epoch=1, sequence=1, qos_class=0),
    ),
    (
        "credit_return",
        CreditReturn(
            receiver_session_id=SessionId(U64_MAX),
            epoch=3,
            sequence=9,
            qos_class=2,
            returned_totals=_amounts((_R.REQUEST_SLOTS, 4), (_R.DATA_BYTES, 1 << 32)),
        ),
    ),
    ("capability_offer_v1", CapabilityOffer(versions=(1,))),
    ("capability_offer_many_versions", CapabilityOffer(versions=(3, 2, 1, 0xFFFF), qos_class=9)),
    (
        "capability_activation_selected",
        CapabilityActivation(
            versions=(1,),
            selected_version=1,
            receiver_session_id=SessionId(U128_MAX),
            epoch=7,
            qos_class=0,
            freshness_ttl_ms=1000,
        ),
    ),
    (
        "capability_activation_no_common_version",
        CapabilityActivation(
            versions=(2,), selected_version=0, receiver_session_id=SessionId(42), epoch=1
        ),
    ),
    ("heartbeat", Heartbeat(receiver_session_id=SessionId(99), epoch=4)),
    (
        "heartbeat_smallest_bignum_session",
        Heartbeat(receiver_session_id=SessionId(U64_MAX + 1), epoch=U64_MAX, qos_class=U32_MAX),
    ),
)


def fields_of(message: ControlMessage) -> dict[str, Any]:
    """The JSON form of a message's fields (resources by name, session ids as integers)."""
    fields: dict[str, Any] = {}
    for field in attrs.fields(type(message)):
        value = getattr(message, field.name)
        if isinstance(value, SessionId):
            fields[field.name] = value.value
        elif field.name in _AMOUNT_FIELDS:
            fields[field.name] = [[a.resource.name, a.amount] for a in value]
        elif isinstance(value, tuple):
            fields[field.name] = list(value)
        else:
            fields[field.name] = value
    return fields


def message_from(type_name: str, fields: dict[str, Any]) -> ControlMessage:
    """Build the message a vector describes (the inverse of :func:`fields_of`)."""
    kwargs: dict[str, Any] = {}
    for name, value in fields.items():
        if name == "receiver_session_id":
            kwargs[name] = SessionId(value)
        elif name in _AMOUNT_FIELDS:
            kwargs[name] = _amounts(*((CreditResource[r], a) for r, a in value))
        elif isinstance(value, list):
            kwargs[name] = tuple(value)
        else:
            kwargs[name] = value
    return _CLASSES[type_name](**kwargs)


def render() -> str:
    """The file's content, as the codec produces it today."""
    document = {
        "comment": "Generated by tests/golden/regen.py from tent_credit._wire; do not edit.",
        "schema": "spec/wire.cddl",
        "vectors": [
            {
                "name": name,
                "type": type(message).__name__,
                "fields": fields_of(message),
                "hex": encode(message).hex(),
            }
            for name, message in VECTORS
        ],
    }
    return json.dumps(document, indent=2) + "\n"


def main(argv: list[str]) -> int:
    if argv not in ([], ["--check"]):
        print(__doc__, file=sys.stderr)
        return 2
    text = render()
    if argv == ["--check"]:
        current = VECTORS_PATH.read_text(encoding="utf-8") if VECTORS_PATH.exists() else ""
        if current != text:
            print(f"{VECTORS_PATH} is stale: run python tests/golden/regen.py", file=sys.stderr)
            return 1
        return 0
    VECTORS_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {len(VECTORS)} vectors to {VECTORS_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
