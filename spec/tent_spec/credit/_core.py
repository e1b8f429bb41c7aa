"""The frame every credit action is written in: construction, the initial state, the derived
quantities (available credit, free capacity, room in the network) and which actions the bounds
leave reachable.

:class:`CreditCore` is the first link of the spec's class chain: ``_actions`` (guards and
effects) → ``_invariants`` (the safety properties) → ``_model`` (the readable ``SpecModel``) →
``_fastpath`` (:class:`~tent_spec.credit.CreditSpec`, memoised). Each link initialises what it
owns.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import sub

from tent_spec.credit._state import (
    ACTIVE,
    FRESH,
    Books,
    CreditBounds,
    CreditState,
    Faults,
    Ledger,
    Peer,
    Vec,
    _in_flight_messages,
    _vadd,
    _vsub,
)
from tent_spec.credit._table import _ACTIONS, _FAULTS


class CreditCore:
    """The bounds, the initial state and the quantities every guard reads.

    Two class attributes exist for the guard ablation (``tent_models.ablation``) and variants:
    ``WITHOUT`` names ``(action, conjunct)`` pairs left out of the guards, and
    ``PRUNE_CANDIDATES = False`` makes ``_instances`` yield every instance of every action
    instead of pruning by cheap necessary conditions (which restate some conjuncts, so a removed
    conjunct would otherwise stay in force).
    """

    WITHOUT: frozenset[tuple[str, str]] = frozenset()
    PRUNE_CANDIDATES: bool = True

    def __init__(self, bounds: CreditBounds, *, name: str = "credit") -> None:
        self.bounds = bounds
        self.name = name
        self._zero: Vec = (0,) * bounds.resources
        self._charges = bounds.charges
        self._capacity = bounds.capacity

    # ---- initial state ------------------------------------------------------------------

    def _fresh_books(self, epoch: int) -> Books:
        z = self._zero
        return Books(epoch, ACTIVE, z, z, z, z, 0, 0, 0)

    def _fresh_ledger(self, session: int, epoch: int) -> Ledger:
        z = self._zero
        return Ledger(session, epoch, 0, 0, FRESH, 0, z, z, z, ())

    def initial_states(self) -> list[CreditState]:
        """Session 1, every sender activated at epoch 1 with no grant yet, nothing in flight."""
        peer = Peer(self._fresh_ledger(1, 1), 1, (self._fresh_books(1),), (), (), ())
        return [CreditState(1, (peer,) * self.bounds.senders, Faults(0, 0, 0, 0, 0, 0))]

    # ---- derived quantities ------------------------------------------------------------

    def free_capacity(self, state: CreditState) -> Vec:
        """Capacity minus Σ (granted − released − reclaimed) over all books
        (docs/semantics.md#receiver-allocator)."""
        free = self._capacity
        for p in state.peers:
            for b in p.books:
                free = _vsub(free, _vsub(_vsub(b.granted, b.released), b.reclaimed))
        return free

    @staticmethod
    def available(ledger: Ledger) -> Vec:
        """``grant_total − consumed − returned`` per resource (docs/semantics.md#sender-ledger)."""
        return tuple(map(sub, map(sub, ledger.grant_total, ledger.consumed), ledger.returned))

    def _charge_sum(self, indices: Sequence[int]) -> Vec:
        total = self._zero
        for i in indices:
            total = _vadd(total, self._charges[i])
        return total

    def _inflight_sum(self, peer: Peer, session: int, epoch: int) -> Vec:
        return self._charge_sum([c for s, e, c in peer.inflight if s == session and e == epoch])

    @staticmethod
    def _books_for(peer: Peer, epoch: int) -> Books | None:
        for b in peer.books:
            if b.epoch == epoch:
                return b
        return None

    def _room(self, state: CreditState) -> bool:
        """Another message fits the bag bound (``max_messages`` in flight in total)."""
        return _in_flight_messages(state) < self.bounds.max_messages

    @staticmethod
    def _with_peer(state: CreditState, s: int, peer: Peer) -> CreditState:
        peers = state.peers
        return CreditState(state.session, (*peers[:s], peer, *peers[s + 1 :]), state.faults)

    @staticmethod
    def _replace_books(peer: Peer, old: Books, new: Books | None) -> Peer:
        books = tuple(b for b in peer.books if b is not old)
        if new is not None:
            books = tuple(sorted((*books, new)))
        return peer._replace(books=books)

    def _fault_left(self, state: CreditState) -> bool:
        """The overall fault budget (``max_faults``) allows one more fault."""
        cap = self.bounds.max_faults
        return cap is None or sum(state.faults) < cap

    def _sender_ok(self, state: CreditState, s: object) -> bool:
        return type(s) is int and 0 <= s < len(state.peers)

    def _charge_ok(self, c: object) -> bool:
        return type(c) is int and 0 <= c < len(self._charges)

    # ---- the actions under these bounds ------------------------------------------------

    def action_names(self) -> Sequence[str]:
        return _ACTIONS

    def unreachable_actions(self) -> frozenset[str]:
        """Actions that can never fire under these bounds (a zero fault budget)."""
        b = self.bounds
        sender_restarts = min(b.max_sender_restarts, b.max_epoch - 1)
        dead = {
            action
            for action, budget in (
                ("duplicate", b.max_duplications),
                ("lose", b.max_losses),
                ("become_stale", b.max_stale),
                ("sender_restart", sender_restarts),
                ("receiver_restart", b.max_receiver_restarts),
                ("publish_regressed", b.max_regressions),
                # only a sender restart starts fencing an epoch
                ("reclaim_after_fence", sender_restarts),
                # fencing (sender restart) or a dead session (receiver restart) fails work
                ("fail_inflight", sender_restarts + b.max_receiver_restarts),
            )
            if budget == 0
        }
        if b.max_faults == 0:
            dead |= _FAULTS | {"reclaim_after_fence", "fail_inflight"}
        return frozenset(dead)

    def fault_actions(self) -> frozenset[str]:
        return _FAULTS
