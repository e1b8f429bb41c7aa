"""One shard of the multi-process (and Ray) BFS: its part of the seen set, its frontier, the
parent links of the states it found.

The protocol a :class:`Worker` follows is described in :mod:`._parallel`; the transport is
whatever ``inboxes`` and ``inbox`` are (multiprocessing queues there, Ray actor calls in
:mod:`._ray`). The worker's state and messaging are :class:`~._shard_state._ShardState`'s, the
values it exchanges are in :mod:`._shard_values` and the plan arithmetic in :mod:`._shard_plan`
(all re-exported here).
"""

from __future__ import annotations

import resource
import sys
import time
from array import array
from collections import Counter
from collections.abc import Sequence
from itertools import compress
from typing import Any

import attrs
import numpy as np

from tent_models.checker._bfs import new_state_checker
from tent_models.checker._components import materialise
from tent_models.checker._errors import CheckerError, ModelContractError
from tent_models.checker._fastpath import expander
from tent_models.checker._shard_plan import indices_of, split_contiguous
from tent_models.checker._shard_state import _ShardState
from tent_models.checker._shard_values import (
    MAX_POSITION,
    SHIFT,
    Assignment,
    FrontierItem,
    LevelReport,
    Options,
    Plan,
    ShardSummary,
    _Candidates,
    _Won,
)
from tent_models.checker._trace import ActionInstance
from tent_models.model_api import ends_by_design

__all__ = [
    "SHIFT",
    "Assignment",
    "LevelReport",
    "Options",
    "ShardSummary",
    "Worker",
    "indices_of",
    "split_contiguous",
]


class Worker(_ShardState):
    """One shard: its part of the seen set, its frontier, its coverage counters and the
    parent links of the states it generated.

    The frontiers are contiguous: worker ``w`` always holds a run of consecutive indices,
    below worker ``w + 1``'s (see :mod:`._parallel`), so its new states' serial indices follow
    from the counts alone. Per successor the hot loop does one lookup in this level's
    candidates; everything per new state or per edge between the phases runs on numpy arrays.
    """

    # ---- one level ---------------------------------------------------------------------

    def step(self, order: Assignment) -> LevelReport | None:
        """Store the last level's states, rebalance, then expand the frontier (unless this
        is the last command: then None)."""
        started = time.process_time()
        self.level += 1
        self._store(order.first, order.kept)
        if order.plan is not None:
            self._balance(order.plan)
        if not order.expand:
            return None
        report = self._expand(order.met)
        return attrs.evolve(report, cpu_seconds=time.process_time() - started)

    def _store(self, first: int, kept: int) -> None:
        """Number the last level's won states ``first, first + 1, ...``, keep the links of
        the first ``kept`` and drop the rest (a ``max_states`` cut); the kept ones within
        bounds are the next frontier."""
        won, count, me = self.won, self.count, self.me
        if won is None:
            return
        self.won = _Won.empty()
        total = len(won.fps)
        if not total:
            self.frontier = []
            return
        indices = np.full(total, -1, dtype=np.int64)
        indices[:kept] = np.arange(first, first + kept, dtype=np.int64)
        owners = won.fps % np.uint64(count)
        for owner in range(count):
            mine = owners == np.uint64(owner)
            if owner == me:
                self.seen.number(won.fps[mine], indices[mine])
            elif mine.any():
                self.fixups[owner].append((won.fps[mine], indices[mine]))
        if kept:
            self.blocks.append((first, len(self.parent), kept))
            parents = (won.keys[:kept] >> np.uint64(SHIFT)).astype(np.int32)
            self.parent.frombytes(parents.tobytes())
            action_index, action_table = self.action_index, self.action_table
            add_aid = self.action_ids.append
            new_states = self.new_states
            for name, args in zip(won.names[:kept], won.args[:kept], strict=True):
                instance = (name, args)
                aid = action_index.get(instance)
                if aid is None:
                    aid = action_index[instance] = len(action_table)
                    action_table.append(instance)
                add_aid(aid)
                new_states[name] += 1
            self.flags += won.out_of_bounds[:kept]
        keep = np.frombuffer(won.out_of_bounds, dtype=np.uint8) == 0
        keep[kept:] = False
        self.frontier = list(
            zip(
                indices[keep].tolist(),
                won.fps[keep].tolist(),
                compress(won.states, keep.tolist()),
                strict=True,
            )
        )

    def _balance(self, plan: Plan) -> None:
        """Send the slices the plan names and take in the ones sent here, keeping the
        frontiers contiguous and in worker order (states arrive pickled: re-interned)."""
        sends, sources = plan
        frontier = self.frontier
        kept_from, kept_to = 0, len(frontier)
        for target, start, stop in sends:
            self._send(target, "moved", frontier[start:stop])
            if target < self.me:
                kept_from = max(kept_from, stop)
            else:
                kept_to = min(kept_to, start)
        arrived = self.mailbox.collect("moved", self.level, sources)
        intern = getattr(self.model, "intern", None)

        def fresh(items: list[FrontierItem]) -> list[FrontierItem]:
            if callable(intern):  # fresh objects: let the model's id-keyed memos know them
                return [(index, fp, intern(state)) for index, fp, state in items]
            return items

        below = [item for w in sorted(arrived) if w < self.me for item in fresh(arrived[w])]
        above = [item for w in sorted(arrived) if w > self.me for item in fresh(arrived[w])]
        self.frontier = below + frontier[kept_from:kept_to] + above

    def _expand(self, met: tuple[Sequence[str], Sequence[str]]) -> LevelReport:
        """Expand this shard's frontier; ``met``: the invariants and witnesses any shard (or
        an initial state) has hit already."""
        invariants, witnesses = self._met
        if not (invariants.issuperset(met[0]) and witnesses.issuperset(met[1])):
            invariants.update(met[0])
            witnesses.update(met[1])
            self._on_new = new_state_checker(
                self.model, self._checked, met_invariants=invariants, met_witnesses=witnesses
            )
        model = self.model
        expand = expander(model, symmetry=self.options.symmetry)
        recovered, faults = model.recovered, model.fault_actions()
        check_recoverability = self.options.check_recoverability
        check_deadlock, quiescent_by_bound = self.options.check_deadlock, ends_by_design(model)
        # this level's candidates: the first successor per fingerprint, in key order; whether
        # it is new is decided by its owner, in one batch (the seen set is not read here)
        pending: set[int] = set()
        remember = pending.add
        candidates = _Candidates()
        add_fp, add_key = candidates.fps.append, candidates.keys.append
        add_name, add_args = candidates.names.append, candidates.args.append
        add_state = candidates.states.append
        edge_src, edge_fp = self.edge_src.append, self.edge_fp.append
        level_fired: list[str] = []  # as the serial loop: counted by Counter at the end
        level_enabled: list[str] = []
        fire = level_fired.append
        deadlock: int | None = None
        for src, src_fp, state in self.frontier:
            src_recovered = check_recoverability and recovered(state)
            if src_recovered:
                self.recovered_indices.append(src)
            record_edges = check_recoverability and not src_recovered
            first = len(level_fired)
            position = 0
            base = src << SHIFT
            for name, args, nxt, fp in expand(state):
                fire(name)
                if record_edges and fp != src_fp and name not in faults:
                    edge_src(src)
                    edge_fp(fp)
                if fp not in pending:
                    remember(fp)
                    add_fp(fp)
                    add_key(base | position)
                    add_name(name)
                    add_args(args)
                    add_state(nxt)
                position += 1
            if position > MAX_POSITION:
                raise ModelContractError(f"a state has more than {MAX_POSITION} successors")
            if len(level_fired) > first:
                level_enabled.extend(set(level_fired[first:]))
            elif (
                check_deadlock
                and deadlock is None
                and not quiescent_by_bound(state)
                and not recovered(state)
            ):
                deadlock = src
        del pending
        for counts, level_names in ((self.fired, level_fired), (self.enabled, level_enabled)):
            for name, times in Counter(level_names).items():
                if name not in counts:
                    raise ModelContractError(
                        f"model {model.name!r}: action {name!r} is not in action_names()"
                    )
                counts[name] += times
        self._exchange(candidates)
        return self._report(len(level_fired), deadlock)

    def _exchange(self, candidates: _Candidates) -> None:
        """Offer every candidate to its owner; owners keep the unseen fingerprints, each for
        its smallest key; this shard keeps the states it won (in key order)."""
        count, me, seen = self.count, self.me, self.seen
        fps = np.frombuffer(candidates.fps, dtype=np.uint64)
        keys = np.frombuffer(candidates.keys, dtype=np.uint64)
        owners = fps % np.uint64(count)
        chosen = [np.flatnonzero(owners == np.uint64(w)) for w in range(count)]
        # phase 1: candidates (fp, key) to their owners, with last level's numbering
        for target in self.others:
            self._send(
                target,
                "candidates",
                (
                    fps[chosen[target]].tobytes(),
                    keys[chosen[target]].tobytes(),
                    self._take_fixups(target),
                ),
            )
        received = self.mailbox.collect("candidates", self.level, self.others)
        for origin in self.others:
            self._apply_fixups(received[origin][2])
        # phase 2: the smallest key wins an unseen fingerprint; each winner goes back to its
        # generator as its position in the batch that generator sent
        batches: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = []
        for origin in range(count):
            if origin == me:
                batches.append((fps[chosen[me]], keys[chosen[me]]))
            else:
                raw_fps, raw_keys, _ = received[origin]
                batches.append(
                    (
                        np.frombuffer(raw_fps, dtype=np.uint64),
                        np.frombuffer(raw_keys, dtype=np.uint64),
                    )
                )
        del received
        all_fps = np.concatenate([b[0] for b in batches])
        all_keys = np.concatenate([b[1] for b in batches])
        origin_of = np.repeat(np.arange(count), [len(b[0]) for b in batches])
        position_in = np.concatenate([np.arange(len(b[0])) for b in batches])
        unseen = np.flatnonzero(~seen.contains(all_fps))
        order = np.lexsort((all_keys[unseen], all_fps[unseen]))  # by fingerprint, then key
        ranked = all_fps[unseen][order]
        first = np.ones(len(ranked), dtype=bool)
        first[1:] = ranked[1:] != ranked[:-1]
        winners = unseen[order[first]]
        seen.add(all_fps[winners])
        won: dict[int, np.ndarray[Any, Any]] = {}
        for origin in range(count):
            mine = position_in[winners[origin_of[winners] == origin]]
            if origin == me:
                won[me] = mine
            else:
                self._send(origin, "winners", mine.astype(np.uint32).tobytes())
        for owner, raw in self.mailbox.collect("winners", self.level, self.others).items():
            won[owner] = np.frombuffer(raw, dtype=np.uint32)
        # The generator keeps its winning states and expands them next level: no state
        # crosses a process boundary here, and a state's successors are computed where its
        # parent's were (the model's memo tables stay warm).
        positions = np.concatenate([chosen[owner][won[owner]] for owner in range(count)])
        positions = positions[np.argsort(keys[positions], kind="stable")]
        at = positions.tolist()
        names, argses, states = candidates.names, candidates.args, candidates.states
        self.won = _Won(
            fps=fps[positions],
            keys=keys[positions],
            names=[names[i] for i in at],
            args=[argses[i] for i in at],
            states=[materialise(states[i]) for i in at],
        )

    def _report(self, transitions: int, deadlock: int | None) -> LevelReport:
        on_new, within_bounds, checked = self._on_new, self.model.within_bounds, self._checked
        assert self.won is not None  # set by _exchange
        out_of_bounds = bytearray()
        outside = array("I")
        flag = out_of_bounds.append
        won = self.won
        for position, state in enumerate(won.states):
            if within_bounds(state):
                flag(0)
            else:
                flag(1)
                outside.append(position)
            on_new(position, state)
        won.out_of_bounds = out_of_bounds
        return LevelReport(
            won=len(won.states),
            out_of_bounds=outside.tobytes(),
            invariant_hits=self._take(checked.invariant_hits, self._met[0]),
            witness_hits=self._take(checked.witness_hits, self._met[1]),
            transitions=transitions,
            deadlock=deadlock,
            cpu_seconds=0.0,
        )

    def _take(self, hits: dict[str, int], met: set[str]) -> dict[str, int]:
        """This level's hits (positions in the level), leaving the dict empty for the next
        level; the checker holding it has dropped those names already."""
        out = dict(hits)
        hits.clear()
        met.update(out)
        return out

    # ---- after the levels ----------------------------------------------------------------

    def resolve_edges(self) -> tuple[bytes, bytes]:
        """Turn recorded ``(source index, target fingerprint)`` edges into index pairs (and
        drop them here: the coordinator keeps them)."""
        self.level += 1
        self._flush()
        count, me = self.count, self.me
        targets = np.frombuffer(self.edge_fp, dtype=np.uint64)
        owners = targets % np.uint64(count)
        chosen = [np.flatnonzero(owners == np.uint64(w)) for w in range(count)]
        for target in self.others:
            self._send(target, "edges", targets[chosen[target]].tobytes())
        asked = self.mailbox.collect("edges", self.level, self.others)
        table = (self.seen.keys, self.seen.values)
        answers = {
            origin: indices_of(table, np.frombuffer(raw, dtype=np.uint64)).tobytes()
            for origin, raw in asked.items()
        }
        for target in self.others:
            self._send(target, "edge-targets", answers[target])
        replies = self.mailbox.collect("edge-targets", self.level, self.others)
        dst = np.empty(len(targets), dtype=np.uint32)
        dst[chosen[me]] = indices_of(table, targets[chosen[me]])
        for owner in self.others:
            dst[chosen[owner]] = np.frombuffer(replies[owner], dtype=np.uint32)
        src = self.edge_src.tobytes()
        self.explored_bytes = self.storage()  # what the exploration held, edges included
        self.edge_src, self.edge_fp = array("I"), array("Q")
        return src, dst.tobytes()

    def finish(self) -> ShardSummary:
        """Deliver the last fix-ups and return the totals (the seen set is kept: its size
        and owners' answers stay right; the parent links serve ``links`` until closed)."""
        self.level += 1
        self._flush()
        storage = max(self.storage(), self.explored_bytes)
        return ShardSummary(
            enabled=self.enabled,
            fired=self.fired,
            new_states=self.new_states,
            recovered=self.recovered_indices.tobytes(),
            blocks=np.asarray(self.blocks, dtype=np.int64).reshape(-1, 3).tobytes(),
            flags=bytes(self.flags),
            seen=len(self.seen),
            storage_bytes=storage,
            rss_growth=max(
                0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - self.rss_start
            ),
        )

    def links(self, indices: Sequence[int]) -> list[tuple[int, ActionInstance]]:
        """``(parent index, action instance)`` of each of ``indices`` (states stored here).

        Raises :class:`CheckerError` for an index this shard does not hold."""
        if not indices:
            return []
        blocks = np.asarray(self.blocks, dtype=np.int64).reshape(-1, 3)
        wanted = np.asarray(indices, dtype=np.int64)
        at = np.searchsorted(blocks[:, 0], wanted, side="right") - 1
        offset = wanted - blocks[at, 0]
        if (at < 0).any() or (offset >= blocks[at, 2]).any():
            raise CheckerError("a parent link was asked of a shard that does not hold it")
        local = (blocks[at, 1] + offset).tolist()
        parent, aids, table = self.parent, self.action_ids, self.action_table
        return [(parent[i], table[aids[i]]) for i in local]

    def storage(self) -> int:
        """Bytes held for the exploration: the seen set, the links, the flags, the edges."""
        return self.seen.nbytes() + sum(
            sys.getsizeof(item)
            for item in (self.parent, self.action_ids, self.flags, self.edge_src, self.edge_fp)
        )

    def handle(self, command: str, payload: Any) -> Any:
        """Run one coordinator command (``_parallel.drive``) and return its reply."""
        if command == "step":
            return self.step(payload)
        if command == "edges":
            return self.resolve_edges()
        if command == "finish":
            return self.finish()
        if command == "links":
            return self.links(payload)
        raise CheckerError(f"unknown worker command {command!r}")
