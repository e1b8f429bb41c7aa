"""Multi-process BFS: the seen set is sharded by fingerprint over worker processes.

Level-synchronous protocol (``W`` workers, worker ``fp % W`` owns fingerprint ``fp``; the
coordinator is the calling process and keeps the parent links):

1. **Expand** (every worker, its frontier in index order): each successor gets the key
   ``parent_index << 20 | position`` (its serial discovery order). Per level a worker keeps the
   first candidate per fingerprint and sends ``(fingerprint, key)`` arrays to the owners.
2. **Decide** (owners): a candidate is new when its fingerprint is unseen; among candidates with
   the same fingerprint the smallest key wins (exactly the serial parent). Winners go back to
   the worker that generated them.
3. **Keep** (generators): a worker keeps the states it won, checks their invariants,
   witnesses and bounds and reports keys and action codes to the coordinator. It expands them
   next level itself, so a state's successors are computed in the process that computed its
   parent's, where the model's memo tables already hold its unchanged parts.
4. **Number** (coordinator): merging all keys in order gives every new state its serial index;
   each generator learns its states' indices (its next frontier) and forwards the ones another
   worker owns with its next candidate batch ("fix-ups": the seen set maps fingerprint to
   index, read for the recoverability edges).
5. **Balance** (coordinator, when the frontiers differ by more than 1/32): the largest
   frontiers send their highest-index states to the smallest. This is the only time states
   cross a process boundary (pickled); everything else moves as int arrays.

The result equals the single-process run: same indices, parents, counts and verdicts (on a
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

import numpy as np

from tent_models.checker._bfs import (
    Exploration,
    ProgressHook,
    new_exploration,
    seed_initial,
    storage_bytes,
)
from tent_models.checker._errors import CheckerError
from tent_models.checker._shard import SHIFT, LevelReport, Options, Worker
from tent_models.checker._trace import ActionInstance
from tent_models.model_api import SpecModel

__all__ = ["Caller", "balance_plan", "drive", "explore_parallel", "shard_initial"]


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


def balance_plan(
    sizes: Sequence[int],
) -> list[tuple[list[tuple[int, int]], list[int]]] | None:
    """Moves that even out the workers' frontiers, or None when they are even enough.

    A state is expanded by the worker that generated it, so the frontiers drift apart (all
    of them start at the initial states' owners). When the largest and smallest differ by
    more than 1/32 of the total (and 64 states), the largest surpluses go to the largest
    deficits. Per worker: ``(sends as (target, count), sources it receives from)``.
    """
    total, workers = sum(sizes), len(sizes)
    if workers < 2 or max(sizes) - min(sizes) <= max(64, total // 32):
        return None
    target = total // workers
    donors = sorted(
        ((size - target, w) for w, size in enumerate(sizes) if size > target), reverse=True
    )
    takers = sorted(
        ((target - size, w) for w, size in enumerate(sizes) if size < target), reverse=True
    )
    plan: list[tuple[list[tuple[int, int]], list[int]]] = [([], []) for _ in range(workers)]
    for surplus, donor in donors:
        left = surplus
        for position, (deficit, taker) in enumerate(takers):
            moved = min(left, deficit)
            if moved <= 0:
                continue
            plan[donor][0].append((taker, moved))
            plan[taker][1].append(donor)
            takers[position] = (deficit - moved, taker)
            left -= moved
    return plan


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


def _number_level(
    record: Exploration,
    reports: Sequence[LevelReport],
    translate: list[list[int]],
    workers: int,
    room: int,
) -> tuple[list[np.ndarray[Any, Any]], np.ndarray[Any, Any]]:
    """Give this level's new states their serial indices (at most ``room`` of them), in numpy.

    Merging every worker's keys (``parent << SHIFT | position``, ascending per worker) in key
    order is the serial discovery order; each kept state's parent, action id and bounds flag
    are appended to ``record``. Returns per worker the indices of its states in its key order
    (the first ones, when the cut keeps only some) and the kept states' out-of-bounds flags.
    """
    keys = [np.frombuffer(r.keys, dtype=np.uint64) for r in reports]
    tagged = np.concatenate(
        [k * np.uint64(workers) + np.uint64(w) for w, k in enumerate(keys)]
    ).astype(np.uint64)
    codes = np.concatenate([np.frombuffer(r.codes, dtype=np.uint64) for r in reports])
    flags = np.concatenate([np.frombuffer(r.out_of_bounds, dtype=np.uint8) for r in reports])
    order = np.argsort(tagged, kind="stable")[:room]
    merged, codes, flags = tagged[order], codes[order], flags[order]
    base = len(record.parent)
    origin = merged % np.uint64(workers)
    indices = [np.flatnonzero(origin == np.uint64(w)) + base for w in range(workers)]
    # the action id: the generating worker's local id through that worker's translation
    aids = np.empty(len(codes), dtype=np.uint32)
    generator = codes % np.uint64(workers)
    for w in range(workers):
        mine = generator == np.uint64(w)
        if mine.any():
            table = np.asarray(translate[w], dtype=np.uint32)
            aids[mine] = table[(codes[mine] // np.uint64(workers)).astype(np.int64)]
    parents = (merged // np.uint64(workers)) >> np.uint64(SHIFT)
    record.parent.frombytes(parents.astype(np.int32).tobytes())
    record.action_ids.frombytes(aids.tobytes())
    record.good.extend(flags.tobytes())
    for aid, times in enumerate(np.bincount(aids, minlength=0).tolist()):
        if times:
            name = record.action_table[aid][0]
            record.new_states[name] = record.new_states.get(name, 0) + times
    return indices, flags


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
        met = (tuple(record.invariant_hits), tuple(record.witness_hits))  # not evaluated again
        reports: list[LevelReport] = call("expand", [met] * workers)
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
        room = limit - len(record.parent)
        indices, out_merged = _number_level(record, reports, translate, workers, room)
        if len(out_merged) >= room:
            truncated = sum(len(r.out_of_bounds) for r in reports) > room or any(
                not flag for report in reports for flag in report.out_of_bounds
            )
        has_frontier = bool(len(out_merged)) and not bool(out_merged.all())
        merged = len(out_merged)
        for worker, report in enumerate(reports):
            kept = indices[worker]
            for hits, found in (
                (record.invariant_hits, report.invariant_hits),
                (record.witness_hits, report.witness_hits),
            ):
                for name, position in found.items():
                    if position < len(kept) and (name not in hits or kept[position] < hits[name]):
                        hits[name] = int(kept[position])
        sizes = call("assign", [part.astype(np.int64).tobytes() for part in indices])
        plan = balance_plan(sizes)
        if plan is not None:
            call("balance", plan)
        if merged:
            record.depth += 1
        worker_bytes = sum(report.storage_bytes for report in reports)
        if progress is not None:
            progress(len(record.parent), record.transitions, record.depth)
    record.exhaustive = not has_frontier and not truncated
    return worker_bytes
