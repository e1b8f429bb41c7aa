"""The TCP data path's acknowledgement header (big-endian, fixed size).

The request header before each payload is the transports' shared write header
(:mod:`tent_transport.devices._writes`, re-exported here for the TCP code).

Acknowledgement, receiver → sender, then (successful READ) ``length`` payload bytes::

    magic "TDA1" | status u8 | pad u8[3] | checksum u32 | request u64 | length u64

The acknowledgement's checksum is the READ payload's CRC32C (verified at the sender).
"""

from __future__ import annotations

import enum
import struct

import attrs

from .._writes import REQUEST, Flags, Request, WireOpcode, checksum

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

ACK = struct.Struct("!4sB3xIQQ")
_ACK_MAGIC = b"TDA1"


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
