"""Hand-written mutants of ``tent_sched``: the admission queue and the MLU (docs/semantics.md#mlu
and docs/semantics.md#admission-queue)."""

from __future__ import annotations

from .catalogue_credit import one
from .model import DefectClass as D
from .model import Mutant

_QUEUE = "tent_sched/_queue.py"
_ADMIT = "tent_sched/_queue_admit.py"
_PICK = "tent_sched/_queue_pick.py"
_MLU = "tent_sched/_mlu.py"

MUTANTS: tuple[Mutant, ...] = (
    one(
        "drop_no_deadline_owner",
        "docs/semantics.md#mlu and docs/semantics.md#admission-queue: an owner without a deadline "
        "is never dropped",
        D.MISSING_CHECK,
        _PICK,
        "                        if mlu >= theta:",
        "                        if mlu >= theta or view.deadline_ns == 0:",
    ),
    one(
        "dropped_owner_uses_budget",
        "docs/semantics.md#admission-queue pick: a dropped owner uses no byte budget",
        D.WRONG_RULE,
        _PICK,
        "                            dropped.append((owner, mlu))\n",
        "                            dropped.append((owner, mlu))\n"
        "                            budget_bytes -= view.length\n",
    ),
    one(
        "failed_keeps_dispatching_bytes",
        "docs/semantics.md#admission-queue complete: dispatching_bytes drops whatever the "
        "terminal status",
        D.WRONG_RULE,
        _QUEUE,
        "        if owner.view.degradation_eligible:\n"
        "            self._dispatching_bytes -= owner.view.length\n",
        "        if owner.view.degradation_eligible and status is not TaskStatus.FAILED:\n"
        "            self._dispatching_bytes -= owner.view.length\n",
    ),
    one(
        "equal_deadline_inserted_first",
        "docs/semantics.md#admission-queue admission: EDF with FIFO ties (bisect_right)",
        D.WRONG_RULE,
        _ADMIT,
        "bisect.insort_right(self._entries, owner,",
        "bisect.insort_left(self._entries, owner,",
    ),
    one(
        "past_due_owner_promoted",
        "docs/semantics.md#admission-queue pick 2: past-due owners (deadline <= now) are not "
        "promoted",
        D.BOUNDARY_FLIP,
        _PICK,
        "low = bisect.bisect_left(entries, now_ns + 1, head, end, key=_ORDER_KEY)",
        "low = bisect.bisect_left(entries, now_ns, head, end, key=_ORDER_KEY)",
    ),
    one(
        "owner_limit_exclusive",
        "docs/semantics.md#admission-queue admission 7: limits are inclusive (exactly "
        "max_outstanding_owners fits)",
        D.BOUNDARY_FLIP,
        _ADMIT,
        "if next_owners > limits.max_outstanding_owners:",
        "if next_owners >= limits.max_outstanding_owners:",
    ),
    one(
        "staging_byte_reserve_ignored",
        "docs/semantics.md#admission-queue admission 7: user bytes never reach into the staging "
        "byte reserve",
        D.MISSING_BOUND,
        _ADMIT,
        "if next_user_bytes > self._user_byte_limit:",
        "if False and next_user_bytes > self._user_byte_limit:",
    ),
    one(
        "byte_charge_overflow_unchecked",
        "docs/semantics.md#admission-queue admission: a byte charge past 2**64 − 1 is "
        "InvalidArgument",
        D.OVERFLOW,
        _ADMIT,
        "        if next_bytes > U64_MAX:\n",
        "        if False:\n",
    ),
    one(
        "public_id_checked_in_wrong_batch",
        "docs/semantics.md#admission-queue admission: a public id already mapped in *its* batch "
        "is InvalidEntry",
        D.WRONG_KEY,
        _ADMIT,
        "if (batch_token, public_id) in self._public_ids:",
        "if (0, public_id) in self._public_ids:",
    ),
    one(
        "zero_byte_budget_still_drops",
        "docs/semantics.md#admission-queue pick 1: a zero budget returns before any promotion or "
        "drop",
        D.WRONG_RULE,
        _PICK,
        "if max_owners == 0 or max_bytes == 0:  # §2: before any promotion or drop",
        "if max_owners == 0:  # §2: before any promotion or drop",
    ),
    one(
        "deadline_now_not_past",
        "docs/semantics.md#mlu: deadline_ns <= now_ns (equal counts as past) → DBL_MAX",
        D.BOUNDARY_FLIP,
        _MLU,
        "if deadline_ns <= now_ns:  # §1: equal counts as past",
        "if deadline_ns < now_ns:  # §1: equal counts as past",
    ),
)
