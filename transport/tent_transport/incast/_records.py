"""One JSONL record per run: the RFC's fields, built from the workers' reports.

``SCHEMA`` names every field and its JSON type; :func:`check_schema` is the verifier's first rule.
Latencies are per transfer, from the submit (before credit acquisition) to its terminal event,
in microseconds. Throughput is the receiver's, in its **steady window**: the blocks that
completed between the run's 10th- and 90th-percentile completion, over that window, on the
machine-wide monotonic clock every process shares (``steady_s`` is its length). Setup, the first
grants and the tail, where fewer senders are left, stay out of it; ``window_throughput_mib_s``
is the whole window (first submit to last completion) for comparison.
"""

from __future__ import annotations

import math
import os
import platform
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..devices._congestion import system_congestion
from ._config import RunConfig

__all__ = [
    "OPTIONAL",
    "SCHEMA",
    "SCHEMA_VERSION",
    "build_record",
    "check_schema",
    "jain",
    "machine",
    "percentile",
]

SCHEMA_VERSION = 2

# field -> accepted JSON types (int fields also accept no float; bool is not an int here)
SCHEMA: dict[str, tuple[type, ...]] = {
    "schema_version": (int,),
    "row": (str,),
    "mode": (str,),
    "repetition": (int,),
    "config": (dict,),
    "machine": (dict,),
    "started_at": (str,),
    "duration_s": (float, int),
    "throughput_gbps": (float, int),
    "throughput_mib_s": (float, int),
    "steady_s": (float, int),
    "window_throughput_mib_s": (float, int),
    "sender_p50_us": (list,),
    "sender_p99_us": (list,),
    "mean_sender_p99_us": (float, int),
    "worst_sender_p99_us": (float, int),
    "jain_fairness": (float, int),
    "capacity": (dict,),
    "peak_occupancy": (dict,),
    "capacity_violations": (int,),
    "violations_by_resource": (dict,),
    "credit_stalls": (int,),
    "stall_time_ms": (float, int),
    "control_messages_per_transfer": (float, int),
    "receiver_control_frames_per_transfer": (float, int),
    "control_repeats": (int,),
    "control_repeat_fraction": (float, int),
    "control_bytes_per_transfer": (float, int),
    "offered": (int,),
    "completed": (int,),
    "failed_fenced": (int,),
    "failed_other": (int,),
    "failure_details": (dict,),
    "resubmit_policy": (str,),
    "integrity_errors": (int,),
    "refused_writes": (int,),
    "quarantined": (list,),
    "final_occupancy": (dict,),
    "credit_outstanding": (dict,),
    "receiver_restarts": (int,),
    "sender_cpu_s": (float, int),
    "receiver_cpu_s": (float, int),
    "occupancy_series": (list,),
}

# Added after schema version 2's records were published: checked when present, so the
# records already in docs/ still verify.
OPTIONAL = {
    "sender_cpu_ms_per_block": (float, int),
    "receiver_cpu_ms_per_block": (float, int),
    "mean_request_slots": (float, int),
    "consumed_mib_s": (float, int),
}

RESUBMIT_POLICY = (
    "none: a transfer a receiver restart fails (flushed, or its session replaced) ends typed "
    "FAILED and is counted in failed_fenced; the sender goes on with its next block on the new "
    "session, so completed + failed_fenced == offered"
)

# the statuses and details a receiver restart produces for honest work (typed, fenced)
_FENCED_DETAILS = ("session", "flushed", "connection", "unreachable", "lost", "closed", "fenc")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return float(ordered[rank - 1])


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index, (sum x)^2 / (n sum x^2); 1.0 for one value or all zero."""
    if not values or not any(values):
        return 1.0
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def machine() -> dict[str, Any]:
    return {
        "host": platform.node(),
        "cpus": os.cpu_count() or 0,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0,
        "tcp_congestion_control": system_congestion(),
    }


def occupancy_timeline(
    intervals: Sequence[tuple[int, int]], capacity: int, t0_ns: int, max_points: int = 2000
) -> tuple[int, int, list[list[float]]]:
    """Peak, violations (posts that took the count above ``capacity``) and a bounded series
    ``[ms since t0, count]`` of the number of open ``(start, end)`` intervals."""
    events = sorted([(e, -1) for _s, e in intervals] + [(s, 1) for s, _e in intervals])
    count = peak = violations = 0
    series: list[list[float]] = []
    for t, step in events:  # at a tie, an end (-1) sorts before a start: freed, then reused
        count += step
        if step > 0:
            peak = max(peak, count)
            violations += count > capacity
        series.append([round((t - t0_ns) / 1e6, 3), count])
    stride = max(1, len(series) // max_points)
    return peak, violations, series[::stride]


def _intervals(
    senders: Sequence[Mapping[str, Any]], receivers: Sequence[Mapping[str, Any]]
) -> tuple[list[tuple[int, int]], int]:
    """Each posted write's receiver occupancy, from its post (sender clock) to its consumer's
    release (receiver clock; one machine-wide monotonic clock). A write never released ends
    where its receiver died or its sender saw it fail; a completed write never released stays
    open (returned as the count left occupied)."""
    released: dict[tuple[int, int], tuple[int, int]] = {}  # (sender, seq) -> (release, life)
    for life, rec in enumerate(receivers):
        for sender, seq, _landed, release in rec.get("writes", []):
            released[(int(sender), int(seq))] = (int(release), life)
    out = []
    leaked = 0
    for report in senders:
        me = int(report["peer_id"])
        for _t0, t_end, status, _detail, seq, post in report["results"]:
            if not post:
                continue  # never posted: it occupied nothing at the receiver
            release, life = released.get((me, int(seq)), (0, -1))
            if release:
                out.append((int(post), release))
                continue
            dead = [r.get("killed_ns", 0) for r in receivers if r.get("killed_ns", 0) > post]
            if dead or status != "COMPLETED":
                out.append((int(post), min([int(t_end), *dead])))
            else:
                leaked += 1
    return out, leaked


def mean_open(intervals: Sequence[tuple[int, int]], lo: int, hi: int) -> float:
    """The time-average number of open ``(start, end)`` intervals over ``[lo, hi]`` (ns): the
    receiver occupancy a throughput is made with (Little's law: throughput = occupancy / time
    per block)."""
    if hi <= lo:
        return 0.0
    covered = sum(max(0, min(e, hi) - max(s, lo)) for s, e in intervals)
    return covered / (hi - lo)


def _edge_ranks(count: int) -> tuple[int, int]:
    """The ranks of the steady window's edges among ``count`` (≥ 2) sorted completions: the
    10th- and 90th-percentile ones, or the first and last below 10."""
    return (0, count - 1) if count < 10 else (count // 10, count - 1 - count // 10)


def steady_edges(completions: Sequence[int]) -> tuple[int, int]:
    """The steady window's edges (ns): the 10th- and 90th-percentile completion (the whole
    span below 10 completions; ``(0, 0)`` below 2)."""
    ordered = sorted(completions)
    if len(ordered) < 2:
        return 0, 0
    lo, hi = _edge_ranks(len(ordered))
    return ordered[lo], ordered[hi]


def steady(completions: Sequence[int], block: int) -> tuple[float, float]:
    """``(seconds, bytes/s)`` of the steady window of these completion times (ns): from the
    10th- to the 90th-percentile completion, the blocks completed after the first edge and up
    to the second. Fewer than 10 completions: the whole span."""
    ordered = sorted(completions)
    if len(ordered) < 2:
        return 0.0, 0.0
    lo, hi = _edge_ranks(len(ordered))
    span = (ordered[hi] - ordered[lo]) / 1e9
    return (span, (hi - lo) * block / span) if span > 0 else (0.0, 0.0)


def _fenced(status: str, detail: str) -> bool:
    text = f"{status} {detail}".lower()
    return status != "COMPLETED" and any(word in text for word in _FENCED_DETAILS)


def build_record(
    config: RunConfig,
    senders: Sequence[Mapping[str, Any]],
    receivers: Sequence[Mapping[str, Any]],
    *,
    restarts: int,
    t0_ns: int = 0,
) -> dict[str, Any]:
    """The run's record from every sender's ``done`` report and every receiver lifetime's
    ``drained`` report (the last one is the receiver that survived to the end)."""
    p50: list[float] = []
    p99: list[float] = []
    rates: list[float] = []
    starts: list[int] = []
    ends: list[int] = []
    completed = fenced = other = 0
    details: dict[str, int] = {}
    stalls = 0
    stall_ns = 0
    messages = 0
    repeats = 0
    control_bytes = 0
    finished: list[int] = []
    for report in senders:
        done = [(r[0], r[1]) for r in report["results"] if r[2] == "COMPLETED"]
        finished.extend(t1 for _t0, t1 in done)
        lat = [(t1 - t0) / 1000.0 for t0, t1 in done]
        p50.append(round(percentile(lat, 50), 1))
        p99.append(round(percentile(lat, 99), 1))
        completed += len(done)
        for _t0, _t1, status, detail, *_ in report["results"]:
            if status == "COMPLETED":
                continue
            key = f"{status}: {detail}"[:80]
            details[key] = details.get(key, 0) + 1
            if _fenced(status, detail) and config.condition.value == "restart":
                fenced += 1
            else:
                other += 1
        if report["results"]:
            s = min(r[0] for r in report["results"])
            e = max(r[1] for r in report["results"])
            starts.append(s)
            ends.append(e)
            rates.append(len(done) * config.block / max(1, e - s))
        stalls += int(report["stalls"])
        stall_ns += int(report["stall_ns"])
        messages += int(report["control_frames"])
        repeats += int(report.get("reports_repeated", 0))
        control_bytes += int(report["control_bytes"])
    window_s = (max(ends) - min(starts)) / 1e9 if starts else 0.0
    moved = completed * config.block
    steady_s, steady_rate = steady(finished, config.block)
    last = receivers[-1] if receivers else {}
    peak: dict[str, int] = {}
    violations: dict[str, int] = {}
    integrity = 0
    refused = 0
    quarantined: set[int] = set()
    for rec in receivers:
        for name, value in rec["peak"].items():
            peak[name] = max(peak.get(name, 0), int(value))
        for name, value in rec["violations"].items():
            violations[name] = violations.get(name, 0) + int(value)
        integrity += sum(int(v) for v in rec["integrity"].values())
        refused += int(rec["refused"])
        quarantined.update(int(q) for q in rec["quarantined"])
    # request slots and bytes: posted to released (what the receiver must hold for the sender)
    intervals, leaked = _intervals(senders, receivers)
    lo_ns, hi_ns = steady_edges(finished)
    # the consumer's rate over its whole span, first release to last: a consumer that fell
    # behind its pace catches up at the end, so a percentile window would count that burst
    releases = [int(w[3]) for rec in receivers for w in rec.get("writes", []) if int(w[3])]
    span_ns = max(releases) - min(releases) if len(releases) > 1 else 0
    consumed_rate = (len(releases) - 1) * config.block * 1e9 / span_ns if span_ns else 0.0
    landed_total = sum(int(r.get("landed", 0)) for r in receivers)
    slots_peak, slots_over, series = occupancy_timeline(intervals, config.slots, t0_ns)
    peak["request_slots"] = slots_peak
    peak["data_bytes"] = slots_peak * config.block
    violations["request_slots"] = slots_over
    violations["data_bytes"] = slots_over
    transfers = max(1, config.offered)
    receiver_frames = sum(int(r.get("control_frames", 0)) for r in receivers)
    repeats += sum(int(r.get("updates_repeated", 0)) for r in receivers)
    return {
        "schema_version": SCHEMA_VERSION,
        "row": config.row,
        "mode": config.mode.value,
        "repetition": config.repetition,
        "config": config.as_dict(),
        "machine": machine(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "duration_s": round(window_s, 4),
        "throughput_gbps": round(steady_rate / 1e9, 4),
        "throughput_mib_s": round(steady_rate / (1 << 20), 2),
        "steady_s": round(steady_s, 4),
        "window_throughput_mib_s": round(moved / window_s / (1 << 20), 2) if window_s else 0.0,
        "sender_p50_us": p50,
        "sender_p99_us": p99,
        "mean_sender_p99_us": round(sum(p99) / len(p99), 1) if p99 else 0.0,
        "worst_sender_p99_us": max(p99) if p99 else 0.0,
        "jain_fairness": round(jain(rates), 6),
        "capacity": {
            "request_slots": config.slots,
            "data_bytes": config.slots * config.block,
            "consumer_slots": config.slots,
        },
        "peak_occupancy": peak,
        "capacity_violations": int(violations.get("request_slots", 0)),
        "violations_by_resource": violations,
        "credit_stalls": stalls,
        "stall_time_ms": round(stall_ns / 1e6, 3),
        "control_messages_per_transfer": round(messages / transfers, 3),
        "receiver_control_frames_per_transfer": round(receiver_frames / transfers, 3),
        "control_repeats": repeats,
        "control_repeat_fraction": round(repeats / messages, 4) if messages else 0.0,
        "control_bytes_per_transfer": round(control_bytes / transfers, 1),
        "offered": config.offered,
        "completed": completed,
        "failed_fenced": fenced,
        "failed_other": other,
        "failure_details": details,
        "resubmit_policy": RESUBMIT_POLICY,
        "integrity_errors": integrity,
        "refused_writes": refused,
        "quarantined": sorted(quarantined),
        "final_occupancy": {
            "request_slots": leaked,
            "data_bytes": leaked * config.block,
            "consumer_slots": int(last.get("final", {}).get("consumer_slots", 0)),
            "receiver_admitted": int(last.get("final", {}).get("request_slots", 0)),
        },
        "credit_outstanding": dict(last.get("credit_outstanding", {})),
        "receiver_restarts": restarts,
        "sender_cpu_s": round(sum(float(r.get("cpu_s", 0.0)) for r in senders), 3),
        "receiver_cpu_s": round(sum(float(r.get("cpu_s", 0.0)) for r in receivers), 3),
        "occupancy_series": series,
        # CPU from a sender's start signal (a receiver's first admission) to its report, per
        # block: what each side pays per transfer, startup and imports left out
        "sender_cpu_ms_per_block": round(
            1000 * sum(float(r.get("cpu_run_s", 0.0)) for r in senders) / max(1, completed), 3
        ),
        "receiver_cpu_ms_per_block": round(
            1000 * sum(float(r.get("cpu_run_s", 0.0)) for r in receivers) / max(1, landed_total),
            3,
        ),
        "mean_request_slots": round(mean_open(intervals, lo_ns, hi_ns), 3),
        # the rate blocks reach the consumer (first release to last): what a window that
        # lands faster than the consumer drains buys is a queue at the receiver
        "consumed_mib_s": round(consumed_rate / (1 << 20), 2),
    }


def check_schema(record: Mapping[str, Any]) -> list[str]:
    """Schema problems of one record (empty: it matches)."""
    problems = []
    for name, types in SCHEMA.items():
        if name not in record:
            problems.append(f"missing field {name}")
        elif isinstance(record[name], bool) or not isinstance(record[name], types):
            problems.append(f"field {name} has type {type(record[name]).__name__}")
    for name, types in OPTIONAL.items():
        value = record.get(name, 0.0)
        if isinstance(value, bool) or not isinstance(value, types):
            problems.append(f"field {name} has type {type(value).__name__}")
    extra = sorted(set(record) - set(SCHEMA) - set(OPTIONAL))
    if extra:
        problems.append(f"unknown fields {extra}")
    if record.get("schema_version") not in (None, SCHEMA_VERSION):
        problems.append(f"schema_version {record.get('schema_version')} != {SCHEMA_VERSION}")
    return problems
