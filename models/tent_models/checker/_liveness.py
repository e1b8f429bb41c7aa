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

import numpy as np

__all__ = ["recoverable_states"]


def recoverable_states(
    state_count: int, good: bytearray, edge_src: array[int], edge_dst: array[int]
) -> bytearray:
    """Return a flag per state (index = BFS order): 1 when a goal state is reachable from it.

    ``good`` flags the goal states; ``edge_src[i] -> edge_dst[i]`` are the non-fault edges. The
    inputs are not modified. The backward search runs level by level in numpy: per level, the
    sources of every edge into the last level's states that are not reached yet.
    """
    reached = np.frombuffer(bytes(good), dtype=np.uint8).astype(bool)
    if len(reached) != state_count:
        raise ValueError(f"{len(reached)} goal flags for {state_count} states")
    src = np.frombuffer(edge_src, dtype=np.uint32)
    dst = np.frombuffer(edge_dst, dtype=np.uint32)
    # reversed adjacency in compressed-row form: sources[start[v]:start[v + 1]] lead into v
    order = np.argsort(dst, kind="stable")
    sources = src[order]
    start = np.searchsorted(dst[order], np.arange(state_count + 1, dtype=np.int64))
    level = np.flatnonzero(reached)
    while len(level):
        begin, count = start[level], start[level + 1] - start[level]
        total = int(count.sum())
        if not total:
            break
        # every position begin[k] .. begin[k] + count[k] - 1, flattened
        offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
        found = sources[np.repeat(begin, count) + offsets]
        found = np.unique(found[~reached[found]])
        reached[found] = True
        level = found
    return bytearray(reached.astype(np.uint8).tobytes())
