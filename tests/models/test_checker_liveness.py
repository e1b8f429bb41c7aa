"""The backward search of the recoverability check against a plain reference on random graphs."""

from __future__ import annotations

from array import array
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tent_models.checker import _liveness
from tent_models.checker._liveness import _reversed_adjacency, recoverable_states


def reference(count: int, good: bytearray, src: list[int], dst: list[int]) -> bytearray:
    into: list[list[int]] = [[] for _ in range(count)]
    for a, b in zip(src, dst, strict=True):
        into[b].append(a)
    reached = bytearray(good)
    queue = deque(i for i in range(count) if reached[i])
    while queue:
        for a in into[queue.popleft()]:
            if not reached[a]:
                reached[a] = 1
                queue.append(a)
    return reached


@st.composite
def graphs(draw: st.DrawFn) -> tuple[int, bytearray, list[int], list[int]]:
    count = draw(st.integers(1, 40))
    good = bytearray(draw(st.lists(st.sampled_from([0, 0, 0, 1]), min_size=count, max_size=count)))
    edges = draw(st.lists(st.tuples(st.integers(0, count - 1), st.integers(0, count - 1))))
    return count, good, [a for a, _ in edges], [b for _, b in edges]


@settings(max_examples=200, deadline=None)
@given(graphs())
def test_the_reached_states_are_the_references(
    graph: tuple[int, bytearray, list[int], list[int]],
) -> None:
    count, good, src, dst = graph
    before = bytes(good)
    got = recoverable_states(count, good, array("I", src), array("I", dst))
    assert got == reference(count, good, src, dst)
    assert bytes(good) == before  # the inputs are not modified


@settings(max_examples=200, deadline=None)
@given(graphs(), st.integers(1, 5))
def test_the_reversed_adjacency_built_in_small_chunks_lists_every_edge(
    graph: tuple[int, bytearray, list[int], list[int]], chunk: int
) -> None:
    """The counting sort places each chunk after the previous ones: with chunks of 1-5 edges
    every target's row holds exactly its sources, in edge order."""
    count, _good, src, dst = graph
    saved = _liveness._CHUNK
    _liveness._CHUNK = chunk
    try:
        start, sources = _reversed_adjacency(
            count, np.array(src, dtype=np.uint32), np.array(dst, dtype=np.uint32)
        )
    finally:
        _liveness._CHUNK = saved
    for v in range(count):
        row = sources[start[v] : start[v + 1]].tolist()
        assert row == [a for a, b in zip(src, dst, strict=True) if b == v]


def test_a_chain_is_reached_back_to_its_start_and_a_dead_end_is_not() -> None:
    # 0 -> 1 -> 2 (goal), 3 -> 3 (a loop away from the goal)
    got = recoverable_states(
        4, bytearray([0, 0, 1, 0]), array("I", [0, 1, 3]), array("I", [1, 2, 3])
    )
    assert got == bytearray([1, 1, 1, 0])


def test_a_flag_count_that_is_not_the_state_count_is_refused() -> None:
    with pytest.raises(ValueError, match="goal flags"):
        recoverable_states(3, bytearray([1]), array("I"), array("I"))
