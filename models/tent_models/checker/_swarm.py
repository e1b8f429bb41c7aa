"""Swarm verification: many diversified seeded random walks, merged into one report.

SPIN's swarm idea for models too big to exhaust: instead of one long search, run many small
searches that each explore differently, in parallel, and merge what they saw. Each task here
is a batch of random walks with its own

* seed (``random.Random(f"{seed}:{task}")``: reproducible, independent per task),
* action bias (a weight ``2**u``, ``u`` uniform in [-2, 2], per action name: walks of one task
  favour some actions, so different tasks reach different corners),
* depth bound (uniform in [``depth // 4``, ``depth``], at least 1).

Policy (per walk as :func:`~tent_models.checker.simulate`): every visited state is checked
against every invariant; a state with no successor that is neither terminal, quiescent by bound nor
recovered is a deadlock (with ``check_deadlock``); a walk ends at its depth, outside
``within_bounds`` or where nothing is enabled; a task stops at its first violation.

Merging (in task order, so the report depends only on the arguments): distinct states are the
union of the tasks' fingerprints; a state's ``new_states`` credit goes to the action that
first reached it in the lowest task; ``enabled``/``fired`` add up; the reported violation is
the lowest task's, its trace minimised; each witness keeps the shortest trace any task found,
minimised. Nothing is exhaustive: unmet witnesses and actions that never fired are listed,
not failures. Tasks run as Ray tasks when a Ray address is given, else one after another here.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from typing import Any

import attrs

from tent_models.checker._bfs import state_fingerprint, storage_bytes
from tent_models.checker._errors import CheckerError, InvalidArgument, ModelContractError
from tent_models.checker._fingerprint import collision_probability, collision_probability_tlc
from tent_models.checker._ray import connect
from tent_models.checker._result import (
    DEADLOCK_DETAIL,
    ActionCoverage,
    CheckResult,
    CounterExample,
    ViolationKind,
    WitnessResult,
)
from tent_models.checker._trace import ActionInstance, minimise, replay, trace_steps
from tent_models.model_api import SpecModel, ends_by_design

__all__ = ["TaskReport", "run_task", "swarm"]


@attrs.frozen(kw_only=True)
class TaskReport:
    """What one swarm task saw (internal; crosses the Ray boundary pickled)."""

    task: int
    depth_bound: int
    enabled: dict[str, int]
    fired: dict[str, int]
    firsts: list[tuple[int, str | None]]  # (fingerprint, action that reached it; None: initial)
    transitions: int
    longest: int
    violation: tuple[str, str, str, str, Any, list[ActionInstance]] | None
    witnesses: dict[str, tuple[Any, list[ActionInstance]]]


def _plan(seed: int, task: int, depth: int, names: list[str]) -> tuple[random.Random, int, Any]:
    rng = random.Random(f"{seed}:{task}")
    bound = rng.randint(max(1, depth // 4), max(1, depth))
    weights = {name: 2.0 ** rng.uniform(-2.0, 2.0) for name in names}
    return rng, bound, weights


def run_task(
    model: SpecModel[Any], *, seed: int, task: int, walks: int, depth: int, check_deadlock: bool
) -> TaskReport:
    """Run one swarm task (module docstring); raises :class:`ModelContractError` on a model
    without initial states or with an undeclared action."""
    names = list(model.action_names())
    ends = ends_by_design(model)
    rng, bound, weights = _plan(seed, task, depth, names)
    initials = list(model.initial_states())
    if not initials:
        raise ModelContractError(f"model {model.name!r} has no initial state")
    enabled, fired = dict.fromkeys(names, 0), dict.fromkeys(names, 0)
    invariants = list(model.invariants())
    witnesses = list(model.witnesses())
    witness_traces: dict[str, tuple[Any, list[ActionInstance]]] = {}
    seen: set[int] = set()
    firsts: list[tuple[int, str | None]] = []
    transitions = longest = 0
    violation: tuple[str, str, str, str, Any, list[ActionInstance]] | None = None

    def visit(state: Any, action: str | None) -> None:
        fp = state_fingerprint(model, model.canonicalize(state))
        if fp not in seen:
            seen.add(fp)
            firsts.append((fp, action))

    for _ in range(walks):
        start = initials[rng.randrange(len(initials))]
        state = start
        trace: list[ActionInstance] = []
        visit(state, None)
        while violation is None:
            broken = next((inv for inv in invariants if not inv.holds(state)), None)
            if broken is not None:
                violation = ("invariant", broken.name, broken.cites, "", start, list(trace))
                break
            for wit in witnesses:
                held = witness_traces.get(wit.name)
                if (held is None or len(held[1]) > len(trace)) and wit.holds(state):
                    witness_traces[wit.name] = (start, list(trace))
            if len(trace) >= bound or not model.within_bounds(state):
                break
            steps = list(model.successors(state))
            for name in {step.action for step in steps}:
                if name not in enabled:
                    raise ModelContractError(
                        f"model {model.name!r}: action {name!r} is not in action_names()"
                    )
                enabled[name] += 1
            if not steps:
                if check_deadlock and not ends(state) and not model.recovered(state):
                    detail = DEADLOCK_DETAIL
                    violation = ("deadlock", "deadlock", "", detail, start, list(trace))
                break
            step = rng.choices(steps, weights=[weights[s.action] for s in steps])[0]
            fired[step.action] += 1
            transitions += 1
            trace.append((step.action, tuple(step.args)))
            state = step.state
            visit(state, step.action)
        longest = max(longest, len(trace))
        if violation is not None:
            break
    return TaskReport(
        task=task,
        depth_bound=bound,
        enabled=enabled,
        fired=fired,
        firsts=firsts,
        transitions=transitions,
        longest=longest,
        violation=violation,
        witnesses=witness_traces,
    )


def swarm(
    model: SpecModel[Any],
    *,
    seed: int,
    tasks: int,
    walks: int,
    depth: int,
    check_deadlock: bool = True,
    ray: str | None = None,
) -> CheckResult:
    """Run ``tasks`` diversified tasks of ``walks`` random walks each and merge them.

    ``ray`` (an address as for :func:`~tent_models.checker.check`) runs the tasks as Ray
    tasks; without it they run here, one after another, with the same result. Raises
    :class:`InvalidArgument` for ``tasks``/``walks``/``depth`` < 1 (before running) or when
    Ray is missing or unreachable, :class:`CheckerError` when a Ray task fails and
    :class:`ModelContractError` when the model breaks its contract.
    """
    for label, value in (("tasks", tasks), ("walks", walks), ("depth", depth)):
        if value < 1:
            raise InvalidArgument(f"{label} must be >= 1, got {value}")
    started = time.perf_counter()
    options = {"seed": seed, "walks": walks, "depth": depth, "check_deadlock": check_deadlock}
    if ray is None:
        reports = [run_task(model, task=task, **options) for task in range(tasks)]  # type: ignore[arg-type]
    else:
        reports = _on_ray(model, ray, tasks, options)
    return _merge(model, reports, seconds=time.perf_counter() - started)


def _on_ray(model: SpecModel[Any], address: str, tasks: int, options: dict[str, Any]) -> list[Any]:
    ray = connect(address)
    remote = ray.remote(num_cpus=1)(run_task)
    model_ref = ray.put(model)
    refs = [remote.remote(model_ref, task=task, **options) for task in range(tasks)]
    try:
        return list(ray.get(refs))
    except ray.exceptions.RayError as exc:
        raise CheckerError(f"a Ray swarm task failed:\n{exc}") from exc


def _merge(model: SpecModel[Any], reports: list[TaskReport], *, seconds: float) -> CheckResult:
    names = list(model.action_names())
    enabled, fired, new_states = (dict.fromkeys(names, 0) for _ in range(3))
    first_action: dict[int, str | None] = {}
    transitions = longest = 0
    for report in sorted(reports, key=lambda r: r.task):
        for name in names:
            enabled[name] += report.enabled[name]
            fired[name] += report.fired[name]
        for fp, action in report.firsts:
            first_action.setdefault(fp, action)
        transitions += report.transitions
        longest = max(longest, report.longest)
    for action in first_action.values():
        if action is not None:
            new_states[action] += 1
    ordered = sorted(reports, key=lambda r: r.task)
    violations: list[CounterExample] = []
    found = next((r.violation for r in ordered if r.violation is not None), None)
    if found is not None:
        kind, name, cites, detail, start, trace = found
        violates = _violation_predicate(model, kind, name)
        actions = minimise(model, start, trace, violates)
        states = replay(model, actions, initial=start)
        violations.append(
            CounterExample(
                kind=ViolationKind(kind),
                name=name,
                cites=cites,
                detail=detail,
                steps=trace_steps(model, states, actions),
                actions=actions,
            )
        )
    witnesses = []
    for wit in model.witnesses():
        traces = [r.witnesses[wit.name] for r in ordered if wit.name in r.witnesses]
        if not traces:
            witnesses.append(WitnessResult(name=wit.name, satisfied=False))
            continue
        start, trace = min(traces, key=lambda item: len(item[1]))
        actions = minimise(model, start, trace, wit.holds)
        shown = trace_steps(model, replay(model, actions, initial=start), actions)
        witnesses.append(WitnessResult(name=wit.name, satisfied=True, steps=shown))
    exempt = model.unreachable_actions()
    distinct = len(first_action)
    return CheckResult(
        model=model.name,
        mode="swarm",
        ok=not violations,
        exhaustive=False,
        distinct_states=distinct,
        transitions=transitions,
        depth=longest,
        seconds=seconds,
        states_per_second=distinct / seconds if seconds > 0 else 0.0,
        bytes_per_state=storage_bytes(distinct, sys.getsizeof(first_action)) / max(distinct, 1),
        collision_probability=collision_probability(distinct),
        collision_probability_tlc=collision_probability_tlc(distinct, transitions),
        symmetry=True,
        workers=len(reports),
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


def _violation_predicate(model: SpecModel[Any], kind: str, name: str) -> Callable[[Any], bool]:
    if kind == "invariant":
        holds = next(inv.holds for inv in model.invariants() if inv.name == name)
        return lambda state: not holds(state)

    ends = ends_by_design(model)

    def deadlocked(state: Any) -> bool:
        return (
            model.within_bounds(state)
            and next(iter(model.successors(state)), None) is None
            and not ends(state)
            and not model.recovered(state)
        )

    return deadlocked
