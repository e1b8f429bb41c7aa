"""The serial engine's seen table: fingerprint -> state index in ≈ 12 bytes per state.

A Python ``dict`` of int keys and values costs ≈ 115 B per entry (the entry, the table's slack,
a 48-byte object for each 64-bit fingerprint and a 32-byte one for each index). This table
keeps two parts instead:

1. **recent**: a ``dict`` holding the entries added since the last :meth:`SeenTable.settle`,
   at most about :data:`RECENT_LIMIT` of them; the hot loop reads and writes it directly.
2. **archive**: every older entry in two numpy arrays sorted by fingerprint (``uint64``
   fingerprints, ``int32`` indices: 12 B per state, twice that while a merge copies), looked
   up in batches with one ``searchsorted`` per batch (:meth:`SeenTable.archived`).

Policy: a fingerprint is in the table when it is in either part; an entry never changes once
added. ``settle`` (called between batches, never between a batch's :meth:`archived` lookup and
its use) moves *recent* into the archive when it is full, by a linear merge, so a run of ``n``
states costs ``O(n² / RECENT_LIMIT)`` copied bytes in all (memcpy speed: about 0.1 s per
million states here).
"""

from __future__ import annotations

import sys
from array import array
from typing import Any

import numpy as np

__all__ = ["MISSING", "RECENT_LIMIT", "UNNUMBERED", "SeenTable", "ShardSeen"]

RECENT_LIMIT = 1 << 15
_ENTRY_BYTES = 115  # a dict entry with its int objects (see the module docstring)


class SeenTable:
    """Fingerprint -> index, exact (the 64-bit fingerprints are kept whole)."""

    def __init__(self, recent_limit: int | None = None) -> None:
        """``recent_limit`` defaults to :data:`RECENT_LIMIT` (read at construction).

        Raises :class:`ValueError` for a limit below 1.
        """
        if recent_limit is None:
            recent_limit = RECENT_LIMIT
        if recent_limit < 1:
            raise ValueError(f"recent_limit must be >= 1, got {recent_limit}")
        self.recent: dict[int, int] = {}
        self.recent_limit = recent_limit
        self.keys: np.ndarray[Any, np.dtype[np.uint64]] = np.empty(0, dtype=np.uint64)
        self.values: np.ndarray[Any, np.dtype[np.int32]] = np.empty(0, dtype=np.int32)
        self.peak_bytes = 0

    def __len__(self) -> int:
        return len(self.keys) + len(self.recent)

    def __contains__(self, fp: int) -> bool:
        return self.get(fp) is not None

    def get(self, fp: int) -> int | None:
        """The index of ``fp``, or None when it is not in the table."""
        found = self.recent.get(fp)
        if found is not None:
            return found
        found_index = self.archived(array("Q", (fp,)))[0]
        return None if found_index < 0 else found_index

    def update(self, entries: Any) -> None:
        """Add ``(fingerprint, index)`` pairs (each fingerprint new)."""
        self.recent.update(entries)

    def archived(self, fps: array[int]) -> list[int]:
        """Per fingerprint of ``fps`` (an ``array('Q')``) its index when the archive holds it,
        else -1; *recent* is not consulted."""
        if not len(self.keys) or not len(fps):
            return [-1] * len(fps)
        query = np.frombuffer(fps, dtype=np.uint64)
        keys = self.keys
        position = np.searchsorted(keys, query)
        position[position == len(keys)] = 0
        found = keys[position] == query
        return np.where(found, self.values[position], -1).tolist()  # type: ignore[no-any-return]

    def settle(self, force: bool = False) -> None:
        """Move *recent* into the archive when it holds ``recent_limit`` entries (or ``force``)."""
        recent = self.recent
        if not recent or (len(recent) < self.recent_limit and not force):
            return
        new_keys = np.fromiter(recent.keys(), dtype=np.uint64, count=len(recent))
        new_values = np.fromiter(recent.values(), dtype=np.int32, count=len(recent))
        order = np.argsort(new_keys, kind="stable")
        new_keys, new_values = new_keys[order], new_values[order]
        at = np.searchsorted(self.keys, new_keys)
        self.peak_bytes = max(self.peak_bytes, 2 * self.keys.nbytes + 2 * self.values.nbytes)
        self.keys = np.insert(self.keys, at, new_keys)
        self.values = np.insert(self.values, at, new_values)
        recent.clear()

    def nbytes(self) -> int:
        """Bytes held now: the archive's arrays and *recent* (its entries at dict cost)."""
        return (
            self.keys.nbytes
            + self.values.nbytes
            + sys.getsizeof(self.recent)
            + len(self.recent) * (_ENTRY_BYTES - 24)
        )


UNNUMBERED = -1  # a shard's entry for a state won this level, numbered with the next command
MISSING = -2  # what ShardSeen.lookup gives for a fingerprint it does not hold


class ShardSeen:
    """One shard's part of the seen set: its fingerprints, ascending, and their indices.

    The multi-process engine's table (:mod:`._shard`): 12 B per state, no ``dict``. Every
    operation takes a batch (one level's candidates, winners or fix-ups) as numpy arrays, so
    the shard never looks a single fingerprint up from Python. An entry is added as
    :data:`UNNUMBERED` when its state is won and gets its index when the generator learns it.
    """

    def __init__(self) -> None:
        self.keys: np.ndarray[Any, np.dtype[np.uint64]] = np.empty(0, dtype=np.uint64)
        self.values: np.ndarray[Any, np.dtype[np.int32]] = np.empty(0, dtype=np.int32)

    def __len__(self) -> int:
        return len(self.keys)

    def _positions(self, fps: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], Any]:
        """Where each of ``fps`` is or would go, and whether it is there."""
        keys = self.keys
        at = np.searchsorted(keys, fps)
        if not len(keys):
            return at, np.zeros(len(fps), dtype=bool)
        clipped = np.minimum(at, len(keys) - 1)
        return clipped, keys[clipped] == fps

    def lookup(self, fps: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Per fingerprint its index (``int64``), :data:`UNNUMBERED`, or :data:`MISSING`."""
        at, found = self._positions(fps)
        out = np.full(len(fps), MISSING, dtype=np.int64)
        if len(self.keys):
            out[found] = self.values[at[found]]
        return out

    def contains(self, fps: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Per fingerprint whether the table holds it (numbered or not)."""
        return self._positions(fps)[1]  # type: ignore[no-any-return]

    def add(self, fps: np.ndarray[Any, Any], indices: np.ndarray[Any, Any] | None = None) -> None:
        """Insert fingerprints the table does not hold (distinct), :data:`UNNUMBERED` unless
        ``indices`` is given; one merge per batch."""
        if not len(fps):
            return
        order = np.argsort(fps)
        new_keys = fps[order]
        new_values = (
            np.full(len(fps), UNNUMBERED, dtype=np.int32)
            if indices is None
            else indices[order].astype(np.int32)
        )
        at = np.searchsorted(self.keys, new_keys)
        self.keys = np.insert(self.keys, at, new_keys)
        self.values = np.insert(self.values, at, new_values)

    def number(self, fps: np.ndarray[Any, Any], indices: np.ndarray[Any, Any]) -> None:
        """Give held fingerprints their indices; an index below 0 removes the entry (a state
        won but cut by ``max_states``). Raises :class:`ValueError` for one not held."""
        if not len(fps):
            return
        at, found = self._positions(fps)
        if not found.all():
            raise ValueError("numbering a fingerprint the shard does not hold")
        kept = indices >= 0
        self.values[at[kept]] = indices[kept]
        if not kept.all():
            drop = np.zeros(len(self.keys), dtype=bool)
            drop[at[~kept]] = True
            self.keys, self.values = self.keys[~drop], self.values[~drop]

    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.values.nbytes)
