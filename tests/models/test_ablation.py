"""The guard ablation (issue 10, item 16): its guard list is the spec's table, its verdicts
separate refuted / survived / inconclusive, and every survivor has a written reason."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tent_models import ablation, registry
from tent_models.ablation import AblationResult, GuardRef, Rung, Verdict
from tent_models.checker import check
from tent_models.configs import CREDIT_BOUNDS, KNOWN_BAD_BOUNDS
from tent_spec.credit import GUARDS, RULE, CreditSpec

REVIEW = Path(__file__).resolve().parents[2] / "docs" / "spec_review_credit.md"


def test_the_guard_list_is_the_spec_table() -> None:
    refs = ablation.credit_guards()
    assert len(refs) == sum(len(rows) for rows in GUARDS.values())
    assert [(r.action, r.guard) for r in refs] == [
        (a, g.name) for a, rows in GUARDS.items() for g in rows
    ]
    targets = [t for t in registry.catalogue() if t.kind is registry.TargetKind.ABLATION]
    assert len(targets) == len(refs)
    ci = {t.name for t in targets if t.tier is registry.Tier.CI}
    assert ci == {
        f"ablation/credit/{r.action}.{r.guard}"
        for r in refs
        if r.kind == RULE and r.action in ablation.CREDIT_SAFETY_ACTIONS
    }


def test_every_guard_row_names_a_method_and_every_action_has_rows() -> None:
    spec = CreditSpec(CREDIT_BOUNDS["tiny"])
    assert tuple(GUARDS) == tuple(spec.action_names())
    for rows in GUARDS.values():
        assert rows
        for g in rows:
            assert callable(getattr(spec, g.check)), g


def test_explained_names_real_conjuncts_and_the_review_page_lists_them() -> None:
    names = {r.name for r in ablation.credit_guards()}
    assert set(ablation.EXPLAINED) <= names
    page = REVIEW.read_text()
    listed = set(re.findall(r"`(credit:[a-z_]+\.[a-z_]+)`", page))
    assert listed == set(ablation.EXPLAINED)


def test_the_ladder_runs_the_smallest_model_first() -> None:
    measured = [
        check(CreditSpec(rung.bounds, name=rung.name)).distinct_states
        for rung in ablation.CREDIT_LADDER
    ]
    assert measured == sorted(measured)
    assert measured == [ablation._CLEAN_STATES[r.name] for r in ablation.CREDIT_LADDER]


def _one(ref: GuardRef, bounds_name: str, max_states: int = 50_000) -> AblationResult:
    rung = Rung(name=bounds_name, bounds=KNOWN_BAD_BOUNDS[bounds_name], max_states=max_states)
    return ablation.ablate(ref, (rung,))


def _ref(action: str, guard: str) -> GuardRef:
    return next(r for r in ablation.credit_guards() if (r.action, r.guard) == (action, guard))


def test_removing_the_stale_conjunct_is_refuted_by_the_stale_invariant() -> None:
    result = _one(_ref("reserve", "entry_not_stale"), "stale_reserve")
    assert result.verdict is Verdict.REFUTED
    assert result.violation == "invariant stale_sender_never_reserves"
    assert ablation.judge(result)[0]


def test_an_effect_that_needs_its_conjunct_refutes_the_removal() -> None:
    result = _one(_ref("commit", "token_reserved"), "delta_grants")
    assert result.verdict is Verdict.REFUTED
    assert result.violation.startswith("effect raised")


def test_a_run_cut_by_its_state_bound_is_inconclusive_not_refuted() -> None:
    result = _one(_ref("data_lands", "work_in_flight"), "delta_grants", max_states=10)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.runs == (("delta_grants", 10, False),)


def test_an_unexplained_survivor_fails_the_check() -> None:
    ref = GuardRef(spec="credit", action="data_lands", guard="invented", kind=RULE)
    survived = AblationResult(guard=ref, verdict=Verdict.SURVIVED, runs=(("m", 5, True),))
    passed, message = ablation.judge(survived)
    assert not passed
    assert "missing invariant" in message
    inconclusive = AblationResult(guard=ref, verdict=Verdict.INCONCLUSIVE)
    assert not ablation.judge(inconclusive)[0]


def test_an_explained_survivor_passes_with_its_reason_first() -> None:
    explained = _ref("grant", "demand_pending")
    survived = AblationResult(guard=explained, verdict=Verdict.SURVIVED, runs=(("m", 5, True),))
    passed, message = ablation.judge(survived)
    assert passed
    assert message.startswith(f"explained: {ablation.explanation(explained)} (")


def test_a_refuted_reduction_fails_the_check_and_so_does_a_stale_reason() -> None:
    reduction = _ref("push_update", "refresh_due")
    refuted = AblationResult(guard=reduction, verdict=Verdict.REFUTED, model="m", violation="x")
    assert not ablation.judge(refuted)[0]
    explained = _ref("grant", "demand_pending")
    stale = AblationResult(guard=explained, verdict=Verdict.REFUTED, model="m", violation="x")
    passed, message = ablation.judge(stale)
    assert not passed and "drop the reason" in message


def test_ablating_an_unknown_conjunct_is_refused() -> None:
    with pytest.raises(KeyError):
        ablation.ablated_credit_spec("reserve", "no_such_guard")


# Survivors whose reason says "implied": on every reachable state of the clean spec, for every
# instance of the action (unpruned), the other conjuncts holding implies this one holds. That
# is the redundancy claim itself, checked by enumeration (the "harmless" survivors are not
# implied: removing them adds behaviour, which no invariant objects to).
IMPLIED = (
    ("reserve", "entry_has_update"),
    ("return_unused", "sender_has_entry"),
    ("consumer_release", "books_exist"),
    ("data_lands", "work_in_flight"),
    ("data_lands", "work_epoch_open"),
    ("fail_inflight", "work_in_flight"),
    ("deliver", "message_in_flight"),
    ("duplicate", "message_in_flight"),
    ("lose", "message_in_flight"),
)


def _reachable(spec: CreditSpec) -> list[object]:
    from collections import deque

    start = [spec.canonicalize(s) for s in spec.initial_states()]
    seen = {spec.pack(s) for s in start}
    queue, out = deque(start), []
    while queue:
        state = queue.popleft()
        out.append(state)
        for step in spec.successors(state):
            nxt = spec.canonicalize(step.state)
            key = spec.pack(nxt)
            if key not in seen:
                seen.add(key)
                queue.append(nxt)
        assert len(out) < 100_000
    return out


@pytest.mark.parametrize(
    "bounds_name",
    ["tiny", pytest.param("no_epoch_fence_on_restart", marks=pytest.mark.slow)],
)
def test_the_implied_survivors_are_implied_on_every_reachable_state(bounds_name: str) -> None:
    bounds = CREDIT_BOUNDS["tiny"] if bounds_name == "tiny" else KNOWN_BAD_BOUNDS[bounds_name]
    unpruned = type("Unpruned", (CreditSpec,), {"PRUNE_CANDIDATES": False})(bounds)
    assert {f"credit:{a}.{g}" for a, g in IMPLIED} <= set(ablation.EXPLAINED)
    checks = {
        action: [(g.name, getattr(unpruned, g.check)) for g in GUARDS[action]]
        for action, _guard in IMPLIED
    }
    tried = dict.fromkeys(IMPLIED, 0)
    for state in _reachable(unpruned):
        for s in range(len(state.peers)):  # type: ignore[attr-defined]
            for action, args in unpruned._every_sender_instance(state, s):  # type: ignore[arg-type]
                for target_action, target in IMPLIED:
                    if action != target_action:
                        continue
                    others = [c for name, c in checks[action] if name != target]
                    if all(c(state, *args) is None for c in others):
                        tried[(action, target)] += 1
                        mine = dict(checks[action])[target]
                        assert mine(state, *args) is None, (action, target, args, state)
    if bounds_name == "tiny":  # every fault kind: every claim is exercised
        assert all(tried.values()), tried
