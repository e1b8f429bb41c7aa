"""Per-component memoisation (declared footprints) gives exactly the plain path's exploration.

``tests/models/bag_credit.py`` is a readable user-style model with ``footprints`` and
``action_successors``; ``PlainModel`` hides both. The two explorations must agree on every
state index, parent link, action, edge, coverage count and counterexample; a footprint that
lies about what an action writes is a contract error, and a model that lies about what it
reads is caught by the cross-check.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from bag_credit import BagCredit, Grant, World
from tent_models.checker import CheckResult, ModelContractError, PlainModel, check
from tent_models.checker._bfs import explore_serial
from tent_models.checker._components import ComponentEngine, encode, has_components
from tent_models.checker._fastpath import fingerprinter
from tent_models.model_api import Footprint

TINY = {"max_total": 1, "max_in_flight": 2, "max_faults": 1}


def comparable(result: CheckResult) -> CheckResult:
    return attrs.evolve(result, seconds=0.0, states_per_second=0.0, bytes_per_state=0.0)


def explore(model: Any) -> Any:
    return explore_serial(
        model,
        symmetry=True,
        max_states=None,
        check_deadlock=True,
        check_recoverability=True,
        progress=None,
    )


@pytest.mark.parametrize("bounds", [TINY, {**TINY, "fence": False}], ids=["ok", "no-fence"])
def test_footprint_exploration_equals_the_plain_path(bounds: dict[str, Any]) -> None:
    memo, plain = explore(BagCredit(**bounds)), explore(PlainModel(BagCredit(**bounds)))
    assert len(memo.parent) == len(plain.parent) > 100
    assert list(memo.parent) == list(plain.parent)
    assert [memo.action_table[a] for a in memo.action_ids] == [
        plain.action_table[a] for a in plain.action_ids
    ]
    assert (list(memo.edge_src), list(memo.edge_dst)) == (
        list(plain.edge_src),
        list(plain.edge_dst),
    )
    assert (memo.enabled, memo.fired, memo.new_states) == (
        plain.enabled,
        plain.fired,
        plain.new_states,
    )
    assert (memo.invariant_hits, memo.witness_hits) == (plain.invariant_hits, plain.witness_hits)


def test_check_results_are_equal_and_the_known_bad_variant_is_refuted() -> None:
    assert comparable(check(BagCredit(**TINY))) == comparable(check(PlainModel(BagCredit(**TINY))))
    bad = check(BagCredit(**TINY, fence=False))
    assert not bad.ok
    assert [v.name for v in bad.violations] == ["within_grant"]
    assert comparable(bad) == comparable(check(PlainModel(BagCredit(**TINY, fence=False))))


def test_the_fingerprint_is_a_function_of_the_value_only() -> None:
    model = BagCredit(**TINY)
    (initial,) = model.initial_states()
    a = fingerprinter(model)
    b = ComponentEngine(BagCredit(**TINY)).fingerprint  # fresh tables, fresh objects
    rebuilt = World(
        initial.receiver.__class__(**vars(initial.receiver)),
        tuple(s.__class__(**vars(s)) for s in initial.senders),
        frozenset(),
        0,
    )
    assert a(initial) == b(rebuilt) == a(rebuilt)
    states = [step.state for step in model.successors(initial)]
    assert len({a(s) for s in states}) == len(set(states))


def test_encode_is_injective_across_containers_and_set_order() -> None:
    assert encode((1, 2)) != encode(frozenset({1, 2}))
    assert encode(((1,), 2)) != encode((1, (2,)))
    assert encode(True) is True  # marshal tells True from 1, as the model's values do
    left = frozenset({("a", 1), ("b", 2), ("c", 3)})
    right = frozenset([("c", 3), ("a", 1), ("b", 2)])
    assert encode(left) == encode(right)
    assert encode(Grant(1, 2)) != encode((1, 2))
    with pytest.raises(ModelContractError, match="cannot encode"):
        encode([1, 2])


class LyingWrites(BagCredit):
    """``grant`` claims to write only ``network``, but its effect changes ``receiver``."""

    def footprints(self) -> Any:
        declared = dict(super().footprints())
        declared["grant"] = Footprint(("receiver",), ("network",))
        return declared


def test_a_step_that_writes_outside_its_footprint_is_a_contract_error() -> None:
    with pytest.raises(ModelContractError, match="outside its footprint"):
        check(LyingWrites(**TINY))


class LyingReads(BagCredit):
    """``send`` claims not to read ``senders``: its memoised steps are reused wrongly."""

    def footprints(self) -> Any:
        declared = dict(super().footprints())
        declared["send"] = Footprint(("network",), ("senders", "network"))
        return declared


def test_a_footprint_that_hides_a_read_is_caught_by_the_plain_cross_check() -> None:
    lying, plain = check(LyingReads(**TINY)), check(PlainModel(LyingReads(**TINY)))
    assert lying.distinct_states != plain.distinct_states


def test_plain_model_hides_the_component_methods() -> None:
    assert has_components(BagCredit())
    assert not has_components(PlainModel(BagCredit()))


def test_a_footprint_naming_an_unknown_field_is_a_contract_error() -> None:
    class Misnamed(BagCredit):
        def footprints(self) -> Any:
            declared = dict(super().footprints())
            declared["grant"] = Footprint(("reciever",), ("reciever",))
            return declared

    with pytest.raises(ModelContractError, match="unknown fields"):
        check(Misnamed(**TINY))
