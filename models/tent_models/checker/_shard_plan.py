"""The plain arithmetic of a sharded exploration: no worker state, no messages.

:func:`split_contiguous` is the coordinator's balance plan (moves that even out the workers'
contiguous frontiers between levels); :func:`indices_of` is a shard owner's lookup of the
indices it stored for a batch of fingerprints (the recoverability edges' targets).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tent_models.checker._errors import CheckerError
from tent_models.checker._shard_values import Plan

__all__ = ["indices_of", "split_contiguous"]


def split_contiguous(sizes: Sequence[int]) -> list[Plan] | None:
    """Moves that even out contiguous frontiers, or None when they are even enough.

    Worker ``w`` holds positions ``[c_w, c_{w+1})`` of the level's frontier (``c`` the prefix
    sums of ``sizes``); afterwards it holds ``[t_w, t_{w+1})`` with ``t_w = total * w // W``,
    so the frontiers stay contiguous and in worker order. Nothing moves unless the largest
    frontier exceeds the mean by more than 1/32 of it (and 16 states). Per worker: ``(sends as
    (target, start, stop) in its own positions, sources it receives from)``.
    """
    workers, total = len(sizes), sum(sizes)
    mean = total / workers if workers else 0
    if workers < 2 or max(sizes) - mean <= max(16, mean / 32):
        return None
    have = [0]
    for size in sizes:
        have.append(have[-1] + size)
    want = [total * w // workers for w in range(workers + 1)]
    sends: list[list[tuple[int, int, int]]] = [[] for _ in range(workers)]
    sources: list[list[int]] = [[] for _ in range(workers)]
    for w in range(workers):
        for v in range(workers):
            if v == w:
                continue
            start, stop = max(have[w], want[v]), min(have[w + 1], want[v + 1])
            if start < stop:
                sends[w].append((v, start - have[w], stop - have[w]))
                sources[v].append(w)
    return [(tuple(sends[w]), tuple(sources[w])) for w in range(workers)]


def indices_of(
    table: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]], fps: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """The stored indices (``uint32``) of ``fps`` in ``table`` (ascending fingerprints and
    their indices); raises :class:`CheckerError` when one is missing or not numbered.

    The queries are sorted first: a binary search per random query misses the cache at every
    step (measured here: 3× slower for 6 M queries into 2 M keys)."""
    keys, indices = table
    order = np.argsort(fps)
    ranked = fps[order]
    at = np.minimum(np.searchsorted(keys, ranked), max(len(keys) - 1, 0))
    if len(fps) and (not len(keys) or (keys[at] != ranked).any() or (indices[at] < 0).any()):
        raise CheckerError("an edge names a state its owner never numbered")
    out = np.empty(len(fps), dtype=np.uint32)
    out[order] = indices[at]
    return out
