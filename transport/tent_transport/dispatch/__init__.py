"""The sans-IO dispatch core (docs/seams.md "The dispatch core"): one per engine.

Submit → admission queue → dispatch gate → rail selection → per-rail arbitration and the QP
budget → ``Device.post`` → completions → meters, queue and gate settlement, metrics. Driven by
the asyncio engine (real clock) or the simulator (virtual clock): there is never a second
pipeline.
"""

from __future__ import annotations

from ._core import DispatchCore, DispatchStatistics, DropHook
from ._records import RailStatistics
from ._types import (
    EndReason,
    TransferEvent,
    TransferIntent,
    TransferPhase,
    TransferPlan,
    TransferRequest,
    TransferState,
)

__all__ = [
    "DispatchCore",
    "DispatchStatistics",
    "DropHook",
    "EndReason",
    "RailStatistics",
    "TransferEvent",
    "TransferIntent",
    "TransferPhase",
    "TransferPlan",
    "TransferRequest",
    "TransferState",
]
