"""The gated queue refines its spec: queue + gate + endpoints + receiver vs ``tent_spec.gated``.

Drivers of the lockstep runner (:mod:`tent_models.conformance.gated`):

1. a Hypothesis ``RuleBasedStateMachine`` over the shipped configurations and random small ones,
   drawing enabled spec steps (faults included: loss, duplication, receiver restart) and any
   candidate action (guard-false ones must be refused the same way, changing nothing);
2. every transition of ``gated/tiny`` up to a small depth, replayed from the initial state;
3. the checker's counterexample of each known-bad variant, replayed against the real system,
   which must refute it (proof that the harness looks).
"""

from __future__ import annotations

from collections.abc import Hashable

import attrs
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from tent_models.checker import check
from tent_models.configs.gated import (
    KNOWN_BAD,
    ci_config,
    hoarding_config,
    three_config,
    tiny_config,
)
from tent_models.conformance import (
    ActionInstance,
    Divergence,
    DivergenceKind,
    Lockstep,
    Outcome,
    OutcomeKind,
    StepVerdict,
)
from tent_models.conformance.gated import (
    GatedAdapter,
    gated_lockstep,
    project_state,
    run_gated,
)
from tent_spec.gated import GatedConfig, GatedSpec, GatedState, OwnerSpec


def _fail(divergence: Divergence) -> None:
    pytest.fail(divergence.format(), pytrace=False)


@st.composite
def random_configs(draw: st.DrawFn) -> GatedConfig:
    """A small gated configuration: one or two keys, up to three owners, one fault budget."""
    keys = draw(st.integers(1, 2))
    workload = tuple(
        draw(
            st.lists(
                st.builds(OwnerSpec, key=st.integers(0, keys), length=st.integers(1, 2)),
                min_size=1,
                max_size=3,
            )
        )
    )
    slots = draw(st.integers(1, 3))
    data = draw(st.integers(max(1, slots), 4))
    initial = draw(st.integers(0, 1)) if keys * 1 <= slots else 0
    return GatedConfig(
        name="gated/random",
        keys=keys,
        workload=workload,
        max_outstanding_owners=draw(st.integers(1, 3)),
        max_outstanding_bytes=draw(st.integers(2, 6)),
        windows=tuple(
            draw(st.lists(st.tuples(st.integers(1, 3), st.integers(1, 4)), min_size=1, max_size=2))
        ),
        capacity=(data, slots, slots),
        max_grant=(draw(st.integers(1, data)), slots, slots),
        initial_grant=(initial, initial, initial),
        refresh=draw(st.booleans()),
        max_messages=draw(st.integers(2, 4)),
        max_duplications=1,
        max_losses=1,
        max_receiver_restarts=1,
        max_faults=draw(st.sampled_from((1, 2, None))),
        cancel=draw(st.booleans()),
        hold_partial=draw(st.booleans()),
    )


configs = st.one_of(
    st.sampled_from(
        (
            tiny_config(),
            ci_config(),
            hoarding_config(),
            three_config(),
            three_config(hold_partial=True),
        )
    ),
    random_configs(),
)


def candidates(spec: GatedSpec, state: GatedState) -> list[ActionInstance]:
    """Every action with arguments from the configuration's bounds and the messages in flight,
    enabled or not (plus an owner id and a window nobody configured)."""
    cfg = spec.config
    owners = range(1, len(cfg.workload) + 2)
    keys = range(cfg.keys)
    found: list[ActionInstance] = [("admit", (i,)) for i in range(len(cfg.workload) + 1)]
    found += [("pick", w) for w in (*cfg.windows, (9, 9))]
    found += [("submit", (o, ok)) for o in owners for ok in (True, False)]
    found += [("cancel", (o,)) for o in owners]
    found += [(a, (o,)) for a in ("land", "complete") for o in owners]
    found += [(a, (k,)) for a in ("release", "sender_flush", "receiver_flush") for k in keys]
    found += [("refresh_tick", ()), ("receiver_restart", ()), ("grant_partial", ())]
    for k in keys:
        for bag in (state.to_sender[k], state.to_receiver[k]):
            found += [(a, (k, m)) for m, _n in bag for a in ("deliver", "duplicate", "lose")]
    return found


# --- 1. stateful differential test ----------------------------------------------------------------


class GatedConformance(RuleBasedStateMachine):
    """Applies spec actions to the spec and to the real sender/receiver system alike."""

    spec: GatedSpec
    lockstep: Lockstep[GatedState]

    @initialize(config=configs)
    def start(self, config: GatedConfig) -> None:
        self.spec = GatedSpec(config)
        self.lockstep = gated_lockstep(self.spec)
        if self.lockstep.divergence is not None:
            _fail(self.lockstep.divergence)

    def _step(self, action: str, args: tuple[Hashable, ...]) -> None:
        verdict = self.lockstep.step(action, args)
        if isinstance(verdict, Divergence):
            _fail(verdict)

    @rule(data=st.data())
    def enabled_step(self, data: st.DataObject) -> None:
        steps = [(s.action, s.args) for s in self.spec.successors(self.lockstep.state)]
        if steps:
            self._step(*data.draw(st.sampled_from(steps)))

    @rule(data=st.data())
    def any_step(self, data: st.DataObject) -> None:
        self._step(*data.draw(st.sampled_from(candidates(self.spec, self.lockstep.state))))

    @invariant()
    def no_divergence(self) -> None:
        if getattr(self, "lockstep", None) is not None and self.lockstep.divergence is not None:
            _fail(self.lockstep.divergence)


GatedConformance.TestCase.settings = settings(stateful_step_count=60)
test_gated_queue_refines_the_gated_spec = GatedConformance.TestCase


# --- 2. the explicit state graph of gated/tiny ----------------------------------------------------


def _paths_to_depth(spec: GatedSpec, depth: int) -> list[tuple[ActionInstance, ...]]:
    """One path per transition whose source is at BFS depth < ``depth``."""
    initial = spec.initial_states()[0]
    frontier: dict[GatedState, tuple[ActionInstance, ...]] = {initial: ()}
    seen = {initial}
    paths: list[tuple[ActionInstance, ...]] = []
    for _ in range(depth):
        nxt: dict[GatedState, tuple[ActionInstance, ...]] = {}
        for state, path in frontier.items():
            for step in spec.successors(state):
                edge = (*path, (step.action, tuple(step.args)))
                paths.append(edge)
                if step.state not in seen:
                    seen.add(step.state)
                    nxt[step.state] = edge
        frontier = nxt
    return paths


def test_every_transition_of_the_tiny_graph_to_depth_7_conforms() -> None:
    spec = GatedSpec(tiny_config())
    paths = _paths_to_depth(spec, 7)
    assert len(paths) == 1786  # the bounded graph did not silently shrink
    for path in paths:
        divergence = run_gated(spec, path)
        if divergence is not None:
            _fail(divergence)


# --- 3. the real system refutes the known-bad variants --------------------------------------------


@pytest.mark.parametrize("name", sorted(KNOWN_BAD))
def test_the_real_system_refutes_each_mutant_and_follows_each_bad_config(name: str) -> None:
    factory, invariant_name = KNOWN_BAD[name]
    spec = factory()
    result = check(spec, check_recoverability=invariant_name == "recoverability")
    counterexample = next(v for v in result.violations if v.name == invariant_name)
    if type(spec) is GatedSpec:
        # A configuration, not a mutant (gated/bad/no_refresh: both refreshes off): the real
        # system configured the same follows the whole counterexample into the stuck state.
        assert run_gated(spec, counterexample.actions) is None
        return
    # A report the mutant withholds for lack of data credit is the next step of its trace.
    actions = [*counterexample.actions, ("sender_flush", (0,))]
    divergence = run_gated(spec, actions)
    if divergence is None and _end(spec, actions) is not None:
        # The stuck state comes before the mutant's own step (returns_not_evaluated: the
        # report returning the credit is still in flight): deliver what the receiver is sent.
        state = _end(spec, actions)
        assert state is not None
        actions += [("deliver", (k, m)) for k, bag in enumerate(state.to_receiver) for m, _ in bag]
        divergence = run_gated(spec, actions)
    if divergence is None:
        # The mutant's rule acts only later on (level_not_in_heads: its counterexample ends
        # once both owners are admitted, and its level differs only once one waits): the real
        # system diverges on some continuation of the mutant's stuck prefix.
        actions, divergence = _diverging_continuation(spec, counterexample.actions)
    assert divergence is not None, f"the real system agrees with {name}"
    if divergence.kind is DivergenceKind.INVARIANT:
        # The mutant's changed hook is part of the invariant it breaks (a report it withholds
        # while one is due): the real state is judged by the mutant's own rule. The real system
        # takes the step the mutant refuses instead: lockstepped with the correct spec it
        # follows the whole trace, flush included, which the mutant cannot apply.
        assert run_gated(GatedSpec(spec.config), actions) is None
        state = spec.initial_states()[0]
        for action, args in actions[:-1]:
            state = spec.apply(state, action, args)
        assert spec.apply(state, *actions[-1]) is None
        return
    assert divergence.kind in (DivergenceKind.STATE, DivergenceKind.OUTCOME)


def _end(spec: GatedSpec, actions: list[ActionInstance]) -> GatedState | None:
    """Where ``actions`` lead in ``spec`` (``None``: some step is not enabled there)."""
    state: GatedState | None = spec.initial_states()[0]
    for action, args in actions:
        if state is None:
            return None
        state = spec.apply(state, action, args)
    return state


def _diverging_continuation(
    spec: GatedSpec, prefix: tuple[ActionInstance, ...], depth: int = 4
) -> tuple[list[ActionInstance], Divergence | None]:
    """The first continuation of ``prefix`` in ``spec`` (breadth first, at most ``depth``
    steps, faults excluded) that the real system does not follow."""
    start = _end(spec, list(prefix))
    assert start is not None
    frontier: list[tuple[GatedState, list[ActionInstance]]] = [(start, list(prefix))]
    for _ in range(depth):
        nxt: list[tuple[GatedState, list[ActionInstance]]] = []
        for state, path in frontier:
            for step in spec.successors(state):
                if step.action in spec.fault_actions():
                    continue
                edge = [*path, (step.action, tuple(step.args))]
                divergence = run_gated(spec, edge)
                if divergence is not None:
                    return edge, divergence
                nxt.append((step.state, edge))
        frontier = nxt
    return list(prefix), None


def test_a_divergence_names_the_differing_fields() -> None:
    factory, _invariant = KNOWN_BAD["gated/bad/partial_reserve"]
    divergence = run_gated(factory(), [("admit", (0,)), ("pick", (2, 3))])
    assert divergence is not None and divergence.kind is DivergenceKind.STATE
    assert divergence.step == 2
    assert "sender[key1].consumed" in divergence.mismatch
    assert divergence.mismatch["sender[key1].consumed"] == ((0, 1, 1), (0, 0, 0))
    assert "violated: conformance (state) at step 2" in divergence.format()


# --- refusals and the abstraction -----------------------------------------------------------------


def test_commit_of_a_fenced_token_raises_invalid_entry_and_changes_nothing() -> None:
    spec = GatedSpec(attrs.evolve(tiny_config(), workload=(OwnerSpec(1, 1),)))
    lockstep = gated_lockstep(spec)
    for action, args in (("admit", (0,)), ("pick", (2, 3)), ("receiver_restart", ())):
        assert lockstep.step(action, args) is StepVerdict.APPLIED
    assert lockstep.step("sender_flush", (0,)) is StepVerdict.APPLIED
    offer = lockstep.state.to_receiver[0][0][0]
    assert lockstep.step("deliver", (0, offer)) is StepVerdict.APPLIED
    assert lockstep.step("receiver_flush", (0,)) is StepVerdict.APPLIED
    activation = min(m for m, _n in lockstep.state.to_sender[0])
    assert lockstep.step("deliver", (0, activation)) is StepVerdict.APPLIED
    assert lockstep.step("submit", (1, True)) is StepVerdict.REFUSED  # InvalidEntry, unchanged
    assert lockstep.step("submit", (1, False)) is StepVerdict.APPLIED
    assert lockstep.divergence is None


def test_admission_over_capacity_raises_too_many_requests() -> None:
    config = attrs.evolve(tiny_config(), max_outstanding_owners=1)
    adapter = GatedAdapter(config)
    assert adapter.perform("admit", (0,)) == Outcome.applied()
    before = adapter.abstract()
    outcome = adapter.perform("admit", (1,))
    assert outcome == Outcome(kind=OutcomeKind.RAISED, error="TooManyRequests")
    assert adapter.abstract() == before


def test_the_handshake_yields_the_spec_initial_state() -> None:
    for config in (tiny_config(), ci_config()):
        spec = GatedSpec(config)
        assert GatedAdapter(config).abstract() == project_state(spec.initial_states()[0])


def test_model_bounds_are_not_performed() -> None:
    lockstep = gated_lockstep(GatedSpec(tiny_config()))
    assert lockstep.step("pick", (9, 9)) is StepVerdict.NOT_PERFORMED  # unconfigured window
    assert lockstep.step("admit", (1,)) is StepVerdict.NOT_PERFORMED  # out of workload order
    assert lockstep.step("pick", (2, 3)) is StepVerdict.REFUSED  # empty queue: a no-op
    assert lockstep.step("sender_flush", (0,)) is StepVerdict.REFUSED  # nothing due: a no-op
    assert lockstep.actions == (("pick", (2, 3)), ("sender_flush", (0,)))


# --- 4. idle credit goes back (issue 10 item 8), end to end ---------------------------------------


def _completed_recovery(spec: GatedSpec, state: GatedState) -> bool:
    """Recovered, with the last owner (key 2's) COMPLETED: its data landed and was released."""
    return spec.recovered(state) and state.owners[-1].status == "COMPLETED"


def _to_recovery(spec: GatedSpec, prefix: list[ActionInstance]) -> list[ActionInstance]:
    """``prefix``, then a shortest fault-free path from where it ends to a recovered state in
    which key 2's owner completed."""
    state = spec.initial_states()[0]
    for action, args in prefix:
        state = spec.apply(state, action, args)
        assert state is not None, (action, args)
    parents: dict[GatedState, tuple[GatedState, ActionInstance] | None] = {state: None}
    frontier = [state]
    while frontier:
        done = next((s for s in frontier if _completed_recovery(spec, s)), None)
        if done is not None:
            path: list[ActionInstance] = []
            while (link := parents[done]) is not None:
                done, step = link
                path.append(step)
            return [*prefix, *reversed(path)]
        nxt = []
        for s in frontier:
            for step in spec.successors(s):
                if step.action not in spec.fault_actions() and step.state not in parents:
                    parents[step.state] = (s, (step.action, tuple(step.args)))
                    nxt.append(step.state)
        frontier = nxt
    raise AssertionError("no recovered state is reachable")


def _replay_to_recovery(spec: GatedSpec, prefix: list[ActionInstance]) -> GatedState:
    lockstep = gated_lockstep(spec)
    for action, args in _to_recovery(spec, prefix):
        verdict = lockstep.step(action, args)
        if isinstance(verdict, Divergence):
            _fail(verdict)
        assert verdict is StepVerdict.APPLIED, (action, args, verdict)
    assert _completed_recovery(spec, lockstep.state)
    return lockstep.state


def test_a_refused_submit_returns_idle_credit_and_the_other_key_completes_in_the_real_system() -> (
    None
):
    # The prefix is gated/bad/no_idle_return's counterexample: with the return path, the real
    # queue, gate, endpoints and receiver follow the spec through it and on to recovery (key
    # 2's owner dispatches on the capacity key 1 gave back).
    spec = GatedSpec(hoarding_config(cancel=False))
    state = spec.initial_states()[0]
    prefix: list[ActionInstance] = []

    def step(action: str, *args: Hashable) -> None:
        nonlocal state
        state = spec.apply(state, action, args)
        assert state is not None, (action, args)
        prefix.append((action, args))

    step("admit", 0)
    step("pick", 2, 2)  # key 1's owner stalls
    step("sender_flush", 0)
    step("deliver", 0, state.to_receiver[0][0][0])  # the demand; the receiver grants it
    step("receiver_flush", 0)
    step("deliver", 0, max(m for m, _n in state.to_sender[0]))
    step("pick", 2, 2)
    step("submit", 1, False)  # refused: without the return path key 2 starves from here
    final = _replay_to_recovery(spec, prefix)
    assert final.senders[0].returned == (1, 1, 1) and final.receivers[0].reclaimed == (1, 1, 1)
    assert [o.status for o in final.owners] == ["FAILED", "COMPLETED"]


def test_a_grant_for_a_canceled_owner_goes_back_in_the_real_system() -> None:
    # The checker's race on gated/hoarding/ci: owner 1 is canceled while its demand is in
    # flight; the receiver grants it anyway; key 2 still completes (the gate's withdrawn flag).
    spec = GatedSpec(hoarding_config())
    state = spec.initial_states()[0]
    prefix: list[ActionInstance] = [("admit", (0,)), ("pick", (2, 2)), ("sender_flush", (0,))]
    for action, args in prefix:
        state = spec.apply(state, action, args)
    report = state.to_receiver[0][0][0]
    prefix += [("cancel", (1,)), ("deliver", (0, report)), ("receiver_flush", (0,))]
    for action, args in prefix[3:]:
        state = spec.apply(state, action, args)
    update = max(m for m, _n in state.to_sender[0])
    prefix += [("deliver", (0, update)), ("admit", (1,))]
    final = _replay_to_recovery(spec, prefix)
    assert final.senders[0].returned == (1, 1, 1)
    assert [o.status for o in final.owners] == ["CANCELED", "COMPLETED"]


# --- 4. found by the model checker on gated/three ---------------------------------------------


@pytest.mark.parametrize("hold_partial", [False, True])
def test_returned_credit_makes_the_key_due_again_in_the_real_system(hold_partial: bool) -> None:
    # The recoverability counterexample of gated/three (7 December 2026): two refused submits
    # return their credit while a third owner waits with the same level; the receiver reclaims
    # the returns and must evaluate the key again (its unlanded credit fell), or that owner
    # waits for good. In lockstep: the real receiver puts the key in line and grants it.
    spec = GatedSpec(three_config(hold_partial=hold_partial))
    lockstep = gated_lockstep(spec)
    steps: list[ActionInstance] = [
        ("admit", (0,)),
        ("admit", (1,)),
        ("pick", (3, 3)),
        ("submit", (1, False)),
        ("sender_flush", (0,)),
        ("pick", (3, 3)),
        ("admit", (2,)),
        ("submit", (2, False)),
        ("pick", (3, 3)),
    ]
    for _ in range(2):  # the first report (its demand), then the one that returns the credit
        steps_done = [lockstep.step(*step) for step in steps]
        assert not any(isinstance(v, Divergence) for v in steps_done), lockstep.divergence
        (report, _n), *_ = lockstep.state.to_receiver[0]
        steps = [("deliver", (0, report)), ("sender_flush", (0,))]
    assert lockstep.state.receivers[0].reclaimed == (0, 0, 0)
    (report, _n), *_ = lockstep.state.to_receiver[0]
    verdict = lockstep.step("deliver", (0, report))
    assert not isinstance(verdict, Divergence), verdict
    receiver = lockstep.state.receivers[0]
    assert receiver.reclaimed == (1, 1, 1) and receiver.grants_unsent  # granted again
