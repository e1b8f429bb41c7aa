"""``merge_requests`` in the dispatch core: contiguous requests of one submit, one owner."""

from __future__ import annotations

from typing import Any

import attrs
from tent_transport.config import load_engine_config
from tent_transport.devices import Opcode, SliceStatus
from tent_transport.dispatch import DispatchCore, TransferIntent, TransferRequest
from transport_fakes import FakeDevice

from tent_credit import (
    AllocatorConfig,
    CreditMode,
    CreditReceiver,
    CreditResource,
    DispatchGate,
    GateConfig,
    SenderEndpoint,
    SessionId,
)
from tent_sched import TaskStatus

KIB = 1 << 10
RX, ME = 9, 7
RESOURCES = (CreditResource.DATA_BYTES, CreditResource.REQUEST_SLOTS, CreditResource.CONSUMER_SLOTS)


def config(merge: bool = True, **extra: Any) -> dict[str, Any]:
    return {
        "enable_runtime_queue": True,
        "receiver_credit": {"enabled": True, "mode": "required"},
        "dispatch": {"slice_bytes": 64 * KIB},
        "merge_requests": merge,
        **extra,
    }


class Rig:
    """A dispatch core with a gate whose receiver granted ``slots`` requests of 64 KiB."""

    def __init__(self, slots: int, **extra: Any) -> None:
        cap = {r: 16 * (64 * KIB if r is CreditResource.DATA_BYTES else 1) for r in RESOURCES}
        self.rx = CreditReceiver(
            AllocatorConfig(
                capacity=cap, control_slots=2, max_grant=cap, max_keys=4, retry_after_us=100
            ),
            SessionId(77),
            initial_grant={r: slots * (64 * KIB if r is CreditResource.DATA_BYTES else 1)
                           for r in RESOURCES},
        )
        self.rx.accept(ME, 0)
        self.tx = SenderEndpoint(sender_peer=ME, qos_class=0, mode=CreditMode.REQUIRED)
        self.gate = DispatchGate(GateConfig(mode=CreditMode.REQUIRED))
        self.gate.add_endpoint(RX, self.tx)
        self.tx.connect(1)
        for _ in range(3):
            ep = next(e for e in self.rx.endpoints() if not e.closed)
            for data in self.tx.messages_to_send(1):
                ep.receive_message(data, 1)
            self.tx.receive_batch(ep.messages_to_send(1), 1)
        self.rail = FakeDevice()
        self.core = DispatchCore(load_engine_config(config(**extra)), [self.rail], gate=self.gate)


def pieces(memory: bytearray, count: int, size: int, *, remote: int = 0) -> list[TransferRequest]:
    view = memoryview(memory)
    return [
        TransferRequest(
            opcode=Opcode.WRITE,
            local=view[i * size : (i + 1) * size],
            peer=RX,
            remote_segment=3,
            remote_offset=remote + i * size,
            length=size,
        )
        for i in range(count)
    ]


def test_contiguous_requests_become_one_owner_one_post_and_keep_their_slots() -> None:
    rig = Rig(slots=4)
    memory = bytearray(4 * 16 * KIB)
    batch = pieces(memory, 4, 16 * KIB)
    ids = rig.core.submit(list(reversed(batch)), 10)  # any submit order
    queue = rig.core.queue
    assert queue is not None and queue.statistics().admitted_total == 1
    assert rig.core.statistics().merged_total == 3
    (post,) = rig.rail.posts  # one owner, one chained post, one write per request
    assert [(s.remote_offset, s.length) for s in post] == [
        (i * 16 * KIB, 16 * KIB) for i in range(4)
    ]
    leases = [s.lease for s in post]
    assert all(lease is not None and dict(lease.charge) == {1: 16 * KIB, 2: 1, 4: 1}
               for lease in leases)
    route = rig.gate.statistics().routes[0]
    assert route.reserved == 1  # one reservation of the four requests' charges together
    rig.rail.finish()
    events = rig.core.progress(20)
    assert sorted(e.transfer_id for e in events) == sorted(ids)
    assert {(e.status, e.length, e.moved_bytes) for e in events} == {
        (TaskStatus.COMPLETED, 16 * KIB, 16 * KIB)
    }


def test_a_gap_a_foreign_buffer_or_another_deadline_is_not_merged() -> None:
    rig = Rig(slots=8)
    memory = bytearray(4 * 16 * KIB)
    a, b, c, d = pieces(memory, 4, 16 * KIB)
    other = bytearray(16 * KIB)
    foreign = TransferRequest(opcode=Opcode.WRITE, local=other, peer=RX, remote_segment=3,
                              remote_offset=4 * 16 * KIB, length=16 * KIB)
    late = TransferRequest(opcode=Opcode.WRITE, local=memoryview(memory)[48 * KIB:], peer=RX,
                           remote_segment=3, remote_offset=48 * KIB, length=16 * KIB,
                           deadline_ns=10**12)
    rig.core.submit([a, c, foreign, late], 10)  # b is the gap between a and c
    assert rig.core.statistics().merged_total == 0
    assert rig.core.queue is not None and rig.core.queue.statistics().admitted_total == 4
    assert b.length == d.length


def test_only_requests_of_one_intent_merge_and_each_event_reports_its_own() -> None:
    rig = Rig(slots=8)
    memory = bytearray(4 * 16 * KIB)
    a, b, c, d = (
        attrs.evolve(p, intent_type=intent)
        for p, intent in zip(
            pieces(memory, 4, 16 * KIB),
            (
                TransferIntent.FOREGROUND_GET,
                TransferIntent.FOREGROUND_GET,
                TransferIntent.MIGRATION,
                TransferIntent.MIGRATION,
            ),
            strict=True,
        )
    )
    ids = rig.core.submit([a, b, c, d], 10)
    assert rig.core.statistics().merged_total == 2  # a+b and c+d, not all four
    assert rig.core.queue is not None and rig.core.queue.statistics().admitted_total == 2
    rig.rail.finish()
    intents = {e.transfer_id: e.intent_type for e in rig.core.progress(20)}
    assert [intents[t] for t in ids] == [
        TransferIntent.FOREGROUND_GET,
        TransferIntent.FOREGROUND_GET,
        TransferIntent.MIGRATION,
        TransferIntent.MIGRATION,
    ]


def test_a_merged_owner_waits_for_all_its_requests_credit_and_fails_as_one() -> None:
    rig = Rig(slots=2)
    memory = bytearray(3 * 16 * KIB)
    ids = rig.core.submit(pieces(memory, 3, 16 * KIB), 10)
    assert rig.rail.posts == []  # three requests' slots, two granted: all or nothing
    state = rig.core.status(ids[1])
    assert state.backpressure is not None and state.status is TaskStatus.PENDING
    rig2 = Rig(slots=3)
    ids = rig2.core.submit(pieces(bytearray(3 * 16 * KIB), 3, 16 * KIB), 10)
    rig2.rail.finish(1)
    rig2.rail.finish(status=SliceStatus.TRANSPORT_ERROR)
    events = {e.transfer_id: e for e in rig2.core.progress(20)}
    assert {e.status for e in events.values()} == {TaskStatus.FAILED}
    assert [events[i].moved_bytes for i in ids] == [16 * KIB, 0, 0]


def test_merging_is_off_by_default() -> None:
    rig = Rig(slots=4, merge=False)
    rig.core.submit(pieces(bytearray(4 * 16 * KIB), 4, 16 * KIB), 10)
    assert rig.core.statistics().merged_total == 0
    assert rig.core.queue is not None and rig.core.queue.statistics().admitted_total == 4
