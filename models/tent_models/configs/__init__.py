"""Named model configurations, one module per spec family: the bounds every shipped model is
checked under.

* :mod:`tent_models.configs.credit`: the credit spec (``credit/*``), its adversarial-sender
  extension (``adversarial/*``), version negotiation (``negotiation/*``) and the credit spec's
  known-bad variants.
* :mod:`tent_models.configs.admission`: the admission queue (``admission/*``) and its mutants.
* :mod:`tent_models.configs.gated`: the gated queue (``gated/*``) and its mutants.

Each module's ``CONFIGS`` maps a model name to a factory of a fresh spec model (specs keep
per-instance memo tables); ``tent_models.registry`` joins them into the CLI's targets. The
credit family's names are re-exported here, as ``tent_models.configs`` named them before it
became a package.
"""

from tent_models.configs.credit import (
    ADVERSARIAL_BOUNDS,
    CONFIGS,
    CREDIT_BOUNDS,
    KNOWN_BAD_BOUNDS,
    KNOWN_BAD_CONFIGS,
    KNOWN_BAD_EXPECTED,
    NEGOTIATION_BOUNDS,
)

__all__ = [
    "ADVERSARIAL_BOUNDS",
    "CONFIGS",
    "CREDIT_BOUNDS",
    "KNOWN_BAD_BOUNDS",
    "KNOWN_BAD_CONFIGS",
    "KNOWN_BAD_EXPECTED",
    "NEGOTIATION_BOUNDS",
]
