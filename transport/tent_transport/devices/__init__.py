"""Rails: the :class:`Device` protocol and its values (implementations live in subpackages)."""

from __future__ import annotations

from ._base import (
    Cancellable,
    Device,
    Opcode,
    SliceCompletion,
    SliceRequest,
    SliceStatus,
    WriteLease,
)

__all__ = [
    "Cancellable",
    "Device",
    "Opcode",
    "SliceCompletion",
    "SliceRequest",
    "SliceStatus",
    "WriteLease",
]
