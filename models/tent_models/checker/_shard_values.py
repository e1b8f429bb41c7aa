"""The values a sharded exploration passes around, and a shard's per-level buffers.

What the coordinator and the workers of :mod:`._shard` say to each other (:class:`Options`,
:class:`Assignment`, :class:`LevelReport`, :class:`ShardSummary`), the key layout and plan types
they share, and the plain containers a worker fills during one level (:class:`_Candidates`,
:class:`_Won`). Nothing here talks to a queue or reads the seen set.
"""

from __future__ import annotations

from array import array
from typing import Any

import attrs
import numpy as np

__all__ = [
    "MAX_POSITION",
    "SHIFT",
    "Assignment",
    "FrontierItem",
    "LevelReport",
    "Options",
    "Plan",
    "ShardSummary",
]

SHIFT = 20  # successor position bits in a key
MAX_POSITION = (1 << SHIFT) - 1

FrontierItem = tuple[int, int, Any]  # (global index, fingerprint, state)
# A balance plan for one worker: (target, start, stop) slices of its frontier to send, and
# the workers it receives from (see split_contiguous).
Plan = tuple[tuple[tuple[int, int, int], ...], tuple[int, ...]]


@attrs.frozen(kw_only=True)
class Options:
    workers: int
    symmetry: bool
    check_deadlock: bool
    check_recoverability: bool


@attrs.frozen(kw_only=True)
class Assignment:
    """The coordinator's word to one worker before a level (all of it a few ints).

    ``first`` is the index of the first state this worker won in the last level and ``kept``
    how many of them are stored (fewer past a ``max_states`` cut): they are numbered
    ``first``, ``first + 1``, ... in key order. ``plan`` moves frontier states for balance,
    ``met`` names the invariants and witnesses hit somewhere already, and ``expand`` is false
    for the last command (store the last level's states, expand nothing).
    """

    first: int = 0
    kept: int = 0
    plan: Plan | None = None
    met: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    expand: bool = True


@attrs.frozen(kw_only=True)
class LevelReport:
    """What a worker tells the coordinator after a level: counts, and positions in the list
    of states it won this level (key order)."""

    won: int
    out_of_bounds: bytes  # array('I') of the positions of won states outside the bounds
    invariant_hits: dict[str, int]
    witness_hits: dict[str, int]
    transitions: int
    deadlock: int | None  # the smallest index of a deadlocked state expanded here
    cpu_seconds: float  # this process's CPU time for the command (the level's balance)


@attrs.frozen(kw_only=True)
class ShardSummary:
    """A worker's totals once the exploration is over (the ``finish`` command)."""

    enabled: dict[str, int]
    fired: dict[str, int]
    new_states: dict[str, int]
    recovered: bytes  # array('I'): indices of expanded states where ``recovered`` held
    blocks: bytes  # int64 triples (first index, first local position, count), in order
    flags: bytes  # one per stored state, local order: 1 when outside the bounds
    seen: int  # fingerprints this shard owns
    storage_bytes: int
    rss_growth: int  # peak resident set growth of this process since it started, bytes


class _Candidates:
    """One level's candidates in discovery (key) order, as parallel sequences."""

    def __init__(self) -> None:
        self.fps = array("Q")
        self.keys = array("Q")
        self.names: list[str] = []
        self.args: list[Any] = []
        self.states: list[Any] = []  # possibly Deferred: built only for the winners


@attrs.define
class _Won:
    """The new states this shard generated and won in one level, in key order."""

    fps: np.ndarray[Any, Any]
    keys: np.ndarray[Any, Any]
    names: list[str]
    args: list[Any]
    states: list[Any]
    out_of_bounds: bytearray = attrs.field(factory=bytearray)

    @classmethod
    def empty(cls) -> _Won:
        nothing = np.empty(0, dtype=np.uint64)
        return cls(fps=nothing, keys=nothing, names=[], args=[], states=[])
