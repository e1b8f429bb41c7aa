"""What ``tent check`` says when a user's model raises (issue 28 item 6).

A traceback of the checker's frames tells a model's author nothing. For a
:class:`~tent_models.ModelActionError` the report instead names the action and its arguments,
shows the state it ran in as the shortest path to it (diff-only, as a counterexample), and keeps
only the traceback frames of the model's own code.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tent_models.checker import check, format_trace
from tent_models.checker._fastpath import PlainModel
from tent_models.model import ModelActionError
from tent_models.model_api import Invariant, SpecModel

__all__ = ["describe_failure"]

_PACKAGE = str(Path(__file__).resolve().parent)
_PATH_BUDGET = 200_000  # states explored to find the path; a larger model gets the state alone


class _PathTo(PlainModel):
    """``model`` with one invariant, "not the failing state": its counterexample is the path.

    Actions that raise are skipped, so the search reaches the state without failing first."""

    def __init__(self, model: SpecModel[Any], target: Any) -> None:
        super().__init__(model)
        self._target = target

    def successors(self, state: Any) -> Iterator[Any]:
        try:
            yield from self._model.successors(state)
        except ModelActionError:
            return

    def invariants(self) -> list[Invariant]:
        return [Invariant("reached", "", lambda state: state != self._target)]

    def witnesses(self) -> list[Any]:
        return []

    def unreachable_actions(self) -> frozenset[str]:
        return frozenset(self._model.action_names())  # coverage is not the point here


def _path(model: SpecModel[Any], state: Any) -> str:
    result = check(
        _PathTo(model, state), symmetry=False, check_deadlock=False, max_states=_PATH_BUDGET
    )
    hits = [v for v in result.violations if v.name == "reached"]
    if not hits:
        return f"    (no path found within {_PATH_BUDGET:,} states)\n    state: {state!r}"
    return format_trace(hits[0].steps)


def _own_frames(exc: BaseException) -> str:
    """The traceback of ``exc`` without the frames of ``tent_models`` itself."""
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(_PACKAGE)
    ]
    lines = traceback.format_list(frames)
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines).rstrip()


def describe_failure(
    exc: BaseException, factory: Callable[[], SpecModel[Any]] | None
) -> tuple[str, str] | None:
    """``(message, report)`` for a model that raised in an action, else ``None``."""
    if not isinstance(exc, ModelActionError) or exc.__cause__ is None:
        return None
    cause = exc.__cause__
    message = f"{exc} {type(cause).__name__}: {cause}"
    parts = ["in the state reached by:"]  # the message, printed above it, names the action
    parts.append(_path(factory(), exc.state) if factory is not None else f"    {exc.state!r}")
    parts += ["the model's frames:", _own_frames(cause)]
    return message, "\n".join(parts)
