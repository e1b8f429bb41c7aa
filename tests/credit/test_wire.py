"""The wire codec: round trips, strict decoding, golden vectors and the CDDL schema."""

from __future__ import annotations

import importlib.util
import json
import pickle
import typing
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import cbor2
import pytest
from cddl_subset import CddlError, Schema, load_cbor
from hypothesis import example, given
from hypothesis import strategies as st
from strategies import (
    capability_activations,
    capability_offers,
    control_messages,
    credit_returns,
    heartbeats,
    receiver_credit_updates,
    sender_credit_usages,
)

from tent_credit._arith import U64_MAX, U128_MAX
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
from tent_credit._wire import (
    MAX_DEPTH,
    MAX_MESSAGE_BYTES,
    MESSAGE_TYPE_TAGS,
    WireErrorCode,
    decode,
    encode,
)
from tent_credit.errors import DecodeError, InvalidArgument, RemoteProtocolError

ROOT = Path(__file__).resolve().parents[2]
CDDL_PATH = ROOT / "spec" / "wire.cddl"
GOLDEN_DIR = ROOT / "tests" / "golden"
SCHEMA = Schema.from_file(CDDL_PATH)

RULE_OF: dict[type, str] = {
    ReceiverCreditUpdate: "receiver-credit-update",
    SenderCreditUsage: "sender-credit-usage",
    CreditReturn: "credit-return",
    CapabilityOffer: "capability-offer",
    CapabilityActivation: "capability-activation",
    Heartbeat: "heartbeat",
}
STRATEGY_OF: dict[type, Callable[[], st.SearchStrategy[Any]]] = {
    ReceiverCreditUpdate: receiver_credit_updates,
    SenderCreditUsage: sender_credit_usages,
    CreditReturn: credit_returns,
    CapabilityOffer: capability_offers,
    CapabilityActivation: capability_activations,
    Heartbeat: heartbeats,
}
MESSAGE_TYPES = typing.get_args(ControlMessage)


def _load_regen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("golden_regen", GOLDEN_DIR / "regen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REGEN = _load_regen()
GOLDEN = json.loads((GOLDEN_DIR / "wire_vectors.json").read_text(encoding="utf-8"))


def decode_outcome(data: bytes) -> ControlMessage | DecodeError:
    """Decode, turning a DecodeError into a value; any other exception propagates (and fails)."""
    try:
        return decode(data)
    except DecodeError as exc:
        assert isinstance(exc.code, WireErrorCode)
        return exc


def decode_code(data: bytes, **kwargs: Any) -> WireErrorCode:
    with pytest.raises(DecodeError) as info:
        decode(data, **kwargs)
    return info.value.code


def has_duplicate_list_entries(structure: list[Any]) -> bool:
    """Whether a schema-shaped message repeats a resource or a version (CDDL can't say it)."""
    for field in structure[2:]:
        if type(field) is list and field:
            keys = [item[0] if type(item) is list else item for item in field]
            if len(set(map(repr, keys))) != len(keys):
                return True
    return False


# --------------------------------------------------------------------- round trips


def test_every_message_type_has_a_wire_tag_and_a_schema_rule() -> None:
    assert set(MESSAGE_TYPE_TAGS.values()) == set(MESSAGE_TYPES) == set(RULE_OF)
    assert sorted(MESSAGE_TYPE_TAGS) == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("message_type", MESSAGE_TYPES, ids=lambda t: t.__name__)
@given(data=st.data())
def test_round_trip_of_every_message_type(message_type: type, data: st.DataObject) -> None:
    message = data.draw(STRATEGY_OF[message_type]())
    encoded = encode(message)
    decoded = decode(encoded)
    assert type(decoded) is message_type
    assert decoded == message
    assert encode(decoded) == encoded
    assert encoded == cbor2.dumps(cbor2.loads(encoded), canonical=True)


@given(message=control_messages())
def test_encoding_conforms_to_exactly_its_own_cddl_rule(message: ControlMessage) -> None:
    structure = load_cbor(encode(message))
    assert SCHEMA.matches("control-message", structure)
    matching = {rule for rule in RULE_OF.values() if SCHEMA.matches(rule, structure)}
    assert matching == {RULE_OF[type(message)]}


def test_largest_message_fits_the_default_bound_with_room_to_spare() -> None:
    full = tuple(CreditAmount(resource=r, amount=U64_MAX) for r in CreditResource)
    largest = SenderCreditUsage(
        receiver_session_id=SessionId(U128_MAX),
        epoch=U64_MAX,
        sequence=U64_MAX,
        qos_class=0xFFFF_FFFF,
        consumed_totals=full,
        returned_totals=full,
        pending_demand=full,
    )
    assert len(encode(largest)) == 179 < MAX_MESSAGE_BYTES


def test_session_id_is_a_plain_integer_up_to_u64_and_a_bignum_above() -> None:
    small = encode(Heartbeat(receiver_session_id=SessionId(U64_MAX), epoch=1))
    big = encode(Heartbeat(receiver_session_id=SessionId(U64_MAX + 1), epoch=1))
    assert small.hex() == "8506011bffffffffffffffff0100"
    assert big.hex() == "850601c249010000000000000000" + "0100"


def test_amount_order_is_preserved_on_the_wire() -> None:
    forward = (
        CreditAmount(resource=CreditResource.DATA_BYTES, amount=5),
        CreditAmount(resource=CreditResource.REQUEST_SLOTS, amount=6),
    )
    for grants in (forward, forward[::-1]):
        update = ReceiverCreditUpdate(
            qos_class=0, receiver_session_id=SessionId(1), epoch=1, sequence=1, grants=grants
        )
        assert decode(encode(update)).grants == grants  # type: ignore[union-attr]


def test_encode_rejects_a_value_that_is_not_a_control_message() -> None:
    with pytest.raises(InvalidArgument) as info:
        encode(SessionId(1))  # type: ignore[arg-type]
    assert not isinstance(info.value, DecodeError)


# --------------------------------------------------------------------- golden vectors


def test_golden_file_is_not_stale() -> None:
    assert (GOLDEN_DIR / "wire_vectors.json").read_text(encoding="utf-8") == REGEN.render()


def test_golden_vectors_cover_every_type_and_a_u128_session() -> None:
    types = {vector["type"] for vector in GOLDEN["vectors"]}
    assert types == {t.__name__ for t in MESSAGE_TYPES}
    sessions = [v["fields"].get("receiver_session_id", 0) for v in GOLDEN["vectors"]]
    assert any(s > U64_MAX for s in sessions)
    assert any(0 < s <= U64_MAX for s in sessions)


@pytest.mark.parametrize("vector", GOLDEN["vectors"], ids=lambda v: v["name"])
def test_golden_vector_encoding_is_unchanged(vector: dict[str, Any]) -> None:
    message = REGEN.message_from(vector["type"], vector["fields"])
    assert encode(message).hex() == vector["hex"]
    assert decode(bytes.fromhex(vector["hex"])) == message


@pytest.mark.parametrize("vector", GOLDEN["vectors"], ids=lambda v: v["name"])
def test_golden_vector_conforms_to_the_cddl_schema(vector: dict[str, Any]) -> None:
    structure = load_cbor(bytes.fromhex(vector["hex"]))
    rule = RULE_OF[MESSAGE_TYPE_TAGS[structure[0]]]
    assert MESSAGE_TYPE_TAGS[structure[0]].__name__ == vector["type"]
    assert SCHEMA.matches(rule, structure)
    assert SCHEMA.matches("control-message", structure)


# Each edit makes the schema disagree with the codec; some golden vector must then fail.
SCHEMA_MUTATIONS = [
    ("heartbeat = [\n  type: 6,", "heartbeat = [\n  type: 7,"),
    (
        "  freshness-ttl-ms: u32,\n  grants: amounts,",
        "  grants: amounts,\n  freshness-ttl-ms: u32,",
    ),
    ("u32 = uint .size 4", "u32 = uint .size 1"),
    ("amounts = [0*4 credit-amount]", "amounts = [0*2 credit-amount]"),
    ("credit-resource = 1..4", "credit-resource = 1..3"),
    ("#6.2(bstr .size (9..16))", "#6.3(bstr .size (9..16))"),
    ("versions = [1*8 protocol-version]", "versions = [1*3 protocol-version]"),
    ("  versions: versions,\n  qos-class: u32,\n]", "  versions: versions,\n]"),
    ("  epoch: u64,\n  qos-class: u32,\n]\n\namounts", "  epoch: u64,\n]\n\namounts"),
    ("  selected-version: u16,\n", "  selected-version: u16,\n  selected-version-2: u16,\n"),
]


@pytest.mark.parametrize(
    "old,new", SCHEMA_MUTATIONS, ids=[f"edit{i}" for i, _ in enumerate(SCHEMA_MUTATIONS)]
)
def test_cddl_check_fails_when_schema_and_encoding_disagree(old: str, new: str) -> None:
    text = CDDL_PATH.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"mutation anchor not found once: {old!r}"
    mutated = Schema(text.replace(old, new))
    verdicts = [
        mutated.matches("control-message", load_cbor(bytes.fromhex(v["hex"])))
        for v in GOLDEN["vectors"]
    ]
    assert not all(verdicts)


@pytest.mark.parametrize(
    "structure",
    [
        [6, 1, 99, 4],  # a field missing
        [6, 1, 99, 4, 0, 0],  # a field too many
        [6, 2, 99, 4, 0],  # schema version 2
        [7, 1, 99, 4, 0],  # unknown type
        [6, 1, 0, 4, 0],  # session 0
        [6, 1, cbor2.CBORTag(2, b"\x01" * 8), 4, 0],  # bignum too short for > u64
        [6, 1, cbor2.CBORTag(2, b"\x01" * 17), 4, 0],  # bignum beyond u128
        [6, 1, 99, 1 << 64, 0],  # epoch beyond u64
        [1, 1, 1 << 16, 0, 1, 1, 1, 0, [], 0],  # flags beyond u16
        [1, 1, 0, 0, 1, 1, 1, 0, [[5, 1]], 0],  # unknown resource
        [1, 1, 0, 0, 1, 1, 1, 0, [[1, 1]] * 5, 0],  # five amounts
        [1, 1, 0, 0, 1, 1, 1, 0, [[1, 1, 1]], 0],  # an amount of three items
        [4, 1, [], 0],  # no versions
        [4, 1, [1] * 9, 0],  # nine versions
        [4, 1, [0], 0],  # version 0
        [4, 1, [1 << 16], 0],  # version beyond u16
        [6, 1, 99, -1, 0],  # negative
        [6, 1, 99, "4", 0],  # text
    ],
)
def test_cddl_and_codec_both_reject_a_malformed_structure(structure: list[Any]) -> None:
    assert not SCHEMA.matches("control-message", structure)
    assert isinstance(decode_outcome(cbor2.dumps(structure, canonical=True)), DecodeError)


def test_cddl_subset_parser_refuses_what_it_does_not_understand() -> None:
    with pytest.raises(CddlError):
        Schema("m = { a: uint }")  # maps are outside the subset
    with pytest.raises(CddlError):
        Schema("m = [a: nope]")  # undefined rule
    with pytest.raises(CddlError):
        Schema("m = uint .le 5")  # an unsupported control operator
    with pytest.raises(CddlError):
        Schema("m = 1\nm = 2")  # a rule defined twice


INTERESTING = [0, 1, 4, 5, 0xFFFF, 1 << 16, 1 << 32, U64_MAX, 1 << 64, U128_MAX, 1 << 128, -1]
INTERESTING += [[], [1], [1, 1], [0], [[1, 2]], [[1, 2], [1, 3]], [[2, 1], [1, 2]], "x", b"x"]


def _paths(node: Any, prefix: tuple[int, ...] = ()) -> list[tuple[int, ...]]:
    paths = [prefix] if prefix else []
    if type(node) is list:
        for i, child in enumerate(node):
            paths += _paths(child, (*prefix, i))
    return paths


def _replace(node: Any, path: tuple[int, ...], value: Any) -> Any:
    if not path:
        return value
    copy = list(node)
    copy[path[0]] = _replace(copy[path[0]], path[1:], value)
    return copy


@given(message=control_messages(), data=st.data())
def test_codec_accepts_exactly_what_the_cddl_schema_accepts(
    message: ControlMessage, data: st.DataObject
) -> None:
    """Replace one item of a valid message; the codec and the schema must agree on it
    (modulo the uniqueness rules CDDL cannot express)."""
    structure = cbor2.loads(encode(message))
    path = data.draw(st.sampled_from(_paths(structure)), label="path")
    mutated = _replace(structure, path, data.draw(st.sampled_from(INTERESTING), label="value"))
    encoded = cbor2.dumps(mutated, canonical=True)
    schema_ok = SCHEMA.matches("control-message", load_cbor(encoded))
    expected = schema_ok and not has_duplicate_list_entries(mutated)
    outcome = decode_outcome(encoded)
    assert (not isinstance(outcome, DecodeError)) == expected, outcome
    if not isinstance(outcome, DecodeError):
        assert_constructs(outcome)


def assert_constructs(message: ControlMessage) -> None:
    """``decode`` builds what it accepts without the classes' validators (``_wire._trusted``):
    the validated constructors must accept the same values and build an equal message."""
    rebuilt = {
        field.name: (
            tuple(attrs.evolve(a) for a in value)
            if isinstance(value, tuple) and value and isinstance(value[0], CreditAmount)
            else value
        )
        for field in attrs.fields(type(message))
        for value in [getattr(message, field.name)]
    }
    assert type(message)(**rebuilt) == message


# --------------------------------------------------------------------- strict decoding


HEARTBEAT = [6, 1, 99, 4, 0]
UPDATE = [1, 1, 0, 0, 1, 1, 1, 0, [[1, 10]], 0]


def dumps(structure: Any) -> bytes:
    return cbor2.dumps(structure, canonical=True)


@pytest.mark.parametrize(
    "data,code",
    [
        # well-formedness and the CBOR subset
        ("", WireErrorCode.MALFORMED),
        ("85060118", WireErrorCode.MALFORMED),  # truncated header
        ("850601186304", WireErrorCode.MALFORMED),  # truncated array
        ("85060118630400" + "00", WireErrorCode.MALFORMED),  # trailing byte
        ("9f060118630400ff", WireErrorCode.MALFORMED),  # indefinite-length array
        ("8506015f41634100ff0400", WireErrorCode.MALFORMED),  # indefinite-length bytes
        ("ff", WireErrorCode.MALFORMED),  # a lone break
        ("a201010102", WireErrorCode.MALFORMED),  # a map with a duplicate key
        ("a0", WireErrorCode.MALFORMED),  # any map
        ("850601f94000" + "0400", WireErrorCode.MALFORMED),  # a half float
        ("850601fb3ff0000000000000" + "0400", WireErrorCode.MALFORMED),  # a double
        ("850601f5" + "0400", WireErrorCode.MALFORMED),  # true
        ("850601f6" + "0400", WireErrorCode.MALFORMED),  # null
        ("850601c3490100000000000000000400", WireErrorCode.MALFORMED),  # tag 3 (negative bignum)
        ("850601c118630400", WireErrorCode.MALFORMED),  # tag 1 (epoch time)
        ("850601c218630400", WireErrorCode.MALFORMED),  # bignum tag around an integer
        ("850601c2c249010000000000000000" + "0400", WireErrorCode.MALFORMED),  # nested tag
        ("850601" + "1c" + "0400", WireErrorCode.MALFORMED),  # reserved additional info 28
        ("01", WireErrorCode.MALFORMED),  # not an array
        ("8106", WireErrorCode.MALFORMED),  # an array of one
        # canonical form
        ("8506011863" + "1804" + "00", WireErrorCode.NON_CANONICAL),  # epoch 4 in two bytes
        ("850601186304" + "190000", WireErrorCode.NON_CANONICAL),  # qos 0 in three bytes
        ("9805060118630400", WireErrorCode.NON_CANONICAL),  # array length in two bytes
        ("850601c2416304" + "00", WireErrorCode.NON_CANONICAL),  # bignum for 99
        ("850601c25100" + "ff" * 16 + "0400", WireErrorCode.NON_CANONICAL),  # leading zero
        ("850601d802490100000000000000000400", WireErrorCode.NON_CANONICAL),  # tag in 2 bytes
        # message type and schema version
        (dumps([7, *HEARTBEAT[1:]]).hex(), WireErrorCode.UNKNOWN_TYPE),
        (dumps([0, *HEARTBEAT[1:]]).hex(), WireErrorCode.UNKNOWN_TYPE),
        (dumps(["6", *HEARTBEAT[1:]]).hex(), WireErrorCode.UNKNOWN_TYPE),
        (dumps([-6, *HEARTBEAT[1:]]).hex(), WireErrorCode.UNKNOWN_TYPE),
        (dumps([6, 2, 99, 4, 0]).hex(), WireErrorCode.UNSUPPORTED_SCHEMA),
        (dumps([6, 0, 99, 4, 0]).hex(), WireErrorCode.UNSUPPORTED_SCHEMA),
        (dumps([6, 2, "a future layout"]).hex(), WireErrorCode.UNSUPPORTED_SCHEMA),
        (dumps([6, "1", 99, 4, 0]).hex(), WireErrorCode.INVALID_FIELD),
        # fields
        (dumps(HEARTBEAT[:-1]).hex(), WireErrorCode.INVALID_FIELD),
        (dumps([*HEARTBEAT, 0]).hex(), WireErrorCode.INVALID_FIELD),
        (dumps([6, 1, 0, 4, 0]).hex(), WireErrorCode.INVALID_FIELD),
        (dumps([6, 1, 1 << 128, 4, 0]).hex(), WireErrorCode.INVALID_FIELD),
        (dumps([6, 1, -1, 4, 0]).hex(), WireErrorCode.INVALID_FIELD),
        (dumps([6, 1, 99, 1 << 64, 0]).hex(), WireErrorCode.INVALID_FIELD),
        (dumps([6, 1, 99, 4, 1 << 32]).hex(), WireErrorCode.INVALID_FIELD),
        (dumps([6, 1, 99, b"\x04", 0]).hex(), WireErrorCode.INVALID_FIELD),
        (dumps([6, 1, 99, [4], 0]).hex(), WireErrorCode.INVALID_FIELD),
        (dumps([1, 1, 1 << 16, *UPDATE[3:]]).hex(), WireErrorCode.INVALID_FIELD),
        (dumps([*UPDATE[:8], [[0, 1]], 0]).hex(), WireErrorCode.INVALID_FIELD),
        (dumps([*UPDATE[:8], [[5, 1]], 0]).hex(), WireErrorCode.INVALID_FIELD),
        (dumps([*UPDATE[:8], [[1, 1], [1, 2]], 0]).hex(), WireErrorCode.INVALID_FIELD),
        (
            dumps([*UPDATE[:8], [[1, 1], [2, 1], [3, 1], [4, 1], [1, 1]], 0]).hex(),
            WireErrorCode.INVALID_FIELD,
        ),
        # an amount past u64 is a bignum, whose byte string sits one level too deep
        (dumps([*UPDATE[:8], [[1, 1 << 64]], 0]).hex(), WireErrorCode.TOO_DEEP),
        (dumps([*UPDATE[:8], [[1]], 0]).hex(), WireErrorCode.INVALID_FIELD),
        (dumps([*UPDATE[:8], [1, 10], 0]).hex(), WireErrorCode.INVALID_FIELD),
        (dumps([*UPDATE[:8], 7, 0]).hex(), WireErrorCode.INVALID_FIELD),
        (dumps([4, 1, [], 0]).hex(), WireErrorCode.INVALID_FIELD),
        (dumps([4, 1, list(range(1, 10)), 0]).hex(), WireErrorCode.INVALID_FIELD),
        (dumps([4, 1, [0], 0]).hex(), WireErrorCode.INVALID_FIELD),
        (dumps([4, 1, [1, 1], 0]).hex(), WireErrorCode.INVALID_FIELD),
        (dumps([4, 1, [1 << 16], 0]).hex(), WireErrorCode.INVALID_FIELD),
        (dumps([5, 1, [1], 1 << 16, 1, 1, 0, 0]).hex(), WireErrorCode.INVALID_FIELD),
    ],
)
def test_hand_built_encoding_is_rejected_with_its_code(data: str, code: WireErrorCode) -> None:
    assert decode_code(bytes.fromhex(data)) == code


def test_the_valid_baselines_of_the_rejection_table_decode() -> None:
    assert decode(dumps(HEARTBEAT)) == Heartbeat(receiver_session_id=SessionId(99), epoch=4)
    assert isinstance(decode(dumps(UPDATE)), ReceiverCreditUpdate)
    assert isinstance(decode(bytes.fromhex("85060118630400")), Heartbeat)


def test_size_bound_is_checked_first_and_is_inclusive() -> None:
    encoded = encode(Heartbeat(receiver_session_id=SessionId(99), epoch=4))
    assert decode(encoded, max_bytes=len(encoded)) == decode(encoded)
    assert decode_code(encoded, max_bytes=len(encoded) - 1) == WireErrorCode.TOO_LARGE
    # garbage past the default bound is refused for its size before it is parsed
    assert decode_code(b"\xff" * (MAX_MESSAGE_BYTES + 1)) == WireErrorCode.TOO_LARGE
    assert decode_code(b"\x81" * 5000) == WireErrorCode.TOO_LARGE


def test_nesting_deeper_than_the_bound_is_rejected() -> None:
    assert decode_code(b"\x81" * MAX_DEPTH + b"\x01") == WireErrorCode.TOO_DEEP
    # an amount wrapped in one array too many, inside an otherwise valid update
    assert decode_code(dumps([*UPDATE[:8], [[[1, 10]]], 0])) == WireErrorCode.TOO_DEEP
    # deep enough to exhaust a recursive parser's stack: the pre-scan is iterative
    assert decode_code(b"\x81" * 4000 + b"\x01") == WireErrorCode.TOO_DEEP


def test_nesting_at_exactly_the_bound_is_accepted() -> None:
    # [.., [[resource, amount]], ..]: the amount is the deepest item, at MAX_DEPTH
    assert MAX_DEPTH == 4
    assert isinstance(decode(dumps(UPDATE)), ReceiverCreditUpdate)


@given(data=st.binary(max_size=256))
def test_arbitrary_bytes_yield_a_message_or_a_decode_error(data: bytes) -> None:
    outcome = decode_outcome(data)
    if not isinstance(outcome, DecodeError):
        assert encode(outcome) == data  # anything accepted is the canonical encoding


def _cbor_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.integers(min_value=-(1 << 70), max_value=1 << 130),
        st.sampled_from([0, 1, 2, 4, 6, 1 << 16, 1 << 64, U128_MAX]),
        st.binary(max_size=20),
        st.text(max_size=5),
        st.booleans(),
        st.none(),
        st.floats(allow_nan=False),
    )
    return st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=10)
            | st.dictionaries(st.integers(0, 5), children, max_size=3)
        ),
        max_leaves=30,
    )


@given(value=_cbor_values(), canonical=st.booleans())
def test_arbitrary_cbor_values_yield_a_message_or_a_decode_error(
    value: Any, canonical: bool
) -> None:
    data = cbor2.dumps(value, canonical=canonical)
    outcome = decode_outcome(data)
    if not isinstance(outcome, DecodeError):
        assert encode(outcome) == data


@given(message=control_messages(), data=st.data())
def test_mutated_valid_encodings_yield_a_message_or_a_decode_error(
    message: ControlMessage, data: st.DataObject
) -> None:
    encoded = bytearray(encode(message))
    mutation = data.draw(
        st.sampled_from(["flip", "truncate", "append", "insert", "delete", "set"]), label="kind"
    )
    position = data.draw(st.integers(0, len(encoded) - 1), label="position")
    if mutation == "flip":
        encoded[position] ^= 1 << data.draw(st.integers(0, 7), label="bit")
    elif mutation == "truncate":
        del encoded[position:]
    elif mutation == "append":
        encoded += data.draw(st.binary(min_size=1, max_size=8), label="suffix")
    elif mutation == "insert":
        encoded.insert(position, data.draw(st.integers(0, 255), label="byte"))
    elif mutation == "delete":
        del encoded[position]
    else:
        encoded[position] = data.draw(st.integers(0, 255), label="byte")
    outcome = decode_outcome(bytes(encoded))
    if not isinstance(outcome, DecodeError):
        assert encode(outcome) == bytes(encoded)
        assert_constructs(outcome)


def test_a_constructor_error_surfaces_as_a_decode_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Even if the shape check and a constructor drift apart, no InvalidArgument leaks."""
    import tent_credit._wire as wire

    monkeypatch.setattr(wire, "_check_field", lambda name, kind, item: None)
    data = dumps([6, 1, 0, 4, 0])  # session 0: only SessionId's own validator sees it now
    with pytest.raises(DecodeError) as info:
        decode(data)
    assert info.value.code == WireErrorCode.INVALID_FIELD
    assert isinstance(info.value.__cause__, InvalidArgument)


# --------------------------------------------------------------------- caller errors, errors


@pytest.mark.parametrize("bad", ["85060118630400", 5, None, [0x85]])
def test_decode_of_a_non_bytes_argument_is_a_caller_error(bad: Any) -> None:
    with pytest.raises(InvalidArgument) as info:
        decode(bad)
    assert not isinstance(info.value, DecodeError)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, None])
def test_decode_rejects_an_invalid_size_bound(bad: Any) -> None:
    with pytest.raises(InvalidArgument) as info:
        decode(b"\x00", max_bytes=bad)
    assert not isinstance(info.value, DecodeError)


def test_decode_accepts_bytes_like_input() -> None:
    encoded = encode(Heartbeat(receiver_session_id=SessionId(99), epoch=4))
    expected = decode(encoded)
    assert decode(bytearray(encoded)) == expected
    assert decode(memoryview(encoded)) == expected  # type: ignore[arg-type]


def test_decode_error_is_a_remote_protocol_error_with_a_code_that_survives_pickling() -> None:
    with pytest.raises(DecodeError) as info:
        decode(b"")
    error = info.value
    assert isinstance(error, RemoteProtocolError)
    assert isinstance(error, InvalidArgument)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is DecodeError
    assert copy.code is WireErrorCode.MALFORMED
    assert str(copy) == str(error)


def test_wire_error_codes_are_stable_numbers() -> None:
    assert {code.name: int(code) for code in WireErrorCode} == {
        "MALFORMED": 1,
        "UNKNOWN_TYPE": 2,
        "UNSUPPORTED_SCHEMA": 3,
        "TOO_LARGE": 4,
        "INVALID_FIELD": 5,
        "TOO_DEEP": 6,
        "NON_CANONICAL": 7,
    }


@given(value=st.integers(1, U128_MAX), width=st.integers(1, 16))
@example(value=U64_MAX, width=8)  # the widest value a header holds: never a bignum
@example(value=1 << 64, width=9)  # the narrowest canonical bignum
@example(value=1 << 64, width=10)  # the same with a leading zero byte
def test_a_session_id_as_a_bignum_is_accepted_exactly_when_it_is_canonical(
    value: int, width: int
) -> None:
    # The pre-scan alone decides canonical form (no re-encoding): a bignum's bytes must have
    # no leading zero, and a value below 2**64 must not be a bignum at all.
    if value.bit_length() > 8 * width:
        return
    bignum = bytes([0xC2, 0x40 | width]) + value.to_bytes(width, "big")
    data = bytes([0x85, 0x06, 0x01]) + bignum + bytes([0x04, 0x00])  # a heartbeat
    outcome = decode_outcome(data)
    canonical = value >= 1 << 64 and width == (value.bit_length() + 7) // 8
    if canonical:
        assert isinstance(outcome, Heartbeat) and outcome.receiver_session_id.value == value
        assert encode(outcome) == data == dumps([6, 1, value, 4, 0])
    else:
        assert isinstance(outcome, DecodeError) and outcome.code is WireErrorCode.NON_CANONICAL


def test_the_rfc_structs_defaults_construct_and_round_trip() -> None:
    # RFC ``ReceiverCreditUpdateV1`` / ``SenderCreditUsageV1``: flags, qos_class, epoch, sequence
    # and freshness_ttl_ms default to 0 and the vectors to empty; only the session id has none
    session = SessionId(value=9)
    update = ReceiverCreditUpdate(receiver_session_id=session)
    assert (update.qos_class, update.epoch, update.sequence, update.grants) == (0, 0, 0, ())
    assert (update.flags, update.freshness_ttl_ms, update.schema_version) == (0, 0, 1)
    usage = SenderCreditUsage(receiver_session_id=session)
    assert (usage.qos_class, usage.epoch, usage.sequence) == (0, 0, 0)
    assert usage.consumed_totals == usage.pending_demand == ()
    for message in (update, usage):
        assert decode(encode(message)) == message
    with pytest.raises(TypeError):
        ReceiverCreditUpdate()  # type: ignore[call-arg]  # the session is never defaulted
