"""The TCP data transport: :class:`TcpRail` (sender, a Device) and :class:`TcpDataServer`
(receiver: bind, admission before memory is touched, zero-copy landing, checksums);
:data:`TRANSPORT` is what the registry builds them through."""

from __future__ import annotations

from .._halves import DataPlane, DataServerStatistics, RailStatistics
from .._writes import REQUEST, Flags, Request, WireOpcode, checksum
from ._receiver import TcpDataServer
from ._sender import TcpRail
from ._transport import TRANSPORT, TcpTransport
from ._wire import ACK, Ack, AckStatus

__all__ = [
    "ACK",
    "REQUEST",
    "TRANSPORT",
    "Ack",
    "AckStatus",
    "DataPlane",
    "DataServerStatistics",
    "Flags",
    "RailStatistics",
    "Request",
    "TcpDataServer",
    "TcpRail",
    "TcpTransport",
    "WireOpcode",
    "checksum",
]
