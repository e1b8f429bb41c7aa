"""The refusal table and the verbs Device on a real NIC: runs where the probe finds a device.

Elsewhere every test here skips with the probe's reason (the only skip the suite allows). On a
machine with a NIC, ``TENT_RDMA_DEVICE`` picks the device (default: the first one listed).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tent_transport.devices.verbs import VerbsBackend, load_pyverbs, probe, soft_backend
from tent_transport.devices.verbs.refusals import REFUSALS
from verbs_rc import SCENARIOS

_PROBE = probe()
needs_nic = pytest.mark.skipif(not _PROBE.found, reason=_PROBE.reason)


def _device() -> str:
    return os.environ.get("TENT_RDMA_DEVICE", _PROBE.devices[0] if _PROBE.devices else "")


@needs_nic
@pytest.mark.parametrize("case", sorted(c for c, r in REFUSALS.items() if r.follows != "ours"))
def test_real_device_refuses_as_the_table_says(case: str) -> None:
    """Every row that follows a provider: the NIC reports that provider's value or one the row
    names for another provider (``elsewhere``)."""
    backend = load_pyverbs()
    observed, target_changed = SCENARIOS[case](backend, _device())
    assert observed in REFUSALS[case].accepted(backend.enums), REFUSALS[case].source
    assert not target_changed


@needs_nic
def test_verbs_device_writes_reads_and_fences_on_the_nic() -> None:
    """The soft-device Device tests' core, on hardware: write ids, READ, fencing."""
    _device_round_trip(load_pyverbs(), _device())


def _device_round_trip(backend: VerbsBackend, device: str) -> None:
    """One text for the NIC and the soft device (which runs it everywhere, keeping it honest)."""
    import time

    from tent_transport.devices import Opcode, SliceRequest, SliceStatus
    from tent_transport.devices.verbs import VerbsDevice, VerbsDeviceConfig

    gid_index = int(os.environ.get("TENT_RDMA_GID_INDEX", "0"))
    config = VerbsDeviceConfig(device_name=device, gid_index=gid_index, cq_depth=64,
                               max_send_wr=16, max_recv_wr=16)
    tx = VerbsDevice(backend, config, name="tx")
    rx = VerbsDevice(backend, config, name="rx")

    def drain(count: int) -> list[object]:
        got: list[object] = []
        deadline = time.monotonic() + 10
        while len(got) < count and time.monotonic() < deadline:
            got.extend(tx.poll(count - len(got), 0))
        return got

    try:
        a, b = tx.endpoint(2), rx.endpoint(1)
        tx.connect(2, b)
        rx.connect(1, a)
        segment = rx.allocate(1 << 16)
        tx.add_region(2, rx.exposures.expose(1, 5, 9, segment, offset=0, length=1 << 16,
                                              readable=True))
        payload = os.urandom(4096)
        tx.post([SliceRequest(wr_id=1, opcode=Opcode.WRITE, peer=2,
                              local=memoryview(bytearray(payload)), remote_segment=9,
                              remote_offset=0, length=4096, write_id=0x01020304)], 0)
        assert [c.status for c in drain(1)] == [SliceStatus.SUCCESS]  # type: ignore[attr-defined]
        assert bytes(segment[:4096]) == payload
        arrivals = rx.poll_arrivals(4)
        assert [(x.peer, x.write_id, x.length) for x in arrivals] == [(1, 0x01020304, 4096)]
        sink = bytearray(4096)
        tx.post([SliceRequest(wr_id=2, opcode=Opcode.READ, peer=2, local=memoryview(sink),
                              remote_segment=9, remote_offset=0, length=4096)], 0)
        assert [c.status for c in drain(1)] == [SliceStatus.SUCCESS]  # type: ignore[attr-defined]
        assert bytes(sink) == payload
        assert rx.exposures.fence(1, 5) == 1
        tx.post([SliceRequest(wr_id=3, opcode=Opcode.WRITE, peer=2,
                              local=memoryview(bytearray(64)), remote_segment=9,
                              remote_offset=8192, length=64, write_id=3)], 0)
        statuses = [c.status for c in drain(1)]  # type: ignore[attr-defined]
        assert statuses == [SliceStatus.REMOTE_ACCESS_ERROR]
        assert bytes(segment[8192:8256]) == bytes(64)
    finally:
        tx.close()
        rx.close()


def test_the_nic_round_trip_holds_on_the_soft_device(fabric: Path) -> None:
    _device_round_trip(soft_backend(fabric), "soft0")
