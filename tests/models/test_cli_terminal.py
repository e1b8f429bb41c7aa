"""``tent`` in a narrow terminal and in a CI log: the table's layout, one line per finished
target without a terminal, report paths checked before the run, ``-h``."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console
from tent_models import registry, tables
from tent_models.cli import main
from tent_models.manifest import Counts, Manifest, save
from tent_models.registry import Outcome, Target, TargetKind, Tier, model_target
from toy_models import Counter

LONG_NAME = "admission/gated/credit-window/very-long-configuration-name/ci"


def _outcome(name: str, states: int | None) -> Outcome:
    return Outcome(
        target=name,
        kind=TargetKind.MODEL if states else TargetKind.PROOF,
        tier=Tier.CI,
        passed=True,
        verdict="ok" if states else "proved",
        seconds=123.45,
        states=states,
        transitions=None if states is None else states * 17,
        depth=None if states is None else 41,
        states_per_second=None if states is None else 53_412.0,
    )


OUTCOMES = [
    _outcome(LONG_NAME, 2_123_456),
    _outcome("negotiation/ci", 140),
    _outcome("z3/credit/ledger-bmc-vs-explicit", None),
]


def render(width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(tables.outcomes_table(OUTCOMES, title="tent check", width=width))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert all(len(line) <= width for line in out.splitlines())
    return str(out)


def _target_text(out: str) -> str:
    """The target column's text, folded lines joined back together."""
    return "".join(line.split("│")[1].strip() for line in out.splitlines() if "│" in line)


@pytest.mark.parametrize("width", [100, 80])
def test_numbers_stay_whole_and_the_name_folds(width: int) -> None:
    out = render(width)
    for whole in ("2,123,456", "41", "123.45", "ok", "proved"):
        assert whole in out
    assert "…" not in out  # nothing elided
    assert LONG_NAME in _target_text(out)  # folded, every character kept


def test_optional_columns_go_first_when_the_console_is_narrow() -> None:
    wide, medium, narrow = render(100), render(90), render(80)
    assert "states/s" in wide and "53,412" in wide and "transitions" in wide
    assert "36,098,752" in wide  # the transitions count
    assert "states/s" not in medium and "transitions" in medium
    assert "transitions" not in narrow and "states/s" not in narrow
    for out in (wide, medium, narrow):
        assert "states" in out and "depth" in out and "result" in out


@pytest.fixture
def toy_targets(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Target, ...]]:
    targets = (
        model_target("toy/one/ci", Tier.CI, lambda: Counter(3)),
        model_target("toy/two/ci", Tier.CI, lambda: Counter(3, bad=2)),
    )
    monkeypatch.setattr(registry, "catalogue", lambda: targets)
    yield targets


def test_without_a_terminal_each_target_prints_a_line_when_it_finishes(
    toy_targets: tuple[Target, ...], tmp_path: Path
) -> None:
    manifest = tmp_path / "manifest.json"
    save(
        Manifest(models={"toy/one/ci": Counts(distinct_states=4, transitions=4, depth=3)}), manifest
    )
    # CliRunner's output is not a terminal
    result = CliRunner().invoke(main, ["check", "--manifest", str(manifest)])
    lines = result.output.splitlines()
    first = next(i for i, line in enumerate(lines) if "[1/2] ✓ toy/one/ci: " in line)
    second = next(i for i, line in enumerate(lines) if "[2/2] ✗ toy/two/ci: violated" in line)
    table = next(i for i, line in enumerate(lines) if "tent check" in line)
    assert first < second < table


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda tmp: tmp / "missing" / "r.xml", "does not exist"),
        (lambda tmp: tmp, "is a directory"),
    ],
)
def test_report_paths_are_checked_before_anything_runs(
    toy_targets: tuple[Target, ...], tmp_path: Path, make: object, problem: str
) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    for option in ("--junit", "--json"):
        result = CliRunner().invoke(main, ["check", option, str(path)])
        assert result.exit_code == 2
        assert problem in result.output and option in result.output
        assert "toy/one/ci" not in result.output  # nothing ran


def test_dash_h_is_help_for_every_command() -> None:
    for args in (["-h"], ["check", "-h"], ["trace", "validate", "-h"], ["spec", "diagram", "-h"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, (args, result.output)
        assert "Usage:" in result.output
