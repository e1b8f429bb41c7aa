"""The credit spec against adversarial senders, with the receiver's write admission.

Issue 10 item 6 (RFC "Security and Abuse Boundaries"; docs/transport_design.md#leases;
docs/abuse.md). :class:`AdversarialCreditSpec` extends :class:`~tent_spec.credit.CreditSpec` with
its own action table (``_ADVERSARY_ACTIONS``) and overrides; the honest spec's tables and invariants
are untouched. Kept in its own module so that the honest spec stays the one reviewers read first.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from typing import Any

from .credit import (
    _ACTIONS,
    _FAULTS,
    ACTIVE,
    FENCING,
    RECLAIMED,
    Books,
    CreditBounds,
    CreditSpec,
    CreditState,
    Peer,
    SpecInvariant,
    SpecWitness,
    Usage,
    Vec,
    _insert_sorted,
    _remove_one,
    _vadd,
    _vle,
    _vsub,
)

__all__ = ["AdversarialCreditSpec"]

# --------------------------------------------------------------------------------------------
# The adversarial sender and write admission (issue 10 item 6; docs/abuse.md)
# --------------------------------------------------------------------------------------------
#
# Kept apart from CreditSpec's own tables on purpose: CreditSpec describes honest senders, and
# its invariants are about them. AdversarialCreditSpec lets *every* sender lie (symmetry stays
# sound), so only the receiver's own promises are checked there.

_ADVERSARY_ACTIONS = ("lie_return", "forge_write", "refuse_write")
_SLOT = 1  # the slot resource of a charge vector (REQUEST_SLOTS, as the conformance maps it)
_ADVERSARY_ARITY = {"lie_return": 2, "forge_write": 2, "refuse_write": 2}
assert tuple(_ADVERSARY_ARITY) == _ADVERSARY_ACTIONS


class AdversarialCreditSpec(CreditSpec):
    """The credit protocol against senders that may send any return report and any write.

    Adversary actions (both count as faults: recoverability asks what happens once they stop):

    * ``lie_return(s, c)``: the sender adds charge ``c`` to its cumulative ``returned``
      whatever it really holds (e.g. credit whose payload is still in flight); its next
      ``report_usage`` carries the lie. Bounded by the grant (the receiver refuses more).
    * ``forge_write(s, c)``: the sender puts a write of charge ``c`` on its live key in flight
      without any reservation. Bounded by ``max_tokens`` writes in flight per sender.

    The receiver's side (docs/transport_design.md#leases, docs/seams.md "Write admission"):

    * ``data_lands`` is the accepted half of write admission: a write of the live session lands
      only if ``landed + reclaimed + charge ≤ granted`` for its epoch's books, and (issue 27
      item 1) only while the books hold slot credit for one more transfer: ``held + 1 ≤
      granted − released − reclaimed`` of the slot resource (the second one, REQUEST_SLOTS).
      A landed write is a transfer the receiver holds (``held``) until ``consumer_release``.
    * ``refuse_write(s, item)`` is the refused half: the write never touches memory, and the
      sender's key is quarantined (RFC rule 4): every epoch of it is fenced and reclaimed at once
      (``reclaimed = granted − landed``), no grant, update or new epoch goes to it again in this
      session, and every later write of it is refused. Its current epoch's books stay, with
      status RECLAIMED, as the quarantine mark.
    * a usage report is applied only to ACTIVE books and, as the implementation's allocator
      does, only when ``returned + landed ≤ granted`` (a return of credit that landed data used
      is a violation and changes nothing).

    Invariants: the receiver's capacity sum and physical occupancy (landed − released, summed)
    never exceed capacity, and the transfers it holds per sender and epoch never exceed the slot
    credit granted and not released, whatever the senders claim or write. With a charge that
    carries no slot (``(1, 0)``: a transfer's non-last slice, as a liar sends it alone) a forged
    write would otherwise open a transfer per byte of its grant.
    """

    def __init__(self, bounds: CreditBounds, *, name: str = "credit/adversarial") -> None:
        super().__init__(bounds, name=name)
        for action in _ADVERSARY_ACTIONS:
            self._guard[action] = getattr(self, "_g_" + action)
            self._effect[action] = getattr(self, "_e_" + action)

    @staticmethod
    def quarantined(peer: Peer) -> bool:
        """The receiver quarantined this sender (its current epoch's books are RECLAIMED)."""
        return peer.books[-1].status == RECLAIMED

    def _admits(self, b: Books, c: int) -> bool:
        # docs/seams.md "Write admission": landed + returned-reclaimed + amount <= granted.
        fits = _vle(_vadd(_vadd(b.landed, b.reclaimed), self._charges[c]), b.granted)
        return fits and self._transfer_room(b)

    def _transfer_room(self, b: Books) -> bool:
        # docs/abuse.md "Transfers held": one transfer per slot of credit the sender holds
        if self.bounds.resources < 2:
            return True  # no slot resource: nothing bounds transfers but their bytes
        return b.held + 1 <= b.granted[_SLOT] - b.released[_SLOT] - b.reclaimed[_SLOT]

    # ---- the adversary ------------------------------------------------------------------

    def _g_lie_return(self, state: CreditState, s: int, c: int) -> str | None:
        led = state.peers[s].ledger
        if not led.session:
            return "the sender has no ledger entry"
        if not _vle(_vadd(led.returned, self._charges[c]), led.grant_total):
            return "bound: a return beyond the grant is refused by the receiver anyway"
        return None

    def _e_lie_return(self, state: CreditState, s: int, c: int) -> CreditState:
        peer = state.peers[s]
        led = peer.ledger._replace(returned=_vadd(peer.ledger.returned, self._charges[c]))
        return self._with_peer(state, s, peer._replace(ledger=led))

    def _g_forge_write(self, state: CreditState, s: int, c: int) -> str | None:
        peer = state.peers[s]
        if not peer.ledger.session:
            return "the sender has no ledger entry"
        if len(peer.inflight) >= self.bounds.max_tokens:
            return "bound: max_tokens writes in flight"
        return None

    def _e_forge_write(self, state: CreditState, s: int, c: int) -> CreditState:
        peer = state.peers[s]
        led = peer.ledger
        inflight = _insert_sorted(peer.inflight, (led.session, led.epoch, c))
        return self._with_peer(state, s, peer._replace(inflight=inflight))

    # ---- the receiver's write admission ---------------------------------------------------

    def _g_data_lands(self, state: CreditState, s: int, item: Any) -> str | None:
        reason = super()._g_data_lands(state, s, item)
        if reason is not None:
            return reason
        b = self._books_for(state.peers[s], item[1])
        assert b is not None  # the base guard checked it
        if not self._admits(b, item[2]):
            return "write admission refuses it: landed + reclaimed + charge > granted"
        return None

    def _e_data_lands(self, state: CreditState, s: int, item: Any) -> CreditState:
        after = super()._e_data_lands(state, s, item)
        peer = after.peers[s]
        b = self._books_for(peer, item[1])
        assert b is not None  # the write landed on these books
        return self._with_peer(after, s, self._replace_books(peer, b, b._replace(held=b.held + 1)))

    def _g_refuse_write(self, state: CreditState, s: int, item: Any) -> str | None:
        peer = state.peers[s]
        if item not in peer.inflight:
            return "no such in-flight work"
        session, epoch, c = item
        if session != state.session:
            return "work of a dead receiver session never reaches admission"
        b = self._books_for(peer, epoch)
        if b is not None and b.status != RECLAIMED and self._admits(b, c):
            return "write admission accepts it"
        return None

    def _e_refuse_write(self, state: CreditState, s: int, item: Any) -> CreditState:
        peer = state.peers[s]
        current = peer.books[-1].epoch
        books = []
        for old in peer.books:
            b = old
            if b.status != RECLAIMED:
                b = b._replace(
                    status=RECLAIMED,
                    reclaimed=_vsub(b.granted, b.landed),
                    pushed_seq=0,
                    usage_seq=0,
                    demand=0,
                )
            if b.landed != b.released or b.epoch == current:
                books.append(b)  # the current epoch's books stay as the quarantine mark
        peer = peer._replace(books=tuple(books), inflight=_remove_one(peer.inflight, item))
        return self._with_peer(state, s, peer)

    # ---- what quarantine switches off ----------------------------------------------------

    def _receive_usage(self, state: CreditState, peer: Peer, msg: Usage) -> Peer:
        b = peer.books[-1]
        if b.status != ACTIVE or not _vle(_vadd(msg.returned, b.landed), b.granted):
            return peer  # quarantined, or a return of credit that landed data used
        return super()._receive_usage(state, peer, msg)

    def _g_push_update(self, state: CreditState, s: int) -> str | None:
        if self.quarantined(state.peers[s]):
            return "the key is quarantined: no update goes to it"
        return super()._g_push_update(state, s)

    def _g_publish_regressed(self, state: CreditState, s: int, r: int) -> str | None:
        if self.quarantined(state.peers[s]):
            return "the key is quarantined: no update goes to it"
        return super()._g_publish_regressed(state, s, r)

    def _g_sender_restart(self, state: CreditState, s: int) -> str | None:
        if self.quarantined(state.peers[s]):
            return "the key is quarantined: no new epoch in this session"
        return super()._g_sender_restart(state, s)

    def _e_consumer_release(self, state: CreditState, s: int, epoch: int) -> CreditState:
        peer = state.peers[s]
        if self.quarantined(peer) and epoch == peer.books[-1].epoch:
            b = peer.books[-1]  # release, but keep the quarantine mark
            nb = b._replace(released=b.landed, held=0)
            return self._with_peer(state, s, peer._replace(books=(*peer.books[:-1], nb)))
        after = super()._e_consumer_release(state, s, epoch)
        released = self._books_for(after.peers[s], epoch)
        if released is None or not released.held:
            return after  # settled and dropped, or nothing held
        peer = self._replace_books(after.peers[s], released, released._replace(held=0))
        return self._with_peer(after, s, peer)

    # ---- enumeration ---------------------------------------------------------------------

    def _sender_instances(
        self, state: CreditState, s: int
    ) -> Iterator[tuple[str, tuple[Hashable, ...]]]:
        yield from super()._sender_instances(state, s)
        peer = state.peers[s]
        if peer.ledger.session:
            for c in range(len(self._charges)):
                yield "lie_return", (s, c)
                yield "forge_write", (s, c)
        for item in sorted(set(peer.inflight)):
            yield "refuse_write", (s, item)

    def _check_args(self, state: CreditState, action: str, args: tuple[Hashable, ...]) -> str:
        arity = _ADVERSARY_ARITY.get(action)
        if arity is None:
            return super()._check_args(state, action, args)
        if not isinstance(args, tuple) or len(args) != arity:
            return f"{action} takes {arity} argument(s), got {args!r}"
        if not self._sender_ok(state, args[0]):
            return f"{action}: the first argument must be a sender index, got {args[0]!r}"
        if action == "refuse_write":
            if not (isinstance(args[1], tuple) and len(args[1]) == 3):
                return f"{action}: the in-flight item must be (session, epoch, charge)"
        elif not self._charge_ok(args[1]):
            return f"{action}: unknown charge index {args[1]!r}"
        return ""

    def action_names(self) -> Sequence[str]:
        return (*_ACTIONS, *_ADVERSARY_ACTIONS)

    def locate(
        self, state: CreditState, action: str, args: tuple[Hashable, ...]
    ) -> tuple[str, str, str | None, str | None]:
        """The honest spec's chart placement; the lie and the forged write are the sender's
        own steps, a refused write is data that never reaches the receiver's memory."""
        sender = f"sender[{args[0]}]" if args else ""
        if action in ("lie_return", "forge_write"):
            return ("local", sender, None, None)
        if action == "refuse_write":
            return ("lose", sender, "receiver", f"write {args[1]} refused")
        return super().locate(state, action, args)

    def fault_actions(self) -> frozenset[str]:
        return _FAULTS | {"lie_return", "forge_write"}

    def unreachable_actions(self) -> frozenset[str]:
        # a quarantine fences the key too: its work in flight can then fail; without restarts
        # every sender starts on the live key, so no activation is ever needed
        dead = super().unreachable_actions() - {"fail_inflight"}
        if not (self.bounds.max_sender_restarts or self.bounds.max_receiver_restarts):
            dead |= {"send_activation"}
        return dead

    # ---- the receiver's promises ---------------------------------------------------------

    def occupancy(self, state: CreditState) -> Vec:
        """Payload physically held by the receiver: Σ over every book of (landed − released)."""
        total = self._zero
        for p in state.peers:
            for b in p.books:
                total = _vadd(total, _vsub(b.landed, b.released))
        return total

    def inv_occupancy(self, state: CreditState) -> bool:
        """Physical occupancy never exceeds capacity, whatever a sender reports or writes."""
        return _vle(self.occupancy(state), self._capacity)

    def inv_transfers(self, state: CreditState) -> bool:
        """Transfers held per sender and epoch ≤ its slot credit granted and not released."""
        if self.bounds.resources < 2:
            return True
        return all(
            b.held <= b.granted[_SLOT] - b.released[_SLOT] for p in state.peers for b in p.books
        )

    def inv_committed(self, state: CreditState) -> bool:
        """Σ over every book of (granted − released − reclaimed) ≤ capacity: the sum only (a
        liar's books are not asked to be consistent; occupancy is the physical check)."""
        return all(f >= 0 for f in self.free_capacity(state))

    def invariants(self) -> Sequence[Any]:
        return (
            SpecInvariant(
                "physical_occupancy_within_capacity",
                'RFC "Security and Abuse Boundaries"; docs/transport_design.md#leases: a write is '
                "admitted before its bytes touch memory, so landed − released ≤ capacity",
                self.inv_occupancy,
            ),
            SpecInvariant(
                "held_transfers_within_slot_credit",
                'RFC "Security and Abuse Boundaries": "per-peer demand ... and control-queue '
                'occupancy are bounded"; issue 27 item 1: what the receiver holds per sender '
                "is bounded by the slot credit it granted, whatever the byte grant",
                self.inv_transfers,
            ),
            SpecInvariant(
                "capacity_never_exceeded",
                'RFC acceptance 1: "Aggregate reserved receiver resources never exceed '
                'configured capacity" (against any sender)',
                self.inv_committed,
            ),
        )

    def invariants_hold(self, state: CreditState) -> bool:
        # The base class's memoised pass covers *its* invariants; here it is the plain two.
        return all(invariant.holds(state) for invariant in self.invariants())

    def witnesses(self) -> Sequence[Any]:
        def liar_quarantined(st: CreditState) -> bool:
            return any(self.quarantined(p) for p in st.peers)

        def lie_reclaimed(st: CreditState) -> bool:
            # a report reclaimed credit whose payload is still in flight
            return any(
                p.inflight and any(b.status == ACTIVE and any(b.reclaimed) for b in p.books)
                for p in st.peers
            )

        return (
            SpecWitness("liar_quarantined", liar_quarantined),
            SpecWitness("in_flight_credit_reclaimed_by_a_lie", lie_reclaimed),
        )

    def recovered(self, state: CreditState) -> bool:
        """The receiver settled: nothing in flight, every landed write consumed, no epoch still
        fencing. (A liar's own ledger need not be consistent, so it is not asked about; the
        honest senders' recovery is the base models' property.)"""
        for p in state.peers:
            if p.inflight:
                return False
            for b in p.books:
                if b.landed != b.released or b.status == FENCING:
                    return False
        return True
