"""Wire codec of the control messages: canonical CBOR out, strict CBOR in.

Layout (the normative schema is ``spec/wire.cddl``; golden vectors are in
``tests/golden/wire_vectors.json``). Every message is one definite-length CBOR array::

    [type_tag, schema_version, field, field, ...]

with the fields in the fixed order of :data:`_LAYOUTS` below (the declaration order of the
message class, ``schema_version`` moved to the front):

====  ========================  ==================================================================
tag   message                   fields after ``schema_version``
====  ========================  ==================================================================
1     ReceiverCreditUpdate      flags, qos_class, session, epoch, sequence, freshness_ttl_ms,
                                grants, retry_after_us
2     SenderCreditUsage         session, epoch, sequence, qos_class, consumed_totals,
                                returned_totals, pending_demand
3     CreditReturn              session, epoch, sequence, qos_class, returned_totals
4     CapabilityOffer           versions, qos_class
5     CapabilityActivation      versions, selected_version, session, epoch, qos_class,
                                freshness_ttl_ms
6     Heartbeat                 session, epoch, qos_class
====  ========================  ==================================================================

* integers (u16/u32/u64) are CBOR unsigned integers in their shortest form;
* a session id (non-zero u128) is an unsigned integer when it fits in 64 bits, else a tag-2
  bignum whose byte string has no leading zero byte (what canonical CBOR produces);
* an amount vector (grants, totals, demand) is an array of at most 4 ``[resource, amount]``
  pairs with unique resources, *in the message's order* (the codec is a bijection between
  messages and valid encodings, so decode(encode(m)) == m and encode(decode(b)) == b);
* a version list is an array of 1..8 unique non-zero u16.

Positional arrays keep a message small (a heartbeat with a 64-bit session is ~20 bytes) and make
the schema reviewable line by line against the RFC's ``struct ...V1`` definitions. The
``schema_version`` sits at a fixed position in every message, so a decoder can refuse a
future version before it interprets any other field.

Wire-level failure reasons are :class:`WireErrorCode` values carried by
:class:`~tent_credit.errors.DecodeError` (``.code``), apart from the Python exceptions
(h2's ``errors`` vs ``exceptions``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TypeVar

import attrs
import cbor2

from ._arith import U32_MAX, U64_MAX, U128_MAX
from ._codes import WireErrorCode
from ._describe import describe
from ._messages import (
    MAX_RESOURCES_PER_MESSAGE,
    MAX_VERSIONS,
    SCHEMA_VERSION,
    CapabilityActivation,
    CapabilityOffer,
    ControlMessage,
    CreditReturn,
    Heartbeat,
    ReceiverCreditUpdate,
    SenderCreditUsage,
)
from ._types import CreditAmount, CreditResource, SessionId, _IdentityEnum
from .errors import DecodeError, InvalidArgument

__all__ = [
    "MAX_DEPTH",
    "MAX_MESSAGE_BYTES",
    "MESSAGE_TYPE_TAGS",
    "WireErrorCode",
    "decode",
    "encode",
    "encode_update",
]

MAX_MESSAGE_BYTES = 4096
"""Default bound on an encoded message; the largest valid message is 179 bytes (a usage
report with three full amount vectors of u64 maxima and a u128 session)."""

MAX_DEPTH = 4
"""Deepest data item allowed: the top-level array is depth 1, each enclosing array or tag adds
one. The deepest valid item is an amount inside ``[.., [[resource, amount]], ..]`` (depth 4)."""

U16_MAX = 0xFFFF


class _Kind(_IdentityEnum):
    """How one field is represented on the wire (hashed by identity: a lookup per field)."""

    U16 = enum.auto()
    U32 = enum.auto()
    U64 = enum.auto()
    SESSION = enum.auto()
    AMOUNTS = enum.auto()
    VERSIONS = enum.auto()


@attrs.frozen
class _Layout:
    tag: int
    cls: type[ControlMessage]
    fields: tuple[tuple[str, _Kind], ...]


_U16, _U32, _U64 = _Kind.U16, _Kind.U32, _Kind.U64
_SESSION, _AMOUNTS, _VERSIONS = _Kind.SESSION, _Kind.AMOUNTS, _Kind.VERSIONS

# The one table of the wire layout (spec/wire.cddl mirrors it rule by rule).
_LAYOUTS: tuple[_Layout, ...] = (
    _Layout(
        1,
        ReceiverCreditUpdate,
        (
            ("flags", _U16),
            ("qos_class", _U32),
            ("receiver_session_id", _SESSION),
            ("epoch", _U64),
            ("sequence", _U64),
            ("freshness_ttl_ms", _U32),
            ("grants", _AMOUNTS),
            ("retry_after_us", _U64),
        ),
    ),
    _Layout(
        2,
        SenderCreditUsage,
        (
            ("receiver_session_id", _SESSION),
            ("epoch", _U64),
            ("sequence", _U64),
            ("qos_class", _U32),
            ("consumed_totals", _AMOUNTS),
            ("returned_totals", _AMOUNTS),
            ("pending_demand", _AMOUNTS),
        ),
    ),
    _Layout(
        3,
        CreditReturn,
        (
            ("receiver_session_id", _SESSION),
            ("epoch", _U64),
            ("sequence", _U64),
            ("qos_class", _U32),
            ("returned_totals", _AMOUNTS),
        ),
    ),
    _Layout(4, CapabilityOffer, (("versions", _VERSIONS), ("qos_class", _U32))),
    _Layout(
        5,
        CapabilityActivation,
        (
            ("versions", _VERSIONS),
            ("selected_version", _U16),
            ("receiver_session_id", _SESSION),
            ("epoch", _U64),
            ("qos_class", _U32),
            ("freshness_ttl_ms", _U32),
        ),
    ),
    _Layout(
        6,
        Heartbeat,
        (("receiver_session_id", _SESSION), ("epoch", _U64), ("qos_class", _U32)),
    ),
)
_M = TypeVar("_M")

_BY_TAG: dict[int, _Layout] = {layout.tag: layout for layout in _LAYOUTS}
_BY_CLASS: dict[type, _Layout] = {layout.cls: layout for layout in _LAYOUTS}

MESSAGE_TYPE_TAGS: Mapping[int, type[ControlMessage]] = MappingProxyType(
    {layout.tag: layout.cls for layout in _LAYOUTS}
)
"""Type tag → message class, as laid out on the wire (read-only)."""

_UINT_MAX = {_U16: U16_MAX, _U32: U32_MAX, _U64: U64_MAX}
_RESOURCE_VALUES = frozenset(int(r) for r in CreditResource)
_RESOURCE_OF = {int(r): r for r in CreditResource}  # a dict lookup, not an enum call per amount


# --------------------------------------------------------------------------------- encode


def encode(message: ControlMessage) -> bytes:
    """Encode ``message`` as canonical CBOR (``cbor2.dumps(..., canonical=True)``).

    Raises :class:`InvalidArgument` if ``message`` is not one of the six control messages. The
    message classes validate their fields on construction, so every message encodes.
    """
    layout = _BY_CLASS.get(type(message))
    if layout is None:
        raise InvalidArgument(f"not a control message: {type(message).__name__}")
    wire: list[Any] = [layout.tag, message.schema_version]
    for name, kind in layout.fields:  # inline, not a call per field: one update per transfer
        value = getattr(message, name)
        if kind is _AMOUNTS:
            value = [[int(a.resource), a.amount] for a in value]
        elif kind is _SESSION:
            value = value.value
        elif kind is _VERSIONS:
            value = list(value)
        wire.append(value)
    return cbor2.dumps(wire, canonical=True)


def encode_update(  # noqa: PLR0917 (the update's fields, in wire order)
    qos_class: int,
    session: SessionId,
    epoch: int,
    sequence: int,
    freshness_ttl_ms: int,
    grants: Mapping[CreditResource, int],
    retry_after_us: int,
) -> bytes:
    """What ``encode(ReceiverCreditUpdate(...))`` writes for these fields (``flags`` 0, the
    grants in resource order), without building the message: the receiver sends one update
    per top-up, and the validated message and its amounts were half of that update's Python
    calls (docs/benchmarks.md#credit-update-path). The same range checks run inline; a value that
    fails one goes through the validated constructor, which raises
    :class:`InvalidArgument` as :func:`encode`'s caller would see."""
    fields = (qos_class, epoch, sequence, freshness_ttl_ms, retry_after_us)
    valid = type(session) is SessionId and len(grants) <= MAX_RESOURCES_PER_MESSAGE
    for value, top in zip(fields, _UPDATE_TOPS, strict=True):
        valid = valid and type(value) is int and 0 <= value <= top
    pairs: list[list[int]] = []
    for r, a in sorted(grants.items()) if valid else ():
        if type(r) is not CreditResource or type(a) is not int or not 0 <= a <= U64_MAX:
            valid = False
            break
        pairs.append([int(r), a])
    if valid:
        wire: list[object] = [1, SCHEMA_VERSION, 0, qos_class, session.value, epoch, sequence]
        wire += (freshness_ttl_ms, pairs, retry_after_us)
        return cbor2.dumps(wire, canonical=True)
    return encode(
        ReceiverCreditUpdate(
            qos_class=qos_class,
            receiver_session_id=session,
            epoch=epoch,
            sequence=sequence,
            freshness_ttl_ms=freshness_ttl_ms,
            grants=tuple(CreditAmount(resource=r, amount=a) for r, a in sorted(grants.items())),
            retry_after_us=retry_after_us,
        )
    )


# the bounds of encode_update's integer fields, in its argument order
_UPDATE_TOPS = (U32_MAX, U64_MAX, U64_MAX, U32_MAX, U64_MAX)


# --------------------------------------------------------------------------------- decode


def decode(data: bytes, *, max_bytes: int = MAX_MESSAGE_BYTES) -> ControlMessage:
    """Decode one control message from ``data``, strictly.

    The checks run in this order, and no runtime object is built before all of them pass:

    1. size: ``len(data) > max_bytes`` → ``TOO_LARGE``;
    2. an iterative pre-scan of the CBOR headers (no recursion, nothing allocated per item):
       truncation, trailing bytes, indefinite lengths, maps (the schema has none, so duplicate
       keys cannot reach the parser), floats and simple values, tags other than 2 (bignum) and
       a bignum not wrapping a byte string → ``MALFORMED``; an item deeper than
       :data:`MAX_DEPTH` → ``TOO_DEEP``; a non-minimal integer, length or tag, or a bignum with
       leading zero bytes or for a value that fits in 64 bits → ``NON_CANONICAL``; a bignum
       longer than 16 bytes (wider than any field, u128) → ``INVALID_FIELD``, so no unbounded
       integer is ever built;
    3. ``cbor2.loads`` of the pre-scanned bytes;
    4. shape: a top-level array of at least two items (else ``MALFORMED``), a known type tag
       (else ``UNKNOWN_TYPE``), ``schema_version`` 1 (else ``UNSUPPORTED_SCHEMA``), then the
       exact field count and every field's type and range, list lengths and uniqueness, known
       resources (else ``INVALID_FIELD``);
    5. construction of the message from the checked values, without running the classes'
       validators again (step 4 made the same checks; ``tests/credit/test_wire.py`` compares
       every accepted message with the validated constructors' build). A session id's own
       check still runs, and its ``InvalidArgument`` becomes ``DecodeError(INVALID_FIELD)``.
       A credit update takes steps 4 and 5 in one pass (:func:`_update_of`); whatever that
       pass does not accept goes through the table, so every refusal keeps its code.

    The schema's CBOR subset has no maps, floats, strings or tags but bignums, so step 2's
    header rules are all canonical CBOR asks of it: the bytes it lets through are exactly what
    ``cbor2.dumps(..., canonical=True)`` writes for what they decode to, and no re-encoding is
    needed to tell (it was step 5 until it showed up as a fifth of the decode's time;
    ``tests/credit/test_wire.py`` checks the identity on every message it accepts).

    Any ``bytes`` yield a message or a :class:`DecodeError` (with ``.code`` set), never another
    exception; no error message formats an unbounded input value. Raises
    :class:`InvalidArgument` (not a ``DecodeError``) only for a caller error: ``data`` not
    bytes-like or a released ``memoryview``, or ``max_bytes`` not a positive int. The codec
    keeps no state.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidArgument(f"data must be bytes, got {type(data).__name__}")
    if type(max_bytes) is not int or max_bytes < 1:
        raise InvalidArgument(f"max_bytes must be a positive int, got {describe(max_bytes)}")
    try:
        raw = bytes(data)
    except ValueError as exc:  # a released memoryview: the caller's buffer, not the peer's bytes
        raise InvalidArgument("data is a released memoryview") from exc
    if len(raw) > max_bytes:
        raise DecodeError(
            f"message of {len(raw)} bytes exceeds the bound of {max_bytes}", WireErrorCode.TOO_LARGE
        )
    _prescan(raw)
    try:
        structure = cbor2.loads(raw)
    except (cbor2.CBORDecodeError, ValueError, OverflowError, RecursionError) as exc:
        # cbor2's message may quote the input: only its type goes into ours
        raise DecodeError(
            f"CBOR decoding failed ({type(exc).__name__})", WireErrorCode.MALFORMED
        ) from exc
    update = _update_of(structure)
    if update is not None:
        return update
    layout = _validate_shape(structure)
    values: dict[str, Any] = {"schema_version": structure[1]}
    try:
        for (name, kind), item in zip(layout.fields, structure[2:], strict=True):
            if kind is _AMOUNTS:
                values[name] = tuple([_amount(_RESOURCE_OF[r], a) for r, a in item])
            elif kind is _SESSION:
                values[name] = SessionId(item)
            else:
                values[name] = tuple(item) if kind is _VERSIONS else item
        return _trusted(layout.cls, values)
    except InvalidArgument as exc:
        # The shape check mirrors every constructor rule, so this only fires if the two drift
        # apart; even then a constructor error must surface as a DecodeError, never leak.
        raise DecodeError(str(exc), WireErrorCode.INVALID_FIELD) from exc


def _update_of(structure: Any) -> ReceiverCreditUpdate | None:
    """A credit update (tag 1), checked and built in one pass; ``None`` for anything else and
    for any update with a field out of its range, which the table-driven steps 4 and 5 then
    decode or refuse with their own error. A sender decodes one update per transfer, and the
    table's loops were a third of that decode's calls; this accepts exactly what the table
    accepts for tag 1 (``tests/credit/test_wire_update.py`` decodes odd updates both ways)."""
    if type(structure) is not list or len(structure) != _UPDATE_ITEMS or structure[0] != 1:
        return None
    _, version, flags, qos, session, epoch, sequence, ttl, grants, retry = structure
    if not (
        version == SCHEMA_VERSION
        and type(flags) is int
        and 0 <= flags <= U16_MAX
        and type(qos) is int
        and 0 <= qos <= U32_MAX
        and type(session) is int
        and 0 < session <= U128_MAX
        and type(epoch) is int
        and 0 <= epoch <= U64_MAX
        and type(sequence) is int
        and 0 <= sequence <= U64_MAX
        and type(ttl) is int
        and 0 <= ttl <= U32_MAX
        and type(retry) is int
        and 0 <= retry <= U64_MAX
        and type(grants) is list
        and len(grants) <= MAX_RESOURCES_PER_MESSAGE
    ):
        return None
    amounts = []
    new, put = object.__new__, object.__setattr__  # frozen attrs instances, as _trusted builds
    seen = 0  # a bit per resource value (1..4)
    for pair in grants:
        if type(pair) is not list or len(pair) != 2:
            return None
        resource, amount = pair
        if type(resource) is not int or resource not in _RESOURCE_OF or seen >> resource & 1:
            return None
        if type(amount) is not int or not 0 <= amount <= U64_MAX:
            return None
        seen |= 1 << resource
        grant = new(CreditAmount)  # _amount, inline (a call per grant)
        put(grant, "resource", _RESOURCE_OF[resource])
        put(grant, "amount", amount)
        amounts.append(grant)
    instance = new(ReceiverCreditUpdate)
    put(instance, "schema_version", version)
    put(instance, "flags", flags)
    put(instance, "qos_class", qos)
    put(instance, "receiver_session_id", SessionId(session))
    put(instance, "epoch", epoch)
    put(instance, "sequence", sequence)
    put(instance, "freshness_ttl_ms", ttl)
    put(instance, "grants", tuple(amounts))
    put(instance, "retry_after_us", retry)
    return instance


_UPDATE_ITEMS = 10  # tag, schema_version and the eight fields of an update


def _trusted(cls: type[_M], values: dict[str, Any]) -> _M:
    # An instance of the frozen attrs class ``cls`` from ``values`` (every one of its fields)
    # without its validators: step 4 ran the same checks on these values already, and a
    # message's validators cost a sender as much as the rest of its decode (one update per
    # transfer under contention). tests/credit/test_wire.py compares every message it decodes
    # with the validated constructor's, so the two sets of checks cannot drift apart unseen.
    instance = object.__new__(cls)
    for name, value in values.items():
        object.__setattr__(instance, name, value)
    return instance


def _amount(resource: CreditResource, amount: int) -> CreditAmount:
    instance = object.__new__(CreditAmount)
    object.__setattr__(instance, "resource", resource)
    object.__setattr__(instance, "amount", amount)
    return instance


# Smallest argument value that needs each additional-information size (canonical = shortest).
_MIN_FOR_ADDITIONAL_INFO = {24: 24, 25: 0x100, 26: 0x1_0000, 27: 0x1_0000_0000}
# Major types 0 and 1 (unsigned and negative integers) need no check beyond their header.
_MAJOR_BYTES, _MAJOR_TEXT, _MAJOR_ARRAY, _MAJOR_MAP, _MAJOR_TAG, _MAJOR_SIMPLE = 2, 3, 4, 5, 6, 7
_TAG_BIGNUM = 2
_MAX_BIGNUM_BYTES = 16  # u128, the widest field


def _prescan(data: bytes) -> None:
    """Walk the CBOR item headers of ``data`` iteratively; raise ``DecodeError`` on the first
    construct outside the schema's CBOR subset (see :func:`decode`, step 2)."""
    end = len(data)
    pos = 0
    open_counts: list[int] = []  # items still expected by each open array or tag
    expect_bignum_bytes = False
    while True:
        depth = len(open_counts) + 1
        if depth > MAX_DEPTH:
            raise DecodeError(f"nesting deeper than {MAX_DEPTH}", WireErrorCode.TOO_DEEP)
        if pos >= end:
            raise DecodeError("truncated CBOR item", WireErrorCode.MALFORMED)
        initial = data[pos]
        pos += 1
        # The common items are checked here, the rest by _item: an unsigned integer below 24
        # in its header byte (type tags, versions, resources, small amounts) needs no check;
        # a short array (1-23 items) nothing but what the walk checks (its items must follow);
        # a longer unsigned integer (0x18-0x1b: sequences, totals) its truncation and size.
        if expect_bignum_bytes or initial >= 24:
            if 0x80 < initial < 0x98 and not expect_bignum_bytes:
                open_counts.append(initial - 0x80)
                continue
            if initial < 0x1C and not expect_bignum_bytes:
                # _long_argument, inline: sequences, totals and sessions, several per message
                size = 1 << (initial - 24)
                if pos + size > end:
                    raise DecodeError("truncated CBOR header", WireErrorCode.MALFORMED)
                argument = int.from_bytes(data[pos : pos + size], "big")
                if argument < _MIN_FOR_ADDITIONAL_INFO[initial]:
                    raise DecodeError("non-minimal integer encoding", WireErrorCode.NON_CANONICAL)
                pos += size
            else:
                pos, expect_bignum_bytes, opened = _item(
                    data, pos, initial, expect_bignum_bytes, open_counts
                )
                if opened:
                    continue
        # One item is complete: close every container it completes.
        while open_counts:
            open_counts[-1] -= 1
            if open_counts[-1]:
                break
            open_counts.pop()
        if not open_counts:
            break
    if pos != end:
        raise DecodeError(f"{end - pos} trailing bytes after the message", WireErrorCode.MALFORMED)


def _long_argument(data: bytes, pos: int, info: int) -> tuple[int, int]:
    """The argument of a header whose additional information ``info`` (24-27) says it follows
    in 1, 2, 4 or 8 bytes at ``pos``: the position after it, and the argument, which must
    need that size (canonical: shortest)."""
    size = 1 << (info - 24)
    if pos + size > len(data):
        raise DecodeError("truncated CBOR header", WireErrorCode.MALFORMED)
    argument = int.from_bytes(data[pos : pos + size], "big")
    if argument < _MIN_FOR_ADDITIONAL_INFO[info]:
        raise DecodeError("non-minimal integer encoding", WireErrorCode.NON_CANONICAL)
    return pos + size, argument


def _item(
    data: bytes, pos: int, initial: int, bignum_bytes: bool, open_counts: list[int]
) -> tuple[int, bool, bool]:
    """Check one item whose header byte ``initial`` was read at ``pos - 1`` (``bignum_bytes``:
    a bignum tag waits for it); return the position after its header (and after its bytes, for
    a string), whether a bignum's byte string is expected next, and whether it opened a
    container (an array with items, or a tag), appended to ``open_counts``."""
    end = len(data)
    major, info = initial >> 5, initial & 0x1F
    if major == _MAJOR_SIMPLE:
        raise DecodeError(
            "floats and simple values are not part of the schema", WireErrorCode.MALFORMED
        )
    if info == 31:
        raise DecodeError("indefinite length is not allowed", WireErrorCode.MALFORMED)
    if info > 27:
        raise DecodeError(f"reserved additional information {info}", WireErrorCode.MALFORMED)
    if info < 24:
        argument = info
    else:
        pos, argument = _long_argument(data, pos, info)
    if bignum_bytes and major != _MAJOR_BYTES:
        raise DecodeError("a bignum tag must wrap a byte string", WireErrorCode.MALFORMED)
    if major in (_MAJOR_BYTES, _MAJOR_TEXT):
        if argument > end - pos:
            raise DecodeError("truncated string", WireErrorCode.MALFORMED)
        if bignum_bytes:
            # canonical CBOR writes an integer below 2**64 in its header, and a bignum's
            # bytes without leading zeros: so a canonical bignum has 9 bytes or more
            if not argument or data[pos] == 0:
                raise DecodeError("bignum with leading zero bytes", WireErrorCode.NON_CANONICAL)
            if argument <= 8:
                raise DecodeError(
                    "a bignum for a value that fits in 64 bits", WireErrorCode.NON_CANONICAL
                )
            if argument > _MAX_BIGNUM_BYTES:
                # wider than any field (a session id is u128): refused before cbor2 builds
                # the integer, so no unbounded integer ever exists (let alone gets formatted)
                raise DecodeError(
                    f"a bignum of {argument} bytes is wider than any field (u128)",
                    WireErrorCode.INVALID_FIELD,
                )
        pos += argument
    elif major == _MAJOR_ARRAY:
        if argument > end - pos:  # every item takes at least one byte
            raise DecodeError("truncated array", WireErrorCode.MALFORMED)
        if argument:
            open_counts.append(argument)
            return pos, False, True
    elif major == _MAJOR_MAP:
        raise DecodeError("maps are not part of the schema", WireErrorCode.MALFORMED)
    elif major == _MAJOR_TAG:
        if argument != _TAG_BIGNUM:
            raise DecodeError(f"tag {argument} is not allowed", WireErrorCode.MALFORMED)
        open_counts.append(1)
        return pos, True, True
    return pos, False, False


def _invalid(name: str, why: str) -> DecodeError:
    return DecodeError(f"field {name}: {why}", WireErrorCode.INVALID_FIELD)


def _validate_shape(structure: Any) -> _Layout:
    """Check the decoded structure against the layout table (step 4 of :func:`decode`).

    Builds nothing: it returns the layout whose fields the structure satisfies.
    """
    if type(structure) is not list or len(structure) < 2:
        raise DecodeError(
            "a message is an array [type, schema_version, ...]", WireErrorCode.MALFORMED
        )
    tag, version = structure[0], structure[1]
    layout = _BY_TAG.get(tag) if type(tag) is int else None
    if layout is None:
        raise DecodeError(f"unknown message type {describe(tag)}", WireErrorCode.UNKNOWN_TYPE)
    if type(version) is not int:
        raise _invalid("schema_version", f"must be an unsigned integer, got {describe(version)}")
    if version != SCHEMA_VERSION:
        raise DecodeError(
            f"unsupported schema version {describe(version)}", WireErrorCode.UNSUPPORTED_SCHEMA
        )
    if len(structure) != 2 + len(layout.fields):
        raise _invalid(
            layout.cls.__name__,
            f"expected {2 + len(layout.fields)} items, got {len(structure)}",
        )
    for (name, kind), item in zip(layout.fields, structure[2:], strict=True):
        top = _UINT_MAX.get(kind)
        if top is None:
            _check_field(name, kind, item)
        elif type(item) is not int or not 0 <= item <= top:  # _check_uint, inline: the most
            _check_uint(name, item, top)  # common field, several per message
    return layout


def _check_uint(name: str, value: object, top: int) -> None:
    if type(value) is not int or not 0 <= value <= top:
        raise _invalid(name, f"must be an unsigned integer <= {top}, got {describe(value)}")


def _check_field(name: str, kind: _Kind, item: object) -> None:
    if kind is _SESSION:
        if type(item) is not int or not 0 < item <= U128_MAX:
            raise _invalid(name, f"must be a non-zero u128, got {describe(item)}")
    elif kind is _AMOUNTS:
        _check_amounts(name, item)
    elif kind is _VERSIONS:
        _check_versions(name, item)
    else:
        _check_uint(name, item, _UINT_MAX[kind])


def _check_amounts(name: str, item: object) -> None:
    if type(item) is not list or len(item) > MAX_RESOURCES_PER_MESSAGE:
        raise _invalid(name, f"must be an array of at most {MAX_RESOURCES_PER_MESSAGE} amounts")
    seen: set[int] = set()
    for pair in item:
        if type(pair) is not list or len(pair) != 2:
            raise _invalid(name, f"an amount is a [resource, amount] pair, got {describe(pair)}")
        resource, amount = pair
        # RFC "unknown required resource ... reject the update"
        if type(resource) is not int or resource not in _RESOURCE_VALUES:
            raise _invalid(name, f"unknown credit resource {describe(resource)}")
        if resource in seen:
            raise _invalid(name, f"names resource {resource} twice")
        seen.add(resource)
        if type(amount) is not int or not 0 <= amount <= U64_MAX:
            _check_uint(name, amount, U64_MAX)


def _check_versions(name: str, item: object) -> None:
    if type(item) is not list or not 0 < len(item) <= MAX_VERSIONS:
        raise _invalid(name, f"must be an array of 1 to {MAX_VERSIONS} versions")
    for version in item:
        _check_uint(name, version, U16_MAX)
        if version == 0:
            raise _invalid(name, "protocol version 0 is reserved")
    if len(set(item)) != len(item):
        raise _invalid(name, "versions must be unique")
