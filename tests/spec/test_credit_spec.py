"""The credit spec: exhaustive search of the ``tiny`` model, rule-by-rule unit tests,
known-bad variants refuted, symmetry reduction sound, and ``pack``/``apply``/``successors``
agreeing."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterator
from functools import cache
from typing import Any

import pytest
from tent_models.configs import CREDIT_BOUNDS, KNOWN_BAD_BOUNDS, KNOWN_BAD_CONFIGS
from tent_spec.credit import (
    ACTIVATION,
    FENCING,
    RECLAIMED,
    STALE,
    UPDATE,
    USAGE,
    Activation,
    CreditBounds,
    CreditSpec,
    CreditState,
    InvalidBounds,
    Update,
    Usage,
)
from tent_spec.credit_adversarial import AdversarialCreditSpec
from tent_spec.variants import KNOWN_BAD

# Every walk here is bounded: a spec with a guard removed can have an infinite state space
# (e.g. reserve without its credit check consumes without limit), and the test must then fail
# with that message instead of hanging. The tiny model has 3,566 states.
MAX_STATES = 20_000


class StateBoundExceeded(AssertionError):
    """The walk found more than ``MAX_STATES`` states: the model is not the finite one meant."""


def _count(seen: int, limit: int = MAX_STATES) -> None:
    if seen > limit:
        raise StateBoundExceeded(
            f"more than {limit:,} reachable states: the model is not finite "
            "(a guard or a bound is missing)"
        )


class Explored:
    """The reachable graph of a spec: canonical states, edges, BFS depth (at most
    ``MAX_STATES`` states, else :class:`StateBoundExceeded`)."""

    def __init__(self, spec: CreditSpec, *, symmetry: bool = True) -> None:
        canon: Callable[[Any], Any] = spec.canonicalize if symmetry else (lambda s: s)
        self.states: dict[tuple[Any, ...], Any] = {}
        self.depth: dict[tuple[Any, ...], int] = {}
        self.edges: dict[tuple[Any, ...], list[tuple[str, tuple[Any, ...]]]] = {}
        self.fired: set[str] = set()
        queue: deque[tuple[Any, ...]] = deque()
        for s in spec.initial_states():
            key = spec.pack(canon(s))
            self.states[key], self.depth[key] = canon(s), 0
            queue.append(key)
        while queue:
            key = queue.popleft()
            state = self.states[key]
            self.edges[key] = []
            if not spec.within_bounds(state):
                continue
            for step in spec.successors(state):
                self.fired.add(step.action)
                nxt = canon(step.state)
                nkey = spec.pack(nxt)
                self.edges[key].append((step.action, nkey))
                if nkey not in self.states:
                    self.states[nkey], self.depth[nkey] = nxt, self.depth[key] + 1
                    queue.append(nkey)
                    _count(len(self.states))


def first_violation(
    spec: CreditSpec, name: str, *, max_states: int = MAX_STATES
) -> tuple[int, Any] | None:
    """BFS for the shortest path to a state violating invariant ``name``: (depth, state)."""
    holds = next(i.holds for i in spec.invariants() if i.name == name)
    init = [spec.canonicalize(s) for s in spec.initial_states()]
    seen = {spec.pack(s) for s in init}
    queue = deque((s, 0) for s in init)
    while queue:
        state, depth = queue.popleft()
        if not holds(state):
            return depth, state
        for step in spec.successors(state):
            nxt = spec.canonicalize(step.state)
            key = spec.pack(nxt)
            if key not in seen:
                seen.add(key)
                queue.append((nxt, depth + 1))
                _count(len(seen), max_states)
    return None


@cache
def tiny() -> tuple[CreditSpec, Explored]:
    spec = CreditSpec(CREDIT_BOUNDS["tiny"])
    return spec, Explored(spec)


def two_senders(**overrides: Any) -> CreditSpec:
    fields: dict[str, Any] = {
        "senders": 2,
        "capacity": (1, 1),
        "charges": ((1, 1), (1, 0)),
        "max_grant_total": 1,
        "max_tokens": 1,
        "max_epoch": 1,
        "max_messages": 2,
    }
    fields.update(overrides)
    return CreditSpec(CreditBounds(**fields))


def run(
    spec: CreditSpec, state: CreditState, *steps: tuple[str, tuple[Hashable, ...]]
) -> CreditState:
    """Apply steps in order, failing the test with the guard's words if one is disabled."""
    for action, args in steps:
        nxt: CreditState | None = spec.apply(state, action, args)
        assert nxt is not None, spec.explain(state, action, args)
        state = nxt
    return state


def only_msg(bag: tuple[tuple[Any, int], ...], kind: int) -> Any:
    msgs = [m for m, _ in bag if m.kind == kind]
    assert len(msgs) == 1, bag
    return msgs[0]


def granted_one(spec: CreditSpec) -> CreditState:
    """Sender 0 asked for charge 0, got it granted and applied the update."""
    s0 = spec.initial_states()[0]
    s1 = run(spec, s0, ("report_usage", (0, 1)))
    usage = only_msg(s1.peers[0].to_receiver, USAGE)
    s2 = run(spec, s1, ("deliver", (0, usage)), ("grant", (0,)))
    update = only_msg(s2.peers[0].to_sender, UPDATE)
    return run(spec, s2, ("deliver", (0, update)))


# ---- exhaustive search of the tiny model ---------------------------------------------------


def test_tiny_model_is_small_and_finite() -> None:
    _spec, graph = tiny()
    assert 1_000 < len(graph.states) < 20_000


@pytest.mark.parametrize("name", [i.name for i in tiny()[0].invariants()])
def test_every_invariant_holds_on_every_reachable_tiny_state(name: str) -> None:
    spec, graph = tiny()
    holds = next(i.holds for i in spec.invariants() if i.name == name)
    bad = [s for s in graph.states.values() if not holds(s)]
    assert not bad, spec.describe(bad[0])


def test_every_action_fires_in_the_tiny_model() -> None:
    spec, graph = tiny()
    assert spec.unreachable_actions() == frozenset()
    assert set(spec.action_names()) - graph.fired == set()


def test_every_witness_is_reachable() -> None:
    spec, graph = tiny()
    pair = Explored(two_senders(capacity=(2, 2), charges=((1, 1),)))
    for witness in spec.witnesses():
        pool = pair if witness.name == "two_senders_hold_credit" else graph
        assert any(witness.holds(s) for s in pool.states.values()), witness.name


def test_recovered_is_reachable_from_every_tiny_state_without_faults() -> None:
    spec, graph = tiny()
    faults = spec.fault_actions()
    good = {k for k, s in graph.states.items() if spec.recovered(s)}
    assert good
    preds: dict[tuple[Any, ...], set[tuple[Any, ...]]] = {}
    for key, out in graph.edges.items():
        for action, nkey in out:
            if action not in faults:
                preds.setdefault(nkey, set()).add(key)
    reach, frontier = set(good), list(good)
    while frontier:
        for p in preds.get(frontier.pop(), ()):
            if p not in reach:
                reach.add(p)
                frontier.append(p)
    stuck = [s for k, s in graph.states.items() if k not in reach]
    assert not stuck, spec.describe(stuck[0])


def test_no_tiny_state_is_a_deadlock() -> None:
    spec, graph = tiny()
    dead = [graph.states[k] for k, out in graph.edges.items() if not out]
    assert not [s for s in dead if not spec.quiescent_by_bound(s)]


# ---- symmetry and sequence renumbering ------------------------------------------------------


def test_canonicalize_reduces_states_and_loses_none() -> None:
    spec = two_senders(charges=((1, 1),), max_seq=2, max_messages=1)
    full = Explored(spec, symmetry=False)
    reduced = Explored(spec)
    assert len(reduced.states) < len(full.states)
    # Soundness: the orbits of all concrete states are exactly the reduced states.
    assert {spec.pack(spec.canonicalize(s)) for s in full.states.values()} <= set(reduced.states)


def test_canonicalize_is_idempotent_and_symmetric() -> None:
    spec = two_senders(charges=((1, 1),), max_seq=2, max_messages=1)
    graph = Explored(spec, symmetry=False)
    for state in list(graph.states.values())[:2000]:
        canon = spec.canonicalize(state)
        assert spec.canonicalize(canon) == canon
        swapped = state._replace(peers=state.peers[::-1])
        assert spec.canonicalize(swapped) == canon


def test_sequence_renumbering_keeps_order_and_zero() -> None:
    spec = two_senders()
    s = run(spec, granted_one(spec), ("push_update", (0,)))
    update = only_msg(s.peers[0].to_sender, UPDATE)
    assert update.seq == 2
    lost = run(spec, s, ("deliver", (0, update)))
    # sequences 0 and 2 are live; rank renumbering maps 2 -> 1 everywhere for that key
    canon = spec.canonicalize(lost)
    p = next(p for p in canon.peers if p.ledger.last_seq)
    assert (p.ledger.last_seq, p.books[-1].pushed_seq) == (1, 1)


# ---- pack / apply / successors / explain agree ----------------------------------------------


def _arg_space(spec: CreditSpec, state: CreditState) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """Every action with arguments drawn wider than the enabled ones (incl. invalid ones)."""
    senders = range(-1, len(state.peers) + 1)
    charges = range(-1, len(spec.bounds.charges) + 1)
    msgs: list[Any] = [Update(UPDATE, 9, 9, 9, (0, 0)), Activation(ACTIVATION, 9, 9), "junk"]
    items: list[Any] = [(9, 9, 0), (1,)]
    for p in state.peers:
        msgs += [m for bag in (p.to_sender, p.to_receiver) for m, _ in bag]
        items += list(p.inflight)
    for action in spec.action_names():
        if action == "receiver_restart":
            yield action, ()
            yield action, (0,)
            continue
        for s in senders:
            yield action, (s,)
            second: list[Any]
            if action in ("deliver", "duplicate", "lose"):
                second = msgs
            elif action in ("data_lands", "fail_inflight"):
                second = items
            elif action in ("consumer_release", "reclaim_after_fence"):
                second = [0, 1, 2, 3]
            elif action == "publish_regressed":
                second = [-1, 0, 1, 2]
            else:
                second = list(charges)
            for a in second:
                yield action, (s, a)


def _plain_ints(value: Any) -> bool:
    if type(value) is int:
        return True
    return type(value) is tuple and all(_plain_ints(v) for v in value)


def test_apply_successors_explain_and_pack_agree() -> None:
    spec, graph = tiny()
    states = list(graph.states.values())[::7]
    for state in states:
        assert _plain_ints(spec.pack(state))
        enabled = {(st.action, st.args): st.state for st in spec.successors(state)}
        for (action, args), nxt in enabled.items():
            assert spec.apply(state, action, args) == nxt
            assert spec.explain(state, action, args) == "enabled"
        for action, args in _arg_space(spec, state):
            result = spec.apply(state, action, args)
            if (action, args) in enabled:
                continue
            assert result is None, (action, args)
            assert spec.explain(state, action, args) != "enabled"


def test_pack_distinguishes_states_that_differ() -> None:
    spec, graph = tiny()
    packs = {spec.pack(s) for s in graph.states.values()}
    assert len(packs) == len(graph.states)


def test_describe_is_flat_and_names_the_fields() -> None:
    spec = two_senders()
    view = spec.describe(granted_one(spec))
    assert view["sender[0].ledger.grant_total"] == (1, 1)
    assert view["sender[0].books[1].status"] == "ACTIVE"
    assert view["sender[0].ledger.freshness"] == "FRESH"
    assert all(not isinstance(v, dict) for v in view.values())


# ---- the rules, one at a time ---------------------------------------------------------------


def test_duplicate_update_is_a_no_op() -> None:
    spec = two_senders(max_duplications=1)
    s0 = spec.initial_states()[0]
    s1 = run(spec, s0, ("report_usage", (0, 1)))
    s2 = run(spec, s1, ("deliver", (0, only_msg(s1.peers[0].to_receiver, USAGE))), ("grant", (0,)))
    update = only_msg(s2.peers[0].to_sender, UPDATE)
    s3 = run(spec, s2, ("duplicate", (0, update)), ("deliver", (0, update)))
    s4 = run(spec, s3, ("deliver", (0, update)))
    assert s4.peers[0].ledger == s3.peers[0].ledger
    assert s4.faults.duplications == 1


def test_update_of_another_epoch_or_session_is_ignored() -> None:
    spec = two_senders()
    led = spec.initial_states()[0].peers[0].ledger
    for session, epoch in ((2, 1), (1, 2)):
        assert spec._apply_update(led, Update(UPDATE, session, epoch, 5, (1, 1))) == led


def test_decreasing_total_is_rejected() -> None:
    spec = two_senders(max_regressions=1)
    s = run(spec, granted_one(spec), ("publish_regressed", (0, 1)))
    bad = only_msg(s.peers[0].to_sender, UPDATE)
    assert bad.grants == (1, 0)
    after = run(spec, s, ("deliver", (0, bad)))
    assert after.peers[0].ledger.grant_total == (1, 1)
    assert after.peers[0].ledger.last_seq == 1


def test_reserve_is_all_or_nothing() -> None:
    spec = two_senders()
    s0 = spec.initial_states()[0]
    s1 = run(spec, s0, ("report_usage", (0, 2)))  # ask for (1, 0) only
    s2 = run(spec, s1, ("deliver", (0, only_msg(s1.peers[0].to_receiver, USAGE))), ("grant", (0,)))
    s3 = run(spec, s2, ("deliver", (0, only_msg(s2.peers[0].to_sender, UPDATE))))
    assert s3.peers[0].ledger.grant_total == (1, 0)
    assert spec.apply(s3, "reserve", (0, 0)) is None  # needs (1, 1)
    assert "insufficient credit" in spec.explain(s3, "reserve", (0, 0))
    s4 = run(spec, s3, ("reserve", (0, 1)))
    assert s4.peers[0].ledger.consumed == (1, 0)


def test_grant_needs_free_capacity_for_the_whole_demand() -> None:
    spec = two_senders()
    s = granted_one(spec)  # sender 0 holds all of (1, 1)
    s = run(spec, s, ("report_usage", (1, 1)))
    s = run(spec, s, ("deliver", (1, only_msg(s.peers[1].to_receiver, USAGE))))
    assert spec.apply(s, "grant", (1,)) is None
    assert "free capacity" in spec.explain(s, "grant", (1,))


def test_rollback_restores_exactly_and_commit_moves_work_in_flight() -> None:
    spec = two_senders()
    s = run(spec, granted_one(spec), ("reserve", (0, 0)))
    assert run(spec, s, ("rollback", (0, 0))).peers[0].ledger == granted_one(spec).peers[0].ledger
    c = run(spec, s, ("commit", (0, 0)))
    assert c.peers[0].inflight == ((1, 1, 0),)
    assert spec.apply(c, "rollback", (0, 0)) is None  # a committed token cannot roll back


def test_returned_credit_is_reclaimed_once_even_when_reported_twice() -> None:
    spec = two_senders(max_duplications=1)
    s = run(spec, granted_one(spec), ("return_unused", (0, 0)), ("report_usage", (0, 0)))
    usage = only_msg(s.peers[0].to_receiver, USAGE)
    s = run(spec, s, ("duplicate", (0, usage)), ("deliver", (0, usage)))
    assert s.peers[0].books[-1].reclaimed == (1, 1)
    again = run(spec, s, ("deliver", (0, usage)))
    assert again.peers[0].books[-1] == s.peers[0].books[-1]
    assert spec.free_capacity(again) == (1, 1)


def test_stale_entry_cannot_reserve_until_a_newer_update() -> None:
    spec = two_senders(max_stale=1)
    s = run(spec, granted_one(spec), ("become_stale", (0,)))
    assert s.peers[0].ledger.freshness == STALE
    assert spec.apply(s, "reserve", (0, 0)) is None
    s = run(spec, s, ("push_update", (0,)))
    s = run(spec, s, ("deliver", (0, only_msg(s.peers[0].to_sender, UPDATE))))
    assert run(spec, s, ("reserve", (0, 0))).peers[0].ledger.consumed == (1, 1)


def test_sender_restart_fences_the_old_epoch_until_its_work_is_gone() -> None:
    spec = two_senders(max_epoch=2, max_sender_restarts=1)
    s = run(spec, granted_one(spec), ("reserve", (0, 0)), ("commit", (0, 0)))
    s = run(spec, s, ("sender_restart", (0,)))
    peer = s.peers[0]
    assert peer.ledger.session == 0 and peer.epoch == 2
    assert [b.status for b in peer.books] == [FENCING, 0]
    assert spec.apply(s, "reclaim_after_fence", (0, 1)) is None
    assert "in-flight" in spec.explain(s, "reclaim_after_fence", (0, 1))
    landed = run(spec, s, ("data_lands", (0, (1, 1, 0))), ("reclaim_after_fence", (0, 1)))
    assert landed.peers[0].books[0].status == RECLAIMED  # landed data awaits the consumer
    assert spec.free_capacity(landed) == (0, 0)
    released = run(spec, landed, ("consumer_release", (0, 1)))
    assert [b.epoch for b in released.peers[0].books] == [2]
    assert spec.free_capacity(released) == (1, 1)
    failed = run(spec, s, ("fail_inflight", (0, (1, 1, 0))), ("reclaim_after_fence", (0, 1)))
    assert spec.free_capacity(failed) == (1, 1)


def test_new_activation_starts_a_fresh_entry_and_old_tokens_die() -> None:
    spec = two_senders(max_receiver_restarts=1)
    s = run(spec, granted_one(spec), ("reserve", (0, 0)), ("receiver_restart", ()))
    assert s.session == 2 and s.peers[0].ledger.session == 1
    s = run(spec, s, ("send_activation", (0,)))
    s = run(spec, s, ("deliver", (0, Activation(ACTIVATION, 2, 1))))
    led = s.peers[0].ledger
    assert (led.session, led.epoch, led.tokens, led.consumed) == (2, 1, (), (0, 0))
    assert spec.apply(s, "commit", (0, 0)) is None


def test_work_for_a_dead_session_never_lands() -> None:
    spec = two_senders(max_receiver_restarts=1)
    s = run(spec, granted_one(spec), ("reserve", (0, 0)), ("receiver_restart", ()))
    s = run(spec, s, ("commit", (0, 0)))  # the old entry still commits: to a dead receiver
    assert s.peers[0].inflight == ((1, 1, 0),)
    assert "dead receiver session" in spec.explain(s, "data_lands", (0, (1, 1, 0)))
    assert run(spec, s, ("fail_inflight", (0, (1, 1, 0)))).peers[0].inflight == ()


def test_usage_report_needs_no_data_credit() -> None:
    spec = two_senders()
    s0 = spec.initial_states()[0]
    assert spec.available(s0.peers[0].ledger) == (0, 0)
    assert spec.apply(s0, "report_usage", (0, 1)) is not None


def test_bag_bound_disables_sends_and_is_reported_as_quiescence_by_bound() -> None:
    spec = two_senders(max_messages=1)
    s = run(spec, spec.initial_states()[0], ("report_usage", (0, 1)))
    assert "bound: max_messages" in spec.explain(s, "report_usage", (1, 1))
    assert not spec.quiescent_by_bound(s)  # delivery is still possible


def test_recovered_means_every_grant_is_known_and_nothing_is_held() -> None:
    spec = two_senders()
    s0 = spec.initial_states()[0]
    assert spec.recovered(s0) and spec.within_bounds(s0)
    assert spec.recovered(run(spec, s0, ("report_usage", (0, 1))))  # a request is no debt
    s1 = run(spec, s0, ("report_usage", (0, 1)))
    s2 = run(spec, s1, ("deliver", (0, only_msg(s1.peers[0].to_receiver, USAGE))), ("grant", (0,)))
    assert not spec.recovered(s2)  # granted, but the sender does not know yet
    s3 = granted_one(spec)
    assert spec.recovered(s3)
    assert not spec.recovered(run(spec, s3, ("reserve", (0, 0))))


def test_explain_reports_malformed_arguments() -> None:
    spec = two_senders()
    s0 = spec.initial_states()[0]
    assert "unknown action" in spec.explain(s0, "warp", ())
    assert "argument" in spec.explain(s0, "grant", ())
    assert "sender index" in spec.explain(s0, "grant", (7,))
    assert "charge index" in spec.explain(s0, "reserve", (0, 5))
    assert spec.apply(s0, "deliver", (0, Usage(USAGE, 1, 1, 1, (0, 0), 0))) is None


@pytest.mark.parametrize(
    "fields",
    [
        {"senders": 0},
        {"capacity": ()},
        {"capacity": (1, 0)},
        {"charges": ((1,),)},
        {"charges": ((0, 0),)},
        {"charges": ((1, 1), (1, 1))},
        {"max_losses": -1},
    ],
)
def test_invalid_bounds_are_rejected(fields: dict[str, Any]) -> None:
    base: dict[str, Any] = {
        "senders": 1,
        "capacity": (1, 1),
        "charges": ((1, 1),),
        "max_grant_total": 1,
        "max_tokens": 1,
        "max_epoch": 1,
        "max_messages": 1,
    }
    with pytest.raises(InvalidBounds):
        CreditBounds(**{**base, **fields})


# ---- known-bad variants ---------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(KNOWN_BAD))
def test_known_bad_variant_violates_its_invariant_with_a_short_trace(variant: str) -> None:
    factory, expected, rule = KNOWN_BAD[variant]
    assert rule
    spec = factory(KNOWN_BAD_BOUNDS[variant])
    found = first_violation(spec, expected)
    assert found is not None, f"{variant} was not refuted"
    depth, _state = found
    assert depth <= 12, f"{variant}: counterexample of depth {depth}"
    # The clean spec (against the same senders) under the same bounds has no such state.
    adversarial = issubclass(factory, AdversarialCreditSpec)
    clean = AdversarialCreditSpec if adversarial else CreditSpec
    # Lying senders multiply the states: the clean adversarial spec under these bounds has
    # at most 43,553 (no_transfer_bound's; still a bound, so a missing guard fails instead of
    # hanging).
    limit = 50_000 if adversarial else MAX_STATES
    assert first_violation(clean(KNOWN_BAD_BOUNDS[variant]), expected, max_states=limit) is None


def test_known_bad_configs_build_the_variants() -> None:
    for name, build in KNOWN_BAD_CONFIGS.items():
        model = build()
        assert isinstance(model, KNOWN_BAD[name][0])
        assert model.name == f"known-bad/{name}"


# ---- guard conjuncts, staleness (issue 10, item 16) -----------------------------------------


def without(*pairs: tuple[str, str], prune: bool = True) -> type[CreditSpec]:
    """The credit spec with the named guard conjuncts removed (as the guard ablation does)."""
    return type("Without", (CreditSpec,), {"WITHOUT": frozenset(pairs), "PRUNE_CANDIDATES": prune})


def test_a_stale_sender_that_reserves_violates_the_stale_invariant() -> None:
    # Before the invariant existed, removing this conjunct passed every model check.
    spec = without(("reserve", "entry_not_stale"))(CREDIT_BOUNDS["tiny"])
    found = first_violation(spec, "stale_sender_never_reserves")
    assert found is not None
    depth, state = found
    assert depth == 6  # ask, receive, grant, apply, go stale, reserve
    assert any(p.ledger.freshness == STALE and p.ledger.tokens for p in state.peers)


def test_the_clean_spec_keeps_the_stale_invariant_on_tiny() -> None:
    spec, _graph = tiny()
    assert first_violation(spec, "stale_sender_never_reserves") is None


def test_a_walk_of_a_spec_without_its_credit_check_fails_instead_of_hanging() -> None:
    spec = without(("reserve", "credit_covers_charge"))(CREDIT_BOUNDS["tiny"])
    with pytest.raises(StateBoundExceeded):
        Explored(spec)


def test_candidate_pruning_hides_nothing_in_the_clean_spec() -> None:
    # The ablation turns pruning off; on the clean spec that must change nothing.
    pruned = tiny()[1]
    unpruned = Explored(without(prune=False)(CREDIT_BOUNDS["tiny"]))
    assert unpruned.states.keys() == pruned.states.keys()
    assert {k: sorted(v) for k, v in unpruned.edges.items()} == {
        k: sorted(v) for k, v in pruned.edges.items()
    }


def test_without_names_only_existing_conjuncts() -> None:
    with pytest.raises(InvalidBounds, match="names no guard conjunct"):
        without(("reserve", "no_such_guard"))(CREDIT_BOUNDS["tiny"])
