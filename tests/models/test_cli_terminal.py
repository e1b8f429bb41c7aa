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


def _names(out: str) -> list[str]:
    """The target cell of every row: the text before the first column border."""
    return [
        line.strip("│ ").split("│")[0].strip()
        for line in out.splitlines()
        if line.startswith("│") and "target" not in line
    ]


@pytest.mark.parametrize("width", [140, 100, 80, 70])
def test_a_name_is_never_split_and_a_number_never_cut(width: int) -> None:
    out = render(width)
    assert "…" not in out  # nothing elided
    for outcome in OUTCOMES:  # each name whole on one line, so it pastes into --only
        assert any(outcome.target in line for line in out.splitlines()), outcome.target
    if width >= 100:
        assert _names(out) == [o.target for o in OUTCOMES]  # one row a name: no folding
    for whole in ("2,123,456", "123.45"):
        column_shown = ("states" if whole[0] == "2" else "seconds") in out
        assert (whole in out) == column_shown


def test_other_columns_go_first_when_the_console_is_narrow() -> None:
    widest, wide, medium, narrow = render(140), render(120), render(100), render(80)
    assert "states/s" in widest and "53,412" in widest and "36,098,752" in widest
    assert "states/s" not in wide and "transitions" not in wide and "kind" in wide
    assert "kind" not in medium and "depth" not in medium and "2,123,456" in medium
    assert "states" not in narrow.replace("tent check", "") and "result" in narrow
    for out in (widest, wide, medium, narrow):
        assert "result" in out and "proved" in out


@pytest.mark.parametrize("width", [80, 100])
def test_every_shipped_target_name_is_whole_in_the_table(width: int) -> None:
    """The real catalogue at 80 and 100 columns, its longest verdict: each name on one line."""
    outcomes = [
        Outcome(
            target=t.name,
            kind=t.kind,
            tier=t.tier,
            passed=False,
            verdict="manifest mismatch",
            seconds=3600.0,
            states=12_345_678,
            transitions=123_456_789,
            depth=100,
            states_per_second=50_000.0,
        )
        for t in registry.catalogue()
    ]
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(tables.outcomes_table(outcomes, title="tent check", width=width))
    out: str = console.file.getvalue()  # type: ignore[attr-defined]
    lines = out.splitlines()
    assert all(len(line) <= width for line in lines)
    assert "…" not in out
    for outcome in outcomes:
        (row,) = [line for line in lines if f" {outcome.target} " in line]
        assert "manifest mismatch" in row


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
    # A passing model says what it covered, so a vacuous pass would show.
    assert lines[first].endswith(": 2/2 actions fired"), lines[first]


def test_json_reports_coverage_and_witnesses_of_a_model_check(
    toy_targets: tuple[Target, ...], tmp_path: Path
) -> None:
    import json

    result = CliRunner().invoke(main, ["check", "--only", "toy/one/ci", "--json", "-"])
    (target,) = json.loads(result.stdout)["targets"]
    assert [c["action"] for c in target["coverage"]] == ["inc", "reset"]
    assert all(c["fired"] > 0 for c in target["coverage"])
    assert isinstance(target["witnesses"], list)


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
