"""Where a credit cycle's time goes: the hops of ``TENT_INCAST_TRACE`` files (``tent bench hops``).

An incast run with ``TENT_INCAST_TRACE=<dir>`` writes one JSON line per credit event per
process, each stamped with the machine-wide monotonic clock (docs/incast.md). This follows every
grant through the processes:

* **release → grant**: from a release of the receiver's consumer to the next update that raises
  some key's grant (the capacity the release freed going back out);
* **grant → decoded**: from that update leaving the receiver to its sender decoding it;
* **decoded → reserved**: from the decode to the sender's next successful reserve;
* **reserved → landed**: from that reserve to the receiver admitting that sender's next write;
* **release → landed**: from a release to the next write the receiver admits (any sender).

Each is reported as count, median and p90 in milliseconds, with the control messages counted
at both ends: updates produced by the receiver's endpoints and decoded by the senders, usage
reports produced by the senders and decoded by the receiver, and how many of each repeated the
previous one on the same key (the same grants and retry hint; the same demand and returns).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ._records import percentile

__all__ = ["hops", "read_trace"]

_MS = 1e6


def read_trace(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Every process's events by node name (``receiver``, ``sender:N``), in time order. Lines
    that are not JSON objects (a process killed mid-write) are skipped."""
    out: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(event, dict) and "t" in event and "node" in event:
                out.setdefault(str(event["node"]), []).append(event)
    for events in out.values():
        events.sort(key=lambda e: e["t"])
    return out


def _msg(event: dict[str, Any], kind: str) -> dict[str, Any] | None:
    msg = event.get("msg")
    return msg if isinstance(msg, dict) and msg.get("type") == kind else None


def _stats(values: Sequence[float]) -> dict[str, float]:
    return {
        "count": len(values),
        "median_ms": round(percentile(values, 50) / _MS, 3),
        "p90_ms": round(percentile(values, 90) / _MS, 3),
    }


def _grants(msg: dict[str, Any]) -> dict[str, int]:
    grants = msg.get("grants") or {}
    return {str(k): int(v) for k, v in grants.items()} if isinstance(grants, dict) else {}


def _next_after(times: Sequence[int], t: int) -> int | None:
    for value in times:  # lists are short per key: a scan keeps this dependency-free
        if value > t:
            return value
    return None


def _repeats(contents: Iterator[tuple[object, object]]) -> tuple[int, int]:
    total = repeated = 0
    last: dict[object, object] = {}
    for key, content in contents:
        total += 1
        repeated += last.get(key) == content
        last[key] = content
    return total, repeated


def hops(folder: Path) -> dict[str, Any]:
    """The hop latencies and message counts of one traced run (module docstring)."""
    trace = read_trace(folder)
    receiver = trace.get("receiver", [])
    senders = {node: events for node, events in trace.items() if node.startswith("sender:")}
    # grants that raised some key's total, as (sent time, peer, sequence)
    raised: list[tuple[int, int, int]] = []
    previous: dict[int, dict[str, int]] = {}
    updates_sent: list[tuple[object, object]] = []
    reports_received: list[tuple[object, object]] = []
    releases: list[int] = []
    landed: dict[int, list[int]] = {}
    all_landed: list[int] = []
    for event in receiver:
        peer = int(event.get("peer", -1))
        if event["kind"] == "release":
            releases.append(event["t"])
        elif event["kind"] == "land":
            landed.setdefault(peer, []).append(event["t"])
            all_landed.append(event["t"])
        elif (msg := _msg(event, "ReceiverCreditUpdate")) and event["kind"] == "send":
            grants = _grants(msg)
            content = (json.dumps(grants, sort_keys=True), msg.get("retry_after_us"))
            updates_sent.append((peer, content))
            before = previous.get(peer, {})
            if any(v > before.get(k, 0) for k, v in grants.items()):
                raised.append((event["t"], peer, int(msg.get("sequence", 0))))
            previous[peer] = grants
        elif (msg := _msg(event, "SenderCreditUsage")) and event["kind"] == "receive":
            content = (
                json.dumps(msg.get("pending_demand"), sort_keys=True),
                json.dumps(msg.get("returned_totals"), sort_keys=True),
            )
            reports_received.append((peer, content))
    decoded: dict[tuple[int, int], int] = {}
    reserved: dict[int, list[int]] = {}
    updates_received = reports_sent = 0
    for node, events in senders.items():
        peer = int(node.split(":", 1)[1])
        for event in events:
            if (msg := _msg(event, "ReceiverCreditUpdate")) and event["kind"] == "receive":
                updates_received += 1
                decoded.setdefault((peer, int(msg.get("sequence", 0))), event["t"])
            elif _msg(event, "SenderCreditUsage") and event["kind"] == "send":
                reports_sent += 1
            elif event["kind"] == "reserve" and event.get("result") == "reserved":
                reserved.setdefault(peer, []).append(event["t"])
    grant_decoded: list[float] = []
    decoded_reserved: list[float] = []
    reserved_landed: list[float] = []
    for sent, peer, sequence in raised:
        got = decoded.get((peer, sequence))
        if got is None:
            continue
        grant_decoded.append(got - sent)
        took = _next_after(reserved.get(peer, []), got)
        if took is None:
            continue
        decoded_reserved.append(took - got)
        hit = _next_after(landed.get(peer, []), took)
        if hit is not None:
            reserved_landed.append(hit - took)
    grant_times = [sent for sent, _peer, _seq in raised]
    release_grant = [g - r for r in releases if (g := _next_after(grant_times, r)) is not None]
    release_landed = [h - r for r in releases if (h := _next_after(all_landed, r)) is not None]
    updates, update_repeats = _repeats(iter(updates_sent))
    reports, report_repeats = _repeats(iter(reports_received))
    return {
        "hops": {
            "release_to_grant": _stats(release_grant),
            "grant_to_decoded": _stats(grant_decoded),
            "decoded_to_reserved": _stats(decoded_reserved),
            "reserved_to_landed": _stats(reserved_landed),
            "release_to_landed": _stats(release_landed),
        },
        "messages": {
            "updates_sent_by_receiver": updates,
            "updates_repeating_the_last": update_repeats,
            "updates_decoded_by_senders": updates_received,
            "reports_sent_by_senders": reports_sent,
            "reports_decoded_by_receiver": reports,
            "reports_repeating_the_last": report_repeats,
            "blocks_landed": len(all_landed),
        },
    }
