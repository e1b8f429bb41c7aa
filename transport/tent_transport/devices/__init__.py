"""Rails: the :class:`Device` protocol and its values (implementations live in subpackages)."""

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

__all__ = [
    "MAX_SLICE_INDEX",
    "Cancellable",
    "Device",
    "Opcode",
    "SliceCompletion",
    "SliceRequest",
    "SliceStatus",
    "WriteLease",
    "first_write_id",
]
