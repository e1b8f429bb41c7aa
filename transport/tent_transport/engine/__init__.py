"""The asyncio engine over the dispatch core, its handles, and the synchronous facade."""

from __future__ import annotations

from ._batches import Request, TaskState
from ._engine import Engine
from ._handle import HandleState, TransferHandle
from ._options import EngineOptions
from ._receiving import DataLanded, ReceiverSide, ReceiverStatistics
from ._sync import SyncEngine, SyncHandle

__all__ = [
    "DataLanded",
    "Engine",
    "EngineOptions",
    "HandleState",
    "ReceiverSide",
    "ReceiverStatistics",
    "Request",
    "SyncEngine",
    "SyncHandle",
    "TaskState",
    "TransferHandle",
]
