"""A user's model that raises is reported with its action, arguments and state (issue 28
item 6): the message names the action and the exception, the report shows the shortest path to
the state (diff-only) and only the model's own traceback frames."""

from __future__ import annotations

import pickle

import pytest
from tent_models import Model, ModelActionError, action, invariant
from tent_models.checker import check
from tent_models.registry import RunOptions, Tier, model_target, run_target

Pair = tuple[int, int]


class Boom(Model[Pair]):
    def initial_states(self) -> list[Pair]:
        return [(0, 0)]

    @action(over=lambda self, s: [1, 2])
    def step(self, s: Pair, k: int) -> Pair | None:
        return (s[0] + 1, s[1] + k) if s[0] < 3 else None

    @action
    def divide(self, s: Pair) -> Pair | None:
        if s[0] == 3:
            return (s[0], 10 // (s[1] - 6))  # a planted bug: s[1] reaches 6
        return None

    @invariant(cites="none")
    def Fine(self, s: Pair) -> bool:
        return True


def test_the_checker_names_the_action_its_arguments_and_the_state() -> None:
    with pytest.raises(ModelActionError) as raised:
        check(Boom())
    assert (raised.value.action, raised.value.arguments, raised.value.state) == (
        "divide",
        (),
        (3, 6),
    )
    assert isinstance(raised.value.__cause__, ZeroDivisionError)
    copy = pickle.loads(pickle.dumps(raised.value))  # it crosses checker processes
    assert (copy.action, copy.state) == ("divide", (3, 6))


def test_tent_check_reports_the_path_and_only_the_models_frames() -> None:
    outcome = run_target(model_target("boom", Tier.CI, Boom), RunOptions())
    assert outcome.verdict == "error"
    assert outcome.message == (
        "action divide() raised ZeroDivisionError: integer division or modulo by zero"
    )
    lines = outcome.report.splitlines()
    assert lines[0] == "in the state reached by:"
    assert "3 action step(2)" in lines and "    [1]: 4 -> 6" in lines
    assert "tent_models" not in outcome.report  # no checker frame
    assert "in divide" in outcome.report and "10 // (s[1] - 6)" in outcome.report
