"""The explicit-state checker on toy models with hand-counted state spaces."""

from __future__ import annotations

import sys
from collections.abc import Hashable, Iterator, Sequence
from pathlib import Path

import attrs
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tent_models.checker import (
    CheckResult,
    InvalidArgument,
    ModelContractError,
    ReplayError,
    TraceStep,
    ViolationKind,
    check,
    collision_probability,
    fingerprint,
    format_result,
    format_trace,
    minimise,
    replay,
    simulate,
)
from tent_models.checker._trace import ActionInstance
from tent_models.model_api import Step
from toy_models import Counter, CreditToy, Mutex


def kinds(result: CheckResult) -> list[tuple[str, str]]:
    return [(v.kind.value, v.name) for v in result.violations]


def test_counter_state_count_transitions_and_depth_are_exact() -> None:
    result = check(Counter(5))
    assert (result.ok, result.exhaustive) == (True, True)
    assert (result.distinct_states, result.transitions, result.depth) == (6, 6, 5)
    coverage = {c.action: (c.enabled, c.fired, c.new_states) for c in result.coverage}
    assert coverage == {"inc": (5, 5, 5), "reset": (1, 1, 0)}


def test_states_outside_the_constraint_are_stored_but_not_expanded() -> None:
    result = check(Counter(10, constraint=4, recovered_at=None))
    assert result.ok
    assert (result.distinct_states, result.transitions, result.depth) == (6, 5, 5)


def test_invariant_violation_has_the_shortest_trace() -> None:
    result = check(Counter(10, bad=4))
    assert not result.ok
    assert kinds(result) == [("invariant", "NotBad")]
    violation = result.violations[0]
    assert violation.actions == (("inc", ()),) * 4
    assert violation.cites == "the value never reaches 4"
    assert [step.index for step in violation.steps] == [0, 1, 2, 3, 4]


def test_mutex_bug_is_found_in_four_steps_with_two_enters() -> None:
    result = check(Mutex(3, buggy=True))
    (violation,) = result.violations
    assert violation.name == "MutualExclusion"
    assert [action for action, _ in violation.actions] == ["request", "request", "enter", "enter"]
    states = replay(Mutex(3, buggy=True), violation.actions)
    assert states[-1].count(2) == 2


def test_trace_is_printed_diff_only_with_the_violated_invariant() -> None:
    result = check(Counter(10, bad=2))
    text = format_trace(
        result.violations[0].steps, violated="NotBad", cites=result.violations[0].cites
    )
    assert text == (
        "0 initial state\n"
        "    value: 0\n"
        "1 action inc()\n"
        "    value: 0 -> 1\n"
        "2 action inc()\n"
        "    value: 1 -> 2\n"
        "violated: NotBad\n"
        "    cites: the value never reaches 2"
    )


def test_format_trace_shows_only_changed_fields_of_hand_built_steps() -> None:
    steps = [
        TraceStep(index=0, action=None, fields={"a": 1, "b": "x"}),
        TraceStep(index=1, action="move", args=(3, "y"), changed={"b": ("x", "y")}),
    ]
    assert format_trace(steps) == (
        "0 initial state\n    a: 1\n    b: 'x'\n1 action move(3, 'y')\n    b: 'x' -> 'y'"
    )


def test_deadlock_is_reported_when_not_quiescent_by_bound() -> None:
    model = Counter(3, recovered_at=None, quiescent_at_limit=False)
    result = check(model, check_recoverability=False)
    assert kinds(result) == [("deadlock", "deadlock")]
    assert result.violations[0].actions == (("inc", ()),) * 3


def test_quiescence_by_bound_is_not_a_deadlock() -> None:
    model = Counter(3, recovered_at=None, quiescent_at_limit=True)
    assert check(model, check_recoverability=False).ok


def test_deadlock_check_can_be_switched_off() -> None:
    model = Counter(3, recovered_at=None, quiescent_at_limit=False)
    assert check(model, check_deadlock=False, check_recoverability=False).ok


def test_cumulative_credit_protocol_passes_every_check() -> None:
    result = check(CreditToy())
    assert result.ok, format_result(result)
    assert (result.distinct_states, result.depth) == (4638, 25)
    assert all(witness.satisfied for witness in result.witnesses)


def test_leaking_credit_protocol_violates_recoverability() -> None:
    result = check(CreditToy(variant="delta", dups=0))
    assert kinds(result) == [("recoverability", "recoverability"), ("coverage", "duplicate")]
    violation = result.violations[0]
    assert violation.actions == (("grant", ()), ("lose", (1, 1)))
    assert "stuck" in violation.detail


def test_additive_grants_violate_no_over_use_under_duplication() -> None:
    result = check(CreditToy(variant="additive"))
    assert kinds(result) == [("invariant", "NoOverUse")]
    assert len(result.violations[0].actions) == 6
    assert not result.exhaustive  # stopped after the level of the violation


def test_vacuous_witness_fails_the_check() -> None:
    result = check(Mutex(3, vacuous_witness=True))
    assert kinds(result) == [("witness", "AllCritical")]
    satisfied = {w.name: w for w in result.witnesses}
    assert satisfied["TwoWaiting"].satisfied
    assert len(satisfied["TwoWaiting"].steps) == 3  # initial state + two requests
    assert not satisfied["AllCritical"].satisfied


def test_never_firing_action_fails_coverage_unless_declared() -> None:
    assert kinds(check(Counter(5, never=True))) == [("coverage", "never")]
    declared = check(Counter(5, never=True, declare_never=True))
    assert declared.ok
    assert [c.declared_unreachable for c in declared.coverage] == [False, False, True]


def test_declared_unreachable_action_that_fires_fails_coverage() -> None:
    model = CreditToy(variant="delta", dups=0)
    model.unreachable_actions = lambda: frozenset({"refresh", "grant"})  # type: ignore[method-assign]
    result = check(model, check_recoverability=False)
    assert ("coverage", "grant") in kinds(result)


@pytest.mark.parametrize(("processes", "with_symmetry", "without"), [(3, 7, 20), (4, 9, 48)])
def test_symmetry_reduction_counts_orbits(processes: int, with_symmetry: int, without: int) -> None:
    assert check(Mutex(processes), symmetry=True).distinct_states == with_symmetry
    assert check(Mutex(processes), symmetry=False).distinct_states == without


def test_symmetric_counterexample_replays_as_a_real_execution() -> None:
    model = Mutex(4, buggy=True)
    violation = check(model, symmetry=True).violations[0]
    states = replay(model, violation.actions)
    assert not model.invariants()[0].holds(states[-1])
    assert len(violation.actions) == 4


def test_max_states_cut_is_not_exhaustive_and_skips_graph_judgements() -> None:
    result = check(CreditToy(), max_states=100)
    assert result.distinct_states == 100
    assert (result.ok, result.exhaustive) == (True, False)


def test_invalid_arguments_are_rejected_before_running() -> None:
    with pytest.raises(InvalidArgument):
        check(Counter(3), workers=0)
    with pytest.raises(InvalidArgument):
        check(Counter(3), max_states=0)
    with pytest.raises(InvalidArgument):
        simulate(Counter(3), seed=1, walks=0, depth=3)
    with pytest.raises(InvalidArgument):
        simulate(Counter(3), seed=1, walks=1, depth=-1)


def test_simulation_is_reproducible_by_seed() -> None:
    model = CreditToy(variant="additive")
    first = simulate(model, seed=11, walks=200, depth=30)
    second = simulate(model, seed=11, walks=200, depth=30)
    assert attrs.evolve(first, seconds=0.0, states_per_second=0.0) == attrs.evolve(
        second, seconds=0.0, states_per_second=0.0
    )


def reaches_violation(model: CreditToy, actions: Sequence[ActionInstance]) -> bool:
    holds = model.invariants()[0].holds
    try:
        states = replay(model, actions)
    except ReplayError:
        return False
    return any(not holds(state) for state in states)


def test_simulation_finds_the_bug_with_a_one_minimal_trace() -> None:
    model = CreditToy(variant="additive")
    result = simulate(model, seed=3, walks=300, depth=40)
    (violation,) = result.violations
    assert violation.name == "NoOverUse"
    assert reaches_violation(model, violation.actions)
    for drop in range(len(violation.actions)):
        shorter = violation.actions[:drop] + violation.actions[drop + 1 :]
        assert not reaches_violation(model, shorter)


def test_simulation_of_a_correct_model_is_ok_but_not_exhaustive() -> None:
    result = simulate(CreditToy(), seed=5, walks=20, depth=25)
    assert (result.ok, result.exhaustive, result.mode) == (True, False, "simulation")
    assert result.transitions > 0


def test_minimise_removes_irrelevant_steps() -> None:
    model = Mutex(3, buggy=True)
    trace: list[tuple[str, tuple[Hashable, ...]]] = [
        ("request", (2,)),
        ("enter", (2,)),
        ("leave", (2,)),
        ("request", (0,)),
        ("request", (1,)),
        ("enter", (0,)),
        ("enter", (1,)),
    ]
    initial = model.initial_states()[0]
    shortest = minimise(model, initial, trace, lambda s: s.count(2) > 1)
    assert shortest == (("request", (0,)), ("request", (1,)), ("enter", (0,)), ("enter", (1,)))


def test_minimise_rejects_a_trace_that_never_violates() -> None:
    model = Counter(5)
    with pytest.raises(InvalidArgument):
        minimise(model, 0, [("inc", ())], lambda v: v == 4)


def test_replay_reports_the_first_disabled_step() -> None:
    model = Counter(2)
    assert replay(model, [("inc", ()), ("inc", ())]) == [0, 1, 2]
    with pytest.raises(ReplayError) as caught:
        replay(model, [("inc", ()), ("inc", ()), ("inc", ())])
    assert caught.value.index == 2
    assert "limit" in caught.value.explanation


def test_fingerprints_are_stable_and_ignore_object_sharing() -> None:
    shared = 10**20
    assert fingerprint((shared, shared)) == fingerprint((10**20, int("1" + "0" * 20)))
    assert fingerprint((1, (2, 3))) == 0xDAAE076AABC4B1F5  # pinned: stable across runs (xxh3_64)
    assert fingerprint((1, 2)) != fingerprint((2, 1))


def test_collision_probability_is_the_birthday_bound() -> None:
    assert collision_probability(0) == 0.0
    assert collision_probability(2**32) == pytest.approx(0.5)
    result = check(Counter(5))
    assert result.collision_probability == pytest.approx(6 * 5 / 2**65)


class _Broken(Counter):
    def successors(self, state: int) -> Iterator[Step]:
        yield Step("undeclared", (), state + 1 if state < 3 else 0)


def test_undeclared_action_is_a_model_contract_error() -> None:
    with pytest.raises(ModelContractError):
        check(_Broken(3))


def test_model_without_initial_state_is_a_contract_error() -> None:
    model = Counter(3)
    model.initial_states = lambda: []  # type: ignore[method-assign]
    with pytest.raises(ModelContractError):
        check(model)


def test_result_values_are_frozen() -> None:
    result = check(Counter(2))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        result.ok = False  # type: ignore[misc]
    assert "model counter/2: OK" in format_result(result)


def test_failed_result_report_lists_each_counterexample() -> None:
    text = format_result(check(Mutex(3, buggy=True)))
    assert "invariant violated: MutualExclusion" in text
    assert "violated: MutualExclusion" in text
    assert ViolationKind.INVARIANT.value == "invariant"
