"""The write notice: what a verbs WRITE tells the receiver, in band, ahead of its bytes.

A one-sided WRITE_WITH_IMM carries 32 bits (the write id) and lands without receiver code, so
the receiver cannot know where it landed or what lease it claims. The sender therefore writes a
64-byte *notice* into a per-(peer, session) notice ring (an MR of that session) just before the
data, on the same RC QP. RC executes a QP's writes in order, so when the data's immediate
completes at the receiver, its notice is already there. The receiver admits the write at that
completion (``admit_write``), checks the claimed range against the session's exposures and the
payload's CRC32C at the claimed place: a claim that does not hold is a lie (RC's ICRC means an
honest write is never corrupted in flight) and quarantines the sender.

Layout (little endian, 64 bytes): magic ``TVN1``, write id u32, notice sequence u32, flags u32
(CREDITED = 1), segment u64, offset u64, length u64, DATA_BYTES charge u64, QoS class u32,
CRC32C u32, REQUEST_SLOTS / STAGING_SLOTS / CONSUMER_SLOTS u16 each, slice index u16 (the
write's place in its transfer, as the TCP header's).
"""

from __future__ import annotations

import struct

import attrs

__all__ = ["NOTICE", "NOTICE_SEGMENT", "Notice", "NoticeError"]

NOTICE = struct.Struct("<4sIIIQQQQIIHHHH")
NOTICE_SEGMENT = (1 << 64) - 1  # the ring's segment id in its VerbsRegion (never a table id)
_MAGIC = b"TVN1"
CREDITED = 1
_U16 = 0xFFFF


class NoticeError(ValueError):
    """Notice bytes that are not a valid notice (a peer fault: the sender is quarantined)."""


@attrs.frozen(kw_only=True)
class Notice:
    """One write's claim: where it landed, how long, its CRC32C and its lease's charge."""

    write_id: int
    sequence: int
    credited: bool
    segment: int
    offset: int
    length: int
    data_bytes: int
    qos_class: int
    checksum: int
    request_slots: int
    staging_slots: int
    consumer_slots: int
    slice_index: int = 0

    def pack(self) -> bytes:
        """Raises ``struct.error`` for a field out of its width (a local bug)."""
        return NOTICE.pack(
            _MAGIC,
            self.write_id,
            self.sequence,
            CREDITED if self.credited else 0,
            self.segment,
            self.offset,
            self.length,
            self.data_bytes,
            self.qos_class,
            self.checksum,
            self.request_slots,
            self.staging_slots,
            self.consumer_slots,
            self.slice_index,
        )

    @classmethod
    def unpack(cls, raw: bytes | memoryview) -> Notice:
        """Parse exactly :data:`NOTICE` ``.size`` bytes; raises :class:`NoticeError`."""
        if len(raw) != NOTICE.size:
            raise NoticeError(f"a notice is {NOTICE.size} bytes, got {len(raw)}")
        magic, wid, seq, flags, seg, off, length, data, qos, crc, req, stg, con, index = (
            NOTICE.unpack(raw)
        )
        if magic != _MAGIC or flags & ~CREDITED:
            raise NoticeError("not a write notice (magic or flags)")
        return cls(
            write_id=wid,
            sequence=seq,
            credited=bool(flags & CREDITED),
            segment=seg,
            offset=off,
            length=length,
            data_bytes=data,
            qos_class=qos,
            checksum=crc,
            request_slots=req,
            staging_slots=stg,
            consumer_slots=con,
            slice_index=index,
        )


def slot_amount(value: int) -> int:
    """A per-request slot amount as the notice carries it; raises ValueError above u16."""
    if not 0 <= value <= _U16:
        raise ValueError(f"slot amount {value} does not fit a notice")
    return value
