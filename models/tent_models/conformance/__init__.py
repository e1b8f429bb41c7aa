"""The lockstep conformance runner: implementation against spec, step by step
(docs/design.md#principle-3).

:mod:`tent_models.conformance._lockstep` is the generic core (any ``SpecModel`` plus an
:class:`ImplementationAdapter`); :mod:`tent_models.conformance.admission` adapts
``tent_sched.AdmissionQueue`` to ``tent_spec.admission``.
"""

from __future__ import annotations

from tent_models.conformance._lockstep import (
    ActionInstance,
    ConformanceFailure,
    Divergence,
    DivergenceKind,
    ImplementationAdapter,
    Lockstep,
    Outcome,
    OutcomeKind,
    StepVerdict,
    minimise_divergence,
    run_lockstep,
)

__all__ = [
    "ActionInstance",
    "ConformanceFailure",
    "Divergence",
    "DivergenceKind",
    "ImplementationAdapter",
    "Lockstep",
    "Outcome",
    "OutcomeKind",
    "StepVerdict",
    "minimise_divergence",
    "run_lockstep",
]
