"""The multi-process checker gives exactly the single-process result."""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tent_models import Witness
from tent_models.checker import CheckResult, check
from toy_models import IDLE, WAITING, Counter, CreditToy, Mutex


def comparable(result: CheckResult) -> CheckResult:
    """Drop what legitimately differs between runs: timing, storage, the worker count and the
    shards' sizes."""
    return attrs.evolve(
        result,
        seconds=0.0,
        states_per_second=0.0,
        bytes_per_state=0.0,
        workers=0,
        shard_states=(),
    )


MODELS = [
    pytest.param(CreditToy, id="credit-ok"),
    pytest.param(lambda: CreditToy(variant="additive"), id="credit-additive-bug"),
    pytest.param(lambda: CreditToy(variant="delta", dups=0), id="credit-delta-leak"),
    pytest.param(lambda: Mutex(4), id="mutex"),
    pytest.param(lambda: Mutex(3, vacuous_witness=True), id="mutex-vacuous"),
    pytest.param(lambda: Counter(4, recovered_at=None, quiescent_at_limit=False), id="deadlock"),
    pytest.param(lambda: Counter(10, constraint=4, recovered_at=None), id="constraint"),
]


@pytest.mark.parametrize("factory", MODELS)
@pytest.mark.parametrize("workers", [2, 3])
def test_parallel_result_equals_serial(factory: Callable[[], Any], workers: int) -> None:
    serial = check(factory())
    parallel = check(factory(), workers=workers)
    assert comparable(parallel) == comparable(serial)
    assert parallel.workers == workers
    assert len(parallel.shard_states) == workers
    assert sum(parallel.shard_states) == serial.distinct_states
    assert serial.shard_states == ()


@pytest.mark.parametrize("symmetry", [True, False])
def test_parallel_symmetry_counts_match_serial(symmetry: bool) -> None:
    serial = check(Mutex(4), symmetry=symmetry)
    parallel = check(Mutex(4), symmetry=symmetry, workers=2)
    assert parallel.distinct_states == serial.distinct_states == (9 if symmetry else 48)


def test_parallel_max_states_cut_keeps_the_same_states() -> None:
    serial = check(CreditToy(), max_states=500)
    parallel = check(CreditToy(), max_states=500, workers=2)
    assert parallel.distinct_states == serial.distinct_states == 500
    assert (parallel.exhaustive, parallel.ok) == (serial.exhaustive, serial.ok) == (False, True)
    # the states won but cut are dropped from their owners' seen sets again
    assert sum(parallel.shard_states) == 500


def test_edge_targets_resolve_in_query_order_and_unknown_ones_are_refused() -> None:
    import numpy as np
    from tent_models.checker._errors import CheckerError
    from tent_models.checker._shard import indices_of

    table = (np.array([3, 10, 42, 99], dtype=np.uint64), np.array([7, 0, 5, 2], dtype=np.int64))
    queries = np.array([99, 3, 42, 99, 10], dtype=np.uint64)
    assert indices_of(table, queries).tolist() == [2, 7, 5, 2, 0]
    assert indices_of(table, np.empty(0, dtype=np.uint64)).tolist() == []
    for bad in ([11], [100], [1]):  # between, past and before the stored fingerprints
        with pytest.raises(CheckerError):
            indices_of(table, np.array(bad, dtype=np.uint64))
    unnumbered = (np.array([3], dtype=np.uint64), np.array([-1], dtype=np.int64))
    with pytest.raises(CheckerError):
        indices_of(unnumbered, np.array([3], dtype=np.uint64))


def test_balance_plan_keeps_frontiers_contiguous_and_evens_them_out() -> None:
    """The serial numbering follows from per-worker counts only while every worker's
    frontier is a run of consecutive states below the next worker's: a plan must keep the
    concatenation in worker order unchanged."""
    from tent_models.checker._shard import split_contiguous

    assert split_contiguous([500, 480]) is None
    assert split_contiguous([10, 0]) is None  # too few states to be worth a move
    for sizes in ([1000, 0, 200], [0, 0, 0, 900], [300, 5, 700, 1]):
        plan = split_contiguous(sizes)
        assert plan is not None
        frontiers, start = [], 0
        for size in sizes:
            frontiers.append(list(range(start, start + size)))
            start += size
        # apply the plan as Worker._balance does: slices to send, the rest kept in place
        sent = {}
        kept = []
        for worker, (sends, _sources) in enumerate(plan):
            low, high = 0, len(frontiers[worker])
            for target, begin, stop in sends:
                sent[(worker, target)] = frontiers[worker][begin:stop]
                if target < worker:
                    low = max(low, stop)
                else:
                    high = min(high, begin)
            kept.append(frontiers[worker][low:high])
        after = []
        for worker, (_sends, sources) in enumerate(plan):
            assert set(sources) == {w for (w, t) in sent if t == worker}
            below = [x for w in sorted(sources) if w < worker for x in sent[(w, worker)]]
            above = [x for w in sorted(sources) if w > worker for x in sent[(w, worker)]]
            after.append(below + kept[worker] + above)
        assert [x for part in after for x in part] == list(range(sum(sizes)))
        assert max(map(len, after)) - min(map(len, after)) <= 1


def test_one_initial_state_gives_the_serial_result_and_a_split_seen_set() -> None:
    """One initial state: every state starts with worker 0 and reaches worker 1 only by
    rebalancing; the result and the seen set's split must not depend on it."""
    serial = check(CreditToy())
    parallel = check(CreditToy(), workers=2)
    assert comparable(parallel) == comparable(serial)
    assert sum(parallel.shard_states) == serial.distinct_states
    assert all(size < serial.distinct_states for size in parallel.shard_states)


class _CountedMutex(Mutex):
    """A witness that counts its evaluations in memory the forked workers share."""

    def __init__(self, processes: int, calls: Any) -> None:
        super().__init__(processes)
        self.calls = calls

    def witnesses(self) -> Any:
        calls = self.calls

        def one_waiting(state: tuple[int, ...]) -> bool:  # true only on the first level
            with calls.get_lock():
                calls.value += 1
            return sorted(state) == [IDLE] * (self.processes - 1) + [WAITING]

        return [Witness("OneWaiting", one_waiting)]


def test_a_worker_stops_evaluating_a_witness_it_has_met() -> None:
    calls = multiprocessing.get_context("fork").Value("q", 0)
    serial = check(_CountedMutex(7, calls), symmetry=False)
    serial_calls = calls.value
    calls.value = 0
    parallel = check(_CountedMutex(7, calls), symmetry=False, workers=2)
    assert comparable(parallel) == comparable(serial)
    assert parallel.witnesses == serial.witnesses  # the same shortest witness
    # each shard evaluates it until its own first hit, as the serial loop does until its one
    # (a checker per level re-evaluated it on every later state: 575 of the 576)
    assert serial_calls == 2  # the initial state, then the first state of level 1
    assert calls.value <= serial_calls + 2, (calls.value, serial.distinct_states)


def test_traces_walk_back_across_the_shards_that_hold_each_link() -> None:
    """A counterexample's links are spread over the workers that found its states; each
    worker answers only for its own, and the walk back asks every level in one round."""
    from tent_models.checker._errors import CheckerError
    from tent_models.checker._parallel import explore_parallel

    options = {
        "symmetry": True,
        "max_states": None,
        "check_deadlock": True,
        "check_recoverability": True,
        "progress": None,
    }
    serial = check(CreditToy(variant="additive"))
    asked: list[list[int]] = []
    with explore_parallel(CreditToy(variant="additive"), workers=3, **options) as record:  # type: ignore[arg-type]
        links = record.links
        assert links is not None

        def counted(indices: Any) -> Any:
            asked.append(list(indices))
            return links(indices)

        record.links = counted
        (hit,) = record.invariant_hits.values()
        _initial, actions = record.path(hit)
    (violation,) = [v for v in serial.violations if v.kind == "invariant"]
    assert tuple(actions) == violation.actions
    assert len(asked) == len(actions)  # one round per step walked back, each one index
    assert all(len(round_) == 1 for round_ in asked)
    # a worker refuses a link it does not hold
    from tent_models.checker._shard import Worker

    worker = Worker.__new__(Worker)
    worker.blocks = [(10, 0, 5)]
    with pytest.raises(CheckerError):
        worker.links([15])
    with pytest.raises(CheckerError):
        worker.links([9])


def test_the_shards_storage_counts_every_state_and_edge_within_half_again_the_serial() -> None:
    """Per state a shard holds 12 bytes of seen set, 8 of parent link and 1 of flags, and 12
    per recoverability edge: summed over the workers that is within 1.5x of the serial
    engine's steady figure (12 + 9 per state, 8 per edge), and no part is left uncounted."""
    from tent_models.checker._bfs import explore_serial
    from tent_models.checker._parallel import explore_parallel

    options = {
        "symmetry": True,
        "max_states": None,
        "check_deadlock": True,
        "check_recoverability": True,
        "progress": None,
    }
    serial = explore_serial(CreditToy(), **options)  # type: ignore[arg-type]
    states, edges = serial.distinct_states, len(serial.edge_src)
    assert edges > states  # the edges are most of it
    for workers in (2, 3):
        with explore_parallel(CreditToy(), workers=workers, **options) as parallel:  # type: ignore[arg-type]
            assert len(parallel.edge_src) == edges
            held = parallel.storage_bytes
        assert 21 * states + 12 * edges <= held <= 1.5 * (21 * states + 8 * edges)
