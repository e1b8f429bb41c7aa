"""The sans-IO dispatch core: one per engine, driven by asyncio or by the simulator.

The path of a transfer (Deadline Scheduling "The Path of a Deadline",
docs/transport_design.md#layers), every decision a call into a core:

1. ``submit``: with ``enable_runtime_queue`` the submit enters ``AdmissionQueue.try_admit`` as a
   whole or not at all; without it (or for a submit Deadline Scheduling's bypass rule sends past the
   queue) it goes straight to the rails.
2. Refill (on submit, on every ``progress`` pass, so on every completion, and on the
   ``progress_fallback_interval_us`` timer): ``pick_for_dispatch`` over the free dispatch
   window, with the sum of the rails' transmit estimates as the bandwidth provider and the
   ``DispatchGate`` as eligibility. Picked owners are cut into slices, each assigned a rail on
   the selection EWMA; the gate's token is committed when the first slice is posted, and rolled
   back if the transfer ends before that (``_settle.py``).
3. Post: per rail, ``order_tiers`` (arbitration within a priority tier), then per peer the
   ``post_budget`` prefix as one chained ``Device.post``.
4. ``progress`` polls every rail at one timestamp, feeds the meters, ends transfers whose last
   slice ended (queue ``complete``, gate ``complete``, the deadline metrics), then refills and
   posts again. Terminal transfers are reported once, as :class:`TransferEvent` values, and
   then forgotten.

The core holds no protocol rule of its own. The one routing rule it applies is Deadline Scheduling's
"What Enters the Queue": a submit containing a staged user owner bypasses the queue as a whole,
but only while receiver credit is off (RFC: "bypass is allowed only when separately bounded and
accounted"; with credit on, staged writes are charged STAGING_SLOTS through the gate).

One class, split by responsibility into private mixins, each over the one before:
``_state.py`` (construction and the state every part reads), ``_completion.py`` (a slice posted
or ended, a transfer's end and settlement), ``_pass.py`` (the dispatch pass: refill,
eligibility, hand-off, post), ``_submit.py`` (submit and admission), ``_cancel.py`` (cancel and
a dead peer); :class:`DispatchCore` here adds the views, ``progress``, the timer and the queries.

Not thread-safe: one driver calls it serially (the engine's loop or the simulator).
"""

from __future__ import annotations

from collections.abc import Callable

from tent_credit import BackpressureInfo, EndpointEvent
from tent_sched import AdmissionQueue

from ..config import EngineConfig
from ..devices._base import U64_MAX, Device
from ..errors import InvalidArgument
from ._cancel import _CoreCancel
from ._records import DispatchStatistics, DropHook, RailStatistics, pressure_of
from ._types import EndReason, TransferEvent, TransferPhase, TransferState

__all__ = ["DispatchCore", "DispatchStatistics", "DropHook"]


class DispatchCore(_CoreCancel):
    """Queue → gate → selection → arbitration → post → completions → meters (module docstring).

    Every public call validates its arguments before it changes anything; a raised error leaves
    the core as it was (exceptions a Device raises from ``post``/``poll``, other than
    ``PostRefused``, propagate and are the device's bug).
    """

    # ---------------------------------------------------------------- views

    @property
    def config(self) -> EngineConfig:
        return self._config

    @property
    def rails(self) -> tuple[Device, ...]:
        return self._rails.devices

    @property
    def queue(self) -> AdmissionQueue | None:
        """The admission queue (``None`` with ``enable_runtime_queue`` off). Read it only."""
        return self._queue

    def add_degradation_hook(self, hook: DropHook) -> Callable[[], None]:
        """Register a drop hook (``on_local_decode_suggested``); return its unregister function.

        Called once per dropped transfer, after the pick that dropped it. Raises
        InvalidArgument if ``hook`` is not callable.
        """
        if not callable(hook):
            raise InvalidArgument(f"hook must be callable, got {type(hook).__name__}")
        handle = self._next_hook
        self._next_hook += 1
        self._hooks[handle] = hook

        def unregister() -> None:
            self._hooks.pop(handle, None)

        return unregister

    # ---------------------------------------------------------------- progress

    def progress(self, now_ns: int) -> list[TransferEvent]:
        """One pass at ``now_ns``: poll every rail, settle, refill, post; return what ended.

        Each terminal transfer is reported exactly once and then forgotten (its id reads
        InvalidEntry afterwards). Raises InvalidArgument for a bad or backwards ``now_ns``.
        """
        self._check_now(now_ns)
        self._rails.poll_all(now_ns, self._config.dispatch.poll_batch, self._slice_ended)
        self._dispatch(now_ns)
        self._last_progress_ns = now_ns
        events, self._events = self._events, []
        for event in events:
            del self._records[event.transfer_id]
        return events

    def next_timer_ns(self) -> int | None:
        """When the driver must call :meth:`progress` at the latest (``None``: only on wake-up).

        The earliest of a simulated rail's next completion and, while owners are queued, slices
        wait for a QP slot or posted slices sit on a device that names no completion time (seen
        only when polled), the progress fallback timer (``progress_fallback_interval_us`` after
        the last pass; 0 disables it): the seed's worker "also refills on a timer", so the last
        transfer in flight is polled to its end without the caller polling.
        """
        candidates: list[int] = []
        due = self._rails.next_completion_ns()
        if due is not None:
            candidates.append(due)
        interval_ns = self._config.sched.runtime_queue.progress_fallback_interval_us * 1000
        rails = self._rails
        if interval_ns > 0 and (self._queued or rails.has_waiting() or rails.has_unscheduled()):
            candidates.append(self._last_progress_ns + interval_ns)
        return min(candidates) if candidates else None

    def drain_endpoint_events(self) -> list[EndpointEvent]:
        """Events the gate's endpoints reported while transfers completed (e.g. a fence that
        drained); the control layer acts on them. Returns and clears them."""
        events, self._endpoint_events = self._endpoint_events, []
        return events

    # ---------------------------------------------------------------- queries

    def status(self, transfer_id: int) -> TransferState:
        """A snapshot of a transfer not yet reported by :meth:`progress`.

        Raises InvalidArgument / InvalidEntry for a malformed or unknown (or retired) id.
        """
        record = self._record(transfer_id)
        info = None
        if record.phase is TransferPhase.QUEUED and self._gate is not None:
            stall = self._gate.stall(record.owner_id)
            info = None if stall is None else stall.info
        part = next(i for i, (tid, _) in enumerate(record.parts) if tid == transfer_id)
        return TransferState(
            transfer_id=transfer_id,
            status=record.status,
            phase=record.phase,
            backpressure=info,
            slices_waiting=len(record.waiting),
            slices_posted=record.slices_posted,
            slices_ended=record.slices_ended,
            moved_bytes=record.part_moved[part],
        )

    def backpressure(self, peer: int) -> BackpressureInfo | None:
        """The pressure a new submit to ``peer`` would meet now, or ``None``.

        The oldest credit stall (or legacy-window stall) among the peer's queued transfers, as
        the gate recorded it; else, when the admission queue is at a capacity limit, a
        ``LOCAL_QUEUE`` signal. Raises InvalidArgument for a non-u64 peer.
        """
        if type(peer) is not int or not 0 <= peer <= U64_MAX:
            raise InvalidArgument(f"peer must be a u64 int, got {peer!r}")
        return pressure_of(
            peer,
            self._gate,
            self._queue,
            self._config.receiver_credit.default_qos_class,
        )

    def rail_statistics(self) -> tuple[RailStatistics, ...]:
        """A snapshot of every rail: both bandwidth series, posted and waiting slices."""
        return self._rails.statistics()

    def statistics(self) -> DispatchStatistics:
        """A frozen snapshot of the core, its queue and its rails."""
        ended = self._ended
        return DispatchStatistics(
            submitted_total=self._submitted,
            bypassed_total=self._bypassed,
            merged_total=self._merged,
            completed_total=ended[EndReason.COMPLETED],
            failed_total=ended[EndReason.SLICE_FAILED] + ended[EndReason.PEER_FAILED],
            canceled_total=ended[EndReason.CANCELED],
            dropped_total=ended[EndReason.DROPPED],
            rejected_total=ended[EndReason.REJECTED],
            queued_transfers=self._queued,
            dispatched_transfers=self._dispatched,
            window_owners=self._window_owners,
            window_bytes=self._window_bytes,
            quiet_refills_total=self._quiet_skips,
            queue=None if self._queue is None else self._queue.statistics(),
            rails=self._rails.statistics(),
        )
