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

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from ._endpoints import CreditReceiver, SenderEndpoint
from .errors import InvalidArgument, InvalidEntry, TooManyRequests

__all__ = ["CreditCollector"]

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
            raise InvalidArgument(f"max_peers must be a positive int, got {max_peers!r}")
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
        for receiver in self._receivers:
            stats = receiver.allocator.statistics()
            for resource, value in stats.outstanding.items():
                committed.add_metric([resource.name], value)
                free.add_metric([resource.name], stats.free[resource])
            blocked.add_metric([], stats.demands_blocked)
            violations.add_metric([], stats.protocol_violations)
            fencing.add_metric([], stats.epochs_fencing)
        yield from (committed, free, blocked, violations, fencing)
