"""Summaries of simulator runs: the issue's table, and the figures the tests and docs read."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

import attrs

from ._run import Outcome, SimResult

__all__ = [
    "Summary",
    "dropped_feasible",
    "summarize",
    "transmit_follow_ns",
]


@attrs.frozen(kw_only=True)
class Summary:
    """One run in numbers. Rates are fractions; throughputs GB/s (bytes/ns) in the workload's
    measurement window; the companion owners of mixed submits count in ``throughput_gbps``
    only."""

    workload: str
    theta: float
    arbitration: bool
    offered: int
    dispatched: int
    dropped: int
    never_ended: int
    on_time_of_dispatched: float
    on_time_of_all: float
    goodput_gbps: float
    throughput_gbps: float
    class_throughput_gbps: Mapping[str, float]
    class_on_time: Mapping[str, float]
    mlu_histogram: tuple[tuple[str, int], ...]
    dispatched_per_pick: float
    mean_dispatching_bytes: float
    mean_rail_bytes: float


def _rate(numerator: int, denominator: int) -> float:
    return numerator / denominator if denominator else 0.0


def summarize(result: SimResult) -> Summary:
    """The issue's table row for one run."""
    low, high = result.measure_ns
    span = high - low
    mains = [o for o in result.outcomes if not o.companion]
    with_deadline = [o for o in mains if o.deadline_ns]
    dropped = [o for o in mains if o.reason == "dropped"]
    dispatched = [o for o in mains if o.reason != "dropped" and o.status != "canceled"]
    dispatched_dl = [o for o in dispatched if o.deadline_ns]

    def in_window(o: Outcome) -> bool:
        return o.status == "completed" and low <= o.end_ns <= high

    flows = sorted({o.flow for o in mains})
    class_bytes = {f: sum(o.size for o in mains if o.flow == f and in_window(o)) for f in flows}
    class_on_time = {
        f: _rate(
            sum(1 for o in with_deadline if o.flow == f and o.on_time),
            sum(1 for o in with_deadline if o.flow == f),
        )
        for f in flows
    }
    histogram: list[tuple[str, int]] = []
    previous = 0.0
    for bound, cumulative in result.mlu_buckets:
        histogram.append((bound, round(cumulative - previous)))
        previous = cumulative
    picks = [p.dispatched for p in result.picks if p.dispatched or p.dropped]
    return Summary(
        workload=result.workload,
        theta=result.theta,
        arbitration=result.arbitration,
        offered=len(mains),
        dispatched=len(dispatched),
        dropped=len(dropped),
        never_ended=sum(1 for o in mains if o.status == "pending"),
        on_time_of_dispatched=_rate(sum(1 for o in dispatched_dl if o.on_time), len(dispatched_dl)),
        on_time_of_all=_rate(sum(1 for o in with_deadline if o.on_time), len(with_deadline)),
        goodput_gbps=sum(o.size for o in mains if in_window(o) and o.on_time) / span,
        throughput_gbps=sum(o.size for o in result.outcomes if in_window(o)) / span,
        class_throughput_gbps={f: b / span for f, b in class_bytes.items()},
        class_on_time=class_on_time,
        mlu_histogram=tuple(histogram),
        dispatched_per_pick=statistics.fmean(picks) if picks else 0.0,
        mean_dispatching_bytes=statistics.fmean(
            [q.dispatching_bytes for q in result.queue_samples] or [0]
        ),
        mean_rail_bytes=statistics.fmean([q.rail_bytes for q in result.queue_samples] or [0]),
    )


def dropped_feasible(result: SimResult, baseline: SimResult) -> int:
    """Requests ``result`` dropped that made their window in ``baseline`` (the same workload
    without the drop): the drop's false positives. Meaningful for open-loop flows, whose
    requests are the same in both runs."""
    made = {(o.flow, o.stream, o.seq) for o in baseline.outcomes if o.on_time and not o.companion}
    return sum(
        1 for o in result.outcomes if o.reason == "dropped" and (o.flow, o.stream, o.seq) in made
    )


def transmit_follow_ns(
    result: SimResult, *, rail: str, change_ns: int, fraction: float = 0.632
) -> int | None:
    """How long after ``change_ns`` the transmit estimate of ``rail`` first covered
    ``fraction`` of the way from its value at the change to the new link rate (the time
    constant at the default 0.632), or ``None`` if it never did."""
    samples = [s for s in result.rail_samples if s.rail == rail]
    before = [s for s in samples if s.t_ns <= change_ns]
    after = [s for s in samples if s.t_ns > change_ns]
    if not before or not after:
        return None
    start = before[-1].transmit_bps
    target = after[-1].true_bps
    goal = start + fraction * (target - start)
    for sample in after:
        if (target < start and sample.transmit_bps <= goal) or (
            target >= start and sample.transmit_bps >= goal
        ):
            return sample.t_ns - change_ns
    return None


def table_rows(summaries: Sequence[Summary]) -> list[list[str]]:
    """The issue's table as strings, one row per run (header first; the workload is the
    table's title)."""
    rows = [
        [
            "θ",
            "arb",
            "offered",
            "dispatched",
            "dropped",
            "on-time (dispatched)",
            "on-time (all)",
            "goodput GB/s",
            "class GB/s",
            "total GB/s",
            "MLU histogram (permille: count)",
        ]
    ]
    for s in summaries:
        classes = " ".join(f"{k}={v:.1f}" for k, v in s.class_throughput_gbps.items())
        hist = " ".join(f"≤{b}:{c}" for b, c in s.mlu_histogram if c)
        rows.append(
            [
                f"{s.theta:g}",
                "on" if s.arbitration else "off",
                str(s.offered),
                str(s.dispatched),
                str(s.dropped),
                f"{s.on_time_of_dispatched:.1%}",
                f"{s.on_time_of_all:.1%}",
                f"{s.goodput_gbps:.1f}",
                classes,
                f"{s.throughput_gbps:.1f}",
                hist,
            ]
        )
    return rows
