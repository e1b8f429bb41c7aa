"""Named configurations of the admission spec, and its known-bad variants.

``CONFIGS`` maps a model name to a factory of a ready model (``tent check`` and the tests call the
factory). Sizes on this machine (Python BFS):

* ``admission/tiny``: 3 owners in 2 submits, every mechanism on (EDF, promotion, drop, gate,
  reserves); about 15 k states, exhausted by the unit tests in seconds.
* ``admission/ci``: 4 owners in 3 submits (a batch token reused), a zero window.
* ``admission/deep``: 5 owners in 4 submits, three statuses, a longer clock; benchmarks only.

``KNOWN_BAD`` maps a mutant name to ``(factory, invariant it must violate)``: each mutant changes
one rule of the spec and the checker must find a counterexample for the named invariant.

Time is in ns and bandwidth in bytes per second: at 1e9 B/s one byte takes one ns, so the small
lengths and deadlines below give MLU values around 1 and the threshold decisions are exercised.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence

from tent_spec.admission import (
    COMPLETED,
    FAILED,
    STAGING_INTERNAL,
    TIMEOUT,
    USER,
    AdmissionConfig,
    AdmissionSpec,
    Owner,
    OwnerSpec,
    Submit,
)

__all__ = [
    "CONFIGS",
    "KNOWN_BAD",
    "ci_config",
    "deep_config",
    "tiny_config",
]

#: One byte per nanosecond.
GBPS_1 = 1_000_000_000


def tiny_config() -> AdmissionConfig:
    """Three owners in two submits: reserves, promotion, the drop and one gated credit key.

    Owners 1 and 3 share credit key 1, so a BLOCKED answer for one skips the other; owner 2 is
    staging-internal, not degradation eligible and never gated; owner 3 has no deadline.
    """
    return AdmissionConfig(
        name="admission/tiny",
        max_outstanding_owners=3,
        max_outstanding_bytes=5,
        staging_owner_reserve=1,
        staging_byte_reserve=1,
        deadline_aware=True,
        promotion_slack_ns=2,
        mlu_local_threshold=1.0,
        submits=(
            Submit(1, (OwnerSpec(USER, 2, 3, True, 1),)),
            Submit(
                2,
                (
                    OwnerSpec(STAGING_INTERNAL, 1, 2, False, 0),
                    OwnerSpec(USER, 2, 0, True, 1),
                ),
            ),
        ),
        dispatch_windows=((1, 2), (3, 4)),
        bandwidths=(None, GBPS_1),
        initial_bandwidth_bps=GBPS_1,
        time_steps_ns=(1,),
        max_time_ns=2,
        complete_statuses=(COMPLETED, FAILED),
    )


def ci_config() -> AdmissionConfig:
    """Four owners in three submits, batch 1 used twice, two credit keys, a zero window."""
    return AdmissionConfig(
        name="admission/ci",
        max_outstanding_owners=3,
        max_outstanding_bytes=5,
        staging_owner_reserve=1,
        staging_byte_reserve=1,
        deadline_aware=True,
        promotion_slack_ns=2,
        mlu_local_threshold=1.0,
        submits=(
            Submit(1, (OwnerSpec(USER, 2, 2, True, 1), OwnerSpec(USER, 1, 0, True, 2))),
            Submit(2, (OwnerSpec(STAGING_INTERNAL, 1, 1, False, 0),)),
            Submit(1, (OwnerSpec(USER, 1, 2, True, 1),)),
        ),
        dispatch_windows=((0, 0), (1, 1), (3, 3)),
        bandwidths=(None, GBPS_1),
        initial_bandwidth_bps=GBPS_1,
        time_steps_ns=(1,),
        max_time_ns=2,
        complete_statuses=(COMPLETED, FAILED),
    )


def deep_config() -> AdmissionConfig:
    """Five owners in four submits, three keys, every terminal status the engine reports."""
    return AdmissionConfig(
        name="admission/deep",
        max_outstanding_owners=4,
        max_outstanding_bytes=7,
        staging_owner_reserve=1,
        staging_byte_reserve=2,
        deadline_aware=True,
        promotion_slack_ns=3,
        mlu_local_threshold=1.5,
        submits=(
            Submit(1, (OwnerSpec(USER, 2, 5, True, 1), OwnerSpec(USER, 1, 0, True, 2))),
            Submit(2, (OwnerSpec(STAGING_INTERNAL, 2, 3, False, 0),)),
            Submit(3, (OwnerSpec(USER, 1, 3, True, 1),)),
            Submit(1, (OwnerSpec(USER, 3, 6, False, 3),)),
        ),
        dispatch_windows=((0, 0), (1, 2), (2, 4), (4, 7)),
        bandwidths=(None, GBPS_1, 2 * GBPS_1),
        initial_bandwidth_bps=GBPS_1,
        time_steps_ns=(1, 2),
        max_time_ns=6,
        complete_statuses=(COMPLETED, FAILED, TIMEOUT),
    )


CONFIGS: Mapping[str, Callable[[], AdmissionSpec]] = {
    "admission/tiny": lambda: AdmissionSpec(tiny_config()),
    "admission/ci": lambda: AdmissionSpec(ci_config()),
    "admission/deep": lambda: AdmissionSpec(deep_config()),
}


# --- known-bad variants: one rule changed each ----------------------------------------------------


class EqualDeadlinesFirst(AdmissionSpec):
    """Mutant: an owner is inserted *before* queued owners with an equal key (bisect_left)."""

    def insertion_index(self, queued: Sequence[Owner], owner: Owner) -> int:
        return bisect.bisect_left([o.key for o in queued], owner.key)


class DropChargesBudget(AdmissionSpec):
    """Mutant: a dropped owner uses one owner and its length of the dispatch window."""

    def drop_charge(self, owner: Owner) -> tuple[int, int]:
        return (1, owner.length)


class FailureKeepsDispatchingBytes(AdmissionSpec):
    """Mutant: only a COMPLETED owner gives its bytes back to ``dispatching_bytes``."""

    def dispatching_release(self, owner: Owner, status: str) -> int:
        if status != COMPLETED:
            return 0
        return super().dispatching_release(owner, status)


def _equal_deadlines_config() -> AdmissionConfig:
    """Two owners with the same deadline, so a tie is inserted."""
    return AdmissionConfig(
        name="admission/bad/equal_deadlines_first",
        max_outstanding_owners=2,
        max_outstanding_bytes=2,
        deadline_aware=True,
        submits=(
            Submit(1, (OwnerSpec(USER, 1, 5, True, 0),)),
            Submit(2, (OwnerSpec(USER, 1, 5, True, 0),)),
        ),
        dispatch_windows=((1, 1),),
    )


KNOWN_BAD: Mapping[str, tuple[Callable[[], AdmissionSpec], str]] = {
    "admission/bad/equal_deadlines_first": (
        lambda: EqualDeadlinesFirst(_equal_deadlines_config()),
        "edf_order_ties_fifo",
    ),
    "admission/bad/drop_charges_budget": (
        lambda: DropChargesBudget(tiny_config()),
        "dropped_owner_consumes_no_budget",
    ),
    "admission/bad/failure_keeps_dispatching_bytes": (
        lambda: FailureKeepsDispatchingBytes(tiny_config()),
        "dispatching_bytes_is_eligible_dispatching_lengths",
    ),
}
