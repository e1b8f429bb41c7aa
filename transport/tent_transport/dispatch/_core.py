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

Not thread-safe: one driver calls it serially (the engine's loop or the simulator).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs
from prometheus_client import CollectorRegistry

from tent_credit import (
    BackpressureInfo,
    CreditMode,
    DispatchContext,
    DispatchGate,
    EndpointEvent,
    GateRejected,
    RejectReason,
)
from tent_credit import errors as credit_errors
from tent_credit.metrics import GateCollector
from tent_sched import (
    AdmissionQueue,
    EligibilityDecision,
    MeterParams,
    OwnerKind,
    OwnerRequest,
    OwnerView,
    TaskStatus,
)
from tent_sched import errors as sched_errors
from tent_sched.metrics import SchedMetrics

from ..config import EngineConfig
from ..devices._base import U64_MAX, Cancellable, Device, SliceStatus
from ..errors import ConfigError, InvalidArgument, InvalidEntry, NotSupported
from ._merge import Merged, merge
from ._rails import RailSet
from ._records import (
    REJECT_DETAIL,
    DispatchStatistics,
    DropHook,
    PendingSlice,
    RailStatistics,
    SliceCutter,
    TransferRecord,
    credit_plan,
    pressure_of,
    translate,
)
from ._settle import Settlement
from ._types import (
    EndReason,
    TransferEvent,
    TransferPhase,
    TransferPlan,
    TransferRequest,
    TransferState,
)

__all__ = ["DispatchCore", "DispatchStatistics", "DropHook"]


class DispatchCore:
    """Queue → gate → selection → arbitration → post → completions → meters (module docstring).

    Every public call validates its arguments before it changes anything; a raised error leaves
    the core as it was (exceptions a Device raises from ``post``/``poll``, other than
    ``PostRefused``, propagate and are the device's bug).
    """

    def __init__(
        self,
        config: EngineConfig,
        rails: Sequence[Device],
        *,
        gate: DispatchGate | None = None,
        metrics_registry: CollectorRegistry | None = None,
    ) -> None:
        """Build the core over ``rails`` (one ``NicDevice`` each, seeded from the link speed).

        Raises ConfigError if ``receiver_credit`` is enabled without a gate or the gate's mode
        differs from the configured one; InvalidArgument for no rails, a non-Device, duplicate
        rail names, or a registry that already holds the deadline metrics.
        """
        if not isinstance(config, EngineConfig):
            raise InvalidArgument(f"config must be an EngineConfig, got {type(config).__name__}")
        credit = config.receiver_credit
        if gate is not None and not isinstance(gate, DispatchGate):
            raise InvalidArgument(f"gate must be a DispatchGate, got {type(gate).__name__}")
        if credit.enabled and gate is None:
            raise ConfigError("receiver_credit/enabled: the dispatch core needs a DispatchGate")
        if gate is not None and gate.mode is not credit.credit_mode:
            raise ConfigError(
                f"the gate's mode {gate.mode.value} differs from receiver_credit/mode "
                f"{credit.credit_mode.value}"
            )
        sched = config.sched
        try:
            params = MeterParams.from_config(sched.rdma)
            self._rails = RailSet(
                rails,
                params,
                max_qp_wr=sched.rdma.max_qp_wr,
                arbitration=sched.rdma.deadline_bw_arbitration,
            )
        except sched_errors.SchedError as exc:
            raise translate(exc) from exc
        self._config = config
        self._gate = gate
        self._credit_active = gate is not None and gate.mode is not CreditMode.DISABLED
        self._queue: AdmissionQueue | None = (
            sched.make_queue() if sched.enable_runtime_queue else None
        )
        self._metrics: SchedMetrics | None = None
        if metrics_registry is not None:
            try:
                self._metrics = SchedMetrics(metrics_registry)
            except sched_errors.SchedError as exc:
                raise translate(exc) from exc
            if gate is not None:
                GateCollector(metrics_registry, gate)
        if self._queue is not None:
            self._queue.add_degradation_hook(self._note_drop)

        self._settle = Settlement(gate)
        self._records: dict[int, TransferRecord] = {}
        self._by_owner: dict[int, TransferRecord] = {}
        self._batch_live: dict[int, int] = {}
        self._events: list[TransferEvent] = []
        self._endpoint_events: list[EndpointEvent] = []
        self._drop_mlu: dict[int, float] = {}
        self._reject_reason: dict[int, RejectReason] = {}
        self._hooks: dict[int, DropHook] = {}
        self._next_hook = 0
        self._next_transfer = 1
        self._next_batch = 1
        self._ids = SliceCutter()
        self._last_now = 0
        self._last_progress_ns = 0
        self._queued = 0
        self._dispatched = 0
        self._window_owners = 0
        self._window_bytes = 0
        self._submitted = self._bypassed = self._merged = 0
        self._ended: dict[EndReason, int] = dict.fromkeys(EndReason, 0)

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

    # ---------------------------------------------------------------- submit

    def submit(self, requests: Sequence[TransferRequest], now_ns: int) -> tuple[int, ...]:
        """Submit transfers as one batch; return their transfer ids, in order.

        All or nothing: raises InvalidArgument (a non-request, a bad or backwards ``now_ns``, a
        request the gate cannot describe), InvalidEntry (a credited WRITE to a peer whose
        route is not registered with the gate) or TooManyRequests (the queue's capacity) and
        nothing is admitted. Then refills the dispatch window and posts; a drop or a gate
        rejection during that refill is reported by the next :meth:`progress`.
        """
        self._check_now(now_ns)
        batch = tuple(requests)
        for position, request in enumerate(batch):
            if not isinstance(request, TransferRequest):
                raise InvalidArgument(f"requests[{position}] is not a TransferRequest")
        if not batch:
            return ()
        owners = self._owners_of(batch)
        contexts = [self._context_of(merged) for merged in owners]
        bypass = self._queue is None or (
            not self._credit_active
            and any(r.kind is OwnerKind.USER and r.plan is TransferPlan.STAGED for r in batch)
        )
        ids = tuple(range(self._next_transfer, self._next_transfer + len(batch)))
        records = [
            TransferRecord(
                ids[min(m.indices)],
                m.request,
                now_ns,
                0,
                tuple((ids[i], batch[i].length) for i in m.indices),
            )
            for m in owners
        ]
        if not bypass:
            assert self._queue is not None
            token = self._next_batch
            owner_requests = [
                OwnerRequest(
                    public_id=min(merged.indices) + 1,
                    derived_ids=tuple(sorted(i + 1 for i in merged.indices))[1:],
                    length=merged.request.length,
                    kind=merged.request.kind,
                    deadline_ns=merged.request.deadline_ns,
                    # seed: eligible = routed to the rails and not staged
                    degradation_eligible=(
                        merged.request.plan is TransferPlan.DIRECT
                        and merged.request.kind is OwnerKind.USER
                    ),
                    priority=merged.request.priority,
                    gate_key=None if ctx is None else ctx.gate_key,
                    context=ctx,
                )
                for merged, ctx in zip(owners, contexts, strict=True)
            ]
            try:
                owner_ids = self._queue.try_admit(token, len(batch), owner_requests)
            except sched_errors.SchedError as exc:
                raise translate(exc) from exc
            self._next_batch += 1
            self._batch_live[token] = len(owner_ids)
            for record, owner_id in zip(records, owner_ids, strict=True):
                record.batch = token
                record.owner_id = owner_id
                self._by_owner[owner_id] = record
            self._queued += len(records)
        self._next_transfer += len(batch)
        self._submitted += len(batch)
        self._merged += len(batch) - len(records)
        for record in records:
            for tid, _length in record.parts:
                self._records[tid] = record
        if bypass:
            self._bypassed += len(records)
            for record in records:
                self._hand_off(record, None)
        self._dispatch(now_ns)
        return ids

    def _owners_of(self, batch: tuple[TransferRequest, ...]) -> list[Merged]:
        """The submit's owners: its requests, or with ``merge_requests`` their merged runs."""
        if not self._config.merge_requests:
            return [Merged(request, (index,)) for index, request in enumerate(batch)]
        queue = self._config.sched.runtime_queue
        limit = queue.max_dispatch_bytes if self._queue is not None else None
        default_qos = self._config.receiver_credit.default_qos_class
        return merge(batch, default_qos=default_qos, limit=limit)

    def _context_of(self, merged: Merged) -> DispatchContext | None:
        """The gate's context of an owner (``None`` without an active gate); raises the gate's
        typed error for a request it cannot describe."""
        if self._gate is None or not self._credit_active:
            return None  # a DISABLED gate is exactly no gate (docs/gate.md)
        request = merged.request
        default_qos = self._config.receiver_credit.default_qos_class
        qos = default_qos if request.qos_class is None else request.qos_class
        try:
            context = self._gate.context(credit_plan(request), request.peer, qos)
            if len(merged.indices) > 1:  # the slots are charged per request
                context = attrs.evolve(context, requests=len(merged.indices))
        except credit_errors.CreditError as exc:
            raise translate(exc) from exc
        return context

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

    # ---------------------------------------------------------------- cancel and failure

    def cancel(self, transfer_id: int, now_ns: int) -> bool:
        """Cancel one transfer: :meth:`cancel_many` of ``(transfer_id,)``."""
        return self.cancel_many((transfer_id,), now_ns)

    def cancel_many(self, transfer_ids: Sequence[int], now_ns: int) -> bool:
        """Cancel transfers; return whether every one of them ends CANCELED.

        Per transfer (the id of any request of a merged owner cancels the whole owner):

        1. QUEUED: it ends CANCELED at once (reported by the next :meth:`progress`); no device
           is touched.
        2. DISPATCHED: its slices not yet posted are withdrawn and its posted slices are
           canceled on their devices (:class:`~tent_transport.devices.Cancellable`, each device
           asked once); it ends CANCELED once every posted slice ended (handles never lie:
           bytes may move until the device reports the slice's end; ``moved_bytes`` says how
           many did). Its credit, if never posted, is rolled back.
        3. Already canceled: nothing changes (idempotent: no device is asked again); counts as
           ending CANCELED.
        4. Ended, or ending FAILED (a slice failed, its peer was declared dead): nothing changes;
           counts as not ending CANCELED.

        Validates every id first: raises InvalidArgument / InvalidEntry for a bad time or an
        unknown id, and :class:`~tent_transport.errors.NotSupported` when a transfer has a slice
        posted on a device that cannot cancel; nothing changes then.
        """
        self._check_now(now_ns)
        if not isinstance(transfer_ids, Sequence):
            raise InvalidArgument(f"transfer_ids must be a sequence, got {transfer_ids!r}")
        records = {r.transfer_id: r for r in map(self._record, transfer_ids)}.values()
        posted: dict[int, dict[int, list[int]]] = {}
        for record in records:
            if record.phase is not TransferPhase.DISPATCHED or record.canceled or record.failed:
                continue
            on_rails = self._rails.posted_of(record)
            for index in on_rails:
                device = self._rails.devices[index]
                if not isinstance(device, Cancellable):
                    raise NotSupported(
                        f"transfer {record.transfer_id} has slices posted on {device.name}, "
                        "which cannot cancel posted work"
                    )
            posted[record.transfer_id] = on_rails
        every = True
        for record in records:
            every = self._cancel_one(record, posted.get(record.transfer_id), now_ns) and every
        return every

    def _cancel_one(
        self, record: TransferRecord, posted: dict[int, list[int]] | None, now_ns: int
    ) -> bool:
        if record.canceled:
            return True
        if record.phase is TransferPhase.TERMINAL or record.failed:
            return record.status is TaskStatus.CANCELED
        if record.phase is TransferPhase.QUEUED:
            assert self._queue is not None
            self._queue.cancel(record.owner_id)
            if self._gate is not None:
                self._gate.forget(record.owner_id)
            self._queued -= 1
            self._end(record, TaskStatus.CANCELED, EndReason.CANCELED, "canceled", now_ns)
            return True
        record.canceled = True
        self._withdraw(record)
        for index, wr_ids in (posted or {}).items():
            device = self._rails.devices[index]
            assert isinstance(device, Cancellable)
            device.cancel(wr_ids, now_ns)
        self._maybe_finish(record, now_ns)
        return True

    def fail_peer(self, peer: int, now_ns: int, detail: str, *, queued: bool = False) -> int:
        """The driver declared ``peer`` dead: fail its dispatched transfers' unposted slices.

        Each such transfer ends FAILED (PEER_FAILED) once its posted slices ended (the device
        flushes them). With ``queued``, transfers to the peer still queued end FAILED
        (PEER_FAILED) too, reported by the next :meth:`progress`: work submitted for a session
        that was replaced names that session's regions and must not be posted on the next one.
        Otherwise queued transfers stay queued (cancel them to end them). Returns how many
        transfers were failed. Raises InvalidArgument for a bad argument; nothing changes then.
        """
        self._check_now(now_ns)
        if (
            type(peer) is not int
            or not 0 <= peer <= U64_MAX
            or type(detail) is not str
            or type(queued) is not bool
        ):
            raise InvalidArgument("fail_peer needs a u64 peer, a str detail and a bool queued")
        records = {r.transfer_id: r for r in self._records.values()}.values()  # merged: once
        hit = [
            r
            for r in records
            if r.phase is TransferPhase.DISPATCHED and r.request.peer == peer and r.waiting
        ]
        waiting = [
            r
            for r in records
            if queued and r.phase is TransferPhase.QUEUED and r.request.peer == peer
        ]
        for record in hit:
            if not record.failed:
                record.failed = True
                record.reason = EndReason.PEER_FAILED
                record.detail = detail
            self._withdraw(record)
            self._maybe_finish(record, now_ns)
        for record in waiting:
            assert self._queue is not None  # only the runtime queue holds QUEUED transfers
            self._queue.cancel(record.owner_id)
            if self._gate is not None:
                self._gate.forget(record.owner_id)
            self._queued -= 1
            self._end(record, TaskStatus.FAILED, EndReason.PEER_FAILED, detail, now_ns)
        return len(hit) + len(waiting)

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
            queue=None if self._queue is None else self._queue.statistics(),
            rails=self._rails.statistics(),
        )

    # ---------------------------------------------------------------- internals: dispatch

    def _check_now(self, now_ns: int) -> None:
        if type(now_ns) is not int or not 0 <= now_ns <= U64_MAX:
            raise InvalidArgument(f"now_ns must be a u64 int, got {now_ns!r}")
        if now_ns < self._last_now:
            raise InvalidArgument(f"now_ns {now_ns} is before the last call's {self._last_now}")
        self._last_now = now_ns

    def _record(self, transfer_id: int) -> TransferRecord:
        if type(transfer_id) is not int:
            raise InvalidArgument(f"transfer id must be an int, got {transfer_id!r}")
        record = self._records.get(transfer_id)
        if record is None:
            raise InvalidEntry(f"unknown or already reported transfer {transfer_id}")
        return record

    def _dispatch(self, now_ns: int) -> None:
        if self._queue is not None and self._queued:
            self._refill(now_ns)
        for record in self._settle.stale():  # their slices carry a lease the receiver refuses
            record.failed = True
            record.reason = EndReason.REJECTED
            record.detail = REJECT_DETAIL[RejectReason.SNAPSHOT_FENCED]
            self._withdraw(record)
            self._maybe_finish(record, now_ns)
        self._rails.post_all(now_ns, self._posted, self._slice_ended)

    def _eligibility(self, owner: OwnerView, now_ns: int, /) -> EligibilityDecision:
        assert self._gate is not None
        decision = self._gate(owner, now_ns)
        if isinstance(decision, GateRejected):
            self._reject_reason[owner.owner_id] = decision.reason
        return decision

    def _note_drop(self, owner: OwnerView, mlu: float) -> None:
        self._drop_mlu[owner.owner_id] = mlu

    def _refill(self, now_ns: int) -> None:
        """Pick over the free dispatch window and hand the picked owners to the rails."""
        assert self._queue is not None
        window = self._config.sched.runtime_queue
        owners_left = window.max_dispatch_owners - self._window_owners
        bytes_left = window.max_dispatch_bytes - self._window_bytes
        if owners_left <= 0 or bytes_left <= 0:
            return
        gate = self._gate if self._credit_active else None  # DISABLED: no gate at all
        try:
            result = self._queue.pick_for_dispatch(
                owners_left,
                bytes_left,
                now_ns=now_ns,
                bandwidth_bps=self._rails.estimated_bandwidth_bps(),
                eligibility=None if gate is None else self._eligibility,
            )
        except (sched_errors.SchedError, credit_errors.CreditError) as exc:
            if gate is not None:  # the pick changed nothing; give back its own tokens
                gate.rollback_unsettled(keep=self._settle.pending_tokens())
            self._reject_reason.clear()
            raise translate(exc) from exc
        if gate is not None:
            gate.observe_pick(result, self._queue.owner, now_ns)
        for picked in result.picked:
            record = self._by_owner[picked.owner.owner_id]
            self._queued -= 1
            record.in_window = True
            self._window_owners += 1
            self._window_bytes += record.request.length
            self._hand_off(record, picked.token)
        dropped: list[tuple[int, float]] = []
        for owner_id in result.dropped:
            record = self._by_owner[owner_id]
            self._queued -= 1
            mlu = self._drop_mlu.pop(owner_id, 0.0)
            record.dropped_mlu = mlu
            dropped.append((record.transfer_id, mlu))
            detail = f"deadline-infeasible drop: predicted MLU {mlu:.3f}"
            self._end(record, TaskStatus.CANCELED, EndReason.DROPPED, detail, now_ns)
        for owner_id in result.rejected:
            record = self._by_owner[owner_id]
            self._queued -= 1
            reason = self._reject_reason.pop(owner_id, None)
            detail = "rejected" if reason is None else REJECT_DETAIL[reason]
            self._end(record, TaskStatus.FAILED, EndReason.REJECTED, detail, now_ns)
        self._reject_reason.clear()
        if dropped and self._hooks:  # after the pick is settled, so a hook may call back in
            hooks = tuple(self._hooks.values())
            for transfer_id, mlu in dropped:
                for hook in hooks:
                    hook(transfer_id, mlu)

    def _hand_off(self, record: TransferRecord, token: object | None) -> None:
        """Cut a dispatched transfer into slices and assign each a rail; its gate token waits
        for the first post (``_settle.py``)."""
        record.phase = TransferPhase.DISPATCHED
        record.token = token
        self._dispatched += 1
        for item in self._ids.cut(record, token, self._config.dispatch.slice_bytes):
            item.rail = self._rails.choose(item.request.length)
            record.waiting.add(item)
            self._rails.enqueue(item)
        self._settle.handed_off(record)

    # ---------------------------------------------------------------- internals: completion

    def _posted(self, item: PendingSlice) -> None:
        record = item.owner
        record.waiting.discard(item)
        record.slices_posted += 1
        self._settle.posted(record)  # the first post commits (RFC "submit-success commit")

    def _slice_ended(self, item: PendingSlice, status: SliceStatus, detail: str, now: int) -> None:
        record = item.owner
        if item in record.waiting:  # refused by a ready device before it was posted
            record.waiting.discard(item)
        else:
            record.slices_posted -= 1
        record.slices_ended += 1
        if status.moved:
            record.moved_bytes += item.request.length
            record.part_moved[item.part] += item.request.length
        elif not record.failed:
            record.failed = True
            record.reason = EndReason.SLICE_FAILED
            rail = self._rails.devices[item.rail].name
            record.detail = f"{rail}: {status.value}" + (f": {detail}" if detail else "")
            self._withdraw(record)  # its other slices would only move bytes for nothing
        self._maybe_finish(record, now)

    def _withdraw(self, record: TransferRecord) -> None:
        if record.waiting:
            self._rails.withdraw(record.waiting)
            record.waiting = set()

    def _maybe_finish(self, record: TransferRecord, now_ns: int) -> None:
        if record.phase is not TransferPhase.DISPATCHED or record.waiting or record.slices_posted:
            return
        self._dispatched -= 1
        if record.canceled:
            self._end(record, TaskStatus.CANCELED, EndReason.CANCELED, "canceled", now_ns)
        elif record.failed:
            self._end(record, TaskStatus.FAILED, record.reason, record.detail, now_ns)
        else:
            self._end(record, TaskStatus.COMPLETED, EndReason.COMPLETED, "", now_ns)

    def _end(
        self,
        record: TransferRecord,
        status: TaskStatus,
        reason: EndReason,
        detail: str,
        now_ns: int,
    ) -> None:
        """Settle a transfer that just ended: queue, gate, window, metrics, its event."""
        record.phase = TransferPhase.TERMINAL
        record.status = status
        record.reason = reason
        record.detail = detail
        request = record.request
        if record.in_window:
            assert self._queue is not None
            self._queue.complete(record.owner_id, status)
            self._window_owners -= 1
            self._window_bytes -= request.length
        self._endpoint_events.extend(self._settle.ended(record, now_ns))
        if self._metrics is not None:
            self._metrics.record_completion(
                status=status,
                deadline_ns=request.deadline_ns,
                submit_ns=record.submit_ns,
                complete_ns=now_ns,
            )
        if record.owner_id:
            del self._by_owner[record.owner_id]
            left = self._batch_live[record.batch] - 1
            if left:
                self._batch_live[record.batch] = left
            else:
                del self._batch_live[record.batch]
                assert self._queue is not None
                self._queue.retire_batch(record.batch)
        self._ended[reason] += len(record.parts)
        self._events.extend(  # one per request: a merged owner's requests end with it
            TransferEvent(
                transfer_id=transfer_id,
                status=status,
                reason=reason,
                detail=detail,
                peer=request.peer,
                length=length,
                moved_bytes=moved,
                deadline_ns=request.deadline_ns,
                priority=request.priority,
                submit_ns=record.submit_ns,
                end_ns=now_ns,
                dropped_mlu=record.dropped_mlu,
            )
            for (transfer_id, length), moved in zip(record.parts, record.part_moved, strict=True)
        )
