"""One shard of the multi-process (and Ray) BFS: its part of the seen set, its frontier.

The protocol a :class:`Worker` follows is described in :mod:`._parallel`; the transport is
whatever ``inboxes`` and ``inbox`` are (multiprocessing queues there, Ray actor calls in
:mod:`._ray`).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from typing import Any

import attrs

from tent_models.checker._bfs import (
    _KEY_OBJECT_BYTES,
    new_exploration,
    new_state_checker,
    storage_bytes,
)
from tent_models.checker._components import materialise
from tent_models.checker._errors import CheckerError, ModelContractError
from tent_models.checker._fastpath import expander
from tent_models.checker._trace import ActionInstance
from tent_models.model_api import SpecModel

__all__ = ["SHIFT", "LevelReport", "Options", "Worker"]

SHIFT = 20  # successor position bits in a key
MAX_POSITION = (1 << SHIFT) - 1


@attrs.frozen(kw_only=True)
class Options:
    workers: int
    symmetry: bool
    check_deadlock: bool
    check_recoverability: bool


@attrs.frozen(kw_only=True)
class LevelReport:
    """What an owner tells the coordinator after a level (positions index its sorted list)."""

    keys: bytes  # array('Q') of keys, ascending
    codes: bytes  # array('Q') of local_action_id * W + generating worker
    out_of_bounds: bytes  # one flag per new state
    invariant_hits: dict[str, int]
    witness_hits: dict[str, int]
    new_actions: list[ActionInstance]  # this worker's action table additions, in id order
    transitions: int
    deadlock: int | None
    storage_bytes: int


class _Mailbox:
    """Tagged worker-to-worker messages; early messages of a later phase are buffered."""

    def __init__(self, inbox: Any) -> None:  # anything with a blocking ``get()``
        self.inbox = inbox
        self.pending: dict[tuple[str, int, int], Any] = {}

    def collect(self, tag: str, level: int, senders: Sequence[int]) -> dict[int, Any]:
        wanted = {(tag, level, sender) for sender in senders}
        while not wanted <= self.pending.keys():
            msg_tag, msg_level, sender, payload = self.inbox.get()
            self.pending[(msg_tag, msg_level, sender)] = payload
        return {key[2]: self.pending.pop(key) for key in wanted}


class Worker:
    """One shard: its part of the seen set, its frontier, its coverage counters."""

    def __init__(
        self,
        model: SpecModel[Any],
        *,
        me: int,
        options: Options,
        inboxes: Sequence[Any],
        seen: dict[int, int],
        frontier: list[tuple[int, int, Any]],
        inbox: Any = None,
    ) -> None:
        """``inboxes[w].put(message)`` reaches worker ``w``; this worker reads its own from
        ``inbox`` (default ``inboxes[me]``, a multiprocessing queue)."""
        self.model = model
        self.me = me
        self.options = options
        self.count = options.workers
        self.inboxes = inboxes
        self.mailbox = _Mailbox(inboxes[me] if inbox is None else inbox)
        self.others = [w for w in range(self.count) if w != me]
        self.seen = seen
        self.frontier = frontier
        self.level = 0
        self.action_index: dict[ActionInstance, int] = {}
        self.reported_actions = 0
        self.action_table: list[ActionInstance] = []
        names = list(model.action_names())
        self.enabled = dict.fromkeys(names, 0)
        self.fired = dict.fromkeys(names, 0)
        self.recovered_indices = array("I")
        self.edge_src: list[array[int]] = [array("I") for _ in range(self.count)]
        self.edge_fp: list[array[int]] = [array("Q") for _ in range(self.count)]
        self.new_level: list[tuple[int, Any, bool]] = []  # (fp, state, in bounds), key order
        self.known_remote: set[int] = set()  # other shards' fingerprints offered before
        # indices of states this shard generated but another owns, sent with the next batch
        self.fixup_fps: list[array[int]] = [array("Q") for _ in range(self.count)]
        self.fixup_indices: list[array[int]] = [array("q") for _ in range(self.count)]
        self.incoming: list[tuple[int, int, int, Any]] = []
        # As in the serial loop, an invariant or witness met once is not evaluated again: not
        # the ones this shard met (its checker drops them), nor the ones any shard or the
        # initial states met (the coordinator names them with each level). A fresh checker
        # per level had re-evaluated every witness met so far on every new state. A shard's
        # first hit in a level is its smallest index there; the coordinator keeps the
        # smallest over shards and levels.
        self._checked = new_exploration(model)
        self._met: tuple[set[str], set[str]] = (set(), set())  # invariants, witnesses
        self._on_new = new_state_checker(model, self._checked)

    def _send(self, target: int, tag: str, payload: Any) -> None:
        self.inboxes[target].put((tag, self.level, self.me, payload))

    def expand(self, met: tuple[Sequence[str], Sequence[str]] = ((), ())) -> LevelReport:
        """Expand this shard's frontier; ``met``: the invariants and witnesses any shard (or
        an initial state) has hit already."""
        invariants, witnesses = self._met
        if not (invariants.issuperset(met[0]) and witnesses.issuperset(met[1])):
            invariants.update(met[0])
            witnesses.update(met[1])
            self._on_new = new_state_checker(
                self.model, self._checked, met_invariants=invariants, met_witnesses=witnesses
            )
        model, count, seen = self.model, self.count, self.seen
        expand = expander(model, symmetry=self.options.symmetry)
        recovered, faults = model.recovered, model.fault_actions()
        check_recoverability = self.options.check_recoverability
        pending: dict[int, tuple[int, int, Any]] = {}  # fp -> (key, local action id, state)
        known_remote = self.known_remote
        action_index, action_table = self.action_index, self.action_table
        transitions = 0
        deadlock: int | None = None
        for src, src_fp, state in self.frontier:
            src_recovered = check_recoverability and recovered(state)
            if src_recovered:
                self.recovered_indices.append(src)
            record_edges = check_recoverability and not src_recovered
            names: dict[str, int] = {}
            position = 0
            base = src << SHIFT
            for name, args, nxt, fp in expand(state):
                names[name] = names.get(name, 0) + 1
                owner = fp % count
                if record_edges and fp != src_fp and name not in faults:
                    self.edge_src[owner].append(src)
                    self.edge_fp[owner].append(fp)
                if fp not in pending and not (
                    fp in seen if owner == self.me else fp in known_remote
                ):
                    instance = (name, args)
                    aid = action_index.get(instance)
                    if aid is None:
                        aid = action_index[instance] = len(action_table)
                        action_table.append(instance)
                    pending[fp] = (base | position, aid, materialise(nxt))
                position += 1
            if position > MAX_POSITION:
                raise ModelContractError(f"a state has more than {MAX_POSITION} successors")
            for name, times in names.items():
                if name not in self.fired:
                    raise ModelContractError(
                        f"model {model.name!r}: action {name!r} is not in action_names()"
                    )
                self.enabled[name] += 1
                self.fired[name] += times
                transitions += times
            if (
                not names
                and self.options.check_deadlock
                and deadlock is None
                and not model.quiescent_by_bound(state)
                and not recovered(state)
            ):
                deadlock = src
        self._exchange(pending)
        return self._report(transitions, deadlock)

    def _exchange(self, pending: dict[int, tuple[int, int, Any]]) -> None:
        count, me = self.count, self.me
        # phase 1: candidates (fp, key) to their owners, with last level's numbering
        fps_out = [array("Q") for _ in range(count)]
        keys_out = [array("Q") for _ in range(count)]
        for fp, (key, _, _) in pending.items():
            owner = fp % count
            fps_out[owner].append(fp)
            keys_out[owner].append(key)
        for target in self.others:
            fixes = self._take_fixups(target)
            self._send(
                target,
                "candidates",
                (fps_out[target].tobytes(), keys_out[target].tobytes(), fixes),
            )
            # After this level its owner has every one of them (already seen or numbered now):
            # later levels need not offer them again.
            self.known_remote.update(fps_out[target])
        received = self.mailbox.collect("candidates", self.level, self.others)
        received[me] = (fps_out[me].tobytes(), keys_out[me].tobytes(), (b"", b""))
        for origin in self.others:
            self._apply_fixups(received[origin][2])
        # phase 2: the smallest key wins an unseen fingerprint; winners back to generators
        best: dict[int, tuple[int, int]] = {}
        seen = self.seen
        for origin in range(count):
            fps, keys = array("Q"), array("Q")
            fps.frombytes(received[origin][0])
            keys.frombytes(received[origin][1])
            for fp, key in zip(fps, keys, strict=True):
                if fp in seen:
                    continue
                held = best.get(fp)
                if held is None or key < held[0]:
                    best[fp] = (key, origin)
        wins = [array("Q") for _ in range(count)]
        for fp, (_, origin) in best.items():
            seen[fp] = -1  # numbered by the coordinator; the generator tells us (fix-ups)
            wins[origin].append(fp)
        for target in self.others:
            self._send(target, "winners", wins[target].tobytes())
        won = self.mailbox.collect("winners", self.level, self.others)
        won[me] = wins[me].tobytes()
        # The generator keeps its winning states and expands them next level: no state
        # crosses a process boundary here, and a state's successors are computed where its
        # parent's were (the model's memo tables stay warm).
        mine: list[tuple[int, int, int, Any]] = []
        for owner in range(count):
            fps = array("Q")
            fps.frombytes(won[owner])
            for fp in fps:
                key, aid, state = pending[fp]
                mine.append((key, fp, aid * count + me, state))
        mine.sort(key=lambda item: item[0])
        self.incoming = mine

    def _take_fixups(self, owner: int) -> tuple[bytes, bytes]:
        fps, indices = self.fixup_fps[owner], self.fixup_indices[owner]
        self.fixup_fps[owner], self.fixup_indices[owner] = array("Q"), array("q")
        return fps.tobytes(), indices.tobytes()

    def _apply_fixups(self, raw: tuple[bytes, bytes]) -> None:
        """Record the indices the coordinator gave to states this shard owns (-1: cut)."""
        fps, indices = array("Q"), array("q")
        fps.frombytes(raw[0])
        indices.frombytes(raw[1])
        seen = self.seen
        for fp, index in zip(fps, indices, strict=True):
            if index < 0:
                del seen[fp]
            else:
                seen[fp] = index

    def _flush(self) -> None:
        """Deliver every pending fix-up to its owner (before the seen set is read)."""
        for target in self.others:
            self._send(target, "fixups", self._take_fixups(target))
        for raw in self.mailbox.collect("fixups", self.level, self.others).values():
            self._apply_fixups(raw)
        self.level += 1

    def _report(self, transitions: int, deadlock: int | None) -> LevelReport:
        model = self.model
        on_new, checked = self._on_new, self._checked
        keys, codes, out_of_bounds = array("Q"), array("Q"), bytearray()
        self.new_level = []
        for position, (key, fp, code, state) in enumerate(self.incoming):
            keys.append(key)
            codes.append(code)
            on_new(position, state)
            inside = model.within_bounds(state)
            out_of_bounds.append(0 if inside else 1)
            self.new_level.append((fp, state, inside))
        self.incoming = []
        new_actions = self.action_table[self.reported_actions :]
        self.reported_actions = len(self.action_table)
        return LevelReport(
            keys=keys.tobytes(),
            codes=codes.tobytes(),
            out_of_bounds=bytes(out_of_bounds),
            invariant_hits=self._take(checked.invariant_hits, self._met[0]),
            witness_hits=self._take(checked.witness_hits, self._met[1]),
            new_actions=new_actions,
            transitions=transitions,
            deadlock=deadlock,
            storage_bytes=self.storage(),
        )

    def _take(self, hits: dict[str, int], met: set[str]) -> dict[str, int]:
        """This level's hits (positions in the level), leaving the dict empty for the next
        level; the checker holding it has dropped those names already."""
        out = dict(hits)
        hits.clear()
        met.update(out)
        return out

    def assign(self, indices_bytes: bytes) -> int:
        """Number this level's new states (those this shard generated and won); drop the
        ones past a ``max_states`` cut. Returns the size of the next frontier."""
        indices = array("q")
        indices.frombytes(indices_bytes)
        frontier: list[tuple[int, int, Any]] = []
        count, me, seen = self.count, self.me, self.seen
        for position, (fp, state, inside) in enumerate(self.new_level):
            index = indices[position] if position < len(indices) else -1
            owner = fp % count
            if owner == me:
                if index < 0:
                    del seen[fp]
                else:
                    seen[fp] = index
            else:
                self.fixup_fps[owner].append(fp)
                self.fixup_indices[owner].append(index)
            if index >= 0 and inside:
                frontier.append((index, fp, state))
        self.frontier = frontier
        self.new_level = []
        self.level += 1
        return len(frontier)

    def balance(self, plan: tuple[list[tuple[int, int]], list[int]]) -> int:
        """Move frontier states: ``(target, how many)`` to send, the workers to receive from.

        The states with the largest indices go; the frontier stays in index order (the
        candidates' first-per-fingerprint choice relies on it). Returns the new size.
        """
        sends, sources = plan
        for target, how_many in sends:
            moved = self.frontier[len(self.frontier) - how_many :]
            del self.frontier[len(self.frontier) - how_many :]
            self._send(target, "moved", moved)
        arrived = self.mailbox.collect("moved", self.level, sources)
        intern = getattr(self.model, "intern", None)
        for items in arrived.values():
            if callable(intern):  # fresh objects: let the model's id-keyed memos know them
                self.frontier.extend((index, fp, intern(state)) for index, fp, state in items)
            else:
                self.frontier.extend(items)
        if arrived:
            self.frontier.sort(key=lambda item: item[0])
        self.level += 1
        return len(self.frontier)

    def resolve_edges(self) -> tuple[bytes, bytes]:
        """Turn recorded ``(source index, target fingerprint)`` edges into index pairs."""
        self._flush()
        for target in self.others:
            self._send(target, "edges", self.edge_fp[target].tobytes())
        asked = self.mailbox.collect("edges", self.level, self.others)
        asked[self.me] = self.edge_fp[self.me].tobytes()
        answers: dict[int, bytes] = {}
        for origin, raw in asked.items():
            fps = array("Q")
            fps.frombytes(raw)
            answers[origin] = array("I", [self.seen[fp] for fp in fps]).tobytes()
        for target in self.others:
            self._send(target, "edge-targets", answers[target])
        replies = self.mailbox.collect("edge-targets", self.level, self.others)
        replies[self.me] = answers[self.me]
        self.level += 1
        src, dst = array("I"), array("I")
        for owner in range(self.count):
            src.extend(self.edge_src[owner])
            dst.frombytes(replies[owner])
        return src.tobytes(), dst.tobytes()

    def storage(self) -> int:
        return (
            storage_bytes(len(self.seen), sys.getsizeof(self.seen), *self.edge_src, *self.edge_fp)
            + sys.getsizeof(self.known_remote)
            + len(self.known_remote) * _KEY_OBJECT_BYTES
        )

    def handle(self, command: str, payload: Any) -> Any:
        """Run one coordinator command (``_drive``) and return its reply."""
        if command == "expand":
            return self.expand(payload or ((), ()))
        if command == "assign":
            return self.assign(payload)
        if command == "balance":
            return self.balance(payload)
        if command == "edges":
            return self.resolve_edges()
        if command == "finish":
            self._flush()
            return (self.enabled, self.fired, self.recovered_indices.tobytes(), len(self.seen))
        raise CheckerError(f"unknown worker command {command!r}")
