"""Registered memory, the regions exposed to each peer, and the segment-descriptor message.

Credit amounts say *how much* a sender may have in flight; regions say *where* it may write
(docs/transport_design.md#leases). The receiver registers segments (a ``bytearray``, an ``mmap``,
any writable contiguous buffer), then exposes regions of them to one peer's session; an exposure
ends at :meth:`SegmentTable.revoke` or when the session is fenced
(:meth:`SegmentTable.revoke_session`). The TCP receiver asks :meth:`SegmentTable.check` for every
write header *before* any payload byte is read.

The exposures of one (peer, session) travel to that peer in a versioned
:class:`SegmentDescriptors` message (``spec/wire.cddl`` ``segment-descriptors``; golden vectors in
``tests/golden/segment_vectors.json``)::

    [32, 1, session u64, generation u64,
     [[segment, segment_length, offset, length, access, rkey], ...]]

It carries the *full* current set, with a generation that only grows, so a duplicated or stale
message is harmless (the newest generation wins), like the credit messages.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import threading
from collections.abc import Iterable

import attrs
import cbor2

__all__ = [
    "DESCRIPTOR_TYPE",
    "MAX_DESCRIPTORS",
    "Access",
    "DescriptorError",
    "Exposure",
    "Segment",
    "SegmentDescriptor",
    "SegmentDescriptors",
    "SegmentError",
    "SegmentTable",
    "decode_descriptors",
    "encode_descriptors",
]

DESCRIPTOR_TYPE = 32
"""The message type tag of :class:`SegmentDescriptors` (outside the credit codec's 1..6)."""
DESCRIPTOR_SCHEMA = 1
MAX_DESCRIPTORS = 1024
"""Bound on the exposures of one (peer, session), hence on one descriptor message."""
_U64_MAX = 2**64 - 1


class SegmentError(ValueError):
    """A caller error on the segment table (unknown id, range outside the segment, a read-only
    buffer, a bound reached). Nothing changed."""


class DescriptorError(ValueError):
    """Bytes that are not a valid segment-descriptor message (a peer fault)."""


class Access(enum.IntFlag):
    """What an exposure allows its peer."""

    WRITE = 1
    READ = 2


@attrs.frozen(kw_only=True)
class Segment:
    """A registered buffer: ``view`` is a writable byte view of all of it."""

    segment_id: int
    view: memoryview = attrs.field(repr=False, eq=False)

    @property
    def length(self) -> int:
        return len(self.view)


@attrs.frozen(kw_only=True)
class Exposure:
    """Bytes ``[offset, offset + length)`` of a segment, exposed to one (peer, session)."""

    exposure_id: int
    peer: int
    session: int
    segment_id: int
    offset: int
    length: int
    access: Access

    def covers(self, segment_id: int, offset: int, length: int, access: Access) -> bool:
        return (
            segment_id == self.segment_id
            # int's own ``&``: IntFlag's builds a new flag member through Python calls, and
            # this runs for every write a receiver admits
            and int.__and__(access, self.access) == access
            and self.offset <= offset
            and offset + length <= self.offset + self.length
        )


def _u64(_inst: object, attr: attrs.Attribute[int], value: object) -> None:
    if type(value) is not int or not 0 <= value <= _U64_MAX:
        raise DescriptorError(f"{attr.name} must be a u64, got {value!r}")


@attrs.frozen(kw_only=True)
class SegmentDescriptor:
    """One exposed region as its peer sees it (``rkey`` is 0 on TCP, the MR key on verbs)."""

    segment_id: int = attrs.field(validator=_u64)
    segment_length: int = attrs.field(validator=_u64)
    offset: int = attrs.field(validator=_u64)
    length: int = attrs.field(validator=_u64)
    access: int = attrs.field(validator=_u64)
    rkey: int = attrs.field(default=0, validator=_u64)

    def __attrs_post_init__(self) -> None:
        if self.length == 0 or self.offset + self.length > self.segment_length:
            raise DescriptorError(f"region [{self.offset}, +{self.length}) outside its segment")
        if self.access == 0 or self.access & ~int(Access.WRITE | Access.READ):
            raise DescriptorError(f"unknown access bits {self.access:#x}")


@attrs.frozen(kw_only=True)
class SegmentDescriptors:
    """The full set of regions exposed to one (peer, session), at one generation."""

    schema_version: int = DESCRIPTOR_SCHEMA
    session: int = attrs.field(validator=_u64)
    generation: int = attrs.field(validator=_u64)
    regions: tuple[SegmentDescriptor, ...] = ()

    def __attrs_post_init__(self) -> None:
        if self.schema_version != DESCRIPTOR_SCHEMA:
            raise DescriptorError(f"unsupported descriptor schema {self.schema_version}")
        if len(self.regions) > MAX_DESCRIPTORS:
            raise DescriptorError(f"more than {MAX_DESCRIPTORS} regions")


def encode_descriptors(message: SegmentDescriptors) -> bytes:
    """Canonical CBOR of a descriptor message."""
    regions = [
        [d.segment_id, d.segment_length, d.offset, d.length, d.access, d.rkey]
        for d in message.regions
    ]
    return cbor2.dumps(
        [DESCRIPTOR_TYPE, message.schema_version, message.session, message.generation, regions],
        canonical=True,
    )


def _uint(value: object, what: str) -> int:
    if type(value) is not int or not 0 <= value <= _U64_MAX:
        raise DescriptorError(f"{what} must be a u64, got {value!r}")
    return value


def decode_descriptors(data: bytes) -> SegmentDescriptors:
    """Strictly decode a descriptor message (bounded by its control frame already).

    Raises :class:`DescriptorError` for anything but a canonical, well-shaped message of a known
    schema; never another exception.
    """
    try:
        structure = cbor2.loads(data)
    except (cbor2.CBORDecodeError, ValueError, OverflowError, RecursionError, TypeError) as exc:
        raise DescriptorError(f"CBOR decoding failed: {exc}") from exc
    if type(structure) is not list or len(structure) != 5:
        raise DescriptorError("a descriptor message is a 5-item array")
    tag, schema, session, generation, regions = structure
    if tag != DESCRIPTOR_TYPE or type(tag) is not int:
        raise DescriptorError(f"not a descriptor message (type {tag!r})")
    if schema != DESCRIPTOR_SCHEMA or type(schema) is not int:
        raise DescriptorError(f"unsupported descriptor schema {schema!r}")
    if type(regions) is not list or len(regions) > MAX_DESCRIPTORS:
        raise DescriptorError(f"regions must be an array of at most {MAX_DESCRIPTORS}")
    parsed = []
    for item in regions:
        if type(item) is not list or len(item) != 6:
            raise DescriptorError("a region is a 6-item array")
        seg, seg_len, off, length, access, rkey = (_uint(v, "region field") for v in item)
        parsed.append(
            SegmentDescriptor(
                segment_id=seg,
                segment_length=seg_len,
                offset=off,
                length=length,
                access=access,
                rkey=rkey,
            )
        )
    message = SegmentDescriptors(
        session=_uint(session, "session"),
        generation=_uint(generation, "generation"),
        regions=tuple(parsed),
    )
    if encode_descriptors(message) != bytes(data):
        raise DescriptorError("encoding is not canonical")
    return message


def _byte_view(buffer: object) -> memoryview:
    try:
        view = memoryview(buffer)  # type: ignore[arg-type]
    except TypeError as exc:
        raise SegmentError(f"{type(buffer).__name__} does not expose a buffer") from exc
    if view.readonly:
        raise SegmentError("a segment must be writable")
    if not view.contiguous:
        raise SegmentError("a segment must be contiguous")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


class SegmentTable:
    """Segments and exposures of one engine. Thread-safe (the engine's loop checks writes while
    the application exposes and revokes regions from its own thread).

    Every call validates fully before it changes anything.
    """

    def __init__(self, *, max_segments: int = 4096, max_exposures: int = MAX_DESCRIPTORS) -> None:
        self._lock = threading.Lock()
        self._segments: dict[int, Segment] = {}
        self._exposures: dict[int, Exposure] = {}
        self._by_session: dict[tuple[int, int], dict[int, Exposure]] = {}
        self._generation: dict[tuple[int, int], int] = {}
        self._ids = itertools.count(1)
        self._exposure_ids = itertools.count(1)
        self._max_segments = max_segments
        self._max_exposures = max_exposures

    # ------------------------------------------------------------------ segments

    def register(self, buffer: object) -> Segment:
        """Register ``buffer`` (kept alive and writable while registered). Raises
        :class:`SegmentError` for a read-only, non-contiguous or empty buffer, or past
        ``max_segments``."""
        view = _byte_view(buffer)
        if len(view) == 0:
            raise SegmentError("a segment must not be empty")
        with self._lock:
            if len(self._segments) >= self._max_segments:
                raise SegmentError(f"at most {self._max_segments} segments")
            segment = Segment(segment_id=next(self._ids), view=view)
            self._segments[segment.segment_id] = segment
            return segment

    def segment(self, segment_id: int) -> Segment:
        """Raises :class:`SegmentError` for an unknown id."""
        with self._lock:
            segment = self._segments.get(segment_id)
        if segment is None:
            raise SegmentError(f"unknown segment {segment_id}")
        return segment

    def unregister(self, segment_id: int) -> None:
        """Forget a segment and release its buffer view. Raises :class:`SegmentError` for an
        unknown id or one with live exposures (nothing changes then)."""
        with self._lock:
            if segment_id not in self._segments:
                raise SegmentError(f"unknown segment {segment_id}")
            if any(e.segment_id == segment_id for e in self._exposures.values()):
                raise SegmentError(f"segment {segment_id} still has exposed regions")
            segment = self._segments.pop(segment_id)
        # give the buffer back (an mmap can be closed); a view the caller still holds of it
        # keeps it exported, and then it is released when that view goes
        with contextlib.suppress(BufferError):
            segment.view.release()

    # ------------------------------------------------------------------ exposures

    def expose(
        self,
        peer: int,
        session: int,
        *,
        segment_id: int,
        offset: int,
        length: int,
        access: Access = Access.WRITE,
    ) -> Exposure:
        """Expose ``[offset, offset + length)`` of a segment to ``(peer, session)``.

        Raises :class:`SegmentError` for an unknown segment, a range outside it, an empty range,
        no access bits, or past ``max_exposures`` of that session.
        """
        for what, value in (("peer", peer), ("session", session), ("offset", offset)):
            if type(value) is not int or not 0 <= value <= _U64_MAX:
                raise SegmentError(f"{what} must be a u64, got {value!r}")
        if type(length) is not int or length <= 0:
            raise SegmentError(f"length must be positive, got {length!r}")
        if not isinstance(access, Access) or not access:
            raise SegmentError(f"access must be a non-empty Access, got {access!r}")
        with self._lock:
            segment = self._segments.get(segment_id)
            if segment is None:
                raise SegmentError(f"unknown segment {segment_id}")
            if offset + length > segment.length:
                raise SegmentError(f"[{offset}, +{length}) exceeds segment of {segment.length}")
            key = (peer, session)
            held = self._by_session.setdefault(key, {})
            if len(held) >= self._max_exposures:
                raise SegmentError(f"at most {self._max_exposures} exposures per session")
            exposure = Exposure(
                exposure_id=next(self._exposure_ids),
                peer=peer,
                session=session,
                segment_id=segment_id,
                offset=offset,
                length=length,
                access=access,
            )
            held[exposure.exposure_id] = exposure
            self._exposures[exposure.exposure_id] = exposure
            self._generation[key] = self._generation.get(key, 0) + 1
            return exposure

    def revoke(self, exposure_id: int) -> None:
        """End one exposure. Raises :class:`SegmentError` for an unknown id."""
        with self._lock:
            exposure = self._exposures.pop(exposure_id, None)
            if exposure is None:
                raise SegmentError(f"unknown exposure {exposure_id}")
            key = (exposure.peer, exposure.session)
            del self._by_session[key][exposure_id]
            self._generation[key] = self._generation.get(key, 0) + 1

    def revoke_session(self, peer: int, session: int) -> int:
        """End every exposure of ``(peer, session)`` (fencing); returns how many."""
        with self._lock:
            held = self._by_session.pop((peer, session), {})
            for exposure_id in held:
                del self._exposures[exposure_id]
            self._generation.pop((peer, session), None)
            return len(held)

    def check(
        self,
        peer: int,
        session: int,
        *,
        segment_id: int,
        offset: int,
        length: int,
        access: Access,
    ) -> memoryview | None:
        """The destination view when one exposure of ``(peer, session)`` covers the range with
        ``access``, else ``None``. Never raises for peer-controlled values."""
        if length <= 0 or offset < 0:
            return None
        with self._lock:
            held = self._by_session.get((peer, session))
            if not held:
                return None
            if not any(e.covers(segment_id, offset, length, access) for e in held.values()):
                return None
            return self._segments[segment_id].view[offset : offset + length]

    def exposures(self, peer: int, session: int) -> tuple[Exposure, ...]:
        with self._lock:
            return tuple(self._by_session.get((peer, session), {}).values())

    def descriptors(self, peer: int, session: int) -> SegmentDescriptors:
        """The descriptor message of ``(peer, session)``'s current exposures."""
        with self._lock:
            held: Iterable[Exposure] = tuple(self._by_session.get((peer, session), {}).values())
            generation = self._generation.get((peer, session), 0)
            regions = tuple(
                SegmentDescriptor(
                    segment_id=e.segment_id,
                    segment_length=self._segments[e.segment_id].length,
                    offset=e.offset,
                    length=e.length,
                    access=int(e.access),
                )
                for e in held
            )
        return SegmentDescriptors(session=session, generation=generation, regions=regions)
