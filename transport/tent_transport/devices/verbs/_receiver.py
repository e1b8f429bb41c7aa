"""The receiver's verbs side: QP exchange, per-(peer, session) MRs, admission at the notice.

1. **Exchange.** The sender sends its :class:`VerbsEndpoint` on the control connection (a VERBS
   frame); the receiver creates that peer's QP in the peer's own PD, moves it to RTS, and answers
   with its endpoint. One QP per (peer, session): a new session retires the old one first.
2. **Regions.** Every exposure of that (peer, session) gets its own MR, and the session gets a
   notice ring (an MR too). Their rkeys go out as :class:`VerbsRegion` messages only *under
   credit*: after the session's activation (with its initial grant), or where no credit is
   spoken (credit off here, or a sender that sends no credit frame: admitted uncredited, as on
   TCP); while a negotiation is under way they wait.
3. **Admission at the completion notice.** A one-sided WRITE lands without receiver code; the
   registration bounds it to the regions exposed to that (peer, session). When its immediate
   completes, the receiver reads the write's notice, checks the claimed range against the
   exposures and the CRC32C at that place, and calls the credit core's ``admit_write``
   (through the engine's receiver side, the same :class:`DataPlane` rules as TCP). Any refusal
   is a lie: the sender is quarantined. Bytes of an over-claim *have* landed (inside its own
   regions); they are never announced, and the quarantine stops it at once.

   One CRC32C mismatch is not a lie: the sender's *own later* write into an overlapping range
   landed before this one was admitted (RC executes a QP's writes in order, so a later notice
   in the ring says so). That write is SUPERSEDED: its charge is released, it is not
   announced, and the sender is told so.
4. **Acknowledgement.** The sender's HCA completes a WRITE when ours acknowledged it, before
   any of this ran; its handle completes only on our :class:`VerbsAck` (schema 2), sent in
   notice order after admission (cumulative, coalesced per drain; a full control queue is
   retried on the next poll). A refusal is acknowledged as REFUSED before the connection
   closes. A schema-1 sender gets neither acks nor schema-2 messages.
5. **Fencing.** Retiring a session deregisters every MR of it (its rkeys fail from that
   instant with a remote access error), moves its QP to ERR, drains the receive queue
   (completions of the fenced session are dropped, never admitted) and destroys the QP. Only
   then does the control service call ``fence_complete``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib

import attrs

from tent_credit import CreditReceiver

from ...control import FrameKind, PeerSession
from ...errors import InvalidArgument, InvalidEntry
from ...segments import Access, Exposure, SegmentTable
from .._halves import DataPlane, DataServerStatistics
from .._writes import Flags, Request, WireOpcode, checksum
from ._backend import VerbsBackend
from ._exchange import (
    VERBS_SCHEMA,
    AckOutcome,
    VerbsAck,
    VerbsEndpoint,
    VerbsMessageError,
    VerbsRegion,
    decode_verbs_message,
    encode_verbs_message,
)
from ._notice import NOTICE, NOTICE_SEGMENT, Notice, NoticeError
from ._protection import WriteArrival
from .device import VerbsDevice, VerbsDeviceConfig

__all__ = ["VerbsReceiver", "VerbsReceiverStatistics"]

_POLL_BATCH = 256
_BUSY_POLL_S = 0.0002
_IDLE_POLL_S = 0.005


@attrs.frozen(kw_only=True)
class VerbsReceiverStatistics:
    sessions: int
    fenced_mrs: int
    dropped_arrivals: int
    lies: int
    superseded: int
    acks_sent: int


@attrs.define(eq=False)
class _Rx:
    ps: PeerSession
    ring: memoryview
    ring_region: VerbsRegion
    regions: dict[int, VerbsRegion] = attrs.field(factory=dict)  # exposure id -> region
    offered: set[int] = attrs.field(factory=set)  # exposure ids whose rkey went out
    ring_offered: bool = False
    expect: int = 0
    pending: Notice | None = None
    retiring: bool = False
    schema: int = VERBS_SCHEMA  # the lower of the sender's and ours
    acks: collections.deque[VerbsAck] = attrs.field(factory=collections.deque)  # unsent, in order


class VerbsReceiver:
    """The verbs half of one engine's receiver (loop thread only)."""

    def __init__(
        self,
        backend: VerbsBackend,
        config: VerbsDeviceConfig,
        *,
        name: str,
        receiver: DataPlane,
        segments: SegmentTable,
        credit: CreditReceiver | None,
    ) -> None:
        self.device = VerbsDevice(backend, config, name=name)
        self._rdma_error = backend.rdma_error
        self._slots = 2 * config.max_recv_wr  # see _notice: the ring never laps a read
        self._receiver = receiver
        self._segments = segments
        self._credit = credit
        self._sessions: dict[int, _Rx] = {}
        self._rings: dict[int, memoryview] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._offer_timer: asyncio.TimerHandle | None = None
        self._fenced = self._dropped = self._lies = self._superseded = self._acks_sent = 0
        self._closed = False
        self._delay = _BUSY_POLL_S
        self._poller: asyncio.TimerHandle | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed under a late callback
                loop.call_soon_threadsafe(self.drain)

        self.device.set_wakeup(wake)
        self._tick()

    def _tick(self) -> None:
        # Receive completions of remote writes need no code of ours to happen, and neither a
        # NIC without a completion channel nor the soft device signals them: poll, quickly
        # while writes arrive, backing off to _IDLE_POLL_S when none do.
        if self._closed or self._loop is None:
            return
        self._delay = _BUSY_POLL_S if self.drain() else min(self._delay * 2, _IDLE_POLL_S)
        self._poller = self._loop.call_later(self._delay, self._tick)

    def allocate(self, length: int) -> memoryview:
        """Memory peers can write once it is exposed (the soft fabric, or pages on a NIC)."""
        return self.device.allocate(length)

    def statistics(self) -> VerbsReceiverStatistics:
        return VerbsReceiverStatistics(
            sessions=len(self._sessions),
            fenced_mrs=self._fenced,
            dropped_arrivals=self._dropped,
            lies=self._lies,
            superseded=self._superseded,
            acks_sent=self._acks_sent,
        )

    # ------------------------------------------------------------------ the exchange
    def frame(self, ps: PeerSession, payload: bytes) -> None:
        """A VERBS frame from a sender: its endpoint, once per session. Anything else (a
        malformed message, a region, a second endpoint) is a protocol violation: the control
        connection is closed (which retires the session)."""
        try:
            message = decode_verbs_message(payload)
        except VerbsMessageError as exc:
            ps.connection.close(f"verbs: {exc}")
            return
        old = self._sessions.get(ps.peer)
        if not isinstance(message, VerbsEndpoint) or (old is not None and old.ps is ps):
            ps.connection.close("verbs: a sender sends one endpoint per session")
            return
        if not ps.current:
            return
        if old is not None:
            self._retire_now(old)
        try:
            local = self.device.endpoint(ps.peer)
            self.device.connect(ps.peer, message)
            # one ring's memory per peer, reused by its sessions (each under a new MR): a
            # reconnecting peer does not grow the fabric
            ring = self._rings.get(ps.peer)
            if ring is None:
                ring = self._rings[ps.peer] = self.device.allocate(self._slots * NOTICE.size)
            ring[:] = bytes(len(ring))
            region = self.device.exposures.expose(
                ps.peer, ps.session, NOTICE_SEGMENT, ring, offset=0, length=len(ring)
            )
        except (InvalidArgument, InvalidEntry, self._rdma_error) as exc:
            ps.connection.close(f"verbs: QP setup failed: {exc}")
            return
        schema = min(message.schema, VERBS_SCHEMA)  # an old sender reads only its own schema
        rx = _Rx(ps=ps, ring=ring, ring_region=region, schema=schema)
        self._sessions[ps.peer] = rx
        ps.connection.publish(
            FrameKind.VERBS, encode_verbs_message(attrs.evolve(local, schema=schema))
        )
        for exposure in self._segments.exposures(ps.peer, ps.session):
            self._register(rx, exposure)
        self._offer(rx)  # once, for all of them: the ring goes out behind every region

    def _granted(self, rx: _Rx) -> bool:
        # Under credit: the session negotiated a version (its activation, with the initial
        # grant, went out before these frames on the same ordered stream), or it never sent a
        # credit frame (an uncredited sender, admitted uncredited as on TCP). A negotiation
        # under way defers the rkeys.
        endpoint = rx.ps.endpoint
        if self._credit is None or endpoint is None:
            return True
        stats = endpoint.statistics()
        return stats.version != 0 or stats.messages_received == 0

    def _offer(self, rx: _Rx) -> None:
        """Send the rkeys not yet sent, if the session is under credit; else retry shortly.

        The notice ring's region goes out last, once every region registered so far went out:
        a sender posts once it holds the ring (``VerbsRail.ready``) and the frames arrive in
        order, so a ready sender holds every region registered by then (a later exposure's
        goes out ahead of its descriptors: :meth:`expose`, then the engine publishes them).
        With the ring first, a sender whose read split the frames after the ring posted to a
        region it did not hold yet, and its device refused the write (seen under load in the
        transport tests). A frame the connection could not take goes out again shortly."""
        if rx.retiring or not rx.ps.current:
            return
        if not self._granted(rx):
            self._offer_soon()
            return
        publish = rx.ps.connection.publish

        def encoded(region: VerbsRegion) -> bytes:
            return encode_verbs_message(attrs.evolve(region, schema=rx.schema))

        for exposure_id, region in rx.regions.items():
            if exposure_id not in rx.offered and publish(FrameKind.VERBS, encoded(region)):
                rx.offered.add(exposure_id)
        unsent = any(exposure_id not in rx.offered for exposure_id in rx.regions)
        if not rx.ring_offered and not unsent:
            rx.ring_offered = publish(FrameKind.VERBS, encoded(rx.ring_region))
        if unsent or not rx.ring_offered:
            self._offer_soon()

    def _offer_soon(self) -> None:
        if self._offer_timer is None and self._loop is not None:
            self._offer_timer = self._loop.call_later(0.005, self._offer_all)

    def _offer_all(self) -> None:
        self._offer_timer = None
        for rx in list(self._sessions.values()):
            self._offer(rx)

    def expose(self, exposure: Exposure) -> None:
        """Register an MR for a new exposure of a connected session and offer its rkey."""
        rx = self._sessions.get(exposure.peer)
        if rx is None or rx.ps.session != exposure.session or exposure.exposure_id in rx.regions:
            return  # registered at the exchange, from the segment table
        self._register(rx, exposure)
        self._offer(rx)

    def _register(self, rx: _Rx, exposure: Exposure) -> None:
        view = self._segments.segment(exposure.segment_id).view
        rx.regions[exposure.exposure_id] = self.device.exposures.expose(
            exposure.peer,
            exposure.session,
            exposure.segment_id,
            view,
            offset=exposure.offset,
            length=exposure.length,
            readable=bool(exposure.access & Access.READ),
        )

    def revoke(self, exposure: Exposure) -> None:
        """Deregister a revoked exposure's MR: its rkey is invalid at once."""
        rx = self._sessions.get(exposure.peer)
        region = None if rx is None else rx.regions.pop(exposure.exposure_id, None)
        if rx is not None:
            rx.offered.discard(exposure.exposure_id)
        if rx is not None and region is not None:
            with contextlib.suppress(InvalidEntry):
                self.device.exposures.release(exposure.peer, region)

    # ------------------------------------------------------------------ arrivals
    def drain(self) -> int:
        """Admit every completed WRITE_WITH_IMM (bounded batches until none is left); returns
        how many arrived."""
        seen = 0
        while not self._closed:
            arrivals = self.device.poll_arrivals(_POLL_BATCH)
            seen += len(arrivals)
            for arrival in arrivals:
                self._arrival(arrival)
            if len(arrivals) < _POLL_BATCH:
                break
        for rx in list(self._sessions.values()):
            self._send_acks(rx)
        return seen

    def _ack(self, rx: _Rx, sequence: int, outcome: AckOutcome) -> None:
        """Settle the write of notice ``sequence`` (every earlier one is settled already)."""
        if rx.schema < 2:
            return  # an old sender completes at its HCA's completion; it cannot read acks
        last = rx.acks[-1] if rx.acks else None
        if outcome is AckOutcome.ADMITTED and last is not None and last.outcome is outcome:
            rx.acks[-1] = attrs.evolve(last, through=sequence + 1)  # cumulative: coalesce
        else:
            rx.acks.append(VerbsAck(session=rx.ps.session, through=sequence + 1, outcome=outcome))

    def _send_acks(self, rx: _Rx) -> None:
        # in order; a refused publish (full queue) is retried on the next drain, and the
        # acks are cumulative, so nothing is lost by waiting
        while rx.acks and rx.ps.current:
            if not rx.ps.connection.publish(FrameKind.VERBS, encode_verbs_message(rx.acks[0])):
                return
            rx.acks.popleft()
            self._acks_sent += 1

    def _arrival(self, a: WriteArrival) -> None:
        rx = self._sessions.get(a.peer)
        if rx is None or rx.retiring:
            self._dropped += 1  # a fenced session's write: never admitted, never announced
            return
        if rx.pending is None:
            self._notice(rx, a)
            return
        notice, rx.pending = rx.pending, None
        sequence = rx.expect - 1  # the notice's, counted from the session's first
        if a.write_id != notice.write_id or a.length != notice.length:
            self._lie(rx, sequence, "the write does not match its notice")
            return
        ps = rx.ps
        view = self._segments.check(
            ps.peer,
            ps.session,
            segment_id=notice.segment,
            offset=notice.offset,
            length=notice.length,
            access=Access.WRITE,
        )
        if view is None:
            self._lie(rx, sequence, "the notice claims a range outside its exposures")
            return
        request = Request(
            opcode=int(WireOpcode.WRITE),
            flags=Flags.CREDITED if notice.credited else Flags.NONE,
            qos_class=notice.qos_class,
            write_id=notice.write_id,
            request=notice.sequence,
            segment=notice.segment,
            offset=notice.offset,
            length=notice.length,
            session=ps.session,
            # the QP and the ring belong to this session: the lease is this session's
            lease_session=0 if self._credit is None else self._credit.session.value,
            epoch=ps.epoch,
            checksum=notice.checksum,
            charge=(
                notice.data_bytes,
                notice.request_slots,
                notice.staging_slots,
                notice.consumer_slots,
            ),
            slice_index=notice.slice_index,
        )
        reason = self._receiver.admit(ps.peer, ps.session, request)
        if reason is not None:
            self._lie(rx, sequence, reason)
            return
        if checksum(view) != notice.checksum:
            if self._overwritten(rx, notice, sequence):
                self._superseded += 1
                self._receiver.aborted(ps.peer, ps.session, request, "superseded")
                self._ack(rx, sequence, AckOutcome.SUPERSEDED)
                return
            self._receiver.aborted(ps.peer, ps.session, request, "checksum mismatch")
            self._lie(rx, sequence, "the payload's CRC32C differs from its notice")
            return
        self._receiver.landed(ps.peer, ps.session, request)
        self._ack(rx, sequence, AckOutcome.ADMITTED)

    def _overwritten(self, rx: _Rx, notice: Notice, sequence: int) -> bool:
        """Whether a later notice of the session, already in the ring, claims a range that
        overlaps ``notice``'s: then its write may have replaced these bytes (RC: a notice lands
        before its data; the ring is never lapped by unread notices, see ``_slots``)."""
        end = notice.offset + notice.length
        for later in range(sequence + 1, sequence + self._slots):
            slot = later % self._slots
            try:
                other = Notice.unpack(rx.ring[slot * NOTICE.size : (slot + 1) * NOTICE.size])
            except NoticeError:
                return False  # not landed yet (or torn): the landed run ends here
            if other.sequence != later & 0xFFFFFFFF:
                return False  # an older lap's notice: nothing later has landed
            if other.segment == notice.segment and (
                other.offset < end and notice.offset < other.offset + other.length
            ):
                return True
        return False

    def _notice(self, rx: _Rx, a: WriteArrival) -> None:
        if a.write_id != rx.expect & 0xFFFFFFFF or a.length != NOTICE.size:
            self._lie(rx, rx.expect, "a notice out of sequence")
            return
        slot = rx.expect % self._slots
        try:
            notice = Notice.unpack(rx.ring[slot * NOTICE.size : (slot + 1) * NOTICE.size])
        except NoticeError as exc:
            self._lie(rx, rx.expect, str(exc))
            return
        if notice.sequence != rx.expect & 0xFFFFFFFF:
            self._lie(rx, rx.expect, "a notice of another sequence number")
            return
        rx.expect += 1
        rx.pending = notice

    def _lie(self, rx: _Rx, sequence: int, reason: str) -> None:
        self._lies += 1
        rx.retiring = True  # nothing more of this session is admitted
        self._ack(rx, sequence, AckOutcome.REFUSED)
        self._send_acks(rx)  # before the close (the connection writes its queue out)
        self._receiver.refused(rx.ps.peer, rx.ps.session, None, f"verbs: {reason}")

    # ------------------------------------------------------------------ fencing
    async def retire(self, peer: int, session: int) -> None:
        """The control service retires (peer, session): see the module's point 4."""
        rx = self._sessions.get(peer)
        if rx is not None and rx.ps.session == session:
            self._retire_now(rx)

    def _retire_now(self, rx: _Rx) -> None:
        peer = rx.ps.peer
        rx.retiring = True
        self._fenced += self.device.exposures.fence(peer, rx.ps.session)  # rkeys invalid now
        self.device.retire(peer)  # ERR: posted receives flush
        self.drain()  # what completed before the fence is dropped, not admitted
        with contextlib.suppress(InvalidEntry):
            self.device.forget(peer)
        if self._sessions.get(peer) is rx:
            del self._sessions[peer]

    async def close(self) -> None:
        self._closed = True
        for timer in (self._offer_timer, self._poller):
            if timer is not None:
                timer.cancel()
        self.device.close()

    # ------------------------------------------------------------ ReceiverHalf protocol

    async def listen(self, host: str, port: int) -> tuple[str, int] | None:
        """No listener: the exchange rides the control connection (peers get its address)."""
        return None

    def take_frame(self, session: PeerSession, payload: bytes) -> bool:
        """Every VERBS frame is this half's (a bad one closes the session in :meth:`frame`)."""
        self.frame(session, payload)
        return True

    def data_statistics(self) -> DataServerStatistics | None:
        """No listener, so no listener counters (see :meth:`statistics`)."""
        return None
