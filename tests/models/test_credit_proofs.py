"""z3 proofs of the ledger and allocator invariants: they hold, and they can fail.

A proof that cannot fail proves nothing, so besides the proofs themselves this file checks that
weaker (non-inductive) candidates produce counterexamples to induction, that deliberately broken
transitions break the proof at the right action, and that every counterexample is genuine when
re-evaluated in plain Python on the printed values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
from tent_models.proofs import (
    ALLOCATOR_INVARIANT,
    ALLOCATOR_MUTATIONS,
    LEDGER_INVARIANT,
    LEDGER_MUTATIONS,
    NON_INDUCTIVE_CANDIDATES,
    bmc_ledger,
    check_candidate,
    format_cti,
    predicate_names,
    prove_allocator_inductive,
    prove_ledger_inductive,
)

RESOURCES = ("DATA_BYTES", "REQUEST_SLOTS")
LEDGER_ACTIONS = {
    "init",
    "apply_update",
    "reserve",
    "rollback",
    "return_unused",
    "activate",
    "receiver_grant",
    "receiver_reconnect",
}
ALLOCATOR_ACTIONS = {
    "init",
    "grant",
    "data_landed",
    "on_usage",
    "release",
    "fence",
    "fence_complete",
    "open_epoch",
    "reconnect",
}

State = Mapping[str, Any]


def outstanding(state: State, k: int, r: str) -> int:
    def counter(name: str) -> int:
        value = state[f"k{k}.{name}[{r}]"]
        assert isinstance(value, int)
        return value

    return (
        counter("granted")
        - counter("released")
        - counter("reclaimed_return")
        - counter("reclaimed_fence")
    )


# Plain-Python readings of the predicates, to re-check counterexamples independently of z3.
PYTHON_PREDICATES: dict[str, Callable[[State], bool]] = {
    "consumed_within_grant": lambda s: all(
        s[f"consumed[{r}]"] <= s[f"grant_total[{r}]"] for r in RESOURCES
    ),
    "available_nonnegative": lambda s: all(
        s[f"consumed[{r}]"] >= 0
        and s[f"returned[{r}]"] >= 0
        and s[f"consumed[{r}]"] + s[f"returned[{r}]"] <= s[f"grant_total[{r}]"]
        for r in RESOURCES
    ),
    "grant_backed_by_receiver": lambda s: all(
        s[f"grant_total[{r}]"] <= s[f"recv_granted[{r}]"] for r in RESOURCES
    ),
    "within_capacity": lambda s: all(
        sum(max(outstanding(s, k, r), 0) for k in (0, 1)) <= s[f"capacity[{r}]"] for r in RESOURCES
    ),
    "user_within_reserve": lambda s: all(
        sum(max(outstanding(s, k, r), 0) for k in (0, 1) if s[f"k{k}.class"] == "USER")
        <= s[f"capacity[{r}]"] - s[f"reserve[{r}]"]
        for r in RESOURCES
    ),
    "outstanding_nonnegative": lambda s: all(
        outstanding(s, k, r) >= 0 for k in (0, 1) for r in RESOURCES
    ),
}


def assert_genuine_cti(cti: Mapping[str, Any]) -> None:
    """The pre-state satisfies the violated predicate, the post-state does not."""
    pre, post = cti["steps"][0]["state"], cti["steps"][-1]["state"]
    holds = PYTHON_PREDICATES[cti["violated"]]
    assert holds(pre)
    assert not holds(post)


def test_ledger_invariant_is_inductive() -> None:
    result = prove_ledger_inductive()
    assert result.holds
    assert set(result.per_action) == LEDGER_ACTIONS
    assert all(result.per_action.values())
    assert result.cti is None
    assert result.invariants == LEDGER_INVARIANT
    assert format_cti(result) == "ledger: holds"


def test_allocator_invariant_is_inductive() -> None:
    result = prove_allocator_inductive()
    assert result.holds
    assert set(result.per_action) == ALLOCATOR_ACTIONS
    assert all(result.per_action.values())
    assert result.cti is None
    assert result.invariants == ALLOCATOR_INVARIANT


@pytest.mark.parametrize(
    ("candidate", "violated"),
    [
        ("consumed_without_returned", "consumed_within_grant"),
        ("capacity_only", "within_capacity"),
        ("capacity_without_per_key_link", "outstanding_nonnegative"),
    ],
)
def test_non_inductive_candidate_yields_a_counterexample_to_induction(
    candidate: str, violated: str
) -> None:
    system, invariants = NON_INDUCTIVE_CANDIDATES[candidate]
    result = check_candidate(system, invariants, name=candidate)
    assert not result.holds
    assert result.per_action["init"]  # the candidate holds initially: only induction fails
    assert result.cti is not None
    assert result.cti["kind"] == "cti"
    assert result.cti["violated"] == violated
    assert result.per_action[result.cti["steps"][1]["action"]] is False
    assert_genuine_cti(result.cti)
    text = format_cti(result)
    lines = text.splitlines()
    assert lines[0] == f"{candidate}: counterexample to induction"
    assert lines[1].startswith("0 ")
    assert lines[2].startswith(f"1 action {result.cti['steps'][1]['action']}: ")
    assert lines[-1] == f"violated: {violated}"


def test_cti_lists_only_the_fields_that_changed() -> None:
    result = check_candidate("ledger", ("consumed_within_grant",))
    assert result.cti is not None
    pre, post = (step["state"] for step in result.cti["steps"])
    changed = {f for f in pre if pre[f] != post[f]}
    assert changed
    assert changed <= {f"consumed[{r}]" for r in RESOURCES}  # reserve only moves consumed
    action_line = format_cti(result).splitlines()[2]
    for field in pre:
        assert (f"{field}: " in action_line) == (field in changed)


@pytest.mark.parametrize(
    ("mutation", "action", "violated"),
    [
        ("accept_decreasing_grant", "apply_update", "available_nonnegative"),
        ("ignore_epoch", "apply_update", "grant_backed_by_receiver"),
        ("return_beyond_available", "return_unused", "available_nonnegative"),
    ],
)
def test_broken_ledger_transition_breaks_the_proof(
    mutation: str, action: str, violated: str
) -> None:
    assert mutation in LEDGER_MUTATIONS
    result = prove_ledger_inductive(mutation=mutation)
    assert not result.holds
    assert {a for a, ok in result.per_action.items() if not ok} == {action}
    assert result.cti is not None
    assert result.cti["violated"] == violated
    assert_genuine_cti(result.cti)
    assert format_cti(result).endswith(f"violated: {violated}")


@pytest.mark.parametrize(
    ("mutation", "action", "violated"),
    [
        ("grant_ignores_reserve", "grant", "user_within_reserve"),
        ("fence_reclaims_landed", "fence_complete", "outstanding_nonnegative"),
        ("return_not_idempotent", "on_usage", "outstanding_nonnegative"),
    ],
)
def test_broken_allocator_transition_breaks_the_proof(
    mutation: str, action: str, violated: str
) -> None:
    assert mutation in ALLOCATOR_MUTATIONS
    result = prove_allocator_inductive(mutation=mutation)
    assert not result.holds
    assert {a for a, ok in result.per_action.items() if not ok} == {action}
    assert result.cti is not None
    assert result.cti["violated"] == violated
    assert_genuine_cti(result.cti)


def test_bounded_model_check_finds_no_violation_from_init() -> None:
    result = bmc_ledger(5)
    assert result.holds
    assert result.counterexample is None
    assert (result.k, result.bits) == (5, 4)
    assert format_cti(result) == "ledger bmc k=5 bits=4: holds"


@pytest.mark.parametrize("mutation", sorted(LEDGER_MUTATIONS))
def test_bounded_model_check_finds_a_trace_from_init_for_each_broken_ledger(
    mutation: str,
) -> None:
    result = bmc_ledger(5, mutation=mutation)
    assert not result.holds
    trace = result.counterexample
    assert trace is not None
    assert trace["kind"] == "trace"
    steps = trace["steps"]
    first = steps[0]["state"]
    assert first["epoch"] == first["recv_epoch"] == 1
    assert all(first[f] == 0 for f in first if "[" in f)
    assert all(step["action"] in LEDGER_ACTIONS for step in steps[1:])
    # Every state before the last is fine; the last one violates the named invariant.
    assert not PYTHON_PREDICATES[trace["violated"]](steps[-1]["state"])
    for step in steps[:-1]:
        assert all(PYTHON_PREDICATES[name](step["state"]) for name in LEDGER_INVARIANT[:2])
    text = format_cti(result).splitlines()
    assert text[0].endswith("counterexample trace")
    assert [line.split()[0] for line in text[1:] if not line.startswith(" ")][:-1] == [
        str(i) for i in range(len(steps))
    ]
    assert text[-1] == f"violated: {trace['violated']}"


def test_predicate_catalogues_name_every_invariant() -> None:
    assert set(LEDGER_INVARIANT) < set(predicate_names("ledger"))
    assert set(ALLOCATOR_INVARIANT) == set(predicate_names("allocator"))


@pytest.mark.parametrize(
    "call",
    [
        lambda: check_candidate("scheduler", ("config",)),
        lambda: check_candidate("ledger", ()),
        lambda: check_candidate("ledger", ("within_capacity",)),
        lambda: check_candidate("allocator", ("config",), mutation="accept_decreasing_grant"),
        lambda: prove_ledger_inductive(mutation="grant_ignores_reserve"),
        lambda: bmc_ledger(-1),
        lambda: bmc_ledger(2, bits=1),
        lambda: bmc_ledger(2, mutation="nope"),
    ],
)
def test_invalid_requests_are_value_errors(call: Callable[[], object]) -> None:
    with pytest.raises(ValueError):
        call()
