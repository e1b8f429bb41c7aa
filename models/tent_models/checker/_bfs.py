"""Single-process breadth-first exploration with compact per-state storage.

Per distinct state the checker keeps only: its 64-bit fingerprint in the seen table
(fingerprint -> index in BFS order, :mod:`._seen`: ≈ 12 B once archived), the parent index
(``array('i')``) and the id of the action instance that produced it (``array('I')`` into an
interned table of ``(action, args)``). States themselves live only in the current and next
frontier (a list of states beside an ``array('i')`` of their indices). Counterexamples are
rebuilt by replaying the recorded actions from the initial state
(:func:`~tent_models.checker._trace.rebuild_trace`).

Exploration policy (shared with the multi-process engine, which yields identical indices):

1. States are numbered in discovery order; a state's parent is the first state (smallest
   index, then first successor) that produced it, so every parent chain is a shortest path.
2. Each new state (after ``canonicalize`` when symmetry is on) is checked against every
   invariant and unsatisfied witness; a state outside ``within_bounds`` is stored and checked
   but not expanded.
3. Expanding a state with no successor that is neither ``is_terminal``, ``quiescent_by_bound``
   nor ``recovered`` is a deadlock.
4. After a level in which a safety violation (invariant or deadlock) was found, exploration
   stops; with ``max_states`` it stops as soon as that many distinct states are stored.
"""

from __future__ import annotations

import gc
import sys
import time
from array import array
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import attrs

from tent_models.checker._bitstate import BitSet
from tent_models.checker._components import Deferred
from tent_models.checker._errors import ModelContractError
from tent_models.checker._fastpath import expander, fingerprinter
from tent_models.checker._seen import SeenTable
from tent_models.checker._trace import ActionInstance
from tent_models.model_api import SpecModel, ends_by_design

__all__ = ["Exploration", "cyclic_gc_paused", "explore_serial", "storage_bytes"]

_KEY_OBJECT_BYTES = 40  # a 64-bit int object (36 bytes, 8-byte aligned)
_INDEX_OBJECT_BYTES = 32  # an int < 2**30 (28 bytes, aligned)

ProgressHook = Callable[[int, int, int], None]  # (distinct states, transitions, depth)

_CHUNK = 256  # frontier states expanded per archive lookup (_seen.SeenTable.archived)


@attrs.define(kw_only=True)
class Exploration:
    """Everything a finished exploration leaves behind for building the result (internal)."""

    initial_states: dict[int, Any]
    parent: array[int]
    action_ids: array[int]
    action_table: list[ActionInstance]
    transitions: int = 0
    depth: int = 0
    enabled: dict[str, int]
    fired: dict[str, int]
    new_states: dict[str, int]
    invariant_hits: dict[str, int]
    deadlock: int | None = None
    witness_hits: dict[str, int]
    good: bytearray
    edge_src: array[int]
    edge_dst: array[int]
    exhaustive: bool = False
    seconds: float = 0.0
    storage_bytes: int = 0
    shard_states: list[int] = attrs.Factory(list)  # states stored per shard (sharded runs)
    bitstate: int = 0  # log2 of the bit array's size in a bitstate run, else 0

    distinct_states: int = 0
    # Sharded runs: the parent links of every state past the initial ones stay with the
    # worker that found it; ``links`` asks the workers for some (one round trip) and
    # ``prefetch`` walks whole chains back with it. ``rss_growth``: the workers' peak
    # resident set growth, summed (bytes).
    links: Callable[[Sequence[int]], list[tuple[int, ActionInstance]]] | None = None
    fetched: dict[int, tuple[int, ActionInstance]] = attrs.Factory(dict)
    rss_growth: int = 0
    level_cpu: list[list[float]] = attrs.Factory(list)  # per level, each worker's CPU seconds

    def _link(self, index: int) -> tuple[int, ActionInstance] | None:
        """The parent index and action of state ``index``; None for an initial state."""
        if index < len(self.parent):
            parent = self.parent[index]
            return None if parent < 0 else (parent, self.action_table[self.action_ids[index]])
        if index not in self.fetched:
            self.prefetch([index])
        return self.fetched[index]

    def prefetch(self, indices: Iterable[int]) -> None:
        """Fetch the parent chains of ``indices`` from the workers holding them, all chains
        at once: one round per level walked back (a no-op in a single-process run)."""
        if self.links is None:
            return
        local, fetched = len(self.parent), self.fetched
        wanted = {index for index in indices if index >= local and index not in fetched}
        while wanted:
            asked = sorted(wanted)
            fetched.update(zip(asked, self.links(asked), strict=True))
            wanted = {
                parent
                for parent, _ in (fetched[index] for index in asked)
                if parent >= local and parent not in fetched
            }

    def path(self, index: int) -> tuple[Any, list[ActionInstance]]:
        """The initial state and the recorded actions leading to state ``index``."""
        chain = []
        link = self._link(index)
        while link is not None:
            chain.append(link[1])
            index = link[0]
            link = self._link(index)
        chain.reverse()
        return self.initial_states[index], chain


def storage_bytes(seen_len: int, seen_container_bytes: int, *arrays: Any) -> int:
    """Estimate the bytes held by the seen dict (with its int objects) and the index arrays."""
    total = seen_container_bytes + seen_len * (_KEY_OBJECT_BYTES + _INDEX_OBJECT_BYTES)
    for item in arrays:
        total += sys.getsizeof(item)
    return total


def new_exploration(model: SpecModel[Any]) -> Exploration:
    """An empty exploration record with zeroed coverage counters for every action."""
    names = list(model.action_names())
    return Exploration(
        initial_states={},
        parent=array("i"),  # 4 bytes: up to 2**31 states
        action_ids=array("I"),
        action_table=[],
        enabled=dict.fromkeys(names, 0),
        fired=dict.fromkeys(names, 0),
        new_states=dict.fromkeys(names, 0),
        invariant_hits={},
        witness_hits={},
        good=bytearray(),
        edge_src=array("I"),
        edge_dst=array("I"),
    )


def new_state_checker(
    model: SpecModel[Any],
    record: Exploration,
    *,
    met_invariants: Collection[str] = (),
    met_witnesses: Collection[str] = (),
) -> Callable[[int, Any], None]:
    """A callback recording, for a new state, the invariants it breaks and witnesses it meets.

    Only the first (smallest index) hit per name is kept: BFS order makes it the shallowest.
    Callers pass increasing indices, so a name is dropped from this callback's pending list
    once hit and not evaluated again; a hit recorded earlier (by another callback on the same
    record) is never overwritten. Names in ``met_invariants`` / ``met_witnesses`` (hit elsewhere:
    another shard) are not evaluated at all.
    """
    invariant_hits, witness_hits = record.invariant_hits, record.witness_hits
    invariants = [
        (i.name, i.holds)
        for i in model.invariants()
        if i.name not in invariant_hits and i.name not in met_invariants
    ]
    witnesses = [
        (w.name, w.holds)
        for w in model.witnesses()
        if w.name not in witness_hits and w.name not in met_witnesses
    ]

    # A model may offer the conjunction of its invariants as one cheap pre-check; the named
    # invariants are then evaluated only on a state where it fails.
    all_hold = getattr(model, "invariants_hold", None)

    def on_new(index: int, state: Any) -> None:
        if all_hold is not None and all_hold(state):
            broken = []
        else:
            broken = [entry for entry in invariants if not entry[1](state)]
        if broken:
            for name, _holds in broken:
                invariant_hits.setdefault(name, index)
            invariants[:] = [entry for entry in invariants if entry not in broken]
        if witnesses:
            met = [entry for entry in witnesses if entry[1](state)]
            if met:
                for name, _holds in met:
                    witness_hits.setdefault(name, index)
                witnesses[:] = [entry for entry in witnesses if entry not in met]

    return on_new


def state_fingerprint(model: SpecModel[Any], state: Any) -> int:
    """The fingerprint of an (already canonical) state: see :func:`._fingerprint.fingerprinter`."""
    return fingerprinter(model)(state)


def seed_initial(
    model: SpecModel[Any], record: Exploration, *, symmetry: bool, limit: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int, Any]]]:
    """Number, check and store the distinct initial states (indices 0, 1, ...).

    Returns the seen entries ``(fingerprint, index)`` and the frontier ``(index, fingerprint,
    canonical state)`` of the initial states within bounds. Raises :class:`ModelContractError`
    when the model has no initial state.
    """
    on_new = new_state_checker(model, record)
    seen: dict[int, int] = {}
    frontier: list[tuple[int, int, Any]] = []
    for initial in model.initial_states():
        state = model.canonicalize(initial) if symmetry else initial
        fp = state_fingerprint(model, state)
        if fp in seen or len(record.parent) >= limit:
            continue
        index = len(record.parent)
        seen[fp] = index
        record.parent.append(-1)
        record.action_ids.append(0)
        record.initial_states[index] = initial
        on_new(index, state)
        if model.within_bounds(state):
            record.good.append(0)
            frontier.append((index, fp, state))
        else:
            record.good.append(1)  # outside the bounds: counted recoverable (_liveness policy 1)
    if not record.parent:
        raise ModelContractError(f"model {model.name!r} has no initial state")
    return list(seen.items()), frontier


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for an exploration, restoring its state after.

    An exploration allocates millions of tuples that stay alive (frontier, memo tables); the
    collector would rescan the young ones every 700 allocations and, as the heap grows, all of
    them now and then: 35-40% of the exploration time of credit/ci (benchmarks/checker.py).
    Reference counting still frees whatever is dropped; the hot loop creates no cycles.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def explore_serial(
    model: SpecModel[Any],
    *,
    symmetry: bool,
    max_states: int | None,
    check_deadlock: bool,
    check_recoverability: bool,
    progress: ProgressHook | None,
    bitstate: int | None = None,
) -> Exploration:
    """Explore ``model`` breadth-first in this process (policy in the module docstring).

    ``bitstate`` (log2 of a bit count) replaces the seen table by a bit array
    (:mod:`._bitstate`); no recoverability edges are recorded then. Raises
    :class:`ModelContractError` when the model has no initial state or yields an action name
    missing from ``action_names()``.
    """
    with cyclic_gc_paused():
        return _explore_serial(
            model,
            symmetry=symmetry,
            max_states=max_states,
            check_deadlock=check_deadlock,
            check_recoverability=check_recoverability and bitstate is None,
            progress=progress,
            bitstate=bitstate,
        )


def _explore_serial(
    model: SpecModel[Any],
    *,
    symmetry: bool,
    max_states: int | None,
    check_deadlock: bool,
    check_recoverability: bool,
    progress: ProgressHook | None,
    bitstate: int | None,
) -> Exploration:
    started = time.perf_counter()
    record = new_exploration(model)
    expand = expander(model, symmetry=symmetry)
    within_bounds = model.within_bounds
    recovered = model.recovered
    quiescent_by_bound = ends_by_design(model)  # is_terminal too
    faults = model.fault_actions()
    limit = max_states if max_states is not None else sys.maxsize
    bits = BitSet(bitstate) if bitstate is not None else None
    table = SeenTable() if bits is None else None
    parent, action_ids, good = record.parent, record.action_ids, record.good
    edge_src, edge_dst = record.edge_src, record.edge_dst
    action_index: dict[ActionInstance, int] = {}
    action_table = record.action_table
    fired, enabled, new_states = record.fired, record.enabled, record.new_states

    parent_append, action_append, good_append = parent.append, action_ids.append, good.append
    edge_src_append, edge_dst_append = edge_src.append, edge_dst.append
    on_new = new_state_checker(model, record)
    initial_entries, initial_frontier = seed_initial(model, record, symmetry=symmetry, limit=limit)
    if table is not None:
        table.update(initial_entries)
        recent: dict[int, int] | BitSet = table.recent
    else:
        assert bits is not None
        bits.update(initial_entries)
        recent = bits
    recent_get = recent.get
    # the frontier as two parallel sequences: no (index, state) tuple per state
    frontier_index = array("i", (index for index, _, _ in initial_frontier))
    frontier = [state for _, _, state in initial_frontier]

    count = len(parent)
    truncated = count >= limit and bool(frontier)
    transitions = 0
    depth = 0
    while frontier and not truncated:
        if record.invariant_hits or record.deadlock is not None:
            break
        level_start = count
        next_index: array[int] = array("i")
        next_frontier: list[Any] = []
        keep_index, keep = next_index.append, next_frontier.append
        # Per level, the name of every transition fired and, per expanded state, each name
        # once (enabled); counted by Counter in C at the level's end.
        level_fired: list[str] = []
        level_enabled: list[str] = []
        fire = level_fired.append
        for chunk in range(0, len(frontier), _CHUNK):
            # Expand a batch of states first, so their successors' fingerprints are looked up
            # in the archive with one call; then number them in exactly the serial order.
            states = frontier[chunk : chunk + _CHUNK]
            ends: list[int] = []
            names: list[str] = []
            argses: list[Any] = []
            successors: list[Any] = []
            fps = array("Q")
            for state in states:
                for name, args, successor, fp in expand(state):
                    names.append(name)
                    argses.append(args)
                    successors.append(successor)
                    fps.append(fp)
                ends.append(len(names))
            archived = table.archived(fps) if table is not None else [-1] * len(fps)
            begin = 0
            for src, state, end in zip(
                frontier_index[chunk : chunk + _CHUNK], states, ends, strict=True
            ):
                src_recovered = check_recoverability and recovered(state)
                if src_recovered:
                    good[src] = 1
                record_edges = check_recoverability and not src_recovered
                first = len(level_fired)
                for at in range(begin, end):
                    name = names[at]
                    fire(name)
                    dst = archived[at]
                    if dst < 0:
                        fp = fps[at]
                        known = recent_get(fp)
                        if known is not None:
                            dst = known
                        else:
                            dst = count
                            recent[fp] = dst
                            count += 1
                            successor = successors[at]
                            # a Deferred successor is built only now that it is new
                            nxt = successor() if successor.__class__ is Deferred else successor
                            instance = (name, argses[at])
                            aid = action_index.get(instance)
                            if aid is None:
                                aid = action_index[instance] = len(action_table)
                                action_table.append(instance)
                            parent_append(src)
                            action_append(aid)
                            new_states[name] = new_states.get(name, 0) + 1
                            on_new(dst, nxt)
                            if within_bounds(nxt):
                                good_append(0)
                                keep_index(dst)
                                keep(nxt)
                            else:
                                good_append(1)
                            if count >= limit:
                                truncated = True
                    if record_edges and dst != src and name not in faults:
                        edge_src_append(src)
                        edge_dst_append(dst)
                    if truncated:
                        break
                begin = end
                if len(level_fired) > first:
                    level_enabled.extend(set(level_fired[first:]))
                elif (
                    check_deadlock
                    and record.deadlock is None
                    and not quiescent_by_bound(state)
                    and not recovered(state)
                ):
                    record.deadlock = src
                if count >= limit:
                    break
            if count >= limit:
                break
            if table is not None:
                table.settle()
        for counts, level_names in ((fired, level_fired), (enabled, level_enabled)):
            for name, times in Counter(level_names).items():
                if name not in counts:
                    raise ModelContractError(
                        f"model {model.name!r}: action {name!r} is not in action_names()"
                    )
                counts[name] += times
        transitions += len(level_fired)
        frontier, frontier_index = next_frontier, next_index
        if count > level_start:
            depth += 1
        if progress is not None:
            progress(count, transitions, depth)
    record.transitions = transitions
    record.depth = depth
    record.distinct_states = len(parent)
    record.exhaustive = not frontier and not truncated
    record.seconds = time.perf_counter() - started
    if bits is not None:
        record.bitstate = bits.log2_bits
        record.storage_bytes = bits.nbytes() + storage_bytes(
            0, 0, parent, action_ids, good, edge_src, edge_dst
        )
    else:
        assert table is not None
        record.storage_bytes = table.nbytes() + storage_bytes(
            0, 0, parent, action_ids, good, edge_src, edge_dst
        )
    return record
