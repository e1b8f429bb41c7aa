"""The TCP data path's fixed-size headers (big-endian; nothing here is variable-length).

Request, sender → receiver, then (WRITE) ``length`` payload bytes::

    magic "TDH1" | opcode u8 | flags u8 | slice u16 | qos u32 | write_id u32 | request u64 |
    segment u64 | offset u64 | length u64 | session u64 | lease_session u128 | epoch u64 |
    checksum u32 | pad u32 | charge[4] u64 (DATA_BYTES, REQUEST_SLOTS, STAGING_SLOTS,
    CONSUMER_SLOTS; 0 = not charged)

Acknowledgement, receiver → sender, then (successful READ) ``length`` payload bytes::

    magic "TDA1" | status u8 | pad u8[3] | checksum u32 | request u64 | length u64

``slice`` is the write's index in its transfer (the transfer is the write id of its first slice,
``devices.first_write_id``; the receiver holds state per transfer). ``session`` is the
receiver's transport session of the data connection (a header naming another one is refused);
``lease_session``/``epoch``/``charge`` are the credit lease of a CREDITED write. The checksum
is CRC32C of the payload (``crc32c``, hardware-accelerated), verified at the receiver for a
WRITE and at the sender for a READ.
"""

from __future__ import annotations

import enum
import struct

import attrs
import crc32c

__all__ = [
    "ACK",
    "REQUEST",
    "Ack",
    "AckStatus",
    "Flags",
    "Request",
    "WireOpcode",
    "checksum",
]

REQUEST = struct.Struct("!4sBBHIIQQQQQQQQII4Q")
ACK = struct.Struct("!4sB3xIQQ")
_REQUEST_MAGIC = b"TDH1"
_ACK_MAGIC = b"TDA1"
_U64 = (1 << 64) - 1


def checksum(data: memoryview | bytes) -> int:
    """CRC32C of ``data`` (no copy)."""
    return int(crc32c.crc32c(data))


class WireOpcode(enum.IntEnum):
    WRITE = 1
    READ = 2


class Flags(enum.IntFlag):
    NONE = 0
    CREDITED = 1
    """The write carries a credit lease the receiver must admit."""
    STAGED = 2
    """The write lands in the receiver's staging pool (an inner transfer moves it on)."""


class AckStatus(enum.IntEnum):
    OK = 0
    REFUSED = 1
    """Write admission refused it (over credit, fenced session, quarantined): nothing written."""
    ACCESS = 2
    """Outside every region exposed to this (peer, session), or another session: nothing written."""
    INTEGRITY = 3
    """The payload's checksum did not match."""
    MALFORMED = 4


@attrs.frozen(kw_only=True)
class Request:
    opcode: int
    flags: Flags
    qos_class: int
    write_id: int
    request: int
    segment: int
    offset: int
    length: int
    session: int
    lease_session: int
    epoch: int
    checksum: int
    charge: tuple[int, int, int, int]
    slice_index: int = 0

    def pack(self) -> bytes:
        return REQUEST.pack(
            _REQUEST_MAGIC,
            self.opcode,
            int(self.flags),
            self.slice_index,
            self.qos_class,
            self.write_id,
            self.request,
            self.segment,
            self.offset,
            self.length,
            self.session,
            self.lease_session >> 64,
            self.lease_session & _U64,
            self.epoch,
            self.checksum,
            0,
            *self.charge,
        )

    @classmethod
    def unpack(cls, raw: bytes | bytearray | memoryview) -> Request | None:
        """The header, or ``None`` for a bad magic, opcode or flag (a malformed header)."""
        (
            magic,
            opcode,
            flags,
            slice_index,
            qos,
            write_id,
            request,
            segment,
            offset,
            length,
            session,
            lease_hi,
            lease_lo,
            epoch,
            crc,
            _pad2,
            *charge,
        ) = REQUEST.unpack(raw)
        if magic != _REQUEST_MAGIC or opcode not in (1, 2) or flags & ~3:
            return None
        return cls(
            opcode=opcode,
            flags=Flags(flags),
            qos_class=qos,
            write_id=write_id,
            request=request,
            segment=segment,
            offset=offset,
            length=length,
            session=session,
            lease_session=(lease_hi << 64) | lease_lo,
            epoch=epoch,
            checksum=crc,
            charge=(charge[0], charge[1], charge[2], charge[3]),
            slice_index=slice_index,
        )


@attrs.frozen(kw_only=True)
class Ack:
    status: AckStatus
    checksum: int
    request: int
    length: int

    def pack(self) -> bytes:
        return ACK.pack(_ACK_MAGIC, int(self.status), self.checksum, self.request, self.length)

    @classmethod
    def unpack(cls, raw: bytes | bytearray | memoryview) -> Ack | None:
        magic, status, crc, request, length = ACK.unpack(raw)
        if magic != _ACK_MAGIC or status not in AckStatus._value2member_map_:
            return None
        return cls(status=AckStatus(status), checksum=crc, request=request, length=length)
