"""``check``: exhaustive BFS plus the judgements made on the explored graph."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from tent_models.checker._bfs import Exploration, ProgressHook, cyclic_gc_paused, explore_serial
from tent_models.checker._bitstate import omission_probability
from tent_models.checker._errors import InvalidArgument
from tent_models.checker._fingerprint import (
    collision_probability,
    collision_probability_tlc,
)
from tent_models.checker._liveness import recoverable_states
from tent_models.checker._parallel import explore_parallel
from tent_models.checker._ray import current_engine, explore_ray
from tent_models.checker._result import (
    DEADLOCK_DETAIL,
    ActionCoverage,
    CheckResult,
    CounterExample,
    ViolationKind,
    WitnessResult,
)
from tent_models.checker._trace import compared_values, rebuild_trace, trace_steps
from tent_models.model_api import SpecModel

__all__ = ["check"]


def check(
    model: SpecModel[Any],
    *,
    symmetry: bool = True,
    workers: int = 1,
    max_states: int | None = None,
    check_deadlock: bool = True,
    check_recoverability: bool = True,
    progress: bool | ProgressHook = False,
    ray: str | None = None,
    bitstate: int | None = None,
) -> CheckResult:
    """Explore every reachable state of ``model`` breadth-first and judge it.

    What is judged, in order:

    1. every invariant on every reachable state (shortest counterexample per invariant);
    2. deadlocks (no action enabled, not ``is_terminal``, not ``quiescent_by_bound``, not
       ``recovered``) when ``check_deadlock``;
    3. only when the exploration was exhaustive: recoverability (with ``fault_actions``
       disabled, a ``recovered`` state stays reachable from every state; see
       :mod:`~tent_models.checker._liveness`) when ``check_recoverability``, every witness
       satisfied somewhere, and per-action coverage (an action that never fired fails unless
       declared in ``unreachable_actions``; a declared-unreachable action that fired fails too).

    A model whose ``declares_recovery`` attribute is false (a :class:`~tent_models.Model` that
    does not override ``recovered``) has no recovery goal: recoverability is then not judged.
    ``symmetry`` canonicalises each state before fingerprinting; ``workers > 1`` shards the seen
    set over that many processes (identical result); ``max_states`` stops after that many
    distinct states (the result is then not exhaustive); ``progress=True`` shows a rich progress
    line, and a callable ``progress(distinct, transitions, depth)`` is called instead (the
    caller's own display: ``tent check`` keeps one for the whole run).
    ``ray`` (a Ray address: ``auto``, ``ray://host:port``, or ``local`` for a new local
    cluster; an initialised Ray session is reused) shards the seen set over ``workers`` Ray
    actors instead of processes (:mod:`~tent_models.checker._ray`; identical result); inside
    :func:`~tent_models.checker.on_ray` a call without ``ray`` uses that engine.
    ``bitstate`` (log2 of a bit count, 10..40; e.g. 30 = 128 MiB) stores the seen set as a
    bit array (SPIN's bitstate hashing, :mod:`~tent_models.checker._bitstate`): fixed memory,
    but a state may be wrongly taken as seen and omitted; ``collision_probability`` is then
    the expected number of omitted states (capped at 1), and recoverability is not judged.
    Raises :class:`InvalidArgument` for ``workers < 1`` or ``max_states < 1`` (before running),
    for ``bitstate`` outside 10..40 or with ``workers > 1`` or ``ray``,
    or when Ray is missing or unreachable, and :class:`ModelContractError` when the model
    breaks its contract.
    """
    if workers < 1:
        raise InvalidArgument(f"workers must be >= 1, got {workers}")
    engine = current_engine() if ray is None and bitstate is None else None
    if engine is not None:  # inside on_ray: the engine's address and shard count
        ray, workers = engine.address, engine.shards
    if bitstate is not None and not 10 <= bitstate <= 40:
        raise InvalidArgument(f"bitstate must be in 10..40 (log2 of the bits), got {bitstate}")
    if bitstate is not None and (workers > 1 or ray is not None):
        raise InvalidArgument("bitstate runs in one process (no workers, no Ray)")
    if max_states is not None and max_states < 1:
        raise InvalidArgument(f"max_states must be >= 1 when given, got {max_states}")
    check_recoverability = check_recoverability and declares_recovery(model)
    with ExitStack() as stack:
        hook = stack.enter_context(_progress_hook(model.name, enabled=progress))
        stack.enter_context(cyclic_gc_paused())
        if ray is not None:
            # a sharded run's workers serve parent links until the result is built
            record = stack.enter_context(
                explore_ray(
                    model,
                    address=ray,
                    workers=workers,
                    symmetry=symmetry,
                    max_states=max_states,
                    check_deadlock=check_deadlock,
                    check_recoverability=check_recoverability,
                    progress=hook,
                )
            )
        elif workers == 1:
            record = explore_serial(
                model,
                symmetry=symmetry,
                max_states=max_states,
                check_deadlock=check_deadlock,
                check_recoverability=check_recoverability,
                progress=hook,
                bitstate=bitstate,
            )
        else:
            record = stack.enter_context(
                explore_parallel(
                    model,
                    workers=workers,
                    symmetry=symmetry,
                    max_states=max_states,
                    check_deadlock=check_deadlock,
                    check_recoverability=check_recoverability,
                    progress=hook,
                )
            )
        return build_result(
            model,
            record,
            symmetry=symmetry,
            workers=workers,
            check_recoverability=check_recoverability and bitstate is None,
        )


def declares_recovery(model: SpecModel[Any]) -> bool:
    """Whether ``model`` has a recovery goal (true unless it says ``declares_recovery = False``)."""
    return bool(getattr(model, "declares_recovery", True))


@contextmanager
def _progress_hook(name: str, *, enabled: bool | ProgressHook) -> Iterator[ProgressHook | None]:
    if callable(enabled):  # the caller's own display (tent check's): never a second one
        yield enabled
        return
    if not enabled:
        yield None
        return
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), transient=True
    ) as bar:
        task = bar.add_task(name)

        def hook(distinct: int, transitions: int, depth: int) -> None:
            bar.update(
                task,
                description=(
                    f"{name}: {distinct:,} states, {transitions:,} transitions, depth {depth}"
                ),
            )

        yield hook


def _trace_to(
    model: SpecModel[Any], record: Exploration, index: int, *, symmetry: bool
) -> tuple[tuple[Any, ...], tuple[tuple[str, tuple[Any, ...]], ...], Any]:
    initial, recorded = record.path(index)
    states, actions = rebuild_trace(model, initial, recorded, symmetry=symmetry)
    return trace_steps(model, states, actions), tuple(actions), states[-1]


def build_result(
    model: SpecModel[Any],
    record: Exploration,
    *,
    symmetry: bool,
    workers: int,
    check_recoverability: bool,
) -> CheckResult:
    """Turn an exploration record into a :class:`CheckResult` (counterexamples rebuilt here)."""
    # every trace's links at once (a sharded run asks its workers one round per level)
    record.prefetch(
        [*record.invariant_hits.values(), *record.witness_hits.values()]
        + ([] if record.deadlock is None else [record.deadlock])
    )
    violations: list[CounterExample] = []
    for inv in model.invariants():  # in the model's order
        if inv.name in record.invariant_hits:
            steps, actions, last = _trace_to(
                model, record, record.invariant_hits[inv.name], symmetry=symmetry
            )
            violations.append(
                CounterExample(
                    kind=ViolationKind.INVARIANT,
                    name=inv.name,
                    cites=inv.cites,
                    steps=steps,
                    actions=actions,
                    compared=compared_values(inv, last),
                )
            )
    if record.deadlock is not None:
        steps, actions, _ = _trace_to(model, record, record.deadlock, symmetry=symmetry)
        violations.append(
            CounterExample(
                kind=ViolationKind.DEADLOCK,
                name="deadlock",
                steps=steps,
                actions=actions,
                detail=DEADLOCK_DETAIL,
            )
        )
    witness_results: list[WitnessResult] = []
    for wit in model.witnesses():
        hit = record.witness_hits.get(wit.name)
        if hit is None:
            witness_results.append(WitnessResult(name=wit.name, satisfied=False))
            if record.exhaustive:
                violations.append(
                    CounterExample(
                        kind=ViolationKind.WITNESS,
                        name=wit.name,
                        detail="no reachable state satisfies this witness (vacuous model?)",
                    )
                )
        else:
            steps, _, _ = _trace_to(model, record, hit, symmetry=symmetry)
            witness_results.append(WitnessResult(name=wit.name, satisfied=True, steps=steps))
    exempt = model.unreachable_actions()
    coverage = tuple(
        ActionCoverage(
            action=name,
            enabled=record.enabled[name],
            fired=record.fired[name],
            new_states=record.new_states[name],
            declared_unreachable=name in exempt,
        )
        for name in model.action_names()
    )
    if record.exhaustive:
        if check_recoverability:
            violations.extend(_recoverability(model, record, symmetry=symmetry))
        for item in coverage:
            if item.fired == 0 and not item.declared_unreachable:
                violations.append(
                    CounterExample(
                        kind=ViolationKind.COVERAGE,
                        name=item.action,
                        detail="the action never fired and is not declared unreachable",
                    )
                )
            elif item.fired > 0 and item.declared_unreachable:
                violations.append(
                    CounterExample(
                        kind=ViolationKind.COVERAGE,
                        name=item.action,
                        detail=f"declared unreachable but fired {item.fired} times",
                    )
                )
    distinct = record.distinct_states
    return CheckResult(
        model=model.name,
        mode="bfs",
        ok=not violations,
        exhaustive=record.exhaustive,
        distinct_states=distinct,
        transitions=record.transitions,
        depth=record.depth,
        seconds=record.seconds,
        states_per_second=distinct / record.seconds if record.seconds > 0 else 0.0,
        bytes_per_state=record.storage_bytes / distinct,
        collision_probability=(
            min(1.0, distinct * omission_probability(distinct, record.bitstate))
            if record.bitstate
            else collision_probability(distinct)
        ),
        collision_probability_tlc=collision_probability_tlc(distinct, record.transitions),
        symmetry=symmetry,
        workers=workers,
        coverage=coverage,
        witnesses=tuple(witness_results),
        violations=tuple(violations),
        shard_states=tuple(record.shard_states),
        bitstate=record.bitstate,
    )


def _recoverability(
    model: SpecModel[Any], record: Exploration, *, symmetry: bool
) -> list[CounterExample]:
    reached = recoverable_states(
        record.distinct_states, record.good, record.edge_src, record.edge_dst
    )
    stuck = reached.count(0)
    if not stuck:
        return []
    first = reached.index(0)  # BFS order: the shallowest stuck state
    steps, actions, _ = _trace_to(model, record, first, symmetry=symmetry)
    return [
        CounterExample(
            kind=ViolationKind.RECOVERABILITY,
            name="recoverability",
            cites="with faults stopped, a recovered state must stay reachable",
            steps=steps,
            actions=actions,
            detail=f"from the last state no fault-free path reaches a recovered state; "
            f"{stuck} reachable state(s) are stuck",
        )
    ]
