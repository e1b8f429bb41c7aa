"""Model checker, model configurations, z3 proofs, conformance runner and the ``tent`` CLI.

The public face for checking a protocol of your own is re-exported here (see
``docs/own_protocol.md``): :class:`Model` and its decorators, :class:`Verdict`, and
:func:`tent_models.checker.check`.
"""

from tent_models.model import (
    Model,
    ModelActionError,
    ModelDefinitionError,
    Verdict,
    action,
    invariant,
    witness,
)
from tent_models.model_api import Invariant, SpecModel, Step, Witness

__all__ = [
    "Invariant",
    "Model",
    "ModelActionError",
    "ModelDefinitionError",
    "SpecModel",
    "Step",
    "Verdict",
    "Witness",
    "action",
    "invariant",
    "witness",
]
