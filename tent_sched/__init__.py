"""Deadline scheduling for TENT: MLU predictor, admission queue, bandwidth meters, arbitration.

The public face of the package (sans-IO: time and bandwidth are arguments). Submodules
``tent_sched.errors`` and ``tent_sched.metrics`` are public too.
"""

from __future__ import annotations

from ._arbitration import (
    DEFAULT_MAX_QP_WR,
    EXACT_SLOTS,
    Slice,
    order_by_deadline,
    order_tiers,
    postable_prefix,
)
from ._bandwidth import (
    MeterParams,
    NicDevice,
    NicSet,
    NicStatistics,
    seed_bandwidth_bps,
)
from ._config import (
    RdmaSchedulingConfig,
    RuntimeQueueConfig,
    SchedulingConfig,
    load_config,
    parse_config_json,
)
from ._mlu import (
    DBL_MAX,
    deadline_mlu,
)
from ._queue import (
    NO_DEADLINE_KEY,
    OWNER_TRANSITIONS,
    TERMINAL_STATUSES,
    AdmissionQueue,
    Blocked,
    CompletionCounts,
    DegradationHook,
    Eligibility,
    EligibilityDecision,
    Eligible,
    OwnerKind,
    OwnerRequest,
    OwnerState,
    OwnerView,
    Picked,
    PickResult,
    QueueLimits,
    QueueStatistics,
    Rejected,
    TaskStatus,
)
from ._scoring import (
    score_devices,
    select_device,
)

__all__ = [
    "DBL_MAX",
    "DEFAULT_MAX_QP_WR",
    "EXACT_SLOTS",
    "NO_DEADLINE_KEY",
    "OWNER_TRANSITIONS",
    "TERMINAL_STATUSES",
    "AdmissionQueue",
    "Blocked",
    "CompletionCounts",
    "DegradationHook",
    "Eligibility",
    "EligibilityDecision",
    "Eligible",
    "MeterParams",
    "NicDevice",
    "NicSet",
    "NicStatistics",
    "OwnerKind",
    "OwnerRequest",
    "OwnerState",
    "OwnerView",
    "PickResult",
    "Picked",
    "QueueLimits",
    "QueueStatistics",
    "RdmaSchedulingConfig",
    "Rejected",
    "RuntimeQueueConfig",
    "SchedulingConfig",
    "Slice",
    "TaskStatus",
    "deadline_mlu",
    "load_config",
    "order_by_deadline",
    "order_tiers",
    "parse_config_json",
    "postable_prefix",
    "score_devices",
    "seed_bandwidth_bps",
    "select_device",
]
