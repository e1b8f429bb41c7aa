"""Prometheus metrics of the credit protocol (RFC "Metrics"), read from ``statistics()`` snapshots.

A :class:`CreditCollector` is registered into a ``CollectorRegistry`` the caller passes in (never
the global one). It reads the watched endpoints' snapshots at scrape time, so the protocol's hot
path records nothing and the exported counters are exactly the protocol's own cumulative
counters. Labels are bounded by configuration (RFC: "Request IDs and unbounded tenant IDs belong
in traces/sampling, not metric labels"): ``peer``, ``qos_class`` and ``resource`` only, for at most
``max_peers`` watched sender endpoints.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from ._describe import describe
from ._endpoints import CreditReceiver, SenderEndpoint
from ._gate import DispatchGate
from .errors import InvalidArgument, InvalidEntry, TooManyRequests

__all__ = ["CreditCollector", "GateCollector"]

_SENDER_COUNTERS = (
    ("updates_applied", "Credit updates applied to the sender ledger"),
    ("duplicates_or_old", "Credit updates ignored as duplicate or old (no-ops)"),
    ("sequence_gaps", "Credit updates applied after skipped sequence numbers"),
    ("updates_ignored", "Updates of another session or epoch ignored"),
    ("epoch_resets", "Ledger entries replaced by a higher epoch"),
    ("protocol_violations", "Malformed, decreasing or misaddressed messages (failed closed)"),
    ("stale_transitions", "Transitions of the peer context to STALE"),
    ("reservations", "Successful atomic multi-resource reservations"),
    ("blocked", "Reservations blocked for lack of receiver credit (credit stalls)"),
)


class CreditCollector(Collector):
    """Exports the credit protocol's state of the watched endpoints.

    Raises :class:`InvalidArgument` for a bad ``max_peers``; :meth:`watch_sender` raises
    :class:`TooManyRequests` past the bound and :class:`InvalidEntry` for a peer/class watched
    twice (nothing changes on failure).
    """

    def __init__(self, registry: CollectorRegistry, *, max_peers: int = 64) -> None:
        if type(max_peers) is not int or max_peers < 1:
            raise InvalidArgument(f"max_peers must be a positive int, got {describe(max_peers)}")
        self._max_peers = max_peers
        self._senders: dict[tuple[int, int], SenderEndpoint] = {}
        self._receivers: list[CreditReceiver] = []
        registry.register(self)

    def watch_sender(self, endpoint: SenderEndpoint) -> None:
        key = (endpoint.sender_peer, endpoint.qos_class)
        if key in self._senders:
            raise InvalidEntry(f"sender {key} is already watched")
        if len(self._senders) >= self._max_peers:
            raise TooManyRequests(f"at most {self._max_peers} sender endpoints are exported")
        self._senders[key] = endpoint

    def unwatch_sender(self, endpoint: SenderEndpoint) -> None:
        self._senders.pop((endpoint.sender_peer, endpoint.qos_class), None)

    def watch_receiver(self, receiver: CreditReceiver) -> None:
        if self._receivers:  # one receiver node per registry: its series carry no peer label
            raise InvalidEntry("a receiver is already watched")
        self._receivers.append(receiver)

    def describe(self) -> Iterator[Metric]:
        return iter(())  # the metric set depends on what is watched; collect at scrape time

    def collect(self) -> Iterator[Metric]:
        labels = ["peer", "qos_class", "resource"]
        granted = GaugeMetricFamily(
            "tent_credit_granted", "Cumulative grant of the current epoch", labels=labels
        )
        consumed = GaugeMetricFamily(
            "tent_credit_consumed", "Credit consumed in the current epoch", labels=labels
        )
        returned = GaugeMetricFamily(
            "tent_credit_returned", "Unused credit returned in the current epoch", labels=labels
        )
        available = GaugeMetricFamily(
            "tent_credit_available", "Credit available to reserve now", labels=labels
        )
        age = GaugeMetricFamily(
            "tent_credit_update_age_seconds",
            "Age of the last accepted credit update",
            labels=["peer", "qos_class"],
        )
        in_flight = GaugeMetricFamily(
            "tent_credit_fenced_in_flight",
            "Committed work of fenced epochs still in flight",
            labels=["peer", "qos_class"],
        )
        counters = {
            name: CounterMetricFamily(f"tent_credit_{name}", doc, labels=["peer", "qos_class"])
            for name, doc in _SENDER_COUNTERS
        }
        for (peer, qos), endpoint in sorted(self._senders.items()):
            base = [str(peer), str(qos)]
            stats = endpoint.statistics()
            if endpoint.key is not None:
                entry = endpoint.ledger.entry(endpoint.key)
                for resource in entry.grant_total:
                    row = [*base, resource.name]
                    granted.add_metric(row, entry.grant_total[resource])
                    consumed.add_metric(row, entry.consumed[resource])
                    returned.add_metric(row, entry.returned[resource])
                    available.add_metric(row, entry.available[resource])
            if stats.update_age_ns is not None:
                age.add_metric(base, stats.update_age_ns / 1e9)
            in_flight.add_metric(base, stats.fenced_in_flight)
            for name, _doc in _SENDER_COUNTERS:
                counters[name].add_metric(base, getattr(stats, name))
        yield from (granted, consumed, returned, available, age, in_flight)
        yield from counters.values()
        yield from self._collect_receivers()

    def _collect_receivers(self) -> Iterator[Metric]:
        committed = GaugeMetricFamily(
            "tent_credit_receiver_committed",
            "Receiver capacity committed to senders (granted − released − reclaimed)",
            labels=["resource"],
        )
        free = GaugeMetricFamily(
            "tent_credit_receiver_free", "Receiver capacity free to grant", labels=["resource"]
        )
        blocked = CounterMetricFamily(
            "tent_credit_receiver_demands_blocked", "Demands answered with retry_after_us"
        )
        violations = CounterMetricFamily(
            "tent_credit_receiver_protocol_violations", "Usage reports refused as violations"
        )
        fencing = GaugeMetricFamily(
            "tent_credit_receiver_epochs_fencing", "Epochs awaiting their in-flight fence"
        )
        unfenced = GaugeMetricFamily(
            "tent_credit_receiver_unfenced",
            "Capacity held by superseded epochs until their fence completes",
            labels=["resource"],
        )
        refused = CounterMetricFamily(
            "tent_credit_receiver_writes_refused", "Credited writes refused by write admission"
        )
        quarantined = GaugeMetricFamily(
            "tent_credit_receiver_keys_quarantined", "Keys quarantined for a protocol violation"
        )
        for receiver in self._receivers:
            stats = receiver.allocator.statistics()
            for resource, value in stats.outstanding.items():
                committed.add_metric([resource.name], value)
                free.add_metric([resource.name], stats.free[resource])
            blocked.add_metric([], stats.demands_blocked)
            violations.add_metric([], stats.protocol_violations)
            fencing.add_metric([], stats.epochs_fencing)
            for resource, value in stats.fencing_outstanding.items():
                unfenced.add_metric([resource.name], value)
            refused.add_metric([], stats.writes_refused)
            quarantined.add_metric([], stats.quarantined_keys)
        yield from (committed, free, blocked, violations, fencing, unfenced, refused, quarantined)


class GateCollector(Collector):
    """Prometheus series of a gate, read from :meth:`DispatchGate.statistics` at scrape time.

    Labels are bounded by configuration (``max_routes``): ``peer`` (the route's receiver),
    ``qos_class`` and, for the waiting charge, ``resource``; never owner ids. The ledger series
    (granted / consumed / available, update age, reservations, blocked, ...) are the
    :class:`~tent_credit.metrics.CreditCollector`'s: register one beside this collector in the
    same registry and watch the gate's endpoints; nothing here duplicates them.
    """

    def __init__(self, registry: CollectorRegistry, gate: DispatchGate) -> None:
        if not isinstance(gate, DispatchGate):
            raise InvalidArgument(f"expected a DispatchGate, got {type(gate).__name__}")
        self._gate = gate
        registry.register(self)

    def describe(self) -> Iterator[Metric]:
        return iter(())  # the label sets follow the registered routes; collect at scrape time

    def collect(self) -> Iterator[Metric]:
        labels = ["peer", "qos_class"]
        stalled = GaugeMetricFamily(
            "tent_credit_gate_stalled_owners", "Owners held back for receiver credit", labels=labels
        )
        stalled_bytes = GaugeMetricFamily(
            "tent_credit_gate_stalled_bytes", "Bytes of the credit-stalled owners", labels=labels
        )
        waiting = GaugeMetricFamily(
            "tent_credit_gate_waiting",
            "Charge of the credit-stalled owners (the pending demand)",
            labels=[*labels, "resource"],
        )
        duration = HistogramMetricFamily(
            "tent_credit_gate_stall_seconds",
            "Credit stall duration, first block to dispatch",
            labels=labels,
        )
        legacy = CounterMetricFamily(
            "tent_credit_gate_legacy_fallbacks",
            "Owners dispatched without credit in a legacy peer's bounded window",
            labels=labels,
        )
        legacy_in_flight = GaugeMetricFamily(
            "tent_credit_gate_legacy_in_flight",
            "Legacy-window owners in flight",
            labels=labels,
        )
        rejected_snapshots = CounterMetricFamily(
            "tent_credit_gate_rejected_snapshots",
            "Queued owners failed because their (session, epoch) was fenced",
            labels=labels,
        )
        rejected_failed = CounterMetricFamily(
            "tent_credit_gate_rejected_negotiation_failed",
            "Owners failed because REQUIRED credit could not be negotiated",
            labels=labels,
        )
        idle_returns = CounterMetricFamily(
            "tent_credit_gate_idle_returns",
            "Times the gate gave a route's idle credit back (its owners left without using it)",
            labels=labels,
        )
        stats = self._gate.statistics()
        for route in stats.routes:
            row = [str(route.receiver), str(route.qos_class)]
            stalled.add_metric(row, route.stalled_owners)
            stalled_bytes.add_metric(row, route.stalled_bytes)
            for resource, amount in sorted(route.waiting.items()):
                waiting.add_metric([*row, resource.name], amount)
            buckets: list[tuple[str, float]] = [
                (repr(bound / 1e9), count) for bound, count in route.stall_buckets
            ]
            buckets.append(("+Inf", route.stalls_ended))
            duration.add_metric(row, buckets, sum_value=route.stall_ns_total / 1e9)
            legacy.add_metric(row, route.legacy_fallbacks)
            legacy_in_flight.add_metric(row, route.legacy_in_flight)
            rejected_snapshots.add_metric(row, route.rejected_snapshots)
            rejected_failed.add_metric(row, route.rejected_failed)
            idle_returns.add_metric(row, route.idle_returns)
        no_credit = CounterMetricFamily(
            "tent_credit_gate_no_credit_dispatches",
            "Owners dispatched without a remote charge (RDMA READ or local plans)",
        )
        no_credit.add_metric([], stats.no_credit_dispatches)
        yield from (stalled, stalled_bytes, waiting, duration, legacy, legacy_in_flight)
        yield from (rejected_snapshots, rejected_failed, idle_returns, no_credit)
