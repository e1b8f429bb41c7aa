"""The bounded, non-blocking, coalescing control inbox of receiver credit updates.

Control callbacks validate framing and *enqueue* updates here; the dispatch owner later drains
them and applies each to the ledger serially (RFC "Proposed Code Placement and Concurrency
Model", rules 1-2). Because every ``ReceiverCreditUpdate`` carries the *full cumulative* grant
vector of its key, only the newest pending update per key matters: an older one is superseded,
never lost (docs/semantics.md#receiver-allocator: coalescing compares ``(epoch, sequence)``, since
sequences restart with each epoch).

Memory is bounded by configuration, not by traffic (RFC: "queued control updates <=
control_queue_capacity"): at most ``max_keys`` updates are pending, and a new key past the bound
is refused with a counted outcome, never by blocking and never by growing.

Control traffic has its own budget (RFC rule 4, "Control traffic never consumes data credit"):
the inbox never looks at, reserves or waits for data credit, so a zero data window cannot stop
the update that reopens it.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from typing import Generic, TypeVar

import attrs

from ._describe import describe
from ._messages import ReceiverCreditUpdate
from .errors import InvalidArgument

__all__ = ["ControlInbox", "InboxOutcome", "InboxStatistics"]

K = TypeVar("K", bound=Hashable)


class InboxOutcome(enum.Enum):
    """What :meth:`ControlInbox.offer` did with an update (a value, never an exception)."""

    QUEUED = "queued"
    """No update of this key was pending: the update now is."""
    COALESCED = "coalesced"
    """It is newer than the pending update of its key, which it replaced (merged with it
    within one epoch: a resource it omits keeps the pending update's total)."""
    REJECTED_DECREASING = "rejected_decreasing"
    """It is newer than the pending update of its epoch but lowers one of its totals: a
    protocol violation. Dropped; the pending (valid) update stays."""
    STALE_DISCARDED = "stale_discarded"
    """It is not newer than the pending update of its key (an old or duplicate update): dropped."""
    REJECTED_FULL = "rejected_full"
    """A new key while ``max_keys`` keys are pending: dropped and counted."""


@attrs.frozen(kw_only=True)
class InboxStatistics:
    """A snapshot of an inbox: outcome counters since construction, and occupancy."""

    queued: int
    coalesced: int
    rejected_decreasing: int
    stale_discarded: int
    rejected_full: int
    pending: int
    """Keys with an update waiting to be drained now."""
    high_water: int
    """Most keys ever pending at once (never above ``max_keys``)."""


class ControlInbox(Generic[K]):
    """Holds the newest pending :class:`ReceiverCreditUpdate` per key, for at most ``max_keys``
    keys. ``K`` is whatever identifies a credit key to the caller (e.g. a ``CreditKey``).

    Raises :class:`InvalidArgument` if ``max_keys`` is not a positive int.
    """

    def __init__(self, *, max_keys: int) -> None:
        if type(max_keys) is not int or max_keys < 1:
            raise InvalidArgument(f"max_keys must be a positive int, got {describe(max_keys)}")
        self._max_keys = max_keys
        self._pending: dict[K, ReceiverCreditUpdate] = {}  # insertion order = first offered
        self._queued = 0
        self._coalesced = 0
        self._rejected_decreasing = 0
        self._stale_discarded = 0
        self._rejected_full = 0
        self._high_water = 0

    @property
    def max_keys(self) -> int:
        return self._max_keys

    def offer(self, key: K, update: ReceiverCreditUpdate) -> InboxOutcome:
        """Offer ``update`` for ``key``; never blocks, never grows past ``max_keys``.

        Policy, in order:

        1. ``key`` pending and ``(update.epoch, update.sequence)`` greater than the pending
           update's, keeping the key's place in the drain order. Epoch first: a new epoch
           restarts sequences, so an epoch-2 update with sequence 1 supersedes an epoch-1
           update with sequence 99, and replaces it whole → ``COALESCED``. Within one epoch
           the two are combined exactly as the ledger would apply them one after the other
           (an invalid update must never displace a valid one, issue 10 item 3):

           a. a total below the pending update's total of the same resource (grants only
              grow, RFC "Absolute cumulative grants") → ``REJECTED_DECREASING``, the pending
              update stays;
           b. otherwise the pending update is replaced by ``update`` with the pending totals
              of the resources ``update`` omits added (omitted resources keep their totals)
              → ``COALESCED``.
        2. ``key`` pending otherwise (older, or the same ``(epoch, sequence)``): drop ``update``
           → ``STALE_DISCARDED``. The ledger would treat it as DUPLICATE_OR_OLD anyway.
        3. ``key`` not pending and ``max_keys`` keys pending → ``REJECTED_FULL`` (the peer's
           refresh timer re-sends the full vector later; nothing is lost for good).
        4. Otherwise queue it → ``QUEUED``.

        The inbox only compares against what is *pending*: an update older than one already
        drained is queued, and the ledger discards it as DUPLICATE_OR_OLD.

        Raises :class:`InvalidArgument` (nothing changed) if ``update`` is not a
        ``ReceiverCreditUpdate`` or ``key`` is not hashable.
        """
        if not isinstance(update, ReceiverCreditUpdate):
            raise InvalidArgument(f"update must be a ReceiverCreditUpdate, got {describe(update)}")
        try:
            pending = self._pending.get(key)
        except TypeError as exc:  # an unhashable key
            raise InvalidArgument(f"inbox key must be hashable, got {describe(key)}") from exc
        if pending is not None:
            # docs/semantics.md#receiver-allocator: compare (epoch, sequence), never the sequence
            # alone.
            if (update.epoch, update.sequence) > (pending.epoch, pending.sequence):
                if update.epoch == pending.epoch:
                    merged = _merge(pending, update)
                    if merged is None:
                        self._rejected_decreasing += 1
                        return InboxOutcome.REJECTED_DECREASING
                    update = merged
                self._pending[key] = update
                self._coalesced += 1
                return InboxOutcome.COALESCED
            self._stale_discarded += 1
            return InboxOutcome.STALE_DISCARDED
        if len(self._pending) >= self._max_keys:
            self._rejected_full += 1
            return InboxOutcome.REJECTED_FULL
        self._pending[key] = update
        self._queued += 1
        self._high_water = max(self._high_water, len(self._pending))
        return InboxOutcome.QUEUED

    def drain(self) -> list[tuple[K, ReceiverCreditUpdate]]:
        """Remove and return every pending ``(key, update)``, in first-offered key order."""
        drained = list(self._pending.items())
        self._pending.clear()
        return drained

    def __len__(self) -> int:
        """The number of keys with a pending update."""
        return len(self._pending)

    def statistics(self) -> InboxStatistics:
        """A frozen snapshot of the counters and occupancy."""
        return InboxStatistics(
            queued=self._queued,
            coalesced=self._coalesced,
            rejected_decreasing=self._rejected_decreasing,
            stale_discarded=self._stale_discarded,
            rejected_full=self._rejected_full,
            pending=len(self._pending),
            high_water=self._high_water,
        )


def _merge(
    pending: ReceiverCreditUpdate, newer: ReceiverCreditUpdate
) -> ReceiverCreditUpdate | None:
    """``newer`` applied on top of ``pending`` (same epoch), or ``None`` if it lowers a total."""
    totals = {g.resource: g.amount for g in pending.grants}
    for g in newer.grants:
        if g.amount < totals.get(g.resource, 0):
            return None
    present = {g.resource for g in newer.grants}
    if all(r in present for r in totals):
        return newer
    kept = tuple(g for g in pending.grants if g.resource not in present)
    return attrs.evolve(newer, grants=newer.grants + kept)
