"""The simulated Device keeps the Device protocol: budgets, all-or-nothing posts, order, flush."""

from __future__ import annotations

import pytest
from tent_transport.devices import Device, Opcode, SliceRequest, SliceStatus
from tent_transport.errors import InvalidArgument, PostRefused
from tent_transport.sim import LinkSpec, SimDevice


def slices(n: int, peer: int = 1, length: int = 800, start: int = 1) -> list[SliceRequest]:
    return [
        SliceRequest(
            wr_id=start + i,
            opcode=Opcode.WRITE,
            peer=peer,
            local=memoryview(bytes(length)),
            remote_segment=1,
            remote_offset=0,
            length=length,
        )
        for i in range(n)
    ]


def test_it_is_a_device_and_serves_in_posting_order_at_link_rate() -> None:
    device = SimDevice(LinkSpec(name="nic0", bytes_per_ns=8.0, slice_overhead_ns=10))
    assert isinstance(device, Device) and device.link_speed_gbps == 64.0
    device.post(slices(3), 0)
    assert device.next_completion_ns() == 110  # 800 B at 8 B/ns + 10 ns
    assert device.poll(10, 109) == []
    assert [c.wr_id for c in device.poll(10, 330)] == [1, 2, 3]
    assert device.busy_ns == 330


def test_budget_and_all_or_nothing_posts() -> None:
    device = SimDevice(LinkSpec(name="nic0", bytes_per_ns=1.0, max_qp_wr=2, cq_depth=3))
    assert device.post_budget(1) == 2
    with pytest.raises(PostRefused) as info:
        device.post(slices(3), 0)
    assert info.value.ready and device.post_budget(1) == 2  # nothing posted
    with pytest.raises(PostRefused):
        device.post([*slices(1, peer=1), *slices(1, peer=2, start=5)], 0)
    device.post(slices(2), 0)
    assert device.post_budget(1) == 0 and device.post_budget(2) == 1  # the CQ bounds it
    with pytest.raises(InvalidArgument):
        device.poll(1, -1)


def test_completions_are_batched_per_poll_period() -> None:
    device = SimDevice(LinkSpec(name="nic0", bytes_per_ns=8.0, completion_batch_ns=1000))
    device.post(slices(3), 0)
    assert device.next_completion_ns() == 1000
    assert len(device.poll(10, 1000)) == 3


def test_a_rate_change_applies_to_slices_starting_after_it() -> None:
    device = SimDevice(LinkSpec(name="nic0", bytes_per_ns=8.0, rate_changes=((100, 2.0),)))
    device.post(slices(2), 0)  # 0-100 at 8 B/ns, then 100-500 at 2 B/ns
    assert [device.poll(1, 10_000)[0].wr_id for _ in range(2)] == [1, 2]
    assert device.busy_ns == 500


def test_close_flushes_everything_not_polled_lost_slices_included() -> None:
    device = SimDevice(LinkSpec(name="nic0", bytes_per_ns=8.0, lose_every=2))
    device.post(slices(4), 0)
    assert device.lost_slices == 2
    device.close()
    out = device.poll(10, 1)
    assert [c.wr_id for c in out] == [1, 2, 3, 4]
    assert {c.status for c in out} == {SliceStatus.FLUSHED}
    with pytest.raises(PostRefused):
        device.post(slices(1, start=9), 2)
