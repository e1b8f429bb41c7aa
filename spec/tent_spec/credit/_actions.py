"""Every action of the credit spec as guard + effect: one method per conjunct of
:data:`~tent_spec.credit._table.GUARDS` (``None`` when it holds, else the reason in words) and
one ``_e_<action>`` per effect, grouped by who acts.

Read an action's guard in the table, its conjuncts and effect here; each effect cites the RFC
or docs/semantics.md rule it follows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tent_spec.credit._core import CreditCore
from tent_spec.credit._state import (
    ACTIVATION,
    ACTIVE,
    FENCING,
    RECLAIMED,
    REVIVED,
    STALE,
    UPDATE,
    USAGE,
    Activation,
    Books,
    CreditBounds,
    CreditState,
    InvalidBounds,
    Ledger,
    Peer,
    Update,
    Usage,
    Vec,
    _bag_add,
    _bag_count,
    _bag_remove,
    _drop,
    _insert_sorted,
    _remove_one,
    _vadd,
    _vle,
    _vsub,
)
from tent_spec.credit._table import _ACTIONS, GUARDS


class CreditActions(CreditCore):
    """The guards and effects (``_g_<action>(state, *args)`` and ``_e_<action>(state, *args)``).

    An action's guard is the conjunction of its rows in ``GUARDS``; ``_g_<action>`` evaluates
    them in order, those in ``WITHOUT`` left out, and returns the first failing conjunct's
    reason. Known-bad variants (:mod:`tent_spec.variants`) subclass the spec and remove a
    conjunct (``WITHOUT``), or override one guard or effect each.
    """

    # The guards, one per action, generated from GUARDS below the class (overridable).
    _g_grant: Callable[..., str | None]
    _g_push_update: Callable[..., str | None]
    _g_send_activation: Callable[..., str | None]
    _g_report_usage: Callable[..., str | None]
    _g_deliver: Callable[..., str | None]
    _g_duplicate: Callable[..., str | None]
    _g_lose: Callable[..., str | None]
    _g_reserve: Callable[..., str | None]
    _g_commit: Callable[..., str | None]
    _g_rollback: Callable[..., str | None]
    _g_return_unused: Callable[..., str | None]
    _g_data_lands: Callable[..., str | None]
    _g_fail_inflight: Callable[..., str | None]
    _g_consumer_release: Callable[..., str | None]
    _g_reclaim_after_fence: Callable[..., str | None]
    _g_become_stale: Callable[..., str | None]
    _g_sender_restart: Callable[..., str | None]
    _g_receiver_restart: Callable[..., str | None]
    _g_publish_regressed: Callable[..., str | None]

    def __init__(self, bounds: CreditBounds, *, name: str = "credit") -> None:
        super().__init__(bounds, name=name)
        # Bound guard/effect methods by action name (subclasses' overrides included).
        unknown = self.WITHOUT - {(a, g.name) for a, rows in GUARDS.items() for g in rows}
        if unknown:
            raise InvalidBounds(f"WITHOUT names no guard conjunct: {sorted(unknown)}")
        self._conjuncts: dict[str, tuple[Callable[..., str | None], ...]] = {
            a: tuple(getattr(self, g.check) for g in rows if (a, g.name) not in self.WITHOUT)
            for a, rows in GUARDS.items()
        }
        self._guard: dict[str, Callable[..., str | None]] = {
            a: getattr(self, "_g_" + a) for a in _ACTIONS
        }
        self._effect: dict[str, Callable[..., CreditState]] = {
            a: getattr(self, "_e_" + a) for a in _ACTIONS
        }

    # ---- receiver: grant, publish, activate --------------------------------------------

    def _demand_pending(self, state: CreditState, s: int) -> str | None:
        if not state.peers[s].books[-1].demand:
            return "no pending demand from this sender's current epoch"
        return None

    def _free_covers_demand(self, state: CreditState, s: int) -> str | None:
        want = self._charges[state.peers[s].books[-1].demand - 1]
        if not _vle(want, self.free_capacity(state)):
            return "free capacity does not cover the demand (all-or-nothing)"
        return None

    def _grant_within_bound(self, state: CreditState, s: int) -> str | None:
        b = state.peers[s].books[-1]
        want = self._charges[b.demand - 1]
        if any(g + w > self.bounds.max_grant_total for g, w in zip(b.granted, want, strict=True)):
            return "bound: max_grant_total reached"
        return None

    def _e_grant(self, state: CreditState, s: int) -> CreditState:
        """Carve the demanded vector from free capacity and publish the new cumulative totals.

        docs/semantics.md#receiver-allocator: grants come from free capacity on demand,
        all-or-nothing. RFC concurrency rule 4: "Grant publication happens after reservation is
        committed" - one step here.
        """
        peer = state.peers[s]
        b = peer.books[-1]
        granted = _vadd(b.granted, self._charges[b.demand - 1])
        return self._publish(state, s, b._replace(granted=granted, demand=0), granted)

    def _message_room(self, state: CreditState, *_args: Any) -> str | None:
        if not self._room(state):
            return "bound: max_messages in flight"
        return None

    def _push_seq_within_cap(self, state: CreditState, s: int, *_args: Any) -> str | None:
        if state.peers[s].books[-1].pushed_seq >= self.bounds.seq_cap:
            return "bound: max_seq reached"
        return None

    def _publish(self, state: CreditState, s: int, b: Books, grants: Vec) -> CreditState:
        """Send ``Update(next sequence, grants)`` for the live key whose books become ``b``."""
        peer = state.peers[s]
        seq = b.pushed_seq + 1
        msg = Update(UPDATE, state.session, b.epoch, seq, grants)
        peer = peer._replace(
            books=(*peer.books[:-1], b._replace(pushed_seq=seq)),
            to_sender=_bag_add(peer.to_sender, msg),
        )
        return self._with_peer(state, s, peer)

    def _refresh_due(self, state: CreditState, s: int) -> str | None:
        peer = state.peers[s]
        b = peer.books[-1]
        for m, _n in peer.to_sender:
            if m.kind == UPDATE and m.session == state.session and m.epoch == b.epoch:
                # Model reduction: the refresh interval exceeds the one-way delay; old copies
                # still arrive late through `duplicate`, and grants publish while one is pending.
                return "an update of the live key is still in flight (refresh timer not due)"
        return None

    def _e_push_update(self, state: CreditState, s: int) -> CreditState:
        # docs/design.md#control-flow: the refresh/heartbeat timer re-publishes the FULL cumulative
        # vector.
        b = state.peers[s].books[-1]
        return self._publish(state, s, b, b.granted)

    def _sender_off_live_key(self, state: CreditState, s: int) -> str | None:
        peer = state.peers[s]
        if (peer.ledger.session, peer.ledger.epoch) == (state.session, peer.epoch):
            # Model reduction: a redundant activation is a no-op wherever it arrives (its key
            # is never newer than the sender's), so it is not sent.
            return "the sender already runs on the live key"
        return None

    def _activation_not_in_flight(self, state: CreditState, s: int) -> str | None:
        peer = state.peers[s]
        if _bag_count(peer.to_sender, Activation(ACTIVATION, state.session, peer.epoch)):
            return "this activation is already in flight (a second copy is a duplicate fault)"
        return None

    def _e_send_activation(self, state: CreditState, s: int) -> CreditState:
        # docs/semantics.md#negotiation: the receiver chooses the epoch and carries it in the
        # activation.
        peer = state.peers[s]
        msg = Activation(ACTIVATION, state.session, peer.epoch)
        return self._with_peer(state, s, peer._replace(to_sender=_bag_add(peer.to_sender, msg)))

    # ---- sender: usage reports, reserve / commit / rollback / return --------------------

    # report_usage: RFC "Control traffic never consumes data credit" - no credit conjunct.
    def _sender_has_entry(self, state: CreditState, s: int, *_args: Any) -> str | None:
        if not state.peers[s].ledger.session:
            return "the sender has no ledger entry (not activated since its restart)"
        return None

    def _usage_seq_within_cap(self, state: CreditState, s: int, _demand: int) -> str | None:
        if state.peers[s].ledger.usage_seq >= self.bounds.seq_cap:
            return "bound: max_seq reached"
        return None

    def _demand_uncovered(self, state: CreditState, s: int, demand: int) -> str | None:
        led = state.peers[s].ledger
        if demand and _vle(self._charges[demand - 1], self.available(led)):
            return "a demand is reported only for a charge the available credit cannot cover"
        return None

    def _something_to_report(self, state: CreditState, s: int, demand: int) -> str | None:
        if not demand and not any(state.peers[s].ledger.returned):
            # Model reduction: without a demand, a report only matters for returns.
            return "nothing to report: no demand and nothing returned"
        return None

    def _report_due(self, state: CreditState, s: int, _demand: int) -> str | None:
        led = state.peers[s].ledger
        for m, _n in state.peers[s].to_receiver:
            if (m.session, m.epoch) == (led.session, led.epoch):
                # Model reduction: the report interval exceeds the one-way delay (old copies
                # still arrive late through `duplicate`).
                return "a usage report of this entry is still in flight (report timer not due)"
        return None

    def _e_report_usage(self, state: CreditState, s: int, demand: int) -> CreditState:
        peer = state.peers[s]
        led = peer.ledger
        seq = led.usage_seq + 1
        msg = Usage(USAGE, led.session, led.epoch, seq, led.returned, demand)
        peer = peer._replace(
            ledger=led._replace(usage_seq=seq), to_receiver=_bag_add(peer.to_receiver, msg)
        )
        return self._with_peer(state, s, peer)

    def _entry_has_update(self, state: CreditState, s: int, _c: int) -> str | None:
        led = state.peers[s].ledger
        if not led.session or not led.last_seq:
            return "no ledger entry or no update applied yet (docs/semantics.md#sender-ledger: IE)"
        return None

    def _entry_not_stale(self, state: CreditState, s: int, _c: int) -> str | None:
        if state.peers[s].ledger.freshness == STALE:
            return "the entry is stale: no new credit-gated dispatch (RFC state machine rule 2)"
        return None

    def _tokens_within_bound(self, state: CreditState, s: int, _c: int) -> str | None:
        if len(state.peers[s].ledger.tokens) >= self.bounds.max_tokens:
            return "bound: max_tokens live reservations"
        return None

    def _credit_covers_charge(self, state: CreditState, s: int, c: int) -> str | None:
        if not _vle(self._charges[c], self.available(state.peers[s].ledger)):
            return "insufficient credit in some charged resource (nothing is reserved)"
        return None

    def _e_reserve(self, state: CreditState, s: int, c: int) -> CreditState:
        # RFC "Atomic multi-resource eligibility": the whole charge vector or nothing.
        peer = state.peers[s]
        led = peer.ledger
        led = led._replace(
            consumed=_vadd(led.consumed, self._charges[c]), tokens=_insert_sorted(led.tokens, c)
        )
        return self._with_peer(state, s, peer._replace(ledger=led))

    def _token_reserved(self, state: CreditState, s: int, c: int) -> str | None:
        if c not in state.peers[s].ledger.tokens:
            return "no RESERVED token with this charge in the sender's current entry"
        return None

    def _e_commit(self, state: CreditState, s: int, c: int) -> CreditState:
        # The token goes to the transport: RESERVED -> COMMITTED, now in flight to the receiver.
        peer = state.peers[s]
        led = peer.ledger
        peer = peer._replace(
            ledger=led._replace(
                tokens=_remove_one(led.tokens, c), stale_tokens=_drop(led.stale_tokens, c)
            ),
            inflight=_insert_sorted(peer.inflight, (led.session, led.epoch, c)),
        )
        return self._with_peer(state, s, peer)

    def _e_rollback(self, state: CreditState, s: int, c: int) -> CreditState:
        # docs/semantics.md#sender-ledger: rollback subtracts exactly what was reserved (work never
        # handed off).
        peer = state.peers[s]
        led = peer.ledger
        led = led._replace(
            consumed=_vsub(led.consumed, self._charges[c]),
            tokens=_remove_one(led.tokens, c),
            stale_tokens=_drop(led.stale_tokens, c),
        )
        return self._with_peer(state, s, peer._replace(ledger=led))

    def _available_covers_return(self, state: CreditState, s: int, c: int) -> str | None:
        if not _vle(self._charges[c], self.available(state.peers[s].ledger)):
            return "cannot return more than is available (docs/semantics.md#sender-ledger)"
        return None

    def _e_return_unused(self, state: CreditState, s: int, c: int) -> CreditState:
        peer = state.peers[s]
        led = peer.ledger
        led = led._replace(returned=_vadd(led.returned, self._charges[c]))
        return self._with_peer(state, s, peer._replace(ledger=led))

    # ---- delivery and network faults ---------------------------------------------------

    def _message_in_flight(self, state: CreditState, s: int, msg: Any) -> str | None:
        peer = state.peers[s]
        if not (_bag_count(peer.to_sender, msg) or _bag_count(peer.to_receiver, msg)):
            return "the message is not in flight"
        return None  # RFC: control delivery is never gated by data credit

    def _e_deliver(self, state: CreditState, s: int, msg: Any) -> CreditState:
        peer = state.peers[s]
        if msg.kind == USAGE:
            peer = peer._replace(to_receiver=_bag_remove(peer.to_receiver, msg))
            return self._with_peer(state, s, self._receive_usage(state, peer, msg))
        peer = peer._replace(to_sender=_bag_remove(peer.to_sender, msg))
        if msg.kind == UPDATE:
            led = self._apply_update(peer.ledger, msg)
        else:
            led = self._apply_activation(peer.ledger, msg)
        return self._with_peer(state, s, peer._replace(ledger=led))

    def _accepts_sequence(self, led: Ledger, seq: int) -> bool:
        # RFC: "sequence is newer than the last accepted update".
        return seq > led.last_seq

    def _accepts_totals(self, led: Ledger, grants: Vec) -> bool:
        # RFC: "every cumulative grant is non-decreasing"; docs/semantics.md#sender-ledger: and
        # never below consumed.
        return _vle(led.grant_total, grants) and _vle(_vadd(led.consumed, led.returned), grants)

    def _new_grant_total(self, led: Ledger, grants: Vec) -> Vec:
        return grants  # absolute cumulative totals replace the old ones

    def _apply_update(self, led: Ledger, msg: Update) -> Ledger:
        """docs/semantics.md#sender-ledger ``apply_update``: anything not matching the rule is a
        no-op."""
        if msg.session != led.session or msg.epoch != led.epoch:
            return led  # RFC: "session_id and epoch match the active peer session"
        if not self._accepts_sequence(led, msg.seq):
            return led  # RFC: "Duplicate and old updates become no-ops"
        if not self._accepts_totals(led, msg.grants):
            return led  # RFC rule 5: "decreasing cumulative total: reject the update"
        return led._replace(
            grant_total=self._new_grant_total(led, msg.grants),
            last_seq=msg.seq,
            freshness=REVIVED if led.freshness == STALE else led.freshness,
            stale_tokens=(),
        )

    def _apply_activation(self, led: Ledger, msg: Activation) -> Ledger:
        """A newer (session, epoch) starts a fresh entry: the epoch fence
        (docs/semantics.md#sender-ledger)."""
        if (msg.session, msg.epoch) <= (led.session, led.epoch):
            return led  # same key: no-op (no reset of consumption); older: ignored
        # Old RESERVED tokens die with the old entry: any operation on them is IE.
        return self._fresh_ledger(msg.session, msg.epoch)

    def _receive_usage(self, state: CreditState, peer: Peer, msg: Usage) -> Peer:
        """The receiver applies a newer usage report of a live key; anything else is a no-op."""
        b = peer.books[-1]
        if msg.session != state.session or msg.epoch != b.epoch or msg.seq <= b.usage_seq:
            return peer
        if not (_vle(b.reclaimed, msg.returned) and _vle(msg.returned, b.granted)):
            return peer  # cumulative returns never decrease and never exceed the grant
        # docs/semantics.md#receiver-allocator: reclaim `returned − already reclaimed` (idempotent
        # on replay).
        nb = b._replace(usage_seq=msg.seq, reclaimed=msg.returned, demand=msg.demand)
        return peer._replace(books=(*peer.books[:-1], nb))

    def _duplication_left(self, state: CreditState, *_args: Any) -> str | None:
        if state.faults.duplications >= self.bounds.max_duplications:
            return "fault budget: max_duplications used"
        return None

    def _any_fault_left(self, state: CreditState, *_args: Any) -> str | None:
        if not self._fault_left(state):
            return "fault budget: max_faults used"
        return None

    def _e_duplicate(self, state: CreditState, s: int, msg: Any) -> CreditState:
        peer = state.peers[s]
        if msg.kind == USAGE:
            peer = peer._replace(to_receiver=_bag_add(peer.to_receiver, msg))
        else:
            peer = peer._replace(to_sender=_bag_add(peer.to_sender, msg))
        f = state.faults
        state = state._replace(faults=f._replace(duplications=f.duplications + 1))
        return self._with_peer(state, s, peer)

    def _loss_left(self, state: CreditState, *_args: Any) -> str | None:
        if state.faults.losses >= self.bounds.max_losses:
            return "fault budget: max_losses used"
        return None

    def _e_lose(self, state: CreditState, s: int, msg: Any) -> CreditState:
        peer = state.peers[s]
        if msg.kind == USAGE:
            peer = peer._replace(to_receiver=_bag_remove(peer.to_receiver, msg))
        else:
            peer = peer._replace(to_sender=_bag_remove(peer.to_sender, msg))
        f = state.faults
        state = state._replace(faults=f._replace(losses=f.losses + 1))
        return self._with_peer(state, s, peer)

    # ---- in-flight work, consumer, fencing ---------------------------------------------

    def _work_in_flight(self, state: CreditState, s: int, item: Any) -> str | None:
        if item not in state.peers[s].inflight:
            return "no such in-flight work"
        return None

    def _work_of_live_session(self, state: CreditState, s: int, item: Any) -> str | None:
        if item[0] != state.session:
            return "work of a dead receiver session never lands (its QPs died with it)"
        return None

    def _work_epoch_open(self, state: CreditState, s: int, item: Any) -> str | None:
        b = self._books_for(state.peers[s], item[1])
        if b is None or b.status == RECLAIMED:
            return "the epoch was fenced and reclaimed: its QPs are closed"
        return None

    def _e_data_lands(self, state: CreditState, s: int, item: Any) -> CreditState:
        peer = state.peers[s]
        b = self._books_for(peer, item[1])
        assert b is not None  # guarded
        nb = b._replace(landed=_vadd(b.landed, self._charges[item[2]]))
        peer = self._replace_books(peer, b, nb)._replace(inflight=_remove_one(peer.inflight, item))
        return self._with_peer(state, s, peer)

    def _work_epoch_not_live(self, state: CreditState, s: int, item: Any) -> str | None:
        session, epoch, _c = item
        if session == state.session:
            b = self._books_for(state.peers[s], epoch)
            if b is not None and b.status == ACTIVE:
                return "work of a live epoch is not failed by fencing"
        return None

    def _e_fail_inflight(self, state: CreditState, s: int, item: Any) -> CreditState:
        # RFC rule 3: old QPs / in-flight work are "drained or failed" before reuse.
        peer = state.peers[s]
        return self._with_peer(state, s, peer._replace(inflight=_remove_one(peer.inflight, item)))

    def _books_exist(self, state: CreditState, s: int, epoch: int) -> str | None:
        if self._books_for(state.peers[s], epoch) is None:
            return "no books for this epoch"
        return None

    def _landed_awaits_consumer(self, state: CreditState, s: int, epoch: int) -> str | None:
        b = self._books_for(state.peers[s], epoch)
        if b is not None and b.landed == b.released:
            return "nothing landed awaits the consumer"
        return None

    def _e_consumer_release(self, state: CreditState, s: int, epoch: int) -> CreditState:
        # docs/semantics.md#receiver-allocator release: the receiver's own consumer says so, never a
        # sender's message.
        peer = state.peers[s]
        b = self._books_for(peer, epoch)
        assert b is not None  # guarded
        nb: Books | None = b._replace(released=b.landed)
        if b.status == RECLAIMED:
            nb = None  # fully settled: granted == released + reclaimed
        return self._with_peer(state, s, self._replace_books(peer, b, nb))

    def _epoch_fencing(self, state: CreditState, s: int, epoch: int) -> str | None:
        b = self._books_for(state.peers[s], epoch)
        if b is None or b.status != FENCING:
            return "the epoch is not fencing"
        return None

    def _epoch_work_settled(self, state: CreditState, s: int, epoch: int) -> str | None:
        if any(e == epoch and ss == state.session for ss, e, _ in state.peers[s].inflight):
            return "in-flight work of the epoch has not landed or failed yet"
        return None

    def _e_reclaim_after_fence(self, state: CreditState, s: int, epoch: int) -> CreditState:
        # RFC: "do not reuse old target resources until old QPs/inflight work are fenced".
        peer = state.peers[s]
        b = self._books_for(peer, epoch)
        assert b is not None  # guarded
        nb: Books | None = b._replace(status=RECLAIMED, reclaimed=_vsub(b.granted, b.landed))
        if b.landed == b.released:
            nb = None
        return self._with_peer(state, s, self._replace_books(peer, b, nb))

    # ---- faults: staleness, restarts, a regressed publish ------------------------------

    def _stale_left(self, state: CreditState, s: int) -> str | None:
        if state.faults.stale >= self.bounds.max_stale:
            return "fault budget: max_stale used"
        return None

    def _entry_live_and_fresh(self, state: CreditState, s: int) -> str | None:
        led = state.peers[s].ledger
        if not led.session or led.freshness == STALE:
            return "no live ledger entry or already stale"
        return None

    def _e_become_stale(self, state: CreditState, s: int) -> CreditState:
        # docs/semantics.md#negotiation: TTL expiry or disconnect; a newer update of the same key
        # revives it.
        peer = state.peers[s]
        led = peer.ledger
        led = led._replace(freshness=STALE, stale_at=led.last_seq, stale_tokens=led.tokens)
        f = state.faults
        state = state._replace(faults=f._replace(stale=f.stale + 1))
        return self._with_peer(state, s, peer._replace(ledger=led))

    def _sender_restart_left(self, state: CreditState, s: int) -> str | None:
        if state.faults.sender_restarts >= self.bounds.max_sender_restarts:
            return "fault budget: max_sender_restarts used"
        return None

    def _epoch_within_bound(self, state: CreditState, s: int) -> str | None:
        if state.peers[s].epoch >= self.bounds.max_epoch:
            return "bound: max_epoch reached for this sender"
        return None

    def _e_sender_restart(self, state: CreditState, s: int) -> CreditState:
        """The sender process restarts and reconnects; the receiver bumps its epoch.

        The new process has no ledger entry and a new control connection: messages still in
        flight to the old process go nowhere (its reports to the receiver may still arrive).
        The old epoch's books start fencing; their pushed sequence, usage sequence and demand
        are dropped (no update or grant goes to that epoch again).
        """
        peer = state.peers[s]
        b = peer.books[-1]
        fenced = b._replace(status=FENCING, pushed_seq=0, usage_seq=0, demand=0)
        epoch = peer.epoch + 1
        peer = peer._replace(
            ledger=self._fresh_ledger(0, 0),
            epoch=epoch,
            books=(*peer.books[:-1], fenced, self._fresh_books(epoch)),
            to_sender=(),
        )
        f = state.faults
        state = state._replace(faults=f._replace(sender_restarts=f.sender_restarts + 1))
        return self._with_peer(state, s, peer)

    def _receiver_restart_left(self, state: CreditState) -> str | None:
        if state.faults.receiver_restarts >= self.bounds.max_receiver_restarts:
            return "fault budget: max_receiver_restarts used"
        return None

    def _e_receiver_restart(self, state: CreditState) -> CreditState:
        """The receiver restarts with a new session id: its books and QPs are gone.

        Work and reports in flight to the old process can never reach the new one; they are
        dropped here (the transport fails them). Updates the old process sent may still arrive;
        senders keep their old-session entries until an activation reaches them.
        """
        session = state.session + 1
        books = (self._fresh_books(1),)
        peers = tuple(
            p._replace(
                epoch=1,
                books=books,
                inflight=tuple(i for i in p.inflight if i[0] == session),
                to_receiver=(),
            )
            for p in state.peers
        )
        f = state.faults
        return CreditState(session, peers, f._replace(receiver_restarts=f.receiver_restarts + 1))

    def _regression_left(self, state: CreditState, s: int, r: int) -> str | None:
        if state.faults.regressions >= self.bounds.max_regressions:
            return "fault budget: max_regressions used"
        return None

    def _holds_live_grant(self, state: CreditState, s: int, r: int) -> str | None:
        peer = state.peers[s]
        led = peer.ledger
        if (led.session, led.epoch) != (state.session, peer.epoch) or not led.grant_total[r]:
            return "the sender holds no accepted grant of this resource on the live key"
        return None

    def _e_publish_regressed(self, state: CreditState, s: int, r: int) -> CreditState:
        """A faulty receiver publishes, under its next sequence, a total for resource ``r`` one
        below what the sender already accepted (the other totals as granted).

        RFC rule 5: "decreasing cumulative total: reject the update". The sender must refuse it.
        """
        peer = state.peers[s]
        b = peer.books[-1]
        low = peer.ledger.grant_total[r] - 1
        grants = tuple(low if i == r else g for i, g in enumerate(b.granted))
        f = state.faults
        state = state._replace(faults=f._replace(regressions=f.regressions + 1))
        return self._publish(state, s, b, grants)


def _conjunction(action: str) -> Callable[..., str | None]:
    """``CreditActions._g_<action>``: the first failing conjunct of ``GUARDS[action]`` (those in
    ``WITHOUT`` left out), or ``None`` when all hold."""

    def guard(self: CreditActions, state: CreditState, *args: Any) -> str | None:
        for check in self._conjuncts[action]:
            reason = check(state, *args)
            if reason is not None:
                return reason
        return None

    guard.__name__ = guard.__qualname__ = f"_g_{action}"
    return guard


for _action in _ACTIONS:
    setattr(CreditActions, f"_g_{_action}", _conjunction(_action))
assert tuple(GUARDS) == _ACTIONS
