"""Counterexamples read like a user model's (issue 28 item 7): the initial state folded to the
fields the trace changes, the steps diff-only, and a ``compared:`` line for the shipped models
too (the spec's invariants name their values through ``SpecInvariant.compared``)."""

from __future__ import annotations

from tent_models.checker import TraceStep, check, format_counterexample, format_trace
from tent_models.checker._result import ABSENT
from tent_models.configs.credit import KNOWN_BAD_CONFIGS


def _steps(n_fixed: int) -> list[TraceStep]:
    fields = {"moving": 0, **{f"fixed_{i}": i for i in range(n_fixed)}}
    moved = {**fields, "moving": 1}
    return [
        TraceStep(index=0, action=None, fields=fields),
        TraceStep(index=1, action="step", args=(), changed={"moving": (0, 1)}, fields=moved),
    ]


def test_a_small_initial_state_is_listed_whole() -> None:
    text = format_trace(_steps(4))
    assert "unchanged" not in text
    assert "    fixed_3: 3" in text.splitlines()


def test_the_fields_no_step_changes_are_folded_into_unchanged_lines() -> None:
    lines = format_trace(_steps(30)).splitlines()
    assert lines[:2] == ["0 initial state", "    moving: 0"]
    folded = [line for line in lines if line.startswith(("    unchanged: ", "               "))]
    assert folded[0].startswith("    unchanged: fixed_0=0, fixed_1=1,")
    assert all(len(line) <= 100 for line in folded)
    joined = " ".join(line.strip() for line in folded)
    assert all(f"fixed_{i}={i}" in joined for i in range(30))  # nothing lost, only folded
    assert lines[-2:] == ["1 action step()", "    moving: 0 -> 1"]


def test_an_absent_field_is_shown_as_absent_when_folded() -> None:
    steps = _steps(6)
    steps[0] = TraceStep(index=0, action=None, fields={**steps[0].fields, "gone": ABSENT})
    assert f"gone={ABSENT}" in format_trace(steps)


def test_a_shipped_model_counterexample_is_folded_and_names_the_compared_values() -> None:
    result = check(KNOWN_BAD_CONFIGS["delta_grants"]())
    (violation,) = [v for v in result.violations if v.name == "sender_grant_within_receiver_grant"]
    lines = format_counterexample(violation).splitlines()
    first_step = next(i for i, line in enumerate(lines) if line.startswith("1 action"))
    initial = lines[lines.index("0 initial state") + 1 : first_step]
    assert len(initial) < 20  # was 31 lines, one per field
    assert any(line.startswith("    unchanged: ") for line in initial)
    assert lines[-1] == "    compared: sender=0, accepted=(2, 2), receiver_granted=(1, 1)"
