"""The asyncio engine: drives the sans-IO dispatch core and the control service.

The driver (docs/transport_design.md#layers): every input (a submit, a rail's completion
wake-up, a credit message, the core's fallback timer) schedules one *pass*: ``progress(now)``
on the dispatch core, the terminal events handed to their handles, then every control client
flushed (the gate's reservations and completions changed what the endpoints want to say) and
the core's timer re-armed. Passes are coalesced: many wake-ups in one loop iteration run one.

The engine holds no protocol rule: credit and scheduling decisions are the cores' (through the
dispatch core, the gate and the endpoints); the engine moves bytes, timers and events.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections.abc import Callable, Sequence
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from tent_credit import (
    BackpressureInfo,
    CreditMode,
    CreditReceiver,
    DispatchGate,
    SenderEndpoint,
    SessionId,
)
from tent_credit.metrics import CreditCollector
from tent_sched import TaskStatus

from ..config import EngineConfig
from ..control import (
    ControlClient,
    ControlServer,
    TlsIdentity,
)
from ..devices import (
    Rail,
    ReceiverHalf,
    TransportSpec,
    build_transport,
)
from ..dispatch import (
    DispatchCore,
    TransferEvent,
    TransferPlan,
    TransferRequest,
    TransferState,
)
from ..errors import (
    InvalidArgument,
    LocalProtocolError,
    RemoteProtocolError,
)
from ..segments import (
    Access,
    Exposure,
    Segment,
    SegmentDescriptors,
    SegmentTable,
)
from ._batches import BatchTable, Request, TaskState, task_state
from ._handle import TransferHandle
from ._links import Link, SenderLinks
from ._metrics import TransportCollector
from ._options import EngineOptions
from ._receiving import DataLanded, ReceiverSide
from ._staging import StagingPath

__all__ = ["Engine"]



def _new_session() -> SessionId:
    # A restarted receiver must mint a larger session id than any before it (senders ignore
    # activations of older sessions): wall-clock nanoseconds, plus random low bits.
    return SessionId((time.time_ns() << 16) | int.from_bytes(os.urandom(2), "big"))


def submit_batch(requests: object) -> tuple[TransferRequest, ...]:
    """A submit's batch as a tuple (a copy: the caller may reuse its list); raises
    :class:`InvalidArgument` for anything but a list or tuple. Its items are checked by
    :meth:`Engine.submit`."""
    if not isinstance(requests, list | tuple):
        raise InvalidArgument(
            f"submit takes a list or tuple of TransferRequest, got {type(requests).__name__}"
        )
    return tuple(requests)


class Engine:
    """One TENT engine: sender and receiver at once (``await start()`` to receive; a pure
    sender may only ``await connect()``).

    Raises :class:`~tent_transport.errors.ConfigError` for a refused configuration (e.g. receiver
    credit without the runtime queue, from :class:`EngineConfig`).
    """

    def __init__(self, config: EngineConfig, options: EngineOptions) -> None:
        if not isinstance(config, EngineConfig):
            raise InvalidArgument("config must be an EngineConfig")
        self.config = config
        self.options = options
        self.registry = CollectorRegistry()
        self.segments = SegmentTable()
        credit = config.receiver_credit
        self._mode = credit.credit_mode
        self.credit: CreditReceiver | None = None
        if credit.enabled:
            self.credit = CreditReceiver(
                # the staging pool bounds the STAGING_SLOTS credit can promise
                credit.allocator_config(staging_slots=options.staging_slots),
                _new_session()
                if options.credit_session is None
                else SessionId(options.credit_session),
                freshness_ttl_ms=credit.freshness_ttl_ms,
                refresh_interval_ns=credit.refresh_interval_ns,
                initial_grant=credit.grant.initial_grant,
                trace=options.trace,
                versions=credit.versions,
                hold_partial=credit.partial_hold_ns > 0,
            )
        self.gate = DispatchGate(credit.gate_config()) if credit.enabled else None
        self._collector = CreditCollector(self.registry)
        if self.credit is not None:
            self._collector.watch_receiver(self.credit)
        self.receiver = ReceiverSide(
            credit=self.credit,
            segments=self.segments,
            release_on_landing=options.release_on_landing,
            max_pending_landed=options.max_pending_landed,
            # required mode fails explicitly or takes its configured fallback (RFC rollout)
            legacy_writes=not credit.enabled
            or credit.credit_mode is not CreditMode.REQUIRED
            or credit.required_fallback,
            trim_heap=options.trim_heap,
        )
        transport = build_transport(
            TransportSpec(
                device=options.device,
                rails=len(options.rail_addresses),
                link_speed_gbps=options.link_speed_gbps or (0.0,) * len(options.rail_addresses),
                device_name=options.verbs_device,
                data_ssl=self._data_ssl(),
                plane=self.receiver,
                segments=self.segments,
                credit=self.credit,
                # a TCP data connection's send buffer holds one dispatch slice
                slice_bytes=self.config.dispatch.slice_bytes,
                send_thread=options.data_send_thread,
                congestion_control=options.data_congestion_control,
            )
        )
        self.rails: list[Rail] = list(transport.rails)
        self.receivers: list[ReceiverHalf] = list(transport.receivers)
        """The transport's receiver halves (listeners, the verbs receiver), in rail order."""
        self._staged_writes = transport.staged_writes
        self._listening: list[tuple[str, int]] = []  # where the halves listen, once started
        self.receiver.halves = self.receivers
        self.core = DispatchCore(config, self.rails, gate=self.gate, metrics_registry=self.registry)
        self.control = ControlServer(
            options.identity,
            credit=self.credit,
            # a transport without a data listener (verbs) is reached through the control
            # connection: its rail's address is the control address
            rails=lambda: self._listening or [self.address],
            hooks=self.receiver,
            qos_class=credit.default_qos_class,
            faults=options.control_faults,
            control_rate=options.control_rate,
            partial_hold_ns=credit.partial_hold_ns,
        )
        self.receiver.control = self.control
        if options.staging_slots and self.credit is not None:
            self.receiver.staging = StagingPath(
                config=config,
                credit=self.credit,
                segments=self.segments,
                peer=options.peer_id,
                slots=options.staging_slots,
                slot_bytes=options.staging_slot_bytes,
            )
        TransportCollector(
            self.registry,
            rails=self.rails,
            data=lambda: [d for h in self.receivers if (d := h.data_statistics()) is not None],
            receiver=self.receiver.statistics,
            control=self.control.statistics,
        )
        self.links = SenderLinks(
            core=self.core,
            rails=self.rails,
            options=options,
            wake=self._schedule_pass,
            spawn=self._spawn,
            closed=lambda: self._closed,
        )
        self._links = self.links.by_peer  # peer -> its Link (the submit path reads it)
        self._handles: dict[int, TransferHandle] = {}
        self._batches = BatchTable()
        self._pressure: dict[int, BackpressureInfo | None] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pass_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due: int | None = None  # the core's deadline the pending timer is for
        self._tasks: set[asyncio.Task[None]] = set()
        self.address: tuple[str, int] = ("", 0)
        self.metrics_address: tuple[str, int] | None = None
        """Where the metrics are served once started (``metrics_port``), else ``None``."""
        self._metrics: WSGIServer | None = None
        self._closed = False

    def _data_ssl(self) -> tuple[ssl.SSLContext | None, ssl.SSLContext | None]:
        identity = self.options.identity
        if not self.options.data_tls or not isinstance(identity, TlsIdentity):
            return None, None
        return identity.server_context, identity.client_context

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> tuple[str, int]:
        """Open the listeners; returns the control address peers connect to."""
        self._bind_driver()
        if not self._listening:
            for half, (host, port) in zip(
                self.receivers, self.options.rail_addresses, strict=False
            ):
                address = await half.listen(host, port)
                if address is not None:
                    self._listening.append(address)
        self.address = await self.control.listen(*self.options.control_address)
        if self.options.metrics_port is not None and self._metrics is None:
            self._metrics, _ = start_http_server(
                self.options.metrics_port, addr=self.options.metrics_address, registry=self.registry
            )
            bound = self._metrics.server_address
            self.metrics_address = (str(bound[0]), int(bound[1]))
        return self.address

    def _bind_driver(self) -> None:
        """Bind the dispatch driver to the running loop (idempotent): :meth:`_wake` schedules
        passes only once it knows the loop, and the rails wake it on every completion.

        Both :meth:`start` and :meth:`connect` call it: a sender that connects without ever
        calling ``start()`` (it needs no listener) must still get passes, or nothing after the
        submit's own dispatch runs (no usage report for a credit stall, no completion handed
        to a handle).
        """
        if self._loop is not None:
            return
        self._loop = asyncio.get_running_loop()
        for rail in self.rails:
            rail.set_wakeup(self._wake)
            rail.on_lost = self.links.data_lost
        for half in self.receivers:  # e.g. the verbs device wakes its receiver on this loop
            half.start()

    async def close(self) -> None:
        """Close every connection and listener (outstanding slices are flushed)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        for link in self._links.values():
            if link.death_timer is not None:
                link.death_timer.cancel()
            await link.client.close()
        for rail in self.rails:
            rail.close()
        await self.control.close()
        for half in self.receivers:
            await half.close()
        self.receiver.close()
        if self._metrics is not None:
            # its port is free again once this returns (a restarted engine can bind it)
            metrics, self._metrics = self._metrics, None
            await asyncio.to_thread(metrics.shutdown)
            metrics.server_close()
        for task in list(self._tasks):
            task.cancel()
        self._run_pass()

    async def __aenter__(self) -> Engine:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _spawn(self, coro: object) -> None:
        task = asyncio.ensure_future(coro)  # type: ignore[call-overload]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---------------------------------------------------------------- sender: peers

    async def connect(self, host: str, port: int, *, expect_peer: int | None = None) -> int:
        """Open the control session to the engine at ``host:port`` and its data connections;
        returns its authenticated peer id. Raises ``HandshakeFailed`` or ``OSError``.
        Needs no :meth:`start` first (a pure sender opens no listener). Raises
        :class:`InvalidArgument` for a malformed address and :class:`LocalProtocolError` once
        the engine is closed, before anything is opened."""
        if type(host) is not str or not host:
            raise InvalidArgument(f"host must be a non-empty str, got {host!r}")
        if type(port) is not int or not 0 < port <= 0xFFFF:
            raise InvalidArgument(f"port must be an int in [1, 65535], got {port!r}")
        if expect_peer is not None and (type(expect_peer) is not int or expect_peer < 0):
            raise InvalidArgument(f"expect_peer must be None or a peer id, got {expect_peer!r}")
        if self._closed:
            raise LocalProtocolError("the engine is closed")
        self._bind_driver()
        credit = self.config.receiver_credit
        endpoint = None
        if self.gate is not None:
            endpoint = SenderEndpoint(
                sender_peer=self.options.peer_id,
                qos_class=credit.default_qos_class,
                mode=self._mode,
                usage_interval_ns=credit.usage_interval_ns,
                trace=self.options.trace,
                level_hold_ns=credit.level_hold_ns,
                # over a lossy channel the sender refreshes its report as the receiver its
                # vector (version 2); 0: none (TCP loses nothing without the connection)
                refresh_interval_ns=credit.refresh_interval_ns or None,
                versions=credit.versions,
            )
        link = Link(
            ControlClient(
                self.options.identity,
                host,
                port,
                endpoint=endpoint,
                hooks=self.links,
                expect_peer=expect_peer,
                faults=self.options.control_faults,
                usage_interval_ns=credit.usage_interval_ns,
            ),
            endpoint,
        )
        await link.client.start()
        peer = link.client.peer
        if peer in self._links:
            await link.client.close()
            raise LocalProtocolError(f"already connected to peer {peer}")
        link.peer = peer
        self._links[peer] = link
        if self.gate is not None and endpoint is not None:
            self.gate.add_endpoint(peer, endpoint)
            self._collector.watch_sender(endpoint)
        # the bootstrap may have arrived before the link was registered
        if link.client.bootstrap is not None and link.sessions_started == 0:
            self.links.start_session(link, link.client.bootstrap, link.client)
        await asyncio.wait_for(link.attached.wait(), 10.0)
        self._wake()
        return peer

    def regions(self, peer: int) -> SegmentDescriptors | None:
        """The latest descriptors the peer exposed to this engine (``None``: none yet)."""
        return self.links.regions(peer)

    async def wait_regions(
        self, peer: int, predicate: Callable[[SegmentDescriptors], bool], timeout: float = 10.0
    ) -> SegmentDescriptors:
        """Wait until the peer's descriptors satisfy ``predicate``; raises TimeoutError."""
        return await self.links.wait_regions(peer, predicate, timeout)

    def connected(self, peer: int) -> bool:
        return self.links.connected(peer)

    def peers(self) -> tuple[int, ...]:
        return self.links.peers()

    # ---------------------------------------------------------------- sender: transfers

    def submit(self, requests: Sequence[TransferRequest]) -> TransferHandle:
        """Submit transfers as one batch (in the loop thread); returns their handle.

        Raises :class:`LocalProtocolError` for a peer never connected, declared dead (no
        control session for ``peer_dead_after_s``; a reconnect lifts it), or whose current
        session the rails refused (a verbs receiver of schema 1, which cannot acknowledge
        admission),
        and the dispatch core's typed errors (InvalidArgument, InvalidEntry, TooManyRequests);
        nothing is submitted then.
        """
        batch = submit_batch(requests)
        ids = self._admit(batch)
        peers = {r.peer for r in batch}
        handle = TransferHandle(
            ids,
            lookup=self.core.status,
            cancel=self._cancel,
            peers_connected=lambda: all(self.connected(p) for p in peers),
        )
        for tid in ids:
            self._handles[tid] = handle
        self._wake()
        return handle

    def _admit(self, batch: tuple[TransferRequest, ...]) -> tuple[int, ...]:
        """:meth:`submit`'s checks, then the dispatch core's submit; the transfer ids."""
        if self._closed:
            raise LocalProtocolError("the engine is closed")
        for request in batch:
            if not isinstance(request, TransferRequest):
                raise InvalidArgument("submit takes TransferRequest values")
            if request.peer not in self._links:
                raise LocalProtocolError(f"peer {request.peer} is not connected")
            if self._links[request.peer].dead:
                # no session for peer_dead_after_s: its work could only wait for one
                raise LocalProtocolError(f"peer {request.peer} is unreachable (declared dead)")
            if self._links[request.peer].refused:
                raise LocalProtocolError(
                    f"peer {request.peer} is refused: {self._links[request.peer].refused}"
                )
            if request.plan is TransferPlan.STAGED and not self._staged_writes:
                # staging needs receiver code between landing and target: a one-sided write
                # has none (docs/rdma.md "The engine over verbs")
                raise LocalProtocolError(
                    f"staged writes are not supported over {self.options.device}"
                )
            if (
                request.plan is TransferPlan.STAGED
                and self.gate is not None
                and request.length > self.config.dispatch.slice_bytes
            ):
                # its STAGING_SLOTS ride on one slice only: the receiver stages whole writes
                raise LocalProtocolError("a staged write must fit one dispatch slice")
        return self.core.submit(batch, time.monotonic_ns())

    # ---------------------------------------------------------------- sender: batches

    def open_segment(self, peer: int, segment_id: int) -> int:
        """The segment handle (TENT's ``SegmentID``) of ``segment_id`` at ``peer``, for a
        :class:`Request`'s ``target_id`` (``_batches.py``)."""
        return self._batches.open_segment(peer, segment_id)

    def allocate_batch(self, capacity: int) -> int:
        """A batch of at most ``capacity`` tasks (``_batches.py``); InvalidArgument if bad."""
        return self._batches.allocate(capacity)

    def submit_transfer(self, batch_id: int, requests: Sequence[Request]) -> tuple[int, ...]:
        """Submit :class:`Request` values into a batch, all or nothing; return their task ids.

        Raises InvalidEntry (unknown or freed batch, unknown segment handle), TooManyRequests
        (past the batch's capacity) and :meth:`submit`'s errors; nothing is published then.
        """
        batch = self._batches.resolve(requests)
        self._batches.check(batch_id, len(batch))
        tasks = self._batches.bind(batch_id, self._admit(batch))
        self._wake()
        return tasks

    def transfer_status(self, batch_id: int, task_id: int) -> TaskState:
        """A task's state; InvalidEntry for an unknown or freed batch or task."""
        transfer_id, event = self._batches.transfer_of(batch_id, task_id)
        return task_state(event if event is not None else self.core.status(transfer_id))

    def batch_status(self, batch_id: int) -> tuple[TaskState, ...]:
        """Every task's state, by task id; InvalidEntry for an unknown or freed batch."""
        tasks = self._batches.tasks(batch_id)
        return tuple(self.transfer_status(batch_id, task) for task in range(tasks))

    def cancel_transfer(self, batch_id: int, task_id: int) -> bool:
        """Cancel a task (:meth:`TransferHandle.cancel`'s rules); whether it ends CANCELED."""
        transfer_id, event = self._batches.transfer_of(batch_id, task_id)
        if event is not None:
            return event.status is TaskStatus.CANCELED
        return self._cancel((transfer_id,))

    def free_batch(self, batch_id: int) -> None:
        """Free a batch now; its unfinished tasks run on and are reclaimed when they end."""
        self._batches.free(batch_id)

    def _cancel(self, transfer_ids: tuple[int, ...]) -> bool:
        answer = self.core.cancel_many(transfer_ids, time.monotonic_ns())
        self._wake()
        return answer

    def backpressure(self, peer: int) -> BackpressureInfo | None:
        """The pressure a submit to ``peer`` would meet (thread-safe snapshot of the last pass;
        the dispatch core's answer)."""
        return self._pressure.get(peer)

    def transfer_state(self, transfer_id: int) -> TransferState:
        return self.core.status(transfer_id)

    # ---------------------------------------------------------------- receiver

    def register(self, buffer: object) -> Segment:
        """Register memory peers may be given access to (``bytearray``, ``mmap``, ...)."""
        return self.segments.register(buffer)

    def expose(
        self,
        peer: int,
        segment_id: int,
        offset: int,
        length: int,
        access: Access = Access.WRITE,
    ) -> Exposure:
        """Expose a region to ``peer``'s current session and send it the new descriptors.

        Raises :class:`LocalProtocolError` when the peer has no live session, and the segment
        table's :class:`~tent_transport.segments.SegmentError` for a bad range.
        """
        ps = self.control.session_of(peer)
        if ps is None:
            raise LocalProtocolError(f"peer {peer} has no live control session")
        exposure = self.segments.expose(
            peer, ps.session, segment_id=segment_id, offset=offset, length=length, access=access
        )
        for half in self.receivers:
            half.expose(exposure)  # verbs: its MR; the rkey goes out under credit
        self.receiver.publish_descriptors(peer)
        return exposure

    def allocate(self, length: int) -> memoryview | bytearray:
        """Memory to :meth:`register` that every rail can reach (verbs: DMA-able, on the soft
        device its fabric; TCP: a ``bytearray``)."""
        for half in self.receivers:
            memory = half.allocate(length)
            if memory is not None:
                return memory
        return bytearray(length)

    def revoke(self, exposure: Exposure) -> None:
        self.segments.revoke(exposure.exposure_id)
        for half in self.receivers:
            half.revoke(exposure)
        self.receiver.publish_descriptors(exposure.peer)

    def release(self, event: DataLanded) -> bool:
        """The consumer is done with a landed write: its credit goes back to the allocator.
        ``False`` for one already released (or uncredited); :class:`InvalidArgument` for
        anything but a :class:`DataLanded` this engine handed out."""
        if not isinstance(event, DataLanded):
            raise InvalidArgument(f"release takes a DataLanded, got {type(event).__name__}")
        return self.receiver.release(event)

    async def landed(self) -> DataLanded:
        """The next data-landed notification (sender, segment, offset, length)."""
        return await self.receiver.next_landed()

    def sender_sessions(self) -> tuple[int, ...]:
        """Peers with a live control session to this receiver."""
        return tuple(ps.peer for ps in self.control.sessions())

    # ---------------------------------------------------------------- the driver

    def _wake(self) -> None:
        """Schedule one dispatch pass (coalesced); callable from any thread."""
        self._schedule_pass()

    def _schedule_pass(self) -> bool:
        """:meth:`_wake`, answering whether a pass is scheduled now (``False``: the engine is not
        bound to a loop yet). The links' credit hook asks it: the pass flushes every client."""
        loop = self._loop
        if loop is None:
            return False
        if self._pass_scheduled:
            return True
        self._pass_scheduled = True
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            loop.call_soon(self._run_pass)
        else:
            loop.call_soon_threadsafe(self._run_pass)
        return True

    def _run_pass(self) -> None:
        self._pass_scheduled = False
        now = time.monotonic_ns()
        events: list[TransferEvent] = self.core.progress(now)
        for event in events:
            handle = self._handles.pop(event.transfer_id, None)
            if handle is not None:
                handle._ended(event)
            self._batches.ended(event)
        self.core.drain_endpoint_events()
        for link in self._links.values():
            link.client.flush()
        for peer in self._links:
            self._pressure[peer] = self.core.backpressure(peer)
        if self._closed or self._loop is None:
            return
        due = self.core.next_timer_ns()
        if self._timer is not None and due != self._timer_due:
            self._timer.cancel()
            self._timer = None
        # most passes leave the deadline where it was: keep that timer rather than cancel it
        # and schedule an identical one (each cancelled handle stays in the loop's heap)
        if due is not None and self._timer is None:
            delay = max(0.0, (due - time.monotonic_ns()) / 1e9)
            self._timer = self._loop.call_later(delay, self._on_timer)
            self._timer_due = due

    def _on_timer(self) -> None:
        self._timer = None  # fired: the next pass schedules a new one, even for the same due
        self._wake()

    # ---------------------------------------------------------------- misc

    def quarantined(self) -> tuple[int, ...]:
        return self.receiver.statistics().quarantined

    def credit_mode(self) -> CreditMode:
        return self._mode

    def require_peer(self, peer: int) -> None:
        if peer not in self._links:
            raise RemoteProtocolError(f"unknown peer {peer}")
