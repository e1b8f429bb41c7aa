"""The out-of-band verbs messages the control connection carries, and their CBOR encoding.

- :class:`VerbsEndpoint`: one side of an RC connection (QP number, PSN, GID, LID, port, MTU);
  each side sends its own, then moves its QP to RTR/RTS against the other's.
- :class:`VerbsRegion`: an exposure of a segment range to one (peer, session): where it lives in
  the receiver's address space and the rkey of the MR registered for that session alone. The
  receiver sends it only under credit and deregisters the MR at release or fencing.
- :class:`VerbsAck` (schema 2): the receiver's answer to the session's write notices, in notice
  order. A one-sided WRITE completes at the sender's HCA when the receiver's HCA acknowledged
  it, before any receiver code ran; the sender's handle completes only on this message
  (docs/transport_design.md#transport-rule-5), so COMPLETED means *admitted*.

Wire form: a canonical CBOR array ``[tag, schema_version, fields...]`` (tags 0x5601, 0x5602 and
0x5603), at most :data:`MAX_VERBS_MESSAGE_BYTES`; the schema is ``spec/verbs.cddl`` and the
golden vectors are ``tests/golden/verbs_vectors.json``. Schema 1 (endpoint and region only, no
acknowledgements) is still decoded and re-encoded byte for byte: a message keeps its
``schema``. Each side sends its endpoint in the newest schema it speaks; the receiver answers in
the lower of the two, and a schema-2 sender refuses a schema-1 receiver (it cannot tell it which
writes it admitted). A region's ``readable`` travels as an
``access`` of 1 (WRITE) or 3 (WRITE | READ), the segment descriptors' flags; its ``session`` is
a plain uint up to 64 bits, else a bignum. :func:`decode_verbs_message` turns any bytes
into a message or a :class:`VerbsMessageError` (a ``RemoteProtocolError``), never another error.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import attrs
import cbor2

from ...errors import InvalidArgument, RemoteProtocolError

__all__ = [
    "MAX_VERBS_MESSAGE_BYTES",
    "VERBS_SCHEMA",
    "AckOutcome",
    "VerbsAck",
    "VerbsEndpoint",
    "VerbsMessageError",
    "VerbsRegion",
    "decode_verbs_message",
    "encode_verbs_message",
]

MAX_VERBS_MESSAGE_BYTES = 160
VERBS_SCHEMA = 2
"""The newest schema this side speaks (2: acknowledgements)."""
_SCHEMAS = (1, 2)
_TAG_ENDPOINT = 0x5601
_TAG_REGION = 0x5602
_TAG_ACK = 0x5603


class VerbsMessageError(RemoteProtocolError, InvalidArgument):
    """Bytes from a peer are not a valid verbs message; nothing was built from them."""


def _uint(bits: int, *, minimum: int = 0) -> Callable[[object, attrs.Attribute[int], int], None]:
    bound = (1 << bits) - 1

    def check(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
        if type(value) is not int or not minimum <= value <= bound:
            raise InvalidArgument(f"{attr.name} must be an int in [{minimum}, {bound}]: {value!r}")

    return check


def _gid(_inst: object, _attr: attrs.Attribute[bytes], value: bytes) -> None:
    if type(value) is not bytes or len(value) != 16:
        raise InvalidArgument(f"gid must be 16 bytes, got {value!r}")


def _mtu(_inst: object, _attr: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or not 1 <= value <= 5:  # enum ibv_mtu: 256 .. 4096
        raise InvalidArgument(f"mtu must be an ibv_mtu value in [1, 5], got {value!r}")


def _schema(_inst: object, _attr: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value not in _SCHEMAS:
        raise InvalidArgument(f"schema must be one of {_SCHEMAS}, got {value!r}")


def _flag(_inst: object, attr: attrs.Attribute[bool], value: bool) -> None:
    if type(value) is not bool:
        raise InvalidArgument(f"{attr.name} must be a bool, got {value!r}")


@attrs.frozen(kw_only=True)
class VerbsEndpoint:
    """One side of an RC connection; raises :class:`InvalidArgument` for an out-of-range field."""

    qp_num: int = attrs.field(validator=_uint(24, minimum=1))
    psn: int = attrs.field(validator=_uint(24))
    gid: bytes = attrs.field(validator=_gid)
    lid: int = attrs.field(validator=_uint(16))
    port_num: int = attrs.field(validator=_uint(8, minimum=1))
    mtu: int = attrs.field(validator=_mtu)
    schema: int = attrs.field(default=VERBS_SCHEMA, validator=_schema)

    @property
    def gid_text(self) -> str:
        """The GID in pyverbs' text form (eight colon-separated groups of four hex digits)."""
        raw = self.gid.hex()
        return ":".join(raw[i : i + 4] for i in range(0, 32, 4))

    @staticmethod
    def gid_bytes(text: str) -> bytes:
        """The 16 bytes of a GID in pyverbs' text form; raises InvalidArgument if malformed."""
        try:
            raw = bytes.fromhex(text.replace(":", ""))
        except ValueError as exc:
            raise InvalidArgument(f"not a GID: {text!r}") from exc
        if len(raw) != 16:
            raise InvalidArgument(f"not a GID: {text!r}")
        return raw


@attrs.frozen(kw_only=True)
class VerbsRegion:
    """An exposure: ``length`` bytes of ``segment`` from ``offset``, at receiver address ``addr``,
    under ``rkey`` of the MR registered for (this peer, ``session``) only. ``readable`` says
    whether the MR grants RDMA READ. Raises :class:`InvalidArgument` for an invalid field."""

    segment: int = attrs.field(validator=_uint(64))
    session: int = attrs.field(validator=_uint(128))
    offset: int = attrs.field(validator=_uint(64))
    length: int = attrs.field(validator=_uint(64, minimum=1))
    addr: int = attrs.field(validator=_uint(64))
    rkey: int = attrs.field(validator=_uint(32))
    readable: bool = attrs.field(validator=_flag)
    schema: int = attrs.field(default=VERBS_SCHEMA, validator=_schema)

    def __attrs_post_init__(self) -> None:
        if self.offset + self.length > 1 << 64 or self.addr + self.length > 1 << 64:
            raise InvalidArgument("region overflows the 64-bit address space")

    def covers(self, offset: int, length: int) -> bool:
        """Whether ``[offset, offset + length)`` of the segment lies inside this region."""
        return self.offset <= offset and offset + length <= self.offset + self.length


class AckOutcome(enum.IntEnum):
    """What the receiver did with the last write a :class:`VerbsAck` covers."""

    ADMITTED = 0
    """Admitted and announced (every earlier write of the ack too)."""
    SUPERSEDED = 1
    """Not announced: a later write of the same sender into an overlapping range landed before
    the receiver admitted this one, so its bytes are gone and its checksum cannot be checked.
    Its charge is released; the sender is not at fault and is not quarantined."""
    REFUSED = 2
    """Refused (a lie: outside its exposures or credit, or a checksum that does not hold): the
    sender is quarantined and the connection closes after this message."""


@attrs.frozen(kw_only=True)
class VerbsAck:
    """Receiver → sender: the writes of control ``session`` with notice sequence below
    ``through`` are settled: all admitted, except the last (``through - 1``), which ended as
    ``outcome``. ``through`` never decreases within a session. Raises :class:`InvalidArgument`
    for an invalid field (``through`` 0 with an outcome other than ADMITTED included)."""

    session: int = attrs.field(validator=_uint(128))
    through: int = attrs.field(validator=_uint(64))
    outcome: AckOutcome = attrs.field(default=AckOutcome.ADMITTED)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.outcome, AckOutcome):
            raise InvalidArgument(f"outcome must be an AckOutcome, got {self.outcome!r}")
        if self.through == 0 and self.outcome is not AckOutcome.ADMITTED:
            raise InvalidArgument("an outcome needs a write (through >= 1)")

    @property
    def schema(self) -> int:
        return 2


_ENDPOINT_FIELDS: tuple[str, ...] = ("qp_num", "psn", "gid", "lid", "port_num", "mtu")
_REGION_FIELDS: tuple[str, ...] = (
    "segment",
    "session",
    "offset",
    "length",
    "addr",
    "rkey",
    "access",
)
_ACK_FIELDS: tuple[str, ...] = ("session", "through", "outcome")
_WRITE, _WRITE_READ = 1, 3  # Access flags on the wire: WRITE = 1, READ = 2


VerbsMessage = VerbsEndpoint | VerbsRegion | VerbsAck


def encode_verbs_message(message: VerbsMessage) -> bytes:
    """Canonical CBOR of ``message`` in its ``schema``; raises :class:`InvalidArgument` for
    another type."""
    if isinstance(message, VerbsEndpoint):
        tag, names = _TAG_ENDPOINT, _ENDPOINT_FIELDS
    elif isinstance(message, VerbsRegion):
        tag, names = _TAG_REGION, _REGION_FIELDS
    elif isinstance(message, VerbsAck):
        tag, names = _TAG_ACK, _ACK_FIELDS
    else:
        raise InvalidArgument(f"not a verbs message: {type(message).__name__}")
    fields = [_wire_value(message, name) for name in names]
    return cbor2.dumps([tag, message.schema, *fields], canonical=True)


def _wire_value(message: VerbsMessage, name: str) -> Any:
    if name == "access":
        assert isinstance(message, VerbsRegion)
        return _WRITE_READ if message.readable else _WRITE
    if name == "outcome":
        assert isinstance(message, VerbsAck)
        return int(message.outcome)
    return getattr(message, name)


def decode_verbs_message(data: bytes) -> VerbsMessage:
    """Decode one verbs message, strictly, in this order (nothing built before all pass):

    1. ``len(data) <= MAX_VERBS_MESSAGE_BYTES``;
    2. CBOR that decodes, into an array ``[tag, schema, fields...]`` of a known tag, a schema
       that tag has (endpoint and region: 1 or 2; ack: 2) and exact length, each field of its
       exact type (``bool`` is not an int);
    3. the canonical re-encoding equals ``data`` (no indefinite lengths, no long integer forms);
    4. the constructor's range checks.

    Raises :class:`VerbsMessageError` for every failure (``data`` not bytes-like included).
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise VerbsMessageError(f"a verbs message is bytes, got {type(data).__name__}")
    raw = bytes(data)
    if len(raw) > MAX_VERBS_MESSAGE_BYTES:
        raise VerbsMessageError(f"verbs message of {len(raw)} bytes exceeds the bound")
    try:
        structure: Any = cbor2.loads(raw)
    except (cbor2.CBORDecodeError, ValueError, OverflowError, RecursionError, MemoryError) as exc:
        raise VerbsMessageError(f"CBOR decoding failed: {exc}") from exc
    if type(structure) is not list or len(structure) < 2:
        raise VerbsMessageError("a verbs message is an array [tag, schema, fields...]")
    tag, schema, *fields = structure
    cls: type[VerbsEndpoint] | type[VerbsRegion] | type[VerbsAck]
    schemas: tuple[int, ...]
    if tag == _TAG_ENDPOINT and type(tag) is int:
        cls, names, schemas = VerbsEndpoint, _ENDPOINT_FIELDS, _SCHEMAS
    elif tag == _TAG_REGION and type(tag) is int:
        cls, names, schemas = VerbsRegion, _REGION_FIELDS, _SCHEMAS
    elif tag == _TAG_ACK and type(tag) is int:
        cls, names, schemas = VerbsAck, _ACK_FIELDS, (2,)
    else:
        raise VerbsMessageError(f"unknown verbs message tag {tag!r}")
    if type(schema) is not int or schema not in schemas:
        raise VerbsMessageError(f"unsupported verbs schema {schema!r} for tag {tag:#x}")
    if len(fields) != len(names):
        raise VerbsMessageError(f"{cls.__name__} has {len(names)} fields, got {len(fields)}")
    for name, value in zip(names, fields, strict=True):
        expected = bytes if name == "gid" else int
        if type(value) is not expected:
            raise VerbsMessageError(f"{name} must be {expected.__name__}, got {value!r}")
    if cbor2.dumps(structure, canonical=True) != raw:
        raise VerbsMessageError("verbs message is not canonical CBOR")
    values = dict(zip(names, fields, strict=True))
    if cls is VerbsRegion:
        access = values.pop("access")
        if access not in (_WRITE, _WRITE_READ):
            raise VerbsMessageError(f"access must be 1 (WRITE) or 3 (WRITE | READ), got {access}")
        values["readable"] = access == _WRITE_READ
    if cls is VerbsAck:
        outcome = values.pop("outcome")
        if outcome not in set(AckOutcome):
            raise VerbsMessageError(f"unknown ack outcome {outcome}")
        values["outcome"] = AckOutcome(outcome)
    else:
        values["schema"] = schema
    try:
        return cls(**values)
    except InvalidArgument as exc:
        raise VerbsMessageError(str(exc)) from exc
