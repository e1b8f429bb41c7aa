"""The update's own paths through the codec: ``encode_update`` (the receiver's update, encoded
without building the message) writes exactly what ``encode`` writes for the validated message
and refuses what it refuses; ``decode``'s one-pass update check (``_wire._update_of``) accepts
exactly what the layout table accepts."""

from __future__ import annotations

from typing import Any

import attrs
import cbor2
import pytest
from hypothesis import given, settings
from strategies import receiver_credit_updates

from tent_credit import _wire
from tent_credit._arith import U32_MAX, U64_MAX
from tent_credit._messages import ReceiverCreditUpdate
from tent_credit._types import CreditAmount, CreditResource, SessionId
from tent_credit._wire import decode, encode, encode_update
from tent_credit.errors import DecodeError, InvalidArgument


def _fields(update: ReceiverCreditUpdate) -> tuple[Any, ...]:
    grants = {a.resource: a.amount for a in update.grants}
    return (
        update.qos_class,
        update.receiver_session_id,
        update.epoch,
        update.sequence,
        update.freshness_ttl_ms,
        grants,
        update.retry_after_us,
    )


@given(receiver_credit_updates())
def test_encode_update_writes_what_encode_writes_for_the_message(
    update: ReceiverCreditUpdate,
) -> None:
    # the receiver's updates carry flags 0 and their grants in resource order
    ordered = tuple(sorted(update.grants, key=lambda a: a.resource))
    update = attrs.evolve(update, flags=0, grants=ordered)
    data = encode_update(*_fields(update))
    assert data == encode(update)
    assert decode(data) == update


_SESSION = SessionId(7)
_GOOD: dict[str, Any] = {
    "qos_class": 0,
    "session": _SESSION,
    "epoch": 1,
    "sequence": 1,
    "freshness_ttl_ms": 0,
    "grants": {CreditResource.DATA_BYTES: 4096},
    "retry_after_us": 0,
}


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("qos_class", U32_MAX + 1),
        ("qos_class", -1),
        ("epoch", U64_MAX + 1),
        ("sequence", U64_MAX + 1),
        ("sequence", True),
        ("freshness_ttl_ms", U32_MAX + 1),
        ("retry_after_us", -1),
        ("session", 7),
        ("grants", {CreditResource.DATA_BYTES: U64_MAX + 1}),
        ("grants", {CreditResource.DATA_BYTES: -1}),
        ("grants", {1: 4096}),
    ],
)
def test_encode_update_refuses_what_the_validated_message_refuses(field: str, bad: Any) -> None:
    with pytest.raises(InvalidArgument):
        encode_update(**{**_GOOD, field: bad})


def test_encode_update_at_the_bounds_matches_the_message() -> None:
    grants = dict.fromkeys(CreditResource, U64_MAX)
    data = encode_update(U32_MAX, _SESSION, U64_MAX, U64_MAX, U32_MAX, grants, U64_MAX)
    message = ReceiverCreditUpdate(
        qos_class=U32_MAX,
        receiver_session_id=_SESSION,
        epoch=U64_MAX,
        sequence=U64_MAX,
        freshness_ttl_ms=U32_MAX,
        grants=tuple(CreditAmount(resource=r, amount=U64_MAX) for r in sorted(CreditResource)),
        retry_after_us=U64_MAX,
    )
    assert data == encode(message)


_ODD = [0, 1, 4, 5, 0xFFFF, 1 << 16, U32_MAX, 1 << 32, U64_MAX, 1 << 64, (1 << 128) - 1, 1 << 128]
_ODD += [-1, [], [1], [1, 1], [0], [[1, 2]], [[1, 2], [1, 3]], [[5, 1]], [[1, 2, 3]], b"x", "x"]


def _table_outcome(data: bytes) -> object:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_wire, "_update_of", lambda _structure: None)
        try:
            return decode(data)
        except DecodeError as exc:
            return exc.code


@settings(max_examples=25)
@given(update=receiver_credit_updates())
def test_the_one_pass_update_decode_agrees_with_the_layout_table(
    update: ReceiverCreditUpdate,
) -> None:
    """Every item of a valid update replaced by every odd value in turn (and none): both
    paths give the same message, or the same error code."""
    base = cbor2.loads(encode(update))
    cases = [base]
    for index in range(len(base)):
        cases += [[*base[:index], value, *base[index + 1 :]] for value in _ODD]
    for structure in cases:
        encoded = cbor2.dumps(structure, canonical=True)
        try:
            fast: object = decode(encoded)
        except DecodeError as exc:
            fast = exc.code
        assert fast == _table_outcome(encoded), structure
