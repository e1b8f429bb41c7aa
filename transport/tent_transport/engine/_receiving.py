"""The receiver side of an engine: sessions, write admission, landing, release, quarantine.

It is the :class:`~tent_transport.devices.DataPlane` of every receiver half of the engine's
transport (the same rules whatever the transport) and the
:class:`~tent_transport.control.ReceiverHooks` of its control listener. Every credit decision is
a call into ``tent_credit`` (``CreditReceiver.admit_write``, ``release``); what it adds is the
transport's part of a lease (docs/transport_design.md#leases):

1. A CREDITED write must name this receiver's credit session and the epoch of the data
   connection's control session, and its DATA_BYTES must be exactly its length (the lease
   covers the bytes that will land); then ``admit_write`` decides.
2. An uncredited write is admitted only where no credit protocol was negotiated for the
   session (credit off here, or the legacy fallback), and never staged (the staging pool is
   leased: a credited staged write charges exactly one STAGING_SLOTS, a direct one none): a
   sender that negotiated credit and then writes around it is refused like any other liar.
3. A landed write's charge (DATA_BYTES, CONSUMER_SLOTS and its REQUEST_SLOTS) comes back only
   when the application calls :meth:`ReceiverSide.release` (its consumer is done): landed
   data holds its request until it is consumed, as the spec's ``consumer_release`` frees all
   that landed. A write that will never land whole
   (integrity failure, connection lost mid-payload) is released by the transport at once,
   since no consumer will ever see it.
4. A refused write quarantines the sender: its data connections and its control connection
   are closed, and it cannot connect again (``admit_peer``) until the engine is restarted.
   Not a write of a session that is no longer the sender's current one (bytes sent before a
   reconnect or a restart, still arriving while the old session is retired): that one is
   refused and its connection closed, but it is stale, not a lie.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from collections.abc import Awaitable, Callable

import attrs

from tent_credit import CreditReceiver, CreditResource, TransferBook
from tent_credit.errors import CreditError

from ..control import ControlServer, FrameKind, PeerSession
from ..devices import Flags, ReceiverHalf, Request
from ..segments import SegmentTable, encode_descriptors
from . import _heap
from ._staging import StagingPath
from ._transfers import TOO_MANY_TRANSFERS, Transfers

EARLY_GRANT_FROM = 256 << 10
"""A write of at least this many bytes sends the top-up its admission made at once, before its
payload arrives (at 2 GB/s a 4 MiB payload takes 2 ms): a lone sender's next write then has
its credit before this one completes. A smaller one's top-up goes with its landing: sent at the
header it woke the sender twice per write, once for the update and once for the acknowledgement
(13-16 µs more CPU per 4 KiB transfer at each end, docs/benchmarks.md#control-admission-flush)."""

__all__ = ["DataLanded", "ReceiverSide", "ReceiverStatistics"]

_R = CreditResource
_RESOURCES = tuple(sorted(CreditResource))  # a lease's charge slot i is resource value i + 1


def _charged(request: Request) -> dict[CreditResource, int]:
    """The resources a write's lease charges, by resource (a tuple lookup per slot, not an
    enum call: this runs for every credited write admitted and landed)."""
    return {_RESOURCES[i]: a for i, a in enumerate(request.charge) if a}


# The refusal of a legacy peer's write by a receiver that requires credit (not quarantined).
LEGACY_REFUSED = "an uncredited write to a receiver that requires credit"

INTEGRITY_FAILURES = 16
"""CRC32C failures a sender may cost the receiver before it is quarantined (issue 27 item 5):
each one is a full payload read for nothing. A leaky bucket per sender: a failure adds one,
every ``INTEGRITY_REFUND`` verified writes take one away, so a sender reaches the bound with
16 failures in a row, or one failure in fewer than 64 writes for long, never with the rare
corruption of an honest link."""
INTEGRITY_REFUND = 64


@attrs.frozen(kw_only=True)
class DataLanded:
    """A write landed and verified in a registered segment (the data-landed notification).

    Pass it to :meth:`Engine.release` once the consumer is done with the bytes.
    """

    sender: int
    segment: int
    offset: int
    length: int
    write_id: int
    landed_id: int


@attrs.frozen(kw_only=True)
class ReceiverStatistics:
    landed: int
    released: int
    aborted: int
    refused: int
    quarantined: tuple[int, ...]
    unreleased: int
    stale_refused: int = 0
    """Refused writes of a session no longer current (not quarantined; counted in ``refused``)."""
    notifications_dropped: int = 0
    """Landed-write notifications not queued because ``max_pending_landed`` were waiting
    (only ones with nothing to release: uncredited, or released on landing)."""
    transfers_held: int = 0
    """Credited transfers the receiver holds state for (open, or landed and not released):
    at most the slot credit their senders hold (``_transfers``)."""
    legacy_refused: int = 0
    """Uncredited writes of a peer that never negotiated credit, refused because this receiver
    requires credit and has no legacy fallback (counted in ``refused``; not quarantined)."""
    heap_trims: int = 0
    """Times the heap was given back to the operating system after sessions retired
    (``malloc_trim``; 0 where the C library has none or ``EngineOptions.trim_heap`` is off)."""


@attrs.define
class _Held:
    peer: int
    qos: int
    epoch: int
    amounts: dict[CreditResource, int]


class ReceiverSide:
    """The receiving half of one engine (loop thread only, except :meth:`release` via the
    engine, which hops onto the loop)."""

    def __init__(
        self,
        *,
        credit: CreditReceiver | None,
        segments: SegmentTable,
        release_on_landing: bool = False,
        on_landed: Callable[[DataLanded], None] | None = None,
        max_pending_landed: int = 65_536,
        legacy_writes: bool = True,
        trim_heap: bool = True,
    ) -> None:
        """``legacy_writes``: admit the uncredited writes of a peer that never negotiated
        credit (inside the regions exposed to it). ``False`` for a receiver whose credit mode
        is ``required`` without ``required_fallback``: such a write is refused (RFC
        "Required mode must reject or take an explicit configured fallback").
        ``trim_heap``: after a session retires, give the heap it freed back to the operating
        system (``_heap.HeapTrim``; ``EngineOptions.trim_heap``)."""
        if type(max_pending_landed) is not int or max_pending_landed < 1:
            raise ValueError(f"max_pending_landed must be an int >= 1: {max_pending_landed!r}")
        self._max_pending = max_pending_landed
        self._legacy_writes = bool(legacy_writes)
        self._legacy_refused = 0
        self._dropped = 0
        self.credit = credit
        self.segments = segments
        self.control: ControlServer | None = None
        self.staging: StagingPath | None = None
        self.halves: list[ReceiverHalf] = []
        """The transport's receiver halves (the engine sets them once it has built them)."""
        self._release_on_landing = release_on_landing
        self._on_landed = on_landed
        self._quarantined: set[int] = set()
        # per sender: its CRC32C failures, in 1/INTEGRITY_REFUND units (a leaky bucket)
        self._corrupt: dict[int, int] = {}
        self._held: dict[int, _Held] = {}
        # state per transfer, bounded by the sender's slot credit (_transfers); None without
        # credit or without a slot resource: then each write is announced on its own
        self._transfers: Transfers | None = None
        if credit is not None:
            book = TransferBook(credit.allocator)
            if book.slot_resources:
                self._transfers = Transfers(book, self._release)
        self._ids = itertools.count(1)
        self._queue: collections.deque[DataLanded] = collections.deque()
        self._queue_event = asyncio.Event()
        self._landed = self._released = self._aborted = self._refused = self._stale = 0
        self._trim_heap = bool(trim_heap)
        self._heap: _heap.HeapTrim | None = None  # made on the loop, at the first retirement

    # ---------------------------------------------------------------- ReceiverHooks

    def session_opened(self, session: PeerSession) -> None:
        self.publish_descriptors(session.peer)

    def retire_session(self, peer: int, session: int) -> Awaitable[None]:
        async def retire() -> None:
            self.segments.revoke_session(peer, session)
            # verbs: MRs gone, QP in ERR and drained
            await asyncio.gather(*(half.retire(peer, session) for half in self.halves))
            if self._transfers is not None:  # a transfer not whole by now never will be
                self._transfers.retire(peer, session)
            if self._trim_heap:
                if self._heap is None:
                    self._heap = _heap.HeapTrim(asyncio.get_running_loop(), trim=_heap.malloc_trim)
                self._heap.request()

        return retire()

    def close(self) -> None:
        """Cancel a pending heap trim (the engine is closing)."""
        self._trim_heap = False
        if self._heap is not None:
            self._heap.close()

    def verbs_frame(self, session: PeerSession, payload: bytes) -> None:
        """A sender's transport frame (the control service's VERBS frames: the verbs exchange),
        for the first receiver half that takes it."""
        if not any(half.take_frame(session, payload) for half in self.halves):
            session.connection.close("no verbs on this receiver")

    def admit_peer(self, peer: int) -> bool:
        return peer not in self._quarantined

    def flooded(self, peer: int) -> None:
        """The peer kept over its control-frame rate (its flooding connection is closing):
        quarantined, and a newer session of it, if any, closed too (it cannot come back)."""
        self._quarantined.add(peer)
        ps = None if self.control is None else self.control.session_of(peer)
        if ps is not None:
            ps.connection.close("quarantined: control flood")  # idempotent; retires its data

    # ---------------------------------------------------------------- DataPlane

    def bound_session(self, peer: int) -> tuple[int, bytes] | None:
        ps = None if self.control is None else self.control.session_of(peer)
        return None if ps is None else (ps.session, ps.data_key)

    def quarantined(self, peer: int) -> bool:
        return peer in self._quarantined

    def admit(self, peer: int, session: int, request: Request) -> str | None:
        ps = None if self.control is None else self.control.session_of(peer)
        if ps is None or ps.session != session:
            return "no live control session"
        credit = self.credit
        negotiated = ps.endpoint is not None and ps.endpoint.version != 0
        staged = bool(request.flags & Flags.STAGED)
        if not request.flags & Flags.CREDITED:
            if staged:
                # the staging pool is leased: a slot taken without STAGING_SLOTS credit is one
                # a credited staged write was promised, and its sender would be refused
                return "a staged write without a lease"
            if negotiated:
                return "an uncredited write in a credit session"
            return None if self._legacy_writes else LEGACY_REFUSED
        if credit is None or not negotiated:
            return "a credited write where no credit was negotiated"
        if request.lease_session != credit.session.value or request.epoch != ps.epoch:
            return "lease of another receiver session or epoch"
        amounts = _charged(request)
        if amounts.get(_R.DATA_BYTES) != request.length:
            return "the lease's DATA_BYTES differ from the write's length"
        if amounts.get(_R.STAGING_SLOTS, 0) != (1 if staged else 0):
            return "a staged write leases exactly one staging slot, a direct one none"

        def admit_write() -> str | None:
            assert credit is not None
            admission = credit.admit_write(peer, request.qos_class, request.epoch, amounts)
            if admission.reason is not None:
                return admission.reason.value
            if request.length >= EARLY_GRANT_FROM:
                self._send_top_ups()  # its payload is still to come for a while
            return None

        if self._transfers is None:
            return admit_write()
        reason = self._transfers.admit(peer, session, request, admit_write)
        if reason == TOO_MANY_TRANSFERS:  # refused as any write past its credit
            credit.quarantine(peer, request.qos_class)
        return reason

    def refused(self, peer: int, session: int, request: Request | None, reason: str) -> None:
        self._refused += 1
        if reason == LEGACY_REFUSED:
            # A rollout mismatch, not a lie: the peer runs without credit against a receiver
            # that requires it. Its write is refused and its data connection closed; it is
            # not shut out, so it comes back once it is configured for credit.
            self._legacy_refused += 1
            return
        if not self._quarantine(peer, session, reason):
            # A data connection of a session already superseded or closed: its retirement (a
            # task) has not closed it yet, and bytes the sender sent before it reconnected or
            # restarted still arrive. Refused all the same (the connection closes, nothing
            # lands), but stale, not a lie: quarantining would shut out the sender's new,
            # honest session.
            self._stale += 1

    def _quarantine(self, peer: int, session: int, reason: str) -> bool:
        """Quarantine ``peer`` if ``session`` is its current one (``False``: it is not)."""
        ps = None if self.control is None else self.control.session_of(peer)
        if ps is None or ps.session != session:
            return False
        self._quarantined.add(peer)
        ps.connection.close(f"quarantined: {reason}")  # retires the session's data too
        return True

    def integrity_failed(self, peer: int, session: int, request: Request) -> None:
        """A write's payload failed its CRC32C: released as :meth:`aborted`; past
        ``INTEGRITY_FAILURES`` (a leaky bucket) the sender is quarantined."""
        self.aborted(peer, session, request, "checksum mismatch")
        level = self._corrupt.get(peer, 0) + INTEGRITY_REFUND
        if level < INTEGRITY_FAILURES * INTEGRITY_REFUND:
            self._corrupt[peer] = level
        elif self._quarantine(peer, session, f"{INTEGRITY_FAILURES} checksum failures"):
            self._corrupt.pop(peer, None)

    def landed(self, peer: int, session: int, request: Request) -> None:
        if self._corrupt and peer in self._corrupt:  # a verified write pays back a little
            self._corrupt[peer] -= 1
            if not self._corrupt[peer]:
                del self._corrupt[peer]
        amounts = _charged(request)
        self._write_landed(peer, session, request, amounts)
        self._send_top_ups()  # after its release on landing, if any: nothing owed then

    def _send_top_ups(self) -> None:
        # An admitted write counts as landed: its key's top-up (grant-ahead) may be due, and
        # must not wait for the consumer's release (which may not come while the consumer
        # holds what landed) to be sent. At the end of this callback (flush_soon): a small
        # write's landing, release and acknowledgement then go with it, not after it. A
        # landing that left the line's head held for its own release sends nothing, but its
        # flush arms the hold's timer (CreditReceiver.needs_flush; the engine test of a
        # consumer that holds every block, with the hold on).
        credit = self.credit
        if self.control is not None and credit is not None and credit.needs_flush:
            self.control.flush_soon()

    def _write_landed(
        self, peer: int, session: int, request: Request, amounts: dict[CreditResource, int]
    ) -> None:
        """A write landed whole with ``amounts`` of its charge still held: announced on its
        own, or as part of its transfer once that is whole (``_transfers``)."""
        if not request.flags & Flags.CREDITED or self._transfers is None:
            held = None
            if request.flags & Flags.CREDITED:
                held = _Held(peer=peer, qos=request.qos_class, epoch=request.epoch, amounts=amounts)
            self._announce(
                peer, request.segment, request.offset, request.length, request.write_id, held
            )
            return
        outcome = self._transfers.landed(peer, session, request, amounts)
        if isinstance(outcome, str):  # its slices lied about the transfer they form
            self._refused += 1
            self._quarantine(peer, session, outcome)
        elif outcome is not None:
            held = _Held(peer=peer, qos=outcome.qos, epoch=outcome.epoch, amounts=outcome.amounts)
            self._announce(
                peer, outcome.segment, outcome.offset, outcome.length, outcome.first_write_id, held
            )

    def _announce(  # noqa: PLR0917 (the notification's fields)
        self, peer: int, segment: int, offset: int, length: int, write_id: int, held: _Held | None
    ) -> None:
        self._landed += 1
        landed_id = next(self._ids)
        if held is not None:
            self._held[landed_id] = held
        event = DataLanded(
            sender=peer,
            segment=segment,
            offset=offset,
            length=length,
            write_id=write_id,
            landed_id=landed_id,
        )
        if self._release_on_landing:
            self.release(event)
        if self._on_landed is not None:
            self._on_landed(event)
        elif len(self._queue) >= self._max_pending and landed_id not in self._held:
            # An application that never takes its notifications (or a peer's flood of tiny
            # uncredited writes) must not grow this queue without end. An event whose charge
            # is still held is always queued: the consumer needs it to release, and the
            # sender's slot credit bounds how many of those exist (_transfers).
            self._dropped += 1
        else:
            self._queue.append(event)
            self._queue_event.set()

    def aborted(self, peer: int, session: int, request: Request, reason: str) -> None:
        self._aborted += 1
        if request.flags & Flags.CREDITED:
            amounts = _charged(request)
            self._release(peer, request.qos_class, request.epoch, amounts)
            if self._transfers is not None:  # the rest of its transfer is dropped too
                self._transfers.aborted(peer, session, request)

    # ---------------------------------------------------------------- the staged path

    def staging_slot(self, request: Request) -> tuple[int, memoryview] | None:
        return None if self.staging is None else self.staging.slot(request.length)

    def staging_free(self, slot: int) -> None:
        if self.staging is not None:
            self.staging.free_slot(slot)

    def staged(
        self, peer: int, session: int, request: Request, slot: int, finish: Callable[[bool], None]
    ) -> None:
        assert self.staging is not None

        def done(ok: bool, detail: str) -> None:
            if ok:
                # the slot is free again: its STAGING_SLOTS go back now; the rest of the
                # charge is held for the consumer like a direct write's
                amounts = _charged(request)
                slots = amounts.pop(_R.STAGING_SLOTS, 0)
                self._release(peer, request.qos_class, request.epoch, {_R.STAGING_SLOTS: slots})
                self._write_landed(peer, session, request, amounts)
            else:
                self.aborted(peer, session, request, f"inner transfer failed: {detail}")
            finish(ok)

        self.staging.move(slot, request.segment, request.offset, request.length, done)

    # ---------------------------------------------------------------- the application

    def release(self, event: DataLanded) -> bool:
        """The consumer is done with ``event``'s bytes: DATA_BYTES and CONSUMER_SLOTS go back
        to the allocator. Returns ``False`` for an event already released (or uncredited)."""
        held = self._held.pop(event.landed_id, None)
        if held is None:
            return False
        if self._transfers is not None:
            self._transfers.book.closed(held.peer, held.qos, held.epoch)
        self._released += 1
        self._release(held.peer, held.qos, held.epoch, held.amounts)
        return True

    def _release(self, peer: int, qos: int, epoch: int, amounts: dict[CreditResource, int]) -> None:
        amounts = {r: a for r, a in amounts.items() if a}
        if self.credit is None or not amounts:
            return
        try:
            self.credit.release(peer, qos, epoch, amounts)
        except CreditError:
            return  # a quarantined or forgotten epoch: its capacity was reclaimed already
        if self.control is not None:
            self.control.flush()

    async def next_landed(self) -> DataLanded:
        while not self._queue:
            self._queue_event.clear()
            await self._queue_event.wait()
        return self._queue.popleft()

    def pending_landed(self) -> int:
        return len(self._queue)

    def publish_descriptors(self, peer: int) -> bool:
        """Send the peer's current exposures (a full, newer-generation set)."""
        ps = None if self.control is None else self.control.session_of(peer)
        if ps is None:
            return False
        message = self.segments.descriptors(peer, ps.session)
        return ps.connection.publish(FrameKind.DESCRIPTORS, encode_descriptors(message))

    def statistics(self) -> ReceiverStatistics:
        return ReceiverStatistics(
            landed=self._landed,
            released=self._released,
            aborted=self._aborted,
            refused=self._refused,
            quarantined=tuple(sorted(self._quarantined)),
            unreleased=len(self._held),
            stale_refused=self._stale,
            notifications_dropped=self._dropped,
            transfers_held=0 if self._transfers is None else self._transfers.book.total_held(),
            legacy_refused=self._legacy_refused,
            heap_trims=0 if self._heap is None else self._heap.trims,
        )
