"""The soft RC queue pair: its state machine (one table), posting, and one-sided execution.

The soft device follows **Linux rxe** (``drivers/infiniband/sw/rxe``), the one RC provider whose
every rule is readable source; docs/rdma.md ("Which provider each status follows") lists where
others differ. A send WR is executed in rxe's order, and the first check that fails decides the
initiator's completion (nothing is written):

1. the seeded fault draw (``SoftConfig.fault_rate``) → ``fault_status`` (the soft device's own);
2. requester: every local SGE of a WRITE lies in a valid local MR of this QP's PD → else
   ``IBV_WC_LOC_PROT_ERR`` before anything is sent (rxe_req.c: ``finish_packet`` → -EFAULT);
3. the target node and QP exist, are RTR/RTS and connected to this QP → else
   ``IBV_WC_RETRY_EXC_ERR`` (rxe_recv.c ``check_type_state`` drops the packet; the requester
   exhausts its retries);
4. responder ``check_op_valid``: the target QP's ``qp_access_flags`` grant REMOTE_WRITE (a WRITE)
   or REMOTE_READ (a READ) → else ``IBV_WC_REM_INV_REQ_ERR`` (NAK invalid request);
5. responder ``check_resource``: a READ needs ``max_dest_rd_atomic`` > 0 → else
   ``IBV_WC_REM_INV_REQ_ERR``; a WRITE_WITH_IMM needs a posted receive, retried every
   ``rnr_timer_ns``, ``rnr_retry`` times (7 = forever, as in IB), then
   ``IBV_WC_RNR_RETRY_EXC_ERR``;
6. responder ``check_rkey``: a zero-length WRITE or READ needs no rkey and succeeds; else the rkey
   is valid, of the target QP's PD, its MR grants REMOTE_WRITE / REMOTE_READ and the range lies
   inside it → else ``IBV_WC_REM_ACCESS_ERR``;
7. a READ's local SGEs are checked when its data returns (rxe_comp.c ``do_read``) →
   ``IBV_WC_LOC_PROT_ERR``.

A failed WR moves the initiator's QP to ERR; ERR flushes every outstanding WR with
``IBV_WC_WR_FLUSH_ERR``. A responder error of steps 4-6 (rxe's class C) moves the *target* QP to
ERR too: an initiator marks it in the target's shared state, and the owner takes that over at its
next verbs call, flushing its posted receives (a WRITE_WITH_IMM that had taken a receive completes
that receive with ``IBV_WC_REM_ACCESS_ERR``, as rxe's ``do_complete`` does).
"""

from __future__ import annotations

import ctypes
import errno
import random
import time
from collections import deque
from typing import TYPE_CHECKING

from . import enums as e
from ._attrs import WC, QPAttr, QPInitAttr, RecvWR, SendWR
from ._hca import CQ, PD, node_of
from ._shm import QPFile
from .pyverbs_error import PyverbsRDMAError

if TYPE_CHECKING:
    from ._hca import Context, RemoteNode

__all__ = ["QP", "PendingWR"]

_INIT_MASK = e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS
_RTR_MASK = (
    e.IBV_QP_STATE
    | e.IBV_QP_AV
    | e.IBV_QP_PATH_MTU
    | e.IBV_QP_DEST_QPN
    | e.IBV_QP_RQ_PSN
    | e.IBV_QP_MAX_DEST_RD_ATOMIC
    | e.IBV_QP_MIN_RNR_TIMER
)
_RTS_MASK = (
    e.IBV_QP_STATE
    | e.IBV_QP_TIMEOUT
    | e.IBV_QP_RETRY_CNT
    | e.IBV_QP_RNR_RETRY
    | e.IBV_QP_SQ_PSN
    | e.IBV_QP_MAX_QP_RD_ATOMIC
)

# Rule 1 (ibv_modify_qp(3), RC): the legal transitions and the attribute mask each requires.
# A (current, next) pair missing here is refused with EINVAL; RESET and ERR are reachable from
# every state and need only IBV_QP_STATE.
TRANSITIONS: dict[tuple[int, int], int] = {
    (e.IBV_QPS_RESET, e.IBV_QPS_INIT): _INIT_MASK,
    (e.IBV_QPS_INIT, e.IBV_QPS_INIT): e.IBV_QP_STATE,
    (e.IBV_QPS_INIT, e.IBV_QPS_RTR): _RTR_MASK,
    (e.IBV_QPS_RTR, e.IBV_QPS_RTS): _RTS_MASK,
    (e.IBV_QPS_RTS, e.IBV_QPS_RTS): e.IBV_QP_STATE,
}
for _state in (e.IBV_QPS_RESET, e.IBV_QPS_INIT, e.IBV_QPS_RTR, e.IBV_QPS_RTS, e.IBV_QPS_ERR):
    TRANSITIONS[(_state, e.IBV_QPS_RESET)] = e.IBV_QP_STATE
    TRANSITIONS[(_state, e.IBV_QPS_ERR)] = e.IBV_QP_STATE

_SUPPORTED_OPS = (e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_WRITE_WITH_IMM, e.IBV_WR_RDMA_READ)
_READY = (e.IBV_QPS_RTR, e.IBV_QPS_RTS)  # a responder answers requests in these
_LIVE = (e.IBV_QPS_INIT, e.IBV_QPS_RTR, e.IBV_QPS_RTS)  # states a responder error can end
_INFINITE_RNR = 7
_RNR_WAIT = -1  # _perform's "no receive posted yet"


class PendingWR:
    """A posted send WR, snapshotted at post time (pyverbs copies the WR into the SQ too)."""

    __slots__ = (
        "attempts",
        "done",
        "due_ns",
        "fault",
        "imm",
        "opcode",
        "qp",
        "raddr",
        "rkey",
        "sges",
        "signaled",
        "wr_id",
    )

    def __init__(self, qp: QP, wr: SendWR, signaled: bool, fault: bool) -> None:
        self.qp = qp
        self.wr_id = wr.wr_id
        self.opcode = wr.opcode
        self.sges = [(s.addr, s.length, s.lkey) for s in wr.sg_list]
        self.imm = wr.imm_data
        self.rkey = wr.remote_rkey
        self.raddr = wr.remote_addr
        self.signaled = signaled
        self.fault = fault
        self.attempts = 0
        self.done = False
        self.due_ns = 0

    def live(self) -> bool:
        return not self.done


class QP:
    """A soft RC QP. ``QP(pd, init_attr, qp_attr)`` moves it to INIT when ``qp_attr`` is given
    (pyverbs does the same for RC: the remote QPN is needed before RTR).

    Raises ``PyverbsRDMAError`` with EOPNOTSUPP for a QP type other than RC, EINVAL for queue
    sizes above the device's limits or CQs of another context.
    """

    def __init__(self, creator: PD, init_attr: QPInitAttr, qp_attr: QPAttr | None = None) -> None:
        ctx = creator.context
        cap = init_attr.cap
        if init_attr.qp_type != e.IBV_QPT_RC:
            raise PyverbsRDMAError("Failed to create QP (soft verbs: RC only)", errno.EOPNOTSUPP)
        limits = ctx.config
        if (
            not 1 <= cap.max_send_wr <= limits.max_qp_wr
            or not 0 <= cap.max_recv_wr <= limits.max_qp_wr
            or not 1 <= cap.max_send_sge <= limits.max_sge
            or not 0 <= cap.max_recv_sge <= limits.max_sge
        ):
            raise PyverbsRDMAError("Failed to create QP", errno.EINVAL)
        scq, rcq = init_attr.send_cq, init_attr.recv_cq
        for cq in (scq, rcq):
            if not isinstance(cq, CQ) or cq.context is not ctx:
                raise PyverbsRDMAError("Failed to create QP", errno.EINVAL)
        assert isinstance(scq, CQ) and isinstance(rcq, CQ)
        self.context: Context = ctx
        self.pd = creator
        self.scq = scq
        self.rcq = rcq
        self.qp_type = e.IBV_QPT_RC
        self.sq_sig_all = init_attr.sq_sig_all
        self.cap = cap
        with ctx._lock:
            self.qp_num = next(ctx._qpn) & 0xFFFFFF
            self._shared = QPFile(
                ctx.node.path / f"qp-{self.qp_num}", max(cap.max_recv_wr, 1), create=True
            )
            ctx._qps[self.qp_num] = self
            rcq._recv_qps.append(self)
        self.qp_state = e.IBV_QPS_RESET
        self._access = 0
        self._remote_node = 0
        self._remote_qpn = 0
        self._rnr_retry = 0
        self._max_dest_rd_atomic = 0
        self._rnr_timer_ns = ctx.config.rnr_timer_ns
        self._sq: deque[PendingWR] = deque()
        self._inflight: PendingWR | None = None
        self._sq_outstanding = 0
        self._rq_outstanding = 0
        self._last_due_ns = 0
        self._rng = random.Random(ctx.config.seed * 1_000_003 + len(ctx._qps))
        self._publish()
        if qp_attr is not None:
            self.to_init(qp_attr)

    # state machine -----------------------------------------------------------------------------
    def _publish(self) -> None:
        """Write the responder state (caller holds the context lock, not the file's lock)."""
        with self._shared.locked():  # never over an initiator's ERR (a responder error)
            if self._shared.state() == e.IBV_QPS_ERR and self.qp_state in _LIVE:
                self.qp_state = e.IBV_QPS_ERR
            self._shared.set_header(
                self.qp_state,
                self.pd.handle,
                self._access,
                self._remote_node,
                self._remote_qpn,
                self._max_dest_rd_atomic,
            )

    def _sync_locked(self) -> None:
        """Take over an ERR a remote initiator set (a responder error, module docstring): the
        QP flushes as if it had failed itself. Caller holds the context lock."""
        if self.qp_state in _LIVE and self._shared.state() == e.IBV_QPS_ERR:
            self._enter_error_locked()

    def modify(self, qp_attr: QPAttr, comp_mask: int) -> None:
        """``ibv_modify_qp``: apply the attributes ``comp_mask`` names, then change state.

        Raises ``PyverbsRDMAError(EINVAL)`` (nothing changed) for a transition missing from
        :data:`TRANSITIONS`, a mask lacking a required attribute, or an unusable address.
        """
        ctx = self.context
        target = qp_attr.qp_state if comp_mask & e.IBV_QP_STATE else self.qp_state
        required = TRANSITIONS.get((self.qp_state, target))
        if required is None or comp_mask & required != required:
            raise PyverbsRDMAError("Failed to modify QP", errno.EINVAL)
        if comp_mask & e.IBV_QP_PORT and qp_attr.port_num != 1:
            raise PyverbsRDMAError("Failed to modify QP", errno.EINVAL)
        remote_node = self._remote_node
        if comp_mask & e.IBV_QP_AV:
            ah = qp_attr.ah_attr
            node = node_of(ah.dgid) if ah is not None and ah.is_global else None
            if node is None:
                raise PyverbsRDMAError("Failed to modify QP (no soft GID)", errno.EINVAL)
            remote_node = node
        with ctx._lock:
            self._sync_locked()
            if self.qp_state == e.IBV_QPS_ERR and target in _LIVE:
                raise PyverbsRDMAError("Failed to modify QP", errno.EINVAL)  # it failed meanwhile
            if comp_mask & e.IBV_QP_ACCESS_FLAGS:
                self._access = qp_attr.qp_access_flags
            if comp_mask & e.IBV_QP_DEST_QPN:
                self._remote_qpn = qp_attr.dest_qp_num
            if comp_mask & e.IBV_QP_RNR_RETRY:
                self._rnr_retry = qp_attr.rnr_retry
            if comp_mask & e.IBV_QP_MAX_DEST_RD_ATOMIC:
                self._max_dest_rd_atomic = qp_attr.max_dest_rd_atomic
            self._remote_node = remote_node
            self.qp_state = target
            self._publish()
            if target == e.IBV_QPS_ERR:
                self._flush_locked()
            elif target == e.IBV_QPS_RESET:
                for pending in self._sq:
                    pending.done = True
                self._sq.clear()
                self._sq_outstanding = self._rq_outstanding = 0
                with self._shared.locked():
                    self._shared.reset_rings()
        ctx._fire()

    def to_init(self, qp_attr: QPAttr) -> None:
        qp_attr.qp_state = e.IBV_QPS_INIT
        self.modify(qp_attr, _INIT_MASK)

    def to_rtr(self, qp_attr: QPAttr) -> None:
        if self.qp_state != e.IBV_QPS_INIT:
            self.to_init(qp_attr)
        qp_attr.qp_state = e.IBV_QPS_RTR
        self.modify(qp_attr, _RTR_MASK)

    def to_rts(self, qp_attr: QPAttr) -> None:
        if self.qp_state != e.IBV_QPS_RTR:
            self.to_rtr(qp_attr)
        qp_attr.qp_state = e.IBV_QPS_RTS
        self.modify(qp_attr, _RTS_MASK)

    def query(self, attr_mask: int) -> tuple[QPAttr, QPInitAttr]:
        """The current state and capabilities (whatever ``attr_mask`` asks for)."""
        with self.context._lock:
            self._sync_locked()
        attr = QPAttr(qp_state=self.qp_state, cur_qp_state=self.qp_state)
        attr.cap = self.cap
        attr.qp_access_flags = self._access
        attr.dest_qp_num = self._remote_qpn
        attr.rnr_retry = self._rnr_retry
        attr.max_dest_rd_atomic = self._max_dest_rd_atomic
        init = QPInitAttr(qp_type=self.qp_type, scq=self.scq, rcq=self.rcq, cap=self.cap)
        return attr, init

    # posting -----------------------------------------------------------------------------------
    def post_send(self, wr: SendWR, bad_wr: SendWR | None = None) -> None:
        """Post a chain of send WRs. As a real provider, the WRs before a refused one stay posted;
        the refused one is copied into ``bad_wr`` and ``PyverbsRDMAError`` is raised with EINVAL
        (QP not RTS/ERR, too many SGEs), ENOMEM (the send queue is full) or EOPNOTSUPP (an opcode
        the soft device lacks: SEND and atomics)."""
        ctx = self.context
        current: SendWR | None = wr
        with ctx._lock:
            self._sync_locked()
            now = time.monotonic_ns()
            while current is not None:
                code = 0
                if self.qp_state not in (e.IBV_QPS_RTS, e.IBV_QPS_ERR):
                    code = errno.EINVAL
                elif current.opcode not in _SUPPORTED_OPS:
                    code = errno.EOPNOTSUPP
                elif current.num_sge > self.cap.max_send_sge:
                    code = errno.EINVAL
                elif self._sq_outstanding >= self.cap.max_send_wr:
                    code = errno.ENOMEM
                if code:
                    if bad_wr is not None:
                        bad_wr.wr_id = current.wr_id
                    raise PyverbsRDMAError("Failed to post send", code)
                signaled = bool(self.sq_sig_all or current.send_flags & e.IBV_SEND_SIGNALED)
                low, high = ctx.config.delay_ns
                delay = self._rng.randint(low, high) if high > 0 else 0
                fault = ctx.config.fault_rate > 0 and self._rng.random() < ctx.config.fault_rate
                pending = PendingWR(self, current, signaled, fault)
                self._sq.append(pending)
                self._sq_outstanding += 1
                if self.qp_state == e.IBV_QPS_ERR:
                    self._flush_locked()
                else:
                    # in order per send queue: never due before the WR ahead of it
                    pending.due_ns = max(now + delay, self._last_due_ns)
                    self._last_due_ns = pending.due_ns
                    ctx._schedule(pending, pending.due_ns)
                current = current.next_wr
        ctx._fire()

    def post_recv(self, wr: RecvWR, bad_wr: RecvWR | None = None) -> None:
        """Post a chain of receive WRs; EINVAL in RESET or with too many SGEs, ENOMEM when the
        receive queue is full (rdma-core ``tests/utils.py`` rq bad flows). In ERR they flush."""
        ctx = self.context
        current: RecvWR | None = wr
        with ctx._lock:
            self._sync_locked()
            while current is not None:
                code = 0
                if self.qp_state == e.IBV_QPS_RESET or current.num_sge > self.cap.max_recv_sge:
                    code = errno.EINVAL
                elif self._rq_outstanding >= self.cap.max_recv_wr:
                    code = errno.ENOMEM
                if code:
                    if bad_wr is not None:
                        bad_wr.wr_id = current.wr_id
                    raise PyverbsRDMAError("Failed to post recv", code)
                self._rq_outstanding += 1
                if self.qp_state == e.IBV_QPS_ERR:
                    wc = WC(wr_id=current.wr_id, status=e.IBV_WC_WR_FLUSH_ERR, qp_num=self.qp_num)
                    wc.opcode = e.IBV_WC_RECV
                    self.rcq._push(wc, self, True)
                else:
                    with self._shared.locked():
                        self._shared.push_recv(current.wr_id)
                current = current.next_wr
        ctx._fire()

    # completions -------------------------------------------------------------------------------
    def _completion_polled(self, recv: bool) -> None:
        if recv:
            self._rq_outstanding -= 1
        else:
            self._sq_outstanding -= 1

    def _drain_inbound(self, cq: CQ) -> None:
        """Move inbound receive completions into ``cq`` (caller holds the context lock)."""
        self._sync_locked()
        while self._shared.inbound_pending():
            entry = self._shared.pop_inbound()
            if entry is None:
                return
            wr_id, byte_len, imm, status, opcode = entry
            wc = WC(
                wr_id=wr_id,
                status=status,
                opcode=opcode,
                byte_len=byte_len,
                qp_num=self.qp_num,
                src_qp=self._remote_qpn,
                imm_data=imm,
                wc_flags=e.IBV_WC_WITH_IMM,
            )
            if not cq._push(wc, self, True):
                self._enter_error_locked()
                return

    def _enter_error_locked(self) -> None:
        self.qp_state = e.IBV_QPS_ERR
        self._publish()
        self._flush_locked()

    def _flush_locked(self) -> None:
        """ERR: every queued send WR and every posted receive completes with WR_FLUSH_ERR."""
        if self._inflight is None:
            while self._sq:
                pending = self._sq.popleft()
                pending.done = True
                wc = WC(
                    wr_id=pending.wr_id,
                    status=e.IBV_WC_WR_FLUSH_ERR,
                    opcode=_wc_opcode(pending.opcode),
                    qp_num=self.qp_num,
                )
                self.scq._push(wc, self, False)
        self._drain_inbound(self.rcq)
        with self._shared.locked():
            while (wr_id := self._shared.take_recv()) is not None:
                wc = WC(wr_id=wr_id, status=e.IBV_WC_WR_FLUSH_ERR, qp_num=self.qp_num)
                wc.opcode = e.IBV_WC_RECV
                self.rcq._push(wc, self, True)

    # execution (the engine's side) -------------------------------------------------------------
    def _execute(self, pending: PendingWR, *, step: bool) -> int | None:
        """Run the WR at the head of the send queue; returns when to retry it (RNR) or None."""
        ctx = self.context
        with ctx._lock:
            if pending.done or not self._sq or self._sq[0] is not pending:
                return None
            self._sync_locked()
            if self.qp_state != e.IBV_QPS_RTS:
                return None
            self._inflight = pending
        status, nbytes = self._perform(pending)
        if status == _RNR_WAIT:
            pending.attempts += 1
            if self._rnr_retry == _INFINITE_RNR or pending.attempts <= self._rnr_retry:
                with ctx._lock:
                    self._inflight = None
                    if self.qp_state == e.IBV_QPS_ERR:
                        self._flush_locked()
                        return None
                return -1 if step else time.monotonic_ns() + self._rnr_timer_ns
            status = e.IBV_WC_RNR_RETRY_EXC_ERR
        if status == e.IBV_WC_SUCCESS:
            ctx._pace(nbytes)
        with ctx._lock:
            self._inflight = None
            if self._sq and self._sq[0] is pending:
                self._sq.popleft()
            pending.done = True
            if self.qp_state == e.IBV_QPS_ERR and status == e.IBV_WC_SUCCESS:
                status = e.IBV_WC_WR_FLUSH_ERR  # moved to ERR meanwhile: not verifiably done
            if status != e.IBV_WC_SUCCESS or pending.signaled:
                wc = WC(
                    wr_id=pending.wr_id,
                    status=status,
                    opcode=_wc_opcode(pending.opcode),
                    byte_len=nbytes,
                    qp_num=self.qp_num,
                )
                if not self.scq._push(wc, self, False):
                    status = e.IBV_WC_GENERAL_ERR
            else:
                self._sq_outstanding -= 1
            if status != e.IBV_WC_SUCCESS:
                self._enter_error_locked()
        if step:
            ctx._fire()  # the worker coalesces its own (Context._run)
        return None

    def _perform(self, pending: PendingWR) -> tuple[int, int]:
        """The requester and responder checks in rxe's order and the copy (module docstring);
        returns (status, bytes)."""
        ctx = self.context
        if pending.fault:
            return ctx.config.fault_status, 0
        is_read = pending.opcode == e.IBV_WR_RDMA_READ
        total = sum(length for _, length, _ in pending.sges)
        if not is_read and not self._local_ok(pending, need_write=False):
            return e.IBV_WC_LOC_PROT_ERR, 0  # rxe_req.c: the packet is never sent
        remote = ctx.remote(self._remote_node)
        rqp = remote.qp(self._remote_qpn) if remote is not None else None
        if remote is None or rqp is None:
            return e.IBV_WC_RETRY_EXC_ERR, 0
        state, pd, access, rnode, rqpn, rd_atomic = rqp.header()
        if state not in _READY or rnode != ctx.node.node_id or rqpn != self.qp_num:
            return e.IBV_WC_RETRY_EXC_ERR, 0
        need = e.IBV_ACCESS_REMOTE_READ if is_read else e.IBV_ACCESS_REMOTE_WRITE
        if not access & need or (is_read and rd_atomic == 0):
            # check_op_valid / check_resource: class C, NAK "invalid request"
            _responder_error(rqp)
            return e.IBV_WC_REM_INV_REQ_ERR, 0
        if pending.opcode == e.IBV_WR_RDMA_WRITE_WITH_IMM:
            return self._write_with_imm(pending, remote, rqp, pd, total)
        where = _target(remote, pending, pd, need, total)
        if where is None:
            _responder_error(rqp)  # check_rkey: class C, NAK "remote access error"
            return e.IBV_WC_REM_ACCESS_ERR, 0
        if is_read:
            if not self._local_ok(pending, need_write=True):
                return e.IBV_WC_LOC_PROT_ERR, 0  # rxe_comp.c do_read: the data has nowhere to go
            for addr, length, _ in pending.sges:
                if length:
                    ctypes.memmove(addr, where, length)
                    where += length
            return e.IBV_WC_SUCCESS, total
        _gather(pending.sges, where)
        return e.IBV_WC_SUCCESS, total

    def _write_with_imm(
        self, pending: PendingWR, remote: RemoteNode, rqp: QPFile, pd: int, total: int
    ) -> tuple[int, int]:
        """check_resource (a posted receive, else RNR) before check_rkey, under the target QP's
        lock: the receive taken is the one completed, with the data or with the error."""
        with rqp.locked():
            if rqp.header()[0] not in _READY:
                return e.IBV_WC_RETRY_EXC_ERR, 0
            if rqp.recv_outstanding() == 0:
                return _RNR_WAIT, 0
            where = _target(remote, pending, pd, e.IBV_ACCESS_REMOTE_WRITE, total)
            wr_id = rqp.take_recv()
            assert wr_id is not None  # we hold the lock and saw one
            if where is None:
                rqp.push_inbound(wr_id, 0, 0, e.IBV_WC_REM_ACCESS_ERR, e.IBV_WC_RECV)
                rqp.set_state(e.IBV_QPS_ERR)
                return e.IBV_WC_REM_ACCESS_ERR, 0
            _gather(pending.sges, where)
            rqp.push_inbound(
                wr_id, total, pending.imm, e.IBV_WC_SUCCESS, e.IBV_WC_RECV_RDMA_WITH_IMM
            )
        return e.IBV_WC_SUCCESS, total

    def _local_ok(self, pending: PendingWR, *, need_write: bool) -> bool:
        """Every non-empty local SGE lies in a valid MR of this QP's PD (LOCAL_WRITE for a
        READ's destination); rxe's ``copy_data`` skips zero-length SGEs."""
        for addr, length, lkey in pending.sges:
            if length == 0:
                continue
            mr = self.context._mrs.get(lkey)
            if (
                mr is None
                or mr.pd is not self.pd
                or addr < mr.buf
                or addr + length > mr.buf + mr.length
                or (need_write and not mr.access & e.IBV_ACCESS_LOCAL_WRITE)
            ):
                return False
        return True

    def close(self) -> None:
        """Destroy: ERR (flushing what is outstanding), then unreachable to every initiator."""
        ctx = self.context
        with ctx._lock:
            if self.qp_num not in ctx._qps:
                return
            if self.qp_state != e.IBV_QPS_ERR:
                self.qp_state = e.IBV_QPS_ERR
                self._publish()
                self._flush_locked()
            del ctx._qps[self.qp_num]
            self._shared.set_header(e.IBV_QPS_ERR, 0, 0, 0, 0, 0)
            (ctx.node.path / f"qp-{self.qp_num}").unlink(missing_ok=True)
        ctx._fire()


def _target(remote: RemoteNode, pending: PendingWR, pd: int, need: int, total: int) -> int | None:
    """rxe ``check_rkey``: where in this process the remote range is mapped, or None for an
    rkey violation (unknown or invalidated rkey, another PD, an MR without ``need``, a range
    outside it). A zero-length operation needs no rkey: it touches nothing (any address)."""
    if total == 0:
        return 0
    entry = remote.keys.lookup(pending.rkey)
    if (
        entry is None
        or entry.buf == 0
        or entry.pd != pd
        or not entry.access & need
        or pending.raddr < entry.base_addr
        or pending.raddr + total > entry.base_addr + entry.length
    ):
        return None
    buf = remote.buffer(entry.buf)
    if buf is None:
        return None
    return buf.address + entry.file_offset + (pending.raddr - entry.base_addr)


def _responder_error(rqp: QPFile) -> None:
    """A class C responder error: the target QP goes to ERR (rxe ``do_class_ac_error``, then
    ``rxe_qp_error``); its owner flushes it at its next verbs call."""
    with rqp.locked():
        if rqp.header()[0] in _READY:
            rqp.set_state(e.IBV_QPS_ERR)


def _gather(sges: list[tuple[int, int, int]], where: int) -> None:
    for addr, length, _ in sges:
        if length:
            ctypes.memmove(where, addr, length)
            where += length


def _wc_opcode(wr_opcode: int) -> int:
    return e.IBV_WC_RDMA_READ if wr_opcode == e.IBV_WR_RDMA_READ else e.IBV_WC_RDMA_WRITE
