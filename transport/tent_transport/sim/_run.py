"""The discrete-event driver: the engine's own dispatch core in virtual time (issue 14).

:func:`simulate` builds a :class:`~tent_transport.dispatch.DispatchCore` over one
:class:`SimDevice` per NIC and drives it exactly as the asyncio engine does, with a virtual
clock: submit each arrival at its time, call ``progress`` whenever the core's
``next_timer_ns`` (a simulated completion, the fallback timer) is due, and feed closed-loop
threads their next request when the previous one ended. There is no second pipeline: the
queue, drop, gate-less eligibility, meters, selection and arbitration are the real ones.
"""

from __future__ import annotations

import heapq
import mmap
from collections.abc import Mapping
from typing import Any

import attrs
from prometheus_client import CollectorRegistry

from tent_sched import OwnerKind, TaskStatus

from ..config import load_engine_config
from ..devices._base import Opcode
from ..dispatch import DispatchCore, EndReason, TransferEvent, TransferPlan, TransferRequest
from ..errors import InvalidArgument
from ._device import SimDevice
from ._workload import Arrival, Workload, draw, open_arrivals, stream_rng

__all__ = ["Outcome", "PickSample", "QueueSample", "RailSample", "SimResult", "simulate"]

_MAX_STEPS = 5_000_000  # a bound on driver iterations, whatever the workload says


@attrs.frozen(kw_only=True)
class Outcome:
    """One offered request and how it ended (``status`` ``"pending"``: it never ended)."""

    flow: str
    stream: int
    seq: int
    size: int
    deadline_ns: int
    submit_ns: int
    end_ns: int
    status: str
    reason: str
    companion: bool = False  # the staged owner a mixed submit carried
    dropped_mlu: float | None = None  # the predicted MLU of a dropped request
    closed_loop: bool = False  # a thread's request: its timing depends on earlier outcomes

    @property
    def on_time(self) -> bool:
        return self.status == TaskStatus.COMPLETED.value and (
            self.deadline_ns == 0 or self.end_ns <= self.deadline_ns
        )


@attrs.frozen(kw_only=True)
class RailSample:
    """Both bandwidth series of one rail at one instant, bytes/second."""

    t_ns: int
    rail: str
    transmit_bps: float
    selection_bps: float
    true_bps: float


@attrs.frozen(kw_only=True)
class QueueSample:
    """The drop predictor's ``bytes_ahead`` (``dispatching_bytes``) beside the bytes really on
    the rails (posted or waiting for a QP slot) at one instant."""

    t_ns: int
    dispatching_bytes: int
    rail_bytes: int


@attrs.frozen(kw_only=True)
class PickSample:
    """What one dispatch pass did: owners dispatched and dropped (the #3980 probe reads it)."""

    t_ns: int
    dispatched: int
    dropped: int


@attrs.frozen(kw_only=True)
class SimResult:
    """Everything one run produced, in virtual time."""

    workload: str
    theta: float
    arbitration: bool
    outcomes: tuple[Outcome, ...]
    rail_samples: tuple[RailSample, ...]
    queue_samples: tuple[QueueSample, ...]
    picks: tuple[PickSample, ...]
    mlu_buckets: tuple[tuple[str, float], ...]
    measure_ns: tuple[int, int]
    end_ns: int
    dispatching_bytes_end: int


def _merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def engine_config(
    workload: Workload, theta: float | None, arbitration: bool | None
) -> dict[str, Any]:
    """The workload's engine configuration with θ and the arbitration switch applied."""
    extra: dict[str, Any] = {}
    if theta is not None:
        queue: dict[str, Any] = {"mlu_local_threshold": float(theta)}
        if 0 < theta < 1:
            queue["allow_aggressive_threshold"] = True
        extra["runtime_queue"] = queue
    if arbitration is not None:
        extra["transports"] = {"rdma": {"deadline_bw_arbitration": arbitration}}
    return _merge(workload.config, extra)


def simulate(
    workload: Workload,
    *,
    theta: float | None = None,
    arbitration: bool | None = None,
    sample_every_ns: int = 1_000_000,
) -> SimResult:
    """Run ``workload`` to its horizon (plus the drain) and return what happened.

    ``theta`` / ``arbitration`` override ``runtime_queue/mlu_local_threshold`` and
    ``transports/rdma/deadline_bw_arbitration`` (``None``: the workload's own). Raises
    ConfigError for a configuration the engine refuses, InvalidArgument for a bad argument.
    """
    if type(sample_every_ns) is not int or sample_every_ns < 1:
        raise InvalidArgument("sample_every_ns must be an int >= 1")
    config = load_engine_config(engine_config(workload, theta, arbitration))
    devices = [SimDevice(spec) for spec in workload.nics]
    registry = CollectorRegistry()
    core = DispatchCore(config, devices, metrics_registry=registry)
    biggest = max(max(f.size_bytes[1], f.mixed_bytes if f.mixed else 1) for f in workload.flows)
    buffer = memoryview(mmap.mmap(-1, biggest))  # never touched: pages stay unallocated

    heap: list[tuple[int, int, int, int, int]] = []  # (t, flow, stream, seq, order)
    arrivals: dict[int, Arrival] = {}
    order = 0
    for arrival in open_arrivals(workload):
        arrivals[order] = arrival
        heapq.heappush(heap, (arrival.t_ns, arrival.flow, arrival.stream, arrival.seq, order))
        order += 1
    closed_rngs = {}
    for flow_index, flow in enumerate(workload.flows):
        if flow.arrival != "closed":
            continue
        for stream in range(flow.streams):
            rng = stream_rng(workload, flow_index, stream)
            closed_rngs[(flow_index, stream)] = rng
            first = Arrival(
                t_ns=flow.start_ns,
                flow=flow_index,
                stream=stream,
                seq=0,
                size=draw(rng, flow.size_bytes),
                window_ns=draw(rng, flow.window_ns),
            )
            arrivals[order] = first
            heapq.heappush(heap, (first.t_ns, flow_index, stream, 0, order))
            order += 1

    meta: dict[int, tuple[Arrival, bool]] = {}  # transfer id -> (arrival, companion)
    outcomes: list[Outcome] = []
    rail_samples: list[RailSample] = []
    queue_samples: list[QueueSample] = []
    picks: list[PickSample] = []
    last_sample = -sample_every_ns
    stop_ns = workload.horizon_ns + workload.drain_ns
    now = 0
    queue = core.queue

    def queue_counts() -> tuple[int, int]:
        if queue is None:
            return 0, 0
        stats = queue.statistics()
        return stats.dispatched_total, stats.dropped_total

    def requests_of(arrival: Arrival) -> tuple[list[TransferRequest], list[TransferRequest]]:
        """The request of an arrival and its staged companion (if its flow is mixed)."""
        flow = workload.flows[arrival.flow]
        deadline = arrival.t_ns + arrival.window_ns if arrival.window_ns else 0
        main = TransferRequest(
            opcode=Opcode.WRITE,
            local=buffer[: arrival.size],
            peer=flow.peer,
            remote_segment=1,
            remote_offset=0,
            length=arrival.size,
            deadline_ns=deadline,
            priority=flow.priority,
            kind=OwnerKind.USER if flow.eligible else OwnerKind.STAGING_INTERNAL,
        )
        if flow.mixed == "none":
            return [main], []
        companion = TransferRequest(
            opcode=Opcode.WRITE,
            local=buffer[: flow.mixed_bytes],
            peer=flow.peer,
            remote_segment=1,
            remote_offset=0,
            length=flow.mixed_bytes,
            priority=flow.priority,
            plan=TransferPlan.STAGED,
        )
        return [main], [companion]

    def submit(batch: list[Arrival]) -> None:
        """One submit for the batch (plus companions as the flows say)."""
        together: list[TransferRequest] = []
        tags: list[tuple[Arrival, bool]] = []
        apart: list[tuple[Arrival, TransferRequest]] = []
        for arrival in batch:
            main, companions = requests_of(arrival)
            together.extend(main)
            tags.append((arrival, False))
            if workload.flows[arrival.flow].mixed == "same_submit":
                together.extend(companions)
                tags.extend((arrival, True) for _ in companions)
            else:
                apart.extend((arrival, c) for c in companions)
        for transfer_id, tag in zip(core.submit(together, now), tags, strict=True):
            meta[transfer_id] = tag
        for arrival, companion in apart:
            (transfer_id,) = core.submit([companion], now)
            meta[transfer_id] = (arrival, True)

    def record(event: TransferEvent) -> None:
        arrival, companion = meta.pop(event.transfer_id)
        flow = workload.flows[arrival.flow]
        outcomes.append(
            Outcome(
                flow=flow.name,
                stream=arrival.stream,
                seq=arrival.seq,
                size=event.length,
                deadline_ns=event.deadline_ns,
                submit_ns=event.submit_ns,
                end_ns=event.end_ns,
                status=event.status.value,
                reason=event.reason.value,
                companion=companion,
                dropped_mlu=event.dropped_mlu,
                closed_loop=flow.arrival == "closed",
            )
        )
        if companion or flow.arrival != "closed" or arrival.seq + 1 >= flow.requests:
            return
        at = event.end_ns + flow.interval_ns
        if at >= workload.horizon_ns:
            return
        rng = closed_rngs[(arrival.flow, arrival.stream)]
        nxt = Arrival(
            t_ns=at,
            flow=arrival.flow,
            stream=arrival.stream,
            seq=arrival.seq + 1,
            size=draw(rng, flow.size_bytes),
            window_ns=draw(rng, flow.window_ns),
        )
        nonlocal order
        arrivals[order] = nxt
        heapq.heappush(heap, (nxt.t_ns, nxt.flow, nxt.stream, nxt.seq, order))
        order += 1

    for _ in range(_MAX_STEPS):
        candidates = [heap[0][0]] if heap else []
        timer = core.next_timer_ns()
        if timer is not None:
            candidates.append(timer)
        if not candidates:
            break
        now = max(now, min(candidates))
        if now > stop_ns:
            break
        before = queue_counts()
        due: list[Arrival] = []
        while heap and heap[0][0] <= now:
            *_, key = heapq.heappop(heap)
            due.append(arrivals.pop(key))
        if workload.batch_same_time:
            for t in sorted({a.t_ns for a in due}):
                submit([a for a in due if a.t_ns == t])
        else:
            for arrival in due:
                submit([arrival])
        for event in core.progress(now):
            record(event)
        after = queue_counts()
        if after != before:
            picks.append(
                PickSample(t_ns=now, dispatched=after[0] - before[0], dropped=after[1] - before[1])
            )
        if now - last_sample >= sample_every_ns:
            last_sample = now
            rails_now = core.rail_statistics()
            if queue is not None:
                queue_samples.append(
                    QueueSample(
                        t_ns=now,
                        dispatching_bytes=queue.dispatching_bytes,
                        rail_bytes=sum(r.nic.posted_bytes + r.waiting_bytes for r in rails_now),
                    )
                )
            for device, stats in zip(devices, rails_now, strict=True):
                rail_samples.append(
                    RailSample(
                        t_ns=now,
                        rail=stats.name,
                        transmit_bps=stats.nic.transmit_bps,
                        selection_bps=stats.nic.selection_bps,
                        true_bps=device.rate_at(now) * 1e9,
                    )
                )
    for transfer_id, (arrival, companion) in meta.items():  # never ended (lost, or cut off)
        state = core.status(transfer_id)
        outcomes.append(
            Outcome(
                flow=workload.flows[arrival.flow].name,
                stream=arrival.stream,
                seq=arrival.seq,
                size=arrival.size,
                deadline_ns=arrival.t_ns + arrival.window_ns if arrival.window_ns else 0,
                submit_ns=arrival.t_ns,
                end_ns=now,
                status="pending",
                reason=state.phase.value,
                companion=companion,
                closed_loop=workload.flows[arrival.flow].arrival == "closed",
            )
        )
    buckets = tuple(
        (sample.labels["le"], sample.value)
        for metric in registry.collect()
        if metric.name == "tent_deadline_mlu_permille"
        for sample in metric.samples
        if sample.name.endswith("_bucket")
    )
    effective = config.sched.runtime_queue.mlu_local_threshold
    return SimResult(
        workload=workload.name,
        theta=effective,
        arbitration=config.sched.rdma.deadline_bw_arbitration,
        outcomes=tuple(outcomes),
        rail_samples=tuple(rail_samples),
        queue_samples=tuple(queue_samples),
        picks=tuple(picks),
        mlu_buckets=buckets,
        measure_ns=workload.measure_window,
        end_ns=now,
        dispatching_bytes_end=0 if queue is None else queue.dispatching_bytes,
    )


def dropped(outcome: Outcome) -> bool:
    return outcome.reason == EndReason.DROPPED.value
