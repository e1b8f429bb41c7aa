"""The transport's own metrics, read from statistics snapshots at scrape time.

Labels are bounded by configuration (rail names, a handful of outcome names), never by peers'
traffic. The cores' metrics (``tent_deadline_*`` from the dispatch core, ``tent_credit_*`` and
the gate's) are registered beside these in the engine's registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..control import ServiceStatistics
from ..devices import DataServerStatistics, RailStatistics
from ._receiving import ReceiverStatistics

__all__ = ["TransportCollector"]


class _Rail(Protocol):
    """What a rail shows the collector (TCP and verbs rails alike)."""

    @property
    def name(self) -> str: ...

    def statistics(self) -> RailStatistics: ...


class TransportCollector(Collector):
    """``tent_transport_*``: rails, data listeners, the receiver side and the control service."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        rails: Sequence[_Rail],
        data: Callable[[], Sequence[DataServerStatistics]],
        receiver: Callable[[], ReceiverStatistics],
        control: Callable[[], ServiceStatistics],
    ) -> None:
        self._rails = rails
        self._data = data
        self._receiver = receiver
        self._control = control
        registry.register(self)

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())  # collected at scrape time only

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        slices = CounterMetricFamily(
            "tent_transport_rail_slices",
            "Slices completed per rail and outcome",
            labels=["rail", "outcome"],
        )
        sent = CounterMetricFamily(
            "tent_transport_rail_bytes",
            "Payload bytes per rail and direction",
            labels=["rail", "direction"],
        )
        outstanding = GaugeMetricFamily(
            "tent_transport_rail_outstanding_slices", "Posted, not completed", labels=["rail"]
        )
        for rail in self._rails:
            s = rail.statistics()
            for outcome, value in (
                ("success", s.completed),
                ("failed", s.failed),
                ("flushed", s.flushed),
            ):
                slices.add_metric([rail.name, outcome], value)
            sent.add_metric([rail.name, "write"], s.bytes_sent)
            sent.add_metric([rail.name, "read"], s.bytes_read)
            outstanding.add_metric([rail.name], s.outstanding)
        yield slices
        yield sent
        yield outstanding
        landed = CounterMetricFamily(
            "tent_transport_receiver_writes",
            "Writes at the receiver by outcome",
            labels=["outcome"],
        )
        data = self._data()
        receiver = self._receiver()
        landed.add_metric(["landed"], sum(d.writes_landed for d in data))
        landed.add_metric(["refused"], sum(d.writes_refused for d in data))
        landed.add_metric(["integrity_error"], sum(d.integrity_errors for d in data))
        landed.add_metric(["aborted"], receiver.aborted)
        yield landed
        yield CounterMetricFamily(
            "tent_transport_receiver_landed_bytes",
            "Payload bytes landed and verified",
            value=sum(d.bytes_landed for d in data),
        )
        yield CounterMetricFamily(
            "tent_transport_data_binds_refused",
            "Data connections closed before any header",
            value=sum(d.binds_refused for d in data),
        )
        yield CounterMetricFamily(
            "tent_transport_data_binds_evicted",
            "Unbound data connections closed unread to let a newer one wait for its bind",
            value=sum(d.binds_evicted for d in data),
        )
        yield CounterMetricFamily(
            "tent_transport_legacy_writes_refused",
            "Uncredited writes of a peer without credit, refused by a required receiver",
            value=receiver.legacy_refused,
        )
        yield GaugeMetricFamily(
            "tent_transport_quarantined_peers",
            "Senders quarantined for a protocol violation",
            value=len(receiver.quarantined),
        )
        yield GaugeMetricFamily(
            "tent_transport_unreleased_writes",
            "Landed credited writes awaiting release",
            value=receiver.unreleased,
        )
        yield GaugeMetricFamily(
            "tent_transport_transfers_held",
            "Credited transfers held (open or awaiting release): at most their senders' slots",
            value=receiver.transfers_held,
        )
        yield CounterMetricFamily(
            "tent_transport_landed_notifications_dropped",
            "Data-landed notifications dropped: max_pending_landed were waiting unread",
            value=receiver.notifications_dropped,
        )
        yield CounterMetricFamily(
            "tent_transport_heap_trims",
            "Times freed heap memory was given back to the OS after sessions retired",
            value=receiver.heap_trims,
        )
        control = self._control()
        yield CounterMetricFamily(
            "tent_transport_handshakes_failed",
            "Control connections refused at the handshake",
            value=control.handshakes_failed,
        )
        yield CounterMetricFamily(
            "tent_transport_handshakes_evicted",
            "Control connections closed unread to let a newer one wait for its handshake",
            value=control.handshakes_evicted,
        )
        yield CounterMetricFamily(
            "tent_transport_control_throttled",
            "Times a peer's control connection was not read: over its frame rate",
            value=control.control_throttled,
        )
        yield CounterMetricFamily(
            "tent_transport_control_floods",
            "Peers closed and quarantined for staying over their control-frame rate",
            value=control.control_floods,
        )
        yield CounterMetricFamily(
            "tent_transport_control_protocol_violations",
            "Peer faults on control connections",
            value=control.protocol_violations,
        )
