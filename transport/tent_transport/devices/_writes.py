"""The write header every transport hands the receiver's rules, and its one binary form.

A write (or read) arrives with this fixed-size header, big-endian, then (WRITE) ``length``
payload bytes::

    magic "TDH1" | opcode u8 | flags u8 | slice u16 | qos u32 | write_id u32 | request u64 |
    segment u64 | offset u64 | length u64 | session u64 | lease_session u128 | epoch u64 |
    checksum u32 | pad u32 | charge[4] u64 (DATA_BYTES, REQUEST_SLOTS, STAGING_SLOTS,
    CONSUMER_SLOTS; 0 = not charged)

TCP sends it before the payload; the verbs transport posts it in its notice beside the RDMA
write. Either way the receiver decodes it to a :class:`Request` and runs the same admission,
landing and release rules (:class:`~tent_transport.devices.DataPlane`), so the header is
defined here, once, and not by any one transport.

``slice`` is the write's index in its transfer (the transfer is the write id of its first slice,
:func:`~tent_transport.devices.first_write_id`; the receiver holds state per transfer).
``session`` is the receiver's transport session of the connection (a header naming another one
is refused); ``lease_session``/``epoch``/``charge`` are the credit lease of a CREDITED write.
The checksum is CRC32C of the payload (``crc32c``, hardware-accelerated), verified at the
receiver for a WRITE and at the sender for a READ.
"""

from __future__ import annotations

import enum
import struct

import attrs
import crc32c

from ..errors import PostRefused
from ._base import Opcode, SliceRequest

__all__ = ["REQUEST", "Flags", "Request", "WireOpcode", "checksum"]

REQUEST = struct.Struct("!4sBBHIIQQQQQQQQII4Q")
_REQUEST_MAGIC = b"TDH1"
_U64 = (1 << 64) - 1
_RESOURCE_INDEX = {1: 0, 2: 1, 3: 2, 4: 3}  # CreditResource value -> charge slot


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

    @classmethod
    def for_slice(cls, s: SliceRequest, session: int) -> Request:
        """The header of slice ``s`` on the receiver's transport ``session``: its lease (if
        any) as CREDITED with its charges, STAGED when it charges a staging slot, the payload's
        checksum for a WRITE. Raises :class:`~tent_transport.errors.PostRefused` for a charge
        of an unknown resource (nothing is sent)."""
        charge = [0, 0, 0, 0]
        flags = Flags.NONE
        lease_session = epoch = qos = 0
        if s.lease is not None:
            flags |= Flags.CREDITED
            lease_session, epoch, qos = s.lease.session, s.lease.epoch, s.lease.qos_class
            for resource, amount in s.lease.charge:
                if resource == 3:  # STAGING_SLOTS: a staged write, landing in the staging pool
                    flags |= Flags.STAGED
                index = _RESOURCE_INDEX.get(resource)
                if index is None:
                    raise PostRefused(f"unknown credit resource {resource}", ready=True)
                charge[index] = amount
        return cls(
            opcode=WireOpcode.WRITE if s.opcode is Opcode.WRITE else WireOpcode.READ,
            flags=flags,
            qos_class=qos,
            write_id=s.write_id,
            request=s.wr_id,
            segment=s.remote_segment,
            offset=s.remote_offset,
            length=s.length,
            session=session,
            lease_session=lease_session,
            epoch=epoch,
            checksum=checksum(s.local) if s.opcode is Opcode.WRITE else 0,
            charge=(charge[0], charge[1], charge[2], charge[3]),
            slice_index=s.slice_index,
        )

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
