"""The credit spec's actions: their names, arities, which are faults, and each guard as a
table of named conjuncts (:data:`GUARDS`).

A reviewer reads an action's guard here; :mod:`tent_spec.credit._actions` holds one method per
conjunct, beside the action's effect.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

_CHARGE_ACTIONS = ("reserve", "commit", "rollback", "return_unused")
_ACTIONS = (
    "grant",
    "push_update",
    "send_activation",
    "report_usage",
    "deliver",
    "duplicate",
    "lose",
    "reserve",
    "commit",
    "rollback",
    "return_unused",
    "data_lands",
    "fail_inflight",
    "consumer_release",
    "reclaim_after_fence",
    "become_stale",
    "sender_restart",
    "receiver_restart",
    "publish_regressed",
)

# Guard kinds: what a conjunct of an action's guard is for (the guard ablation reads them).
RULE = "rule"  # a protocol rule (RFC / docs/semantics.md): the behaviour it forbids is wrong
REDUCTION = "reduction"  # a model reduction: fewer interleavings, the same behaviours
BOUND = "bound"  # a model bound of CreditBounds: keeps the state space finite
BUDGET = "budget"  # a fault budget of CreditBounds
GUARD_KINDS = (RULE, REDUCTION, BOUND, BUDGET)


class Guard(NamedTuple):
    """One named conjunct of an action's guard: ``check(state, *args)`` returns ``None`` when
    it holds, else the reason in words (what ``explain`` says)."""

    name: str
    kind: str
    check: str  # the CreditSpec method


# The guard of each action is the conjunction of its rows, evaluated in order (the first
# failing row is the reason). A reviewer reads an action's guard here; the methods hold one
# condition each, beside the action's effect.
_ROOM = Guard("message_room", BOUND, "_message_room")
_PUSH_SEQ = Guard("max_seq", BOUND, "_push_seq_within_cap")
_ANY_FAULT = Guard("max_faults", BUDGET, "_any_fault_left")
_IN_FLIGHT = Guard("message_in_flight", RULE, "_message_in_flight")
_WORK = Guard("work_in_flight", RULE, "_work_in_flight")
_TOKEN = (Guard("token_reserved", RULE, "_token_reserved"),)
GUARDS: Mapping[str, tuple[Guard, ...]] = {
    "grant": (
        Guard("demand_pending", RULE, "_demand_pending"),
        Guard("free_covers_demand", RULE, "_free_covers_demand"),
        Guard("max_grant_total", BOUND, "_grant_within_bound"),
        _ROOM,
        _PUSH_SEQ,
    ),
    "push_update": (Guard("refresh_due", REDUCTION, "_refresh_due"), _ROOM, _PUSH_SEQ),
    "send_activation": (
        Guard("sender_off_live_key", REDUCTION, "_sender_off_live_key"),
        _ROOM,
        Guard("activation_not_in_flight", REDUCTION, "_activation_not_in_flight"),
    ),
    "report_usage": (
        Guard("sender_has_entry", RULE, "_sender_has_entry"),
        _ROOM,
        Guard("max_seq", BOUND, "_usage_seq_within_cap"),
        Guard("demand_uncovered", REDUCTION, "_demand_uncovered"),
        Guard("something_to_report", REDUCTION, "_something_to_report"),
        Guard("report_due", REDUCTION, "_report_due"),
    ),
    "deliver": (_IN_FLIGHT,),
    "duplicate": (
        Guard("max_duplications", BUDGET, "_duplication_left"),
        _ANY_FAULT,
        _ROOM,
        _IN_FLIGHT,
    ),
    "lose": (Guard("max_losses", BUDGET, "_loss_left"), _ANY_FAULT, _IN_FLIGHT),
    "reserve": (
        Guard("entry_has_update", RULE, "_entry_has_update"),
        Guard("entry_not_stale", RULE, "_entry_not_stale"),
        Guard("max_tokens", BOUND, "_tokens_within_bound"),
        Guard("credit_covers_charge", RULE, "_credit_covers_charge"),
    ),
    "commit": _TOKEN,
    "rollback": _TOKEN,
    "return_unused": (
        Guard("sender_has_entry", RULE, "_sender_has_entry"),
        Guard("available_covers_return", RULE, "_available_covers_return"),
    ),
    "data_lands": (
        _WORK,
        Guard("work_of_live_session", RULE, "_work_of_live_session"),
        Guard("work_epoch_open", RULE, "_work_epoch_open"),
    ),
    "fail_inflight": (_WORK, Guard("work_epoch_not_live", RULE, "_work_epoch_not_live")),
    "consumer_release": (
        Guard("books_exist", RULE, "_books_exist"),
        Guard("landed_awaits_consumer", RULE, "_landed_awaits_consumer"),
    ),
    "reclaim_after_fence": (
        Guard("epoch_fencing", RULE, "_epoch_fencing"),
        Guard("epoch_work_settled", RULE, "_epoch_work_settled"),
    ),
    "become_stale": (
        Guard("max_stale", BUDGET, "_stale_left"),
        _ANY_FAULT,
        Guard("entry_live_and_fresh", RULE, "_entry_live_and_fresh"),
    ),
    "sender_restart": (
        Guard("max_sender_restarts", BUDGET, "_sender_restart_left"),
        _ANY_FAULT,
        Guard("max_epoch", BOUND, "_epoch_within_bound"),
    ),
    "receiver_restart": (
        Guard("max_receiver_restarts", BUDGET, "_receiver_restart_left"),
        _ANY_FAULT,
    ),
    "publish_regressed": (
        Guard("max_regressions", BUDGET, "_regression_left"),
        _ANY_FAULT,
        Guard("holds_live_grant", RULE, "_holds_live_grant"),
        _ROOM,
        _PUSH_SEQ,
    ),
}
"""Action name -> the conjuncts of its guard, in evaluation order."""

_ARITY = {
    "grant": 1,
    "push_update": 1,
    "send_activation": 1,
    "report_usage": 2,
    "deliver": 2,
    "duplicate": 2,
    "lose": 2,
    "reserve": 2,
    "commit": 2,
    "rollback": 2,
    "return_unused": 2,
    "data_lands": 2,
    "fail_inflight": 2,
    "consumer_release": 2,
    "reclaim_after_fence": 2,
    "become_stale": 1,
    "sender_restart": 1,
    "receiver_restart": 0,
    "publish_regressed": 2,
}
assert tuple(_ARITY) == _ACTIONS
_FAULTS = frozenset(
    {
        "duplicate",
        "lose",
        "become_stale",
        "sender_restart",
        "receiver_restart",
        "publish_regressed",
    }
)
