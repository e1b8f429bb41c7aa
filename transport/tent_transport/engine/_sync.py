"""A synchronous facade: the engine on its own event-loop thread, for scripts and connectors.

Two calls never block the caller's thread (RFC goal 6: a serving framework's scheduler thread
must not wait on the transport): :meth:`SyncEngine.submit_nowait` only schedules the submit on
the engine's loop and returns a :class:`SyncHandle` at once, and :meth:`SyncEngine.pressure`
reads the per-peer :class:`~tent_credit.BackpressureInfo` snapshot of the last dispatch pass.
Everything else blocks until the loop answered (bounded by its ``timeout``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from tent_credit import BackpressureInfo
from tent_sched import TaskStatus

from ..config import EngineConfig
from ..dispatch import TransferRequest
from ..errors import LocalProtocolError, TransferFailed
from ..segments import Access, Exposure, Segment, SegmentDescriptors
from ._batches import Request, TaskState
from ._engine import Engine, submit_batch
from ._handle import HandleState, TransferHandle
from ._options import EngineOptions
from ._receiving import DataLanded

__all__ = ["SyncEngine", "SyncHandle"]

T = TypeVar("T")

_NOT_ADMITTED = HandleState(
    status=TaskStatus.PENDING,
    transfers=0,
    ended=0,
    moved_bytes=0,
    in_flight_slices=0,
    backpressure=None,
    peer_connected=True,
    detail="not admitted yet",
)


class SyncHandle:
    """A handle usable from any thread. A submit that the engine refused (a typed error) is
    re-raised by :meth:`wait`, :meth:`result` and :meth:`status`."""

    def __init__(
        self, engine: SyncEngine, future: concurrent.futures.Future[TransferHandle]
    ) -> None:
        self._engine = engine
        self._future = future

    def _handle(self) -> TransferHandle | None:
        if not self._future.done():
            return None
        return self._future.result()  # raises the submit's error

    def status(self) -> HandleState:
        handle = self._handle()
        if handle is None:
            return _NOT_ADMITTED
        return self._engine._call(handle.status)

    def wait(self, timeout: float | None = None) -> HandleState:
        """Block until every transfer ended or ``timeout`` seconds passed; the state either way."""
        handle = self._future.result(timeout)
        return self._engine._run(handle.wait(timeout), None if timeout is None else timeout + 5)

    def result(self, timeout: float | None = None) -> HandleState:
        """Like :meth:`wait`; raises :class:`TransferFailed` or :class:`TimeoutError`."""
        state = self.wait(timeout)
        if state.pending:
            raise TimeoutError(f"{state.transfers - state.ended} transfers still pending")
        if state.status is not TaskStatus.COMPLETED:
            raise TransferFailed(
                f"transfer ended {state.status.name}",
                status=state.status.name.lower(),
                detail=state.detail,
            )
        return state

    def cancel(self) -> bool:
        handle = self._future.result()
        return self._engine._call(handle.cancel)


class SyncEngine:
    """An :class:`Engine` run on a private loop thread (``uvloop`` when asked and installed)."""

    def __init__(
        self, config: EngineConfig, options: EngineOptions, *, use_uvloop: bool = False
    ) -> None:
        loop: asyncio.AbstractEventLoop
        if use_uvloop:
            import uvloop  # noqa: PLC0415 - an optional dependency, imported only when asked

            loop = uvloop.new_event_loop()
        else:
            loop = asyncio.new_event_loop()
        self._loop = loop
        self._closed = False
        self._thread = threading.Thread(target=loop.run_forever, name="tent-engine", daemon=True)
        self._thread.start()
        self.engine: Engine = self._run(self._make(config, options), 30)

    @staticmethod
    async def _make(config: EngineConfig, options: EngineOptions) -> Engine:
        return Engine(config, options)  # built in the loop: its events bind to it

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = 30) -> T:
        if self._closed:
            coro.close()  # never awaited: no "was never awaited" warning
            raise LocalProtocolError("the engine is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _call(self, fn: Callable[[], T], timeout: float | None = 30) -> T:
        async def call() -> T:
            return fn()

        return self._run(call(), timeout)

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> tuple[str, int]:
        return self._run(self.engine.start())

    def close(self) -> None:
        """Close the engine and stop its loop thread; a second call does nothing. Every other
        call after it raises :class:`LocalProtocolError`."""
        if self._closed:
            return
        try:
            self._run(self.engine.close())
        finally:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    def __enter__(self) -> SyncEngine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- sender

    def connect(self, host: str, port: int, *, expect_peer: int | None = None) -> int:
        return self._run(self.engine.connect(host, port, expect_peer=expect_peer))

    def submit_nowait(self, requests: Sequence[TransferRequest]) -> SyncHandle:
        """Schedule a submit on the engine's loop; never blocks. Thread-safe. Raises
        :class:`InvalidArgument` for anything but a list or tuple (checked here, in the
        caller's thread) and :class:`LocalProtocolError` once the engine is closed."""
        batch = submit_batch(requests)
        if self._closed:
            raise LocalProtocolError("the engine is closed")
        future: concurrent.futures.Future[TransferHandle] = concurrent.futures.Future()

        def submit() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(self.engine.submit(batch))
            except Exception as exc:  # the typed error travels to the caller's handle
                future.set_exception(exc)

        self._loop.call_soon_threadsafe(submit)
        return SyncHandle(self, future)

    def submit(self, requests: Sequence[TransferRequest]) -> SyncHandle:
        """Submit and wait until the engine admitted it (raises its typed error)."""
        handle = self.submit_nowait(requests)
        handle._future.result(30)
        return handle

    # the batch API (``_batches.py``): each call runs on the engine's loop and waits for it

    def open_segment(self, peer: int, segment_id: int) -> int:
        return self._call(lambda: self.engine.open_segment(peer, segment_id))

    def allocate_batch(self, capacity: int) -> int:
        return self._call(lambda: self.engine.allocate_batch(capacity))

    def submit_transfer(self, batch_id: int, requests: Sequence[Request]) -> tuple[int, ...]:
        """Submit into a batch and wait until the engine admitted it; its task ids."""
        return self._call(lambda: self.engine.submit_transfer(batch_id, requests))

    def transfer_status(self, batch_id: int, task_id: int) -> TaskState:
        return self._call(lambda: self.engine.transfer_status(batch_id, task_id))

    def batch_status(self, batch_id: int) -> tuple[TaskState, ...]:
        return self._call(lambda: self.engine.batch_status(batch_id))

    def cancel_transfer(self, batch_id: int, task_id: int) -> bool:
        return self._call(lambda: self.engine.cancel_transfer(batch_id, task_id))

    def free_batch(self, batch_id: int) -> None:
        self._call(lambda: self.engine.free_batch(batch_id))

    def pressure(self, peer: int) -> BackpressureInfo | None:
        """The pressure a submit to ``peer`` would meet (last pass's snapshot); never blocks."""
        return self.engine.backpressure(peer)

    def regions(self, peer: int) -> SegmentDescriptors | None:
        return self._call(lambda: self.engine.regions(peer))

    def wait_regions(
        self, peer: int, predicate: Callable[[SegmentDescriptors], bool], timeout: float = 10.0
    ) -> SegmentDescriptors:
        return self._run(self.engine.wait_regions(peer, predicate, timeout), timeout + 5)

    # ---------------------------------------------------------------- receiver

    def register(self, buffer: object) -> Segment:
        return self._call(lambda: self.engine.register(buffer))

    def expose(
        self, peer: int, segment_id: int, offset: int, length: int, access: Access = Access.WRITE
    ) -> Exposure:
        return self._call(lambda: self.engine.expose(peer, segment_id, offset, length, access))

    def sender_sessions(self) -> tuple[int, ...]:
        return self._call(self.engine.sender_sessions)

    def next_landed(self, timeout: float | None = None) -> DataLanded:
        """Block for the next data-landed notification; raises TimeoutError."""

        async def take() -> DataLanded:  # the engine's coroutine is made only in the loop
            return await asyncio.wait_for(self.engine.landed(), timeout)

        return self._run(take(), None)

    def release(self, event: DataLanded) -> bool:
        return self._call(lambda: self.engine.release(event))
