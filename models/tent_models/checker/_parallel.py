"""Multi-process BFS: the seen set is sharded by fingerprint over worker processes.

Level-synchronous protocol (``W`` workers, worker ``fp % W`` owns fingerprint ``fp``; the
coordinator is the calling process and keeps the parent links):

1. **Expand** (every worker, its frontier in index order): each successor gets the key
   ``parent_index << 20 | position`` (its serial discovery order). Per level a worker keeps the
   first candidate per fingerprint and sends ``(fingerprint, key)`` arrays to the owners.
2. **Decide** (owners): a candidate is new when its fingerprint is unseen; among candidates with
   the same fingerprint the smallest key wins (exactly the serial parent). Winners go back to
   the worker that generated them.
3. **Ship** (generators): the winning states go to their owners, which check invariants,
   witnesses and bounds and report keys and action codes to the coordinator.
4. **Number** (coordinator): merging all keys in order gives every new state its serial index;
   each owner learns its states' indices and they become its next frontier.

States cross a process boundary only once, when new; everything else moves as int arrays. The
result equals the single-process run: same indices, parents, counts and verdicts (on a
``max_states`` cut the same states are kept; coverage may count a few more transitions).
Workers are forked, so the model is inherited and need not be picklable (POSIX only).
"""

from __future__ import annotations

import gc
import multiprocessing
import sys
import time
import traceback
from array import array
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.queues import Queue
from typing import Any

import attrs

from tent_models.checker._bfs import (
    _KEY_OBJECT_BYTES,
    Exploration,
    ProgressHook,
    new_exploration,
    new_state_checker,
    seed_initial,
    storage_bytes,
)
from tent_models.checker._components import materialise
from tent_models.checker._errors import CheckerError, ModelContractError
from tent_models.checker._fastpath import expander
from tent_models.checker._trace import ActionInstance
from tent_models.model_api import SpecModel

__all__ = ["Caller", "Options", "Worker", "drive", "explore_parallel", "shard_initial"]

_SHIFT = 20  # successor position bits in a key
_MAX_POSITION = (1 << _SHIFT) - 1


@attrs.frozen(kw_only=True)
class Options:
    workers: int
    symmetry: bool
    check_deadlock: bool
    check_recoverability: bool


@attrs.frozen(kw_only=True)
class _LevelReport:
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

    def _send(self, target: int, tag: str, payload: Any) -> None:
        self.inboxes[target].put((tag, self.level, self.me, payload))

    def expand(self) -> _LevelReport:
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
            base = src << _SHIFT
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
            if position > _MAX_POSITION:
                raise ModelContractError(f"a state has more than {_MAX_POSITION} successors")
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
        # phase 1: candidates (fp, key) to their owners
        fps_out = [array("Q") for _ in range(count)]
        keys_out = [array("Q") for _ in range(count)]
        for fp, (key, _, _) in pending.items():
            owner = fp % count
            fps_out[owner].append(fp)
            keys_out[owner].append(key)
        for target in self.others:
            self._send(
                target, "candidates", (fps_out[target].tobytes(), keys_out[target].tobytes())
            )
            # After this level its owner has every one of them (already seen or numbered now):
            # later levels need not offer them again.
            self.known_remote.update(fps_out[target])
        received = self.mailbox.collect("candidates", self.level, self.others)
        received[me] = (fps_out[me].tobytes(), keys_out[me].tobytes())
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
            seen[fp] = -1  # numbered by the coordinator (assign)
            wins[origin].append(fp)
        for target in self.others:
            self._send(target, "winners", wins[target].tobytes())
        won = self.mailbox.collect("winners", self.level, self.others)
        won[me] = wins[me].tobytes()
        # phase 3: ship the winning states to their owners
        shipments: dict[int, list[tuple[int, int, int, Any]]] = {}
        for owner in range(count):
            fps = array("Q")
            fps.frombytes(won[owner])
            shipments[owner] = [
                (pending[fp][0], fp, pending[fp][1] * count + me, pending[fp][2]) for fp in fps
            ]
        for target in self.others:
            self._send(target, "states", shipments[target])
        arrived = self.mailbox.collect("states", self.level, self.others)
        arrived[me] = shipments[me]
        # States from other workers arrive as fresh objects: a model's ``intern`` (optional,
        # returns an equal state) lets its id-keyed memo tables recognise their parts.
        intern = getattr(self.model, "intern", None)
        if callable(intern):
            for origin in self.others:
                arrived[origin] = [
                    (key, fp, code, intern(state)) for key, fp, code, state in arrived[origin]
                ]
        self.incoming = sorted(
            (item for origin in range(count) for item in arrived[origin]), key=lambda item: item[0]
        )

    def _report(self, transitions: int, deadlock: int | None) -> _LevelReport:
        model = self.model
        scratch = new_exploration(model)
        on_new = new_state_checker(model, scratch)
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
        return _LevelReport(
            keys=keys.tobytes(),
            codes=codes.tobytes(),
            out_of_bounds=bytes(out_of_bounds),
            invariant_hits=scratch.invariant_hits,
            witness_hits=scratch.witness_hits,
            new_actions=new_actions,
            transitions=transitions,
            deadlock=deadlock,
            storage_bytes=self.storage(),
        )

    def assign(self, indices_bytes: bytes) -> None:
        """Number this level's new states; drop the ones past a ``max_states`` cut."""
        indices = array("q")
        indices.frombytes(indices_bytes)
        frontier: list[tuple[int, int, Any]] = []
        for position, (fp, state, inside) in enumerate(self.new_level):
            if position < len(indices):
                self.seen[fp] = indices[position]
                if inside:
                    frontier.append((indices[position], fp, state))
            else:
                del self.seen[fp]
        self.frontier = frontier
        self.new_level = []
        self.level += 1

    def resolve_edges(self) -> tuple[bytes, bytes]:
        """Turn recorded ``(source index, target fingerprint)`` edges into index pairs."""
        self.level = -1  # a phase of its own
        for target in self.others:
            self._send(target, "edges", self.edge_fp[target].tobytes())
        asked = self.mailbox.collect("edges", -1, self.others)
        asked[self.me] = self.edge_fp[self.me].tobytes()
        answers: dict[int, bytes] = {}
        for origin, raw in asked.items():
            fps = array("Q")
            fps.frombytes(raw)
            answers[origin] = array("I", [self.seen[fp] for fp in fps]).tobytes()
        for target in self.others:
            self._send(target, "edge-targets", answers[target])
        replies = self.mailbox.collect("edge-targets", -1, self.others)
        replies[self.me] = answers[self.me]
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
            return self.expand()
        if command == "assign":
            self.assign(payload)
            return None
        if command == "edges":
            return self.resolve_edges()
        if command == "finish":
            return (self.enabled, self.fired, self.recovered_indices.tobytes(), len(self.seen))
        raise CheckerError(f"unknown worker command {command!r}")


def _worker_main(
    model: SpecModel[Any],
    *,
    me: int,
    options: Options,
    inboxes: Sequence[Queue[Any]],
    conn: Connection,
    seen: dict[int, int],
    frontier: list[tuple[int, int, Any]],
) -> None:
    worker = Worker(model, me=me, options=options, inboxes=inboxes, seen=seen, frontier=frontier)
    gc.disable()  # as cyclic_gc_paused in the serial engine; this process only explores
    try:
        while True:
            command, payload = conn.recv()
            conn.send(("ok", worker.handle(command, payload)))
            if command == "finish":
                return
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def _call(conns: Sequence[Connection], command: str, payloads: Sequence[Any]) -> list[Any]:
    for conn, payload in zip(conns, payloads, strict=True):
        conn.send((command, payload))
    results = []
    for conn in conns:
        try:
            status, value = conn.recv()
        except EOFError as exc:
            raise CheckerError("a checker worker process died") from exc
        if status == "error":
            raise CheckerError(f"a checker worker failed:\n{value}")
        results.append(value)
    return results


def shard_initial(
    entries: list[tuple[int, int]], frontier: list[tuple[int, int, Any]], workers: int
) -> tuple[list[dict[int, int]], list[list[tuple[int, int, Any]]]]:
    """Split the seeded seen entries and frontier by owner (``fingerprint % workers``)."""
    shard_seen: list[dict[int, int]] = [{} for _ in range(workers)]
    for fp, index in entries:
        shard_seen[fp % workers][fp] = index
    shard_frontier: list[list[tuple[int, int, Any]]] = [[] for _ in range(workers)]
    for item in frontier:
        shard_frontier[item[1] % workers].append(item)
    return shard_seen, shard_frontier


def explore_parallel(
    model: SpecModel[Any],
    *,
    workers: int,
    symmetry: bool,
    max_states: int | None,
    check_deadlock: bool,
    check_recoverability: bool,
    progress: ProgressHook | None,
) -> Exploration:
    """Explore ``model`` with ``workers`` forked processes (protocol in the module docstring).

    Raises :class:`CheckerError` when a worker fails (with its traceback text) and
    :class:`ModelContractError` when the model has no initial state. Workers are always
    terminated before returning.
    """
    started = time.perf_counter()
    record = new_exploration(model)
    limit = max_states if max_states is not None else sys.maxsize
    entries, initial_frontier = seed_initial(model, record, symmetry=symmetry, limit=limit)
    options = Options(
        workers=workers,
        symmetry=symmetry,
        check_deadlock=check_deadlock,
        check_recoverability=check_recoverability,
    )
    shard_seen, shard_frontier = shard_initial(entries, initial_frontier, workers)
    context = multiprocessing.get_context("fork")
    inboxes: list[Queue[Any]] = [context.Queue() for _ in range(workers)]
    pipes = [context.Pipe() for _ in range(workers)]
    processes = [
        context.Process(
            target=_worker_main,
            args=(model,),
            kwargs={
                "me": me,
                "options": options,
                "inboxes": inboxes,
                "conn": pipes[me][1],
                "seen": shard_seen[me],
                "frontier": shard_frontier[me],
            },
            daemon=True,
        )
        for me in range(workers)
    ]
    del shard_seen, shard_frontier
    conns = [pipe[0] for pipe in pipes]
    try:
        for process in processes:
            process.start()
        worker_bytes, record.shard_states = drive(
            model,
            record,
            call=lambda command, payloads: _call(conns, command, payloads),
            workers=workers,
            limit=limit,
            has_frontier=bool(initial_frontier),
            check_recoverability=check_recoverability,
            progress=progress,
        )
    finally:
        for process in processes:
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
                process.join()
        for inbox in inboxes:
            inbox.close()
            inbox.join_thread()
    record.seconds = time.perf_counter() - started
    record.storage_bytes = worker_bytes + storage_bytes(
        0, 0, record.parent, record.action_ids, record.good, record.edge_src, record.edge_dst
    )
    return record


Caller = Callable[[str, Sequence[Any]], list[Any]]
"""Send one command to every worker (one payload each) and return their replies in order."""


def drive(
    model: SpecModel[Any],
    record: Exploration,
    *,
    call: Caller,
    workers: int,
    limit: int,
    has_frontier: bool,
    check_recoverability: bool,
    progress: ProgressHook | None,
) -> tuple[int, list[int]]:
    """Coordinate the workers through every level, then merge their edges and coverage.

    The transport is ``call`` (pipes to forked processes here, Ray actor calls in
    :mod:`._ray`). Returns the workers' storage estimate in bytes and each shard's number of
    stored states.
    """
    worker_bytes = _run_levels(
        model,
        record,
        call=call,
        workers=workers,
        limit=limit,
        has_frontier=has_frontier,
        progress=progress,
    )
    if record.exhaustive and check_recoverability:
        for raw_src, raw_dst in call("edges", [None] * workers):
            record.edge_src.frombytes(raw_src)
            record.edge_dst.frombytes(raw_dst)
    sizes = []
    for enabled, fired, recovered_raw, size in call("finish", [None] * workers):
        for name in record.enabled:
            record.enabled[name] += enabled[name]
            record.fired[name] += fired[name]
        indices = array("I")
        indices.frombytes(recovered_raw)
        for index in indices:
            record.good[index] = 1
        sizes.append(size)
    return worker_bytes, sizes


def _run_levels(
    model: SpecModel[Any],
    record: Exploration,
    *,
    call: Caller,
    workers: int,
    limit: int,
    has_frontier: bool,
    progress: Callable[[int, int, int], None] | None,
) -> int:
    """Run BFS levels until done; return the workers' storage estimate in bytes."""
    translate: list[list[int]] = [[] for _ in range(workers)]
    action_index: dict[ActionInstance, int] = {}
    truncated = len(record.parent) >= limit and has_frontier
    worker_bytes = 0
    while has_frontier and not truncated:
        if record.invariant_hits or record.deadlock is not None:
            break
        reports: list[_LevelReport] = call("expand", [None] * workers)
        for worker, report in enumerate(reports):
            for instance in report.new_actions:
                aid = action_index.get(instance)
                if aid is None:
                    aid = action_index[instance] = len(record.action_table)
                    record.action_table.append(instance)
                translate[worker].append(aid)
            record.transitions += report.transitions
            if report.deadlock is not None and (
                record.deadlock is None or report.deadlock < record.deadlock
            ):
                record.deadlock = report.deadlock
        keys = [array("Q") for _ in range(workers)]
        codes = [array("Q") for _ in range(workers)]
        for worker, report in enumerate(reports):
            keys[worker].frombytes(report.keys)
            codes[worker].frombytes(report.codes)
        merged = sorted(key * workers + worker for worker in range(workers) for key in keys[worker])
        base = len(record.parent)
        room = limit - base
        if len(merged) >= room:
            truncated = len(merged) > room or any(
                not flag for report in reports for flag in report.out_of_bounds
            )
            merged = merged[:room]
        indices = [array("q") for _ in range(workers)]
        has_frontier = False
        for offset, tagged in enumerate(merged):
            worker = tagged % workers
            position = len(indices[worker])
            index = base + offset
            indices[worker].append(index)
            code = codes[worker][position]
            aid = translate[code % workers][code // workers]
            record.parent.append((tagged // workers) >> _SHIFT)
            record.action_ids.append(aid)
            name = record.action_table[aid][0]
            record.new_states[name] = record.new_states.get(name, 0) + 1
            out = reports[worker].out_of_bounds[position]
            record.good.append(out)
            has_frontier = has_frontier or not out
        for worker, report in enumerate(reports):
            kept = indices[worker]
            for hits, found in (
                (record.invariant_hits, report.invariant_hits),
                (record.witness_hits, report.witness_hits),
            ):
                for name, position in found.items():
                    if position < len(kept) and (name not in hits or kept[position] < hits[name]):
                        hits[name] = kept[position]
        call("assign", [part.tobytes() for part in indices])
        if merged:
            record.depth += 1
        worker_bytes = sum(report.storage_bytes for report in reports)
        if progress is not None:
            progress(len(record.parent), record.transitions, record.depth)
    record.exhaustive = not has_frontier and not truncated
    return worker_bytes
