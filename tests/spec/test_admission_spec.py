"""The admission spec (tent_spec.admission): exhaustive search of admission/tiny, Deadline
Scheduling's worked example replayed as spec actions, the guards of each action and the known-bad
variants.

Until the generic checker lands, a small BFS in this file exhausts the tiny model.
"""

from __future__ import annotations

import ast
import dataclasses
import gc
import math
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tent_models.configs.admission import CONFIGS, KNOWN_BAD, ci_config, tiny_config
from tent_spec import admission as spec_module
from tent_spec.admission import (
    BLOCKED,
    DISPATCHING,
    ELIGIBLE,
    OWNER_TRANSITIONS,
    QUEUED,
    REJECTED,
    STAGING_INTERNAL,
    TERMINAL,
    USER,
    AdmissionConfig,
    AdmissionSpec,
    AdmissionState,
    OwnerSpec,
    SpecConfigError,
    Submit,
)
from tent_spec.mlu import deadline_mlu

MIB = 1 << 20
GIB = 1 << 30
MS = 1_000_000


class Exploration(NamedTuple):
    states: dict[tuple[Any, ...], AdmissionState]
    predecessors: dict[tuple[Any, ...], list[tuple[Any, ...]]]
    fired: set[str]
    violations: dict[str, AdmissionState]
    witnessed: set[str]


def explore(
    model: AdmissionSpec, *, stop_on: str | None = None, limit: int = 200_000
) -> Exploration:
    """Breadth-first search over packed states; checks every invariant in every state."""
    invariants = model.invariants()
    witnesses = model.witnesses()
    states: dict[tuple[Any, ...], AdmissionState] = {}
    predecessors: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    frontier: deque[AdmissionState] = deque()
    for init in model.initial_states():
        states[model.pack(init)] = init
        predecessors[model.pack(init)] = []
        frontier.append(init)
    fired: set[str] = set()
    violations: dict[str, AdmissionState] = {}
    witnessed: set[str] = set()
    gc.disable()  # millions of tuples: the cyclic collector only slows the search down
    try:
        while frontier:
            state = frontier.popleft()
            for inv in invariants:
                if inv.name not in violations and not inv.holds(state):
                    violations[inv.name] = state
            if stop_on is not None and stop_on in violations:
                break
            witnessed.update(w.name for w in witnesses if w.holds(state))
            source = model.pack(state)
            for step in model.successors(state):
                fired.add(step.action)
                key = model.pack(step.state)
                if key not in states:
                    states[key] = step.state
                    predecessors[key] = []
                    frontier.append(step.state)
                predecessors[key].append(source)
            assert len(states) <= limit, "the model is larger than this test expects"
    finally:
        gc.enable()
    return Exploration(states, predecessors, fired, violations, witnessed)


@pytest.fixture(scope="module")
def tiny() -> tuple[AdmissionSpec, Exploration]:
    model = CONFIGS["admission/tiny"]()
    return model, explore(model)


# --- exhaustive search of admission/tiny -------------------------------------------------------


def test_tiny_every_invariant_holds_in_every_reachable_state(
    tiny: tuple[AdmissionSpec, Exploration],
) -> None:
    _, result = tiny
    assert result.violations == {}
    assert len(result.states) > 1000  # not vacuous


def test_tiny_every_action_fires(tiny: tuple[AdmissionSpec, Exploration]) -> None:
    model, result = tiny
    assert model.unreachable_actions() == frozenset()
    assert result.fired == set(model.action_names())


def test_tiny_reaches_every_witness(tiny: tuple[AdmissionSpec, Exploration]) -> None:
    model, result = tiny
    assert result.witnessed == {w.name for w in model.witnesses()}


def test_tiny_recovered_state_reachable_from_every_state(
    tiny: tuple[AdmissionSpec, Exploration],
) -> None:
    """No owner is ever stuck: from every reachable state some recovered state is reachable."""
    model, result = tiny
    good = {k for k, s in result.states.items() if model.recovered(s)}
    frontier = list(good)
    while frontier:
        for pred in result.predecessors[frontier.pop()]:
            if pred not in good:
                good.add(pred)
                frontier.append(pred)
    assert good == set(result.states)


def test_pack_is_injective_and_plain_ints(tiny: tuple[AdmissionSpec, Exploration]) -> None:
    _, result = tiny
    assert len(set(result.states.values())) == len(result.states)

    def ints_only(value: object) -> bool:
        if isinstance(value, tuple):
            return all(ints_only(v) for v in value)
        return type(value) is int

    assert all(ints_only(key) for key in result.states)


def test_apply_reproduces_every_successor_and_explain_says_enabled(
    tiny: tuple[AdmissionSpec, Exploration],
) -> None:
    model, result = tiny
    for state in list(result.states.values())[::37]:
        for step in model.successors(state):
            assert model.apply(state, step.action, step.args) == step.state
            assert model.explain(state, step.action, step.args) == "enabled"


def test_quiescent_states_are_recovered(tiny: tuple[AdmissionSpec, Exploration]) -> None:
    model, result = tiny
    quiescent = [s for s in result.states.values() if model.quiescent_by_bound(s)]
    assert quiescent
    assert all(model.recovered(s) for s in quiescent)


# --- Deadline Scheduling's worked example: R1-R4 --------------------------------------------------


def _worked_example(threshold: float) -> AdmissionSpec:
    """Deadline Scheduling "Three Requests": 100 GB/s, deadline_aware, 1 GiB window."""
    return AdmissionSpec(
        AdmissionConfig(
            name="admission/worked_example",
            max_outstanding_owners=8,
            max_outstanding_bytes=2 * GIB,
            deadline_aware=True,
            mlu_local_threshold=threshold,
            submits=(
                Submit(1, (OwnerSpec(USER, 64 * MIB, 20 * MS, True, 0),)),  # R1
                Submit(2, (OwnerSpec(USER, 512 * MIB, 5 * MS, True, 0),)),  # R2
                Submit(3, (OwnerSpec(USER, 16 * MIB, 3 * MS, False, 0),)),  # R3 (TCP)
                Submit(4, (OwnerSpec(USER, 256 * MIB, 6 * MS, True, 0),)),  # R4
            ),
            dispatch_windows=((64, GIB),),
            bandwidths=(100_000_000_000,),
            initial_bandwidth_bps=100_000_000_000,
        )
    )


def _admit(model: AdmissionSpec, state: AdmissionState, index: int) -> AdmissionState:
    submit = model.config.submits[index]
    nxt = model.apply(state, "admit", (submit.batch, submit.owners))
    assert nxt is not None
    return nxt


def _pick(model: AdmissionSpec, state: AdmissionState) -> AdmissionState:
    nxt = model.apply(state, "pick", (64, GIB, ()))
    assert nxt is not None
    return nxt


def test_worked_example_r1_to_r4_at_threshold_1_2() -> None:
    model = _worked_example(1.2)
    (state,) = model.initial_states()
    for index in range(3):
        state = _admit(model, state, index)
    assert state.queue == (3, 2, 1)  # R3 (3 ms), R2 (5 ms), R1 (20 ms)
    r2_mlu = deadline_mlu(0, 512 * MIB, 5 * MS, 0, 100_000_000_000)
    r1_mlu = deadline_mlu(512 * MIB, 64 * MIB, 20 * MS, 0, 100_000_000_000)
    assert r2_mlu == pytest.approx(1.07, abs=0.01)
    assert r1_mlu == pytest.approx(0.30, abs=0.01)

    state = _pick(model, state)  # dispatch pass 1
    assert state.last_pick is not None
    assert state.last_pick.picked == (3, 2, 1)
    assert state.last_pick.dropped == ()
    assert state.dispatching_bytes == 576 * MIB  # R3 is not eligible: its bytes do not count

    state = _pick(model, _admit(model, state, 3))  # R4 arrives while R2 and R1 are in flight
    r4_mlu = deadline_mlu(576 * MIB, 256 * MIB, 6 * MS, 0, 100_000_000_000)
    assert r4_mlu == pytest.approx(1.45, abs=0.01)
    assert state.last_pick is not None
    assert state.last_pick.dropped == (4,)
    assert state.last_pick.picked == ()
    r4 = state.owners[3]
    assert (r4.state, r4.status, r4.dropped) == (TERMINAL, "CANCELED", True)
    assert state.outstanding_bytes == (64 + 512 + 16) * MIB  # R4's capacity released at once

    state = model.apply(state, "complete", (2, "COMPLETED"))  # type: ignore[assignment]
    assert state is not None
    assert state.dispatching_bytes == 64 * MIB


def test_worked_example_threshold_0_9_drops_r2_in_pass_1() -> None:
    model = _worked_example(0.9)
    (state,) = model.initial_states()
    for index in range(3):
        state = _admit(model, state, index)
    state = _pick(model, state)
    assert state.last_pick is not None
    assert state.last_pick.dropped == (2,)
    assert state.last_pick.picked == (3, 1)
    # R1 now sees only its own bytes ahead: the dropped R2 added nothing
    assert state.dispatching_bytes == 64 * MIB


# --- action guards and policy, one rule each -----------------------------------------------------


def _model(**changes: Any) -> AdmissionSpec:
    return AdmissionSpec(dataclasses.replace(tiny_config(), **changes))


def _run(model: AdmissionSpec, *steps: tuple[str, tuple[Any, ...]]) -> AdmissionState:
    (state,) = model.initial_states()
    for action, args in steps:
        nxt = model.apply(state, action, args)
        assert nxt is not None, model.explain(state, action, args)
        state = nxt
    return state


SUBMIT_GATED = Submit(
    1,
    (
        OwnerSpec(USER, 1, 0, True, 7),
        OwnerSpec(USER, 1, 0, True, 7),
        OwnerSpec(USER, 1, 0, True, 8),
    ),
)


def _gated_model() -> AdmissionSpec:
    return _model(
        submits=(SUBMIT_GATED,),
        dispatch_windows=((3, 3),),
        max_outstanding_bytes=5,
        staging_owner_reserve=0,
        staging_byte_reserve=0,
    )


def test_blocked_owner_stays_queued_in_place_and_skips_later_owners_of_its_key() -> None:
    model = _gated_model()
    state = _run(model, ("admit", (1, SUBMIT_GATED.owners)))
    state = _run_from(model, state, ("pick", (3, 3, ((1, BLOCKED), (3, ELIGIBLE)))))
    assert state.last_pick is not None
    assert state.last_pick.blocked == (1,)
    assert state.last_pick.skipped == (2,)  # same credit key 7: order within the key kept
    assert state.last_pick.picked == (3,)  # another key may still go
    assert state.queue == (1, 2)
    assert state.owners[0].was_blocked


def test_pick_requires_exactly_the_consulted_gate_answers() -> None:
    model = _gated_model()
    state = _run(model, ("admit", (1, SUBMIT_GATED.owners)))
    assert model.apply(state, "pick", (3, 3, ((1, BLOCKED),))) is None  # owner 3 not answered
    assert "no gate answer for consulted owner 3" in model.explain(
        state, "pick", (3, 3, ((1, BLOCKED),))
    )
    extra = ((1, BLOCKED), (2, ELIGIBLE), (3, ELIGIBLE))  # owner 2 is skipped, never asked
    assert model.apply(state, "pick", (3, 3, extra)) is None
    answers = [args[2] for action, args, _ in model.successors(state) if action == "pick"]
    # owner 1 BLOCKED: 2 is skipped, 3 asked (3); otherwise (2 answers) 2 and 3 asked (3 x 3)
    assert len(answers) == len(set(answers)) == 3 + 2 * 3 * 3


def test_rejected_owner_fails_and_releases_capacity() -> None:
    model = _gated_model()
    state = _run(
        model,
        ("admit", (1, SUBMIT_GATED.owners)),
        ("pick", (3, 3, ((1, REJECTED), (2, ELIGIBLE), (3, ELIGIBLE)))),
    )
    assert state.owners[0].status == "FAILED"
    assert state.outstanding_owners == 2
    assert state.last_pick is not None and state.last_pick.failed == (1,)


def _run_from(
    model: AdmissionSpec, state: AdmissionState, *steps: tuple[str, tuple[Any, ...]]
) -> AdmissionState:
    for action, args in steps:
        nxt = model.apply(state, action, args)
        assert nxt is not None, model.explain(state, action, args)
        state = nxt
    return state


def test_head_of_line_owner_stops_the_scan() -> None:
    submit = Submit(1, (OwnerSpec(USER, 2, 0, True, 0), OwnerSpec(USER, 1, 0, True, 0)))
    model = _model(submits=(submit,), dispatch_windows=((3, 1),), staging_byte_reserve=0)
    state = _run(model, ("admit", (1, submit.owners)), ("pick", (3, 1, ())))
    assert state.last_pick is not None
    assert state.last_pick.stop == "head_of_line"
    assert state.last_pick.picked == ()  # owner 2 would fit but is behind the head of line
    assert state.queue == (1, 2)


def test_zero_budget_does_nothing_not_even_a_drop() -> None:
    submit = Submit(1, (OwnerSpec(USER, 1, 1, True, 0),))
    model = _model(submits=(submit,), dispatch_windows=((0, 0),))
    state = _run(model, ("admit", (1, submit.owners)), ("advance_time", (1,)))
    nxt = _run_from(model, state, ("pick", (0, 0, ())))  # past due and eligible, drop on
    assert nxt.queue == (1,)
    assert nxt.last_pick is not None and nxt.last_pick.stop == "zero_budget"


def test_past_due_owner_is_dropped_when_drop_is_on_and_kept_without_provider() -> None:
    submit = Submit(1, (OwnerSpec(USER, 1, 1, True, 0),))
    model = _model(submits=(submit,), dispatch_windows=((1, 2),))
    state = _run(model, ("admit", (1, submit.owners)), ("advance_time", (1,)))
    dropped = _run_from(model, state, ("pick", (1, 2, ())))
    assert dropped.last_pick is not None and dropped.last_pick.dropped == (1,)
    no_provider = _run_from(model, state, ("set_bandwidth", (None,)), ("pick", (1, 2, ())))
    assert no_provider.last_pick is not None and no_provider.last_pick.picked == (1,)


def test_promotion_serves_urgent_owner_before_past_due_one() -> None:
    submit = Submit(
        1, (OwnerSpec(USER, 1, 1, False, 0), OwnerSpec(STAGING_INTERNAL, 1, 2, False, 0))
    )
    model = _model(submits=(submit,), dispatch_windows=((1, 2),))
    state = _run(model, ("admit", (1, submit.owners)), ("advance_time", (1,)))
    assert state.queue == (1, 2)  # owner 1 is past due (deadline 1 <= now 1): not promoted
    state = _run_from(model, state, ("pick", (1, 2, ())))
    assert state.last_pick is not None
    assert state.last_pick.picked == (2,)  # 2 - 1 < slack 2 and now < 2: promoted
    assert state.last_pick.promotion_reordered


def test_equal_deadlines_keep_fifo_order() -> None:
    submit = Submit(1, (OwnerSpec(USER, 1, 2, True, 0), OwnerSpec(USER, 1, 2, True, 0)))
    model = _model(submits=(submit,))
    state = _run(model, ("admit", (1, submit.owners)))
    assert state.queue == (1, 2)


def test_fifo_when_deadline_aware_is_off() -> None:
    submit = Submit(1, (OwnerSpec(USER, 1, 0, True, 0), OwnerSpec(USER, 1, 1, True, 0)))
    model = _model(submits=(submit,), deadline_aware=False)
    state = _run(model, ("admit", (1, submit.owners)))
    assert state.queue == (1, 2)
    assert _run(_model(submits=(submit,)), ("admit", (1, submit.owners))).queue == (2, 1)


def test_user_owner_sees_limit_minus_reserve_staging_sees_totals() -> None:
    user = Submit(1, (OwnerSpec(USER, 2, 0, True, 0), OwnerSpec(USER, 2, 0, True, 0)))
    staging = Submit(2, (OwnerSpec(STAGING_INTERNAL, 1, 0, False, 0),))
    extra_user = Submit(3, (OwnerSpec(USER, 1, 0, True, 0),))
    model = _model(submits=(user, staging, extra_user))
    state = _run(model, ("admit", (1, user.owners)))  # user: 2 owners, 4 bytes = max - reserve
    assert model.apply(state, "admit", (3, extra_user.owners)) is None
    assert "TMR" in model.explain(state, "admit", (3, extra_user.owners))
    full = _run_from(model, state, ("admit", (2, staging.owners)))  # the reserve admits it
    assert (full.outstanding_owners, full.outstanding_bytes) == (3, 5)


def test_complete_only_from_dispatching_and_releases_dispatching_bytes_on_failure() -> None:
    submit = Submit(1, (OwnerSpec(USER, 2, 0, True, 0),))
    model = _model(submits=(submit,))
    queued = _run(model, ("admit", (1, submit.owners)))
    assert model.apply(queued, "complete", (1, "COMPLETED")) is None
    assert "not DISPATCHING" in model.explain(queued, "complete", (1, "COMPLETED"))
    failed = _run_from(model, queued, ("pick", (1, 2, ())), ("complete", (1, "FAILED")))
    assert failed.dispatching_bytes == 0
    assert failed.owners[0].status == "FAILED"
    assert model.apply(failed, "complete", (1, "COMPLETED")) is None  # already terminal


def test_cancel_is_idempotent_on_canceled_and_refused_when_dispatching() -> None:
    submit = Submit(1, (OwnerSpec(USER, 1, 0, True, 0), OwnerSpec(USER, 1, 0, True, 0)))
    model = _model(submits=(submit,))
    state = _run(model, ("admit", (1, submit.owners)), ("cancel", (1,)))
    assert state.owners[0].status == "CANCELED"
    assert model.apply(state, "cancel", (1,)) == state  # idempotent
    dispatching = _run_from(model, state, ("pick", (1, 2, ())))
    assert dispatching.owners[1].state == DISPATCHING
    assert model.apply(dispatching, "cancel", (2,)) is None
    assert "InvalidEntry" in model.explain(dispatching, "cancel", (2,))


def test_retire_only_when_every_owner_of_the_batch_is_terminal() -> None:
    submit = Submit(1, (OwnerSpec(USER, 1, 0, True, 0), OwnerSpec(USER, 1, 0, True, 0)))
    model = _model(submits=(submit,))
    state = _run(model, ("admit", (1, submit.owners)), ("cancel", (1,)))
    assert model.apply(state, "retire", (1,)) is None
    assert "not terminal" in model.explain(state, "retire", (1,))
    retired = _run_from(model, state, ("cancel", (2,)), ("retire", (1,)))
    assert retired.owners == ()
    assert retired.next_owner_id == 3  # ids are never reused


def test_explain_names_the_failing_guard_for_malformed_and_unknown_actions() -> None:
    model = CONFIGS["admission/tiny"]()
    (state,) = model.initial_states()
    assert model.apply(state, "fly", ()) is None
    assert "unknown action" in model.explain(state, "fly", ())
    assert "takes 1 arguments" in model.explain(state, "cancel", ())
    assert "no owner 9" in model.explain(state, "cancel", (9,))
    # time advances in configured steps up to max_time_ns (2 in admission/tiny), then stops
    assert model.explain(state, "advance_time", (1,)) == "enabled"
    at_max = _run_from(model, state, ("advance_time", (1,)), ("advance_time", (1,)))
    assert model.apply(at_max, "advance_time", (1,)) is None
    assert "max_time_ns" in model.explain(at_max, "advance_time", (1,))
    assert "already" in model.explain(state, "set_bandwidth", (state.bandwidth_bps,))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"staging_owner_reserve": 4}, "staging_owner_reserve"),
        ({"staging_byte_reserve": 6}, "staging_byte_reserve"),
        ({"max_outstanding_owners": 0}, "must be > 0"),
        ({"dispatch_windows": ()}, "dispatch_windows"),
        ({"initial_bandwidth_bps": 7}, "initial_bandwidth_bps"),
        ({"complete_statuses": ("QUEUED",)}, "terminal statuses"),
        ({"submits": (Submit(0, (OwnerSpec(USER, 1, 0, True, 0),)),)}, "batch token"),
        ({"submits": (Submit(1, (OwnerSpec(USER, 0, 0, True, 0),)),)}, "invalid owner spec"),
    ],
)
def test_inconsistent_config_is_rejected(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecConfigError, match=message):
        dataclasses.replace(tiny_config(), **changes)


# --- tables, independence ---------------------------------------------------------------------


def test_owner_transitions_table_names() -> None:
    assert set(OWNER_TRANSITIONS) == {
        (QUEUED, "dispatch"),
        (QUEUED, "drop"),
        (QUEUED, "reject"),
        (QUEUED, "cancel"),
        (DISPATCHING, "complete"),
    }
    assert set(OWNER_TRANSITIONS.values()) == {DISPATCHING, TERMINAL}


def test_spec_imports_only_stdlib_and_its_own_mlu() -> None:
    files = sorted(Path(spec_module.__file__).parent.glob("*.py"))
    assert len(files) > 1  # the package's modules, not only its __init__
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for path in files
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    third_party = {m for m in imported if m and m.split(".")[0] not in _STDLIB}
    own = {m for m in third_party if m.startswith("tent_spec.admission.")}
    assert own and third_party - own == {"tent_spec.mlu"}


_STDLIB = {"__future__", "bisect", "collections", "dataclasses", "itertools", "typing"}


# --- known-bad variants -------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(KNOWN_BAD))
def test_known_bad_variant_violates_its_invariant(name: str) -> None:
    factory, invariant = KNOWN_BAD[name]
    result = explore(factory(), stop_on=invariant)
    assert invariant in result.violations
    assert set(result.violations) <= {invariant}  # the mutant breaks exactly the rule it targets


# --- random walks over the larger ci model -------------------------------------------------------


def _walks(model: AdmissionSpec) -> Callable[[st.DataObject], Iterator[AdmissionState]]:
    def walk(data: st.DataObject) -> Iterator[AdmissionState]:
        (state,) = model.initial_states()
        for _ in range(25):
            steps = list(model.successors(state))
            step = data.draw(st.sampled_from(steps))
            assert model.apply(state, step.action, step.args) == step.state
            state = step.state
            yield state

    return walk


@settings(max_examples=40)
@given(st.data())
def test_ci_random_walks_keep_every_invariant(data: st.DataObject) -> None:
    model = AdmissionSpec(ci_config())
    for state in _walks(model)(data):
        broken = [inv.name for inv in model.invariants() if not inv.holds(state)]
        assert broken == [], model.describe(state)


def test_describe_is_flat_and_names_every_owner() -> None:
    model = CONFIGS["admission/tiny"]()
    state = _run(
        model,
        ("admit", (1, model.config.submits[0].owners)),
        ("pick", (1, 2, ((1, ELIGIBLE),))),
    )
    view = model.describe(state)
    assert str(view["owner[1]"]).startswith("DISPATCHING")
    assert view["last_pick.picked"] == (1,)
    assert all(not isinstance(v, dict) for v in view.values())


def test_mlu_threshold_equality_drops() -> None:
    """seed: "if the value reaches θ_local" — mlu == θ exactly is a drop."""
    submit = Submit(1, (OwnerSpec(USER, 2, 2, True, 0),))
    model = _model(submits=(submit,), dispatch_windows=((1, 2),))
    assert deadline_mlu(0, 2, 2, 0, 1_000_000_000) == 1.0 == model.config.mlu_local_threshold
    state = _run(model, ("admit", (1, submit.owners)), ("pick", (1, 2, ())))
    assert state.last_pick is not None and state.last_pick.dropped == (1,)
    assert math.isclose(deadline_mlu(0, 1, 2, 0, 1_000_000_000), 0.5)
