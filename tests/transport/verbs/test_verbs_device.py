"""The verbs Device over the soft device: posting, completions, protection, retirement."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from tent_transport.devices import Device, Opcode, SliceCompletion, SliceRequest, SliceStatus
from tent_transport.devices.verbs import (
    VerbsDevice,
    VerbsDeviceConfig,
    decode_verbs_message,
    encode_verbs_message,
    soft,
    soft_backend,
)
from tent_transport.errors import InvalidEntry, PostRefused
from verbs_rc import POLL_TIMEOUT_S

SENDER, RECEIVER = 1, 2  # peer ids: the sender calls the receiver 2, the receiver calls it 1
SESSION = 0xABC
SEGMENT = 7
SEG_BYTES = 1 << 16


@attrs.define
class Rig:
    tx: VerbsDevice
    rx: VerbsDevice
    segment: memoryview
    step: bool

    def release_all(self) -> None:
        if self.step:
            while self.tx.context.release():
                pass

    def drain(self, count: int) -> list[SliceCompletion]:
        import time

        got: list[SliceCompletion] = []
        deadline = time.monotonic() + POLL_TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            self.release_all()
            got.extend(self.tx.poll(count - len(got), 0))
        return got

    def expose(self, session: int = SESSION, offset: int = 0, length: int = SEG_BYTES,
               readable: bool = False) -> None:
        region = self.rx.exposures.expose(
            SENDER, session, SEGMENT, self.segment, offset=offset, length=length,
            readable=readable,
        )
        # the region travels over the control connection as CBOR
        wire = decode_verbs_message(encode_verbs_message(region))
        assert wire == region
        self.tx.add_region(RECEIVER, region)  # type: ignore[arg-type]


def _connect(tx: VerbsDevice, rx: VerbsDevice) -> None:
    a, b = tx.endpoint(RECEIVER), rx.endpoint(SENDER)
    a_wire, b_wire = decode_verbs_message(encode_verbs_message(a)), decode_verbs_message(
        encode_verbs_message(b)
    )
    tx.connect(RECEIVER, b_wire)  # type: ignore[arg-type]
    rx.connect(SENDER, a_wire)  # type: ignore[arg-type]


def _rig(fabric: Path, *, step: bool, **config: int) -> Rig:
    backend = soft_backend(fabric, soft.SoftConfig(step_mode=step))
    tx = VerbsDevice(backend, VerbsDeviceConfig(device_name="soft0", **config), name="tx")
    rx = VerbsDevice(backend, VerbsDeviceConfig(device_name="soft0", **config), name="rx")
    _connect(tx, rx)
    return Rig(tx=tx, rx=rx, segment=rx.allocate(SEG_BYTES), step=step)


@pytest.fixture
def rig(fabric: Path) -> Iterator[Rig]:
    r = _rig(fabric, step=True, cq_depth=64, max_send_wr=8, max_recv_wr=16)
    yield r
    r.tx.close()
    r.rx.close()


def _write(wr_id: int, data: bytes, offset: int, write_id: int | None = None) -> SliceRequest:
    return SliceRequest(
        wr_id=wr_id, opcode=Opcode.WRITE, peer=RECEIVER, local=memoryview(bytearray(data)),
        remote_segment=SEGMENT, remote_offset=offset, length=len(data),
        write_id=write_id if write_id is not None else wr_id,
    )


def test_it_is_a_device(rig: Rig) -> None:
    assert isinstance(rig.tx, Device)
    assert rig.tx.next_completion_ns() is None


def test_writes_land_complete_in_order_and_arrive_with_their_write_id(rig: Rig) -> None:
    rig.expose()
    chunks = [os.urandom(1000 + i) for i in range(3)]
    offsets = [0, 4096, 9000]
    # given order, not wr_id order: completions follow the posting order
    slices = [_write(30 - i, c, o, write_id=0xF0000000 + i)
              for i, (c, o) in enumerate(zip(chunks, offsets, strict=True))]
    rig.tx.post(slices, 0)
    assert rig.tx.poll(8, 0) == []  # asynchronous: nothing executed yet (step mode)
    done = rig.drain(3)
    assert [(c.wr_id, c.status) for c in done] == [(30, SliceStatus.SUCCESS),
                                                    (29, SliceStatus.SUCCESS),
                                                    (28, SliceStatus.SUCCESS)]
    for chunk, offset in zip(chunks, offsets, strict=True):
        assert bytes(rig.segment[offset:offset + len(chunk)]) == chunk
    arrivals = rig.rx.poll_arrivals(8)
    assert [(a.peer, a.write_id, a.length) for a in arrivals] == [
        (SENDER, 0xF0000000 + i, len(c)) for i, c in enumerate(chunks)
    ]


def test_read_needs_a_readable_region(rig: Rig) -> None:
    rig.segment[100:110] = b"0123456789"
    rig.expose(readable=False)
    sink = bytearray(10)
    read = SliceRequest(wr_id=1, opcode=Opcode.READ, peer=RECEIVER, local=memoryview(sink),
                        remote_segment=SEGMENT, remote_offset=100, length=10)
    with pytest.raises(PostRefused) as info:
        rig.tx.post([read], 0)
    assert info.value.ready
    rig.expose(session=SESSION, readable=True)
    rig.tx.post([read], 0)
    assert [c.status for c in rig.drain(1)] == [SliceStatus.SUCCESS]
    assert bytes(sink) == b"0123456789"


def test_budget_is_min_of_cq_slots_and_send_queue(fabric: Path) -> None:
    r = _rig(fabric, step=True, cq_depth=6, max_send_wr=4, max_recv_wr=4)
    try:
        r.expose()
        assert r.tx.post_budget(RECEIVER) == 4  # max_send_wr bounds it
        r.tx.post([_write(i, b"x", i) for i in range(3)], 0)
        assert r.tx.post_budget(RECEIVER) == 1
        with pytest.raises(PostRefused) as info:
            r.tx.post([_write(10 + i, b"y", 10 + i) for i in range(2)], 0)
        assert info.value.ready
        assert r.tx.post_budget(RECEIVER) == 1  # the refused post changed nothing
        assert len(r.drain(3)) == 3
        assert r.tx.post_budget(RECEIVER) == 4
        assert bytes(r.segment[10:12]) == b"\0\0"
    finally:
        r.tx.close()
        r.rx.close()


def test_posts_are_refused_until_connected_and_for_mixed_or_duplicate_batches(
    rig: Rig, fabric: Path
) -> None:
    rig.expose()
    lone = VerbsDevice(soft_backend(fabric), VerbsDeviceConfig(device_name="soft0"), name="x")
    try:
        assert lone.post_budget(RECEIVER) == 0
        with pytest.raises(PostRefused) as info:
            lone.post([_write(1, b"a", 0)], 0)
        assert not info.value.ready
        lone.endpoint(RECEIVER)
        with pytest.raises(PostRefused):
            lone.post([_write(1, b"a", 0)], 0)  # QP in INIT, not connected
    finally:
        lone.close()
    other = attrs.evolve(_write(2, b"b", 0), peer=99)
    with pytest.raises(PostRefused):
        rig.tx.post([_write(1, b"a", 0), other], 0)
    rig.tx.post([_write(5, b"a", 0)], 0)
    with pytest.raises(PostRefused):
        rig.tx.post([_write(5, b"a", 0)], 0)  # wr_id 5 is outstanding
    with pytest.raises(PostRefused):
        rig.tx.post([attrs.evolve(_write(6, b"a", 0), remote_segment=8)], 0)  # no region
    assert [c.wr_id for c in rig.drain(1)] == [5]


def test_an_unregistrable_local_buffer_refuses_the_whole_post(rig: Rig) -> None:
    rig.expose()
    strided = memoryview(bytearray(32))[::2]  # 16 bytes, not contiguous
    bad = SliceRequest(wr_id=2, opcode=Opcode.WRITE, peer=RECEIVER, local=strided,
                       remote_segment=SEGMENT, remote_offset=64, length=16, write_id=2)
    with pytest.raises(PostRefused) as info:
        rig.tx.post([_write(1, b"first", 0), bad], 0)
    assert info.value.ready
    assert rig.tx.post_budget(RECEIVER) == 8  # nothing posted, nothing outstanding
    assert rig.tx.poll(4, 0) == []
    assert not rig.tx.context.release()


def test_a_fenced_sessions_write_fails_with_remote_access_error(rig: Rig) -> None:
    rig.expose(session=SESSION)
    rig.tx.post([_write(1, b"old-session", 0)], 0)
    assert [c.status for c in rig.drain(1)] == [SliceStatus.SUCCESS]
    # the receiver fences the session: its MRs are deregistered at once ...
    assert rig.rx.exposures.fence(SENDER, SESSION) == 1
    assert rig.rx.exposures.regions(SENDER, SESSION) == ()
    # ... and a sender still holding the old rkey cannot land a byte
    rig.tx.post([_write(2, b"STALE-WRITE", 100)], 0)
    done = rig.drain(1)
    assert [(c.wr_id, c.status) for c in done] == [(2, SliceStatus.REMOTE_ACCESS_ERROR)]
    assert bytes(rig.segment[100:111]) == b"\0" * 11
    assert rig.tx.post_budget(RECEIVER) == 0  # RC moved the QP to ERR


def test_a_liar_cannot_write_beyond_its_region(rig: Rig) -> None:
    rig.expose(offset=0, length=4096)
    rig.tx.post([_write(1, b"L" * 256, 4096 - 128)], 0)  # starts inside, runs 128 bytes past
    assert [c.status for c in rig.drain(1)] == [SliceStatus.REMOTE_ACCESS_ERROR]
    assert bytes(rig.segment[4096 - 128:4096 + 128]) == b"\0" * 256


def test_retiring_a_peer_flushes_its_outstanding_slices(rig: Rig) -> None:
    rig.expose()
    rig.tx.post([_write(i, b"z" * 8, 8 * i) for i in range(1, 5)], 0)
    assert rig.tx.context.release()  # the first one executes
    rig.tx.retire(RECEIVER)
    done = rig.tx.poll(16, 0)
    assert [(c.wr_id, c.status) for c in done] == [(1, SliceStatus.SUCCESS)] + [
        (i, SliceStatus.FLUSHED) for i in range(2, 5)
    ]
    assert bytes(rig.segment[16:40]) == b"\0" * 24
    with pytest.raises(InvalidEntry):
        rig.tx.endpoint(RECEIVER)
    rig.tx.forget(RECEIVER)
    # a new connection (new session) works again
    rig.rx.retire(SENDER)
    rig.rx.forget(SENDER)
    _connect(rig.tx, rig.rx)
    rig.expose(session=SESSION + 1)
    rig.tx.post([_write(9, b"again", 0)], 0)
    assert [c.status for c in rig.drain(1)] == [SliceStatus.SUCCESS]


def test_close_flushes_outstanding_slices(fabric: Path) -> None:
    r = _rig(fabric, step=True, cq_depth=16, max_send_wr=8, max_recv_wr=8)
    r.expose()
    r.tx.post([_write(i, b"q", i) for i in range(3)], 0)
    r.tx.close()
    r.tx.close()  # idempotent
    done = r.tx.poll(8, 0)
    assert [(c.wr_id, c.status) for c in done] == [(i, SliceStatus.FLUSHED) for i in range(3)]
    r.rx.close()


def test_read_only_sources_and_registered_local_memory_both_post(rig: Rig) -> None:
    rig.expose()
    ro = SliceRequest(wr_id=1, opcode=Opcode.WRITE, peer=RECEIVER, local=memoryview(b"readonly"),
                      remote_segment=SEGMENT, remote_offset=0, length=8, write_id=1)
    big = bytearray(os.urandom(4096))
    rig.tx.register_local(memoryview(big))
    inside = SliceRequest(wr_id=2, opcode=Opcode.WRITE, peer=RECEIVER,
                          local=memoryview(big)[1024:2048], remote_segment=SEGMENT,
                          remote_offset=1024, length=1024, write_id=2)
    rig.tx.post([ro, inside], 0)
    assert [c.status for c in rig.drain(2)] == [SliceStatus.SUCCESS] * 2
    assert bytes(rig.segment[0:8]) == b"readonly"
    assert bytes(rig.segment[1024:2048]) == bytes(big[1024:2048])


def test_asynchronous_mode_wakes_the_engine(fabric: Path) -> None:
    import threading

    r = _rig(fabric, step=False, cq_depth=64, max_send_wr=16, max_recv_wr=16)
    woke = threading.Event()
    try:
        r.tx.set_wakeup(woke.set)
        r.expose()
        r.tx.post([_write(i, os.urandom(512), 512 * i) for i in range(8)], 0)
        assert woke.wait(POLL_TIMEOUT_S)
        done = r.drain(8)
        assert [c.wr_id for c in done] == list(range(8))
        assert all(c.status is SliceStatus.SUCCESS for c in done)
    finally:
        r.tx.set_wakeup(None)
        r.tx.close()
        r.rx.close()


def test_two_processes_exchange_over_cbor_write_and_fence(fabric: Path) -> None:
    """Sender and receiver Devices in two processes; the receiver fences, the next write fails."""
    import hashlib
    import multiprocessing

    from verbs_rc import receiver_device_main

    spawn = multiprocessing.get_context("spawn")
    parent, child = spawn.Pipe()
    proc = spawn.Process(target=receiver_device_main, args=(child, str(fabric), SEG_BYTES),
                         daemon=True)
    proc.start()
    tx = VerbsDevice(soft_backend(fabric), VerbsDeviceConfig(device_name="soft0", cq_depth=64,
                     max_send_wr=32, max_recv_wr=8), name="tx")
    try:
        assert parent.poll(POLL_TIMEOUT_S * 3)
        remote = decode_verbs_message(parent.recv())
        parent.send(encode_verbs_message(tx.endpoint(RECEIVER)))
        tx.connect(RECEIVER, remote)  # type: ignore[arg-type]
        tx.add_region(RECEIVER, decode_verbs_message(parent.recv()))  # type: ignore[arg-type]
        payload = os.urandom(SEG_BYTES)
        tx.post([
            SliceRequest(wr_id=i, opcode=Opcode.WRITE, peer=RECEIVER,
                         local=memoryview(payload)[i * 4096:(i + 1) * 4096], remote_segment=9,
                         remote_offset=i * 4096, length=4096, write_id=100 + i)
            for i in range(SEG_BYTES // 4096)
        ], 0)
        rig = Rig(tx=tx, rx=tx, segment=memoryview(b""), step=False)
        done = rig.drain(SEG_BYTES // 4096)
        assert [c.status for c in done] == [SliceStatus.SUCCESS] * (SEG_BYTES // 4096)
        parent.send("arrivals")
        arrivals, digest = parent.recv()
        assert arrivals == [(100 + i, 4096) for i in range(SEG_BYTES // 4096)]
        assert digest == hashlib.sha256(payload).hexdigest()
        parent.send("fence")
        assert parent.recv() == 1
        tx.post([attrs.evolve(_write(99, b"after the fence", 9000), remote_segment=9)], 0)
        assert [c.status for c in rig.drain(1)] == [SliceStatus.REMOTE_ACCESS_ERROR]
        parent.send("arrivals")
        arrivals, after = parent.recv()
        assert arrivals == []
        assert after == digest  # not a byte of the fenced session's write landed
        parent.send("exit")
    finally:
        proc.join(POLL_TIMEOUT_S)
        if proc.is_alive():
            proc.kill()
        tx.close()


def test_a_peer_cannot_grow_the_region_table_without_bound(rig: Rig) -> None:
    from tent_transport.devices.verbs import VerbsRegion
    from tent_transport.devices.verbs.device import MAX_REGIONS_PER_PEER
    from tent_transport.errors import TooManyRequests

    for i in range(MAX_REGIONS_PER_PEER):
        rig.tx.add_region(RECEIVER, VerbsRegion(segment=1000 + i, session=1, offset=0, length=1,
                                                addr=0, rkey=0, readable=False))
    with pytest.raises(TooManyRequests):
        rig.tx.add_region(RECEIVER, VerbsRegion(segment=1, session=1, offset=0, length=1,
                                                addr=0, rkey=0, readable=False))
    rig.tx.drop_regions(RECEIVER)
    rig.expose()  # room again after the peer's regions were dropped
    with pytest.raises(InvalidEntry):
        rig.tx.add_region(12345, VerbsRegion(segment=1, session=1, offset=0, length=1, addr=0,
                                             rkey=0, readable=False))


def test_another_peers_rkey_is_useless_through_this_peers_qp(rig: Rig, fabric: Path) -> None:
    """Each peer has its own PD: a stolen or guessed rkey fails with a remote access error."""
    other = VerbsDevice(soft_backend(fabric, soft.SoftConfig(step_mode=True)),
                        VerbsDeviceConfig(device_name="soft0", cq_depth=64, max_send_wr=8,
                                          max_recv_wr=16), name="other")
    try:
        a, b = other.endpoint(RECEIVER), rig.rx.endpoint(3)
        other.connect(RECEIVER, b)
        rig.rx.connect(3, a)
        theirs = rig.rx.exposures.expose(3, 77, SEGMENT, rig.segment, offset=0, length=4096)
        rig.tx.add_region(RECEIVER, theirs)  # peer 1 learned peer 3's rkey and address
        rig.tx.post([_write(1, b"stolen-rkey", 0)], 0)
        assert [c.status for c in rig.drain(1)] == [SliceStatus.REMOTE_ACCESS_ERROR]
        assert bytes(rig.segment[:11]) == b"\0" * 11
        other.add_region(RECEIVER, theirs)  # through its rightful peer's QP it works
        other.post([attrs.evolve(_write(2, b"rightful", 0))], 0)
        while other.context.release():
            pass
        assert [c.status for c in other.poll(4, 0)] == [SliceStatus.SUCCESS]
        assert bytes(rig.segment[:8]) == b"rightful"
    finally:
        other.close()


def test_a_provider_refusal_mid_chain_keeps_posting_order(fabric: Path) -> None:
    """The HCA posts a prefix and refuses the rest (bad_wr): the prefix completes first, then
    the refused slices as TRANSPORT_ERROR, and the peer reads not ready."""
    import errno as errno_module

    class PrefixQP(soft.QP):  # fault injection through the backend seam
        def post_send(self, wr: soft.SendWR, bad_wr: soft.SendWR | None = None) -> None:
            second = wr.next_wr
            wr.next_wr = None
            super().post_send(wr, bad_wr)
            if second is not None:
                if bad_wr is not None:
                    bad_wr.wr_id = second.wr_id
                raise soft.PyverbsRDMAError("Failed to post send", errno_module.ENOMEM)

    backend = attrs.evolve(soft_backend(fabric, soft.SoftConfig(step_mode=True)), QP=PrefixQP)
    tx = VerbsDevice(backend, VerbsDeviceConfig(device_name="soft0", cq_depth=64,
                     max_send_wr=8, max_recv_wr=8), name="tx")
    rx = VerbsDevice(soft_backend(fabric), VerbsDeviceConfig(device_name="soft0", cq_depth=64,
                     max_send_wr=8, max_recv_wr=8), name="rx")
    try:
        _connect(tx, rx)
        r = Rig(tx=tx, rx=rx, segment=rx.allocate(SEG_BYTES), step=True)
        r.expose()
        tx.post([_write(i, b"p", i) for i in (5, 6, 7)], 0)
        assert tx.post_budget(RECEIVER) == 0
        assert tx.poll(8, 0) == []  # the refused ones wait behind the posted prefix
        done = r.drain(3)
        assert [(c.wr_id, c.status) for c in done] == [
            (5, SliceStatus.SUCCESS),
            (6, SliceStatus.TRANSPORT_ERROR),
            (7, SliceStatus.TRANSPORT_ERROR),
        ]
    finally:
        tx.close()
        rx.close()
