"""Sharded exhaustive exploration on Ray actors (the optional ``[ray]`` extra).

The protocol is the multi-process engine's (:mod:`._parallel`), unchanged: ``W`` shards, shard
``fp % W`` owns fingerprint ``fp`` and its part of the seen set; each shard's frontier is a
contiguous run of indices; levels are synchronous; each level moves candidate ``(fingerprint,
key)`` arrays to their owners and winners back, in one batch per pair of shards; a shard keeps
the parent links of the states it found, and the coordinator (the calling process) only turns
each level's per-shard counts into first indices. So the result is the serial run's: the same
counts, verdicts, counterexamples, witnesses and coverage. Only the transport differs:

* each shard is a Ray actor holding a :class:`~._shard.Worker`; a shard sends a batch to
  another by calling that actor's ``deliver`` (fire and forget), which puts it in the
  receiver's local queue; an actor runs two threads, so ``deliver`` runs while the shard's
  command waits for its batches;
* the coordinator's commands (``step``, ``edges``, ``finish``, ``links``) are actor calls.

The model object is shipped to every actor (Ray pickles it with cloudpickle): its classes must
be importable where the actors run (install the project on the cluster's nodes, or pass a Ray
``runtime_env``).
"""

from __future__ import annotations

import gc
import queue
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import attrs

from tent_models.checker._bfs import (
    Exploration,
    ProgressHook,
    new_exploration,
    seed_initial,
)
from tent_models.checker._errors import CheckerError, InvalidArgument
from tent_models.checker._parallel import drive, shard_initial
from tent_models.checker._seen import ShardSeen
from tent_models.checker._shard import Options, Worker
from tent_models.model_api import SpecModel

__all__ = ["RayEngine", "connect", "current_engine", "explore_ray", "on_ray"]


def connect(address: str) -> Any:
    """Import Ray and join the cluster at ``address`` (``auto``, ``ray://host:port``, ``local``
    for a new local cluster); an already initialised Ray session is reused as it is.

    Raises :class:`InvalidArgument` when Ray is not installed (``pip install
    'tent-protocol[ray]'``) or cannot reach the cluster; nothing else is changed then.
    """
    try:
        import ray  # noqa: PLC0415 - the optional [ray] extra, imported only when used
    except ImportError as exc:  # the optional extra
        raise InvalidArgument("the Ray engine needs Ray: pip install 'tent-protocol[ray]'") from exc
    if not ray.is_initialized():
        try:
            ray.init(address=None if address == "local" else address, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise InvalidArgument(f"cannot join the Ray cluster at {address!r}: {exc}") from exc
    return ray


class _Outbox:
    """``put`` a message to another shard: a fire-and-forget call of its ``deliver``."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def put(self, message: Any) -> None:
        self.handle.deliver.remote(message)


class ShardActor:
    """One shard of the seen set (wrapped by ``ray.remote`` in :func:`explore_ray`)."""

    def __init__(
        self,
        model: SpecModel[Any],
        me: int,
        options: Options,
        seen: ShardSeen,
        frontier: list[tuple[int, int, Any]],
    ) -> None:
        gc.disable()  # as cyclic_gc_paused in the serial engine: this actor only explores
        self.model, self.me, self.options = model, me, options
        self.seen, self.frontier = seen, frontier
        self.inbox: queue.Queue[Any] = queue.Queue()
        self.worker: Worker | None = None

    def connect(self, handles: Sequence[Any]) -> None:
        outboxes = [_Outbox(handle) for handle in handles]
        self.worker = Worker(
            self.model,
            me=self.me,
            options=self.options,
            inboxes=outboxes,
            seen=self.seen,
            frontier=self.frontier,
            inbox=self.inbox,
        )

    def deliver(self, message: Any) -> None:
        self.inbox.put(message)

    def run(self, command: str, payload: Any) -> Any:
        if self.worker is None:
            raise CheckerError("shard used before connect")
        return self.worker.handle(command, payload)


@contextmanager
def explore_ray(
    model: SpecModel[Any],
    *,
    address: str,
    workers: int,
    symmetry: bool,
    max_states: int | None,
    check_deadlock: bool,
    check_recoverability: bool,
    progress: ProgressHook | None,
) -> Iterator[Exploration]:
    """Explore ``model`` on ``workers`` Ray actors (protocol in the module docstring); the
    actors serve parent links (``Exploration.prefetch``) until the block ends.

    Raises :class:`InvalidArgument` when Ray is missing or unreachable, :class:`CheckerError`
    when an actor fails (with Ray's error text) and :class:`ModelContractError` when the model
    has no initial state. The actors are killed when the block ends.
    """
    ray = connect(address)
    started = time.perf_counter()
    # Shipped before the coordinator seeds (and so fills any memo tables of) the model.
    model_ref = ray.put(model)
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
    remote_class = ray.remote(max_concurrency=2, num_cpus=1)(ShardActor)
    actors = [
        remote_class.remote(model_ref, me, options, shard_seen[me], shard_frontier[me])
        for me in range(workers)
    ]
    del shard_seen, shard_frontier

    def wait(refs: list[Any]) -> list[Any]:
        try:
            return list(ray.get(refs))
        except ray.exceptions.RayError as exc:
            raise CheckerError(f"a Ray shard failed:\n{exc}") from exc

    def call(command: str, payloads: Sequence[Any]) -> list[Any]:
        return wait([a.run.remote(command, p) for a, p in zip(actors, payloads, strict=True)])

    try:
        wait([actor.connect.remote(actors) for actor in actors])
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
        for actor in actors:
            ray.kill(actor)


@attrs.frozen(kw_only=True)
class RayEngine:
    """Where :func:`~tent_models.checker.check` and ``simulate`` run inside :func:`on_ray`."""

    address: str
    shards: int = attrs.field(validator=attrs.validators.ge(1))
    swarm_tasks: int = attrs.field(validator=attrs.validators.ge(1))


_engine: ContextVar[RayEngine | None] = ContextVar("tent_ray_engine", default=None)


def current_engine() -> RayEngine | None:
    """The engine of the innermost active :func:`on_ray`, or None."""
    return _engine.get()


@contextmanager
def on_ray(
    address: str, *, shards: int | None = None, swarm_tasks: int | None = None
) -> Iterator[RayEngine]:
    """Within the block, ``check`` explores on ``shards`` Ray actors and ``simulate`` runs a
    swarm of ``swarm_tasks`` Ray tasks (callers that pass neither ``ray`` nor an explicit
    engine, such as ``tent check``'s registry, are redirected; results are unchanged for
    ``check``). Both default to the cluster's CPU count (at least 2).

    Raises :class:`InvalidArgument` when Ray is missing or unreachable, or a count is < 1.
    """
    ray = connect(address)
    cpus = max(2, int(ray.cluster_resources().get("CPU", 2)))
    try:
        engine = RayEngine(
            address=address,
            shards=cpus if shards is None else shards,
            swarm_tasks=cpus if swarm_tasks is None else swarm_tasks,
        )
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from exc
    token = _engine.set(engine)
    try:
        yield engine
    finally:
        _engine.reset(token)
