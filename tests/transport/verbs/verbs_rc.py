"""RC test scaffolding over a verbs backend (soft or real pyverbs), and one scenario per refusal.

Both ends live in one process (as in rdma-core's own tests, server and client objects side by
side) unless a test spawns a target process with :func:`target_main`. Every wait is bounded.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from typing import Any

from tent_transport.devices.verbs import VerbsBackend
from tent_transport.devices.verbs.refusals import REFUSALS

POLL_TIMEOUT_S = 10.0  # a safety net against a hang, never a speed assertion


class Side:
    """One end: context, PD, send and receive CQs, one RC QP in INIT."""

    def __init__(
        self,
        backend: VerbsBackend,
        device: str,
        *,
        max_send_wr: int = 16,
        max_recv_wr: int = 16,
        cqe: int = 64,
        qp_access: int | None = None,
    ) -> None:
        e = backend.enums
        self.backend = backend
        self.ctx = backend.open_context(device)
        self.pd = backend.PD(self.ctx)
        self.scq = backend.CQ(self.ctx, cqe, None, None, 0)
        self.rcq = backend.CQ(self.ctx, cqe, None, None, 0)
        cap = backend.QPCap(
            max_send_wr=max_send_wr, max_recv_wr=max_recv_wr, max_send_sge=1, max_recv_sge=1
        )
        init = backend.QPInitAttr(
            qp_type=e.IBV_QPT_RC, scq=self.scq, rcq=self.rcq, cap=cap, sq_sig_all=1
        )
        attr = backend.QPAttr(port_num=1)
        attr.qp_access_flags = (
            qp_access
            if qp_access is not None
            else e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
        )
        self.qp = backend.QP(self.pd, init, attr)
        self.mrs: list[Any] = []

    def mr(self, length: int, access: int) -> Any:
        mr = self.backend.MR(self.pd, length, access)
        self.mrs.append(mr)
        return mr

    def close(self) -> None:
        for mr in self.mrs:
            mr.close()
        self.qp.close()
        self.ctx.close()


def rts_attr(backend: VerbsBackend, remote_gid: Any, remote_qpn: int, *,
             rnr_retry: int = 7, max_dest_rd_atomic: int = 1) -> Any:
    """The RTR+RTS attributes of rdma-core's ``RCResources.to_rts`` (GRH route, RNR timers)."""
    e = backend.enums
    attr = backend.QPAttr(port_num=1)
    attr.path_mtu = e.IBV_MTU_1024
    attr.max_dest_rd_atomic = max_dest_rd_atomic
    attr.max_rd_atomic = 1
    attr.min_rnr_timer = 12
    attr.timeout = 14
    attr.retry_cnt = 7
    attr.rnr_retry = rnr_retry
    route = backend.GlobalRoute(dgid=remote_gid, sgid_index=0)
    attr.ah_attr = backend.AHAttr(port_num=1, is_global=1, gr=route, dlid=0)
    attr.dest_qp_num = remote_qpn
    attr.rq_psn = 0
    attr.sq_psn = 0
    return attr


def connect(a: Side, b: Side, *, rnr_retry: int = 7, b_rd_atomic: int = 1) -> None:
    """Move both QPs INIT → RTR → RTS, each aimed at the other (``b`` with
    ``max_dest_rd_atomic`` ``b_rd_atomic``)."""
    gid_a, gid_b = a.ctx.query_gid(1, 0), b.ctx.query_gid(1, 0)
    a.qp.to_rts(rts_attr(a.backend, gid_b, b.qp.qp_num, rnr_retry=rnr_retry))
    b.qp.to_rts(rts_attr(b.backend, gid_a, a.qp.qp_num, rnr_retry=rnr_retry,
                         max_dest_rd_atomic=b_rd_atomic))


def poll_until(cq: Any, count: int, timeout_s: float = POLL_TIMEOUT_S) -> list[Any]:
    """Poll ``cq`` until ``count`` completions arrived (bounded by ``timeout_s``)."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        _, wcs = cq.poll(count - len(got))
        got.extend(wcs)
        if len(got) < count:
            time.sleep(0.0005)
    return got


def write_wr(  # noqa: PLR0917 (a WR's fields, in verbs order)
    backend: VerbsBackend, wr_id: int, src: Any, length: int, rkey: int, raddr: int,
             *, imm: int | None = None, read: bool = False) -> Any:
    """A signaled one-SGE RDMA WRITE (with immediate if ``imm``) or READ."""
    e = backend.enums
    if read:
        opcode = e.IBV_WR_RDMA_READ
    elif imm is not None:
        opcode = e.IBV_WR_RDMA_WRITE_WITH_IMM
    else:
        opcode = e.IBV_WR_RDMA_WRITE
    sge = backend.SGE(src.buf, length, src.lkey)
    wr = backend.SendWR(
        wr_id=wr_id, opcode=opcode, num_sge=1, sg=[sge], send_flags=e.IBV_SEND_SIGNALED,
        imm_data=socket.htonl(imm) if imm is not None else 0,
    )
    wr.set_wr_rdma(rkey, raddr)
    return wr


def post_recv(side: Side, wr_id: int, sink: Any) -> None:
    """Post one receive (with the dummy SGE rdma-core < 57 needs for WRITE_WITH_IMM)."""
    b = side.backend
    side.qp.post_recv(b.RecvWR(wr_id=wr_id, num_sge=1, sg=[b.SGE(sink.buf, 1, sink.lkey)]))


def raised_errno(backend: VerbsBackend, call: Callable[[], object]) -> int:
    """The ``error_code`` ``call`` raised with (0 if it did not raise)."""
    try:
        call()
    except backend.rdma_error as exc:
        return int(exc.error_code)  # type: ignore[attr-defined]
    return 0


# --- one scenario per refusal: returns (observed status or errno, whether target bytes changed) --


class Pair:
    """A connected initiator/target pair with a source MR and a remote-writable target MR.

    ``target_access`` is the target MR's access, ``target_qp_access`` the target QP's
    ``qp_access_flags`` and ``target_rd_atomic`` its ``max_dest_rd_atomic``.
    """

    def __init__(self, backend: VerbsBackend, device: str, **side_kw: Any) -> None:
        e = backend.enums
        self.backend = backend
        rnr_retry = side_kw.pop("rnr_retry", 7)
        everything = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
        target_access = side_kw.pop("target_access", everything)
        target_qp_access = side_kw.pop("target_qp_access", everything)
        target_rd_atomic = side_kw.pop("target_rd_atomic", 1)
        self.init = Side(backend, device, **side_kw)
        self.target = Side(backend, device, qp_access=target_qp_access, **side_kw)
        connect(self.init, self.target, rnr_retry=rnr_retry, b_rd_atomic=target_rd_atomic)
        self.src = self.init.mr(4096, e.IBV_ACCESS_LOCAL_WRITE)
        self.src.write(b"\xab" * 4096, 4096)
        self.dst = self.target.mr(4096, target_access)
        self.sink = self.target.mr(64, e.IBV_ACCESS_LOCAL_WRITE)

    def untouched(self) -> bool:
        return bool(self.dst.read(4096, 0) == b"\0" * 4096)

    def one(self, wr: Any) -> int:
        self.init.qp.post_send(wr)
        wcs = poll_until(self.init.scq, 1)
        assert len(wcs) == 1, "no completion within the safety timeout"
        return int(wcs[0].status)

    def close(self) -> None:
        self.init.close()
        self.target.close()


Scenario = Callable[[VerbsBackend, str], tuple[int, bool]]
SCENARIOS: dict[str, Scenario] = {}


def _with_pair(fn: Callable[[Pair], int], **kw: Any) -> Scenario:
    def run(backend: VerbsBackend, device: str) -> tuple[int, bool]:
        pair = Pair(backend, device, **kw)
        try:
            observed = fn(pair)
            return observed, not pair.untouched()
        finally:
            pair.close()

    return run


def _e(p: Pair) -> Any:
    return p.backend.enums


def _register_all() -> None:
    def no_remote_write(p: Pair) -> int:
        return p.one(write_wr(p.backend, 1, p.src, 64, p.dst.rkey, p.dst.buf))

    SCENARIOS["write_without_remote_write_access"] = _with_pair(
        no_remote_write, target_access=1  # IBV_ACCESS_LOCAL_WRITE only
    )

    def after_dereg(p: Pair) -> int:
        rkey, addr = p.dst.rkey, p.dst.buf
        p.target.mrs.remove(p.dst)
        keep = p.dst
        keep.close()
        status = p.one(write_wr(p.backend, 1, p.src, 64, rkey, addr))
        p.dst = p.target.mr(4096, _e(p).IBV_ACCESS_LOCAL_WRITE)  # untouched() reads a fresh MR
        return status

    SCENARIOS["write_after_deregistration"] = _with_pair(after_dereg)
    local_write, remote_write, remote_read = 1, 2, 4  # IBV_ACCESS_* (the same in pyverbs)
    SCENARIOS["write_through_qp_without_remote_write"] = _with_pair(
        no_remote_write, target_qp_access=local_write | remote_read
    )

    def read_one(p: Pair) -> int:
        sink = p.init.mr(4096, _e(p).IBV_ACCESS_LOCAL_WRITE)
        return p.one(write_wr(p.backend, 1, sink, 64, p.dst.rkey, p.dst.buf, read=True))

    SCENARIOS["read_through_qp_without_remote_read"] = _with_pair(
        read_one, target_qp_access=local_write | remote_write
    )
    SCENARIOS["read_with_zero_max_dest_rd_atomic"] = _with_pair(read_one, target_rd_atomic=0)
    SCENARIOS["write_imm_with_bad_rkey_without_receive"] = _with_pair(
        lambda p: p.one(
            write_wr(p.backend, 1, p.src, 64, p.dst.rkey ^ 0x5A5A00, p.dst.buf, imm=7)
        ),
        rnr_retry=0,
    )
    SCENARIOS["zero_length_write_with_invalid_rkey"] = _with_pair(
        lambda p: p.one(write_wr(p.backend, 1, p.src, 0, p.dst.rkey ^ 0x5A5A00, 0))
    )

    def receive_after(imm: int | None) -> Callable[[Pair], int]:
        def run(p: Pair) -> int:
            # the target has one receive posted; a write leaving its region fails at the
            # responder, which moves the target QP to ERR: that receive completes with...
            post_recv(p.target, 9, p.sink)
            wr = write_wr(p.backend, 1, p.src, 64, p.dst.rkey, p.dst.buf + 4096 - 32, imm=imm)
            assert p.one(wr) == _e(p).IBV_WC_REM_ACCESS_ERR
            wcs = poll_until(p.target.rcq, 1)
            assert [w.wr_id for w in wcs] == [9], "the target's receive never completed"
            return int(wcs[0].status)

        return run

    SCENARIOS["responder_receive_after_access_violation"] = _with_pair(receive_after(None))
    SCENARIOS["responder_receive_of_write_imm_access_violation"] = _with_pair(receive_after(7))
    SCENARIOS["write_with_unknown_rkey"] = _with_pair(
        lambda p: p.one(write_wr(p.backend, 1, p.src, 64, p.dst.rkey ^ 0x5A5A00, p.dst.buf))
    )
    SCENARIOS["write_out_of_range"] = _with_pair(
        lambda p: p.one(write_wr(p.backend, 1, p.src, 64, p.dst.rkey, p.dst.buf + 4096 - 32))
    )

    def read_no_remote_read(p: Pair) -> int:
        sink = p.init.mr(4096, _e(p).IBV_ACCESS_LOCAL_WRITE)
        return p.one(write_wr(p.backend, 1, sink, 64, p.dst.rkey, p.dst.buf, read=True))

    SCENARIOS["read_without_remote_read_access"] = _with_pair(
        read_no_remote_read, target_access=3  # LOCAL_WRITE | REMOTE_WRITE, no REMOTE_READ
    )

    def bad_local(p: Pair) -> int:
        sge = p.backend.SGE(p.src.buf + 4096 - 16, 64, p.src.lkey)  # runs past the MR's end
        wr = p.backend.SendWR(wr_id=1, opcode=_e(p).IBV_WR_RDMA_WRITE, num_sge=1, sg=[sge])
        wr.set_wr_rdma(p.dst.rkey, p.dst.buf)
        return p.one(wr)

    SCENARIOS["local_sge_outside_mr"] = _with_pair(bad_local)
    SCENARIOS["write_imm_without_receive"] = _with_pair(
        lambda p: p.one(write_wr(p.backend, 1, p.src, 64, p.dst.rkey, p.dst.buf, imm=7)),
        rnr_retry=0,
    )

    def flush(p: Pair) -> int:
        # The first WR fails (no receive, RNR retry 0): the QP enters ERR and flushes the second.
        e = _e(p)
        first = write_wr(p.backend, 1, p.src, 64, p.dst.rkey, p.dst.buf, imm=1)
        second = write_wr(p.backend, 2, p.src, 64, p.dst.rkey, p.dst.buf)
        first.next_wr = second
        p.init.qp.post_send(first)
        wcs = poll_until(p.init.scq, 2)
        assert [w.wr_id for w in wcs] == [1, 2]
        assert wcs[0].status == e.IBV_WC_RNR_RETRY_EXC_ERR
        return int(wcs[1].status)

    SCENARIOS["outstanding_wr_at_err"] = _with_pair(flush, rnr_retry=0)

    def target_err(p: Pair) -> int:
        e = _e(p)
        p.target.qp.modify(p.backend.QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
        return p.one(write_wr(p.backend, 1, p.src, 64, p.dst.rkey, p.dst.buf))

    SCENARIOS["target_qp_not_ready"] = _with_pair(target_err)

    def post_in(state_name: str) -> Scenario:
        def run(backend: VerbsBackend, device: str) -> tuple[int, bool]:
            e = backend.enums
            a, b = Side(backend, device), Side(backend, device)
            try:
                src = a.mr(64, e.IBV_ACCESS_LOCAL_WRITE)
                if state_name == "RESET":
                    a.qp.modify(backend.QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
                elif state_name == "RTR":
                    attr = rts_attr(backend, b.ctx.query_gid(1, 0), b.qp.qp_num)
                    a.qp.to_rtr(attr)
                wr = write_wr(backend, 1, src, 8, 0, 0)
                return raised_errno(backend, lambda: a.qp.post_send(wr)), False
            finally:
                a.close()
                b.close()

        return run

    SCENARIOS["post_send_in_reset"] = post_in("RESET")
    SCENARIOS["post_send_before_rts"] = post_in("RTR")

    def recv_in_reset(backend: VerbsBackend, device: str) -> tuple[int, bool]:
        e = backend.enums
        a = Side(backend, device)
        try:
            sink = a.mr(64, e.IBV_ACCESS_LOCAL_WRITE)
            a.qp.modify(backend.QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
            return raised_errno(backend, lambda: post_recv(a, 1, sink)), False
        finally:
            a.close()

    SCENARIOS["post_recv_in_reset"] = recv_in_reset

    def sq_full(p: Pair) -> int:
        # max_send_wr=2 outstanding (nothing polled): the third post is refused
        for wr_id in (1, 2):
            p.init.qp.post_send(write_wr(p.backend, wr_id, p.src, 8, p.dst.rkey, p.dst.buf))
        wr = write_wr(p.backend, 3, p.src, 8, p.dst.rkey, p.dst.buf + 8)
        observed = raised_errno(p.backend, lambda: p.init.qp.post_send(wr))
        assert len(poll_until(p.init.scq, 2)) == 2
        p.dst.write(b"\0" * 4096, 4096)  # the two accepted writes landed by design
        return observed

    SCENARIOS["send_queue_full"] = _with_pair(sq_full, max_send_wr=2)

    def rq_full(p: Pair) -> int:
        for wr_id in (1, 2):
            post_recv(p.target, wr_id, p.sink)
        return raised_errno(p.backend, lambda: post_recv(p.target, 3, p.sink))

    SCENARIOS["recv_queue_full"] = _with_pair(rq_full, max_recv_wr=2)

    def rq_sges(p: Pair) -> int:
        b = p.backend
        sges = [b.SGE(p.sink.buf, 1, p.sink.lkey), b.SGE(p.sink.buf + 1, 1, p.sink.lkey)]
        return raised_errno(b, lambda: p.target.qp.post_recv(b.RecvWR(wr_id=1, num_sge=2, sg=sges)))

    SCENARIOS["recv_too_many_sges"] = _with_pair(rq_sges)

    def reg_bad_flags(backend: VerbsBackend, device: str) -> tuple[int, bool]:
        a = Side(backend, device)
        try:
            return raised_errno(
                backend, lambda: backend.MR(a.pd, 4096, backend.enums.IBV_ACCESS_REMOTE_WRITE)
            ), False
        finally:
            a.close()

    SCENARIOS["reg_mr_remote_write_without_local_write"] = reg_bad_flags

    def big_cq(backend: VerbsBackend, device: str) -> tuple[int, bool]:
        ctx = backend.open_context(device)
        try:
            max_cqe = ctx.query_device().max_cqe
            return raised_errno(backend, lambda: backend.CQ(ctx, max_cqe + 1, None, None, 0)), False
        finally:
            ctx.close()

    SCENARIOS["create_cq_above_max_cqe"] = big_cq

    def bad_transition(backend: VerbsBackend, device: str) -> tuple[int, bool]:
        e = backend.enums
        a = Side(backend, device)
        try:
            a.qp.modify(backend.QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
            attr = backend.QPAttr(qp_state=e.IBV_QPS_RTS)
            return raised_errno(backend, lambda: a.qp.modify(attr, e.IBV_QP_STATE)), False
        finally:
            a.close()

    SCENARIOS["illegal_qp_transition"] = bad_transition

    def overrun(p: Pair) -> int:
        # the send CQ holds 2 entries; 3 unpolled completions overrun it
        for wr_id in (1, 2, 3):
            p.init.qp.post_send(write_wr(p.backend, wr_id, p.src, 8, p.dst.rkey, p.dst.buf))
        deadline = time.monotonic() + POLL_TIMEOUT_S
        while time.monotonic() < deadline:
            time.sleep(0.002)
            if getattr(p.init.scq, "overrun", False):
                break
        observed = raised_errno(p.backend, lambda: p.init.scq.poll(1))
        p.dst.write(b"\0" * 4096, 4096)
        return observed

    SCENARIOS["cq_overrun"] = _with_pair(overrun, cqe=2, max_send_wr=8)


_register_all()
assert set(SCENARIOS) == set(REFUSALS), set(REFUSALS) ^ set(SCENARIOS)


def process_state(pid: int) -> str:
    """The state letter of ``pid`` in ``/proc`` (``T`` = stopped)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def stop_process(pid: int) -> None:
    """SIGSTOP ``pid`` and wait (bounded) until ``/proc`` shows it stopped.

    The stop is not immediate: a sleeping process stops only once the kernel runs it to take
    the signal, which on a loaded machine can come after the writes a test means to land
    while it is stopped (the incast test once asserted ``T`` before that happened)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + POLL_TIMEOUT_S
    while process_state(pid) != "T" and time.monotonic() < deadline:
        time.sleep(0.001)
    assert process_state(pid) == "T", f"process {pid} did not stop"


def target_main(conn: Any, fabric: str, length: int) -> None:
    """A target process: exposes one remote-writable MR, connects, then runs only on request.

    Protocol over ``conn``: sends ``(gid, qpn, rkey, addr)``, receives ``(gid, qpn)``, sends
    ``"ready"``; then answers ``"digest"`` with the SHA-256 of its region until ``"exit"``.
    """
    import hashlib
    from pathlib import Path

    from tent_transport.devices.verbs import soft_backend

    backend = soft_backend(Path(fabric))
    e = backend.enums
    side = Side(backend, "soft0")
    mr = side.mr(
        length, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    )
    conn.send((side.ctx.query_gid(1, 0).gid, side.qp.qp_num, mr.rkey, mr.buf))
    peer_gid, peer_qpn = conn.recv()
    side.qp.to_rts(rts_attr(backend, backend.GID(peer_gid), peer_qpn))
    conn.send("ready")
    while (command := conn.recv()) != "exit":
        if command == "digest":
            conn.send(hashlib.sha256(mr.read(length, 0)).hexdigest())
    side.close()


def receiver_device_main(conn: Any, fabric: str, segment_bytes: int) -> None:
    """A receiver process running a VerbsDevice; the pipe stands in for the control connection.

    Sends its encoded endpoint, takes the sender's, exposes the whole segment to (1, session 5)
    and sends the encoded region. Then serves: ``"arrivals"`` → ``[(write_id, length), ...]``
    and the SHA-256 of the segment; ``"fence"`` → fences session 5 and answers the MR count;
    ``"exit"``.
    """
    import hashlib
    from pathlib import Path

    from tent_transport.devices.verbs import (
        VerbsDevice,
        VerbsDeviceConfig,
        decode_verbs_message,
        encode_verbs_message,
        soft_backend,
    )

    rx = VerbsDevice(soft_backend(Path(fabric)), VerbsDeviceConfig(device_name="soft0",
                     cq_depth=64, max_send_wr=8, max_recv_wr=32), name="rx")
    segment = rx.allocate(segment_bytes)
    conn.send(encode_verbs_message(rx.endpoint(1)))
    rx.connect(1, decode_verbs_message(conn.recv()))  # type: ignore[arg-type]
    region = rx.exposures.expose(1, 5, 9, segment, offset=0, length=segment_bytes)
    conn.send(encode_verbs_message(region))
    while (command := conn.recv()) != "exit":
        if command == "arrivals":
            arrivals = rx.poll_arrivals(64)
            conn.send((
                [(a.write_id, a.length) for a in arrivals],
                hashlib.sha256(bytes(segment)).hexdigest(),
            ))
        elif command == "fence":
            conn.send(rx.exposures.fence(1, 5))
    rx.close()


def incast_target_main(conn: Any, fabric: str, senders: int, length: int) -> None:
    """A target with one QP and one region per sender (one PD); answers digests per region."""
    import hashlib
    from pathlib import Path

    from tent_transport.devices.verbs import soft_backend

    backend = soft_backend(Path(fabric))
    e = backend.enums
    sides = [Side(backend, "soft0") for _ in range(senders)]
    access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    mrs = [side.mr(length, access) for side in sides]
    conn.send([(s.ctx.query_gid(1, 0).gid, s.qp.qp_num, m.rkey, m.buf) for s, m in zip(
        sides, mrs, strict=True)])
    for side, (gid, qpn) in zip(sides, conn.recv(), strict=True):
        side.qp.to_rts(rts_attr(backend, backend.GID(gid), qpn))
    conn.send("ready")
    while conn.recv() != "exit":  # any other request asks for the digests
        conn.send([hashlib.sha256(m.read(length, 0)).hexdigest() for m in mrs])
    for side in sides:
        side.close()


def incast_sender_main(conn: Any, fabric: str, target: tuple[str, int, int, int], seed: int,
                       length: int) -> None:
    """One sender: connects to its target QP, then on "go" writes its region in 64 KiB WRs and
    answers (statuses, digest of what it wrote)."""
    import hashlib
    import random
    from pathlib import Path

    from tent_transport.devices.verbs import soft_backend

    backend = soft_backend(Path(fabric))
    e = backend.enums
    side = Side(backend, "soft0", max_send_wr=64, cqe=128)
    gid, qpn, rkey, addr = target
    conn.send((side.ctx.query_gid(1, 0).gid, side.qp.qp_num))
    side.qp.to_rts(rts_attr(backend, backend.GID(gid), qpn))
    payload = random.Random(seed).randbytes(length)
    src = side.mr(length, e.IBV_ACCESS_LOCAL_WRITE)
    src.write(payload, length)
    assert conn.recv() == "go"
    chunk = 64 * 1024
    statuses: list[int] = []
    for start in range(0, length, chunk * 32):
        count = 0
        for offset in range(start, min(length, start + chunk * 32), chunk):
            sge = backend.SGE(src.buf + offset, chunk, src.lkey)
            wr = backend.SendWR(wr_id=offset, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[sge])
            wr.set_wr_rdma(rkey, addr + offset)
            side.qp.post_send(wr)
            count += 1
        statuses.extend(int(w.status) for w in poll_until(side.scq, count))
    conn.send((statuses, hashlib.sha256(payload).hexdigest()))
    side.close()


def responder_main(conn: Any, fabric: str) -> None:
    """A target process whose QPs the tests break from another process, one at a time.

    Commands over ``conn``: ``("open", qp_access, mr_access, rd_atomic, receives)`` makes a QP
    (``qp_access_flags``), a 4 KiB MR (``mr_access``) and posts ``receives`` receives (wr ids
    100, 101, ...), answering ``(gid, qpn, rkey, addr)``; ``("connect", gid, qpn)`` brings the
    QP to RTS with ``max_dest_rd_atomic`` ``rd_atomic`` and answers ``"ready"``;
    ``("report", n)`` polls the receive CQ until ``n`` completions came (bounded), then answers
    ``(qp state, [(wr_id, status), ...], sha256 of the MR)``; ``("close",)``; ``"exit"``.
    """
    import hashlib
    from pathlib import Path

    from tent_transport.devices.verbs import soft_backend

    backend = soft_backend(Path(fabric))
    e = backend.enums
    side: Side | None = None
    mr: Any = None
    rd_atomic = 1
    while (command := conn.recv()) != "exit":
        verb = command[0]
        if verb == "open":
            _, qp_access, mr_access, rd_atomic, receives = command
            side = Side(backend, "soft0", qp_access=qp_access)
            mr = side.mr(4096, mr_access)
            sink = side.mr(64, e.IBV_ACCESS_LOCAL_WRITE)
            for index in range(receives):
                post_recv(side, 100 + index, sink)
            conn.send((side.ctx.query_gid(1, 0).gid, side.qp.qp_num, mr.rkey, mr.buf))
        elif verb == "connect":
            assert side is not None
            _, gid, qpn = command
            side.qp.to_rts(rts_attr(backend, backend.GID(gid), qpn, max_dest_rd_atomic=rd_atomic))
            conn.send("ready")
        elif verb == "report":
            assert side is not None
            wcs = poll_until(side.rcq, command[1]) if command[1] else side.rcq.poll(1)[1]
            state = side.qp.query(e.IBV_QP_STATE)[0].qp_state
            digest = hashlib.sha256(mr.read(4096, 0)).hexdigest()
            conn.send((state, [(w.wr_id, w.status) for w in wcs], digest))
        elif verb == "close":
            assert side is not None
            side.close()
            side = None
            conn.send("closed")
    if side is not None:
        side.close()
