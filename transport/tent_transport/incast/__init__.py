"""The RFC's incast matrix through the real engine (``tent bench incast``, issue 13).

:func:`run_one` runs one :class:`RunConfig` (N sender processes, one receiver process, TCP on
loopback or across two network namespaces, :data:`NETWORKS`, or the soft verbs device,
:data:`DEVICES`) and returns its JSONL record; :func:`netns_pair` makes (and removes) the
namespaces a netns run uses;
:func:`run_matrix` runs a list of them, interleaved by repetition; :func:`verify_records`
applies the acceptance rules; :func:`write_report` writes the medians table and plots.
"""

from __future__ import annotations

from ._config import (
    DEVICES,
    NETWORKS,
    Condition,
    Mode,
    RunConfig,
    default_matrix,
    full_matrix,
    interleave,
    smoke_matrix,
    tune_candidates,
)
from ._netns import NetnsError, NetnsPair, NetnsUnavailable, netns_pair
from ._records import SCHEMA, SCHEMA_VERSION, build_record, check_schema, jain, percentile
from ._runner import RunFailed, read_records, run_matrix, run_one, tune_window

__all__ = [
    "DEVICES",
    "NETWORKS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "Condition",
    "Mode",
    "NetnsError",
    "NetnsPair",
    "NetnsUnavailable",
    "RunConfig",
    "RunFailed",
    "build_record",
    "check_schema",
    "default_matrix",
    "full_matrix",
    "interleave",
    "jain",
    "netns_pair",
    "percentile",
    "read_records",
    "run_matrix",
    "run_one",
    "smoke_matrix",
    "tune_candidates",
    "tune_window",
]
