"""The soft device's RC rules, one test each (docs/transport_design.md#soft-verbs)."""

from __future__ import annotations

import hashlib
import itertools
import multiprocessing
import os
import signal
import socket
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tent_transport.devices.verbs import soft, soft_backend
from tent_transport.devices.verbs.soft._shm import KEY_SLOTS, KeyTable
from verbs_rc import (
    POLL_TIMEOUT_S,
    Pair,
    Side,
    connect,
    poll_until,
    post_recv,
    process_state,
    rts_attr,
    stop_process,
    target_main,
    write_wr,
)

e = soft.enums
ALL = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


def test_write_lands_in_a_stopped_target_process(fabric: Path) -> None:
    """One-sided: the target process is SIGSTOPped while the write lands and completes."""
    length = 1 << 20
    spawn = multiprocessing.get_context("spawn")
    parent, child = spawn.Pipe()
    proc = spawn.Process(target=target_main, args=(child, str(fabric), length), daemon=True)
    proc.start()
    backend = soft_backend(fabric)
    side = Side(backend, "soft0")
    try:
        assert parent.poll(POLL_TIMEOUT_S * 3)
        gid, qpn, rkey, addr = parent.recv()
        parent.send((side.ctx.query_gid(1, 0).gid, side.qp.qp_num))
        side.qp.to_rts(rts_attr(backend, backend.GID(gid), qpn))
        assert parent.recv() == "ready"
        payload = os.urandom(length)
        src = side.mr(length, e.IBV_ACCESS_LOCAL_WRITE)
        src.write(payload, length)
        assert proc.pid is not None
        stop_process(proc.pid)
        side.qp.post_send(write_wr(backend, 9, src, length, rkey, addr))
        wcs = poll_until(side.scq, 1)
        assert [(w.wr_id, w.status) for w in wcs] == [(9, e.IBV_WC_SUCCESS)]
        assert process_state(proc.pid) == "T"  # it never ran while the write landed
        os.kill(proc.pid, signal.SIGCONT)
        parent.send("digest")
        assert parent.recv() == hashlib.sha256(payload).hexdigest()
        parent.send("exit")
    finally:
        if proc.is_alive() and proc.pid is not None:
            os.kill(proc.pid, signal.SIGCONT)
        proc.join(POLL_TIMEOUT_S)
        if proc.is_alive():
            proc.kill()
        side.close()


def test_write_with_imm_consumes_a_receive_and_keeps_network_byte_order(fabric: Path) -> None:
    pair = Pair(soft_backend(fabric), "soft0")
    try:
        post_recv(pair.target, 41, pair.sink)
        dst = pair.dst.buf + 256
        wr = write_wr(pair.backend, 5, pair.src, 128, pair.dst.rkey, dst, imm=0x01020304)
        assert pair.one(wr) == e.IBV_WC_SUCCESS
        wcs = poll_until(pair.target.rcq, 1)
        assert len(wcs) == 1
        wc = wcs[0]
        assert (wc.wr_id, wc.status, wc.opcode, wc.byte_len) == (
            41, e.IBV_WC_SUCCESS, e.IBV_WC_RECV_RDMA_WITH_IMM, 128
        )
        assert wc.imm_data == socket.htonl(0x01020304)  # delivered as posted: big-endian
        assert socket.ntohl(wc.imm_data) == 0x01020304
        assert pair.dst.read(128, 256) == b"\xab" * 128
        assert pair.dst.read(256, 0) == b"\0" * 256
    finally:
        pair.close()


def test_deregistration_invalidates_the_rkey_at_once(fabric: Path) -> None:
    pair = Pair(soft_backend(fabric), "soft0")
    try:
        assert pair.one(write_wr(pair.backend, 1, pair.src, 8, pair.dst.rkey, pair.dst.buf)) == 0
        rkey, addr = pair.dst.rkey, pair.dst.buf
        pair.dst.close()
        pair.target.mrs.remove(pair.dst)
        # a fresh registration over new memory never revives the old rkey
        again = pair.target.mr(4096, ALL)
        assert again.rkey != rkey
        status = pair.one(write_wr(pair.backend, 2, pair.src, 8, rkey, addr))
        assert status == e.IBV_WC_REM_ACCESS_ERR
        assert again.read(8, 0) == b"\0" * 8
        pair.dst = again
    finally:
        pair.close()


def test_read_copies_remote_bytes_only_with_remote_read(fabric: Path) -> None:
    pair = Pair(soft_backend(fabric), "soft0")
    try:
        pair.dst.write(b"remote-bytes", 12, 100)
        sink = pair.init.mr(64, e.IBV_ACCESS_LOCAL_WRITE)
        wr = write_wr(pair.backend, 3, sink, 12, pair.dst.rkey, pair.dst.buf + 100, read=True)
        assert pair.one(wr) == e.IBV_WC_SUCCESS
        assert sink.read(12, 0) == b"remote-bytes"
        # a READ into memory without LOCAL_WRITE is a local protection error
        ro = pair.init.mr(64, 0)
        wr = write_wr(pair.backend, 4, ro, 12, pair.dst.rkey, pair.dst.buf, read=True)
        assert pair.one(wr) == e.IBV_WC_LOC_PROT_ERR
    finally:
        pair.close()


def _step_pair(fabric: Path, **kw: object) -> Pair:
    return Pair(soft_backend(fabric, soft.SoftConfig(step_mode=True)), "soft0", **kw)


def test_completions_are_asynchronous_and_in_order_per_send_queue(fabric: Path) -> None:
    """Step mode: nothing completes until released; released WRs complete in posting order."""
    pair = _step_pair(fabric)
    other = Side(pair.backend, "soft0")
    peer = Side(pair.backend, "soft0")
    try:
        connect(other, peer)
        dst2 = peer.mr(4096, ALL)
        src2 = other.mr(4096, e.IBV_ACCESS_LOCAL_WRITE)
        for wr_id in (1, 2, 3):
            pair.init.qp.post_send(write_wr(pair.backend, wr_id, pair.src, 8, pair.dst.rkey,
                                            pair.dst.buf + 8 * wr_id))
            other.qp.post_send(write_wr(pair.backend, 10 + wr_id, src2, 8, dst2.rkey, dst2.buf))
        assert pair.init.scq.poll(8) == (0, [])  # posted, not executed: asynchronous
        assert pair.dst.read(32, 0) == b"\0" * 32
        seen: list[int] = []
        # release the second queue first, then interleave: order holds within each queue
        for qp, cq in [(other.qp, other.scq), (pair.init.qp, pair.init.scq),
                       (other.qp, other.scq), (pair.init.qp, pair.init.scq),
                       (pair.init.qp, pair.init.scq), (other.qp, other.scq)]:
            assert qp.context.release(qp)
            n, wcs = cq.poll(8)
            assert n == 1  # exactly the released one became visible
            seen.append(wcs[0].wr_id)
        assert [w for w in seen if w < 10] == [1, 2, 3]
        assert [w for w in seen if w > 10] == [11, 12, 13]
        assert pair.dst.read(8, 8) == b"\xab" * 8
        assert not pair.init.ctx.release()
    finally:
        other.close()
        peer.close()
        pair.close()


def test_err_flushes_every_outstanding_wr_in_order(fabric: Path) -> None:
    pair = _step_pair(fabric)
    try:
        for wr_id in range(1, 6):
            pair.init.qp.post_send(write_wr(pair.backend, wr_id, pair.src, 8, pair.dst.rkey,
                                            pair.dst.buf))
        assert pair.init.ctx.release(pair.init.qp)
        post_recv(pair.init, 77, pair.init.mr(8, e.IBV_ACCESS_LOCAL_WRITE))
        pair.init.qp.modify(soft.QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
        _, wcs = pair.init.scq.poll(16)
        assert [(w.wr_id, w.status) for w in wcs] == [(1, e.IBV_WC_SUCCESS)] + [
            (i, e.IBV_WC_WR_FLUSH_ERR) for i in range(2, 6)
        ]
        _, rwcs = pair.init.rcq.poll(16)
        assert [(w.wr_id, w.status) for w in rwcs] == [(77, e.IBV_WC_WR_FLUSH_ERR)]
        assert not pair.init.ctx.release()  # nothing left to execute
        # posting in ERR is accepted and flushed at once (IBTA), never executed
        pair.init.qp.post_send(write_wr(pair.backend, 9, pair.src, 8, pair.dst.rkey, pair.dst.buf))
        _, wcs = pair.init.scq.poll(4)
        assert [(w.wr_id, w.status) for w in wcs] == [(9, e.IBV_WC_WR_FLUSH_ERR)]
    finally:
        pair.close()


def test_rnr_retry_waits_for_a_receive_then_gives_up(fabric: Path) -> None:
    # rnr_retry 7 is "retry forever": the WR waits until the target posts a receive
    pair = _step_pair(fabric)
    try:
        wr = write_wr(pair.backend, 1, pair.src, 16, pair.dst.rkey, pair.dst.buf, imm=5)
        pair.init.qp.post_send(wr)
        for _ in range(20):
            assert not pair.init.ctx.release(pair.init.qp)
        assert pair.dst.read(16, 0) == b"\0" * 16
        post_recv(pair.target, 8, pair.sink)
        assert pair.init.ctx.release(pair.init.qp)
        _, wcs = pair.init.scq.poll(2)
        assert [(w.wr_id, w.status) for w in wcs] == [(1, e.IBV_WC_SUCCESS)]
    finally:
        pair.close()
    # rnr_retry 3: the fourth unanswered attempt fails the WR
    pair = _step_pair(fabric, rnr_retry=3)
    try:
        pair.init.qp.post_send(write_wr(pair.backend, 1, pair.src, 16, pair.dst.rkey,
                                        pair.dst.buf, imm=5))
        results = [pair.init.ctx.release(pair.init.qp) for _ in range(4)]
        assert results == [False, False, False, True]
        _, wcs = pair.init.scq.poll(2)
        assert [w.status for w in wcs] == [e.IBV_WC_RNR_RETRY_EXC_ERR]
        assert pair.init.qp.qp_state == e.IBV_QPS_ERR
    finally:
        pair.close()


STATES = [e.IBV_QPS_RESET, e.IBV_QPS_INIT, e.IBV_QPS_RTR, e.IBV_QPS_RTS, e.IBV_QPS_ERR]


def _drive_to(side: Side, peer: Side, state: int) -> None:
    attr = rts_attr(side.backend, peer.ctx.query_gid(1, 0), peer.qp.qp_num)
    side.qp.modify(soft.QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
    if state == e.IBV_QPS_INIT:
        side.qp.to_init(attr)
    elif state == e.IBV_QPS_RTR:
        side.qp.to_rtr(attr)
    elif state == e.IBV_QPS_RTS:
        side.qp.to_rts(attr)
    elif state == e.IBV_QPS_ERR:
        side.qp.modify(soft.QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)


@given(start=st.sampled_from(STATES), target=st.sampled_from(STATES))
def test_state_machine_accepts_exactly_the_table(start: int, target: int) -> None:
    """Every (state, next state) pair: modify succeeds iff the table has it (with its mask)."""
    import tempfile

    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        backend = soft_backend(Path(tmp), soft.SoftConfig(step_mode=True))
        side, peer = Side(backend, "soft0"), Side(backend, "soft0")
        try:
            _drive_to(side, peer, start)
            assert side.qp.qp_state == start
            required = soft.TRANSITIONS.get((start, target))
            attr = rts_attr(backend, peer.ctx.query_gid(1, 0), peer.qp.qp_num)
            attr.qp_state = target
            attr.qp_access_flags = ALL
            full_mask = (1 << 21) - 1
            try:
                side.qp.modify(attr, full_mask)
                accepted = True
            except soft.PyverbsRDMAError as exc:
                assert exc.error_code == 22  # EINVAL
                accepted = False
            assert accepted == (required is not None)
            assert side.qp.qp_state == (target if accepted else start)
            if required is not None and required != e.IBV_QP_STATE:
                # the same transition without one required attribute is refused
                _drive_to(side, peer, start)
                missing = required & ~e.IBV_QP_STATE
                lowest = missing & -missing
                with pytest.raises(soft.PyverbsRDMAError):
                    side.qp.modify(attr, required & ~lowest)
        finally:
            side.close()
            peer.close()


def _fault_run(fabric: Path, seed: int) -> list[tuple[int, int]]:
    config = soft.SoftConfig(seed=seed, fault_rate=0.5, step_mode=True)
    pair = Pair(soft_backend(fabric, config), "soft0", max_send_wr=64, cqe=128)
    try:
        outcome: list[tuple[int, int]] = []
        for wr_id in range(32):
            if pair.init.qp.qp_state != e.IBV_QPS_RTS:
                connect_again(pair)
            pair.init.qp.post_send(write_wr(pair.backend, wr_id, pair.src, 8, pair.dst.rkey,
                                            pair.dst.buf))
            pair.init.ctx.release(pair.init.qp)
            _, wcs = pair.init.scq.poll(4)
            outcome.extend((w.wr_id, w.status) for w in wcs)
        return outcome
    finally:
        pair.close()


def connect_again(pair: Pair) -> None:
    for side in (pair.init, pair.target):
        side.qp.modify(soft.QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
        attr = soft.QPAttr()
        attr.qp_access_flags = ALL
        side.qp.to_init(attr)
    connect(pair.init, pair.target)


def test_seeded_faults_replay_exactly(fabric: Path) -> None:
    first, again, other = _fault_run(fabric, 7), _fault_run(fabric, 7), _fault_run(fabric, 8)
    assert first == again
    assert {status for _, status in first} == {e.IBV_WC_SUCCESS, e.IBV_WC_RETRY_EXC_ERR}
    assert first != other


def test_seeded_delays_keep_per_queue_order(fabric: Path) -> None:
    config = soft.SoftConfig(seed=3, delay_ns=(0, 2_000_000))
    pair = Pair(soft_backend(fabric, config), "soft0", max_send_wr=32, cqe=64)
    try:
        head = None
        for wr_id in reversed(range(24)):
            wr = write_wr(pair.backend, wr_id, pair.src, 8, pair.dst.rkey, pair.dst.buf)
            if head is not None:
                wr.next_wr = head
            head = wr
        assert head is not None
        pair.init.qp.post_send(head)  # one chained post
        wcs = poll_until(pair.init.scq, 24)
        assert [w.wr_id for w in wcs] == list(range(24))
        assert all(w.status == e.IBV_WC_SUCCESS for w in wcs)
    finally:
        pair.close()


def test_chained_post_over_max_send_wr_posts_the_prefix(fabric: Path) -> None:
    pair = _step_pair(fabric, max_send_wr=3)
    try:
        wrs = [write_wr(pair.backend, i, pair.src, 8, pair.dst.rkey, pair.dst.buf)
               for i in range(5)]
        for a, b in itertools.pairwise(wrs):
            a.next_wr = b
        bad = write_wr(pair.backend, 999, pair.src, 8, 0, 0)
        with pytest.raises(soft.PyverbsRDMAError) as info:
            pair.init.qp.post_send(wrs[0], bad)
        assert info.value.error_code == 12  # ENOMEM
        assert bad.wr_id == 3  # the first refused WR, as ibv_post_send's bad_wr
        while pair.init.ctx.release():
            pass
        _, wcs = pair.init.scq.poll(8)
        assert [w.wr_id for w in wcs] == [0, 1, 2]
    finally:
        pair.close()


def test_wrong_device_name_and_qp_type_are_refused(fabric: Path) -> None:
    with pytest.raises(soft.PyverbsRDMAError):
        soft.Context("mlx5_0", fabric=fabric)
    with soft.Context(fabric=fabric) as ctx:
        pd, cq = soft.PD(ctx), soft.CQ(ctx, 4)
        with pytest.raises(soft.PyverbsRDMAError) as info:
            soft.QP(pd, soft.QPInitAttr(scq=cq, rcq=cq))  # the default type is UD
        assert info.value.error_code == 95  # EOPNOTSUPP
        with pytest.raises(soft.PyverbsUserError):
            soft.SendWR(opcode=e.IBV_WR_RDMA_WRITE)  # a WR needs an SGE


def test_closing_a_target_context_fails_writes_as_unreachable(fabric: Path) -> None:
    pair = Pair(soft_backend(fabric), "soft0")
    rkey, addr = pair.dst.rkey, pair.dst.buf
    pair.target.close()
    try:
        status = pair.one(write_wr(pair.backend, 1, pair.src, 8, rkey, addr))
        assert status == e.IBV_WC_RETRY_EXC_ERR
    finally:
        pair.init.close()


def test_rkey_of_another_protection_domain_is_a_remote_access_error(fabric: Path) -> None:
    pair = Pair(soft_backend(fabric), "soft0")
    try:
        other_pd = soft.PD(pair.target.ctx)
        foreign = soft.MR(other_pd, 4096, ALL)
        status = pair.one(write_wr(pair.backend, 1, pair.src, 8, foreign.rkey, foreign.buf))
        assert status == e.IBV_WC_REM_ACCESS_ERR
        assert foreign.read(8, 0) == b"\0" * 8
        foreign.close()
    finally:
        pair.close()


def test_completion_callback_is_one_shot_until_rearmed(fabric: Path) -> None:
    pair = _step_pair(fabric)
    calls: list[int] = []
    try:
        pair.init.scq.set_notify(lambda: calls.append(1))  # installing arms it
        for wr_id in (1, 2, 3):
            pair.init.qp.post_send(write_wr(pair.backend, wr_id, pair.src, 8, pair.dst.rkey,
                                            pair.dst.buf))
        assert calls == []  # nothing completed yet
        assert pair.init.ctx.release()
        assert pair.init.ctx.release()
        assert calls == [1]  # two completions, one call: ibv_req_notify_cq is one-shot
        pair.init.scq.req_notify()
        assert pair.init.ctx.release()
        assert calls == [1, 1]
        assert pair.init.scq.poll(8)[0] == 3
    finally:
        pair.init.scq.set_notify(None)
        pair.close()


def test_incast_of_three_sender_processes_into_a_stopped_target(fabric: Path) -> None:
    """Three initiator processes write concurrently into one SIGSTOPped target's regions."""
    from verbs_rc import incast_sender_main, incast_target_main

    senders, length = 3, 1 << 20
    spawn = multiprocessing.get_context("spawn")
    t_parent, t_child = spawn.Pipe()
    target = spawn.Process(target=incast_target_main, args=(t_child, str(fabric), senders,
                                                            length), daemon=True)
    target.start()
    procs: list[multiprocessing.process.BaseProcess] = [target]
    try:
        assert t_parent.poll(POLL_TIMEOUT_S * 3)
        infos = t_parent.recv()
        pipes = []
        for i, info in enumerate(infos):
            parent, child = spawn.Pipe()
            proc = spawn.Process(target=incast_sender_main,
                                 args=(child, str(fabric), info, i, length), daemon=True)
            proc.start()
            procs.append(proc)
            pipes.append(parent)
        t_parent.send([p.recv() for p in pipes])
        assert t_parent.recv() == "ready"
        assert target.pid is not None
        stop_process(target.pid)  # stopped before any write is posted
        for pipe in pipes:
            pipe.send("go")
        results = [pipe.recv() for pipe in pipes]
        assert process_state(target.pid) == "T"
        os.kill(target.pid, signal.SIGCONT)
        for statuses, _ in results:
            assert statuses == [e.IBV_WC_SUCCESS] * (length // (64 * 1024))
        t_parent.send("digests")
        assert t_parent.recv() == [digest for _, digest in results]
        t_parent.send("exit")
    finally:
        for proc in procs:
            if proc.is_alive() and proc.pid is not None:
                os.kill(proc.pid, signal.SIGCONT)
            proc.join(POLL_TIMEOUT_S)
            if proc.is_alive():
                proc.kill()


def test_a_stale_rkey_whose_slot_was_registered_again_is_refused(fabric: Path) -> None:
    """The rkey's generation, not its slot alone, names a registration (issue 27): an rkey
    kept after its MR was deregistered must not reach the new MR that reuses its slot, even
    over the same memory."""
    pair = Pair(soft_backend(fabric), "soft0")
    try:
        stale, slot = pair.dst.rkey, pair.dst.rkey & (KEY_SLOTS - 1)
        memory = pair.dst.buf
        pair.dst.close()  # deregistered; its memory stays in the fabric
        again = None
        for _ in range(2 * KEY_SLOTS):  # bounded: FIFO reuse brings the slot back
            mr = pair.backend.MR(pair.target.pd, 4096, ALL, memory)
            if mr.rkey & (KEY_SLOTS - 1) == slot:
                again = mr
                break
            mr.close()
        assert again is not None and again.rkey != stale
        pair.target.mrs.append(again)
        # the live rkey reaches the memory (first: an error completion ends the QP)
        assert pair.one(write_wr(pair.backend, 1, pair.src, 8, again.rkey, memory)) == 0
        assert again.read(8, 0) == b"\xab" * 8
        status = pair.one(write_wr(pair.backend, 2, pair.src, 8, stale, memory + 64))
        assert status == e.IBV_WC_REM_ACCESS_ERR
        assert again.read(8, 64) == b"\0" * 8  # nothing landed through the stale rkey
    finally:
        pair.close()


def test_the_key_table_matches_the_whole_rkey(tmp_path: Path) -> None:
    """Unit level: a slot reused under a new generation does not answer its old rkey."""
    table = KeyTable(tmp_path / "keys", create=True)
    try:
        first = table.allocate(ALL, 1, 1, 0x1000, 64, 0)
        table.invalidate(first)
        reused = None
        for _ in range(2 * KEY_SLOTS):  # bounded
            rkey = table.allocate(ALL, 1, 1, 0x1000, 64, 0)
            if rkey & (KEY_SLOTS - 1) == first & (KEY_SLOTS - 1):
                reused = rkey
                break
            table.invalidate(rkey)
        assert reused is not None and reused != first
        assert table.lookup(first) is None
        entry = table.lookup(reused)
        assert entry is not None and entry.rkey == reused
    finally:
        table.close()
