"""The TCP data device: :class:`TcpRail` (sender, a Device) and :class:`TcpDataServer`
(receiver: bind, admission before memory is touched, zero-copy landing, checksums)."""

from __future__ import annotations

from ._receiver import DataPlane, DataServerStatistics, TcpDataServer
from ._sender import RailStatistics, TcpRail
from ._wire import ACK, REQUEST, Ack, AckStatus, Flags, Request, WireOpcode, checksum

__all__ = [
    "ACK",
    "REQUEST",
    "Ack",
    "AckStatus",
    "DataPlane",
    "DataServerStatistics",
    "Flags",
    "RailStatistics",
    "Request",
    "TcpDataServer",
    "TcpRail",
    "WireOpcode",
    "checksum",
]
