"""z3 proofs of the arbitration order (docs/semantics.md#arbitration) and their failure on broken
greedies."""

from __future__ import annotations

import pytest
from tent_models.checker import InvalidArgument
from tent_models.proofs.arbitration_z3 import (
    BROKEN_VARIANTS,
    PROPERTIES,
    prove_all,
    prove_property,
    prove_score_range,
)


def test_lemma_score_range_is_proved() -> None:
    """No deadline → 0, past due → DBL_MAX, deadline ahead → strictly between (over the reals)."""
    result = prove_score_range()
    assert result.holds, result.cti
    assert result.per_action == {"real": True}


@pytest.mark.parametrize("name", PROPERTIES)
def test_property_holds_for_every_slot_up_to_four_slices(name: str) -> None:
    result = prove_property(name)
    assert result.holds, result.cti
    expected = {f"n={n}/slot={k}" for n in range(2, 5) for k in range(n)}
    assert set(result.per_action) == expected
    assert all(result.per_action.values())


def test_prove_all_starts_with_the_lemma() -> None:
    results = prove_all(max_slices=2)
    assert [r.name for r in results] == [
        "arbitration/lemma_score_range",
        *(f"arbitration/{p}" for p in PROPERTIES),
    ]
    assert all(r.holds for r in results)


# Which properties each broken greedy must violate (and which it still keeps).
EXPECTED_FAILURES = {
    "ge_wins": {"ties_keep_arrival_order"},
    "ascending": set(PROPERTIES),
    "no_deadline_as_past_due": {"no_deadline_never_precedes_deadline", "past_due_first"},
}


@pytest.mark.parametrize("variant", sorted(BROKEN_VARIANTS))
def test_broken_greedy_fails_exactly_the_properties_it_breaks(variant: str) -> None:
    failed = set()
    for name in PROPERTIES:
        result = prove_property(name, max_slices=2, variant=variant)
        assert result.name == f"arbitration/{name}[{variant}]"
        if not result.holds:
            failed.add(name)
            assert result.cti is not None
            assert result.cti["kind"] == "counterexample"
            assert result.cti["obligation"].startswith("n=2/")
    assert failed == EXPECTED_FAILURES[variant]


def test_counterexample_names_dbl_max_for_a_past_due_score() -> None:
    result = prove_property("past_due_first", max_slices=2, variant="no_deadline_as_past_due")
    assert result.cti is not None
    assert "DBL_MAX" in result.cti["values"].values()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: prove_property("fastest_first"), "unknown arbitration property"),
        (lambda: prove_property("past_due_first", variant="nope"), "unknown broken variant"),
        (lambda: prove_property("past_due_first", max_slices=5), "max_slices"),
        (lambda: prove_score_range(max_slices=1), "max_slices"),
    ],
)
def test_invalid_arguments_are_rejected(call: object, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        call()  # type: ignore[operator]
