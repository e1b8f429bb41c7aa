""":class:`CreditAdapter`: the drivers plus what the lockstep runner asks of an adapter besides
``perform``: the refusal a false guard maps to, which enabled steps the implementation takes,
and the abstraction function.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import cast

from tent_spec.credit import (
    ACTIVE,
    FENCING,
    FRESH,
    RECLAIMED,
    REVIVED,
    STALE,
    Books,
    CreditSpec,
    CreditState,
    Ledger,
    Peer,
)

from tent_credit import (
    EpochState,
    NegotiationState,
    TokenState,
)
from tent_credit.errors import InsufficientCredit, InvalidEntry
from tent_models.conformance._lockstep import Outcome
from tent_models.conformance.credit._drivers import _AdapterDrivers
from tent_models.conformance.credit._harness import (
    _bag,
    _vector,
)
from tent_models.conformance.credit._model import _NO_FAULTS


class CreditAdapter(_AdapterDrivers):
    """One receiver and ``bounds.senders`` senders driven by credit spec actions.

    Satisfies :class:`~tent_models.conformance.ImplementationAdapter` for
    :class:`~tent_spec.credit.CreditState` (see the package docstring for every mapping rule).
    ``trace``, when given, is passed to every endpoint (recording starts after setup, at the
    spec's initial state, when the sink's ``begin`` is called if it has one).
    """

    # ---- refusals --------------------------------------------------------------------------

    def refusal(
        self, state: CreditState, action: str, args: tuple[Hashable, ...]
    ) -> Outcome | None:
        """The implementation's answer when the spec's guard of ``action(args)`` is false.

        1. ``reserve``: backpressure, nothing changes (unchanged) - except when only the
           ``max_tokens`` bound disables it (no counterpart).
        2. ``commit`` / ``rollback`` with a RESERVED token of that charge only in a fenced entry
           → InvalidEntry (an old token never touches the new epoch).
        3. ``return_unused``: no entry or no update yet → InvalidEntry; else InsufficientCredit.
        4. ``data_lands`` of work in flight to a reclaimed (or settled) epoch of the live session
           → InvalidEntry from the allocator.
        5. ``reclaim_after_fence`` of an ACTIVE, RECLAIMED or unknown epoch → InvalidEntry.
        6. ``consumer_release`` of an epoch without books → InvalidEntry.
        7. Everything else (bounds, the spec's send-policy reductions, faults, internal steps,
           arguments naming nothing) has no counterpart.
        """
        if not args and action != "receiver_restart":
            return None
        if action == "reserve":
            s, c = cast("tuple[int, int]", args)
            led = state.peers[s].ledger
            if led.session and led.last_seq and led.freshness != STALE:
                available = CreditSpec.available(led)
                fits = all(a <= v for a, v in zip(self.bounds.charges[c], available, strict=True))
                if fits:
                    return None  # only the max_tokens bound refused it
            return Outcome.unchanged()
        if action in ("commit", "rollback"):
            s, c = cast("tuple[int, int]", args)
            if self._token(s, c, live=False) is not None and self._token(s, c, live=True) is None:
                return Outcome.raised(InvalidEntry)
            return None
        if action == "return_unused":
            s, _c = cast("tuple[int, int]", args)
            led = state.peers[s].ledger
            if not led.session or not led.last_seq:
                return Outcome.raised(InvalidEntry)
            return Outcome.raised(InsufficientCredit)
        if action == "data_lands":
            s, item = cast("tuple[int, tuple[int, int, int]]", args)
            peer = state.peers[s]
            if item in peer.inflight and item[0] == state.session:
                books = [b for b in peer.books if b.epoch == item[1]]
                if not books or books[0].status == RECLAIMED:
                    return Outcome.raised(InvalidEntry)
            return None
        if action == "reclaim_after_fence":
            s, epoch = cast("tuple[int, int]", args)
            books = [b for b in state.peers[s].books if b.epoch == epoch]
            if type(epoch) is int and epoch >= 1 and (not books or books[0].status != FENCING):
                return Outcome.raised(InvalidEntry)
            return None
        if action == "consumer_release":
            s, epoch = cast("tuple[int, int]", args)
            books = [b for b in state.peers[s].books if b.epoch == epoch]
            if type(epoch) is int and epoch >= 1 and not books:
                return Outcome.raised(InvalidEntry)
            return None
        return None

    # ---- the receiver's push order (mapping rule 1) --------------------------------------

    def push_order(self) -> list[int]:
        """The spec indices of the senders the receiver pushes freed capacity to next, in its
        order (:meth:`tent_credit.CreditReceiver.stalled_endpoints`)."""
        live = {id(rslot.endpoint): s for s, rslot in enumerate(self._rslots)}
        return [live[id(ep)] for ep in self._receiver.stalled_endpoints() if id(ep) in live]

    # ---- which enabled steps the implementation can take (the drivers' filter) -----------

    def supported(self, state: CreditState, action: str, args: tuple[Hashable, ...]) -> bool:
        """Whether the implementation can take the spec-enabled step ``action(args)`` now.

        False only for the behaviours the package docstring excludes: a report that drops or
        repeats a demand the receiver still holds, or has nothing new for the implementation to
        say (rule 2); a push before the connection offered (rule 4); ``reserve`` or
        ``become_stale`` while the sender is FENCING (rules 7 and 9); an activation of an older
        receiver session than the sender's (rule 12).
        """
        if action in ("reserve", "become_stale"):
            s = cast("int", args[0])
            return self._slots[s].endpoint.state is NegotiationState.ACTIVE or (
                action == "reserve" and self._slots[s].endpoint.state is NegotiationState.STALE
            )
        if action in ("push_update", "publish_regressed"):
            s = cast("int", args[0])
            return self._rslots[s].endpoint.statistics().version != 0
        if action == "report_usage":
            s, demand = cast("tuple[int, int]", args)
            return self._report_supported(s, demand)
        return True

    def _report_supported(self, s: int, demand: int) -> bool:
        slot = self._slots[s]
        key = slot.endpoint.key
        if key is None:
            return True  # the spec refuses it
        entry = slot.endpoint.ledger.entry(key)
        own = _vector(entry.grant_total, self._n)
        target = _vector(slot.endpoint.statistics().demand_target, self._n)
        reference = self._receiver_grant(s)
        if reference is None:  # a dead session or epoch: the receiver ignores the report
            return (
                bool(demand) or slot.dirty or any(t > g for t, g in zip(target, own, strict=True))
            )
        if self._rslots[s].endpoint.stalled:
            return False  # the receiver still holds a demand of this key
        if demand:
            charge = self.bounds.charges[demand - 1]
            return all(
                t <= g + a if a else t <= g
                for t, g, a in zip(target, reference, charge, strict=True)
            )
        if any(t > g for t, g in zip(target, reference, strict=True)):
            return False
        return slot.dirty or any(t > g for t, g in zip(target, own, strict=True))

    # ---- the abstraction function ------------------------------------------------------------

    def abstract(self) -> CreditState:
        """The implementation's public state (and the bytes in flight) as a spec state."""
        peers = tuple(self._abstract_peer(s) for s in range(self.bounds.senders))
        return CreditState(self._session, peers, _NO_FAULTS)

    def project(self, state: CreditState) -> CreditState:
        """The spec state with the fault counters erased (rule 11)."""
        return state._replace(faults=_NO_FAULTS)

    def _abstract_ledger(self, s: int) -> Ledger:
        slot = self._slots[s]
        endpoint = slot.endpoint
        key = endpoint.key
        n = self._n
        zero = (0,) * n
        if key is None:
            return Ledger(0, 0, 0, 0, FRESH, 0, zero, zero, zero, ())
        entry = endpoint.ledger.entry(key)
        session, epoch = key.receiver_session.value, endpoint.epoch
        if endpoint.state is NegotiationState.STALE:
            freshness = STALE
        else:
            freshness = REVIVED if slot.was_stale else FRESH
        tokens = sorted(
            c
            for token, c in slot.tokens
            if token.state is TokenState.RESERVED and (token.key, token.epoch) == (key, epoch)
        )
        return Ledger(
            session,
            epoch,
            self._spec_seq(session, s, epoch, entry.last_sequence),
            slot.usage_seq,
            freshness,
            self._spec_seq(session, s, epoch, slot.stale_at) if slot.was_stale else 0,
            _vector(entry.grant_total, n),
            _vector(entry.consumed, n),
            _vector(entry.returned, n),
            tuple(tokens),
            # the spec's history of tokens held since staleness: the harness draws no reserve
            # on a STALE entry and the implementation refuses one, so all of them
            tuple(tokens) if freshness == STALE else (),
        )

    def _abstract_books(self, s: int) -> tuple[int, tuple[Books, ...]]:
        allocator = self._receiver.allocator
        peer = self.peer(s)
        current = allocator.current_epoch(peer, 0)
        rslot = self._rslots[s]
        n = self._n
        books: list[Books] = []
        for epoch in range(1, current + 1):
            try:
                totals = allocator.key_totals(peer, 0, epoch)
            except InvalidEntry:
                continue  # settled and forgotten
            status = {
                EpochState.ACTIVE: ACTIVE,
                EpochState.FENCING: FENCING,
                EpochState.FENCED: RECLAIMED,
            }[totals.state]
            pushed = usage = demand = 0
            if status == ACTIVE and rslot.endpoint.epoch == epoch:
                stats = rslot.endpoint.statistics()
                pushed = self._spec_seq(self._session, s, epoch, stats.updates_pushed)
                usage = rslot.usage_seq
                demand = (rslot.demand or -1) if stats.stalled else 0
            books.append(
                Books(
                    epoch,
                    status,
                    _vector(totals.granted, n),
                    _vector(totals.released, n),
                    _vector(totals.reclaimed, n),
                    _vector(totals.landed, n),
                    pushed,
                    usage,
                    demand,
                )
            )
        return current, tuple(books)

    def _abstract_peer(self, s: int) -> Peer:
        slot = self._slots[s]
        epoch, books = self._abstract_books(s)
        inflight = tuple(sorted((w.session, w.epoch, w.charge) for w in self._work[s]))
        to_sender = _bag(self._spec_message(s, d) for d in slot.down.contents())
        to_receiver = _bag(self._spec_message(s, d) for d in slot.up.contents())
        return Peer(self._abstract_ledger(s), epoch, books, inflight, to_sender, to_receiver)
