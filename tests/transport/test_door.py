"""The listeners' door (``control/_door``): bounded; the connection idle longest is evicted."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tent_transport.control._door import Door


def _door(limit: int) -> tuple[Door[int], list[int]]:
    evicted: list[int] = []
    door: Door[int] = Door(limit, evicted.append)
    return door, evicted


def test_a_newcomer_past_the_limit_evicts_the_oldest_not_itself() -> None:
    door, evicted = _door(2)
    door.enter(1)
    door.enter(2)
    door.enter(3)  # refusing it instead locks an honest newcomer out of a full door
    assert evicted == [1]
    assert list(door) == [2, 3]
    assert door.evicted == 1


def test_progress_puts_a_connection_back_at_the_end_of_the_line() -> None:
    door, evicted = _door(3)
    for conn in (1, 2, 3):
        door.enter(conn)
    door.advance(1)  # the oldest sent a well-formed hello
    door.enter(4)
    door.enter(5)
    assert evicted == [2, 3]  # although 1 is older
    door.enter(6)
    assert evicted == [2, 3, 1]  # a hello that stalls leaves in its turn
    assert list(door) == [4, 5, 6]


def test_leave_and_advance_of_a_gone_connection_change_nothing() -> None:
    door, evicted = _door(1)
    door.enter(1)
    door.leave(1)
    door.leave(1)
    door.advance(1)
    assert len(door) == 0 and 1 not in door
    door.enter(2)
    assert evicted == [] and list(door) == [2]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_a_bad_limit_is_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        Door(bad, lambda conn: None)  # type: ignore[arg-type]


@given(
    limit=st.integers(1, 6),
    ops=st.lists(st.tuples(st.sampled_from(["enter", "advance", "leave"]), st.integers(0, 15))),
)
def test_a_connection_survives_limit_minus_one_newer_arrivals_after_its_last_progress(
    limit: int, ops: list[tuple[str, int]]
) -> None:
    """The bound and the guarantee: never more than ``limit`` wait, and a connection is
    evicted only once ``limit`` connections entered or made progress after its last progress
    (another's progress puts it behind that one, as an arrival does)."""
    door, evicted = _door(limit)
    since: dict[int, int] = {}  # waiting connection -> arrivals after its last progress
    for op, conn in ops:
        if op == "enter":
            if conn in door:
                continue  # a connection enters once
            before = len(evicted)
            door.enter(conn)
            for other in since:
                since[other] += 1
            since[conn] = 0
            for gone in evicted[before:]:
                assert since.pop(gone) >= limit
        elif op == "advance":
            door.advance(conn)
            if conn in since:
                for other in since:
                    since[other] += 1
                since[conn] = 0
        else:
            door.leave(conn)
            since.pop(conn, None)
        assert len(door) <= limit
        assert set(door) == set(since)
    assert door.evicted == len(evicted)
