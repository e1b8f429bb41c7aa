"""The sender's verbs rail: a :class:`VerbsDevice` behind the Device protocol, plus the QP
exchange over the control connection and the in-band write notices (:mod:`._notice`).

Every WRITE slice is posted as two WRs in one chain: the 64-byte notice into the session's
notice ring, then the data as WRITE_WITH_IMM carrying the write id. The budget the dispatch core
sees is half the device's, and the notice's completion is not reported (the data's is; if the
notice fails, RC moves the QP to ERR and the data is flushed, so it reports that).

**A WRITE completes only when the receiver admitted it**
(docs/transport_design.md#transport-rule-5). The HCA's success says the bytes reached the receiver's
memory, not that the receiver admitted them: it has not even looked yet, and a session that ends now
drops the write unannounced while the fence gives its credit back. So a successful data completion
is *held* until the receiver's :class:`~tent_transport.devices.verbs.VerbsAck` covers its notice:
ADMITTED
reports it as it is, SUPERSEDED as ``INTEGRITY_ERROR``, REFUSED as ``WRITE_REFUSED``. When the
session ends first (detach, a new session), every held write is reported ``FLUSHED`` ("fenced:
..."), never SUCCESS; it may have been admitted just before the end (its ack lost with the
connection), so a failure means "not known to be admitted", a success always means "admitted". A
failed data completion is reported at once, as before.

Staged writes are refused on this rail (``PostRefused(ready=True)``: the core fails them):
staging needs receiver code between landing and the target, which a one-sided write has not.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from tent_credit import CreditResource

from ...errors import InvalidEntry, PostRefused, RemoteProtocolError
from .._base import Opcode, SliceCompletion, SliceRequest, SliceStatus
from .._halves import AttachRefused, RailStatistics, SessionContext
from .._writes import checksum
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
from ._notice import NOTICE, NOTICE_SEGMENT, Notice, slot_amount
from .device import VerbsDevice, VerbsDeviceConfig

__all__ = ["VerbsRail"]

_R = CreditResource
_NOTICE_WR = 1 << 62  # notice wr_ids live above every wr_id the dispatch core chooses
UNACKNOWLEDGED = "fenced: the session ended before the receiver acknowledged the write"
_OUTCOME = {
    AckOutcome.SUPERSEDED: (
        SliceStatus.INTEGRITY_ERROR,
        "superseded: a later write of this sender into an overlapping range landed before the "
        "receiver admitted this one",
    ),
    AckOutcome.REFUSED: (SliceStatus.WRITE_REFUSED, "refused by the receiver's admission"),
}


@attrs.define(eq=False)
class _Link:
    session: int
    ring: VerbsRegion | None = None
    sequence: int = 0
    remote: asyncio.Future[VerbsEndpoint] | None = None
    acked: int = 0  # every notice below this is settled by the receiver
    held: dict[int, SliceCompletion] = attrs.field(factory=dict)  # sequence -> HCA success
    outcomes: dict[int, AckOutcome] = attrs.field(factory=dict)  # settled before its HCA's
    ended: bool = False  # the session is over: no acknowledgement will come


class VerbsRail:
    """One verbs rail of a sending engine (Device protocol + ``attach``/``detach``)."""

    def __init__(
        self, backend: VerbsBackend, config: VerbsDeviceConfig, *, name: str, rail: int
    ) -> None:
        self.device = VerbsDevice(backend, config, name=name)
        self.rail = rail
        self.on_lost: Callable[[int], None] | None = None
        self._links: dict[int, _Link] = {}
        self._qps: set[int] = set()  # peers with a QP on the device (live or retired)
        self._notices: dict[int, bytearray] = {}  # notice wr_id -> its bytes (kept alive)
        self._peer_of: dict[int, tuple[int, Opcode]] = {}  # outstanding slice -> peer, opcode
        self._notice_ids = itertools.count(_NOTICE_WR)
        self._write_of: dict[int, tuple[_Link, int]] = {}  # data wr_id -> link, notice sequence
        self._ready: list[SliceCompletion] = []  # settled by an ack or a fence, not reported
        self._wakeup: Callable[[], None] | None = None
        self._posted = self._completed = self._failed = self._flushed = 0
        self._sent = self._read = 0

    # ------------------------------------------------------------------ Device protocol
    @property
    def name(self) -> str:
        return self.device.name

    @property
    def link_speed_gbps(self) -> float:
        return self.device.link_speed_gbps

    def ready(self, peer: int) -> bool:
        link = self._links.get(peer)
        return link is not None and link.ring is not None and self.device.post_budget(peer) > 0

    def post_budget(self, peer: int) -> int:
        return self.device.post_budget(peer) // 2 if self.ready(peer) else 0

    def post(self, slices: Sequence[SliceRequest], now_ns: int) -> None:
        """Post ``slices`` (one peer) with a notice ahead of every WRITE, in one chain.

        Raises :class:`PostRefused` (nothing posted): ``ready=False`` before the exchange is
        done, ``ready=True`` for a staged write, more than :meth:`post_budget`, or what the
        device refuses (see :meth:`VerbsDevice.post`).
        """
        if not slices:
            raise PostRefused("empty post", ready=True)
        peer = slices[0].peer
        link = self._links.get(peer)
        if link is None or link.ring is None or not self.ready(peer):
            raise PostRefused(f"peer {peer}'s verbs rail is not connected on {self.name}")
        if len(slices) > self.post_budget(peer):
            raise PostRefused(f"{len(slices)} slices exceed the budget", ready=True)
        slots = link.ring.length // NOTICE.size
        chain: list[SliceRequest] = []
        notices: dict[int, bytearray] = {}
        writes: dict[int, tuple[_Link, int]] = {}
        sequence = link.sequence
        for s in slices:
            if s.opcode is Opcode.WRITE:
                record = bytearray(self._notice(s, sequence))
                wr_id = next(self._notice_ids)
                notices[wr_id] = record
                chain.append(
                    SliceRequest(
                        wr_id=wr_id,
                        opcode=Opcode.WRITE,
                        peer=peer,
                        local=memoryview(record),
                        remote_segment=NOTICE_SEGMENT,
                        remote_offset=link.ring.offset + (sequence % slots) * NOTICE.size,
                        length=NOTICE.size,
                        lease=None,
                        write_id=sequence & 0xFFFFFFFF,
                    )
                )
                writes[s.wr_id] = (link, sequence)
                sequence += 1
            chain.append(s)
        self.device.post(chain, now_ns)  # all or nothing up to a mid-chain provider refusal
        link.sequence = sequence
        self._notices.update(notices)
        self._write_of.update(writes)
        self._peer_of.update((s.wr_id, (peer, s.opcode)) for s in slices)
        self._posted += len(slices)

    @staticmethod
    def _notice(s: SliceRequest, sequence: int) -> bytes:
        charge = dict(s.lease.charge) if s.lease is not None else {}
        if charge.get(_R.STAGING_SLOTS, 0):
            raise PostRefused("staged writes need receiver code: not over verbs", ready=True)
        try:
            return Notice(
                write_id=s.write_id,
                sequence=sequence & 0xFFFFFFFF,
                credited=s.lease is not None,
                segment=s.remote_segment,
                offset=s.remote_offset,
                length=s.length,
                data_bytes=charge.get(_R.DATA_BYTES, 0),
                qos_class=0 if s.lease is None else s.lease.qos_class,
                checksum=checksum(s.local),
                request_slots=slot_amount(charge.get(_R.REQUEST_SLOTS, 0)),
                staging_slots=0,
                consumer_slots=slot_amount(charge.get(_R.CONSUMER_SLOTS, 0)),
                slice_index=s.slice_index,
            ).pack()
        except (ValueError, OverflowError) as exc:
            raise PostRefused(f"slice does not fit a notice: {exc}", ready=True) from exc

    def poll(self, max_entries: int, now_ns: int) -> list[SliceCompletion]:
        """Up to ``max_entries`` data completions (notices' are consumed, not reported): first
        the writes an acknowledgement or a fence settled, then the CQ's, a successful WRITE's
        held back until its acknowledgement (see the module)."""
        out = [self._settle(c, from_hca=False) for c in self._ready[:max_entries]]
        del self._ready[: len(out)]
        while len(out) < max_entries:
            room = max_entries - len(out)
            batch = self.device.poll(room, now_ns)
            for c in batch:
                if self._notices.pop(c.wr_id, None) is not None:
                    continue  # a notice's completion: never reported
                gated = self._gate(c)
                if gated is not None:
                    out.append(self._settle(gated, from_hca=True))
            if len(batch) < room:
                break  # the CQ is empty
        if self._ready:
            self._wake()  # more settled than this poll could take
        return out

    def _gate(self, c: SliceCompletion) -> SliceCompletion | None:
        """A data completion as the handle may see it, or ``None`` while it awaits its ack."""
        entry = self._write_of.pop(c.wr_id, None)
        if entry is None:  # a READ: local accounting only
            return c
        link, sequence = entry
        outcome = link.outcomes.pop(sequence, None)
        if outcome is not None:
            # The receiver refused or superseded it before its HCA completion came: that verdict
            # stands even when the HCA then reports a flush (the refusal closes the connection,
            # which takes the QP to ERR), so the sender learns why, not just that it failed.
            return self._settled(c, outcome)
        if not c.status.moved or sequence < link.acked:
            return c
        if link.ended:
            return attrs.evolve(c, status=SliceStatus.FLUSHED, detail=UNACKNOWLEDGED)
        link.held[sequence] = c
        return None

    @staticmethod
    def _settled(c: SliceCompletion, outcome: AckOutcome) -> SliceCompletion:
        status, detail = _OUTCOME[outcome]
        return attrs.evolve(c, status=status, detail=detail)

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup()

    def _end_link(self, link: _Link) -> None:
        """No acknowledgement will come for ``link``'s session: its held writes are fenced."""
        link.ended = True
        self._ready.extend(
            attrs.evolve(c, status=SliceStatus.FLUSHED, detail=UNACKNOWLEDGED)
            for _, c in sorted(link.held.items())
        )
        link.held.clear()
        # link.outcomes stays: the receiver's verdicts on writes whose HCA completion is still
        # to come (a flush, now) are known and are what those completions report (see _gate)
        if self._ready:
            self._wake()

    def _acknowledged(self, link: _Link, ack: VerbsAck) -> bool:
        """Apply the receiver's ack; ``False`` = a peer fault (it settles writes never posted,
        goes backwards, or re-settles a write)."""
        if ack.through > link.sequence or ack.through < link.acked:
            return False
        if ack.through == link.acked:
            return ack.outcome is AckOutcome.ADMITTED  # a repeat says nothing new
        for sequence in range(link.acked, ack.through):
            outcome = ack.outcome if sequence == ack.through - 1 else AckOutcome.ADMITTED
            held = link.held.pop(sequence, None)
            if held is None:  # its HCA completion is still to come (see _gate)
                if outcome is not AckOutcome.ADMITTED:
                    link.outcomes[sequence] = outcome
            elif outcome is AckOutcome.ADMITTED:
                self._ready.append(held)
            else:
                self._ready.append(self._settled(held, outcome))
        link.acked = ack.through
        if self._ready:
            self._wake()
        return True

    def _settle(self, c: SliceCompletion, *, from_hca: bool) -> SliceCompletion:
        peer, opcode = self._peer_of.pop(c.wr_id, (None, Opcode.WRITE))
        if from_hca and c.status is not SliceStatus.SUCCESS and peer is not None:
            self._failed_qp(peer)
        if c.status is SliceStatus.SUCCESS:
            self._completed += 1
            if opcode is Opcode.READ:
                self._read += c.length
            else:
                self._sent += c.length
        elif c.status is SliceStatus.FLUSHED:
            self._flushed += 1
        else:
            self._failed += 1
        return c

    def _failed_qp(self, peer: int) -> None:
        # RC moved the QP to ERR (a failed WR flushes the rest): under a live session the rail
        # would stay without a QP, so tell the owner, who restarts the session (a new QP),
        # as the TCP rail does for a lost data connection. Once per QP.
        link = self._links.get(peer)
        if link is None or link.ring is None:
            return
        link.ring = None
        if self.on_lost is None:
            return
        try:  # not from inside the dispatch core's poll pass
            asyncio.get_running_loop().call_soon(self.on_lost, peer)
        except RuntimeError:
            self.on_lost(peer)

    def next_completion_ns(self) -> int | None:
        return None

    def set_wakeup(self, callback: Callable[[], None] | None) -> None:
        self._wakeup = callback
        self.device.set_wakeup(callback)

    def close(self) -> None:
        self.device.close()

    def statistics(self) -> RailStatistics:
        return RailStatistics(
            posted=self._posted,
            completed=self._completed,
            failed=self._failed,
            flushed=self._flushed,
            bytes_sent=self._sent,
            bytes_read=self._read,
            outstanding=self._posted - self._completed - self._failed - self._flushed,
        )

    # ------------------------------------------------------------------ the exchange
    async def attach(
        self, peer: int, session: int, send: Callable[[bytes], bool], timeout_s: float = 5.0
    ) -> None:
        """Exchange endpoints with ``peer``'s receiver for control ``session`` over ``send``
        (VERBS frames) and bring the QP to RTS. A previous QP of the peer is retired and
        forgotten first (its slices flushed, its unacknowledged writes fenced). Raises
        ``TimeoutError``, or :class:`RemoteProtocolError` for a receiver of verbs schema 1 (it
        never acknowledges admission, so no write could complete truthfully); nothing is
        attached then.
        """
        await self._forget(peer, timeout_s)
        link = _Link(session=session)
        link.remote = asyncio.get_running_loop().create_future()
        self._links[peer] = link
        local = self.device.endpoint(peer)
        self._qps.add(peer)
        if not send(encode_verbs_message(local)):
            raise TimeoutError("control connection closed during the verbs exchange")
        remote = await asyncio.wait_for(link.remote, timeout_s)
        if remote.schema < VERBS_SCHEMA:
            raise RemoteProtocolError(
                f"peer {peer}'s verbs schema {remote.schema} has no write acknowledgements"
            )
        self.device.connect(peer, remote)

    async def open_session(self, peer: int, context: SessionContext) -> None:
        """The :class:`~tent_transport.devices.Rail` protocol: :meth:`attach` over the control
        connection. A receiver too old to acknowledge writes is :class:`AttachRefused`; any
        other failed exchange (a timeout, the connection gone) leaves the peer unattached and
        its transfers waiting for the next session, so it is not raised."""
        try:
            await self.attach(peer, context.session, context.send_frame)
        except RemoteProtocolError as exc:
            raise AttachRefused(f"verbs: {exc}") from exc
        except Exception:
            return

    def detach(self, peer: int) -> None:
        """The control session is gone: move the QP to ERR (outstanding slices flush)."""
        self.device.retire(peer)
        self.device.drop_regions(peer)
        link = self._links.get(peer)
        if link is not None:
            link.ring = None
            self._end_link(link)

    async def _forget(self, peer: int, timeout_s: float) -> None:
        old = self._links.pop(peer, None)
        if old is not None:
            self._end_link(old)
        if peer not in self._qps:
            return
        self.device.retire(peer)
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while True:
            with contextlib.suppress(InvalidEntry):
                self.device.forget(peer)
                self._qps.discard(peer)
                return
            if loop.time() > end:
                raise TimeoutError(f"peer {peer}'s old QP did not drain")
            await asyncio.sleep(0.002)  # the core polls the flushes on its wake-up

    def frame(self, peer: int, payload: bytes) -> bool:
        """A VERBS frame from ``peer``'s receiver; ``False`` = a peer fault (drop the session)."""
        link = self._links.get(peer)
        try:
            message: Any = decode_verbs_message(payload)
        except VerbsMessageError:
            return False
        if link is None:
            return True  # a message of a session being replaced
        if isinstance(message, VerbsEndpoint):
            if link.remote is None or link.remote.done():
                return False
            link.remote.set_result(message)
            return True
        if message.session != link.session:
            return True  # an older session's region or ack: ignored
        if isinstance(message, VerbsAck):
            return link.remote is not None and link.remote.done() and self._acknowledged(
                link, message
            )
        if message.segment == NOTICE_SEGMENT:
            if message.length < NOTICE.size or link.ring is not None:
                return False
            self.device.add_region(peer, message)
            link.ring = message
            return True
        try:
            self.device.add_region(peer, message)
        except Exception:  # TooManyRequests / InvalidEntry: the peer overran our tables
            return False
        return True
