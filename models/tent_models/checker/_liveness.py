"""Recoverability on the explored graph: which states can still reach a recovered state.

Policy:

1. Goal states ("good" seeds): states where ``model.recovered`` holds, plus states outside the
   bounds (``within_bounds`` false). The latter were never expanded, so their future lies beyond
   the model's bounds and the check cannot convict them (an optimistic choice: bounds never
   cause a false alarm).
2. Only non-fault transitions are edges: recoverability asks what happens once faults stop.
3. A state is recoverable when a goal state is reachable from it over those edges; computed by
   one backward breadth-first search from every goal state over the reversed edges.
4. Every reachable state must be recoverable; the first unrecoverable state in BFS order is the
   end of the shortest trace into the stuck region.
"""

from __future__ import annotations

from array import array
from collections import deque

__all__ = ["recoverable_states"]


def recoverable_states(
    state_count: int, good: bytearray, edge_src: array[int], edge_dst: array[int]
) -> bytearray:
    """Return a flag per state (index = BFS order): 1 when a goal state is reachable from it.

    ``good`` flags the goal states; ``edge_src[i] -> edge_dst[i]`` are the non-fault edges. The
    inputs are not modified.
    """
    # reversed adjacency in compressed-row form: rev_targets[rev_start[v]:rev_start[v + 1]]
    # lists the sources of the edges into v
    rev_start = array("Q", bytes(8 * (state_count + 1)))
    for dst in edge_dst:
        rev_start[dst + 1] += 1
    for index in range(state_count):
        rev_start[index + 1] += rev_start[index]
    fill = array("Q", rev_start)
    rev_targets = array("I", bytes(4 * len(edge_dst)))
    for src, dst in zip(edge_src, edge_dst, strict=True):
        rev_targets[fill[dst]] = src
        fill[dst] += 1
    del fill
    reached = bytearray(good)
    queue = deque(index for index in range(state_count) if reached[index])
    while queue:
        node = queue.popleft()
        for position in range(rev_start[node], rev_start[node + 1]):
            src = rev_targets[position]
            if not reached[src]:
                reached[src] = 1
                queue.append(src)
    return reached
