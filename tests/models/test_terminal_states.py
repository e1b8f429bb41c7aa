"""Protocols that finish: terminal states are not deadlocks (issue 28 item 2).

A model declares its finished states with ``is_terminal``; every checker engine (the serial
search, the sharded workers, random simulation) then passes a state without successors that is
terminal, and still judges invariants in it. ``tent check --no-deadlock`` judges no deadlocks at
all. A deadlock verdict names what failed once: no repeated header lines.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from tent_models import Model, action, invariant
from tent_models.checker import ViolationKind, check, format_counterexample, simulate
from tent_models.cli import main

Count = tuple[int, int]  # (handed out, acknowledged)


class Handout(Model[Count]):
    """Hand out ``n`` tokens, acknowledge each; then nothing is enabled: the protocol is done."""

    def __init__(self, n: int = 3, *, lie: bool = False) -> None:
        self.n, self.lie = n, lie

    def initial_states(self) -> list[Count]:
        return [(0, 0)]

    @action
    def hand_out(self, s: Count) -> Count | None:
        return (s[0] + 1, s[1]) if s[0] < self.n else None

    @action
    def acknowledge(self, s: Count) -> Count | None:
        if s[1] < s[0]:
            return (s[0], s[1] + 1 + (1 if self.lie and s[0] == self.n else 0))
        return None

    @invariant(cites="never more acknowledged than handed out")
    def AckedWithinHanded(self, s: Count) -> bool:
        return s[1] <= s[0]


class HandoutDone(Handout):
    def is_terminal(self, s: Count) -> bool:
        return s == (self.n, self.n)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_finished_state_is_a_deadlock_until_declared_terminal(workers: int) -> None:
    result = check(Handout(), workers=workers)
    (violation,) = result.violations
    assert violation.kind is ViolationKind.DEADLOCK
    assert violation.steps[-1].fields == {"[0]": 3, "[1]": 3}
    done = check(HandoutDone(), workers=workers)
    assert done.ok and done.exhaustive and done.distinct_states == result.distinct_states


def test_invariants_are_still_judged_in_terminal_states() -> None:
    class Lying(HandoutDone):
        def is_terminal(self, s: Count) -> bool:
            return s[0] == self.n and s[1] >= self.n

    (violation,) = check(Lying(lie=True)).violations
    assert (violation.kind, violation.name) == (ViolationKind.INVARIANT, "AckedWithinHanded")


def test_simulation_honours_terminal_states() -> None:
    assert simulate(HandoutDone(), seed=1, walks=20, depth=50).ok
    (violation,) = simulate(Handout(), seed=1, walks=20, depth=50).violations
    assert violation.kind is ViolationKind.DEADLOCK


def test_a_deadlock_counterexample_names_it_once_and_says_how_to_declare_an_end() -> None:
    (violation,) = check(Handout(1)).violations
    text = format_counterexample(violation)
    assert text.splitlines() == [
        "deadlock after 2 step(s): no action is enabled in the last state, and it is not "
        "terminal (the model's is_terminal), quiescent by bound or recovered",
        "0 initial state",
        "    [0]: 0",
        "    [1]: 0",
        "1 action hand_out()",
        "    [0]: 0 -> 1",
        "2 action acknowledge()",
        "    [1]: 0 -> 1",
    ]


MODULE = """
from tent_models import Model, action

class Handout(Model):
    def initial_states(self):
        return [0]

    @action
    def step(self, s):
        return s + 1 if s < 2 else None

class HandoutDone(Handout):
    def is_terminal(self, s):
        return s == 2
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "handout.py").write_text(textwrap.dedent(MODULE), encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "mine"\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.modules.pop("handout", None)


def test_cli_reports_a_deadlock_with_one_header_line(project: Path) -> None:
    result = CliRunner().invoke(main, ["check", "--no-progress", "--model", "handout:Handout"])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert [line for line in lines if "deadlock" in line and "step" not in line] == []
    (heading,) = [line for line in lines if line.startswith("deadlock")]
    assert heading.startswith("deadlock after 2 step(s): no action is enabled")


def test_cli_passes_terminal_states_and_no_deadlock(project: Path) -> None:
    runner = CliRunner()
    done = runner.invoke(main, ["check", "--no-progress", "--model", "handout:HandoutDone"])
    assert done.exit_code == 0, done.output
    off = ["check", "--no-progress", "--no-deadlock", "--model", "handout:Handout"]
    unjudged = runner.invoke(main, off)
    assert unjudged.exit_code == 0, unjudged.output
