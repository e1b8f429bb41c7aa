"""The admission spec's safety properties, each citing the docs/semantics.md rule it encodes, and
its witnesses (reachable states that show the model is not vacuous).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from tent_spec.admission._actions import AdmissionActions
from tent_spec.admission._state import (
    CANCELED,
    DISPATCHING,
    QUEUED,
    STOP_HEAD_OF_LINE,
    STOP_OWNER_BUDGET,
    TERMINAL,
    USER,
    AdmissionState,
    Invariant,
    Witness,
)


class AdmissionInvariants(AdmissionActions):
    """``invariants()``, ``witnesses()`` and the predicates behind them (``_inv_*``)."""

    def invariants(self) -> Sequence[Invariant]:
        """The named safety properties, each citing its rule."""
        return (
            Invariant(
                "outstanding_within_limits",
                'docs/semantics.md#admission-queue: capacity "next_owners > max_owners, '
                'next_bytes > max_bytes" → TMR',
                self._inv_outstanding_within_limits,
            ),
            Invariant(
                "user_outstanding_within_limits_minus_reserves",
                'docs/semantics.md#admission-queue: "User owners see max - reserve; '
                "staging-internal owners see "
                'only the totals"',
                self._inv_user_within_limits,
            ),
            Invariant(
                "counters_match_live_owners",
                'seed: "max_outstanding_owners … bound everything admitted and not yet terminal"',
                self._inv_counters_match,
            ),
            Invariant(
                "dispatching_bytes_is_eligible_dispatching_lengths",
                'seed: dispatching_bytes_ is "every eligible owner dispatched and not yet '
                'completed"',
                self._inv_dispatching_bytes,
            ),
            Invariant(
                "queue_holds_exactly_the_queued_owners",
                'docs/semantics.md#admission-queue: "A blocked owner stays QUEUED in place with '
                'its enqueue order"',
                self._inv_queue_is_queued,
            ),
            Invariant(
                "no_deadline_owner_never_dropped",
                'seed: "A request with deadline_ns == 0 … is never reordered, promoted or dropped"',
                self._inv_no_deadline_never_dropped,
            ),
            Invariant(
                "only_eligible_owners_dropped",
                'seed: "Only eligible owners can be dropped"',
                self._inv_only_eligible_dropped,
            ),
            Invariant(
                "dropped_owner_consumes_no_budget",
                'seed: "A dropped owner does not consume dispatch budget."',
                self._inv_drop_consumes_no_budget,
            ),
            Invariant(
                "dispatch_window_respected",
                'seed: "max_dispatch_owners and max_dispatch_bytes bound how much the queue '
                'hands to transports at once"',
                self._inv_window_respected,
            ),
            Invariant(
                "edf_order_ties_fifo",
                'docs/semantics.md#admission-queue: "insert after every owner with a key ≤ its '
                "own (bisect_right) "
                '… EDF, ties FIFO"; deadline_aware off → FIFO',
                self._inv_queue_order,
            ),
            Invariant(
                "owner_ids_never_reused",
                'docs/semantics.md#admission-queue: "owner ids from 1, monotonic, never reused"',
                self._inv_ids_never_reused,
            ),
            Invariant(
                "terminal_iff_status",
                'docs/semantics.md#admission-queue: "QUEUED → DISPATCHING → TERMINAL(status)"',
                self._inv_terminal_status,
            ),
        )

    def witnesses(self) -> Sequence[Witness]:
        """Interesting states the model must reach (non-vacuity)."""
        return (
            Witness("an_owner_was_dropped", lambda s: any(o.dropped for o in s.owners)),
            Witness(
                "a_promotion_reordered_a_pick",
                lambda s: s.last_pick is not None and s.last_pick.promotion_reordered,
            ),
            Witness(
                "a_blocked_owner_dispatched_later",
                lambda s: any(o.was_blocked and o.state == DISPATCHING for o in s.owners),
            ),
            Witness(
                "a_blocked_key_skipped_a_later_owner",
                lambda s: s.last_pick is not None and bool(s.last_pick.skipped),
            ),
            Witness(
                "an_owner_was_rejected_by_the_gate",
                lambda s: s.last_pick is not None and bool(s.last_pick.failed),
            ),
            Witness(
                "a_pick_stopped_at_head_of_line",
                lambda s: s.last_pick is not None and s.last_pick.stop == STOP_HEAD_OF_LINE,
            ),
            Witness(
                "staging_admitted_into_the_reserve",
                lambda s: (
                    s.outstanding_owners - s.user_owners > 0
                    and s.user_owners
                    == self.config.max_outstanding_owners - self.config.staging_owner_reserve
                ),
            ),
            Witness("a_batch_was_retired", lambda s: len(s.owners) < s.next_owner_id - 1),
        )

    def _inv_outstanding_within_limits(self, s: AdmissionState) -> bool:
        cfg = self.config
        return (
            s.outstanding_owners <= cfg.max_outstanding_owners
            and s.outstanding_bytes <= cfg.max_outstanding_bytes
        )

    def _inv_user_within_limits(self, s: AdmissionState) -> bool:
        cfg = self.config
        return (
            s.user_owners <= cfg.max_outstanding_owners - cfg.staging_owner_reserve
            and s.user_bytes <= cfg.max_outstanding_bytes - cfg.staging_byte_reserve
        )

    def _inv_counters_match(self, s: AdmissionState) -> bool:
        live = [o for o in s.owners if o.state != TERMINAL]
        user = [o for o in live if o.kind == USER]
        return (
            s.outstanding_owners == len(live)
            and s.outstanding_bytes == sum(o.length for o in live)
            and s.user_owners == len(user)
            and s.user_bytes == sum(o.length for o in user)
        )

    def _inv_dispatching_bytes(self, s: AdmissionState) -> bool:
        expected = sum(
            o.length for o in s.owners if o.state == DISPATCHING and o.degradation_eligible
        )
        return s.dispatching_bytes == expected

    def _inv_queue_is_queued(self, s: AdmissionState) -> bool:
        queued = {o.owner_id for o in s.owners if o.state == QUEUED}
        return len(s.queue) == len(queued) and set(s.queue) == queued

    def _inv_no_deadline_never_dropped(self, s: AdmissionState) -> bool:
        return all(o.deadline_ns != 0 for o in s.owners if o.dropped)

    def _inv_only_eligible_dropped(self, s: AdmissionState) -> bool:
        return all(o.degradation_eligible and o.status == CANCELED for o in s.owners if o.dropped)

    def _inv_drop_consumes_no_budget(self, s: AdmissionState) -> bool:
        pick = s.last_pick
        if pick is None:
            return True
        if pick.stop == STOP_OWNER_BUDGET:  # the owner budget ran out only on picked owners
            return len(pick.picked) == pick.max_owners
        if pick.stop == STOP_HEAD_OF_LINE:  # the byte budget ran out only on picked bytes
            return pick.head_of_line_length > pick.max_bytes - pick.picked_bytes
        return True

    def _inv_window_respected(self, s: AdmissionState) -> bool:
        pick = s.last_pick
        return pick is None or (
            len(pick.picked) <= pick.max_owners and pick.picked_bytes <= pick.max_bytes
        )

    def _inv_queue_order(self, s: AdmissionState) -> bool:
        by_id = {o.owner_id: o for o in s.owners}
        if self.config.deadline_aware:
            keys = [(by_id[i].key, i) for i in s.queue]
        else:
            keys = [(0, i) for i in s.queue]
        return all(a < b for a, b in itertools.pairwise(keys))

    def _inv_ids_never_reused(self, s: AdmissionState) -> bool:
        ids = [o.owner_id for o in s.owners]
        issued = sum(
            len(sub.owners)
            for sub, done in zip(self.config.submits, s.submitted, strict=True)
            if done
        )
        return (
            all(a < b for a, b in itertools.pairwise(ids))
            and all(1 <= i < s.next_owner_id for i in ids)
            and s.next_owner_id == 1 + issued
        )

    def _inv_terminal_status(self, s: AdmissionState) -> bool:
        return all((o.state == TERMINAL) == (o.status is not None) for o in s.owners)
