"""The serial engine's compact seen table: exact lookups, and runs identical at any size."""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

import pytest
from bag_credit import BagCredit
from tent_models.checker import PlainModel, _seen, check
from tent_models.checker._bfs import explore_serial
from tent_models.checker._seen import SeenTable
from tent_models.configs import CONFIGS, KNOWN_BAD_CONFIGS


def test_entries_are_found_in_recent_and_in_the_archive_alike() -> None:
    table = SeenTable(recent_limit=3)
    fps = [2**64 - 1, 0, 17, 2**63, 5, 99, 12345678901234567]
    for index, fp in enumerate(fps):
        table.update([(fp, index)])
        table.settle()
    assert len(table) == len(fps) and len(table.recent) < 3  # most of it archived
    assert all(table.get(fp) == index for index, fp in enumerate(fps))
    assert table.get(4) is None and 4 not in table and 17 in table
    query = array("Q", [17, 4, 2**64 - 1, 18])
    archived = table.archived(query)
    # an entry still in recent is not reported by archived(), only by get()
    assert [a if a < 0 else fps[a] for a in archived] == [
        fp if table.get(fp) is not None and fp not in table.recent else -1 for fp in query
    ]
    table.settle(force=True)
    assert not table.recent and table.archived(query) == [2, -1, 0, -1]
    assert list(table.keys) == sorted(fps)


def test_an_empty_table_and_a_bad_limit() -> None:
    table = SeenTable()
    assert table.archived(array("Q", [1, 2])) == [-1, -1] and table.get(1) is None
    with pytest.raises(ValueError, match=">= 1"):
        SeenTable(recent_limit=0)


MODELS: dict[str, Callable[[], Any]] = {
    "credit/tiny": CONFIGS["credit/tiny"],
    "bag (footprints)": lambda: BagCredit(max_total=1, max_in_flight=2, max_faults=1),
    "bag (plain)": lambda: PlainModel(BagCredit(max_total=1, max_in_flight=2, max_faults=1)),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_an_archive_settled_every_few_states_gives_the_same_exploration(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = {
        "symmetry": True,
        "max_states": None,
        "check_deadlock": True,
        "check_recoverability": True,
        "progress": None,
    }
    roomy = explore_serial(MODELS[name](), **options)  # type: ignore[arg-type]
    monkeypatch.setattr(_seen, "RECENT_LIMIT", 7)
    tight = explore_serial(MODELS[name](), **options)  # type: ignore[arg-type]
    assert roomy.distinct_states > 100
    assert list(tight.parent) == list(roomy.parent)
    assert list(tight.action_ids) == list(roomy.action_ids)
    assert (list(tight.edge_src), list(tight.edge_dst)) == (
        list(roomy.edge_src),
        list(roomy.edge_dst),
    )
    assert (tight.transitions, tight.depth, tight.fired, tight.enabled) == (
        roomy.transitions,
        roomy.depth,
        roomy.fired,
        roomy.enabled,
    )


def test_a_violation_found_through_the_archive_has_the_same_shortest_trace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bad = KNOWN_BAD_CONFIGS["no_epoch_fence_on_restart"]
    roomy = check(bad())
    monkeypatch.setattr(_seen, "RECENT_LIMIT", 5)
    tight = check(bad())
    assert not tight.ok
    assert [(v.name, v.actions) for v in tight.violations] == [
        (v.name, v.actions) for v in roomy.violations
    ]


def test_archived_states_cost_a_fraction_of_a_dict_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    in_dict = check(CONFIGS["credit/tiny"]())  # 3,566 states: all of them stay in recent
    monkeypatch.setattr(_seen, "RECENT_LIMIT", 64)
    archived = check(CONFIGS["credit/tiny"]())
    assert archived.distinct_states == in_dict.distinct_states
    # 12 B archived per state, parent + action id + flag 9 B, ≈ 26 B of recoverability edges
    assert archived.bytes_per_state < 80
    assert in_dict.bytes_per_state > 115


def test_a_shard_table_adds_numbers_and_drops_in_batches() -> None:
    import numpy as np
    from tent_models.checker._seen import MISSING, UNNUMBERED, ShardSeen

    table = ShardSeen()
    fps = np.array([2**64 - 1, 17, 5, 2**63], dtype=np.uint64)
    assert table.lookup(fps).tolist() == [MISSING] * 4 and not table.contains(fps).any()
    table.add(fps[:2])  # won this level: not numbered yet
    table.add(fps[2:], np.array([7, 8], dtype=np.int64))  # seeded with their indices
    assert len(table) == 4 and list(table.keys) == sorted(fps.tolist())
    assert table.lookup(fps).tolist() == [UNNUMBERED, UNNUMBERED, 7, 8]
    # the generator's numbering arrives; an index below 0 is a state cut by max_states
    table.number(fps[:2], np.array([3, -1], dtype=np.int64))
    assert table.lookup(fps).tolist() == [3, MISSING, 7, 8] and len(table) == 3
    assert table.contains(np.array([5, 6], dtype=np.uint64)).tolist() == [True, False]
    with pytest.raises(ValueError, match="does not hold"):
        table.number(np.array([6], dtype=np.uint64), np.array([1], dtype=np.int64))
    assert table.nbytes() == 3 * 12
