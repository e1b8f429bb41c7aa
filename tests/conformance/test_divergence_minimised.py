"""A conformance divergence is minimised and printed diff-only (issue 10, item 18).

A random lockstep walk that diverges records every operation it performed; the report replays
them with steps removed (delta debugging, as the checker minimises) and shows only the fields
that change or differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from tent_models.conformance import ActionInstance, Divergence, minimise_divergence
from tent_models.conformance.credit import (
    CONFORMANCE_BOUNDS,
    run_credit,
    run_credit_conformance,
)
from tent_spec.variants import KNOWN_BAD

VARIANT = KNOWN_BAD["delta_grants"][0](CONFORMANCE_BOUNDS, name="delta_grants")


def replay(actions: Sequence[ActionInstance]) -> Divergence | None:
    return run_credit(actions, spec=VARIANT)


@cache
def walked_and_minimised() -> tuple[Divergence, Divergence]:
    for seed in range(20):
        found = run_credit_conformance(steps=300, seed=seed, spec=VARIANT)
        if found is not None and len(found.actions) > 8:
            return found, minimise_divergence(replay, found)
    raise AssertionError("no long divergence from delta_grants in 20 walks")


def test_the_minimised_divergence_is_shorter_and_reproduces() -> None:
    found, shortest = walked_and_minimised()
    assert len(shortest.actions) < len(found.actions)
    again = replay(shortest.actions)
    assert again is not None
    assert (again.kind, again.action, again.actions) == (
        found.kind,
        found.action,
        shortest.actions,
    )


def test_the_minimised_divergence_is_one_minimal() -> None:
    found, shortest = walked_and_minimised()
    steps = shortest.actions
    for i in range(len(steps) - 1):  # the divergent step itself stays
        candidate = steps[:i] + steps[i + 1 :]
        other = replay(candidate)
        assert (
            other is None
            or (other.kind, other.action) != (found.kind, found.action)
            or len(other.actions) >= len(steps)
        ), f"step {i + 1} {steps[i]} could still be removed"


def test_the_report_is_diff_only() -> None:
    _found, shortest = walked_and_minimised()
    short, full = shortest.format(), shortest.format(full=True)
    assert len(short.splitlines()) < len(full.splitlines())
    assert "field(s) that never change are not shown" in short
    shown = {
        line.strip().split(":", 1)[0]
        for line in short.split(" action ", 1)[0].splitlines()[1:]
        if line.startswith("    ") and ":" in line
    }
    relevant = set(shortest.mismatch).union(*(s.changed for s in shortest.steps[1:]))
    assert shown - {"("} <= relevant


def test_an_unreproducible_divergence_is_returned_unchanged() -> None:
    found, _shortest = walked_and_minimised()
    assert minimise_divergence(lambda _actions: None, found) is found
