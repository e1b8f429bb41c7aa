"""The soft responder refuses as Linux rxe's does: two processes, the target in its own.

Each test breaks one QP of a target process (``verbs_rc.responder_main``) from this process and
checks the initiator's completion, then asks the target what its QP and receives saw: the
responder's checks run in rxe's order (opcode and QP access, then receive resources / RNR, then
rkey and range) and a responder error of that kind moves the *target's* QP to ERR (rxe's class C
errors), flushing its receives, with no target code running during the check.
"""

from __future__ import annotations

import errno
import hashlib
import multiprocessing
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tent_transport.devices.verbs import VerbsBackend, soft, soft_backend
from verbs_rc import (
    POLL_TIMEOUT_S,
    Side,
    poll_until,
    raised_errno,
    responder_main,
    rts_attr,
    write_wr,
)

e = soft.enums
ALL = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
UNTOUCHED = hashlib.sha256(bytes(4096)).hexdigest()


class Target:
    """The target process, one QP at a time."""

    def __init__(self, fabric: Path) -> None:
        spawn = multiprocessing.get_context("spawn")
        self.conn, child = spawn.Pipe()
        self.proc = spawn.Process(target=responder_main, args=(child, str(fabric)), daemon=True)
        self.proc.start()

    def call(self, *command: Any) -> Any:
        self.conn.send(command)
        assert self.conn.poll(POLL_TIMEOUT_S * 3), f"the target did not answer {command[0]}"
        return self.conn.recv()

    def stop(self) -> None:
        self.conn.send("exit")
        self.proc.join(POLL_TIMEOUT_S)
        if self.proc.is_alive():
            self.proc.kill()


@pytest.fixture(scope="module")
def module_fabric() -> Iterator[Path]:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    path = Path(tempfile.mkdtemp(prefix="tent-sv-resp-", dir=base))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def target(module_fabric: Path) -> Iterator[Target]:
    process = Target(module_fabric)
    try:
        yield process
    finally:
        process.stop()


class Link:
    """This process's QP connected to a fresh QP of the target process."""

    def __init__(
        self,
        backend: VerbsBackend,
        target: Target,
        *,
        qp_access: int = ALL,
        mr_access: int = ALL,
        rd_atomic: int = 1,
        receives: int = 0,
        rnr_retry: int = 7,
    ) -> None:
        self.backend = backend
        self.target = target
        gid, qpn, self.rkey, self.addr = target.call(
            "open", qp_access, mr_access, rd_atomic, receives
        )
        self.side = Side(backend, "soft0")
        self.side.qp.to_rts(rts_attr(backend, backend.GID(gid), qpn, rnr_retry=rnr_retry))
        assert target.call("connect", self.side.ctx.query_gid(1, 0).gid, self.side.qp.qp_num) == (
            "ready"
        )
        self.src = self.side.mr(4096, e.IBV_ACCESS_LOCAL_WRITE)
        self.src.write(b"\xab" * 4096, 4096)
        self.sink = self.side.mr(4096, e.IBV_ACCESS_LOCAL_WRITE)

    def one(self, wr: Any) -> int:
        self.side.qp.post_send(wr)
        wcs = poll_until(self.side.scq, 1)
        assert len(wcs) == 1, "no completion within the safety timeout"
        return int(wcs[0].status)

    def report(self, receives: int = 0) -> tuple[int, list[tuple[int, int]], str]:
        state, wcs, digest = self.target.call("report", receives)
        return int(state), [(int(w), int(s)) for w, s in wcs], str(digest)

    def close(self) -> None:
        self.side.close()
        self.target.call("close")


@pytest.fixture
def backend(module_fabric: Path) -> VerbsBackend:
    return soft_backend(module_fabric)


def test_a_zero_length_write_needs_no_rkey_and_touches_nothing(
    backend: VerbsBackend, target: Target
) -> None:
    """rxe check_rkey: a zero-byte op is not required to set an addr or rkey."""
    link = Link(backend, target)
    try:
        wr = write_wr(backend, 1, link.src, 0, link.rkey ^ 0x5A5A00, 0)
        assert link.one(wr) == e.IBV_WC_SUCCESS
        assert link.report() == (e.IBV_QPS_RTS, [], UNTOUCHED)
    finally:
        link.close()


@pytest.mark.parametrize(
    ("read", "qp_access"),
    [
        (False, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ),
        (True, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE),
    ],
    ids=["write-without-qp-remote-write", "read-without-qp-remote-read"],
)
def test_an_operation_the_target_qp_does_not_allow_is_an_invalid_request(
    backend: VerbsBackend, target: Target, read: bool, qp_access: int
) -> None:
    """rxe check_op_valid (before any rkey is looked at): REM_INV_REQ_ERR, target QP in ERR."""
    link = Link(backend, target, qp_access=qp_access, mr_access=ALL, receives=1)
    try:
        buf = link.sink if read else link.src
        assert link.one(write_wr(backend, 1, buf, 64, link.rkey, link.addr, read=read)) == (
            e.IBV_WC_REM_INV_REQ_ERR
        )
        assert link.report(1) == (e.IBV_QPS_ERR, [(100, e.IBV_WC_WR_FLUSH_ERR)], UNTOUCHED)
    finally:
        link.close()


def test_a_read_to_a_target_without_read_resources_is_an_invalid_request(
    backend: VerbsBackend, target: Target
) -> None:
    """rxe check_resource: max_dest_rd_atomic 0 leaves no responder resource for a READ."""
    link = Link(backend, target, rd_atomic=0)
    try:
        wr = write_wr(backend, 1, link.sink, 64, link.rkey, link.addr, read=True)
        assert link.one(wr) == e.IBV_WC_REM_INV_REQ_ERR
        assert link.report()[0] == e.IBV_QPS_ERR
        assert link.sink.read(64, 0) == bytes(64)
    finally:
        link.close()


@pytest.mark.parametrize("imm", [None, 7], ids=["write", "write-with-imm"])
def test_a_remote_access_violation_moves_the_responder_qp_to_err(
    backend: VerbsBackend, target: Target, imm: int | None
) -> None:
    """rxe's class C: the responder QP goes to ERR and flushes its receives; a WRITE_WITH_IMM
    had taken the first receive, which completes with the error itself."""
    link = Link(backend, target, receives=2)
    try:
        wr = write_wr(backend, 1, link.src, 64, link.rkey, link.addr + 4096 - 32, imm=imm)
        assert link.one(wr) == e.IBV_WC_REM_ACCESS_ERR
        first = e.IBV_WC_WR_FLUSH_ERR if imm is None else e.IBV_WC_REM_ACCESS_ERR
        assert link.report(2) == (
            e.IBV_QPS_ERR,
            [(100, first), (101, e.IBV_WC_WR_FLUSH_ERR)],
            UNTOUCHED,
        )
    finally:
        link.close()


def test_a_write_with_imm_checks_the_receive_before_the_rkey(
    backend: VerbsBackend, target: Target
) -> None:
    """rxe check_resource runs before check_rkey: no receive and a bad rkey is RNR (retry 0),
    and RNR is no responder error (the target QP stays RTS)."""
    link = Link(backend, target, rnr_retry=0)
    try:
        wr = write_wr(backend, 1, link.src, 64, link.rkey ^ 0x5A5A00, link.addr, imm=3)
        assert link.one(wr) == e.IBV_WC_RNR_RETRY_EXC_ERR
        assert link.report() == (e.IBV_QPS_RTS, [], UNTOUCHED)
    finally:
        link.close()


@pytest.mark.parametrize("state", ["INIT", "RTR"])
def test_posting_a_send_before_rts_is_refused_as_rxe_does(
    backend: VerbsBackend, target: Target, state: str
) -> None:
    """rxe_post_send: qp_state < RTS → EINVAL (mlx5 refuses too, with ENOMEM: docs/rdma.md)."""
    gid, qpn, rkey, addr = target.call("open", ALL, ALL, 1, 0)
    side = Side(backend, "soft0")
    try:
        if state == "RTR":
            side.qp.to_rtr(rts_attr(backend, backend.GID(gid), qpn))
        src = side.mr(64, e.IBV_ACCESS_LOCAL_WRITE)
        wr = write_wr(backend, 1, src, 8, rkey, addr)
        assert raised_errno(backend, lambda: side.qp.post_send(wr)) == errno.EINVAL
        assert side.qp.query(e.IBV_QP_STATE)[0].qp_state == getattr(e, f"IBV_QPS_{state}")
    finally:
        side.close()
        target.call("close")
