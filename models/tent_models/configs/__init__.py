"""Named model configurations, one module per spec family: the bounds every shipped model is
checked under.

* :mod:`tent_models.configs.credit`: the credit spec (``credit/*``), its adversarial-sender
  extension (``adversarial/*``) and the credit spec's known-bad variants.
* :mod:`tent_models.configs.negotiation`: version negotiation (``negotiation/*``).
* :mod:`tent_models.configs.admission`: the admission queue (``admission/*``) and its mutants.
* :mod:`tent_models.configs.gated`: the gated queue (``gated/*``) and its mutants.

Each module's ``CONFIGS`` maps a model name to a factory of a fresh spec model (specs keep
per-instance memo tables); ``tent_models.registry`` joins them into the CLI's targets. The names
below are the ones ``tent_models.configs`` had before it became a package: the credit family's,
and :data:`CONFIGS` for the credit, adversarial and negotiation models.
"""

from collections.abc import Callable, Mapping
from typing import Any

from tent_models.configs import credit, negotiation
from tent_models.configs.credit import (
    ADVERSARIAL_BOUNDS,
    CREDIT_BOUNDS,
    KNOWN_BAD_BOUNDS,
    KNOWN_BAD_CONFIGS,
    KNOWN_BAD_EXPECTED,
)
from tent_models.configs.negotiation import NEGOTIATION_BOUNDS
from tent_models.model_api import SpecModel

__all__ = [
    "ADVERSARIAL_BOUNDS",
    "CONFIGS",
    "CREDIT_BOUNDS",
    "KNOWN_BAD_BOUNDS",
    "KNOWN_BAD_CONFIGS",
    "KNOWN_BAD_EXPECTED",
    "NEGOTIATION_BOUNDS",
]

CONFIGS: Mapping[str, Callable[[], SpecModel[Any]]] = {**credit.CONFIGS, **negotiation.CONFIGS}
"""Model name -> factory of the credit, adversarial and negotiation models."""
