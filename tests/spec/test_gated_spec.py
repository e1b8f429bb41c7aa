"""The gated-queue spec (``tent_spec.gated``): the checker's verdicts and the gate's rules by hand.

Fast tests exhaust ``gated/tiny`` and refute every known-bad variant; ``gated/ci`` is behind
``slow``. The hand-driven tests walk the issues' scenarios step by step; grant-ahead's own rules
(credit protocol version 2) are in ``test_gated_grant_ahead.py``.
"""

from __future__ import annotations

import functools
from typing import Any

import attrs
import pytest
from gated_steps import only_message, small_config, step
from tent_models.checker import CheckResult, ViolationKind, check
from tent_models.configs.gated import (
    CONFIGS,
    KNOWN_BAD,
    PartialReserve,
    hoarding_config,
    line_config,
    no_refresh_config,
    tiny_config,
)
from tent_spec.credit import InvalidBounds
from tent_spec.gated import (
    ACTIVE,
    FENCING,
    STALE,
    TOKEN_TRANSITIONS,
    GatedSpec,
    GatedState,
    OwnerSpec,
    Report,
    Update,
)


def _initial(spec: GatedSpec) -> GatedState:
    return spec.initial_states()[0]


def _one_key(**changes: Any) -> GatedSpec:
    """Two remote owners of one byte on one key; the receiver grants one owner up front."""
    fields: dict[str, Any] = {
        "capacity": (2, 2, 2),
        "max_grant": (2, 2, 2),
        "initial_grant": (1, 1, 1),
        "max_receiver_restarts": 1,
    }
    return GatedSpec(small_config(**{**fields, **changes}))


# The shipped models' sizes (models/tent_models/manifest.json has them too).
TINY_STATES = 20443  # 36,711 before senders returned credit that does not cover the head
CI_STATES = 83325


# --- the checker on the shipped models ------------------------------------------------------------


def test_tiny_is_exhausted_with_every_invariant_witness_and_recovery() -> None:
    result = check(CONFIGS["gated/tiny"]())
    assert result.ok, [v.name for v in result.violations]
    assert result.exhaustive
    assert result.distinct_states == TINY_STATES  # a silent change of the state space fails here
    assert all(w.satisfied for w in result.witnesses)
    assert {w.name for w in result.witnesses} >= {
        "stalled_owner_dispatched_after_a_grant",
        "old_snapshot_rejected_after_restart",
        "submit_failure_rolled_back",
        "topped_up_ahead_of_demand",
    }


@pytest.mark.slow
def test_ci_is_exhausted_with_every_invariant_witness_and_recovery() -> None:
    result = check(CONFIGS["gated/ci"]())
    assert result.ok, [v.name for v in result.violations]
    assert result.exhaustive
    assert result.distinct_states == CI_STATES
    assert all(w.satisfied for w in result.witnesses)


@functools.cache
def _known_bad_result(name: str) -> CheckResult:
    factory, invariant = KNOWN_BAD[name]
    return check(factory(), check_recoverability=invariant == "recoverability")


@pytest.mark.parametrize("name", sorted(KNOWN_BAD))
def test_every_known_bad_variant_is_refuted_with_its_invariant(name: str) -> None:
    _factory, invariant = KNOWN_BAD[name]
    liveness = invariant == "recoverability"
    result = _known_bad_result(name)
    kind = ViolationKind.RECOVERABILITY if liveness else ViolationKind.INVARIANT
    names = {v.name for v in result.violations if v.kind is kind}
    assert invariant in names


def test_without_the_refreshes_a_lost_report_stalls_its_key_for_good() -> None:
    # Version 2 sends no frame without news: the owner's level report is lost, and neither end
    # has anything new to say, so nothing ever repeats it (gated/bad/no_refresh).
    result = _known_bad_result("gated/bad/no_refresh")
    (stuck,) = [v for v in result.violations if v.kind is ViolationKind.RECOVERABILITY]
    assert stuck.actions[-1][0] == "lose"
    assert len(stuck.actions) == 4


def test_with_the_refreshes_the_same_losses_recover() -> None:
    # The same model with both refreshes: a lost report or update is repeated by the next
    # refresh (cumulative totals: the repeat is harmless), and recoverability holds.
    result = check(GatedSpec(attrs.evolve(no_refresh_config(), name="gated/loss", refresh=True)))
    assert result.ok, [v.name for v in result.violations]
    assert result.exhaustive


@pytest.mark.slow
def test_hoarding_recovers_because_the_gate_returns_idle_credit() -> None:
    # Issue 10 item 8: two keys compete for one owner's worth of capacity, owners may be
    # canceled and submits refused; whatever leaves, the other key is never starved.
    result = check(CONFIGS["gated/hoarding/ci"]())
    assert result.ok, [v.name for v in result.violations]
    assert result.exhaustive
    assert {w.name for w in result.witnesses if w.satisfied} >= {
        "idle_credit_returned_and_reclaimed",
        "stalled_owner_canceled",
    }


def test_without_the_return_path_a_competing_key_starves_after_a_refused_submit() -> None:
    # Key 1 holds one of the receiver's two bytes (its activation grant), its owner's submit
    # fails (exact rollback: the credit is available again on key 1) before key 1 ever
    # reported, so its sender does not count it idle, and nothing returns it: key 2's two-byte
    # owner waits for that byte for good. (Until key 2's returns were evaluated again, the
    # shortest counterexample was a longer one of that other gap: 17 actions.)
    result = _known_bad_result("gated/bad/no_idle_return")
    (starved,) = [v for v in result.violations if v.kind is ViolationKind.RECOVERABILITY]
    assert starved.actions == (("admit", (0,)), ("pick", (3, 3)), ("submit", (1, False)))


def _hoarding(**changes: Any) -> GatedSpec:
    return GatedSpec(attrs.evolve(hoarding_config(), **changes))


def test_a_grant_that_arrives_after_its_owner_was_canceled_goes_back_at_the_next_pick() -> None:
    # Found by the checker on gated/hoarding/ci: the report stating owner 1's level is in
    # flight when owner 1 is canceled (nothing waits on key 1 any more), but the receiver grants
    # for the level it was told. The key is flagged, so the next pick (key 2's owner) returns
    # the late grant, and the report that carries the return is due at once.
    spec = _hoarding()
    state = step(spec, step(spec, _initial(spec), "admit", 0), "pick", 2, 2)
    state = step(spec, state, "sender_flush", 0)
    report = only_message(state.to_receiver[0])
    state = step(spec, state, "cancel", 1)
    assert state.senders[0].withdrawn and state.senders[0].waiting == (0, 0, 0)
    state = step(spec, step(spec, state, "deliver", 0, report), "receiver_flush", 0)
    update = next(m for m, _n in state.to_sender[0] if isinstance(m, Update))
    state = step(spec, state, "deliver", 0, update)
    assert spec.available(state.senders[0]) == (1, 1, 1)  # idle: nothing of key 1 waits
    state = step(spec, step(spec, state, "admit", 1), "pick", 2, 2)
    assert spec.available(state.senders[0]) == (0, 0, 0)
    assert state.senders[0].returned == (1, 1, 1)
    (withdrawal,) = spec.sender_messages(state, 0, refresh=False)
    assert isinstance(withdrawal, Report) and withdrawal.returned == (1, 1, 1)
    assert withdrawal.demand == (0, 0, 0)  # no level: nothing in flight, nothing waits


def test_a_canceled_stall_lowers_the_stated_waiting_work() -> None:
    spec = _one_key(
        cancel=True,
        workload=(OwnerSpec(1, 1),) * 3,
        max_outstanding_owners=3,
        max_outstanding_bytes=3,
    )
    state = _initial(spec)
    for index in range(3):
        state = step(spec, state, "admit", index)
    state = step(spec, state, "pick", 2, 2)  # owner 1 takes the initial grant, 2 and 3 stall
    assert [o.stall for o in state.owners] == [0, 1, 1]
    assert state.senders[0].waiting == (2, 2, 2)  # two owners wait
    state = step(spec, state, "cancel", 2)
    assert state.senders[0].waiting == (1, 1, 1)  # owner 3 still waits: down by one charge
    assert state.senders[0].returned == (0, 0, 0)  # nothing available to give back
    assert state.queue == (3,)


def test_the_head_of_the_line_is_never_passed() -> None:
    # The counterexample that refutes gated/bad/line_passes_blocked_head, on the spec: key 2
    # was served ahead of key 1 once (key 2 joined the line first); then key 1 heads the line
    # and its two-byte charge does not fit the one free byte, and key 2, due again behind it,
    # waits too instead of taking that byte.
    result = _known_bad_result("gated/bad/line_passes_blocked_head")
    (passed,) = [v for v in result.violations if v.name == "bounded_bypass"]
    assert len(passed.actions) == 18
    spec = GatedSpec(line_config())
    state = _initial(spec)
    for action, args in passed.actions:
        state = step(spec, state, action, *args)
    assert state.line == (0, 1) and state.bypass == (1, 0)
    assert spec.free_capacity(state) == (1, 1, 1)
    assert state.receivers[1].granted == (1, 1, 1)  # not topped up past key 1


# --- the gate decides from the credit state -------------------------------------------------------


def test_two_owners_and_a_one_owner_grant_dispatch_one_until_the_grant_grows() -> None:
    spec = _one_key()
    state = step(spec, step(spec, _initial(spec), "admit", 0), "admit", 1)
    state = step(spec, state, "pick", 2, 2)
    first, second = state.owners
    assert (first.state, first.token) == ("DISPATCHING", "RESERVED")
    assert (second.state, second.stall) == ("QUEUED", 1)  # blocked in place: a credit stall
    assert state.queue == (2,)
    assert spec.level(state, 1) == (1, 1, 1)  # nothing in flight yet, one owner waits
    # The stall states the level; control is not gated by the (exhausted) data credit.
    state = step(spec, state, "sender_flush", 0)
    report = only_message(state.to_receiver[0])
    assert isinstance(report, Report) and report.demand == (2, 2, 2)  # consumed 1 + level 1
    state = step(spec, state, "deliver", 0, report)
    # The receiver counts the reserved charge as held (unlanded): the level is covered.
    assert state.receivers[0].granted == (1, 1, 1)
    assert "nothing to send" in spec.explain(state, "receiver_flush", (0,))
    # Once the first owner's work is in flight the level rises to 2: that is news.
    state = step(spec, step(spec, state, "submit", 1, True), "sender_flush", 0)
    report = max(m for m, _n in state.to_receiver[0])
    assert report.demand == (3, 3, 3)  # consumed 1 + level 2
    state = step(spec, state, "deliver", 0, report)
    assert state.receivers[0].granted == (2, 2, 2)
    state = step(spec, state, "receiver_flush", 0)
    update = next(m for m, _n in state.to_sender[0] if isinstance(m, Update))
    assert update.grants == (2, 2, 2) and not update.retry
    state = step(spec, state, "deliver", 0, update)
    state = step(spec, state, "pick", 2, 2)
    assert state.owners[1].state == "DISPATCHING" and state.owners[1].stall == 2


def test_a_failed_submit_restores_the_exact_consumption() -> None:
    spec = _one_key()
    state = step(spec, step(spec, _initial(spec), "admit", 0), "pick", 2, 2)
    assert state.senders[0].consumed == (1, 1, 1)
    state = step(spec, state, "submit", 1, False)
    assert state.senders[0].consumed == (0, 0, 0)
    assert (state.owners[0].status, state.owners[0].token) == ("FAILED", "ROLLED_BACK")
    assert state.outstanding_owners == 0 and state.dispatching_bytes == 0


def test_a_restart_rejects_the_queued_old_snapshot_and_fences_in_flight_work() -> None:
    spec = _one_key()
    state = step(spec, step(spec, _initial(spec), "admit", 0), "pick", 2, 2)
    state = step(spec, step(spec, state, "submit", 1, True), "admit", 1)
    state = step(spec, state, "receiver_restart")
    assert state.senders[0].phase == STALE
    assert spec.apply(state, "land", (1,)) is None  # the dead session's work never lands
    state = step(spec, state, "pick", 2, 2)
    assert state.owners[1].state == "QUEUED"  # STALE: blocked, not yet known to be fenced
    state = step(spec, state, "sender_flush", 0)  # the offer (and the stall's level report)
    for msg, _n in state.to_receiver[0]:
        state = step(spec, state, "deliver", 0, msg)
    state = step(spec, state, "receiver_flush", 0)
    activation = min(m for m, _ in state.to_sender[0])
    state = step(spec, state, "deliver", 0, activation)
    assert (state.senders[0].phase, state.senders[0].session) == (FENCING, 2)
    state = step(spec, state, "pick", 2, 2)
    rejected = state.owners[1]
    assert (rejected.status, rejected.token) == ("FAILED", "NONE")  # nothing reserved
    state = step(spec, state, "complete", 1)  # it can no longer land: FAILED, fence drained
    assert state.owners[0].status == "FAILED"
    assert state.senders[0].phase == ACTIVE


def test_a_fenced_token_cannot_commit_but_rolls_back_without_touching_the_new_entry() -> None:
    spec = _one_key()
    state = step(spec, step(spec, _initial(spec), "admit", 0), "pick", 2, 2)
    state = step(spec, state, "receiver_restart")
    state = step(spec, state, "sender_flush", 0)
    state = step(spec, state, "deliver", 0, only_message(state.to_receiver[0]))
    state = step(spec, state, "receiver_flush", 0)
    activation = min(m for m, _ in state.to_sender[0])
    state = step(spec, state, "deliver", 0, activation)
    assert "fenced" in spec.explain(state, "submit", (1, True))
    state = step(spec, state, "submit", 1, False)
    assert state.senders[0].consumed == (0, 0, 0)


def test_a_local_owner_is_never_stalled_by_a_blocked_key() -> None:
    spec = GatedSpec(tiny_config())  # owner 1 remote (short of data credit), owner 2 local
    state = step(spec, step(spec, _initial(spec), "admit", 0), "admit", 1)
    state = step(spec, state, "pick", 2, 3)
    assert state.owners[0].state == "QUEUED" and state.owners[1].state == "DISPATCHING"
    assert state.owners[1].token == "NONE"


def test_the_partial_reserve_mutant_leaves_credit_consumed_by_a_blocked_owner() -> None:
    spec = PartialReserve(tiny_config())
    state = step(spec, step(spec, _initial(spec), "admit", 0), "pick", 2, 3)
    assert state.owners[0].state == "QUEUED"
    assert state.senders[0].consumed == (0, 1, 1)
    assert not spec.inv_consumed_equals_token_charges(state)


def test_token_table_is_the_only_token_lifecycle() -> None:
    assert TOKEN_TRANSITIONS == {
        ("NONE", "reserve"): "RESERVED",
        ("RESERVED", "commit"): "COMMITTED",
        ("RESERVED", "rollback"): "ROLLED_BACK",
        ("COMMITTED", "complete"): "SETTLED",
    }


# --- model plumbing -------------------------------------------------------------------------------


def test_canonical_sequences_keep_the_behaviour_of_the_raw_state() -> None:
    spec = _one_key()
    state = step(spec, step(spec, _initial(spec), "admit", 0), "admit", 1)
    for _ in range(3):  # the refreshes bump the sequences past their ranks
        state = step(spec, state, "refresh_tick")
        state = step(spec, state, "deliver", 0, only_message(state.to_sender[0]))
        state = step(spec, state, "deliver", 0, only_message(state.to_receiver[0]))
    canonical = spec.canonicalize(state)
    assert canonical != state and spec.canonicalize(canonical) == canonical
    assert canonical.senders[0].last_seq == canonical.receivers[0].pushed_seq == 1
    assert canonical.senders[0].usage_seq == canonical.receivers[0].usage_seq == 1
    raw = sorted((s.action, spec.canonicalize(s.state)) for s in spec.successors(state))
    canon = sorted((s.action, spec.canonicalize(s.state)) for s in spec.successors(canonical))
    assert raw == canon


def test_refused_actions_are_explained() -> None:
    spec = _one_key()
    state = _initial(spec)
    assert spec.apply(state, "pick", (2, 2)) is None
    assert "queue is empty" in spec.explain(state, "pick", (2, 2))
    assert "only the next owner" in spec.explain(state, "admit", (1,))
    assert "unknown action" in spec.explain(state, "teleport", ())
    assert "nothing to send" in spec.explain(state, "sender_flush", (0,))


@pytest.mark.parametrize(
    "changes",
    [
        {"keys": 3},
        {"workload": (OwnerSpec(2, 1),)},
        {"workload": (OwnerSpec(1, 0),)},
        {"capacity": (0, 1, 1)},
        {"initial_grant": (3, 1, 1)},
        {"windows": ()},
        {"max_messages": 0},
    ],
)
def test_an_inconsistent_configuration_is_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(InvalidBounds):
        _one_key(**changes)
