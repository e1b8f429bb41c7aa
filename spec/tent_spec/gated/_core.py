"""The gated spec's queue and gate: hooks, the sender's level and report rules, the pick, the
returned-credit path, and the queue and transport actions (:class:`GatedCore`)."""

from __future__ import annotations

from collections.abc import Sequence

from tent_spec.admission import (
    CANCELED,
    COMPLETED,
    DISPATCHING,
    FAILED,
    OWNER_TRANSITIONS,
    QUEUED,
)

from ._ahead import in_heads, unit_of
from ._line import GatedLine
from ._values import (
    ACTIVE,
    COMMITTED,
    FENCING,
    NEVER_STALLED,
    NONE,
    RESERVED,
    STALLED,
    TOKEN_TRANSITIONS,
    WAS_STALLED,
    Faults,
    GatedState,
    Owner,
    ReceiverKey,
    SenderKey,
    Vec,
    _vadd,
    _vle,
    _vsub,
    charge_of,
)


class GatedCore(GatedLine):
    """The queue and gate half of :class:`~tent_spec.gated.GatedSpec`: its policy hooks, derived
    quantities (the sender's level and report rules among them), the pick and the
    returned-credit path, and the guards (``_g_<action>``) and effects (``_e_<action>``) of the
    queue and transport actions. The receiver's grants are :class:`~._line.GatedLine`'s."""

    # ---- policy hooks (the known-bad variants override exactly one) -----------------------

    def reserve(self, ledger: SenderKey, charge: Vec) -> tuple[SenderKey, bool]:
        """Reserve ``charge`` atomically: all resources or none (RFC claim 3)."""
        if not _vle(charge, self.available(ledger)):
            return ledger, False
        return ledger._replace(consumed=_vadd(ledger.consumed, charge)), True

    def snapshot_fenced(self, owner: Owner, ledger: SenderKey) -> bool:
        """RFC "Replay and restart safety": an old snapshot never spends new-session credit."""
        return owner.snapshot != ledger.session

    def requeue_blocked(self, queue: tuple[int, ...], blocked: Sequence[int]) -> tuple[int, ...]:
        """A blocked owner stays QUEUED *in place* (docs/design.md#gate-at-eligibility: "with its
        enqueue order")."""
        del blocked
        return queue

    def control_needs_credit(self, ledger: SenderKey) -> bool:
        """RFC rule 4: "Control traffic never consumes data credit" - reporting is always free."""
        del ledger
        return False

    def idle_credit(self, state: GatedState, key: int) -> Vec:
        """The key's available credit beyond its whole level (in flight plus waiting, as
        :meth:`report_idle`): what the gate gives back when an owner left the key without
        using credit (issue 10 item 8). Beyond the level, not beyond the waiting work alone:
        the receiver tops a key up for its work in flight that landed and is not completed
        yet, and the gate settles a ``withdrawn`` key at every pick, so returning that top-up
        had it granted straight back at every pick until the completion (the returned totals
        of a two-key model with a refused submit grew without bound)."""
        return self.report_idle(state, key)

    def returns_uncovered(self) -> bool:
        """Report rule 5 (docs/credit_protocol.md#uncovered-credit): credit on hand that does
        not cover the head's charge goes back at once (:meth:`return_uncovered`). Without it
        two keys that each hold a part of their head's charge wait for each other for good
        (``gated/bad/holds_fragments``)."""
        return True

    # ---- initial state -------------------------------------------------------------------

    def initial_states(self) -> list[GatedState]:
        """After the handshake of every key on session 1: each sender endpoint is ACTIVE with
        the activation's update applied (the initial grant, update 1); nothing was reported
        yet (a version-2 sender reports only news, and the activation's grant is not idle
        before its first report) and no message is in flight."""
        cfg = self.config
        z = self._zero
        grant = cfg.initial_grant
        sender = SenderKey(ACTIVE, 1, 1, grant, z, z, 0, z, z, z, False, False, False)
        receiver = ReceiverKey(True, grant, z, z, z, z, z, 1, 0, False, False, False, False)
        k = cfg.keys
        return [
            GatedState(
                session=1,
                admitted=0,
                owners=(),
                queue=(),
                outstanding_owners=0,
                outstanding_bytes=0,
                dispatching_bytes=0,
                senders=(sender,) * k,
                receivers=(receiver,) * k,
                to_sender=((),) * k,
                to_receiver=((),) * k,
                faults=Faults(0, 0, 0),
                line=(),
                bypass=(0,) * k,
            )
        ]

    # ---- derived quantities --------------------------------------------------------------

    @staticmethod
    def available(ledger: SenderKey) -> Vec:
        """``grant_total − consumed − returned`` (docs/semantics.md#sender-ledger)."""
        return _vsub(_vsub(ledger.grant_total, ledger.consumed), ledger.returned)

    def waiting(self, state: GatedState, key: int) -> Vec:
        """Σ charges of the key's QUEUED owners with a live credit stall (the route's wait)."""
        total = self._zero
        for o in state.owners:
            if o.key == key and o.state == QUEUED and o.stall == STALLED:
                total = _vadd(total, charge_of(o.length))
        return total

    def head(self, state: GatedState, key: int) -> Vec:
        """The charge of the key's first credit-stalled owner in queue order (zeros: none):
        the one its sender waits on first (within a key the gate keeps queue order)."""
        for owner_id in state.queue:
            o = state.owners[owner_id - 1]
            if o.key == key and o.stall == STALLED:
                return charge_of(o.length)
        return self._zero

    def in_flight(self, state: GatedState, key: int) -> Vec:
        """Σ charges of the key's work committed on its current entry and not completed."""
        session = state.senders[key - 1].session
        total = self._zero
        for o in state.owners:
            if o.key == key and o.token == COMMITTED and o.token_session == session:
                total = _vadd(total, charge_of(o.length))
        return total

    def level(self, state: GatedState, key: int) -> Vec:
        """The level the sender states: its work in flight plus what the gate said waits, in
        whole charges of the head while an owner waits (:meth:`states_in_heads`)."""
        ledger = state.senders[key - 1]
        level = _vadd(self.in_flight(state, key), ledger.waiting)
        return in_heads(level, ledger.head) if self.states_in_heads() else level

    def states_in_heads(self) -> bool:
        """Report rule 4 (docs/credit_protocol.md#mixed-charges): a waiting sender states its
        level in whole charges of its head, so the receiver's unit is a charge the head can
        use. Without it a key whose charges differ waits for good when the unit its level
        makes (the level over the gcd of its amounts) is no charge of its work
        (``gated/bad/level_not_in_heads``)."""
        return True

    def report_idle(self, state: GatedState, key: int) -> Vec:
        """Credit on hand beyond the whole level, in flight plus waiting (report rule 2).
        Beyond the level, not beyond the waiting work alone: between a write's landing and its
        completion the receiver has already topped the key up for it while the level still
        counts it, so returning that top-up would have it granted straight back, for as long
        as the completion takes (the grants grew without bound on ``gated/bad/no_idle_return``
        under the waiting-only rule)."""
        ledger = state.senders[key - 1]
        level = self.level(state, key)
        return tuple(max(0, a - w) for a, w in zip(self.available(ledger), level, strict=True))

    def head_uncovered(self, head: Vec, available: Vec) -> bool:
        """An owner waits (``head``: its charge) and the credit on hand does not cover it."""
        return self.states_in_heads() and any(head) and not _vle(head, available)

    def return_uncovered(self, state: GatedState, key: int) -> GatedState:
        """Report rule 5: a sender whose credit on hand does not cover its head's charge gives
        all of it back (``returned += available``; the return makes a report due).

        Such credit is a *fragment*: an activation grant below the charge, a grant made for a
        smaller head that arrived after a larger one stalled, a refused submit's smaller
        charge. The key cannot use it until the receiver adds the rest, and two keys holding
        fragments can leave too little free for either rest (two keys, two-byte owners,
        one-byte activation grants, two bytes of capacity: stuck from the initial state).
        The receiver never completes a fragment (:meth:`~._ahead.Standing.top_up` adds whole
        units), so a return never crosses a grant made to complete it: a grant in flight
        is a whole head of the unit the receiver knew, and only a head that changed since
        returns it again (finitely often: every change is an owner's stall or departure).
        Called wherever the head or the credit on hand changes: the gate's statement of
        waiting work, its settlement, and an applied update."""
        k = key - 1
        ledger = state.senders[k]
        available = self.available(ledger)
        if not (
            self.returns_uncovered()
            and any(available)
            and self.head_uncovered(ledger.head, available)
        ):
            return state
        ledger = ledger._replace(
            returned=_vadd(ledger.returned, available), returns_unreported=True
        )
        return self._with_sender(state, k, ledger)

    def settling(self, state: GatedState, key: int) -> bool:
        """Report rule 2: credit lies idle after the entry's first report (the activation's
        grant is not idle before it: it was given ahead of any work)."""
        return state.senders[key - 1].usage_seq > 0 and any(self.report_idle(state, key))

    def report_due(self, state: GatedState, key: int) -> bool:
        """A version-2 sender reports only news (docs/credit_protocol.md#grant-ahead):

        1. a rise (some resource's level above the one last reported) or a return (the
           returned totals moved since the last report) goes out at once; a lower level alone
           is not news;
        2. idle credit (:meth:`settling`) goes back once it lasted the sender's hold, with a
           report of the current level (the harness's hold is 1 ns and every step advances
           the clock: at the next flush; :meth:`~._control.GatedControl.report`);
        3. the refresh (the last report again) goes out on ``refresh_tick`` only.
        """
        ledger = state.senders[key - 1]
        level = self.level(state, key)
        if not _vle(level, ledger.reported) or ledger.returns_unreported:
            return True
        # rule 4: a waiting key whose unit changed (a lower level is news then: the receiver
        # would grant in the old unit, which the head may not be able to use)
        if (
            any(ledger.head)
            and self.states_in_heads()
            and unit_of(level) != unit_of(ledger.reported)
        ):
            return True
        return self.settling(state, key)

    def _in_flight(self, state: GatedState) -> int:
        return sum(n for bags in (state.to_sender, state.to_receiver) for b in bags for _, n in b)

    def _fault_left(self, state: GatedState) -> bool:
        cap = self.config.max_faults
        return cap is None or sum(state.faults) < cap

    def _owner(self, state: GatedState, owner_id: object) -> Owner | None:
        if type(owner_id) is not int or not 1 <= owner_id <= len(state.owners):
            return None
        return state.owners[owner_id - 1]

    def _with_owner(self, state: GatedState, owner: Owner) -> GatedState:
        return state._replace(owners=self._set(state.owners, owner.owner_id - 1, owner))

    def _with_sender(self, state: GatedState, k: int, ledger: SenderKey) -> GatedState:
        return state._replace(senders=self._set(state.senders, k, ledger))

    def _terminate(self, state: GatedState, owner: Owner, event: str, status: str) -> GatedState:
        """Owner → TERMINAL(status) via ``event``; its queue capacity is released."""
        done = owner._replace(state=OWNER_TRANSITIONS[(owner.state, event)], status=status)
        dispatching = state.dispatching_bytes - (owner.length if owner.state == DISPATCHING else 0)
        return self._with_owner(state, done)._replace(
            outstanding_owners=state.outstanding_owners - 1,
            outstanding_bytes=state.outstanding_bytes - owner.length,
            dispatching_bytes=dispatching,
        )

    # ---- the dispatch pass ---------------------------------------------------------------

    def scan(self, state: GatedState, max_owners: int, max_bytes: int) -> GatedState:
        """One pick over the queue with the gate deciding from the credit state.

        1. Queue order (FIFO); an owner longer than the bytes left stops the pick (head of line).
        2. A remote owner whose key blocked earlier in this pick is skipped (order within a key
           is kept) and joins the key's credit stall.
        3. The gate: snapshot fenced → REJECTED (TERMINAL FAILED, no token, stall ended). The
           key not ACTIVE (STALE, FENCING), no update on the entry yet, or :meth:`reserve`
           refused → BLOCKED: stays QUEUED in place, stall recorded, and the key's waiting
           work (all its stalled charges) is stated to the sender endpoint (its level rises).
           Else the token is RESERVED and the owner dispatches; if it was stalled, the waiting
           work stated drops by its charge (it is in flight once committed). A local owner
           (key 0) is always eligible, without a token.
        4. Dispatch: DISPATCHING, ``dispatching_bytes += length``; the pick stops once
           ``max_owners`` owners are picked.
        5. After the pass, owners skipped behind a blocked key that were not stalled yet join
           their key's stall and waiting work (``observe_pick``).
        """
        used_bytes = 0
        picked = 0
        blocked_keys: set[int] = set()
        blocked: list[int] = []
        skipped: list[int] = []
        gone: set[int] = set()
        left: set[int] = set()  # keys a credit-stalled owner left without dispatching
        for owner_id in state.queue:
            owner = state.owners[owner_id - 1]
            # docs/semantics.md#admission-queue: head of line, stop
            if owner.length > max_bytes - used_bytes:
                break
            if owner.key:
                k = owner.key - 1
                if owner.key in blocked_keys:
                    skipped.append(owner_id)
                    continue
                ledger = state.senders[k]
                if self.snapshot_fenced(owner, ledger):  # REJECTED: nothing is reserved
                    if owner.stall == STALLED:  # it leaves without the credit it asked for
                        left.add(owner.key)
                    stall = WAS_STALLED if owner.stall else NEVER_STALLED
                    state = self._terminate(state, owner._replace(stall=stall), "reject", FAILED)
                    gone.add(owner_id)
                    continue
                charge = charge_of(owner.length)
                ok = False
                if ledger.phase == ACTIVE and ledger.last_seq:
                    ledger, ok = self.reserve(ledger, charge)
                    state = self._with_sender(state, k, ledger)
                if not ok:  # BLOCKED: stays queued in place, a credit stall
                    blocked_keys.add(owner.key)
                    blocked.append(owner_id)
                    state = self._with_owner(state, owner._replace(stall=STALLED))
                    state = self._state_waiting(state, owner.key)
                    continue
                owner = owner._replace(
                    token=TOKEN_TRANSITIONS[(owner.token, "reserve")],
                    token_session=ledger.session,
                    stall=WAS_STALLED if owner.stall else NEVER_STALLED,
                )
                if owner.stall == WAS_STALLED:  # its stall ended: it no longer waits
                    state = self._state_waiting(self._with_owner(state, owner), owner.key)
            owner = owner._replace(state=OWNER_TRANSITIONS[(owner.state, "dispatch")])
            state = self._with_owner(state, owner)._replace(
                dispatching_bytes=state.dispatching_bytes + owner.length
            )
            gone.add(owner_id)
            used_bytes += owner.length
            picked += 1
            if picked == max_owners:
                break
        fresh = [i for i in skipped if state.owners[i - 1].stall != STALLED]
        for owner_id in fresh:
            state = self._with_owner(state, state.owners[owner_id - 1]._replace(stall=STALLED))
        for key in sorted({state.owners[i - 1].key for i in fresh}):
            state = self._state_waiting(state, key)
        queue = tuple(i for i in state.queue if i not in gone)
        state = state._replace(queue=self.requeue_blocked(queue, blocked))
        # ``observe_pick`` settles the keys the pick's rejections left, and every key owners
        # left earlier on its current entry (a grant for the old demand may have come since).
        flagged = {k + 1 for k, ledger in enumerate(state.senders) if ledger.withdrawn}
        for key in sorted(left | flagged):
            state = self.return_idle(state, key)
        return state

    def _state_waiting(self, state: GatedState, key: int) -> GatedState:
        """``set_pending_demand(waiting)``: the gate states the key's whole waiting work."""
        k = key - 1
        ledger = state.senders[k]._replace(
            waiting=self.waiting(state, key), head=self.head(state, key)
        )
        return self.return_uncovered(self._with_sender(state, k, ledger), key)

    def return_idle(self, state: GatedState, key: int) -> GatedState:
        """An owner left ``key`` without using credit (its submit was refused, or it was
        credit-stalled and was rejected or canceled): the gate's settlement (issue 10 item 8).

        1. The waiting work stated to the endpoint becomes what still waits.
        2. The idle credit (:meth:`idle_credit`: available beyond the key's level, its work in
           flight plus what still waits) is returned: ``returned += idle`` (cumulative, carried
           by the next report, which a return makes due; the receiver reclaims it). What is
           left on hand goes back too if it does not cover the head (:meth:`return_uncovered`).
        3. The key is flagged ``withdrawn`` until its entry changes: the receiver may still
           grant for the level as it was before this settlement (the report that lowered it is
           in flight), so every later pick settles the key again (found by the checker on
           ``gated/hoarding/ci``: a canceled owner's grant arrived after its demand was
           withdrawn, and the other key waited forever).

        A variant without step 2 keeps the idle credit (``gated/bad/no_idle_return``: another
        key of the same receiver then waits forever, a recoverability violation).
        """
        k = key - 1
        ledger = state.senders[k]._replace(
            waiting=self.waiting(state, key), head=self.head(state, key), withdrawn=True
        )
        state = self._with_sender(state, k, ledger)
        idle = self.idle_credit(state, key)
        if any(idle):
            ledger = ledger._replace(returned=_vadd(ledger.returned, idle), returns_unreported=True)
            state = self._with_sender(state, k, ledger)
        return self.return_uncovered(state, key)

    # ---- guards and effects: the queue and the transport ------------------------------------

    def _g_admit(self, state: GatedState, index: int) -> str | None:
        cfg = self.config
        if index != state.admitted or index >= len(cfg.workload):
            return "only the next owner of the workload is admitted (FIFO workload)"
        spec = cfg.workload[index]
        if (
            state.outstanding_owners + 1 > cfg.max_outstanding_owners
            or state.outstanding_bytes + spec.length > cfg.max_outstanding_bytes
        ):
            return "capacity exceeded: TooManyRequests"
        return None

    def _e_admit(self, state: GatedState, index: int) -> GatedState:
        spec = self.config.workload[index]
        snapshot = state.senders[spec.key - 1].session if spec.key else 0
        owner = Owner(index + 1, spec.key, spec.length, snapshot, QUEUED, None, 0, NONE, 0, False)
        return state._replace(
            admitted=index + 1,
            owners=(*state.owners, owner),
            queue=(*state.queue, owner.owner_id),
            outstanding_owners=state.outstanding_owners + 1,
            outstanding_bytes=state.outstanding_bytes + spec.length,
        )

    def _g_pick(self, state: GatedState, max_owners: int, max_bytes: int) -> str | None:
        if (max_owners, max_bytes) not in self.config.windows:
            return f"window ({max_owners}, {max_bytes}) is not configured"
        if not state.queue:
            return "the queue is empty"
        return None

    def _e_pick(self, state: GatedState, max_owners: int, max_bytes: int) -> GatedState:
        return self.scan(state, max_owners, max_bytes)

    def _g_cancel(self, state: GatedState, owner_id: int) -> str | None:
        if not self.config.cancel:
            return "no cancel configured"
        owner = self._owner(state, owner_id)
        if owner is None or owner.state != QUEUED:
            return "only a QUEUED owner is canceled here (docs/semantics.md#admission-queue cancel)"
        return None

    def _e_cancel(self, state: GatedState, owner_id: int) -> GatedState:
        """``queue.cancel(id)`` then ``gate.forget(id)``: CANCELED, capacity released; a
        credit-stalled owner's key settles its idle credit and demand (:meth:`return_idle`)."""
        owner = state.owners[owner_id - 1]
        stalled = owner.stall == STALLED
        done = owner._replace(stall=WAS_STALLED if owner.stall else NEVER_STALLED)
        state = self._terminate(state, done, "cancel", CANCELED)
        state = state._replace(queue=tuple(i for i in state.queue if i != owner_id))
        return self.return_idle(state, owner.key) if stalled else state

    def _g_submit(self, state: GatedState, owner_id: int, ok: object) -> str | None:
        owner = self._owner(state, owner_id)
        if not isinstance(ok, bool):
            return "ok must be a bool"
        if owner is None or owner.state != DISPATCHING or owner.token != RESERVED:
            return "no owner awaiting its submit (DISPATCHING with a RESERVED token)"
        if ok and owner.token_session != state.senders[owner.key - 1].session:
            return "the token's entry was fenced: commit raises InvalidEntry (roll back instead)"
        return None

    def _e_submit(self, state: GatedState, owner_id: int, ok: bool) -> GatedState:
        owner = state.owners[owner_id - 1]
        k = owner.key - 1
        ledger = state.senders[k]
        if ok:  # the transport accepted: commit; the charge is in flight (the level)
            return self._with_owner(
                state, owner._replace(token=TOKEN_TRANSITIONS[(owner.token, "commit")])
            )
        # The transport refused: exact rollback (a fenced entry is already gone), owner FAILED;
        # it leaves without using credit, so the key's idle credit goes back.
        if owner.token_session == ledger.session:
            ledger = ledger._replace(consumed=_vsub(ledger.consumed, charge_of(owner.length)))
            state = self._with_sender(state, k, ledger)
        owner = owner._replace(token=TOKEN_TRANSITIONS[(owner.token, "rollback")])
        state = self._terminate(state, owner, "complete", FAILED)
        return self.return_idle(state, owner.key)

    def _g_land(self, state: GatedState, owner_id: int) -> str | None:
        owner = self._owner(state, owner_id)
        if owner is None or owner.token != COMMITTED or owner.landed:
            return "no committed work of this owner is in flight"
        if owner.token_session != state.session:
            return "work of a dead receiver session never lands"
        return None

    def _e_land(self, state: GatedState, owner_id: int) -> GatedState:
        """The data lands: the key's unlanded credit falls, so its top-up may be due."""
        owner = state.owners[owner_id - 1]
        k = owner.key - 1
        b = state.receivers[k]
        state = self._with_receiver(
            state, k, b._replace(landed=_vadd(b.landed, charge_of(owner.length)))
        )
        return self.landed(self._with_owner(state, owner._replace(landed=True)), k)

    def _g_complete(self, state: GatedState, owner_id: int) -> str | None:
        owner = self._owner(state, owner_id)
        if owner is None or owner.state != DISPATCHING:
            return "the owner is not DISPATCHING: InvalidEntry"
        if owner.key == 0:
            return None
        if owner.token != COMMITTED:
            return "the owner's submit is not settled yet (its token is not COMMITTED)"
        if not owner.landed and owner.token_session == state.session:
            return "live work completes only after it landed (it can still land)"
        return None

    def _e_complete(self, state: GatedState, owner_id: int) -> GatedState:
        """The transport finished the owner: COMPLETED if its data landed (or it is local),
        FAILED if it can no longer land. Completion never mints sender credit (RFC concurrency
        rule 6); it may finish a fence (FENCING → ACTIVE once no older session's work is in
        flight)."""
        owner = state.owners[owner_id - 1]
        if owner.key == 0:
            return self._terminate(state, owner, "complete", COMPLETED)
        status = COMPLETED if owner.landed else FAILED
        owner = owner._replace(token=TOKEN_TRANSITIONS[(owner.token, "complete")])
        state = self._terminate(state, owner, "complete", status)
        return self._maybe_fence_drained(state, owner.key - 1)

    def _maybe_fence_drained(self, state: GatedState, k: int) -> GatedState:
        ledger = state.senders[k]
        if ledger.phase != FENCING:
            return state
        for o in state.owners:
            if o.key == k + 1 and o.token == COMMITTED and o.token_session != ledger.session:
                return state
        return self._with_sender(state, k, ledger._replace(phase=ACTIVE))

    def _g_release(self, state: GatedState, k: int) -> str | None:
        if type(k) is not int or not 0 <= k < self.config.keys:
            return "no such key"
        b = state.receivers[k]
        if b.landed == b.released:
            return "nothing landed awaits the consumer"
        return None

    def _e_release(self, state: GatedState, k: int) -> GatedState:
        # docs/semantics.md#receiver-allocator release: the receiver's own consumer frees capacity,
        # never a sender. The freed capacity serves the waiting line.
        b = state.receivers[k]
        return self.serve(self._with_receiver(state, k, b._replace(released=b.landed)))
