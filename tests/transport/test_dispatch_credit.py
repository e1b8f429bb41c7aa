"""The dispatch core under receiver credit: stalls keep owners queued with a typed reason."""

from __future__ import annotations

from typing import Any

import pytest
from tent_transport.config import load_engine_config
from tent_transport.devices import Opcode
from tent_transport.dispatch import DispatchCore, EndReason, TransferPhase, TransferRequest
from tent_transport.errors import ConfigError, InvalidEntry
from transport_fakes import FakeDevice, lazy_buffer

from tent_credit import (
    AllocatorConfig,
    BackpressureSource,
    CreditMode,
    CreditReceiver,
    CreditResource,
    DispatchGate,
    GateConfig,
    SenderEndpoint,
    SessionId,
)
from tent_sched import TaskStatus

MIB = 1 << 20
RX = 9  # the receiver's peer id
ME = 7  # our peer id as the receiver knows it
CONFIG = {
    "enable_runtime_queue": True,
    "runtime_queue": {"deadline_aware": True},
    "receiver_credit": {"enabled": True, "mode": "required"},
    "dispatch": {"slice_bytes": MIB},
}
RESOURCES = (CreditResource.DATA_BYTES, CreditResource.REQUEST_SLOTS, CreditResource.CONSUMER_SLOTS)


def pump(tx: SenderEndpoint, rx: CreditReceiver, now: int) -> None:
    for _ in range(3):
        ep = next(e for e in rx.endpoints() if not e.closed)
        for data in tx.messages_to_send(now):
            ep.receive_message(data, now)
        tx.receive_batch(ep.messages_to_send(now), now)


class Rig:
    def __init__(self, *, initial_owners: int, capacity_owners: int = 4) -> None:
        unit = {CreditResource.DATA_BYTES: 2 * MIB}
        cap = {r: capacity_owners * unit.get(r, 1) for r in RESOURCES}
        self.rx = CreditReceiver(
            AllocatorConfig(
                capacity=cap, control_slots=2, max_grant=cap, max_keys=4, retry_after_us=100
            ),
            SessionId(4242),
            initial_grant={r: initial_owners * unit.get(r, 1) for r in RESOURCES},
        )
        self.rx.accept(ME, 0)
        self.tx = SenderEndpoint(sender_peer=ME, qos_class=0, mode=CreditMode.REQUIRED)
        self.gate = DispatchGate(GateConfig(mode=CreditMode.REQUIRED))
        self.gate.add_endpoint(RX, self.tx)
        self.tx.connect(1)
        pump(self.tx, self.rx, 1)
        self.rail = FakeDevice()
        self.core = DispatchCore(load_engine_config(CONFIG), [self.rail], gate=self.gate)


def request(opcode: Opcode = Opcode.WRITE, length: int = 2 * MIB, **kw: Any) -> TransferRequest:
    return TransferRequest(
        opcode=opcode,
        local=lazy_buffer(length),
        peer=RX,
        remote_segment=1,
        remote_offset=0,
        length=length,
        **kw,
    )


def test_a_credit_stall_keeps_the_owner_queued_with_backpressure_info() -> None:
    rig = Rig(initial_owners=1)
    first, second = rig.core.submit([request(), request()], 10)
    assert rig.core.status(first).phase is TransferPhase.DISPATCHED
    state = rig.core.status(second)
    assert state.phase is TransferPhase.QUEUED and state.status is TaskStatus.PENDING
    info = state.backpressure
    assert info is not None and info.source is BackpressureSource.RECEIVER_CREDIT
    assert CreditResource.DATA_BYTES in info.exhausted
    assert rig.core.backpressure(RX) == info
    assert rig.core.backpressure(RX + 1) is None
    assert sum(len(p) for p in rig.rail.posts) == 2  # only the first owner's two slices


def test_credited_slices_carry_a_lease_that_sums_to_the_charge() -> None:
    rig = Rig(initial_owners=1)
    (tid,) = rig.core.submit([request()], 10)
    (post,) = rig.rail.posts
    leases = [s.lease for s in post]
    assert all(lease is not None for lease in leases)
    assert {lease.session for lease in leases if lease} == {4242}
    totals: dict[int, int] = {}
    for lease in leases:
        assert lease is not None
        for resource, amount in lease.charge:
            totals[resource] = totals.get(resource, 0) + amount
    assert totals == {1: 2 * MIB, 2: 1, 4: 1}
    assert [len(lease.charge) for lease in leases if lease] == [1, 3]  # slots on the last slice
    assert len({s.write_id for s in post}) == 2
    rig.rail.finish()
    (event,) = rig.core.progress(20)
    assert event.transfer_id == tid and event.status is TaskStatus.COMPLETED
    route = rig.gate.statistics().routes[0]
    assert (route.committed, route.completed) == (1, 1)


def test_a_grant_releases_the_stalled_owner() -> None:
    rig = Rig(initial_owners=0)
    (tid,) = rig.core.submit([request()], 10)
    assert rig.core.status(tid).phase is TransferPhase.QUEUED
    assert rig.rail.posts == []
    # The gate set the demand; after a usage interval the usage report carries it and the
    # receiver grants from free capacity.
    pump(rig.tx, rig.rx, 2_000_000)
    rig.core.progress(2_000_010)
    assert rig.core.status(tid).phase is TransferPhase.DISPATCHED
    assert rig.core.status(tid).backpressure is None
    stats = rig.gate.statistics().routes[0]
    assert stats.stalls_ended == 1 and stats.stall_ns_total == 2_000_000


def test_reads_are_never_stalled_by_remote_credit() -> None:
    rig = Rig(initial_owners=0)
    stalled, read = rig.core.submit([request(), request(Opcode.READ)], 10)
    assert rig.core.status(stalled).phase is TransferPhase.QUEUED
    assert rig.core.status(read).phase is TransferPhase.DISPATCHED
    (post,) = rig.rail.posts
    assert all(s.opcode is Opcode.READ and s.lease is None for s in post)


def test_a_fenced_snapshot_is_rejected_before_dispatch() -> None:
    rig = Rig(initial_owners=0)
    (tid,) = rig.core.submit([request()], 10)
    # The receiver restarts: a new, larger session fences the queued owner's snapshot.
    rig.rx = CreditReceiver(
        AllocatorConfig(
            capacity={r: 8 * MIB for r in RESOURCES},
            control_slots=2,
            max_grant={r: 8 * MIB for r in RESOURCES},
            max_keys=4,
            retry_after_us=100,
        ),
        SessionId(5000),
        initial_grant={r: 4 * MIB if r is CreditResource.DATA_BYTES else 2 for r in RESOURCES},
    )
    rig.tx.disconnect(20)
    rig.rx.accept(ME, 0)
    rig.tx.reconnect(20)
    pump(rig.tx, rig.rx, 20)
    (event,) = rig.core.progress(30)
    assert (event.transfer_id, event.status, event.reason) == (
        tid,
        TaskStatus.FAILED,
        EndReason.REJECTED,
    )
    assert "fenced" in event.detail
    assert rig.rail.posts == []


def test_a_credit_submit_to_an_unregistered_peer_is_refused_whole() -> None:
    rig = Rig(initial_owners=1)
    stranger = TransferRequest(
        opcode=Opcode.WRITE,
        local=lazy_buffer(MIB),
        peer=RX + 1,
        remote_segment=1,
        remote_offset=0,
        length=MIB,
    )
    with pytest.raises(InvalidEntry):
        rig.core.submit([request(), stranger], 10)
    assert rig.core.statistics().submitted_total == 0 and rig.rail.posts == []


def test_the_gate_mode_must_match_the_configuration() -> None:
    with pytest.raises(ConfigError, match="differs"):
        DispatchCore(
            load_engine_config(CONFIG),
            [FakeDevice()],
            gate=DispatchGate(GateConfig(mode=CreditMode.OPTIONAL)),
        )


def legacy_window_core() -> tuple[DispatchCore, FakeDevice, DispatchGate]:
    """An optional-mode sender whose receiver shares no protocol version with it, so it falls
    back to the legacy window of one transfer (also used by ``test_protections.py``)."""
    rx = CreditReceiver(
        AllocatorConfig(
            capacity={r: 8 * MIB for r in RESOURCES},
            control_slots=2,
            max_grant={r: 8 * MIB for r in RESOURCES},
            max_keys=4,
            retry_after_us=100,
        ),
        SessionId(77),
        versions=(9,),  # no common protocol version: the sender falls back to legacy
    )
    rx.accept(ME, 0)
    tx = SenderEndpoint(sender_peer=ME, qos_class=0, mode=CreditMode.OPTIONAL)
    gate = DispatchGate(GateConfig(mode=CreditMode.OPTIONAL, legacy_window=1))
    gate.add_endpoint(RX, tx)
    tx.connect(1)
    pump(tx, rx, 1)
    rail = FakeDevice()
    config = {
        **CONFIG,
        "receiver_credit": {"enabled": True, "mode": "optional", "legacy_window": 1},
    }
    return DispatchCore(load_engine_config(config), [rail], gate=gate), rail, gate


def test_an_old_peer_in_optional_mode_gets_the_bounded_legacy_window() -> None:
    core, rail, gate = legacy_window_core()
    first, second = core.submit([request(), request()], 10)
    assert core.status(first).phase is TransferPhase.DISPATCHED
    assert all(s.lease is None for s in rail.posts[0])  # no receiver credit to carry
    info = core.status(second).backpressure
    assert info is not None and info.source is BackpressureSource.LOCAL_QUEUE
    assert info.fallback_allowed
    rail.finish()
    events = core.progress(20)
    assert [e.transfer_id for e in events] == [first]
    assert core.status(second).phase is TransferPhase.DISPATCHED
    assert gate.statistics().routes[0].legacy_fallbacks == 2
