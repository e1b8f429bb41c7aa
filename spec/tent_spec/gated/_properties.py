"""The gated spec's properties: its invariants and its witnesses (:class:`GatedProperties`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tent_spec.admission import (
    CANCELED,
    DISPATCHING,
    FAILED,
    QUEUED,
    TERMINAL,
)
from tent_spec.credit import SpecInvariant, SpecWitness

from ._control import GatedControl
from ._values import (
    _BOUND,
    COMMITTED,
    NONE,
    RESERVED,
    ROLLED_BACK,
    SETTLED,
    STALLED,
    WAS_STALLED,
    GatedState,
    Vec,
    _vadd,
    _vle,
    _vsub,
    charge_of,
)


class GatedProperties(GatedControl):
    """The named safety properties (``inv_*``, :meth:`invariants`) and the states the model
    must reach (:meth:`witnesses`) of :class:`~tent_spec.gated.GatedSpec`."""

    # ---- invariants ------------------------------------------------------------------------

    def _live_token_charge(self, state: GatedState, key: int, session: int) -> Vec:
        total = self._zero
        for o in state.owners:
            if (
                o.key == key
                and o.token_session == session
                and o.token
                in (
                    RESERVED,
                    COMMITTED,
                    SETTLED,
                )
            ):
                total = _vadd(total, charge_of(o.length))
        return total

    def inv_dispatched_owner_holds_full_charge(self, state: GatedState) -> bool:
        """Every DISPATCHING remote owner holds a token (RESERVED or COMMITTED), and every owner
        that holds one was charged on the session its snapshot names."""
        for o in state.owners:
            if o.key and o.state == DISPATCHING and o.token not in (RESERVED, COMMITTED):
                return False
        return True

    def inv_consumed_equals_token_charges(self, state: GatedState) -> bool:
        """Per key, the live entry's ``consumed`` is exactly the charges of its tokens (reserved,
        committed or completed): a blocked reserve leaves nothing consumed."""
        for k, ledger in enumerate(state.senders):
            if ledger.consumed != self._live_token_charge(state, k + 1, ledger.session):
                return False
        return True

    def inv_no_dispatch_on_fenced_snapshot(self, state: GatedState) -> bool:
        """A token is only ever taken on the session the owner's snapshot pinned (a rejected
        owner takes none)."""
        return all(o.token == NONE or o.token_session == o.snapshot for o in state.owners)

    def inv_usage_within_accepted_grant(self, state: GatedState) -> bool:
        """consumed + returned ≤ the accepted grant total, per key and resource."""
        return all(_vle(_vadd(s.consumed, s.returned), s.grant_total) for s in state.senders)

    def inv_reclaimed_within_returned(self, state: GatedState) -> bool:
        """The receiver reclaimed at most what the sender returned on the live session's
        entry: a duplicated or reordered report never reclaims twice."""
        for s, b in zip(state.senders, state.receivers, strict=True):
            if s.session == state.session and not _vle(b.reclaimed, s.returned):
                return False
        return True

    def inv_accepted_grant_within_receiver_grant(self, state: GatedState) -> bool:
        """The sender's accepted total ≤ what the receiver granted that key in that session."""
        for s, b in zip(state.senders, state.receivers, strict=True):
            if s.session == state.session and not _vle(s.grant_total, b.granted):
                return False
        return True

    def inv_capacity(self, state: GatedState) -> bool:
        """Per resource, Σ over keys of (granted − released − reclaimed) ≤ capacity."""
        return all(f >= 0 for f in self.free_capacity(state)) and all(
            _vle(b.released, b.landed) and _vle(_vadd(b.landed, b.reclaimed), b.granted)
            for b in state.receivers
        )

    def inv_claims_covered(self, state: GatedState) -> bool:
        """What can still occupy the receiver for a key of the live session - landed unreleased
        data, committed work in flight, reserved tokens and available credit - fits the key's
        outstanding grant ``granted − released − reclaimed``."""
        for k, (s, b) in enumerate(zip(state.senders, state.receivers, strict=True)):
            if s.session != state.session:
                continue
            claim = _vadd(_vsub(b.landed, b.released), self.available(s))
            for o in state.owners:
                if (
                    o.key == k + 1
                    and o.token_session == state.session
                    and (o.token == RESERVED or (o.token == COMMITTED and not o.landed))
                ):
                    claim = _vadd(claim, charge_of(o.length))
            if not _vle(claim, _vsub(_vsub(b.granted, b.released), b.reclaimed)):
                return False
        return True

    def inv_control_unblocked(self, state: GatedState) -> bool:
        """A credit stall never blocks control: every message in flight is deliverable, and a key
        that owes a report can send it whenever the bag has room (whatever its data credit)."""
        for k in range(self.config.keys):
            for bag in (state.to_sender[k], state.to_receiver[k]):
                for msg, _n in bag:
                    if self._g_deliver(state, k, msg) is not None:
                        return False
            reason = self._g_sender_flush(state, k)
            due = self.report_due(state, k + 1)
            if due and reason is not None and not reason.startswith(_BOUND):
                return False
        return True

    def inv_bounded_bypass(self, state: GatedState) -> bool:
        """A key waiting in the receiver's line is passed by at most one grant to every other
        key: ``bypass[k] ≤ keys − 1``."""
        return all(n <= self.config.keys - 1 for n in state.bypass)

    def inv_queue_order(self, state: GatedState) -> bool:
        """The queue holds exactly the QUEUED owners, in enqueue (owner id) order."""
        queued = [o.owner_id for o in state.owners if o.state == QUEUED]
        return list(state.queue) == queued

    def inv_admission_counters(self, state: GatedState) -> bool:
        """Outstanding owners/bytes count the live owners within the limits; dispatching_bytes
        is the DISPATCHING owners' lengths (every owner here is degradation-eligible)."""
        live = [o for o in state.owners if o.state != TERMINAL]
        cfg = self.config
        return (
            state.outstanding_owners == len(live) <= cfg.max_outstanding_owners
            and state.outstanding_bytes == sum(o.length for o in live) <= cfg.max_outstanding_bytes
            and state.dispatching_bytes
            == sum(o.length for o in state.owners if o.state == DISPATCHING)
            and all((o.state == TERMINAL) == (o.status is not None) for o in state.owners)
        )

    def invariants(self) -> Sequence[Any]:
        """The named safety properties; the physical catch-all (claims) comes last."""
        return (
            SpecInvariant(
                "dispatched_owner_holds_full_charge",
                'RFC acceptance 2: "A sender never dispatches a required remote plan without '
                'all credit dimensions"; issue 6: "no owner dispatched without every charged '
                'dimension reserved"',
                self.inv_dispatched_owner_holds_full_charge,
            ),
            SpecInvariant(
                "consumed_equals_token_charges",
                "RFC claim 3 (atomic multi-resource eligibility); docs/semantics.md#sender-ledger "
                'try_reserve: "if '
                'any resource lacks credit → insufficient, nothing changes"',
                self.inv_consumed_equals_token_charges,
            ),
            SpecInvariant(
                "no_dispatch_on_fenced_snapshot",
                'docs/design.md#gate-at-eligibility: "A rejected owner (its key was fenced) '
                'becomes TERMINAL(FAILED)"; RFC '
                'acceptance 4: "Restarted peers cannot reuse old credit or old allocation '
                'generation"',
                self.inv_no_dispatch_on_fenced_snapshot,
            ),
            SpecInvariant(
                "usage_within_accepted_grant",
                'issue 6: "consumed − returned ≤ the sender\'s accepted grant total"; '
                "docs/semantics.md#sender-ledger "
                "available = grant_total − consumed − returned ≥ 0",
                self.inv_usage_within_accepted_grant,
            ),
            SpecInvariant(
                "accepted_grant_within_receiver_grant",
                "issue 6: \"the sender's accepted grant total ≤ what the receiver granted that "
                'key in that epoch"; RFC acceptance 3',
                self.inv_accepted_grant_within_receiver_grant,
            ),
            SpecInvariant(
                "reclaimed_within_returned",
                'docs/semantics.md#receiver-allocator: "return ... reclaimed as returned − '
                "already reclaimed "
                '(idempotent)"; RFC principle 2: cumulative totals make duplicates harmless',
                self.inv_reclaimed_within_returned,
            ),
            SpecInvariant(
                "capacity_never_exceeded",
                'issue 6: "per resource, Σ over keys of (granted − released − reclaimed) ≤ '
                'capacity"; RFC acceptance 1',
                self.inv_capacity,
            ),
            SpecInvariant(
                "control_never_blocked_by_data_credit",
                'issue 6: "a credit stall never blocks control updates"; RFC acceptance 5: '
                '"Zero data credit cannot block control updates"',
                self.inv_control_unblocked,
            ),
            SpecInvariant(
                "bounded_bypass",
                'issue 25 item 5: "no waiting key passed by more than C grants to others" (C = '
                'keys − 1); item 1: "under contention, freed charges go to the longest-waiting '
                'key"',
                self.inv_bounded_bypass,
            ),
            SpecInvariant(
                "blocked_owner_keeps_enqueue_order",
                'docs/design.md#gate-at-eligibility: "A blocked owner stays QUEUED in place with '
                'its enqueue order"; issue 6: '
                '"no requeue reversal"',
                self.inv_queue_order,
            ),
            SpecInvariant(
                "admission_counters_and_limits",
                "docs/semantics.md#admission-queue: outstanding within max_outstanding_*; "
                'dispatching_bytes is "every '
                'eligible owner dispatched and not yet completed"',
                self.inv_admission_counters,
            ),
            SpecInvariant(
                "claims_covered_by_receiver_grant",
                'RFC claim 1 (receiver-capacity safety): "Aggregate reserved receiver resources '
                'never exceed configured capacity"',
                self.inv_claims_covered,
            ),
        )

    def witnesses(self) -> Sequence[Any]:
        """Interesting states the model must reach (non-vacuity), those the bounds allow:

        1. always: a stalled owner dispatched after a grant, a rollback after a failed submit;
        2. with a receiver restart: an old snapshot rejected, in-flight work failed by it;
        3. with two owners on one key: both stalled at once (the second skipped);
        4. with a local owner behind a remote one: it dispatched past the remote one's stall;
        5. when the remote owners' charges exceed the capacity: a key waited in the line;
        6. always: idle credit returned after its owner left, and reclaimed by the receiver;
        7. with cancel: a credit-stalled owner canceled;
        8. with two keys and capacity short of both: a key in the line passed by a grant to
           the other (``bounded_bypass`` is not vacuous);
        9. always: a key topped up ahead (credit on hand that no waiting owner asked for while
           its work is in flight).
        """

        def dispatched_after_stall(s: GatedState) -> bool:
            return any(o.stall == WAS_STALLED and o.token == COMMITTED for o in s.owners)

        def rejected_after_restart(s: GatedState) -> bool:
            return any(
                o.key and o.status == FAILED and o.token == NONE and o.snapshot < s.session
                for o in s.owners
            )

        def rolled_back(s: GatedState) -> bool:
            return any(o.token == ROLLED_BACK for o in s.owners)

        def two_stalled_on_a_key(s: GatedState) -> bool:
            keys = [o.key for o in s.owners if o.stall == STALLED]
            return any(keys.count(k) >= 2 for k in set(keys))

        def local_passes_a_stall(s: GatedState) -> bool:
            first_stalled = next((o.owner_id for o in s.owners if o.stall == STALLED), None)
            return first_stalled is not None and any(
                o.key == 0 and o.owner_id > first_stalled and o.state != QUEUED for o in s.owners
            )

        def receiver_short(s: GatedState) -> bool:
            return bool(s.line)

        def passed_in_line(s: GatedState) -> bool:
            return any(s.bypass)

        def topped_up_ahead(s: GatedState) -> bool:
            return any(
                any(self.in_flight(s, k + 1)) and not _vle(self.available(ledger), ledger.waiting)
                for k, ledger in enumerate(s.senders)
            )

        def inflight_failed_by_restart(s: GatedState) -> bool:
            return any(o.token == SETTLED and o.status == FAILED for o in s.owners)

        def idle_credit_reclaimed(s: GatedState) -> bool:
            return any(any(b.reclaimed) for b in s.receivers)

        def stalled_owner_canceled(s: GatedState) -> bool:
            return any(o.status == CANCELED and o.stall == WAS_STALLED for o in s.owners)

        cfg = self.config
        remote = [o for o in cfg.workload if o.key]
        keys = [o.key for o in remote]
        demand = self._zero
        for o in remote:
            demand = _vadd(demand, charge_of(o.length))
        first_remote = next((i for i, o in enumerate(cfg.workload) if o.key), len(cfg.workload))
        restarts = cfg.max_receiver_restarts > 0 and cfg.max_faults != 0
        found = [
            SpecWitness("stalled_owner_dispatched_after_a_grant", dispatched_after_stall),
            SpecWitness("submit_failure_rolled_back", rolled_back),
            SpecWitness("idle_credit_returned_and_reclaimed", idle_credit_reclaimed),
            SpecWitness("topped_up_ahead_of_demand", topped_up_ahead),
        ]
        if cfg.cancel:
            found.append(SpecWitness("stalled_owner_canceled", stalled_owner_canceled))
        if restarts:
            found.append(SpecWitness("old_snapshot_rejected_after_restart", rejected_after_restart))
            found.append(
                SpecWitness("in_flight_work_failed_by_restart", inflight_failed_by_restart)
            )
        if any(keys.count(k) >= 2 for k in keys):
            found.append(SpecWitness("two_owners_stalled_on_one_key", two_stalled_on_a_key))
        if any(o.key == 0 for o in cfg.workload[first_remote:]):
            found.append(SpecWitness("local_owner_dispatched_past_a_stall", local_passes_a_stall))
        if not _vle(demand, cfg.capacity):
            found.append(SpecWitness("receiver_short_of_capacity", receiver_short))
            if len(set(keys)) == 2:
                found.append(SpecWitness("key_passed_in_the_line", passed_in_line))
        return tuple(found)
