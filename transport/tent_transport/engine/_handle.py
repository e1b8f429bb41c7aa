"""Transfer handles: what a submit returns (docs/transport_design.md#transport-rule-5: handles never
lie).

A handle covers the transfers of one submit. Its status is PENDING until *every* transfer
ended, and a transfer ends only when none of its bytes can still move (every posted slice
completed or was flushed; the dispatch core guarantees it), so a caller may reuse a buffer once
its handle is terminal and never before. A timeout is not an outcome: :meth:`wait` returns the
pending state with what it is waiting for (a credit stall's ``BackpressureInfo``, slices in
flight, whether the peer's control session is up), so "slow" and "dead" read differently.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import attrs

from tent_credit import BackpressureInfo
from tent_sched import TaskStatus

from ..dispatch import TransferEvent, TransferState
from ..errors import TransferFailed

__all__ = ["HandleState", "TransferHandle"]


@attrs.frozen(kw_only=True)
class HandleState:
    """A snapshot of a handle.

    ``status``: PENDING while any transfer is live; else COMPLETED when all completed, or the
    first other terminal status (FAILED, CANCELED, ...). ``backpressure``: the first live
    transfer's stall reason (``None``: not stalled). ``peer_connected``: whether every peer the
    handle writes to has a live control session (``False`` while pending: probably dead, not
    slow). ``in_flight_slices``: slices posted and not yet completed.
    """

    status: TaskStatus
    transfers: int
    ended: int
    moved_bytes: int
    in_flight_slices: int
    backpressure: BackpressureInfo | None
    peer_connected: bool
    detail: str = ""

    @property
    def pending(self) -> bool:
        return self.status is TaskStatus.PENDING


class TransferHandle:
    """The transfers of one submit. Loop-thread object: use it from the engine's loop (the
    synchronous facade wraps it for other threads)."""

    def __init__(
        self,
        ids: tuple[int, ...],
        *,
        lookup: Callable[[int], TransferState | TransferEvent],
        cancel: Callable[[tuple[int, ...]], bool],
        peers_connected: Callable[[], bool],
    ) -> None:
        self.ids = ids
        self._lookup = lookup
        self._cancel = cancel
        self._peers_connected = peers_connected
        self._events: dict[int, TransferEvent] = {}
        self._done = asyncio.Event()
        if not ids:
            self._done.set()

    def _ended(self, event: TransferEvent) -> None:
        self._events[event.transfer_id] = event
        if len(self._events) == len(self.ids):
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def events(self) -> tuple[TransferEvent, ...]:
        """The terminal events so far, in submit order."""
        return tuple(self._events[i] for i in self.ids if i in self._events)

    def status(self) -> HandleState:
        moved = in_flight = 0
        backpressure: BackpressureInfo | None = None
        final: TaskStatus | None = None
        detail = ""
        for tid in self.ids:
            event = self._events.get(tid)
            if event is not None:
                moved += event.moved_bytes
                if final is None and event.status is not TaskStatus.COMPLETED:
                    final, detail = event.status, event.detail
                continue
            state = self._lookup(tid)
            assert isinstance(state, TransferState)
            moved += state.moved_bytes
            in_flight += state.slices_posted - state.slices_ended
            if backpressure is None:
                backpressure = state.backpressure
        if len(self._events) < len(self.ids):
            status = TaskStatus.PENDING
        else:
            status = final if final is not None else TaskStatus.COMPLETED
        return HandleState(
            status=status,
            transfers=len(self.ids),
            ended=len(self._events),
            moved_bytes=moved,
            in_flight_slices=in_flight,
            backpressure=backpressure,
            peer_connected=self._peers_connected(),
            detail=detail,
        )

    async def wait(self, timeout: float | None = None) -> HandleState:
        """Wait until every transfer ended, or ``timeout`` seconds; return the state either way
        (PENDING on timeout: nothing was handed back, bytes may still move)."""
        if self._done.is_set():
            return self.status()
        if timeout is None:
            await self._done.wait()
        else:
            # asyncio.timeout, not wait_for: on 3.11 wait_for wraps the wait in a task of its
            # own (54 more Python calls per transfer: cProfile, 4 KiB one at a time)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._done.wait()
        return self.status()

    async def result(self, timeout: float | None = None) -> HandleState:
        """Like :meth:`wait`, but raises :class:`TransferFailed` unless every transfer
        COMPLETED, and :class:`TimeoutError` if still pending at ``timeout``."""
        state = await self.wait(timeout)
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
        """Cancel every live transfer; ``True`` if all of them end CANCELED.

        Queued work cancels at once; work already posted is canceled on its device and ends
        CANCELED when the device reports it. Raises
        :class:`~tent_transport.errors.NotSupported` (nothing canceled) when a transfer has
        slices posted on a rail that cannot cancel posted work (TCP, verbs).
        """
        live = tuple(tid for tid in self.ids if tid not in self._events)
        answer = self._cancel(live) if live else True
        return answer and all(e.status is TaskStatus.CANCELED for e in self._events.values())
