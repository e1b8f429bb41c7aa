"""The gated spec's control messages: flushes, the refresh timer, the network, the receiver's
and the sender's handling of each message, and the receiver restart (:class:`GatedControl`)."""

from __future__ import annotations

from typing import Any

from tent_spec.credit import (
    ACTIVATION,
    UPDATE,
    Activation,
)

from ._core import GatedCore
from ._values import (
    _BOUND,
    ACTIVE,
    EPOCH,
    FENCING,
    OFFER,
    REPORT,
    STALE,
    Bag,
    GatedState,
    Offer,
    ReceiverKey,
    Report,
    SenderKey,
    Update,
    _bag_add,
    _bag_has,
    _bag_remove,
    _vadd,
    _vle,
    _vmax,
    _vsub,
)


class GatedControl(GatedCore):
    """The control half of :class:`~tent_spec.gated.GatedSpec`: guards and effects of the
    control-message and fault actions, beside the queue and gate ones of :class:`GatedCore`."""

    def sender_messages(self, state: GatedState, k: int, *, refresh: bool) -> tuple[Any, ...]:
        """What sender endpoint ``k`` emits now: the offer while awaiting an activation, then a
        report when one is due (:meth:`report_due`) or the refresh timer fired
        (``messages_to_send``)."""
        out: list[Any] = []
        if state.senders[k].awaiting:
            out.append(Offer(OFFER))
        if refresh or self.report_due(state, k + 1):
            out.append(self.report(state, k)[1])
        return tuple(out)

    def _sender_count(self, state: GatedState, k: int, *, refresh: bool) -> tuple[int, bool]:
        """How many messages :meth:`sender_messages` emits, and whether a report is among them
        (the guards' cheap form of it)."""
        report = refresh or self.report_due(state, k + 1)
        return int(state.senders[k].awaiting) + int(report), report

    def report(self, state: GatedState, k: int) -> tuple[SenderKey, Report]:
        """The report sender endpoint ``k`` sends now, and its endpoint after sending it.

        A settling report (:meth:`settling`: credit lies idle) first gives the idle credit
        back (report rule 2), whatever else made it due. The report carries ``demand =
        consumed + returned + level`` (zeros without a level) and becomes the last one
        reported."""
        key = k + 1
        ledger = state.senders[k]
        if self.settling(state, key):
            ledger = ledger._replace(returned=_vadd(ledger.returned, self.report_idle(state, key)))
        level = self.level(state, key)
        demand = _vadd(_vadd(ledger.consumed, ledger.returned), level) if any(level) else level
        seq = ledger.usage_seq + 1
        msg = Report(REPORT, ledger.session, seq, ledger.consumed, ledger.returned, demand)
        ledger = ledger._replace(usage_seq=seq, reported=level, returns_unreported=False)
        return ledger, msg

    def _send(self, state: GatedState, k: int, *, refresh: bool) -> GatedState:
        bag = state.to_receiver[k]
        for msg in self.sender_messages(state, k, refresh=refresh):
            bag = _bag_add(bag, msg)
        if refresh or self.report_due(state, k + 1):
            state = self._with_sender(state, k, self.report(state, k)[0])
        return state._replace(to_receiver=self._set(state.to_receiver, k, bag))

    def _g_sender_flush(self, state: GatedState, k: int) -> str | None:
        if type(k) is not int or not 0 <= k < self.config.keys:
            return "no such key"
        count, report = self._sender_count(state, k, refresh=False)
        if not count:
            return "nothing to send (no offer owed, no report due)"
        if report and self.control_needs_credit(state.senders[k]):
            return "the report waits for data credit"
        if state.senders[k].usage_seq >= self.config.seq_cap:
            return f"{_BOUND} max_seq reached"
        if self._in_flight(state) + count > self.config.max_messages:
            return f"{_BOUND} max_messages in flight"
        return None

    def _e_sender_flush(self, state: GatedState, k: int) -> GatedState:
        return self._send(state, k, refresh=False)

    def receiver_messages(self, state: GatedState, k: int, *, refresh: bool) -> tuple[Any, ...]:
        """What receiver endpoint ``k`` emits now: the activation once per offer, then one update
        with the full cumulative vector when it is news (the grants or the retry hint moved
        since the last update sent), when a push is due (the activation's update, the answer to
        a repeated report), or when the refresh timer fired."""
        b = state.receivers[k]
        out: list[Any] = []
        if b.activation_due:
            out.append(Activation(ACTIVATION, state.session, EPOCH))
        if not b.version:
            return tuple(out)
        retry = self.retry(state, k)
        news = b.grants_unsent or retry != b.sent_retry
        if b.push_due or news or (refresh and b.pushed_seq):
            out.append(Update(UPDATE, state.session, EPOCH, b.pushed_seq + 1, b.granted, retry))
        return tuple(out)

    def _emit(self, state: GatedState, k: int, *, refresh: bool) -> GatedState:
        out = self.receiver_messages(state, k, refresh=refresh)
        b = state.receivers[k]
        bag = state.to_sender[k]
        for msg in out:
            bag = _bag_add(bag, msg)
            if msg.kind == UPDATE:
                b = b._replace(
                    pushed_seq=msg.seq, push_due=False, grants_unsent=False, sent_retry=msg.retry
                )
        return state._replace(
            receivers=self._set(state.receivers, k, b._replace(activation_due=False)),
            to_sender=self._set(state.to_sender, k, bag),
        )

    def _g_receiver_flush(self, state: GatedState, k: int) -> str | None:
        if type(k) is not int or not 0 <= k < self.config.keys:
            return "no such key"
        out = self.receiver_messages(state, k, refresh=False)
        if not out:
            return "nothing to send (no activation, no news, no push due)"
        if state.receivers[k].pushed_seq >= self.config.seq_cap:
            return f"{_BOUND} max_seq reached"
        if self._in_flight(state) + len(out) > self.config.max_messages:
            return f"{_BOUND} max_messages in flight"
        return None

    def _e_receiver_flush(self, state: GatedState, k: int) -> GatedState:
        return self._emit(state, k, refresh=False)

    def _g_refresh_tick(self, state: GatedState) -> str | None:
        if not self.config.refresh:
            return "no refresh timer configured"
        keys = range(self.config.keys)
        count = sum(len(self.receiver_messages(state, k, refresh=True)) for k in keys)
        count += sum(self._sender_count(state, k, refresh=True)[0] for k in keys)
        if any(self.control_needs_credit(s) for s in state.senders):
            return "a report waits for data credit"
        if any(b.pushed_seq >= self.config.seq_cap for b in state.receivers) or any(
            s.usage_seq >= self.config.seq_cap for s in state.senders
        ):
            return f"{_BOUND} max_seq reached"
        if self._in_flight(state) + count > self.config.max_messages:
            return f"{_BOUND} max_messages in flight"
        return None

    def _e_refresh_tick(self, state: GatedState) -> GatedState:
        """The two refreshes at once (the harness's clock jumps past both intervals): every
        receiver endpoint that pushed before pushes its full vector again
        (docs/design.md#control-flow: "on a refresh timer"), and every sender endpoint re-sends
        its current report (report rule 3). Totals are cumulative, so the two recover any lost
        report or update."""
        for k in range(self.config.keys):
            state = self._emit(state, k, refresh=True)
            state = self._send(state, k, refresh=True)
        return state

    def _bag_of(self, state: GatedState, k: int, msg: Any) -> Bag | None:
        if type(k) is not int or not 0 <= k < self.config.keys:
            return None
        to_receiver = getattr(msg, "kind", None) in (OFFER, REPORT)
        bag = (state.to_receiver if to_receiver else state.to_sender)[k]
        return bag if _bag_has(bag, msg) else None

    def _g_deliver(self, state: GatedState, k: int, msg: Any) -> str | None:
        # RFC: control is never gated by data credit - any message in flight is deliverable.
        if self._bag_of(state, k, msg) is None:
            return "the message is not in flight on this key's connection"
        return None

    def _take(self, state: GatedState, k: int, msg: Any) -> GatedState:
        if msg.kind in (OFFER, REPORT):
            return state._replace(
                to_receiver=self._set(state.to_receiver, k, _bag_remove(state.to_receiver[k], msg))
            )
        return state._replace(
            to_sender=self._set(state.to_sender, k, _bag_remove(state.to_sender[k], msg))
        )

    def _e_deliver(self, state: GatedState, k: int, msg: Any) -> GatedState:
        state = self._take(state, k, msg)
        if msg.kind == OFFER:
            return self._on_offer(state, k)
        if msg.kind == REPORT:
            return self._on_report(state, k, msg)
        if msg.kind == ACTIVATION:
            return self._on_activation(state, k, msg)
        return self._on_update(state, k, msg)

    def _on_offer(self, state: GatedState, k: int) -> GatedState:
        """Answer with an activation and the activation's update. The first offer also grants
        the initial grant (exactly, or not at all) and joins the key to the grant-ahead loop:
        every key is evaluated, then the line is served. A duplicated offer gets the same
        activation and the full vector again, and changes nothing else."""
        b = state.receivers[k]
        state = self._with_receiver(
            state, k, b._replace(version=True, activation_due=True, push_due=True)
        )
        if b.version:
            return state
        return self.serve(self.evaluate_all(self.grant_initial(state, k)))

    def _on_report(self, state: GatedState, k: int, msg: Report) -> GatedState:
        """A newer report of the live session: reclaim its returns, take its level, and serve.

        1. Another session, or a sequence not above the last applied one: ignored.
        2. ``consumed + returned > granted`` or ``max(returned, reclaimed) + landed > granted``:
           a protocol violation, nothing changes.
        3. Reclaim ``returned − reclaimed`` (docs/semantics.md#receiver-allocator, idempotent);
           the level is ``demand − consumed − returned`` (zeros for no demand).
        4. The same level and returns as the last applied report (the sender repeats itself
           only when it refreshes: something may be lost) → the full vector is pushed.
        5. A changed level re-evaluates the key (every key when the number with a level
           changed) and serves the line; reclaimed capacity serves it too.
        """
        b = state.receivers[k]
        if msg.session != state.session or msg.seq <= b.usage_seq:
            return state  # another session, or a duplicate/old report: ignored
        returned = _vmax(msg.returned, b.reclaimed)
        if not (
            _vle(_vadd(msg.consumed, msg.returned), b.granted)
            and _vle(_vadd(returned, b.landed), b.granted)
        ):
            return state  # beyond the grant: a protocol violation, nothing changes
        reclaim = _vsub(returned, b.reclaimed)
        base = _vadd(msg.consumed, msg.returned)
        level = tuple(max(0, d - u) for d, u in zip(msg.demand, base, strict=True))
        # Returned totals only grow on an entry, so the last applied report's are `reclaimed`.
        repeat = b.usage_seq > 0 and (level, msg.returned) == (b.level, b.reclaimed)
        before = self.active(state)
        nb = b._replace(
            reclaimed=returned,
            consumed=msg.consumed,
            usage_seq=msg.seq,
            level=level,
            push_due=b.push_due or repeat,
        )
        state = self._with_receiver(state, k, nb)
        if level != b.level:
            state = self.level_changed(state, k, before)
        if not any(reclaim):
            return state
        # returned credit left the key's unlanded credit, as a landing does: its position is
        # evaluated again (rule 1), or a key whose level stayed the same would wait for good
        # (found with three owners on one key: two failed submits returned their credit)
        return self.serve(self.evaluate(state, k) if self.evaluate_on_return() else state)

    def _on_activation(self, state: GatedState, k: int, msg: Activation) -> GatedState:
        """The same session: ignored (a duplicate). A new session: the epoch fence - a fresh
        ledger entry with nothing reported or stated waiting on it, FENCING until the old
        session's committed work drained (docs/semantics.md#negotiation)."""
        ledger = state.senders[k]
        if msg.session == ledger.session:
            return self._with_sender(state, k, ledger._replace(awaiting=False))
        z = self._zero
        fresh = SenderKey(FENCING, msg.session, 0, z, z, z, 0, z, z, z, False, False, False)
        return self._maybe_fence_drained(self._with_sender(state, k, fresh), k)

    def _on_update(self, state: GatedState, k: int, msg: Update) -> GatedState:
        """docs/semantics.md#sender-ledger apply_update; anything not matching the rule is a
        no-op. A version-2 sender reads nothing else from it: its next report follows from its
        level and the credit on hand (:meth:`report_due`; :meth:`return_uncovered`)."""
        ledger = state.senders[k]
        if msg.session != ledger.session or msg.seq <= ledger.last_seq:
            return state  # another session, or "Duplicate and old updates become no-ops"
        used = _vadd(ledger.consumed, ledger.returned)
        if not (_vle(ledger.grant_total, msg.grants) and _vle(used, msg.grants)):
            return state  # RFC rule 5: a decreasing total is rejected
        phase = ACTIVE if ledger.phase == STALE else ledger.phase
        ledger = ledger._replace(grant_total=msg.grants, last_seq=msg.seq, phase=phase)
        # a grant that does not cover the head (made for a smaller one) goes straight back
        return self.return_uncovered(self._with_sender(state, k, ledger), k + 1)

    def _g_duplicate(self, state: GatedState, k: int, msg: Any) -> str | None:
        if state.faults.duplications >= self.config.max_duplications:
            return "fault budget: max_duplications used"
        if not self._fault_left(state):
            return "fault budget: max_faults used"
        if self._in_flight(state) >= self.config.max_messages:
            return f"{_BOUND} max_messages in flight"
        return self._g_deliver(state, k, msg)

    def _e_duplicate(self, state: GatedState, k: int, msg: Any) -> GatedState:
        if msg.kind in (OFFER, REPORT):
            state = state._replace(
                to_receiver=self._set(state.to_receiver, k, _bag_add(state.to_receiver[k], msg))
            )
        else:
            state = state._replace(
                to_sender=self._set(state.to_sender, k, _bag_add(state.to_sender[k], msg))
            )
        f = state.faults
        return state._replace(faults=f._replace(duplications=f.duplications + 1))

    def _g_lose(self, state: GatedState, k: int, msg: Any) -> str | None:
        if state.faults.losses >= self.config.max_losses:
            return "fault budget: max_losses used"
        if not self._fault_left(state):
            return "fault budget: max_faults used"
        return self._g_deliver(state, k, msg)

    def _e_lose(self, state: GatedState, k: int, msg: Any) -> GatedState:
        state = self._take(state, k, msg)
        f = state.faults
        return state._replace(faults=f._replace(losses=f.losses + 1))

    def _g_receiver_restart(self, state: GatedState) -> str | None:
        if state.faults.restarts >= self.config.max_receiver_restarts:
            return "fault budget: max_receiver_restarts used"
        if not self._fault_left(state):
            return "fault budget: max_faults used"
        return None

    def _e_receiver_restart(self, state: GatedState) -> GatedState:
        """A new receiver process: new session, fresh books per key, both connections' bags gone.
        Every sender endpoint disconnects (ACTIVE → STALE; FENCING stays) and reconnects."""
        z = self._zero
        k = self.config.keys
        fresh = ReceiverKey(False, z, z, z, z, z, z, 0, 0, False, False, False, False)
        senders = tuple(
            s._replace(phase=STALE if s.phase == ACTIVE else s.phase, awaiting=True)
            for s in state.senders
        )
        f = state.faults
        return state._replace(
            session=state.session + 1,
            senders=senders,
            receivers=(fresh,) * k,
            to_sender=((),) * k,
            to_receiver=((),) * k,
            faults=f._replace(restarts=f.restarts + 1),
            line=(),
            bypass=(0,) * k,
        )
