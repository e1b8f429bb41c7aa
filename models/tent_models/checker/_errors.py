"""Typed exceptions of :mod:`tent_models.checker`.

Expected outcomes of a check (an invariant violated, a deadlock, a vacuous witness) are *values*
in the :class:`~tent_models.checker.CheckResult`, never exceptions (docs/design.md#principle-8).
These exceptions mean the caller or the model misused the API.
"""

from __future__ import annotations

__all__ = ["CheckerError", "InvalidArgument", "ModelContractError", "ReplayError"]


class CheckerError(Exception):
    """Base class of every exception raised by :mod:`tent_models.checker`."""


class InvalidArgument(CheckerError, ValueError):
    """An argument of a checker call is out of range (e.g. ``workers < 1``). Nothing ran."""


class ModelContractError(CheckerError):
    """The model broke the :class:`~tent_models.model_api.SpecModel` contract.

    Examples: no initial state, ``pack`` returned something that is not a tuple of ints, or a
    recorded step cannot be re-found among ``successors`` while rebuilding a counterexample
    (``successors`` is not deterministic).
    """


class ReplayError(CheckerError, ValueError):
    """A step of a replayed trace is not enabled in the state it is applied to.

    ``index`` is the 0-based position of the failing step, ``explanation`` the model's
    ``explain`` text for the failed guard.
    """

    def __init__(self, index: int, action: str, explanation: str) -> None:
        super().__init__(f"step {index + 1} {action}: not enabled: {explanation}")
        self.index = index
        self.action = action
        self.explanation = explanation
