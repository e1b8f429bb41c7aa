"""Cancel of dispatched work: on a device that can cancel (``Cancellable``), and on one that
cannot (a typed NotSupported that changes nothing)."""

from __future__ import annotations

import pytest
from tent_transport.config import load_engine_config
from tent_transport.devices import Opcode, SliceRequest, SliceStatus
from tent_transport.dispatch import DispatchCore, EndReason, TransferPhase, TransferRequest
from tent_transport.errors import NotSupported
from tent_transport.sim import LinkSpec, SimDevice
from transport_fakes import CancellableFakeDevice, FakeDevice, lazy_buffer

from tent_sched import TaskStatus

KIB = 1 << 10
QUEUE = {"enable_runtime_queue": True, "dispatch": {"slice_bytes": 16 * KIB}}


def write(length: int) -> TransferRequest:
    return TransferRequest(
        opcode=Opcode.WRITE,
        local=lazy_buffer(length),
        peer=3,
        remote_segment=1,
        remote_offset=0,
        length=length,
    )


def test_posted_work_is_canceled_once_on_the_device_and_ends_canceled() -> None:
    rail = CancellableFakeDevice()
    core = DispatchCore(load_engine_config(QUEUE), [rail])
    (tid,) = core.submit([write(48 * KIB)], 10)
    posted = [s.wr_id for s in rail.outstanding]
    assert len(posted) == 3 and core.status(tid).slices_posted == 3
    assert core.cancel(tid, 20) is True
    assert core.cancel(tid, 21) is True  # idempotent: the device is not asked again
    assert rail.cancels == [posted]
    assert core.status(tid).status is TaskStatus.PENDING  # until the device reports the ends
    (event,) = core.progress(30)
    assert (event.status, event.reason, event.moved_bytes) == (
        TaskStatus.CANCELED,
        EndReason.CANCELED,
        0,
    )


def test_a_slice_that_ended_before_the_cancel_keeps_its_bytes_counted() -> None:
    rail = CancellableFakeDevice(max_qp_wr=2)
    core = DispatchCore(load_engine_config(QUEUE), [rail])
    (tid,) = core.submit([write(48 * KIB)], 10)  # two posted, one waits for a QP slot
    assert core.status(tid).slices_waiting == 1
    posted = [s.wr_id for s in rail.outstanding]
    rail.finish(1)  # the first ended on the device; the core has not polled it yet
    assert core.cancel(tid, 12) is True
    assert rail.cancels == [posted]  # the waiting slice was only withdrawn
    (event,) = core.progress(13)
    assert (event.status, event.moved_bytes) == (TaskStatus.CANCELED, 16 * KIB)


def test_a_device_that_cannot_cancel_answers_not_supported_and_nothing_changes() -> None:
    config = {**QUEUE, "runtime_queue": {"max_dispatch_owners": 1}}
    rail = FakeDevice()
    core = DispatchCore(load_engine_config(config), [rail])
    posted, queued = core.submit([write(16 * KIB), write(16 * KIB)], 10)
    with pytest.raises(NotSupported):
        core.cancel_many([queued, posted], 20)  # validated first: the queued one stays too
    assert core.status(queued).phase is TransferPhase.QUEUED
    assert core.status(posted).slices_posted == 1
    assert core.cancel(queued, 21) is True  # queued work never touches a device
    rail.finish()
    events = {e.transfer_id: e.status for e in core.progress(30)}
    assert events == {posted: TaskStatus.COMPLETED, queued: TaskStatus.CANCELED}


def test_the_simulated_link_cancels_in_posting_order_lost_slices_too() -> None:
    link = SimDevice(LinkSpec(name="sim", bytes_per_ns=1.0, lose_every=3))
    slices = [
        SliceRequest(
            wr_id=i, opcode=Opcode.WRITE, peer=1, local=lazy_buffer(1000), remote_segment=1,
            remote_offset=0, length=1000,
        )
        for i in range(1, 4)
    ]
    link.post(slices, 0)  # finish at 1000 and 2000; the third is lost
    link.cancel([3, 2, 99], 500)
    assert link.poll(8, 500) == []  # the canceled one waits behind the first
    done = link.poll(8, 1000)
    assert [(c.wr_id, c.status) for c in done] == [
        (1, SliceStatus.SUCCESS),
        (2, SliceStatus.CANCELED),
        (3, SliceStatus.CANCELED),
    ]
    assert link.post_budget(1) == link.spec.max_qp_wr  # nothing left holding a slot
