"""Named workloads: the seed's and the RFCs' scenarios, with their link parameters fixed.

Units: a link rate in bytes/ns is GB/s (8 B/ns = 64 Gb/s). Every workload is a plain
:class:`Workload` value; ``tent sim deadline --workload NAME`` runs one by name, and
``workload_names()`` lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._device import LinkSpec
from ._workload import FlowSpec, Workload

__all__ = ["NAMED", "named_workload", "workload_names"]

KIB = 1 << 10
MIB = 1 << 20
US = 1_000
MS = 1_000_000

_RUNTIME_QUEUE: dict[str, Any] = {
    "deadline_aware": True,
    "max_dispatch_bytes": 1 << 30,
    "max_dispatch_owners": 1024,
    "max_outstanding_bytes": 64 << 30,
    "max_outstanding_owners": 100_000,
}
_QUEUE: dict[str, Any] = {"enable_runtime_queue": True, "runtime_queue": _RUNTIME_QUEUE}


def seed_requests() -> Workload:
    """Deadline Scheduling "Three Requests": two 50 GB/s NICs (800 Gb/s in sum), θ 1.2.

    R1 64 MiB / 20 ms, R2 512 MiB / 5 ms and R3 16 MiB / 3 ms (not eligible: the example routes
    it to TCP; here it is staging-internal work, which is never predicted) in one submit, then
    R4 256 MiB / 6 ms while R1 and R2 are in flight.
    """
    at = 1 * MS
    config = {
        **_QUEUE,
        "runtime_queue": {**_RUNTIME_QUEUE, "mlu_local_threshold": 1.2},
        "dispatch": {"slice_bytes": 4 * MIB},
    }
    return Workload(
        name="seed-requests",
        description="The seed's R1-R4 worked example",
        nics=(LinkSpec(name="nic0", bytes_per_ns=50.0), LinkSpec(name="nic1", bytes_per_ns=50.0)),
        config=config,
        flows=(
            FlowSpec(
                name="R1", arrival="burst", start_ns=at, size_bytes=64 * MIB, window_ns=20 * MS
            ),
            FlowSpec(
                name="R2", arrival="burst", start_ns=at, size_bytes=512 * MIB, window_ns=5 * MS
            ),
            FlowSpec(
                name="R3",
                arrival="burst",
                start_ns=at,
                size_bytes=16 * MIB,
                window_ns=3 * MS,
                eligible=False,
            ),
            FlowSpec(
                name="R4",
                arrival="burst",
                start_ns=at + 1,
                size_bytes=256 * MIB,
                window_ns=6 * MS - 1,
            ),
        ),
        horizon_ns=2 * MS,
        batch_same_time=True,
    )


def seed_slices() -> Workload:
    """Deadline Scheduling "Three Slices": one 50 GB/s NIC with 32 MiB posted; A (10 ms), B (2 ms)
    and C (no deadline), 16 MiB each, posted together. Queue off (arbitration only)."""
    at = 1 * US
    return Workload(
        name="seed-slices",
        description="The seed's A/B/C worked example",
        nics=(LinkSpec(name="nic0", bytes_per_ns=50.0),),
        config={"dispatch": {"slice_bytes": 16 * MIB}},
        flows=(
            FlowSpec(name="ahead", arrival="burst", size_bytes=32 * MIB),
            FlowSpec(
                name="A", arrival="burst", start_ns=at, size_bytes=16 * MIB, window_ns=10 * MS
            ),
            FlowSpec(name="B", arrival="burst", start_ns=at, size_bytes=16 * MIB, window_ns=2 * MS),
            FlowSpec(name="C", arrival="burst", start_ns=at, size_bytes=16 * MIB),
        ),
        horizon_ns=2 * US,
        batch_same_time=True,
        measure_ns=(0, 10 * MS),
    )


def single_flow() -> Workload:
    """One periodic flow on an idle 8 GB/s link: 4 MiB every 2 ms, 1 ms windows."""
    return Workload(
        name="single-flow",
        description="A single flow on an idle link (hand-computable)",
        nics=(LinkSpec(name="nic0", bytes_per_ns=8.0),),
        config={**_QUEUE, "dispatch": {"slice_bytes": 4 * MIB}},
        flows=(
            FlowSpec(
                name="flow",
                arrival="periodic",
                interval_ns=2 * MS,
                requests=50,
                size_bytes=4 * MIB,
                window_ns=1 * MS,
            ),
        ),
        horizon_ns=100 * MS,
    )


def theta_sweep(load: float = 1.1, horizon_ns: int = 300 * MS) -> Workload:
    """θ sweep: Poisson arrivals at ``load`` × capacity on two 25 GB/s NICs (50 GB/s),
    4-32 MiB requests with 2-20 ms windows, the dispatch window wide open (the drop is the
    only admission control)."""
    mean_bytes = 18 * MIB
    interval = round(mean_bytes / 50.0 / load)  # ns between arrivals at `load`
    return Workload(
        name="theta-sweep",
        description=f"Poisson load {load} of capacity; deadlines 2-20 ms",
        seed=7,
        nics=(LinkSpec(name="nic0", bytes_per_ns=25.0), LinkSpec(name="nic1", bytes_per_ns=25.0)),
        config={**_QUEUE, "dispatch": {"slice_bytes": 4 * MIB}},
        flows=(
            FlowSpec(
                name="requests",
                arrival="poisson",
                interval_ns=interval,
                requests=100_000,
                size_bytes=(4 * MIB, 32 * MIB),
                window_ns=(2 * MS, 20 * MS),
            ),
        ),
        horizon_ns=horizon_ns,
        drain_ns=200 * MS,
        measure_ns=(0, horizon_ns),
    )


def probe_3980(bursts: int = 5) -> Workload:
    """The closed PR #3980 probe: bursts of 40 equal owners, each adding 0.22 to the cumulative
    MLU (4 MiB over 50 GB/s in a 381.3 µs window), one burst every 20 ms (the previous one has
    drained). A static cutoff dispatches ≈ θ / 0.22 per pick, whatever is feasible."""
    window = round(4 * MIB / 50.0 / 0.22)
    return Workload(
        name="probe-3980",
        description="Dispatched per pick vs θ (the #3980 signature)",
        nics=(LinkSpec(name="nic0", bytes_per_ns=50.0),),
        config={**_QUEUE, "dispatch": {"slice_bytes": 4 * MIB}},
        flows=(
            FlowSpec(
                name="owners",
                arrival="periodic",
                interval_ns=20 * MS,
                requests=bursts,
                streams=40,
                size_bytes=4 * MIB,
                window_ns=window,
                start_ns=1 * MS,
            ),
        ),
        horizon_ns=bursts * 20 * MS,
        batch_same_time=True,
    )


def arbitration_2792() -> Workload:
    """RFC #2792: one 48.4 GB/s NIC, 4 tight + 12 loose closed-loop threads, 8 MiB requests in
    1 MiB slices, a 16-WR QP budget. Tight requests have 1.5 ms windows (they need ~5.6 GB/s
    each, twice an equal share of 3 GB/s), loose ones 20 ms."""
    return Workload(
        name="arbitration-2792",
        description="4 tight + 12 loose threads on one NIC",
        nics=(LinkSpec(name="nic0", bytes_per_ns=48.4, max_qp_wr=16),),
        config={
            "transports": {"rdma": {"max_qp_wr": 16}},
            "dispatch": {"slice_bytes": 1 * MIB},
        },
        flows=(
            FlowSpec(
                name="tight",
                arrival="closed",
                streams=4,
                requests=1_000_000,
                size_bytes=8 * MIB,
                window_ns=1_500 * US,
            ),
            FlowSpec(
                name="loose",
                arrival="closed",
                streams=12,
                requests=1_000_000,
                size_bytes=8 * MIB,
                window_ns=20 * MS,
            ),
        ),
        horizon_ns=60 * MS,
        drain_ns=50 * MS,
        measure_ns=(10 * MS, 60 * MS),
    )


def meters_slowdown(depth: int = 256) -> Workload:
    """The two meters: a saturated 8 GB/s link slows to 2 GB/s at 200 ms. ``depth`` is the QP
    budget (how deep posting batches get); completions are polled in 50 µs batches."""
    return Workload(
        name=f"meters-slowdown-{depth}",
        description=f"8 -> 2 GB/s at 200 ms, QP budget {depth}",
        nics=(
            LinkSpec(
                name="nic0",
                bytes_per_ns=8.0,
                max_qp_wr=depth,
                completion_batch_ns=50 * US,
                rate_changes=((200 * MS, 2.0),),
            ),
        ),
        config={
            "transports": {"rdma": {"max_qp_wr": depth}},
            "dispatch": {"slice_bytes": 1 * MIB},
        },
        flows=(
            FlowSpec(
                name="load", arrival="closed", streams=16, requests=1_000_000, size_bytes=4 * MIB
            ),
        ),
        horizon_ns=500 * MS,
        drain_ns=0,
    )


def _limit_base(name: str, description: str, load: float = 0.9, **link: Any) -> Workload:
    base = theta_sweep(load=load)
    return Workload(
        name=name,
        description=description,
        seed=base.seed,
        nics=tuple(LinkSpec(name=n.name, bytes_per_ns=n.bytes_per_ns, **link) for n in base.nics),
        config={
            **base.config,
            "runtime_queue": {**_RUNTIME_QUEUE, "mlu_local_threshold": 1.2},
        },
        flows=base.flows,
        horizon_ns=base.horizon_ns,
        drain_ns=base.drain_ns,
    )


def limit_mixed(mode: str = "same_submit") -> Workload:
    """Known limit "Mixed submits": two flows at 0.45 of capacity each; every request of the
    second carries a 1 MiB staged owner.
    ``same_submit`` sends the whole submit past the queue (its bytes never enter
    ``dispatching_bytes``); ``separate_submit`` is the same load with the staged owner apart."""
    base = _limit_base(f"limit-mixed-{mode}", f"mixed submits ({mode})", load=0.45)
    flows = (
        *base.flows,
        FlowSpec(
            name="mixed",
            arrival="poisson",
            interval_ns=base.flows[0].interval_ns,
            requests=100_000,
            size_bytes=(4 * MIB, 32 * MIB),
            window_ns=(2 * MS, 20 * MS),
            mixed=mode,
            mixed_bytes=1 * MIB,
        ),
    )
    return Workload(
        name=base.name,
        description=base.description,
        seed=base.seed,
        nics=base.nics,
        config=base.config,
        flows=flows,
        horizon_ns=base.horizon_ns,
        drain_ns=base.drain_ns,
    )


def limit_quarantine(lose_every: int = 40) -> Workload:
    """Known limit "Quarantined owners": every ``lose_every``-th slice never completes, so its
    owner keeps its bytes in ``dispatching_bytes`` for ever (0: the healthy baseline)."""
    return _limit_base(
        f"limit-quarantine-{lose_every}", "slices that never complete", lose_every=lose_every
    )


def limit_failover(failover_every: int = 10) -> Workload:
    """Known limit "Failover keeps the RDMA charge": every ``failover_every``-th slice fails
    over to a slow path and completes 30 ms later; its owner stays dispatching meanwhile
    (0: the healthy baseline)."""
    return _limit_base(
        f"limit-failover-{failover_every}",
        "slices recovered on a slow path",
        failover_every=failover_every,
        failover_ns=30 * MS,
    )


NAMED: dict[str, Callable[[], Workload]] = {
    "seed-requests": seed_requests,
    "seed-slices": seed_slices,
    "single-flow": single_flow,
    "theta-sweep": theta_sweep,
    "probe-3980": probe_3980,
    "arbitration-2792": arbitration_2792,
    "meters-slowdown": meters_slowdown,
    "meters-slowdown-shallow": lambda: meters_slowdown(depth=1),
    "limit-mixed": limit_mixed,
    "limit-mixed-separate": lambda: limit_mixed("separate_submit"),
    "limit-quarantine": limit_quarantine,
    "limit-failover": limit_failover,
}


def workload_names() -> tuple[str, ...]:
    return tuple(NAMED)


def named_workload(name: str) -> Workload:
    """The named workload; raises KeyError for an unknown name."""
    return NAMED[name]()
