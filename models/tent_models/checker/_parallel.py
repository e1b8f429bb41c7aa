"""Multi-process BFS: the seen set is sharded by fingerprint over worker processes.

Level-synchronous protocol (``W`` workers; worker ``fp % W`` owns fingerprint ``fp``):

1. **Contiguous frontiers.** Each worker's frontier is a run of consecutive state indices, in
   index order, below the next worker's. A successor's key is ``parent_index << 20 |
   position`` (its serial discovery order), so every key worker ``w`` generates is below
   every key worker ``w + 1`` generates.
2. **Expand** (every worker): per level a worker keeps the first candidate per fingerprint and
   sends ``(fingerprint, key)`` arrays to the owners. It does not read the seen set.
3. **Decide** (owners): a candidate is new when its fingerprint is unseen; among candidates
   with the same fingerprint the smallest key wins (exactly the serial parent). Winners go
   back to the worker that generated them, as positions in its batch.
4. **Keep** (generators): a worker keeps the states it won, checks their invariants,
   witnesses and bounds, and reports *how many* it won. By (1), the serial order of the new
   level is worker 0's winners in key order, then worker 1's, ...: the coordinator turns the
   counts into each worker's first index (a prefix sum) and sends it back with the next
   level's command. The worker stores the parent links of its new states itself (the
   parent's index and the action) and expands them next level, in the process whose memo
   tables computed their parent's successors. It forwards the indices of the states another
   worker owns with its next candidate batch ("fix-ups": the owners' seen sets map
   fingerprint to index, read for the recoverability edges).
5. **Balance** (when the largest frontier exceeds the mean by more than 1/32): frontiers are
   re-cut into equal contiguous runs (:func:`~._shard.split_contiguous`); the only time
   states cross a process boundary (pickled).

Per level the coordinator handles ``W`` small reports and sends ``W`` small commands: no
per-state work, so the serial part does not grow with the model. A counterexample is rebuilt
by walking back from its last state across the shards that hold each link
(:meth:`~._bfs.Exploration.prefetch`), so the workers live until the result is built.

The result equals the single-process run: the same indices, parents, counts, verdicts,
counterexamples, witnesses and coverage (on a ``max_states`` cut the same states are kept;
coverage may count a few more transitions). Workers are forked, so the model is inherited and
need not be picklable (POSIX only).
"""

from __future__ import annotations

import gc
import multiprocessing
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
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
from tent_models.checker._seen import ShardSeen
from tent_models.checker._shard import (
    Assignment,
    LevelReport,
    Options,
    ShardSummary,
    Worker,
    split_contiguous,
)
from tent_models.checker._trace import ActionInstance
from tent_models.model_api import SpecModel

__all__ = ["Caller", "drive", "explore_parallel", "shard_initial"]


def _worker_main(
    model: SpecModel[Any],
    *,
    me: int,
    options: Options,
    inboxes: Sequence[Queue[Any]],
    conn: Connection,
    seen: ShardSeen,
    frontier: list[tuple[int, int, Any]],
) -> None:
    worker = Worker(model, me=me, options=options, inboxes=inboxes, seen=seen, frontier=frontier)
    gc.disable()  # as cyclic_gc_paused in the serial engine; this process only explores
    try:
        while True:
            command, payload = conn.recv()
            if command == "close":
                return
            conn.send(("ok", worker.handle(command, payload)))
    except EOFError:  # the coordinator is gone
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
) -> tuple[list[ShardSeen], list[list[tuple[int, int, Any]]]]:
    """Split the seeded seen entries by owner (``fingerprint % workers``) and the frontier
    (in index order) into contiguous runs, one per worker."""
    shard_seen = [ShardSeen() for _ in range(workers)]
    for w, table in enumerate(shard_seen):
        mine = [(fp, index) for fp, index in entries if fp % workers == w]
        table.add(
            np.asarray([fp for fp, _ in mine], dtype=np.uint64),
            np.asarray([index for _, index in mine], dtype=np.int64),
        )
    ordered = sorted(frontier, key=lambda item: item[0])
    cuts = [len(ordered) * w // workers for w in range(workers + 1)]
    return shard_seen, [ordered[cuts[w] : cuts[w + 1]] for w in range(workers)]


@contextmanager
def explore_parallel(
    model: SpecModel[Any],
    *,
    workers: int,
    symmetry: bool,
    max_states: int | None,
    check_deadlock: bool,
    check_recoverability: bool,
    progress: ProgressHook | None,
) -> Iterator[Exploration]:
    """Explore ``model`` with ``workers`` forked processes (protocol in the module docstring);
    the workers serve parent links (``Exploration.prefetch``) until the block ends.

    Raises :class:`CheckerError` when a worker fails (with its traceback text) and
    :class:`ModelContractError` when the model has no initial state. Workers are always
    terminated when the block ends.
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

    def call(command: str, payloads: Sequence[Any]) -> list[Any]:
        return _call(conns, command, payloads)

    try:
        for process in processes:
            process.start()
        drive(
            model,
            record,
            call=call,
            workers=workers,
            limit=limit,
            has_frontier=bool(initial_frontier),
            check_recoverability=check_recoverability,
            progress=progress,
        )
        record.seconds = time.perf_counter() - started
        yield record
    finally:
        for conn in conns:
            with suppress(OSError):
                conn.send(("close", None))
        for process in processes:
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
                process.join()
        for inbox in inboxes:
            inbox.close()
            inbox.join_thread()


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
) -> None:
    """Coordinate the workers through every level, then merge their edges, coverage and
    flags into ``record`` and point its parent links at the workers.

    The transport is ``call`` (pipes to forked processes here, Ray actor calls in
    :mod:`._ray`); it must reach the workers until the result is built.
    """
    blocks = _run_levels(
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
    summaries: list[ShardSummary] = call("finish", [None] * workers)
    good = np.zeros(record.distinct_states, dtype=np.uint8)
    good[: len(record.good)] = np.frombuffer(bytes(record.good), dtype=np.uint8)
    worker_bytes = 0
    for summary in summaries:
        for name in record.enabled:
            record.enabled[name] += summary.enabled[name]
            record.fired[name] += summary.fired[name]
            record.new_states[name] += summary.new_states[name]
        flags = np.frombuffer(summary.flags, dtype=np.uint8)
        for first, local, count in np.frombuffer(summary.blocks, dtype=np.int64).reshape(-1, 3):
            good[first : first + count] = flags[local : local + count]
        worker_bytes += summary.storage_bytes
    for summary in summaries:  # after every block's flags: a shard expands others' states
        good[np.frombuffer(summary.recovered, dtype=np.uint32)] = 1
    record.good = bytearray(good.tobytes())
    record.shard_states = [summary.seen for summary in summaries]
    record.rss_growth = sum(summary.rss_growth for summary in summaries)
    record.storage_bytes = worker_bytes + storage_bytes(0, 0, record.parent, record.action_ids)
    starts = np.asarray([first for first, _ in blocks], dtype=np.int64)
    holders = [worker for _, worker in blocks]

    def links(indices: Sequence[int]) -> list[tuple[int, ActionInstance]]:
        """Each index's parent link, asked of the workers that hold them (one round)."""
        owner = np.searchsorted(starts, np.asarray(indices, dtype=np.int64), side="right") - 1
        asked: list[list[int]] = [[] for _ in range(workers)]
        for index, block in zip(indices, owner.tolist(), strict=True):
            asked[holders[block]].append(index)
        answers = call("links", asked)
        found = {
            index: link
            for mine, theirs in zip(asked, answers, strict=True)
            for index, link in zip(mine, theirs, strict=True)
        }
        return [found[index] for index in indices]

    record.links = links


def _run_levels(
    record: Exploration,
    *,
    call: Caller,
    workers: int,
    limit: int,
    has_frontier: bool,
    progress: ProgressHook | None,
) -> list[tuple[int, int]]:
    """Run BFS levels until done; return the stored blocks as ``(first index, worker)``."""
    count = record.distinct_states = len(record.parent)
    truncated = count >= limit and has_frontier
    blocks: list[tuple[int, int]] = []
    orders = [Assignment(first=count)] * workers
    while has_frontier and not truncated:
        if record.invariant_hits or record.deadlock is not None:
            break
        met = (tuple(record.invariant_hits), tuple(record.witness_hits))  # not evaluated again
        orders = [Assignment(first=o.first, kept=o.kept, plan=o.plan, met=met) for o in orders]
        reports: list[LevelReport] = call("step", orders)
        record.level_cpu.append([report.cpu_seconds for report in reports])
        # number the level: worker 0's states first (its keys are the smallest), then 1's, ...
        firsts, kepts, sizes = [], [], []
        for worker, report in enumerate(reports):
            kept = max(0, min(report.won, limit - count))
            outside = np.frombuffer(report.out_of_bounds, dtype=np.uint32)
            firsts.append(count)
            kepts.append(kept)
            sizes.append(kept - int(np.count_nonzero(outside < kept)))
            record.transitions += report.transitions
            if report.deadlock is not None and (
                record.deadlock is None or report.deadlock < record.deadlock
            ):
                record.deadlock = report.deadlock
            for hits, found in (
                (record.invariant_hits, report.invariant_hits),
                (record.witness_hits, report.witness_hits),
            ):
                for name, position in found.items():
                    if position < kept and (name not in hits or count + position < hits[name]):
                        hits[name] = count + position
            if kept:
                blocks.append((count, worker))
            count += kept
        new = count - firsts[0]
        if new and count >= limit:
            truncated = True
        has_frontier = sum(sizes) > 0
        record.distinct_states = count
        if new:
            record.depth += 1
        stop = (
            truncated
            or not has_frontier
            or bool(record.invariant_hits)
            or record.deadlock is not None
        )
        plans = None if stop else split_contiguous(sizes)
        orders = [
            Assignment(
                first=firsts[w],
                kept=kepts[w],
                plan=None if plans is None else plans[w],
                expand=not stop,
            )
            for w in range(workers)
        ]
        if stop:
            call("step", orders)  # store the last level's states, expand nothing
        if progress is not None:
            progress(count, record.transitions, record.depth)
    record.exhaustive = not has_frontier and not truncated
    return blocks
