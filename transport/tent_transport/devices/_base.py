"""The Device protocol: one rail ("NIC") as the dispatch core sees it (docs/seams.md).

A Device posts chained batches of slices to a peer and reports their completions. It never owns
the scheduling clock: the dispatch core (driven by asyncio or by the simulator's virtual clock)
passes ``now_ns`` into every call, and timestamps each poll pass once. An asynchronous device
(TCP, soft verbs) may timestamp internally for its own bookkeeping, never for a scheduling
decision.

The values here are frozen attrs classes validated on construction (an invalid value cannot
exist), so a device implementation can trust every field it is handed.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import attrs

from ..errors import InvalidArgument

__all__ = [
    "MAX_SLICE_INDEX",
    "U32_MAX",
    "U64_MAX",
    "U128_MAX",
    "Cancellable",
    "Device",
    "Opcode",
    "SliceCompletion",
    "SliceRequest",
    "SliceStatus",
    "WriteLease",
    "first_write_id",
]

U32_MAX = (1 << 32) - 1
U64_MAX = (1 << 64) - 1
U128_MAX = (1 << 128) - 1
MAX_SLICE_INDEX = 0xFFFF
"""A transfer has at most ``MAX_SLICE_INDEX + 1`` slices (the index is a u16 on the wire)."""


def first_write_id(write_id: int, slice_index: int) -> int:
    """The write id of the first slice of the transfer whose slice ``slice_index`` has
    ``write_id``: write ids count up by one per slice and wrap from ``U32_MAX`` to 1 (0 is
    never one), so this is ``write_id - slice_index`` on that cycle."""
    return (write_id - 1 - slice_index) % U32_MAX + 1


class Opcode(enum.IntEnum):
    """What a slice does on the wire."""

    WRITE = 1
    """Local -> remote segment; charges the receiver's credit when credit is on."""
    READ = 2
    """Remote segment -> local; local accounting only, never gated by remote credit."""


class SliceStatus(enum.Enum):
    """How a slice ended. Every status but ``SUCCESS`` means "bytes did not (verifiably) move"."""

    SUCCESS = "success"
    REMOTE_ACCESS_ERROR = "remote_access_error"
    """rkey, region, range or fenced session refused (verbs ``IBV_WC_REM_ACCESS_ERR``)."""
    WRITE_REFUSED = "write_refused"
    """The receiver's write admission refused it before memory was touched."""
    INTEGRITY_ERROR = "integrity_error"
    """Checksum mismatch at the receiver."""
    FLUSHED = "flushed"
    """The QP or connection went to error; outstanding work was flushed."""
    TRANSPORT_ERROR = "transport_error"
    """Connection lost, RNR retry exceeded, or any other transport failure."""
    CANCELED = "canceled"
    """The device stopped the slice at the caller's request (:class:`Cancellable`)."""

    @property
    def moved(self) -> bool:
        """Whether the slice's bytes moved (only ``SUCCESS``)."""
        return self is SliceStatus.SUCCESS


def _uint(bound: int) -> Callable[[object, attrs.Attribute[int], int], None]:
    def check(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
        if type(value) is not int or not 0 <= value <= bound:
            raise InvalidArgument(f"{attr.name} must be an int in [0, {bound}], got {value!r}")

    return check


def _positive_u64(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or not 1 <= value <= U64_MAX:
        raise InvalidArgument(f"{attr.name} must be an int in [1, 2**64 - 1], got {value!r}")


def _any_int(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int:
        raise InvalidArgument(f"{attr.name} must be an int, got {value!r}")


def _charge(
    _inst: object, _attr: attrs.Attribute[tuple[tuple[int, int], ...]], value: object
) -> None:
    if type(value) is not tuple or not value:
        raise InvalidArgument(f"charge must be a non-empty tuple of pairs, got {value!r}")
    previous = 0
    for part in value:
        if (
            type(part) is not tuple
            or len(part) != 2
            or type(part[0]) is not int
            or type(part[1]) is not int
        ):
            raise InvalidArgument(f"charge part must be an (int, int) pair, got {part!r}")
        resource, amount = part
        if resource <= previous:
            raise InvalidArgument(f"charge resources must be > 0, unique and sorted: {value!r}")
        if not 1 <= amount <= U64_MAX:
            raise InvalidArgument(f"charge amount must be in [1, 2**64 - 1], got {amount}")
        previous = resource


@attrs.frozen(kw_only=True)
class WriteLease:
    """What the receiver admits a credited WRITE against (its write admission's arguments).

    ``session`` is the receiver session id (u128) and ``epoch`` the key's epoch, both from the
    activation; ``charge`` is this write's ``(CreditResource value, amount)`` pairs, sorted by
    resource. The slices of one transfer sum to the transfer's charge: each carries its own
    ``DATA_BYTES``, and the per-request slots ride on the transfer's last slice (by offset).
    Raises :class:`InvalidArgument` for an out-of-range or unsorted field.
    """

    session: int = attrs.field(validator=_uint(U128_MAX))
    epoch: int = attrs.field(validator=_uint(U64_MAX))
    qos_class: int = attrs.field(validator=_uint(U32_MAX))
    charge: tuple[tuple[int, int], ...] = attrs.field(validator=_charge)


def _opcode(_inst: object, _attr: attrs.Attribute[Opcode], value: object) -> None:
    if not isinstance(value, Opcode):
        raise InvalidArgument(f"opcode must be an Opcode, got {value!r}")


def _memoryview(_inst: object, _attr: attrs.Attribute[memoryview], value: object) -> None:
    if not isinstance(value, memoryview):
        raise InvalidArgument(f"local must be a memoryview, got {type(value).__name__}")


def _lease(_inst: object, _attr: attrs.Attribute[WriteLease | None], value: object) -> None:
    if value is not None and not isinstance(value, WriteLease):
        raise InvalidArgument(f"lease must be a WriteLease or None, got {value!r}")


@attrs.frozen(kw_only=True)
class SliceRequest:
    """One slice the dispatch core posts on a rail.

    1. ``wr_id`` is unique per device among outstanding slices, chosen by the dispatch core.
    2. ``local`` is the source bytes (WRITE) or the destination (READ); ``local.nbytes`` equals
       ``length``. A READ's ``local`` must be writable.
    3. ``lease`` is ``None`` for an uncredited slice (credit off, the legacy window, a READ);
       a READ never carries one.
    4. ``deadline_ns`` 0 means no deadline; ``priority`` is the QoS tier (lower posts first).
    5. ``write_id`` is a u32 sent with a WRITE (verbs: the immediate of WRITE_WITH_IMM), unique
       among the core's in-flight writes; 0 for a READ.
    6. ``slice_index`` is the slice's place in its transfer (u16, 0 for the first): the slices
       of a transfer have consecutive write ids, so the receiver knows a transfer as the write
       id of its first slice (``first_write_id``) and holds its state once per transfer.

    Raises :class:`InvalidArgument` when any rule is broken.
    """

    wr_id: int = attrs.field(validator=_uint(U64_MAX))
    opcode: Opcode = attrs.field(validator=_opcode)
    peer: int = attrs.field(validator=_uint(U64_MAX))
    local: memoryview = attrs.field(validator=_memoryview, eq=False)
    remote_segment: int = attrs.field(validator=_uint(U64_MAX))
    remote_offset: int = attrs.field(validator=_uint(U64_MAX))
    length: int = attrs.field(validator=_positive_u64)
    lease: WriteLease | None = attrs.field(default=None, validator=_lease)
    deadline_ns: int = attrs.field(default=0, validator=_uint(U64_MAX))
    priority: int = attrs.field(default=0, validator=_any_int)
    write_id: int = attrs.field(default=0, validator=_uint(U32_MAX))
    slice_index: int = attrs.field(default=0, validator=_uint(MAX_SLICE_INDEX))

    def __attrs_post_init__(self) -> None:
        if self.local.nbytes != self.length:
            raise InvalidArgument(
                f"local buffer holds {self.local.nbytes} bytes, the slice is {self.length}"
            )
        if self.remote_offset + self.length > U64_MAX + 1:
            raise InvalidArgument("remote_offset + length overflows the u64 address space")
        if self.opcode is Opcode.READ:
            if self.lease is not None:
                raise InvalidArgument("a READ slice never carries a write lease")
            if self.local.readonly:
                raise InvalidArgument("a READ slice needs a writable local buffer")


def _status(_inst: object, _attr: attrs.Attribute[SliceStatus], value: object) -> None:
    if not isinstance(value, SliceStatus):
        raise InvalidArgument(f"status must be a SliceStatus, got {value!r}")


def _str(_inst: object, _attr: attrs.Attribute[str], value: object) -> None:
    if type(value) is not str:
        raise InvalidArgument(f"detail must be a str, got {type(value).__name__}")


@attrs.frozen(kw_only=True)
class SliceCompletion:
    """How one posted slice ended; ``detail`` is a human-readable reason (empty on success).

    Raises :class:`InvalidArgument` for a malformed field.
    """

    wr_id: int = attrs.field(validator=_uint(U64_MAX))
    status: SliceStatus = attrs.field(validator=_status)
    length: int = attrs.field(validator=_positive_u64)
    detail: str = attrs.field(default="", validator=_str)


@runtime_checkable
class Device(Protocol):
    """One rail. Implementations: the TCP data device, soft verbs, pyverbs, the simulator's.

    The dispatch core calls it from one thread (its driver's), except :meth:`set_wakeup`'s
    callback, which the device may call from any thread.
    """

    @property
    def name(self) -> str:
        """A name unique among the engine's rails (it names the rail's meters)."""
        ...

    @property
    def link_speed_gbps(self) -> float:
        """The link speed in Gb/s, the seed of both bandwidth series (0 = unknown)."""
        ...

    def post_budget(self, peer: int) -> int:
        """Slices postable to ``peer`` now: ``min(free CQ slots, max_qp_wr - outstanding on the
        peer's QP)``; 0 while the QP or connection is not ready. Never raises for a known peer;
        an unknown peer reads 0."""
        ...

    def post(self, slices: Sequence[SliceRequest], now_ns: int) -> None:
        """Post ``slices`` (all to one peer) as one chained call, all or nothing.

        Raises :class:`~tent_transport.errors.PostRefused` (nothing posted, nothing changed) if
        ``len(slices) > post_budget(peer)``, the slices name more than one peer, or the QP or
        connection is not ready.
        """
        ...

    def poll(self, max_entries: int, now_ns: int) -> list[SliceCompletion]:
        """Up to ``max_entries`` completions, in posting order per peer; never blocks.

        Every posted slice completes exactly once (a flushed QP reports ``FLUSHED`` for each of
        its outstanding slices).
        """
        ...

    def next_completion_ns(self) -> int | None:
        """Simulated devices: when the next completion is due; asynchronous devices: ``None``."""
        ...

    def set_wakeup(self, callback: Callable[[], None] | None) -> None:
        """Install (or clear, with ``None``) the callback an asynchronous device calls, from any
        thread, when completions became ready. Simulated devices may ignore it."""
        ...

    def close(self) -> None:
        """Release the device. Outstanding slices are flushed (polled as ``FLUSHED``)."""
        ...


@runtime_checkable
class Cancellable(Protocol):
    """The optional part of the :class:`Device` protocol: canceling posted slices.

    A device that can stop work it accepted implements it; the dispatch core then cancels a
    transfer whose slices are posted (a device without it answers such a cancel with
    :class:`~tent_transport.errors.NotSupported`). The TCP and verbs rails do not: a slice on a
    stream or an RC send queue cannot be taken back alone.
    """

    def cancel(self, wr_ids: Sequence[int], now_ns: int) -> None:
        """Stop the given posted slices. Each still completes exactly once through
        :meth:`Device.poll`, in posting order per peer: ``CANCELED`` if the device stopped it,
        its own status if it had ended first. Unknown or already polled ids are ignored."""
        ...
