"""The receiver's state per transfer, not per write (issue 27 item 1; docs/abuse.md).

A credited transfer arrives as slices: each charges its own DATA_BYTES, the last one also the
slot resources (REQUEST_SLOTS, CONSUMER_SLOTS), and all carry their index in the transfer, so
the receiver knows a transfer as ``(sender, session, write id of its first slice)``. Held per
write, a peer's tiny slot-less writes each kept a notification until the consumer released it
(hundreds of thousands for 8 consumer slots). So:

1. The first admitted slice of a transfer opens it, only while the sender's key holds a slot of
   credit for one more (:class:`tent_credit.TransferBook`); a slice that would open one past
   that is refused like any write past its credit: the key is quarantined in the credit core
   (``CreditReceiver.quarantine``) and the sender in the transport.
2. Its slices' charges add up in one record. When the slot-carrying slice and every slice
   before it are accounted for and their payloads tile one range, the transfer *completes*:
   one data-landed notification for the whole range, held until the consumer releases it.
3. A transfer with a slice that failed (checksum, lost connection) is dropped at once: every
   charge of it is released, nothing is announced, and its slices still arriving land without
   state and give their charge straight back (the last ``FAILED_REMEMBERED`` failed transfers
   are remembered). One whose slices do not tile a range (overlaps, gaps, more slices than its
   last index) is a lie: dropped the same way, and the sender is quarantined.
4. Transfers still open when their session is retired are dropped (their bytes never became a
   whole transfer).

Honest multi-slice transfers are unchanged for the sender; the consumer sees one notification
per transfer instead of one per slice.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from tent_credit import CreditResource, TransferBook

from ..devices import Request, first_write_id

__all__ = ["FAILED_REMEMBERED", "TOO_MANY_TRANSFERS", "Completed", "Transfers"]

_R = CreditResource
_SLOTS = (_R.REQUEST_SLOTS, _R.CONSUMER_SLOTS, _R.STAGING_SLOTS)
TOO_MANY_TRANSFERS = "a write opening more transfers than the sender holds slots for"
FAILED_REMEMBERED = 1024
"""Failed transfers whose late slices are recognised (and given back at once)."""

Amounts = dict[CreditResource, int]
Release = Callable[[int, int, int, Amounts], None]
"""``release(peer, qos, epoch, amounts)``: give a charge back to the allocator."""


@attrs.frozen(kw_only=True)
class Completed:
    """A transfer whose slices all landed and tile ``[offset, offset + length)``."""

    qos: int
    epoch: int
    segment: int
    offset: int
    length: int
    first_write_id: int
    amounts: Amounts


@attrs.define
class _Open:
    qos: int
    epoch: int
    segment: int
    pending: int = 0  # slices admitted whose payload is still arriving
    slices: int = 0  # slices landed
    last: int | None = None  # the index of the slot-carrying slice, once admitted
    mixed: bool = False  # slices in more than one segment
    low: int = -1
    high: int = -1
    landed_bytes: int = 0
    amounts: Amounts = attrs.Factory(dict)


def _add(into: Amounts, amounts: Amounts) -> None:
    for resource, amount in amounts.items():
        into[resource] = into.get(resource, 0) + amount


class Transfers:
    """The credited transfers of a receiver that are open (some slice admitted, not yet
    complete). Loop thread only."""

    def __init__(self, book: TransferBook, release: Release) -> None:
        self.book = book
        self._release = release
        self._open: dict[tuple[int, int, int], _Open] = {}
        self._failed: dict[tuple[int, int, int], None] = {}  # insertion-ordered, bounded
        self.lies = 0
        """Transfers dropped because their slices did not tile one range."""

    def open_count(self) -> int:
        return len(self._open)

    def admit(
        self, peer: int, session: int, request: Request, admit_write: Callable[[], str | None]
    ) -> str | None:
        """Admit one credited slice: the transfer bound first (nothing changes when it
        refuses), then ``admit_write`` (the credit core). ``None`` = admitted."""
        key = (peer, session, first_write_id(request.write_id, request.slice_index))
        entry = self._open.get(key)
        opens = entry is None and key not in self._failed
        if opens and not self.book.may_open(peer, request.qos_class, request.epoch):
            return TOO_MANY_TRANSFERS
        if entry is not None and (entry.qos, entry.epoch) != (request.qos_class, request.epoch):
            return "a slice of a transfer under another lease"
        reason = admit_write()
        if reason is not None:
            return reason
        if entry is None:
            if not opens:
                return None  # a late slice of a failed transfer: no state
            entry = _Open(qos=request.qos_class, epoch=request.epoch, segment=request.segment)
            self._open[key] = entry
            self.book.opened(peer, request.qos_class, request.epoch)
        entry.pending += 1
        if any(request.charge[r.value - 1] for r in _SLOTS):
            entry.last = request.slice_index if entry.last is None else -1  # two: a lie
        return None

    def landed(
        self, peer: int, session: int, request: Request, amounts: Amounts
    ) -> Completed | str | None:
        """A slice landed and verified, ``amounts`` of its charge still held. Returns the
        transfer it completed, or the reason it proved a lie (the transfer was dropped: the
        caller quarantines the sender), or ``None`` (not complete yet)."""
        key = (peer, session, first_write_id(request.write_id, request.slice_index))
        entry = self._open.get(key)
        if entry is None:  # of a failed transfer, or retired meanwhile: its charge goes back
            self._release(peer, request.qos_class, request.epoch, amounts)
            return None
        entry.pending -= 1
        entry.slices += 1
        _add(entry.amounts, amounts)
        entry.low = request.offset if entry.low < 0 else min(entry.low, request.offset)
        entry.high = max(entry.high, request.offset + request.length)
        entry.landed_bytes += request.length
        entry.mixed |= request.segment != entry.segment
        if entry.pending or entry.last is None:
            return None  # slices still arriving, or the slot-carrying one not seen yet
        if entry.last >= 0 and entry.slices < entry.last + 1:
            return None  # earlier slices are still to come
        del self._open[key]
        if entry.last < 0 or entry.slices > entry.last + 1:
            lie = "a transfer with two last slices, or slices past its last"
        elif entry.mixed or entry.landed_bytes != entry.high - entry.low:
            lie = "slices that do not tile one range of one segment"
        else:
            return Completed(
                qos=entry.qos,
                epoch=entry.epoch,
                segment=entry.segment,
                offset=entry.low,
                length=entry.landed_bytes,
                first_write_id=key[2],
                amounts=entry.amounts,
            )
        self.lies += 1
        self._drop(peer, entry)
        return lie

    def aborted(self, peer: int, session: int, request: Request) -> None:
        """An admitted slice will never land whole (the caller releases its own charge): its
        transfer is dropped now, and its slices still arriving give their charge back."""
        key = (peer, session, first_write_id(request.write_id, request.slice_index))
        entry = self._open.pop(key, None)
        if entry is None:
            return
        self._drop(peer, entry)
        self._failed[key] = None
        while len(self._failed) > FAILED_REMEMBERED:
            del self._failed[next(iter(self._failed))]

    def _drop(self, peer: int, entry: _Open) -> None:
        if entry.amounts:
            self._release(peer, entry.qos, entry.epoch, entry.amounts)
        self.book.closed(peer, entry.qos, entry.epoch)

    def retire(self, peer: int, session: int) -> None:
        """Drop the session's open transfers (no byte of it can land any more)."""
        for key in [k for k in self._open if k[:2] == (peer, session)]:
            self._drop(peer, self._open.pop(key))
        for key in [k for k in self._failed if k[:2] == (peer, session)]:
            del self._failed[key]
