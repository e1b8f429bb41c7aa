"""Credit metrics are read from snapshots into a registry passed in, with bounded labels."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tent_credit import CreditResource, Plan, SessionId, charge_for_plan
from tent_credit._allocator import AllocatorConfig
from tent_credit._endpoints import CreditReceiver, SenderEndpoint
from tent_credit.errors import InvalidEntry, TooManyRequests
from tent_credit.metrics import CreditCollector

R = CreditResource


def _pair() -> tuple[CreditReceiver, SenderEndpoint]:
    cfg = AllocatorConfig(
        capacity={R.DATA_BYTES: 1 << 20, R.REQUEST_SLOTS: 4, R.CONSUMER_SLOTS: 4},
        control_slots=2,
        max_grant={R.DATA_BYTES: 1 << 20, R.REQUEST_SLOTS: 4, R.CONSUMER_SLOTS: 4},
        max_keys=4,
        retry_after_us=10,
    )
    rx = CreditReceiver(cfg, SessionId(9))
    ep = rx.accept(3)
    tx = SenderEndpoint(sender_peer=3, usage_interval_ns=0)
    tx.connect(0)
    for now in (0, 1, 2):
        for data in tx.messages_to_send(now):
            ep.receive_message(data, now)
        tx.receive_batch(ep.messages_to_send(now), now)
        charge = charge_for_plan(Plan.REMOTE_DIRECT_WRITE, 4096)
        assert charge is not None
        tx.set_pending_demand(charge.as_dict())
    return rx, tx


def test_exports_grants_availability_and_receiver_capacity() -> None:
    registry = CollectorRegistry()
    collector = CreditCollector(registry)
    rx, tx = _pair()
    collector.watch_sender(tx)
    collector.watch_receiver(rx)
    sample = registry.get_sample_value
    labels = {"peer": "3", "qos_class": "0", "resource": "REQUEST_SLOTS"}
    assert sample("tent_credit_granted", labels) == 1
    assert sample("tent_credit_available", labels) == 1
    assert sample("tent_credit_receiver_committed", {"resource": "REQUEST_SLOTS"}) == 1
    assert sample("tent_credit_receiver_free", {"resource": "REQUEST_SLOTS"}) == 3
    assert sample("tent_credit_updates_applied_total", {"peer": "3", "qos_class": "0"}) >= 1
    text = generate_latest(registry).decode()
    assert "request_id" not in text  # labels are peer, class and resource only


def test_label_sets_are_bounded_by_configuration() -> None:
    registry = CollectorRegistry()
    collector = CreditCollector(registry, max_peers=1)
    _, a = _pair()
    collector.watch_sender(a)
    with pytest.raises(InvalidEntry):
        collector.watch_sender(a)
    b = SenderEndpoint(sender_peer=4)
    with pytest.raises(TooManyRequests):
        collector.watch_sender(b)
    collector.unwatch_sender(a)
    collector.watch_sender(b)


def test_never_touches_the_global_registry() -> None:
    from prometheus_client import REGISTRY

    before = set(REGISTRY._names_to_collectors)
    CreditCollector(CollectorRegistry())
    assert set(REGISTRY._names_to_collectors) == before
