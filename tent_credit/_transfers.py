"""Transfers a receiver holds, bounded by the slot credit of their sender (issue 27 item 1).

Write admission (``admit_write``) bounds what a sender's writes *land*; it does not bound how
many *transfers* the receiver keeps state for. A transfer's slices charge their own DATA_BYTES
and only its last slice charges the slot resources (REQUEST_SLOTS, CONSUMER_SLOTS), so a peer
writing many tiny slot-less writes, each a transfer of its own, made the receiver hold a
notification per write within its byte grant: hundreds of thousands for 8 consumer slots.

The rule (docs/abuse.md "Transfers held"): the receiver keeps state per transfer, from the
first admitted byte of it until its consumer releases it (or it is dropped), and a write that
would open a transfer is admitted only while

    held + 1 ≤ granted − released − reclaimed_by_return

of every slot resource the receiver models, for that key and epoch: one transfer per slot of
credit the sender holds. An honest sender is never refused: each transfer it has open reserved
a slot that is still granted and neither released nor returned. What a sender can make the
receiver hold is therefore bounded by its slot grant, whatever its byte grant.

:class:`TransferBook` counts and decides; the transport says which write opens a transfer (the
first admitted slice of one) and when one closes. It never raises for peer-controlled values.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._allocator import ReceiverCreditAllocator
from ._types import CreditResource
from .errors import CreditError

__all__ = ["SLOT_RESOURCES", "TransferBook"]

SLOT_RESOURCES = (CreditResource.REQUEST_SLOTS, CreditResource.CONSUMER_SLOTS)
"""The per-transfer resources: a transfer charges one of each the receiver models."""

_Key = tuple[int, int, int]  # (sender peer, qos class, epoch)


class TransferBook:
    """The transfers a receiver holds per (sender, QoS class, epoch).

    ``allocator`` is the receiver's: its books (``unreleased``) say how much slot credit a key
    holds. A receiver that models no slot resource bounds nothing here (every ``may_open`` is
    ``True``): its transfers are then bounded by their bytes alone.
    """

    def __init__(self, allocator: ReceiverCreditAllocator) -> None:
        self._allocator = allocator
        modelled = allocator.config.capacity
        self._slots = tuple(r for r in SLOT_RESOURCES if r in modelled)
        self._held: dict[_Key, int] = {}

    @property
    def slot_resources(self) -> tuple[CreditResource, ...]:
        """The slot resources the receiver models (empty: this book bounds nothing)."""
        return self._slots

    def held(self, sender_peer: int, qos_class: int, epoch: int) -> int:
        """Transfers held for this key and epoch (0 for one never seen)."""
        return self._held.get((sender_peer, qos_class, epoch), 0)

    def total_held(self) -> int:
        """Transfers held for every key and epoch together."""
        return sum(self._held.values())

    def budget(self, sender_peer: int, qos_class: int, epoch: int) -> int | None:
        """How many transfers the key may hold in that epoch: the least of ``granted −
        released − reclaimed_by_return`` over the slot resources; ``None`` without a slot
        resource; 0 for an epoch the allocator does not know (or malformed ids)."""
        if not self._slots:
            return None
        try:
            return self._allocator.unreleased(sender_peer, qos_class, epoch, self._slots)
        except (CreditError, TypeError, ValueError):
            return 0

    def may_open(self, sender_peer: int, qos_class: int, epoch: int) -> bool:
        """Whether a write may open one more transfer of this key and epoch."""
        budget = self.budget(sender_peer, qos_class, epoch)
        return budget is None or self.held(sender_peer, qos_class, epoch) + 1 <= budget

    def opened(self, sender_peer: int, qos_class: int, epoch: int) -> None:
        """A transfer of this key and epoch was opened (its first write was admitted)."""
        key = (sender_peer, qos_class, epoch)
        self._held[key] = self._held.get(key, 0) + 1

    def closed(self, sender_peer: int, qos_class: int, epoch: int) -> None:
        """A transfer was released by its consumer or dropped. Raises ``ValueError`` when the
        key and epoch hold none (a local bug: nothing changes)."""
        key = (sender_peer, qos_class, epoch)
        held = self._held.get(key, 0)
        if held < 1:
            raise ValueError(f"no transfer held for {key}")
        if held == 1:
            del self._held[key]
        else:
            self._held[key] = held - 1

    def snapshot(self) -> Mapping[_Key, int]:
        """Transfers held per (sender, QoS class, epoch), for metrics and tests."""
        return dict(self._held)
