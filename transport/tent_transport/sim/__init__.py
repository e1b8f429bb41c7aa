"""The deadline simulator (issue 14): the engine's own dispatch core in virtual time.

A :class:`SimDevice` per NIC (link rate, QP budget, per-slice wire time, completion batching),
a workload generator deterministic for a seed, and :func:`simulate`, which drives the real
:class:`~tent_transport.dispatch.DispatchCore` (admission queue, drop, meters, selection,
arbitration) with a virtual clock. ``tent sim deadline`` is its command line.
"""

from __future__ import annotations

from ._device import LinkSpec, SimDevice
from ._report import Summary, dropped_feasible, summarize, table_rows, transmit_follow_ns
from ._run import Outcome, PickSample, QueueSample, RailSample, SimResult, simulate
from ._scenarios import NAMED, named_workload, workload_names
from ._workload import FlowSpec, Workload, load_workload, workload_from_mapping

__all__ = [
    "NAMED",
    "FlowSpec",
    "LinkSpec",
    "Outcome",
    "PickSample",
    "QueueSample",
    "RailSample",
    "SimDevice",
    "SimResult",
    "Summary",
    "Workload",
    "dropped_feasible",
    "load_workload",
    "named_workload",
    "simulate",
    "summarize",
    "table_rows",
    "transmit_follow_ns",
    "workload_from_mapping",
    "workload_names",
]
