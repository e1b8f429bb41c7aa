"""The credit spec's safety properties (each citing the RFC sentence it encodes), its
witnesses (reachable states that show the model is not vacuous) and its recovery goal.

Each invariant is "for every sender s: <body>(state, s)" (plus, for capacity, one sum over
senders). A body reads only ``state.session``, the room in the bag and ``state.peers[s]``: the
fast path (:mod:`tent_spec.credit._fastpath`) memoises the verdicts per such context.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tent_spec.credit._actions import CreditActions
from tent_spec.credit._state import (
    ACTIVE,
    RECLAIMED,
    REVIVED,
    STALE,
    UPDATE,
    CreditBounds,
    CreditState,
    SpecInvariant,
    SpecWitness,
    _vadd,
    _vle,
    _vsub,
)


class CreditInvariants(CreditActions):
    """The invariants (``inv_*``), ``invariants()``, ``witnesses()`` and ``recovered``."""

    def __init__(self, bounds: CreditBounds, *, name: str = "credit") -> None:
        super().__init__(bounds, name=name)
        # Per-sender invariant bodies by invariant name (see ``_every_sender``).
        self._sender_checks: dict[str, Callable[[CreditState, int], bool]] = {
            "capacity": self._capacity_at,
            "generation_fenced": self._generation_fenced_at,
            "full_charge": self._full_charge_at,
            "no_overdraw": self._no_overdraw_at,
            "grant_within_receiver": self._grant_within_receiver_at,
            "old_update_harmless": self._old_update_harmless_at,
            "stale_revival": self._stale_revival_at,
            "stale_never_reserves": self._stale_never_reserves_at,
            "control_unblocked": self._control_unblocked_at,
            "claims_covered": self._claims_covered_at,
        }

    def _compared(self, check: str) -> Callable[[CreditState], Mapping[str, object]]:
        """For a counterexample's ``compared:`` line: the values ``check`` read at the first
        sender where it fails (called on a violating state only, never in the search)."""

        def compared(state: CreditState) -> Mapping[str, object]:
            body = self._sender_checks[check]
            for s in range(len(state.peers)):
                if not body(state, s):
                    return {"sender": s, **self._values_at(check, state, s)}
            return {"free": self.free_capacity(state), "capacity": self._capacity}

        return compared

    def _values_at(self, check: str, state: CreditState, s: int) -> dict[str, object]:
        peer = state.peers[s]
        led = peer.ledger
        books = self._books_for(peer, led.epoch)
        if check == "capacity":
            return {"books": [(b.epoch, b.granted, b.released, b.reclaimed) for b in peer.books]}
        if check == "full_charge":
            inflight = self._inflight_sum(peer, led.session, led.epoch)
            return {
                "reserved": self._charge_sum(led.tokens),
                "dispatched": inflight if books is None else _vadd(inflight, books.landed),
                "consumed": led.consumed,
            }
        if check in ("no_overdraw", "control_unblocked"):
            return {"available": self.available(led)}
        if check == "grant_within_receiver":
            return {"accepted": led.grant_total, "receiver_granted": books and books.granted}
        if check == "old_update_harmless":
            old = [(m.seq, m.grants) for m, _n in peer.to_sender if m.kind == UPDATE]
            return {"last_seq": led.last_seq, "grant_total": led.grant_total, "updates": old}
        if check == "stale_revival":
            return {"freshness": led.freshness, "last_seq": led.last_seq, "stale_at": led.stale_at}
        if check == "stale_never_reserves":
            return {"tokens": led.tokens, "stale_tokens": led.stale_tokens}
        if check == "generation_fenced":
            return {
                "entry": (led.session, led.epoch),
                "receiver_session": state.session,
                "books": [(b.epoch, b.status) for b in peer.books],
            }
        claims = []  # claims_covered: each book's claim against its outstanding credit
        for b in peer.books:
            claim = _vadd(
                _vsub(b.landed, b.released), self._inflight_sum(peer, state.session, b.epoch)
            )
            if led.session == state.session and led.epoch == b.epoch:
                claim = _vadd(claim, _vadd(self.available(led), self._charge_sum(led.tokens)))
            claims.append((b.epoch, claim, _vsub(_vsub(b.granted, b.released), b.reclaimed)))
        return {"claims (epoch, claim, outstanding)": claims}

    def _every_sender(self, state: CreditState, check: str) -> bool:
        """``self._sender_checks[check](state, s)`` holds for every sender ``s``."""
        body = self._sender_checks[check]
        return all(body(state, s) for s in range(len(state.peers)))

    def inv_capacity(self, state: CreditState) -> bool:
        """Σ over senders and epochs of (granted − released − reclaimed) ≤ capacity."""
        if not self._every_sender(state, "capacity"):
            return False
        return all(f >= 0 for f in self.free_capacity(state))

    def _capacity_at(self, state: CreditState, s: int) -> bool:
        """No book of sender ``s`` frees more than it granted (released + reclaimed ≤ granted)."""
        for b in state.peers[s].books:
            for r in range(len(self._capacity)):
                if b.released[r] + b.reclaimed[r] > b.granted[r]:
                    return False
        return True

    def inv_claims_covered(self, state: CreditState) -> bool:
        """Everything that can still occupy receiver resources is covered by that epoch's books.

        Claims on (sender, epoch) of the live session: landed-but-unreleased data, work in
        flight, and - when the sender's entry is on that key - its available credit plus its
        RESERVED tokens. Each must fit the books' outstanding ``granted − released − reclaimed``.
        """
        return self._every_sender(state, "claims_covered")

    def _claims_covered_at(self, state: CreditState, s: int) -> bool:
        session = state.session
        peer = state.peers[s]
        led = peer.ledger
        for b in peer.books:
            claim = _vadd(_vsub(b.landed, b.released), self._inflight_sum(peer, session, b.epoch))
            if led.session == session and led.epoch == b.epoch:
                hold = _vadd(self.available(led), self._charge_sum(led.tokens))
                claim = _vadd(claim, hold)
            outstanding = _vsub(_vsub(b.granted, b.released), b.reclaimed)
            if not _vle(claim, outstanding):
                return False
        return True

    def inv_full_charge(self, state: CreditState) -> bool:
        """Reserved, in-flight and landed work of the live key was consumed in full."""
        return self._every_sender(state, "full_charge")

    def _full_charge_at(self, state: CreditState, s: int) -> bool:
        peer = state.peers[s]
        led = peer.ledger
        tokens = self._charge_sum(led.tokens)
        if not _vle(tokens, led.consumed):
            return False
        if led.session != state.session:
            return True
        b = self._books_for(peer, led.epoch)
        if b is None:
            return True  # inv_claims_covered rejects a live entry without books
        dispatched = _vadd(self._inflight_sum(peer, led.session, led.epoch), b.landed)
        return _vadd(tokens, dispatched) == led.consumed

    def inv_no_overdraw(self, state: CreditState) -> bool:
        """The sender never consumes or returns more than it was granted (available ≥ 0)."""
        return self._every_sender(state, "no_overdraw")

    def _no_overdraw_at(self, state: CreditState, s: int) -> bool:
        return min(self.available(state.peers[s].ledger)) >= 0

    def inv_grant_within_receiver(self, state: CreditState) -> bool:
        """A sender's accepted grant never exceeds what the receiver granted that key."""
        return self._every_sender(state, "grant_within_receiver")

    def _grant_within_receiver_at(self, state: CreditState, s: int) -> bool:
        peer = state.peers[s]
        led = peer.ledger
        if led.session != state.session:
            return True
        b = self._books_for(peer, led.epoch)
        return b is None or _vle(led.grant_total, b.granted)

    def inv_old_update_harmless(self, state: CreditState) -> bool:
        """An in-flight update the sender would call duplicate/old carries no higher total."""
        return self._every_sender(state, "old_update_harmless")

    def _old_update_harmless_at(self, state: CreditState, s: int) -> bool:
        peer = state.peers[s]
        led = peer.ledger
        for msg, _n in peer.to_sender:
            if (
                msg.kind == UPDATE
                and (msg.session, msg.epoch) == (led.session, led.epoch)
                and msg.seq <= led.last_seq
                and not _vle(msg.grants, led.grant_total)
            ):
                return False
        return True

    def inv_stale_revival(self, state: CreditState) -> bool:
        """A stale entry returns to use only through a strictly newer update."""
        return self._every_sender(state, "stale_revival")

    def _stale_revival_at(self, state: CreditState, s: int) -> bool:
        led = state.peers[s].ledger
        return led.freshness != REVIVED or led.last_seq > led.stale_at

    def inv_stale_never_reserves(self, state: CreditState) -> bool:
        """A STALE entry takes no new reservation: every RESERVED token it holds was reserved
        before it became stale (``stale_tokens``, the history of those still held)."""
        return self._every_sender(state, "stale_never_reserves")

    def _stale_never_reserves_at(self, state: CreditState, s: int) -> bool:
        led = state.peers[s].ledger
        return led.freshness != STALE or led.tokens == led.stale_tokens

    def inv_generation_fenced(self, state: CreditState) -> bool:
        """No sender uses a fenced generation; work is never in flight to reclaimed capacity.

        1. A ledger entry never names a session newer than the receiver's.
        2. An entry on the live session is keyed by that sender's ACTIVE books.
        3. Work in flight to the live session belongs to books that still hold its capacity
           (present and not yet RECLAIMED).
        """
        return self._every_sender(state, "generation_fenced")

    def _generation_fenced_at(self, state: CreditState, s: int) -> bool:
        session = state.session
        peer = state.peers[s]
        led = peer.ledger
        if led.session > session:
            return False
        if led.session == session:
            b = self._books_for(peer, led.epoch)
            if b is None or b.status != ACTIVE:
                return False
        for s_, e, _c in peer.inflight:
            if s_ == session:
                b = self._books_for(peer, e)
                if b is None or b.status == RECLAIMED:
                    return False
        return True

    def inv_control_unblocked(self, state: CreditState) -> bool:
        """Zero data credit never blocks control traffic.

        A sender short of credit for a charge can always ask for it: when the bag has room and
        no report of its entry is in flight, ``report_usage`` with that demand is enabled. And
        every message in flight is deliverable.
        """
        return self._every_sender(state, "control_unblocked")

    def _control_unblocked_at(self, state: CreditState, s: int) -> bool:
        peer = state.peers[s]
        led = peer.ledger
        if (
            self._room(state)
            and led.session
            and led.usage_seq < self.bounds.seq_cap
            and not any(
                (m.session, m.epoch) == (led.session, led.epoch) for m, _ in peer.to_receiver
            )
        ):
            available = self.available(led)
            for i, charge in enumerate(self._charges):
                if not _vle(charge, available) and self._guard["report_usage"](state, s, i + 1):
                    return False
        for bag in (peer.to_sender, peer.to_receiver):
            for msg, _n in bag:
                if self._guard["deliver"](state, s, msg) is not None:
                    return False
        return True

    def invariants(self) -> Sequence[Any]:
        """The named safety properties, specific ones first and the physical catch-all
        (``claims_covered_by_books``) last, so a counterexample names the rule it breaks."""
        return (
            SpecInvariant(
                "capacity_never_exceeded",
                'RFC acceptance 1: "Aggregate reserved receiver resources never exceed '
                'configured capacity"; docs/semantics.md#receiver-allocator: Σ (granted − '
                "released − reclaimed) ≤ capacity",
                self.inv_capacity,
                self._compared("capacity"),
            ),
            SpecInvariant(
                "fenced_generation_never_used",
                'RFC acceptance 4: "Restarted peers cannot reuse old credit or old allocation '
                'generation"; RFC claim 5: "Old sessions are fenced before their resources '
                'are reused"',
                self.inv_generation_fenced,
                self._compared("generation_fenced"),
            ),
            SpecInvariant(
                "dispatch_holds_full_charge",
                'RFC acceptance 2: "A sender never dispatches a required remote plan without '
                'all credit dimensions"; RFC claim 3 (atomic multi-resource eligibility)',
                self.inv_full_charge,
                self._compared("full_charge"),
            ),
            SpecInvariant(
                "sender_never_overdraws",
                'RFC rule 4: "Credit violation: ... do not silently overdraw"; '
                "docs/semantics.md#sender-ledger: "
                "a grant below consumed is rejected",
                self.inv_no_overdraw,
                self._compared("no_overdraw"),
            ),
            SpecInvariant(
                "sender_grant_within_receiver_grant",
                'RFC acceptance 3: "Duplicate, reordered, and stale updates never increase '
                'available credit"; RFC: "Delta grants can be double-applied"',
                self.inv_grant_within_receiver,
                self._compared("grant_within_receiver"),
            ),
            SpecInvariant(
                "old_update_cannot_raise_credit",
                'RFC: "Duplicate and old updates become no-ops"; acceptance 3',
                self.inv_old_update_harmless,
                self._compared("old_update_harmless"),
            ),
            SpecInvariant(
                "stale_revived_only_by_newer_update",
                'RFC state machine: "Stale +-- newer update -> Active"; acceptance 3 (a stale '
                "update never re-opens credit)",
                self.inv_stale_revival,
                self._compared("stale_revival"),
            ),
            SpecInvariant(
                "stale_sender_never_reserves",
                'RFC state machine rule 2: "Stale: stop new credit-gated dispatch; existing '
                'transport-owned work continues to terminal state"',
                self.inv_stale_never_reserves,
                self._compared("stale_never_reserves"),
            ),
            SpecInvariant(
                "control_never_blocked_by_data_credit",
                'RFC acceptance 5: "Zero data credit cannot block control updates"; RFC principle '
                '4: "Control traffic never consumes data credit"',
                self.inv_control_unblocked,
                self._compared("control_unblocked"),
            ),
            SpecInvariant(
                "claims_covered_by_books",
                'RFC rule 3: "do not reuse old target resources until old QPs/inflight work '
                'are fenced"; RFC claim 1 (receiver-capacity safety)',
                self.inv_claims_covered,
                self._compared("claims_covered"),
            ),
        )

    def witnesses(self) -> Sequence[Any]:
        def reserved_after_receiver_restart(st: CreditState) -> bool:
            return any(p.ledger.session > 1 and any(p.ledger.consumed) for p in st.peers)

        def reserved_after_sender_restart(st: CreditState) -> bool:
            return any(p.ledger.epoch > 1 and any(p.ledger.consumed) for p in st.peers)

        def reclaimed_after_fence(st: CreditState) -> bool:
            return any(b.status == RECLAIMED for p in st.peers for b in p.books)

        def duplicate_in_flight(st: CreditState) -> bool:
            return any(
                n > 1 for p in st.peers for bag in (p.to_sender, p.to_receiver) for _, n in bag
            )

        def reordered_updates(st: CreditState) -> bool:
            return any(sum(1 for m, _ in p.to_sender if m.kind == UPDATE) >= 2 for p in st.peers)

        def stale_sender_revived(st: CreditState) -> bool:
            return any(p.ledger.freshness == REVIVED for p in st.peers)

        def capacity_exhausted(st: CreditState) -> bool:
            return not any(self.free_capacity(st))

        def both_senders_hold_credit(st: CreditState) -> bool:
            return sum(1 for p in st.peers if any(self.available(p.ledger))) >= 2

        # A witness whose enabling action the bounds rule out is not expected (like coverage's
        # unreachable actions): its absence then says nothing about vacuity.
        dead = self.unreachable_actions()
        candidates = (
            (
                "reserved_after_receiver_restart",
                reserved_after_receiver_restart,
                "receiver_restart",
            ),
            ("reserved_after_sender_restart", reserved_after_sender_restart, "sender_restart"),
            (
                "fenced_epoch_reclaimed_with_data_pending",
                reclaimed_after_fence,
                "reclaim_after_fence",
            ),
            ("duplicate_in_flight", duplicate_in_flight, "duplicate"),
            ("two_updates_in_flight_to_one_sender", reordered_updates, "push_update"),
            ("stale_sender_revived", stale_sender_revived, "become_stale"),
            ("capacity_exhausted", capacity_exhausted, "grant"),
            ("two_senders_hold_credit", both_senders_hold_credit, "grant"),
        )
        return tuple(
            SpecWitness(name, holds)
            for name, holds, needs in candidates
            if needs not in dead and (name != "two_senders_hold_credit" or self.bounds.senders > 1)
        )

    def recovered(self, state: CreditState) -> bool:
        """All credit usable again: nothing in flight or fencing, every sender synchronised.

        Per sender: only the current epoch's books remain, landed data was released, the entry
        is on the live key, not stale, holds no RESERVED token, applied the latest grant total,
        and the receiver has reclaimed everything it returned.
        """
        for p in state.peers:
            led = p.ledger
            if p.inflight or len(p.books) != 1 or led.tokens:
                return False
            b = p.books[0]
            if (led.session, led.epoch) != (state.session, b.epoch) or led.freshness == STALE:
                return False
            if b.landed != b.released or led.grant_total != b.granted:
                return False
            if led.returned != b.reclaimed:
                return False
        return True
