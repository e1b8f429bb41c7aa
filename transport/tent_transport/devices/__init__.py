"""Transports as the engine sees them: the :class:`Device` protocol and its values, the two
halves a transport provides (:class:`Rail`, :class:`ReceiverHalf`), the receiver's shared write
rules (:class:`DataPlane`) and write header (:class:`Request`), and the registry that picks a
transport by name. Implementations live in subpackages (``tcp``, ``verbs``) and are imported
only through the registry.
"""

from __future__ import annotations

from ._base import (
    MAX_SLICE_INDEX,
    Cancellable,
    Device,
    Opcode,
    SliceCompletion,
    SliceRequest,
    SliceStatus,
    WriteLease,
    first_write_id,
)
from ._halves import (
    AttachFailed,
    AttachRefused,
    DataPlane,
    DataServerStatistics,
    Rail,
    RailStatistics,
    ReceiverHalf,
    SessionContext,
)
from ._registry import (
    Transport,
    TransportParts,
    TransportSpec,
    build_transport,
    check_transport,
    register_transport,
    transport_names,
)
from ._writes import REQUEST, Flags, Request, WireOpcode, checksum

__all__ = [
    "MAX_SLICE_INDEX",
    "REQUEST",
    "AttachFailed",
    "AttachRefused",
    "Cancellable",
    "DataPlane",
    "DataServerStatistics",
    "Device",
    "Flags",
    "Opcode",
    "Rail",
    "RailStatistics",
    "ReceiverHalf",
    "Request",
    "SessionContext",
    "SliceCompletion",
    "SliceRequest",
    "SliceStatus",
    "Transport",
    "TransportParts",
    "TransportSpec",
    "WireOpcode",
    "WriteLease",
    "build_transport",
    "check_transport",
    "checksum",
    "first_write_id",
    "register_transport",
    "transport_names",
]
