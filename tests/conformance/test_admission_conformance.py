"""The admission queue refines its spec: ``tent_sched.AdmissionQueue`` vs ``tent_spec.admission``.

Three drivers feed the lockstep runner (:mod:`tent_models.conformance.admission`):

1. a Hypothesis ``RuleBasedStateMachine`` over the shipped configurations and randomly drawn
   ones, drawing every action with explicit arguments from the configuration's bounds, guard-false
   ones included (the implementation must then raise the matching typed error and change nothing);
2. every transition of the ``admission/tiny`` state graph up to a small depth, replayed from the
   initial state;
3. the known-bad spec variants, which the real queue must refute (proof that the harness looks).
"""

from __future__ import annotations

from collections.abc import Hashable

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from tent_models.configs.admission import CONFIGS, KNOWN_BAD, ci_config, deep_config, tiny_config
from tent_models.conformance import (
    ActionInstance,
    Divergence,
    DivergenceKind,
    Lockstep,
    Outcome,
    OutcomeKind,
    StepVerdict,
)
from tent_models.conformance.admission import (
    AdmissionAdapter,
    admission_lockstep,
    project_state,
    run_admission,
)
from tent_spec.admission import (
    STAGING_INTERNAL,
    TERMINAL_STATUSES,
    USER,
    AdmissionConfig,
    AdmissionSpec,
    AdmissionState,
    OwnerSpec,
    Submit,
)

GBPS_1 = 1_000_000_000

# --- strategies --------------------------------------------------------------------------------

owner_specs = st.builds(
    OwnerSpec,
    kind=st.sampled_from((USER, STAGING_INTERNAL)),
    length=st.integers(1, 4),
    deadline_ns=st.integers(0, 6),
    degradation_eligible=st.booleans(),
    gate_key=st.integers(0, 2),
)


@st.composite
def random_configs(draw: st.DrawFn) -> AdmissionConfig:
    """A small admission configuration with every mechanism possibly on."""
    max_owners = draw(st.integers(1, 4))
    max_bytes = draw(st.integers(1, 8))
    bandwidths = draw(
        st.lists(
            st.sampled_from((None, 0, GBPS_1 // 2, GBPS_1, 2 * GBPS_1)),
            min_size=1,
            max_size=3,
            unique=True,
        )
    )
    return AdmissionConfig(
        name="admission/random",
        max_outstanding_owners=max_owners,
        max_outstanding_bytes=max_bytes,
        staging_owner_reserve=draw(st.integers(0, max_owners)),
        staging_byte_reserve=draw(st.integers(0, max_bytes)),
        deadline_aware=draw(st.booleans()),
        promotion_slack_ns=draw(st.integers(0, 4)),
        mlu_local_threshold=draw(st.sampled_from((0.0, 0.5, 1.0, 1.5, 3.0))),
        submits=tuple(
            draw(
                st.lists(
                    st.builds(
                        Submit,
                        batch=st.integers(1, 3),
                        owners=st.lists(owner_specs, min_size=1, max_size=3).map(tuple),
                    ),
                    min_size=1,
                    max_size=4,
                )
            )
        ),
        dispatch_windows=tuple(
            draw(
                st.lists(
                    st.tuples(st.integers(0, 4), st.integers(0, 8)),
                    min_size=1,
                    max_size=3,
                    unique=True,
                )
            )
        ),
        bandwidths=tuple(bandwidths),
        initial_bandwidth_bps=draw(st.sampled_from(bandwidths)),
        time_steps_ns=draw(st.sampled_from(((), (1,), (1, 2)))),
        max_time_ns=draw(st.integers(0, 6)),
        complete_statuses=tuple(
            draw(st.lists(st.sampled_from(TERMINAL_STATUSES), min_size=1, max_size=3, unique=True))
        ),
    )


configs = st.one_of(st.sampled_from((tiny_config(), ci_config(), deep_config())), random_configs())


def _fail(divergence: Divergence) -> None:
    pytest.fail(divergence.format(), pytrace=False)


# --- 1. stateful differential test ---------------------------------------------------------------


class AdmissionConformance(RuleBasedStateMachine):
    """Draws spec actions with explicit arguments and applies them to spec and queue alike."""

    spec: AdmissionSpec
    lockstep: Lockstep[AdmissionState]

    @initialize(config=configs)
    def start(self, config: AdmissionConfig) -> None:
        self.spec = AdmissionSpec(config)
        self.lockstep = admission_lockstep(self.spec)
        if self.lockstep.divergence is not None:
            _fail(self.lockstep.divergence)

    def _step(self, action: str, args: tuple[Hashable, ...]) -> None:
        verdict = self.lockstep.step(action, args)
        if isinstance(verdict, Divergence):
            _fail(verdict)

    @property
    def _config(self) -> AdmissionConfig:
        return self.spec.config

    def _owner_ids(self) -> st.SearchStrategy[int]:
        # Every id issued so far, plus one never issued: live, terminal, retired and unknown.
        return st.integers(1, self.lockstep.state.next_owner_id)

    @rule(data=st.data())
    def admit(self, data: st.DataObject) -> None:
        # Any workload submit: pending ones (admitted, or TMR when they do not fit) and
        # admitted ones (IE while their public ids are mapped).
        submit = data.draw(st.sampled_from(self._config.submits))
        self._step("admit", (submit.batch, submit.owners))

    @rule(data=st.data())
    def pick(self, data: st.DataObject) -> None:
        # The enabled picks of a window are one per gate-answer vector the scan can consult;
        # over an empty queue the pick is refused by the spec and a no-op in the queue.
        window = data.draw(st.sampled_from(self._config.dispatch_windows))
        branches = [
            step.args
            for step in self.spec.successors(self.lockstep.state)
            if step.action == "pick" and step.args[:2] == window
        ]
        args = data.draw(st.sampled_from(branches)) if branches else (*window, ())
        self._step("pick", args)

    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        owner_id = data.draw(self._owner_ids())
        status = data.draw(st.sampled_from(self._config.complete_statuses))
        self._step("complete", (owner_id, status))

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        self._step("cancel", (data.draw(self._owner_ids()),))

    @rule(data=st.data())
    def retire(self, data: st.DataObject) -> None:
        # A configured batch token or one never used (a no-op on both sides).
        batches = sorted({s.batch for s in self._config.submits} | {99})
        self._step("retire", (data.draw(st.sampled_from(batches)),))

    @rule(data=st.data())
    def advance_time(self, data: st.DataObject) -> None:
        steps = self._config.time_steps_ns or (1,)
        self._step("advance_time", (data.draw(st.sampled_from(steps)),))

    @rule(data=st.data())
    def set_bandwidth(self, data: st.DataObject) -> None:
        self._step("set_bandwidth", (data.draw(st.sampled_from(self._config.bandwidths)),))

    @invariant()
    def no_divergence(self) -> None:
        if getattr(self, "lockstep", None) is not None and self.lockstep.divergence is not None:
            _fail(self.lockstep.divergence)


AdmissionConformance.TestCase.settings = settings(stateful_step_count=50)
test_queue_refines_the_admission_spec = AdmissionConformance.TestCase


# --- 2. the explicit state graph of admission/tiny ------------------------------------------------


def _paths_to_depth(spec: AdmissionSpec, depth: int) -> list[tuple[ActionInstance, ...]]:
    """One path per transition whose source is at BFS depth < ``depth``: the shortest path to
    the source followed by the transition (every edge of the bounded graph, once)."""
    initial = next(iter(spec.initial_states()))
    frontier: dict[AdmissionState, tuple[ActionInstance, ...]] = {initial: ()}
    seen = {initial}
    paths: list[tuple[ActionInstance, ...]] = []
    for _ in range(depth):
        nxt: dict[AdmissionState, tuple[ActionInstance, ...]] = {}
        for state, path in frontier.items():
            for step in spec.successors(state):
                edge = (*path, (step.action, tuple(step.args)))
                paths.append(edge)
                if step.state not in seen:
                    seen.add(step.state)
                    nxt[step.state] = edge
        frontier = nxt
    return paths


def _replay_graph(depth: int) -> tuple[int, set[str]]:
    """Replay every transition of admission/tiny up to ``depth`` in lockstep; return the number
    of paths and the spec witnesses the replayed states met."""
    spec = CONFIGS["admission/tiny"]()
    paths = _paths_to_depth(spec, depth)
    reached: set[str] = set()
    witnesses = spec.witnesses()
    for path in paths:
        lockstep = admission_lockstep(spec)
        for action, args in path:
            verdict = lockstep.step(action, args)
            if isinstance(verdict, Divergence):
                _fail(verdict)
            assert verdict is StepVerdict.APPLIED  # every graph edge is enabled
        reached.update(w.name for w in witnesses if w.holds(lockstep.state))
    return len(paths), reached


def test_every_transition_of_the_tiny_graph_to_depth_5_conforms() -> None:
    count, reached = _replay_graph(5)
    assert count == 5137  # the bounded graph did not silently shrink
    # Not vacuous: drops, gate blocks, skips and head-of-line stops occur on the replayed paths.
    assert {
        "an_owner_was_dropped",
        "a_blocked_key_skipped_a_later_owner",
        "an_owner_was_rejected_by_the_gate",
        "a_pick_stopped_at_head_of_line",
    } <= reached


@pytest.mark.slow
def test_every_transition_of_the_tiny_graph_conforms() -> None:
    # The whole graph: ~100 k transitions, paths up to 12 steps (about a minute).
    count, reached = _replay_graph(40)
    assert count == 100044
    assert reached == {w.name for w in CONFIGS["admission/tiny"]().witnesses()}


# --- 3. the harness notices wrong specs, and refused steps ---------------------------------------


@pytest.mark.parametrize("variant", sorted(KNOWN_BAD))
def test_the_queue_refutes_every_known_bad_admission_variant(variant: str) -> None:
    factory, _invariant = KNOWN_BAD[variant]
    spec = factory()
    refuted = any(run_admission(spec, path) for path in _paths_to_depth(spec, 5))
    assert refuted, f"no divergence between the queue and {variant}"


def test_a_divergence_prints_the_checker_trace_with_the_differing_fields() -> None:
    factory, _invariant = KNOWN_BAD["admission/bad/equal_deadlines_first"]
    spec = factory()
    submits = spec.config.submits
    divergence = run_admission(spec, [("admit", (s.batch, s.owners)) for s in submits])
    assert divergence is not None
    assert divergence.kind is DivergenceKind.STATE
    assert divergence.step == 2
    assert divergence.mismatch == {"queue": ((2, 1), (1, 2))}
    text = divergence.format()
    assert text.startswith("0 initial state\n")
    assert "2 action admit(2, " in text
    assert "violated: conformance (state) at step 2" in text
    assert text.endswith("    queue: spec (2, 1) / implementation (1, 2)")
    assert divergence.actions == tuple(("admit", (s.batch, s.owners)) for s in submits)


def test_readmitting_a_live_submit_raises_invalid_entry_and_changes_nothing() -> None:
    config = tiny_config()
    first = config.submits[0]
    adapter = AdmissionAdapter(config)
    assert adapter.perform("admit", (first.batch, first.owners)) == Outcome.applied()
    before = adapter.abstract()
    outcome = adapter.perform("admit", (first.batch, first.owners))
    assert outcome == Outcome(kind=OutcomeKind.RAISED, error="InvalidEntry")
    assert adapter.abstract() == before
    lockstep = admission_lockstep(AdmissionSpec(config))
    assert lockstep.step("admit", (first.batch, first.owners)) is StepVerdict.APPLIED
    assert lockstep.step("admit", (first.batch, first.owners)) is StepVerdict.REFUSED
    assert lockstep.divergence is None


def test_capacity_refusal_maps_to_too_many_requests() -> None:
    owner = OwnerSpec(USER, 2, 0, True, 0)
    config = AdmissionConfig(
        name="admission/capacity",
        max_outstanding_owners=2,
        max_outstanding_bytes=3,
        submits=(Submit(1, (owner,)), Submit(2, (owner,))),
        dispatch_windows=((1, 3),),
    )
    spec = AdmissionSpec(config)
    lockstep = admission_lockstep(spec)
    assert lockstep.step("admit", (1, (owner,))) is StepVerdict.APPLIED
    assert AdmissionAdapter(config).refusal(lockstep.state, "admit", (2, (owner,))) == (
        Outcome(kind=OutcomeKind.RAISED, error="TooManyRequests")
    )
    assert lockstep.step("admit", (2, (owner,))) is StepVerdict.REFUSED
    assert lockstep.divergence is None


def test_model_bounds_are_not_performed_on_the_queue() -> None:
    spec = AdmissionSpec(tiny_config())
    lockstep = admission_lockstep(spec)
    assert lockstep.step("advance_time", (5,)) is StepVerdict.NOT_PERFORMED
    assert lockstep.step("pick", (2, 2, ())) is StepVerdict.NOT_PERFORMED  # unconfigured window
    assert lockstep.step("pick", (1, 2, ())) is StepVerdict.REFUSED  # empty queue: a no-op
    assert lockstep.actions == (("pick", (1, 2, ())),)


def test_projection_erases_only_the_unobservable_pick_fields() -> None:
    spec = AdmissionSpec(tiny_config())
    state = next(iter(spec.initial_states()))
    submit = spec.config.submits[0]
    admitted = spec.apply(state, "admit", (submit.batch, submit.owners))
    assert admitted is not None
    assert project_state(admitted) == admitted
    picked = spec.apply(admitted, "pick", (1, 2, ((1, "eligible"),)))
    assert picked is not None and picked.last_pick is not None
    projected = project_state(picked)
    assert projected.last_pick is not None
    assert projected.last_pick.picked == picked.last_pick.picked == (1,)
    assert projected._replace(last_pick=None) == picked._replace(last_pick=None)
