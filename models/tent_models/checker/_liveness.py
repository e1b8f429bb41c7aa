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
from typing import Any

import numpy as np

__all__ = ["recoverable_states"]


_CHUNK = 1 << 16  # edges (or target states) handled per numpy step: bounds the temporaries


def recoverable_states(
    state_count: int, good: bytearray, edge_src: array[int], edge_dst: array[int]
) -> bytearray:
    """Return a flag per state (index = BFS order): 1 when a goal state is reachable from it.

    ``good`` flags the goal states; ``edge_src[i] -> edge_dst[i]`` are the non-fault edges. The
    inputs are not modified. The backward search runs level by level in numpy: per level, the
    sources of every edge into the last level's states that are not reached yet. Beside the
    reversed adjacency (4 bytes per edge, 4 per state) its temporaries are bounded by one
    level's new states and one chunk's edges.
    """
    reached = np.frombuffer(bytes(good), dtype=np.uint8).astype(bool)
    if len(reached) != state_count:
        raise ValueError(f"{len(reached)} goal flags for {state_count} states")
    start, sources = _reversed_adjacency(
        state_count,
        np.frombuffer(edge_src, dtype=np.uint32),
        np.frombuffer(edge_dst, dtype=np.uint32),
    )
    dtype = start.dtype
    level = np.flatnonzero(reached)
    while len(level):
        # the sources of the edges into this level, a slice of its states at a time (so the
        # temporaries stay one slice's in-edges), keeping only those not reached yet
        parts = []
        for first in range(0, len(level), _CHUNK):
            part = level[first : first + _CHUNK]
            begin, count = start[part], start[part + 1] - start[part]
            total = int(count.sum())
            if not total:
                continue
            # every position begin[k] .. begin[k] + count[k] - 1, flattened
            offsets = np.arange(total, dtype=dtype) - np.repeat(np.cumsum(count) - count, count)
            found = sources[np.repeat(begin, count) + offsets]
            found = np.unique(found[~reached[found]])
            reached[found] = True  # later slices skip them: each new state is listed once
            parts.append(found)
        if not parts:
            break
        level = np.concatenate(parts)
    return bytearray(reached.astype(np.uint8).tobytes())


def _reversed_adjacency(
    state_count: int, src: np.ndarray[Any, Any], dst: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``(start, sources)``: the sources of the edges into ``v`` are
    ``sources[start[v]:start[v + 1]]`` (compressed rows of the reversed graph).

    Built by a counting sort in chunks of ``_CHUNK`` edges, so beside the result (4 bytes per
    edge, 4 or 8 per state) it needs only one chunk's temporaries, not a sort of every edge
    (an ``argsort`` of 8 bytes per edge, a sorted copy of the targets).
    """
    total = len(dst)
    dtype = np.int32 if total < 2**31 else np.int64
    # start[v + 1] = the first slot of v; placing v's sources moves it to v's end
    start: np.ndarray[Any, Any] = np.zeros(state_count + 1, dtype=dtype)
    if state_count > 1:
        # count the in-edges of v into start[v + 2], a chunk at a time (bincount copies its
        # input to 8-byte ints), then sum up in place
        step = max(_CHUNK, state_count)
        for first in range(0, total, step):
            start[2:] += np.bincount(dst[first : first + step], minlength=state_count)[:-1]
        np.cumsum(start, out=start)
    sources = np.empty(total, dtype=np.uint32)
    for first in range(0, total, _CHUNK):
        targets = dst[first : first + _CHUNK]
        order = np.argsort(targets, kind="stable")
        ordered = targets[order]
        # the runs of equal targets in the sorted chunk: their first positions and lengths
        heads = np.flatnonzero(np.diff(ordered, prepend=np.int64(-1)))
        runs = np.diff(heads, append=len(ordered))
        rank = np.arange(len(ordered), dtype=dtype) - np.repeat(heads.astype(dtype), runs)
        slot = ordered[heads].astype(np.int64) + 1
        sources[np.repeat(start[slot], runs) + rank] = src[first : first + _CHUNK][order]
        start[slot] += runs.astype(dtype)
    return start, sources
