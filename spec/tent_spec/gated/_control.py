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

    def sender_messages(self, state: GatedState, k: int) -> tuple[Any, ...]:
        """What sender endpoint ``k`` emits now: the offer while awaiting an activation, then a
        usage report when one is due (``messages_to_send``)."""
        ledger = state.senders[k]
        out: list[Any] = []
        if ledger.awaiting:
            out.append(Offer(OFFER))
        if self.report_due(ledger):
            seq = ledger.usage_seq + 1
            out.append(
                Report(REPORT, ledger.session, seq, ledger.consumed, ledger.returned, ledger.demand)
            )
        return tuple(out)

    def _g_sender_flush(self, state: GatedState, k: int) -> str | None:
        if type(k) is not int or not 0 <= k < self.config.keys:
            return "no such key"
        out = self.sender_messages(state, k)
        if not out:
            return "nothing to send (no offer owed, no report due)"
        ledger = state.senders[k]
        if self.report_due(ledger) and self.control_needs_credit(ledger):
            return "the report waits for data credit"
        if ledger.usage_seq >= self.config.seq_cap:
            return f"{_BOUND} max_seq reached"
        if self._in_flight(state) + len(out) > self.config.max_messages:
            return f"{_BOUND} max_messages in flight"
        return None

    def _e_sender_flush(self, state: GatedState, k: int) -> GatedState:
        ledger = state.senders[k]
        bag = state.to_receiver[k]
        for msg in self.sender_messages(state, k):
            bag = _bag_add(bag, msg)
        if self.report_due(ledger):
            ledger = ledger._replace(usage_seq=ledger.usage_seq + 1, dirty=False)
        return state._replace(
            senders=self._set(state.senders, k, ledger),
            to_receiver=self._set(state.to_receiver, k, bag),
        )

    def receiver_messages(self, state: GatedState, k: int, *, refresh: bool) -> tuple[Any, ...]:
        """What receiver endpoint ``k`` emits now: the activation once per offer, then one update
        with the full cumulative vector when a push is due (or the refresh timer fired)."""
        b = state.receivers[k]
        out: list[Any] = []
        if b.activation_due:
            out.append(Activation(ACTIVATION, state.session, EPOCH))
        if b.version and (b.push_due or (refresh and b.pushed_seq)):
            out.append(
                Update(UPDATE, state.session, EPOCH, b.pushed_seq + 1, b.granted, b.stalled)
            )
        return tuple(out)

    def _emit(self, state: GatedState, k: int, *, refresh: bool) -> GatedState:
        out = self.receiver_messages(state, k, refresh=refresh)
        b = state.receivers[k]
        bag = state.to_sender[k]
        for msg in out:
            bag = _bag_add(bag, msg)
        if any(m.kind == UPDATE for m in out):
            b = b._replace(pushed_seq=b.pushed_seq + 1, push_due=False)
        return state._replace(
            receivers=self._set(state.receivers, k, b._replace(activation_due=False)),
            to_sender=self._set(state.to_sender, k, bag),
        )

    def _g_receiver_flush(self, state: GatedState, k: int) -> str | None:
        if type(k) is not int or not 0 <= k < self.config.keys:
            return "no such key"
        out = self.receiver_messages(state, k, refresh=False)
        if not out:
            return "nothing to send (no activation or push due)"
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
        out = [self.receiver_messages(state, k, refresh=True) for k in range(self.config.keys)]
        if not any(out):
            return "no endpoint has anything to refresh"
        if any(b.pushed_seq >= self.config.seq_cap for b in state.receivers):
            return f"{_BOUND} max_seq reached"
        if self._in_flight(state) + sum(map(len, out)) > self.config.max_messages:
            return f"{_BOUND} max_messages in flight"
        return None

    def _e_refresh_tick(self, state: GatedState) -> GatedState:
        # docs/design.md#control-flow: the receiver also pushes "on a refresh timer" - every
        # endpoint at once.
        for k in range(self.config.keys):
            state = self._emit(state, k, refresh=True)
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
        """Answer with an activation (the same one for a duplicated offer) and the initial grant
        as a target total, so a duplicated offer cannot grant it twice."""
        b = state.receivers[k]
        b = b._replace(
            version=True,
            activation_due=True,
            demand=_vmax(b.demand, self.config.initial_grant),
        )
        state = state._replace(receivers=self._set(state.receivers, k, b))
        state = self._grant_outstanding(state, k)
        b = state.receivers[k]
        return state._replace(receivers=self._set(state.receivers, k, b._replace(push_due=True)))

    def _on_report(self, state: GatedState, k: int, msg: Report) -> GatedState:
        """A newer report of the live session replaces the demand target and is granted; a
        report that carries demand is always answered with the key's full vector."""
        b = state.receivers[k]
        if msg.session != state.session or msg.seq <= b.usage_seq:
            return state  # another session, or a duplicate/old report: ignored
        returned = _vmax(msg.returned, b.reclaimed)
        if not (
            _vle(_vadd(msg.consumed, msg.returned), b.granted)
            and _vle(_vadd(returned, b.landed), b.granted)
        ):
            return state  # beyond the grant: a protocol violation, nothing changes
        # docs/semantics.md#receiver-allocator return: reclaim ``returned − already reclaimed``
        # (idempotent).
        reclaim = _vsub(returned, b.reclaimed)
        # A report that still asks for credit is answered with the full vector even when its
        # target is already granted: the sender evidently lost the update that carried it
        # (liveness: found by the checker on `gated/no_refresh`, where nothing else re-pushes).
        b = b._replace(
            reclaimed=returned,
            usage_seq=msg.seq,
            demand=msg.demand,
            push_due=b.push_due or any(msg.demand),
        )
        state = state._replace(receivers=self._set(state.receivers, k, b))
        state = self._grant_outstanding(state, k)
        # The reclaimed capacity is pushed to every key still short of it (in key order).
        return self._capacity_freed(state) if any(reclaim) else state

    def _on_activation(self, state: GatedState, k: int, msg: Activation) -> GatedState:
        """The same session: ignored (a duplicate). A new session: the epoch fence - a fresh
        ledger entry, FENCING until the old session's committed work drained
        (docs/semantics.md#negotiation)."""
        ledger = state.senders[k]
        if msg.session == ledger.session:
            return state._replace(
                senders=self._set(state.senders, k, ledger._replace(awaiting=False))
            )
        z = self._zero
        fresh = SenderKey(FENCING, msg.session, 0, z, z, z, 0, True, z, False, False)
        state = state._replace(senders=self._set(state.senders, k, fresh))
        return self._maybe_fence_drained(state, k)

    def _on_update(self, state: GatedState, k: int, msg: Update) -> GatedState:
        """docs/semantics.md#sender-ledger apply_update; anything not matching the rule is a
        no-op."""
        ledger = state.senders[k]
        if msg.session != ledger.session or msg.seq <= ledger.last_seq:
            return state  # another session, or "Duplicate and old updates become no-ops"
        used = _vadd(ledger.consumed, ledger.returned)
        if not (_vle(ledger.grant_total, msg.grants) and _vle(used, msg.grants)):
            return state  # RFC rule 5: a decreasing total is rejected
        phase = ACTIVE if ledger.phase == STALE else ledger.phase
        ledger = ledger._replace(grant_total=msg.grants, last_seq=msg.seq, phase=phase)
        if msg.retry and _vle(ledger.demand, ledger.grant_total):
            # The receiver still holds a demand this sender no longer has (the report that
            # withdrew it may be lost): report again (SenderEndpoint.receive_update).
            ledger = ledger._replace(dirty=True)
        return state._replace(senders=self._set(state.senders, k, ledger))

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
        fresh = ReceiverKey(False, z, z, z, z, 0, 0, z, False, False, False)
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
        )
