"""The verbs Device: one rail (one HCA port) over the pyverbs API, real or soft, same code.

Sender side (the Device protocol): per peer one RC QP on this rail. A poll round posts up to
``min(free CQ slots, max_send_wr − outstanding on the QP, pending)`` slices in one chained
``post_send`` in the order given (docs/transport_design.md#transport-rule-7); WRITEs go as RDMA
WRITE_WITH_IMM carrying the write id (network byte order), READs as RDMA READ. Completions come back
in order per QP.

Receiver side (:class:`~tent_transport.devices.verbs._protection.Exposures`): per (peer, session)
MRs
over the regions exposed to it, whose rkeys travel in :class:`VerbsRegion` messages and are
deregistered at fencing, so a fenced session's write fails with a remote access error.
"""

from __future__ import annotations

import itertools
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ...errors import InvalidArgument, InvalidEntry, PostRefused, TooManyRequests
from .._base import U64_MAX, Opcode, SliceCompletion, SliceRequest, SliceStatus
from ._backend import VerbsBackend
from ._exchange import VerbsEndpoint, VerbsRegion
from ._protection import Exposures, WriteArrival, buffer_address

__all__ = ["MAX_REGIONS_PER_PEER", "VerbsDevice", "VerbsDeviceConfig"]

MAX_REGIONS_PER_PEER = 4096
_RECV_SINK_BYTES = 64  # the dummy SGE a receive needs before rdma-core 57
_CLOSE_DRAIN_S = 2.0  # bounded wait for a real HCA's flush completions at close


@attrs.frozen(kw_only=True)
class VerbsDeviceConfig:
    """Queue sizes and RC timers of one rail (the reference's ``transports/rdma`` defaults)."""

    device_name: str
    port_num: int = 1
    gid_index: int = 0
    cq_depth: int = 4096
    max_send_wr: int = 256
    max_recv_wr: int = 256
    rnr_retry: int = 7  # IB "retry forever": the receiver keeps receives posted
    retry_cnt: int = 7
    timeout: int = 14
    min_rnr_timer: int = 12
    max_rd_atomic: int = 16
    link_speed_gbps: float = 0.0


@attrs.define
class _Peer:
    pd: Any  # this peer's own protection domain: its QP, its exposures, our MRs it uses
    sink: Any  # the receives' dummy SGE memory
    qp: Any
    psn: int
    connected: bool = False
    errored: bool = False
    retired: bool = False
    outstanding: int = 0
    regions: dict[int, list[VerbsRegion]] = attrs.field(factory=dict)
    local: list[tuple[int, int, Any]] = attrs.field(factory=list)  # register_local in this PD
    # completions of WRs the provider refused mid-chain: reported after the posted prefix's
    deferred: list[SliceCompletion] = attrs.field(factory=list)


@attrs.define
class _Posted:
    request: SliceRequest
    peer: int
    mr: Any  # the per-slice MR, or None when the memory was registered with register_local
    keep: Any  # a bounce copy of a read-only source, kept alive until completion


class VerbsDevice:
    """One rail over ``backend`` (``load_pyverbs()`` or ``soft_backend(...)``).

    Raises the backend's ``PyverbsRDMAError`` if the device cannot be opened, and
    :class:`InvalidArgument` for queue sizes above the device's limits (nothing stays open).
    """

    def __init__(self, backend: VerbsBackend, config: VerbsDeviceConfig, *, name: str) -> None:
        self._b = backend
        self._e = backend.enums
        self.config = config
        self._name = name
        self._ctx = backend.open_context(config.device_name)
        try:
            limits = self._ctx.query_device()
            if config.max_send_wr > limits.max_qp_wr or config.max_recv_wr > limits.max_qp_wr:
                raise InvalidArgument(f"max_send_wr/max_recv_wr above max_qp_wr {limits.max_qp_wr}")
            if config.cq_depth > limits.max_cqe:
                raise InvalidArgument(f"cq_depth above max_cqe {limits.max_cqe}")
            self._port = self._ctx.query_port(config.port_num)
            self._gid = self._ctx.query_gid(config.port_num, config.gid_index)
            self._scq = backend.CQ(self._ctx, config.cq_depth, None, None, 0)
            self._rcq = backend.CQ(self._ctx, config.cq_depth, None, None, 0)
        except BaseException:
            self._ctx.close()
            raise
        self._peers: dict[int, _Peer] = {}
        self._by_qpn: dict[int, int] = {}
        self._posted: dict[int, _Posted] = {}
        self._local: list[memoryview] = []  # register_local's buffers (an MR per peer PD)
        self._synthetic: list[SliceCompletion] = []
        self._recv_wr_ids = 0
        self.exposures = Exposures(backend, self._pd_of)
        # where post_send reports the first refused WR of a chain (reused, never posted)
        self._bad_wr = backend.SendWR(wr_id=0, num_sge=1, sg=[backend.SGE(0, 1, 0)])
        self._closed = False
        self._wakeup = False

    # -- Device protocol ---------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def link_speed_gbps(self) -> float:
        return self.config.link_speed_gbps

    @property
    def context(self) -> Any:
        """The verbs context (queries; the soft device's ``release`` in step mode)."""
        return self._ctx

    def post_budget(self, peer: int) -> int:
        state = self._peers.get(peer)
        if state is None or not state.connected or state.errored or state.retired:
            return 0
        free_cq = self.config.cq_depth - len(self._posted)
        return max(0, min(free_cq, self.config.max_send_wr - state.outstanding))

    def post(self, slices: Sequence[SliceRequest], now_ns: int) -> None:
        """One chained ``post_send`` of ``slices`` (one peer), all or nothing.

        Raises :class:`PostRefused` with ``ready=False`` (nothing posted) when the peer's QP is
        not connected or has failed, and with ``ready=True`` for a malformed post: an empty
        batch, several peers, more than :meth:`post_budget`, a ``wr_id`` already outstanding, or
        a remote segment range no region of that peer starts in. If the provider still refuses
        mid-chain, the WRs before the refused one stay posted and the rest complete as
        ``TRANSPORT_ERROR`` at the next :meth:`poll`. A local buffer that cannot be registered
        (not C-contiguous, or refused by the HCA) is a malformed post too.
        """
        if not slices:
            raise PostRefused("empty post", ready=True)
        peer = slices[0].peer
        if any(s.peer != peer for s in slices):
            raise PostRefused("a chained post goes to one peer", ready=True)
        state = self._peers.get(peer)
        if state is None or not state.connected or state.errored or state.retired:
            raise PostRefused(f"peer {peer}'s QP is not ready on {self._name}")
        if len(slices) > self.post_budget(peer):
            raise PostRefused(f"{len(slices)} slices exceed the budget", ready=True)
        ids = [s.wr_id for s in slices]
        if len(set(ids)) != len(ids) or any(i in self._posted for i in ids):
            raise PostRefused("wr_id already outstanding", ready=True)
        routes = [self._route(state, s) for s in slices]
        posted: list[_Posted] = []
        try:
            wrs = [
                self._work_request(state, s, route, posted)
                for s, route in zip(slices, routes, strict=True)
            ]
        except (self._b.rdma_error, InvalidArgument) as exc:
            for entry in posted:
                if entry.mr is not None:
                    entry.mr.close()
            raise PostRefused(f"registering local memory failed: {exc}", ready=True) from exc
        for first, second in itertools.pairwise(wrs):
            first.next_wr = second
        for entry in posted:
            self._posted[entry.request.wr_id] = entry
        state.outstanding += len(posted)
        bad = self._bad_wr
        unset = next(v for v in range(U64_MAX, U64_MAX - len(ids) - 1, -1) if v not in ids)
        bad.wr_id = unset
        try:
            state.qp.post_send(wrs[0], bad)
        except self._b.rdma_error as exc:
            refused_from = ids.index(bad.wr_id) if bad.wr_id in ids else 0
            for entry in posted[refused_from:]:
                self._finish(entry)
                state.deferred.append(
                    SliceCompletion(
                        wr_id=entry.request.wr_id,
                        status=SliceStatus.TRANSPORT_ERROR,
                        length=entry.request.length,
                        detail=f"post_send refused: {exc}",
                    )
                )
            state.errored = True
            self._release_deferred(state)

    def poll(self, max_entries: int, now_ns: int) -> list[SliceCompletion]:
        """Up to ``max_entries`` send completions, in posting order per peer; never blocks.

        A failed completion marks its peer's QP failed (RC moved it to ERR: every later WR of
        that QP is flushed), so :meth:`post_budget` reads 0 until :meth:`retire` and reconnect.
        """
        if max_entries < 1:
            raise InvalidArgument("max_entries must be >= 1")
        out = self._synthetic[:max_entries]
        del self._synthetic[: len(out)]
        if self._closed or len(out) >= max_entries:
            return out
        if self._wakeup:
            self._b.arm_cq_notify(self._scq)  # armed before polling: nothing slips between
        _, wcs = self._scq.poll(max_entries - len(out))
        for wc in wcs:
            entry = self._posted.get(wc.wr_id)
            if entry is None:
                continue  # not ours (cannot happen: every signaled WR is a posted slice)
            self._finish(entry)
            status, detail = self._status(wc.status)
            state = self._peers.get(entry.peer)
            if status is not SliceStatus.SUCCESS and state is not None:
                state.errored = True
            out.append(
                SliceCompletion(
                    wr_id=entry.request.wr_id,
                    status=status,
                    length=entry.request.length,
                    detail=detail,
                )
            )
            if state is not None and state.deferred:
                self._release_deferred(state)
        room = max_entries - len(out)
        if room > 0 and self._synthetic:
            out.extend(self._synthetic[:room])
            del self._synthetic[:room]
        return out

    def next_completion_ns(self) -> int | None:
        return None

    def set_wakeup(self, callback: Callable[[], None] | None) -> None:
        """Install the completion callback; on pyverbs (no CQ event fd before rdma-core 57) the
        engine's progress fallback timer polls instead."""
        self._wakeup = self._b.set_cq_notify(self._scq, callback) and callback is not None
        self._b.set_cq_notify(self._rcq, callback)

    def close(self) -> None:
        """Move every QP to ERR, collect the flushes (later :meth:`poll` calls return them as
        ``FLUSHED``), deregister everything and close the context. Idempotent."""
        if self._closed:
            return
        for peer in list(self._peers):
            self.retire(peer)
        deadline = time.monotonic() + _CLOSE_DRAIN_S
        while self._posted and time.monotonic() < deadline:
            self._synthetic.extend(self.poll(len(self._posted), 0))
            if self._posted:
                time.sleep(0.001)
        for entry in list(self._posted.values()):
            self._finish(entry)
            self._synthetic.append(
                SliceCompletion(
                    wr_id=entry.request.wr_id,
                    status=SliceStatus.FLUSHED,
                    length=entry.request.length,
                    detail="device closed",
                )
            )
        self.exposures.close()
        for state in self._peers.values():
            self._destroy(state)
        self._ctx.close()
        self._closed = True

    # -- connection management ----------------------------------------------------------------
    def endpoint(self, peer: int) -> VerbsEndpoint:
        """This rail's side of the RC connection to ``peer``: creates its QP (INIT) on first use.

        Raises :class:`InvalidEntry` for a retired peer (a new connection needs a new peer id or
        :meth:`forget` first).
        """
        state = self._peers.get(peer)
        if state is not None and state.retired:
            raise InvalidEntry(f"peer {peer} is retired on {self._name}")
        if state is None:
            e = self._e
            cap = self._b.QPCap(
                max_send_wr=self.config.max_send_wr,
                max_recv_wr=self.config.max_recv_wr,
                max_send_sge=1,
                max_recv_sge=1,
            )
            init = self._b.QPInitAttr(
                qp_type=e.IBV_QPT_RC, scq=self._scq, rcq=self._rcq, cap=cap, sq_sig_all=1
            )
            attr = self._b.QPAttr(port_num=self.config.port_num)
            attr.qp_access_flags = (
                e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
            )
            # One PD per peer (RFC protection): an rkey is PD-scoped, so an rkey of a region
            # exposed to another peer is a remote access error through this peer's QP.
            pd = self._b.PD(self._ctx)
            try:
                sink = self._b.MR(pd, _RECV_SINK_BYTES, e.IBV_ACCESS_LOCAL_WRITE)
                qp = self._b.QP(pd, init, attr)
                state = _Peer(pd=pd, sink=sink, qp=qp, psn=secrets.randbits(24))
                for buffer in self._local:
                    self._register_in(state, buffer)
            except BaseException:
                pd.close()
                raise
            self._peers[peer] = state
            self._by_qpn[qp.qp_num] = peer
        return VerbsEndpoint(
            qp_num=state.qp.qp_num,
            psn=state.psn,
            gid=VerbsEndpoint.gid_bytes(str(self._gid.gid)),
            lid=int(self._port.lid),
            port_num=self.config.port_num,
            mtu=int(self._port.active_mtu),
        )

    def connect(self, peer: int, remote: VerbsEndpoint) -> None:
        """INIT → RTR → RTS against ``remote``, then post the receives WRITE_WITH_IMM consumes.

        Raises :class:`InvalidEntry` if :meth:`endpoint` was not called for ``peer`` or it is
        retired, and the backend's ``PyverbsRDMAError`` if the HCA refuses a transition.
        """
        state = self._peers.get(peer)
        if state is None or state.retired:
            raise InvalidEntry(f"no QP for peer {peer} on {self._name}: call endpoint() first")
        b, c = self._b, self.config
        attr = b.QPAttr(port_num=c.port_num)
        attr.path_mtu = min(int(self._port.active_mtu), remote.mtu)
        attr.dest_qp_num = remote.qp_num
        attr.rq_psn = remote.psn
        attr.sq_psn = state.psn
        attr.max_dest_rd_atomic = c.max_rd_atomic
        attr.max_rd_atomic = c.max_rd_atomic
        attr.min_rnr_timer = c.min_rnr_timer
        attr.timeout = c.timeout
        attr.retry_cnt = c.retry_cnt
        attr.rnr_retry = c.rnr_retry
        route = b.GlobalRoute(dgid=b.GID(remote.gid_text), sgid_index=c.gid_index)
        attr.ah_attr = b.AHAttr(port_num=c.port_num, is_global=1, gr=route, dlid=remote.lid)
        state.qp.to_rts(attr)
        for _ in range(c.max_recv_wr):
            self._post_receive(state)
        state.connected = True

    def retire(self, peer: int) -> None:
        """Move ``peer``'s QP to ERR: its outstanding slices flush (polled as ``FLUSHED``) and no
        write of it can land here any more. Idempotent; unknown peers are ignored."""
        state = self._peers.get(peer)
        if state is None or state.retired:
            return
        e = self._e
        state.qp.modify(self._b.QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
        state.retired = True

    def forget(self, peer: int) -> None:
        """Destroy a retired peer's QP once its slices all completed, so ``peer`` can reconnect.

        Raises :class:`InvalidEntry` if the peer is not retired or slices are still outstanding.
        """
        state = self._peers.get(peer)
        if state is None or not state.retired or state.outstanding:
            raise InvalidEntry(f"peer {peer} is not retired and drained on {self._name}")
        self.exposures.forget_peer(peer)
        del self._by_qpn[state.qp.qp_num]
        del self._peers[peer]
        self._destroy(state)

    # -- the sender's view of the receiver's regions -----------------------------------------
    def add_region(self, peer: int, region: VerbsRegion) -> None:
        """Record a region ``peer`` exposed to us (from its :class:`VerbsRegion` message).

        Raises :class:`InvalidEntry` for an unknown peer and :class:`TooManyRequests` beyond
        :data:`MAX_REGIONS_PER_PEER` (a peer cannot grow our tables without bound); nothing is
        recorded then.
        """
        state = self._peers.get(peer)
        if state is None:
            raise InvalidEntry(f"unknown peer {peer} on {self._name}")
        if sum(len(r) for r in state.regions.values()) >= MAX_REGIONS_PER_PEER:
            raise TooManyRequests(f"peer {peer} exposed more than {MAX_REGIONS_PER_PEER} regions")
        state.regions.setdefault(region.segment, []).append(region)

    def drop_regions(self, peer: int, session: int | None = None) -> None:
        """Forget ``peer``'s regions (of ``session`` only, if given): release or fencing."""
        state = self._peers.get(peer)
        if state is None:
            return
        for segment, regions in list(state.regions.items()):
            kept = [r for r in regions if session is not None and r.session != session]
            if kept:
                state.regions[segment] = kept
            else:
                del state.regions[segment]

    # -- local memory -------------------------------------------------------------------------
    def register_local(self, buffer: memoryview) -> None:
        """Register long-lived local memory (e.g. a KV cache) once per peer PD, so slices inside
        it post without a per-slice registration. Raises :class:`InvalidArgument` for a buffer
        that is read-only or not contiguous (nothing registered)."""
        buffer_address(buffer)  # validates before anything is registered
        for state in self._peers.values():
            self._register_in(state, buffer)
        self._local.append(buffer)

    def _register_in(self, state: _Peer, buffer: memoryview) -> None:
        address = buffer_address(buffer)
        e = self._e
        mr = self._b.MR(state.pd, buffer.nbytes, e.IBV_ACCESS_LOCAL_WRITE, address=address)
        state.local.append((address, buffer.nbytes, mr))

    def _pd_of(self, peer: int) -> Any:
        state = self._peers.get(peer)
        if state is None or state.retired:
            raise InvalidEntry(f"no live QP for peer {peer} on {self._name}: endpoint() first")
        return state.pd

    def _destroy(self, state: _Peer) -> None:
        state.qp.close()
        for _, _, mr in state.local:
            mr.close()
        state.sink.close()
        state.pd.close()

    def allocate(self, length: int) -> memoryview:
        """Memory a peer can reach once exposed (anonymous pages on a NIC, the soft fabric)."""
        return self._b.alloc_buffer(self._ctx, length)

    # -- the receiver side ---------------------------------------------------------------------
    def poll_arrivals(self, max_entries: int) -> list[WriteArrival]:
        """Completed WRITE_WITH_IMMs into this rail: (peer, write id, length); receives are
        reposted. Flushed receives of retired peers are consumed silently. Raises
        :class:`InvalidArgument` for ``max_entries`` < 1."""
        if max_entries < 1:
            raise InvalidArgument("max_entries must be >= 1")
        if self._wakeup:
            self._b.arm_cq_notify(self._rcq)
        _, wcs = self._rcq.poll(max_entries)
        out: list[WriteArrival] = []
        for wc in wcs:
            peer = self._by_qpn.get(wc.qp_num)
            if peer is None or wc.status != self._e.IBV_WC_SUCCESS:
                continue
            out.append(
                WriteArrival(peer=peer, write_id=socket.ntohl(wc.imm_data), length=wc.byte_len)
            )
            state = self._peers[peer]
            if not state.retired:
                self._post_receive(state)
        return out

    # -- internals -----------------------------------------------------------------------------
    def _post_receive(self, state: _Peer) -> None:
        self._recv_wr_ids += 1
        sge = self._b.SGE(state.sink.buf, _RECV_SINK_BYTES, state.sink.lkey)
        state.qp.post_recv(self._b.RecvWR(wr_id=self._recv_wr_ids, num_sge=1, sg=[sge]))

    def _route(self, state: _Peer, request: SliceRequest) -> VerbsRegion:
        for region in state.regions.get(request.remote_segment, ()):
            # the region the slice starts in: the responder range-checks the rest (a liar's
            # over-long write fails there with a remote access error)
            if region.offset <= request.remote_offset < region.offset + region.length:
                if request.opcode is Opcode.READ and not region.readable:
                    continue
                return region
        raise PostRefused(
            f"no region of segment {request.remote_segment} at offset {request.remote_offset} "
            f"for peer {request.peer}",
            ready=True,
        )

    def _work_request(
        self, state: _Peer, request: SliceRequest, region: VerbsRegion, posted: list[_Posted]
    ) -> Any:
        b, e = self._b, self._e
        local, keep, mr, lkey = request.local, None, None, 0
        if local.readonly:
            keep = bytearray(local)  # a bounce copy: registration needs writable memory
            local = memoryview(keep)
        address = buffer_address(local)
        for base, length, local_mr in state.local:
            if base <= address and address + request.length <= base + length:
                lkey = local_mr.lkey
                break
        else:
            mr = b.MR(state.pd, request.length, e.IBV_ACCESS_LOCAL_WRITE, address=address)
            lkey = mr.lkey
        posted.append(_Posted(request=request, peer=request.peer, mr=mr, keep=keep))
        sge = b.SGE(address, request.length, lkey)
        if request.opcode is Opcode.WRITE:
            wr = b.SendWR(
                wr_id=request.wr_id,
                opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM,
                num_sge=1,
                sg=[sge],
                imm_data=socket.htonl(request.write_id),
                send_flags=e.IBV_SEND_SIGNALED,
            )
        else:
            wr = b.SendWR(
                wr_id=request.wr_id,
                opcode=e.IBV_WR_RDMA_READ,
                num_sge=1,
                sg=[sge],
                send_flags=e.IBV_SEND_SIGNALED,
            )
        wr.set_wr_rdma(region.rkey, region.addr + (request.remote_offset - region.offset))
        return wr

    def _release_deferred(self, state: _Peer) -> None:
        """Queue a peer's refused-WR completions once its posted prefix has completed."""
        if state.outstanding == 0:
            self._synthetic.extend(state.deferred)
            state.deferred.clear()

    def _finish(self, entry: _Posted) -> None:
        self._posted.pop(entry.request.wr_id, None)
        state = self._peers.get(entry.peer)
        if state is not None:
            state.outstanding -= 1
        if entry.mr is not None:
            entry.mr.close()

    def _status(self, wc_status: int) -> tuple[SliceStatus, str]:
        e = self._e
        if wc_status == e.IBV_WC_SUCCESS:
            return SliceStatus.SUCCESS, ""
        if wc_status == e.IBV_WC_REM_ACCESS_ERR:
            return SliceStatus.REMOTE_ACCESS_ERROR, "IBV_WC_REM_ACCESS_ERR"
        if wc_status == e.IBV_WC_WR_FLUSH_ERR:
            return SliceStatus.FLUSHED, "IBV_WC_WR_FLUSH_ERR"
        names = {
            e.IBV_WC_RNR_RETRY_EXC_ERR: "IBV_WC_RNR_RETRY_EXC_ERR",
            e.IBV_WC_RETRY_EXC_ERR: "IBV_WC_RETRY_EXC_ERR",
            e.IBV_WC_LOC_PROT_ERR: "IBV_WC_LOC_PROT_ERR",
        }
        return SliceStatus.TRANSPORT_ERROR, names.get(wc_status, f"wc status {wc_status}")

