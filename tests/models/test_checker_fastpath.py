"""A model's optional fast path gives the checker exactly the result of its plain methods.

``fingerprinted_successors``, ``fingerprint`` and ``invariants_hold`` are optional: a model
without them is explored through ``successors`` + ``canonicalize`` + ``pack`` and every named
invariant. The credit spec has all three; hiding them must not change a single state index,
parent link, recorded action, coverage count, witness or counterexample.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
from tent_models.checker import FAST_PATH_METHODS, CheckResult, PlainModel, check
from tent_models.checker._bfs import cyclic_gc_paused, explore_serial
from tent_models.checker._fastpath import expander, fingerprinter
from tent_models.configs import CONFIGS, KNOWN_BAD_CONFIGS


def comparable(result: CheckResult) -> CheckResult:
    return attrs.evolve(result, seconds=0.0, states_per_second=0.0, bytes_per_state=0.0)


def test_the_credit_spec_offers_every_fast_path_method() -> None:
    model = CONFIGS["credit/tiny"]()
    assert all(callable(getattr(model, name, None)) for name in FAST_PATH_METHODS)
    plain = PlainModel(model)
    assert all(not hasattr(plain, name) for name in FAST_PATH_METHODS)


@pytest.mark.parametrize(
    "factory",
    [
        pytest.param(CONFIGS["credit/tiny"], id="credit/tiny"),
        *(pytest.param(KNOWN_BAD_CONFIGS[name], id=name) for name in sorted(KNOWN_BAD_CONFIGS)),
    ],
)
def test_exploration_with_and_without_the_fast_path_is_identical(
    factory: Callable[[], Any],
) -> None:
    fast = explore_serial(
        factory(),
        symmetry=True,
        max_states=None,
        check_deadlock=True,
        check_recoverability=True,
        progress=None,
    )
    plain = explore_serial(
        PlainModel(factory()),
        symmetry=True,
        max_states=None,
        check_deadlock=True,
        check_recoverability=True,
        progress=None,
    )
    assert list(fast.parent) == list(plain.parent)
    assert list(fast.action_ids) == list(plain.action_ids)
    assert fast.action_table == plain.action_table
    assert (list(fast.edge_src), list(fast.edge_dst)) == (
        list(plain.edge_src),
        list(plain.edge_dst),
    )
    assert (fast.invariant_hits, fast.witness_hits, fast.deadlock) == (
        plain.invariant_hits,
        plain.witness_hits,
        plain.deadlock,
    )
    assert (fast.enabled, fast.fired, fast.new_states) == (
        plain.enabled,
        plain.fired,
        plain.new_states,
    )


@pytest.mark.parametrize("name", ["credit/tiny", "credit/bad/equal_sequence_accepted"])
def test_check_results_with_and_without_the_fast_path_are_equal(name: str) -> None:
    factory = CONFIGS.get(name) or KNOWN_BAD_CONFIGS[name.removeprefix("credit/bad/")]
    fast = check(factory())
    plain = check(PlainModel(factory()))
    assert comparable(fast) == comparable(plain)


def test_parallel_exploration_uses_the_fast_path_with_the_serial_result() -> None:
    serial = check(CONFIGS["credit/tiny"]())
    parallel = check(CONFIGS["credit/tiny"](), workers=2)
    assert attrs.evolve(comparable(parallel), workers=1, shard_states=()) == comparable(serial)
    assert sum(parallel.shard_states) == serial.distinct_states


def test_without_symmetry_the_fused_expansion_is_not_used() -> None:
    model = CONFIGS["credit/tiny"]()
    state = next(iter(model.initial_states()))
    expand = expander(model, symmetry=False)
    fingerprint_of = fingerprinter(model)
    assert [(a, args, nxt, fp) for a, args, nxt, fp in expand(state)] == [
        (st.action, st.args, st.state, fingerprint_of(st.state)) for st in model.successors(state)
    ]


def test_the_collector_is_paused_only_during_an_exploration() -> None:
    import gc

    assert gc.isenabled()
    with cyclic_gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with cyclic_gc_paused():
            pass
        assert not gc.isenabled()  # a caller's own choice is restored, not overridden
    finally:
        gc.enable()


def test_memo_tables_cleared_mid_run_change_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """With tiny memo tables (cleared every few dozen entries) canonical states keep arriving
    as objects the memos no longer know: the fast path must fall back, not go wrong."""
    from tent_spec.credit import _fastpath

    expected = comparable(check(PlainModel(CONFIGS["credit/tiny"]())))
    monkeypatch.setattr(_fastpath, "_CACHE_LIMIT", 37)
    model = CONFIGS["credit/tiny"]()
    assert comparable(check(model)) == expected
    # the small limit was in force: no memo table outgrew it (3,566 states would fill them)
    used = (model._canon_cache, model._check_cache, model._summary_cache, model._interned)
    assert all(0 < len(memo) <= 37 for memo in used)
    assert all(len(memo) <= 37 for memo in (model._canon_steps, model._steps_cache))


def test_parallel_cut_of_credit_ci_numbers_every_state_as_the_serial_run() -> None:
    """Two workers ship states to each other (interned on arrival) and number their new
    states from per-shard counts alone: every parent link and action the shards hold must be
    the serial run's, state by state."""
    from tent_models.checker._parallel import explore_parallel

    options = {
        "symmetry": True,
        "max_states": 20_000,
        "check_deadlock": True,
        "check_recoverability": False,
        "progress": None,
    }
    serial = explore_serial(CONFIGS["credit/ci"](), **options)  # type: ignore[arg-type]
    with explore_parallel(CONFIGS["credit/ci"](), workers=2, **options) as parallel:  # type: ignore[arg-type]
        assert parallel.distinct_states == serial.distinct_states == 20_000
        assert parallel.links is not None
        initial = len(parallel.parent)
        links = parallel.links(range(initial, 20_000))
    assert list(parallel.parent) == list(serial.parent[:initial])
    assert [parent for parent, _ in links] == list(serial.parent[initial:])
    assert [action for _, action in links] == [
        serial.action_table[a] for a in serial.action_ids[initial:]
    ]
