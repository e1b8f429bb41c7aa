"""The soft HCA: ``Context`` (a fabric node and its execution engine), ``PD``, ``MR``, ``CQ``.

The execution engine is the soft device's "NIC": one worker thread per Context that executes
posted send WRs in order per send queue, each after its seeded delay and at the configured port
rate, and pushes their completions. In *step mode* there is no thread: a test calls
:meth:`Context.release` to execute the next WR and make its completion pollable, one at a time.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import heapq
import itertools
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import attrs

from . import enums as e
from ._attrs import GID, WC, DeviceAttr, PortAttr
from ._shm import KeyTable, NodeDir, QPFile, SharedBuffer, node_alive
from .pyverbs_error import PyverbsRDMAError, PyverbsUserError

__all__ = ["CQ", "MR", "PD", "Context", "SoftConfig", "SoftDevice", "default_fabric"]

_PACE_BURST_NS = 5_000_000
_MODERATION_WRS = 4
_REACHABLE_RECHECK_NS = 10_000_000  # a vanished target is noticed within 10 ms
_GID_PREFIX = "fe80:0000:0000:0000:5654"  # "VT": the soft device's GIDs


class _QueuePair(Protocol):
    """What a CQ and the engine ask of a QP (``_qp.QP``, which imports this module: the
    protocol keeps the two from importing each other)."""

    def _drain_inbound(self, cq: CQ) -> None: ...
    def _completion_polled(self, recv: bool) -> None: ...
    def _execute(self, pending: Any, *, step: bool) -> int | None: ...
    def close(self) -> None: ...


class _Posted(Protocol):
    """What the engine asks of a posted send WR (``_qp._Posted``)."""

    @property
    def qp(self) -> _QueuePair: ...
    def live(self) -> bool: ...


def _shm_base() -> Path:
    return Path("/dev/shm") if Path("/dev/shm").is_dir() else Path("/tmp")


def _per_user_fabric() -> Path:
    return _shm_base() / f"tent-softverbs-{os.getuid()}"


def default_fabric() -> Path:
    """The fabric directory: ``$TENT_SOFTVERBS_FABRIC``, else one per user under ``/dev/shm``
    (made by the first Context that opens it, removed by the last one that closes)."""
    env = os.environ.get("TENT_SOFTVERBS_FABRIC")
    if env:
        return Path(env)
    return _per_user_fabric()


def gid_of(node_id: int) -> GID:
    """The GID naming node ``node_id`` (48 bits in the last three groups)."""
    low = f"{node_id:012x}"
    return GID(f"{_GID_PREFIX}:{low[0:4]}:{low[4:8]}:{low[8:12]}")


def node_of(gid: GID) -> int | None:
    """The node a soft GID names, or None for a GID that is not the soft device's."""
    text = str(gid.gid)
    if not text.startswith(_GID_PREFIX + ":"):
        return None
    try:
        return int(text[len(_GID_PREFIX) + 1 :].replace(":", ""), 16)
    except ValueError:
        return None


def _probability(_inst: object, attr: attrs.Attribute[float], value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{attr.name} must be in [0, 1], got {value}")


@attrs.frozen(kw_only=True)
class SoftConfig:
    """How a soft HCA behaves; the same seed replays the same delays and faults exactly.

    1. ``delay_ns``: each send WR executes a uniformly drawn ``[lo, hi]`` ns after it was posted
       (never before its predecessor on the same send queue: completions stay in order).
    2. ``fault_rate``: the probability that a WR fails with ``fault_status`` (nothing is written,
       the QP goes to ERR and flushes the rest, as a real RC QP does after a failed WR).
    3. ``rate_bytes_per_s``: the port's rate; 0 = as fast as memory copies.
    4. ``step_mode``: no worker thread; :meth:`Context.release` executes WRs one by one.
    5. ``rnr_timer_ns``: the interval between RNR retries of a WRITE_WITH_IMM without a receive.
    """

    seed: int = 0
    delay_ns: tuple[int, int] = (0, 0)
    fault_rate: float = attrs.field(default=0.0, validator=_probability)
    fault_status: int = e.IBV_WC_RETRY_EXC_ERR
    rate_bytes_per_s: float = 0.0
    step_mode: bool = False
    rnr_timer_ns: int = 200_000
    max_qp_wr: int = 16384
    max_cqe: int = 65536
    max_sge: int = 30
    link_speed_gbps: float = 100.0


class SoftDevice:
    """What ``get_device_list`` returns: ``name`` is bytes, as in pyverbs."""

    def __init__(self, name: bytes) -> None:
        self.name = name


class PD:
    """A protection domain: MRs and QPs of different PDs never meet."""

    _ids = itertools.count(1)

    def __init__(self, context: Context) -> None:
        self.context = context
        self.handle = next(PD._ids)

    def close(self) -> None:
        """Nothing to release (MRs and QPs are closed on their own or with the Context)."""


class MR:
    """A memory region: ``MR(pd, length, access)`` allocates; ``address=`` registers memory.

    Remotely accessible memory must live in the fabric (a buffer from :meth:`Context.alloc_buffer`
    or the MR's own allocation); local-only memory may be anywhere in this process.
    Raises ``PyverbsRDMAError(EINVAL)`` for REMOTE_WRITE without LOCAL_WRITE (ibv_reg_mr(3),
    rdma-core ``tests/test_mr.py`` bad-flags) or a non-positive length.
    """

    def __init__(
        self, creator: PD, length: int = 0, access: int = 0, address: int | None = None
    ) -> None:
        ctx = creator.context
        if length <= 0:
            raise PyverbsRDMAError(f"Failed to register a MR. length: {length}", errno.EINVAL)
        if access & e.IBV_ACCESS_REMOTE_WRITE and not access & e.IBV_ACCESS_LOCAL_WRITE:
            raise PyverbsRDMAError(
                f"Failed to register a MR. length: {length}, access flags: {access}", errno.EINVAL
            )
        self._owned: SharedBuffer | None = None
        if address is None:
            self._owned = ctx._new_buffer(length)
            address = self._owned.address
        buf_id, file_offset = ctx._locate(address, length)
        if access & (e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ) and buf_id == 0:
            raise PyverbsUserError(
                "soft verbs: remotely accessible memory must come from Context.alloc_buffer"
            )
        self.pd = creator
        self.context = ctx
        self.buf = address
        self.length = length
        self.access = access
        with ctx._lock:
            key = ctx._keys.allocate(access, creator.handle, buf_id, address, length, file_offset)
            ctx._mrs[key] = self
        self.lkey = key
        self.rkey = key
        self._closed = False

    def write(self, data: bytes, length: int, offset: int = 0) -> None:
        """Copy ``length`` bytes of ``data`` into the region at ``offset``."""
        if self._closed or length < 0 or offset + length > self.length:
            raise PyverbsUserError(f"The MR buffer isn't allocated or length {length} is invalid")
        ctypes.memmove(self.buf + offset, bytes(data[:length]), length)

    def read(self, length: int, offset: int) -> bytes:
        """``length`` bytes of the region from ``offset``."""
        if self._closed or length < 0 or offset + length > self.length:
            raise PyverbsUserError(f"The MR buffer isn't allocated or length {length} is invalid")
        return ctypes.string_at(self.buf + offset, length)

    def close(self) -> None:
        """Deregister: the rkey is invalid for every process from this instant. Idempotent."""
        if self._closed:
            return
        ctx = self.context
        with ctx._lock:
            ctx._keys.invalidate(self.rkey)
            ctx._mrs.pop(self.rkey, None)
        self._closed = True


class CQ:
    """A completion queue of ``cqe`` entries; an overrun is an error (``poll`` raises EOVERFLOW).

    Raises ``PyverbsRDMAError(EINVAL)`` for ``cqe`` < 1 or above the device's ``max_cqe``
    (rdma-core ``tests/test_cq.py``, ``test_create_cq_bad_flow``).
    """

    def __init__(
        self,
        context: Context,
        cqe: int,
        cq_context: object = None,
        channel: object = None,
        comp_vector: int = 0,
    ) -> None:
        if not 1 <= cqe <= context.config.max_cqe or comp_vector != 0:
            raise PyverbsRDMAError("Failed to create CQ", errno.EINVAL)
        self.context = context
        self.cqe = cqe
        self._entries: deque[tuple[WC, _QueuePair | None, bool]] = deque()
        self._recv_qps: list[_QueuePair] = []
        self.overrun = False
        self._notify: Callable[[], None] | None = None
        self._armed = False

    def set_notify(self, callback: Callable[[], None] | None) -> None:
        """Soft-only (the completion channel): call ``callback``, from the worker thread, for the
        next completion after :meth:`req_notify` armed the CQ. Installing it arms the CQ."""
        with self.context._lock:
            self._notify = callback
            self._armed = callback is not None

    def req_notify(self, solicited_only: bool = False) -> None:
        """Arm the CQ: the next completion calls the callback once (``ibv_req_notify_cq``)."""
        with self.context._lock:
            self._armed = True

    def _push(self, wc: WC, qp: _QueuePair | None, recv: bool) -> bool:
        """Append a completion (caller holds the context lock); False if the CQ overran."""
        if self.overrun or len(self._entries) >= self.cqe:
            self.overrun = True
            return False
        self._entries.append((wc, qp, recv))
        notify = self._notify
        if notify is not None and self._armed:
            self._armed = False  # one-shot, as ibv_req_notify_cq: the poller re-arms
            self.context._to_fire.append(notify)
        return True

    def poll(self, num_entries: int = 1) -> tuple[int, list[WC]]:
        """Up to ``num_entries`` completions as ``(npolled, wcs)``; raises on an overrun CQ."""
        ctx = self.context
        with ctx._lock:
            for qp in self._recv_qps:
                qp._drain_inbound(self)
            if self.overrun:
                raise PyverbsRDMAError("Failed to poll CQ", errno.EOVERFLOW)
            out: list[WC] = []
            while self._entries and len(out) < num_entries:
                wc, owner, recv = self._entries.popleft()
                if owner is not None:
                    owner._completion_polled(recv)
                out.append(wc)
        ctx._fire()
        return len(out), out

    def close(self) -> None:
        """Drop pending completions."""
        with self.context._lock:
            self._entries.clear()


class Context:
    """One soft HCA: a node of the fabric plus the engine that executes its send queues.

    ``name`` must be a name ``get_device_list`` reports (``soft0``); otherwise, like pyverbs,
    ``PyverbsRDMAError`` is raised. ``fabric`` defaults to :func:`default_fabric`. A fabric
    folder a caller names (``fabric=`` or ``$TENT_SOFTVERBS_FABRIC``) is the caller's; the
    per-user default is the device's, and :meth:`close` removes it once no node is left in it
    (a real HCA leaves nothing behind in ``/dev/shm``).
    """

    def __init__(
        self, name: str = "soft0", *, fabric: Path | None = None, config: SoftConfig | None = None
    ) -> None:
        if name != "soft0":
            raise PyverbsRDMAError(f"Failed to open device {name}", errno.ENODEV)
        self.name = name
        self.config = config if config is not None else SoftConfig()
        self.fabric = fabric if fabric is not None else default_fabric()
        self._own_fabric = fabric is None and self.fabric == _per_user_fabric()
        self.node = NodeDir.create(self.fabric)
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._keys = KeyTable(self.node.path / "keys", create=True)
        self._mrs: dict[int, MR] = {}
        self._buffers: dict[int, SharedBuffer] = {}
        self._buffer_ids = itertools.count(1)
        self._qps: dict[int, _QueuePair] = {}
        self._qpn = itertools.count((os.getpid() * 7919) & 0xFFFF00 | 0x10)
        self._heap: list[tuple[int, int, _Posted]] = []
        self._seq = itertools.count()
        self._port_free_ns = 0
        self._remotes: dict[int, RemoteNode] = {}
        # completion callbacks due; called by _fire() outside the lock, so a woken poller never
        # waits for the thread that woke it
        self._to_fire: list[Callable[[], None]] = []
        self._closed = False
        self._worker: threading.Thread | None = None
        if not self.config.step_mode:
            self._worker = threading.Thread(target=self._run, name="softverbs-hca", daemon=True)
            self._worker.start()

    # queries -----------------------------------------------------------------------------------
    def query_device(self) -> DeviceAttr:
        c = self.config
        return DeviceAttr(c.max_qp_wr, c.max_cqe, c.max_sge, 1 << 40)

    def query_port(self, port_num: int = 1) -> PortAttr:
        if port_num != 1:
            raise PyverbsRDMAError(f"Failed to query port {port_num}", errno.EINVAL)
        return PortAttr(lid=self.node.node_id & 0xFFFF)

    def query_gid(self, port_num: int = 1, index: int = 0) -> GID:
        if port_num != 1 or index != 0:
            raise PyverbsRDMAError("Failed to query gid", errno.EINVAL)
        return gid_of(self.node.node_id)

    # memory ------------------------------------------------------------------------------------
    def alloc_buffer(self, length: int) -> memoryview:
        """Soft-only: memory other nodes reach once registered (the device's DMA-able memory)."""
        return memoryview(self._new_buffer(length).mm)

    def _new_buffer(self, length: int) -> SharedBuffer:
        with self._lock:
            buf_id = next(self._buffer_ids)
            buf = SharedBuffer(self.node.path / f"buf-{buf_id}", length, create=True)
            self._buffers[buf_id] = buf
            return buf

    def _locate(self, address: int, length: int) -> tuple[int, int]:
        """(buffer id, offset in it) for a range inside one of our buffers, else (0, 0)."""
        with self._lock:
            for buf_id, buf in self._buffers.items():
                if buf.address <= address and address + length <= buf.address + buf.length:
                    return buf_id, address - buf.address
        return 0, 0

    def remote(self, node_id: int) -> RemoteNode | None:
        """The mapped view of node ``node_id`` (cached), or None if it is gone."""
        node = self._remotes.get(node_id)
        if node is None:
            path = NodeDir(self.fabric, node_id)
            pid = path.owner_pid()
            if pid is None:
                return None
            try:
                node = RemoteNode(path, pid)
            except OSError:
                return None
            self._remotes[node_id] = node
        return node if node.reachable() else None

    def _fire(self) -> None:
        """Call the completion callbacks that became due (caller does not hold the lock)."""
        if not self._to_fire:
            return
        with self._lock:
            due, self._to_fire = self._to_fire, []
        for callback in due:
            callback()

    # the engine --------------------------------------------------------------------------------
    def _schedule(self, pending: _Posted, due_ns: int) -> None:
        """Queue a WR for execution (caller holds the lock)."""
        heapq.heappush(self._heap, (due_ns, next(self._seq), pending))
        self._wake.notify()

    def release(self, qp: _QueuePair | None = None) -> bool:
        """Step mode: execute the next WR (of ``qp``, or the oldest posted) and complete it.

        Returns False if there is none, or the WR waits for a receive (RNR, infinite retry).
        Raises ``PyverbsUserError`` outside step mode.
        """
        if not self.config.step_mode:
            raise PyverbsUserError("release() is for step mode")
        with self._lock:
            candidates = [item for item in self._heap if qp is None or item[2].qp is qp]
            candidates = [item for item in candidates if item[2].live()]
            if not candidates:
                self._heap = [item for item in self._heap if item[2].live()]
                heapq.heapify(self._heap)
                return False
            item = min(candidates, key=lambda it: it[1])
            self._heap.remove(item)
            heapq.heapify(self._heap)
        pending = item[2]
        retry_at = pending.qp._execute(pending, step=True)
        if retry_at is not None:
            with self._lock:
                heapq.heappush(self._heap, item)
            return False
        return True

    def _run(self) -> None:
        executed = 0
        while True:
            with self._lock:
                due_now = bool(self._heap) and self._heap[0][0] <= time.monotonic_ns()
            if not due_now or executed >= _MODERATION_WRS:
                # interrupt moderation: wake the poller every few WRs or when the engine runs
                # out of due work, not per completion (each is pollable at once regardless)
                self._fire()
                executed = 0
            with self._lock:
                while not self._closed and not self._heap:
                    self._wake.wait()
                if self._closed:
                    return
                due, seq, pending = self._heap[0]
                now = time.monotonic_ns()
                if due > now:
                    self._wake.wait((due - now) / 1e9)
                    continue
                heapq.heappop(self._heap)
                if not pending.live():
                    continue
            retry_at = pending.qp._execute(pending, step=False)
            executed += 1
            if retry_at is not None:
                with self._lock:
                    heapq.heappush(self._heap, (retry_at, seq, pending))

    def _pace(self, nbytes: int) -> None:
        """Hold the port for ``nbytes`` at the configured rate (worker thread only)."""
        rate = self.config.rate_bytes_per_s
        if rate <= 0 or self.config.step_mode:
            return
        now = time.monotonic_ns()
        # a token bucket with a 5 ms burst: an oversleep is made up, an idle port saves nothing
        start = max(self._port_free_ns, now - _PACE_BURST_NS)
        self._port_free_ns = start + int(nbytes * 1e9 / rate)
        wait = self._port_free_ns - now
        if wait > 0:
            time.sleep(wait / 1e9)

    def close(self) -> None:
        """Invalidate every key, move every QP to ERR (flushing), stop the engine, remove the node
        (and the per-user default fabric folder if that was its last node). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._keys.invalidate_all()
            qps = list(self._qps.values())
        for qp in qps:
            qp.close()
        with self._lock:
            self._closed = True
            self._wake.notify_all()
        if self._worker is not None:
            self._worker.join(timeout=5)
        for node in self._remotes.values():
            node.close()
        for buf in self._buffers.values():
            buf.close()
        self._keys.close()
        self.node.remove()
        if self._own_fabric:
            # rmdir is atomic and refuses a folder with another node in it (ENOTEMPTY); a node
            # being created meanwhile makes the folder again (NodeDir.create)
            with contextlib.suppress(OSError):
                self.fabric.rmdir()

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class RemoteNode:
    """An initiator's mapping of another node: its key table, QP files and buffers."""

    def __init__(self, node: NodeDir, pid: int) -> None:
        self.node = node
        self.pid = pid
        self.keys = KeyTable(node.path / "keys", create=False)
        self._qps: dict[int, QPFile] = {}
        self._buffers: dict[int, SharedBuffer] = {}
        self._reachable = True
        self._checked_ns = 0

    def reachable(self) -> bool:
        """Whether the owner lives and its node exists, checked at most every 10 ms."""
        now = time.monotonic_ns()
        if now - self._checked_ns > _REACHABLE_RECHECK_NS:
            self._reachable = node_alive(self.pid) and os.path.isdir(self.node.path)
            self._checked_ns = now
        return self._reachable

    def qp(self, qpn: int) -> QPFile | None:
        qp = self._qps.get(qpn)
        if qp is None:
            try:
                qp = QPFile(self.node.path / f"qp-{qpn}", create=False)
            except OSError:
                return None
            self._qps[qpn] = qp
        return qp

    def buffer(self, buf_id: int) -> SharedBuffer | None:
        buf = self._buffers.get(buf_id)
        if buf is None:
            try:
                buf = SharedBuffer(self.node.path / f"buf-{buf_id}", 0, create=False)
            except OSError:
                return None
            self._buffers[buf_id] = buf
        return buf

    def close(self) -> None:
        for qp in self._qps.values():
            qp.close()
        for buf in self._buffers.values():
            buf.close()
        self.keys.close()
