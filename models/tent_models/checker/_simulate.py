"""Seeded random simulation for models too big to exhaust."""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from typing import Any

from tent_models.checker._bfs import state_fingerprint, storage_bytes
from tent_models.checker._errors import InvalidArgument, ModelContractError
from tent_models.checker._fingerprint import collision_probability, collision_probability_tlc
from tent_models.checker._ray import current_engine
from tent_models.checker._result import (
    DEADLOCK_DETAIL,
    ActionCoverage,
    CheckResult,
    CounterExample,
    ViolationKind,
    WitnessResult,
)
from tent_models.checker._swarm import swarm
from tent_models.checker._trace import (
    ActionInstance,
    compared_values,
    minimise,
    replay,
    trace_steps,
)
from tent_models.model_api import SpecModel, ends_by_design

__all__ = ["simulate"]


def simulate(
    model: SpecModel[Any], *, seed: int, walks: int, depth: int, check_deadlock: bool = True
) -> CheckResult:
    """Run ``walks`` random walks of at most ``depth`` steps, checking every visited state.

    Policy:

    1. One ``random.Random(seed)`` drives every choice (initial state, then one enabled step per
       state, uniformly), so a seed reproduces the run exactly.
    2. Each visited state is checked against every invariant; with ``check_deadlock`` a state
       with no successor that is neither terminal, quiescent by bound nor recovered is a deadlock.
       A walk ends at its depth, at a state outside ``within_bounds`` or at a state with no
       successor.
    3. The first violation stops the simulation; its trace is minimised
       (:func:`~tent_models.checker._trace.minimise`) before it is reported.
    4. Witnesses are reported satisfied with a minimised trace when a walk met them; an unmet
       witness or an action that never fired is *not* a failure (the run is not exhaustive).

    Inside :func:`~tent_models.checker.on_ray` the walks run instead as a swarm
    (:func:`~tent_models.checker.swarm`): the engine's task count, ``walks`` split over them,
    each with its own seed, action bias and depth bound up to ``depth``.

    Raises :class:`InvalidArgument` for ``walks < 1`` or ``depth < 0`` (nothing ran) and
    :class:`ModelContractError` when the model has no initial state.
    """
    if walks < 1:
        raise InvalidArgument(f"walks must be >= 1, got {walks}")
    if depth < 0:
        raise InvalidArgument(f"depth must be >= 0, got {depth}")
    engine = current_engine()
    if engine is not None:
        tasks = min(engine.swarm_tasks, walks)
        return swarm(
            model,
            seed=seed,
            tasks=tasks,
            walks=-(-walks // tasks),
            depth=max(depth, 1),
            check_deadlock=check_deadlock,
            ray=engine.address,
        )
    started = time.perf_counter()
    initials = list(model.initial_states())
    if not initials:
        raise ModelContractError(f"model {model.name!r} has no initial state")
    rng = random.Random(seed)
    names = list(model.action_names())
    enabled, fired, new_states = (dict.fromkeys(names, 0) for _ in range(3))
    invariants = list(model.invariants())
    witness_traces: dict[str, tuple[Any, list[ActionInstance]]] = {}
    seen: set[int] = set()
    transitions = 0
    longest = 0
    found: tuple[CounterExample, Any, list[ActionInstance], Callable[[Any], bool]] | None = None

    ends = ends_by_design(model)

    def deadlocked(state: Any) -> bool:
        return (
            model.within_bounds(state)
            and next(iter(model.successors(state)), None) is None
            and not ends(state)
            and not model.recovered(state)
        )

    for _ in range(walks):
        start = initials[rng.randrange(len(initials))]
        state = start
        trace: list[ActionInstance] = []
        seen.add(state_fingerprint(model, model.canonicalize(state)))
        while True:
            for inv in invariants:
                if not inv.holds(state):
                    found = (
                        CounterExample(
                            kind=ViolationKind.INVARIANT, name=inv.name, cites=inv.cites
                        ),
                        start,
                        list(trace),
                        _negation(inv.holds),
                    )
                    break
            if found is not None:
                break
            for wit in model.witnesses():
                if wit.name not in witness_traces and wit.holds(state):
                    witness_traces[wit.name] = (start, list(trace))
            if len(trace) >= depth or not model.within_bounds(state):
                break
            steps = list(model.successors(state))
            for name in {step.action for step in steps}:
                if name not in enabled:
                    raise ModelContractError(
                        f"model {model.name!r}: action {name!r} is not in action_names()"
                    )
                enabled[name] += 1
            if not steps:
                if check_deadlock and deadlocked(state):
                    found = (
                        CounterExample(
                            kind=ViolationKind.DEADLOCK,
                            name="deadlock",
                            detail=DEADLOCK_DETAIL,
                        ),
                        start,
                        list(trace),
                        deadlocked,
                    )
                break
            step = steps[rng.randrange(len(steps))]
            fired[step.action] += 1
            transitions += 1
            trace.append((step.action, tuple(step.args)))
            state = step.state
            fp = state_fingerprint(model, model.canonicalize(state))
            if fp not in seen:
                seen.add(fp)
                new_states[step.action] += 1
        longest = max(longest, len(trace))
        if found is not None:
            break
    seconds = time.perf_counter() - started
    violations: list[CounterExample] = []
    if found is not None:
        template, start, trace, violates = found
        actions = minimise(model, start, trace, violates)
        states = replay(model, actions, initial=start)
        by_name = {inv.name: inv for inv in invariants}
        compared = (
            compared_values(by_name[template.name], states[-1])
            if template.kind is ViolationKind.INVARIANT
            else {}
        )
        violations.append(
            CounterExample(
                kind=template.kind,
                name=template.name,
                cites=template.cites,
                detail=template.detail,
                steps=trace_steps(model, states, actions),
                actions=actions,
                compared=compared,
            )
        )
    witnesses = []
    for wit in model.witnesses():
        if wit.name in witness_traces:
            start, trace = witness_traces[wit.name]
            actions = minimise(model, start, trace, wit.holds)
            shown = trace_steps(model, replay(model, actions, initial=start), actions)
            witnesses.append(WitnessResult(name=wit.name, satisfied=True, steps=shown))
        else:
            witnesses.append(WitnessResult(name=wit.name, satisfied=False))
    exempt = model.unreachable_actions()
    distinct = len(seen)
    return CheckResult(
        model=model.name,
        mode="simulation",
        ok=not violations,
        exhaustive=False,
        distinct_states=distinct,
        transitions=transitions,
        depth=longest,
        seconds=seconds,
        states_per_second=distinct / seconds if seconds > 0 else 0.0,
        bytes_per_state=storage_bytes(distinct, sys.getsizeof(seen)) / distinct,
        collision_probability=collision_probability(distinct),
        collision_probability_tlc=collision_probability_tlc(distinct, transitions),
        symmetry=True,
        workers=1,
        coverage=tuple(
            ActionCoverage(
                action=name,
                enabled=enabled[name],
                fired=fired[name],
                new_states=new_states[name],
                declared_unreachable=name in exempt,
            )
            for name in names
        ),
        witnesses=tuple(witnesses),
        violations=tuple(violations),
    )


def _negation(holds: Callable[[Any], bool]) -> Callable[[Any], bool]:
    def violates(state: Any) -> bool:
        return not holds(state)

    return violates
