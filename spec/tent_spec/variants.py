"""Known-bad variants: the credit spec with one RFC rule removed each.

Every variant removes one conjunct of a guard (``WITHOUT``) or overrides one guard or effect of
:class:`~tent_spec.credit.CreditSpec` (the clean spec's code path stays as reviewers read it).
The model checker must refute each with a short counterexample that violates the named
invariant: that is the evidence the rule is needed and that the invariants are strong enough
to notice its absence.

:data:`KNOWN_BAD` maps a variant name to ``(factory, expected invariant, rule text)``; the factory
takes a :class:`~tent_spec.credit.CreditBounds` and returns the variant model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .credit import (
    RECLAIMED,
    Books,
    CreditSpec,
    CreditState,
    Ledger,
    Vec,
    _vadd,
    _vsub,
)
from .credit_adversarial import AdversarialCreditSpec

__all__ = [
    "KNOWN_BAD",
    "CompletionMintsCredit",
    "ControlChargedToDataCredit",
    "DeltaGrants",
    "EqualSequenceAccepted",
    "NoDecreasingGrantCheck",
    "NoEpochFenceOnRestart",
    "NoWriteAdmission",
    "PartialReserve",
    "ReuseBeforeFence",
    "StaleReserve",
]


class DeltaGrants(CreditSpec):
    """Updates are applied as increments: the sender adds each accepted update's amounts.

    A refresh re-publishes the same grant under a newer sequence, so it is counted twice.
    """

    def _accepts_totals(self, led: Ledger, grants: Vec) -> bool:
        return True  # increments cannot be compared with totals

    def _new_grant_total(self, led: Ledger, grants: Vec) -> Vec:
        return _vadd(led.grant_total, grants)


class EqualSequenceAccepted(CreditSpec):
    """The sender accepts an update whose sequence equals the last accepted one."""

    def _accepts_sequence(self, led: Ledger, seq: int) -> bool:
        return seq >= led.last_seq


class NoDecreasingGrantCheck(CreditSpec):
    """The sender takes any newer update's totals, even below its previous totals or consumed."""

    def _accepts_totals(self, led: Ledger, grants: Vec) -> bool:
        return True


class NoEpochFenceOnRestart(CreditSpec):
    """A reconnecting sender keeps its old epoch: the receiver bumps nothing and fences nothing.

    The new process is activated on the old key and inherits the old generation, while work
    the old process dispatched is still in flight or landed under that key.
    """

    def _g_sender_restart(self, state: CreditState, s: int) -> str | None:
        if state.faults.sender_restarts >= self.bounds.max_sender_restarts:
            return "fault budget: max_sender_restarts used"
        if not self._fault_left(state):
            return "fault budget: max_faults used"
        return None

    def _e_sender_restart(self, state: CreditState, s: int) -> CreditState:
        peer = state.peers[s]
        peer = peer._replace(ledger=self._fresh_ledger(0, 0), to_sender=())
        f = state.faults
        state = state._replace(faults=f._replace(sender_restarts=f.sender_restarts + 1))
        return self._with_peer(state, s, peer)


class PartialReserve(CreditSpec):
    """Reserve takes whatever of the charge vector is available instead of all or nothing."""

    def _g_reserve(self, state: CreditState, s: int, c: int) -> str | None:
        led = state.peers[s].ledger
        if not led.session or not led.last_seq:
            return "no ledger entry or no update applied yet"
        if len(led.tokens) >= self.bounds.max_tokens:
            return "bound: max_tokens live reservations"
        charge = self._charges[c]
        if not any(a and v > 0 for a, v in zip(charge, self.available(led), strict=True)):
            return "no charged resource has any credit"
        return None

    def _e_reserve(self, state: CreditState, s: int, c: int) -> CreditState:
        peer = state.peers[s]
        led = peer.ledger
        taken = tuple(map(min, self._charges[c], self.available(led)))
        led = led._replace(
            consumed=_vadd(led.consumed, taken), tokens=tuple(sorted((*led.tokens, c)))
        )
        return self._with_peer(state, s, peer._replace(ledger=led))


class ControlChargedToDataCredit(CreditSpec):
    """A usage report (control traffic) waits for a unit of DATA credit like payload does."""

    def _g_report_usage(self, state: CreditState, s: int, demand: int) -> str | None:
        led = state.peers[s].ledger
        if led.session and self.available(led)[0] < 1:
            return "no data credit left for the control message"
        for check in self._conjuncts["report_usage"]:
            if (reason := check(state, s, demand)) is not None:
                return reason
        return None


class CompletionMintsCredit(CreditSpec):
    """A completion gives the sender its credit back locally (instead of the receiver's release)."""

    def _e_data_lands(self, state: CreditState, s: int, item: Any) -> CreditState:
        state = super()._e_data_lands(state, s, item)
        session, epoch, c = item
        peer = state.peers[s]
        led = peer.ledger
        if (led.session, led.epoch) == (session, epoch):
            led = led._replace(consumed=_vsub(led.consumed, self._charges[c]))
            state = self._with_peer(state, s, peer._replace(ledger=led))
        return state


class ReuseBeforeFence(CreditSpec):
    """On a sender reconnect the receiver reclaims the old epoch at once, before its in-flight
    work has landed or failed (the old QPs stay open)."""

    def _e_sender_restart(self, state: CreditState, s: int) -> CreditState:
        state = super()._e_sender_restart(state, s)
        peer = state.peers[s]
        old: Books = peer.books[-2]
        early = old._replace(status=RECLAIMED, reclaimed=_vsub(old.granted, old.landed))
        peer = peer._replace(books=(*peer.books[:-2], early, peer.books[-1]))
        return self._with_peer(state, s, peer)

    def _g_data_lands(self, state: CreditState, s: int, item: Any) -> str | None:
        peer = state.peers[s]
        if item not in peer.inflight:
            return "no such in-flight work"
        session, epoch, _c = item
        if session != state.session or self._books_for(peer, epoch) is None:
            return "work of a dead receiver session never lands"
        return None  # the old QPs were never closed: old work still lands


class NoWriteAdmission(AdversarialCreditSpec):
    """Against adversarial senders, the receiver lets every write of a live epoch land: it
    trusts the sender's reports instead of admitting each write against its credit (issue 10
    item 6: 10 slots of payload arrived for 8 of capacity). Only the credit check goes: the
    transfer bound (``no_transfer_bound``'s rule) stays, and a write carrying more bytes than
    its one slot's grant overfills the receiver."""

    def _g_data_lands(self, state: CreditState, s: int, item: Any) -> str | None:
        reason = CreditSpec._g_data_lands(self, state, s, item)
        b = self._books_for(state.peers[s], item[1])
        if reason is None and b is not None and not self._transfer_room(b):
            return "the transfer bound refuses it"
        return reason


class NoTransferBound(AdversarialCreditSpec):
    """Against adversarial senders, write admission checks a write's bytes but not how many
    transfers the receiver then holds: every slot-less write a liar forges opens one (issue 27
    item 1: 8 consumer slots, hundreds of thousands of held notifications)."""

    def _transfer_room(self, b: Any) -> bool:
        return True


class StaleReserve(CreditSpec):
    """Reserve ignores staleness: a sender whose entry went STALE (TTL expiry, disconnect) keeps
    dispatching on the credit it still holds."""

    WITHOUT = frozenset({("reserve", "entry_not_stale")})


Factory = type[CreditSpec]

KNOWN_BAD: Mapping[str, tuple[Factory, str, str]] = {
    "delta_grants": (
        DeltaGrants,
        "sender_grant_within_receiver_grant",
        'RFC principle 2: "Absolute cumulative grants within an epoch. Delta grants can be '
        'double-applied after retransmission or reordering."',
    ),
    "equal_sequence_accepted": (
        EqualSequenceAccepted,
        "stale_revived_only_by_newer_update",
        'RFC: "sequence is newer than the last accepted update"; "Duplicate and old updates '
        'become no-ops"',
    ),
    "no_decreasing_grant_check": (
        NoDecreasingGrantCheck,
        "old_update_cannot_raise_credit",
        'RFC: "every cumulative grant is non-decreasing"; rule 5: "decreasing cumulative '
        'total: reject the update"',
    ),
    "no_epoch_fence_on_restart": (
        NoEpochFenceOnRestart,
        "dispatch_holds_full_charge",
        'docs/semantics.md#negotiation: the receiver "bumps a key\'s epoch when that sender '
        'reconnects"; RFC '
        'rule 3: "New epoch: invalidate unused old ledger state"',
    ),
    "partial_reserve": (
        PartialReserve,
        "dispatch_holds_full_charge",
        'RFC concurrency rule 3: "Multi-resource reserve is all-or-nothing"; claim 3: '
        '"Partial reservations ... are never exposed"',
    ),
    "control_charged_to_data_credit": (
        ControlChargedToDataCredit,
        "control_never_blocked_by_data_credit",
        'RFC principle 4: "Control traffic never consumes data credit. A zero data window must '
        'not prevent the message that reopens the window."',
    ),
    "completion_mints_credit": (
        CompletionMintsCredit,
        "dispatch_holds_full_charge",
        'RFC concurrency rule 6: "Completion only reports receiver resource release; it must '
        'not mint sender-side credit locally."',
    ),
    "stale_reserve": (
        StaleReserve,
        "stale_sender_never_reserves",
        'RFC state machine rule 2: "Stale: stop new credit-gated dispatch"',
    ),
    "reuse_before_fence": (
        ReuseBeforeFence,
        "fenced_generation_never_used",
        'RFC rule 3: "do not reuse old target resources until old QPs/inflight work are '
        'fenced"; claim 5: "Old sessions are fenced before their resources are reused"',
    ),
    "no_write_admission": (
        NoWriteAdmission,
        "physical_occupancy_within_capacity",
        'RFC "Security and Abuse Boundaries"; docs/transport_design.md#leases: the receiver '
        'refuses a '
        "write beyond the sender's credit before it touches memory, whatever the sender reported",
    ),
    "no_transfer_bound": (
        NoTransferBound,
        "held_transfers_within_slot_credit",
        'RFC "Security and Abuse Boundaries": per-peer state is bounded; issue 27 item 1: '
        "a write opening more transfers than its sender holds slot credit for is refused",
    ),
}
"""Variant name -> (factory taking CreditBounds, invariant it must violate, the RFC rule)."""
