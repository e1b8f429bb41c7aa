"""The generic explicit-state model checker for :class:`~tent_models.model_api.SpecModel` specs.

``check`` explores a bounded model breadth-first (optionally over several processes, or Ray
actors) and judges invariants, deadlocks, recoverability, witnesses and per-action coverage;
``simulate`` runs seeded random walks and ``swarm`` many diversified ones (optionally as Ray
tasks); ``replay`` re-applies a trace. Counterexamples print as numbered,
diff-only steps (``format_trace``), the format z3 counterexamples-to-induction reuse.
"""

from __future__ import annotations

from tent_models.checker._check import check
from tent_models.checker._errors import (
    CheckerError,
    InvalidArgument,
    ModelContractError,
    ReplayError,
)
from tent_models.checker._fastpath import FAST_PATH_METHODS, PlainModel
from tent_models.checker._fingerprint import (
    collision_probability,
    collision_probability_tlc,
    fingerprint,
)
from tent_models.checker._ray import RayEngine, on_ray
from tent_models.checker._report import format_counterexample, format_result
from tent_models.checker._result import (
    ActionCoverage,
    CheckResult,
    CounterExample,
    TraceStep,
    ViolationKind,
    WitnessResult,
)
from tent_models.checker._simulate import simulate
from tent_models.checker._swarm import swarm
from tent_models.checker._trace import format_trace, minimise, replay, trace_steps

__all__ = [
    "FAST_PATH_METHODS",
    "ActionCoverage",
    "CheckResult",
    "CheckerError",
    "CounterExample",
    "InvalidArgument",
    "ModelContractError",
    "PlainModel",
    "RayEngine",
    "ReplayError",
    "TraceStep",
    "ViolationKind",
    "WitnessResult",
    "check",
    "collision_probability",
    "collision_probability_tlc",
    "fingerprint",
    "format_counterexample",
    "format_result",
    "format_trace",
    "minimise",
    "on_ray",
    "replay",
    "simulate",
    "swarm",
    "trace_steps",
]
