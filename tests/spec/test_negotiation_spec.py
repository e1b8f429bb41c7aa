"""The negotiation spec: its own transition table (docs/semantics.md#negotiation) and the model over
it."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest
from tent_models.configs import CONFIGS, NEGOTIATION_BOUNDS
from tent_spec.credit import InvalidBounds
from tent_spec.negotiation import (
    EVENTS,
    MODES,
    STATES,
    TRANSITIONS,
    NegotiationBounds,
    NegotiationSpec,
    NegotiationState,
    next_state,
)

# The implementation's enum member names (tent_credit negotiation); the conformance test
# compares the two tables as dicts, so the spec must use exactly these names.
IMPLEMENTATION_STATES = {
    "DISABLED",
    "NEGOTIATING",
    "LEGACY",
    "FAILED",
    "ACTIVE",
    "STALE",
    "FENCING",
}
IMPLEMENTATION_EVENTS = {
    "STARTED",
    "COMMON_VERSION_FOUND",
    "NO_COMMON_VERSION",
    "FRESH_UPDATE",
    "TTL_EXPIRED",
    "DISCONNECTED",
    "NEW_SESSION_OR_EPOCH",
    "FENCE_DRAINED",
}


def reachable(spec: NegotiationSpec) -> tuple[set[NegotiationState], set[str]]:
    init = list(spec.initial_states())
    seen, fired, queue = set(init), set(), deque(init)
    while queue:
        state = queue.popleft()
        if not spec.within_bounds(state):
            continue
        for step in spec.successors(state):
            fired.add(step.action)
            if step.state not in seen:
                seen.add(step.state)
                queue.append(step.state)
    return seen, fired


def ci() -> NegotiationSpec:
    return NegotiationSpec(NEGOTIATION_BOUNDS["ci"])


# ---- the table ------------------------------------------------------------------------------


def test_table_uses_the_implementation_names() -> None:
    assert set(STATES) == IMPLEMENTATION_STATES
    assert set(EVENTS) == IMPLEMENTATION_EVENTS
    for (mode, state, event), nxt in TRANSITIONS.items():
        assert mode in MODES and state in STATES and event in EVENTS and nxt in STATES


@pytest.mark.parametrize(
    ("mode", "state", "event", "expected"),
    [
        ("DISABLED", "DISABLED", "STARTED", "LEGACY"),
        ("OPTIONAL", "DISABLED", "STARTED", "NEGOTIATING"),
        ("REQUIRED", "DISABLED", "STARTED", "NEGOTIATING"),
        ("OPTIONAL", "NEGOTIATING", "NO_COMMON_VERSION", "LEGACY"),
        ("REQUIRED", "NEGOTIATING", "NO_COMMON_VERSION", "FAILED"),
        ("REQUIRED", "NEGOTIATING", "COMMON_VERSION_FOUND", "ACTIVE"),
        ("OPTIONAL", "ACTIVE", "TTL_EXPIRED", "STALE"),
        ("OPTIONAL", "ACTIVE", "DISCONNECTED", "STALE"),
        ("OPTIONAL", "STALE", "FRESH_UPDATE", "ACTIVE"),
        ("REQUIRED", "ACTIVE", "NEW_SESSION_OR_EPOCH", "FENCING"),
        ("REQUIRED", "STALE", "NEW_SESSION_OR_EPOCH", "FENCING"),
        ("REQUIRED", "FENCING", "FENCE_DRAINED", "ACTIVE"),
    ],
)
def test_semantics_section_7_rows(mode: str, state: str, event: str, expected: str) -> None:
    assert next_state(mode, state, event) == expected


@pytest.mark.parametrize(
    ("mode", "state", "event"),
    [
        ("DISABLED", "LEGACY", "COMMON_VERSION_FOUND"),  # default off never negotiates
        ("OPTIONAL", "LEGACY", "FRESH_UPDATE"),
        ("REQUIRED", "FAILED", "STARTED"),
        ("OPTIONAL", "NEGOTIATING", "FRESH_UPDATE"),  # no update before activation
        ("OPTIONAL", "ACTIVE", "FENCE_DRAINED"),
    ],
)
def test_events_outside_the_table_are_protocol_errors(mode: str, state: str, event: str) -> None:
    assert next_state(mode, state, event) is None


def test_only_start_and_missing_version_depend_on_the_mode() -> None:
    split = {
        (state, event)
        for (_m, state, event) in TRANSITIONS
        if len({TRANSITIONS.get((m, state, event)) for m in ("OPTIONAL", "REQUIRED")}) > 1
    }
    assert split == {("NEGOTIATING", "NO_COMMON_VERSION")}


def test_required_mode_has_no_row_into_legacy() -> None:
    # (LEGACY, DISCONNECTED) -> LEGACY exists in every mode (a dropped connection changes no
    # final state) but LEGACY is unreachable in REQUIRED: no row *enters* it from elsewhere.
    assert not [
        k
        for k, v in TRANSITIONS.items()
        if k[0] == "REQUIRED" and v == "LEGACY" and k[1] != "LEGACY"
    ]


# ---- the model ------------------------------------------------------------------------------


def test_every_invariant_holds_and_every_action_fires() -> None:
    spec = ci()
    states, fired = reachable(spec)
    assert 50 < len(states) < 5_000
    for inv in spec.invariants():
        bad = [s for s in states if not inv.holds(s)]
        assert not bad, (inv.name, spec.describe(bad[0]))
    assert set(spec.action_names()) - spec.unreachable_actions() == fired


def test_every_witness_is_reachable() -> None:
    spec = ci()
    states, _ = reachable(spec)
    for witness in spec.witnesses():
        assert any(witness.holds(s) for s in states), witness.name


def test_every_state_can_settle_without_faults() -> None:
    spec = ci()
    states, _ = reachable(spec)
    faults = spec.fault_actions()
    for state in states:
        frontier, seen = [state], {state}
        while frontier and not any(spec.recovered(s) for s in frontier):
            nxt = [
                st.state
                for s in frontier
                for st in spec.successors(s)
                if st.action not in faults and st.state not in seen
            ]
            seen.update(nxt)
            frontier = nxt
        assert frontier, spec.describe(state)


def test_apply_and_explain_agree_with_successors() -> None:
    spec = ci()
    states, _ = reachable(spec)
    for state in states:
        enabled = {(st.action, st.args): st.state for st in spec.successors(state)}
        for action in spec.action_names():
            for args in [(), (0,), (1,), (2,), (9,)]:
                result = spec.apply(state, action, args)
                if (action, args) in enabled:
                    assert result == enabled[action, args]
                    assert spec.explain(state, action, args) == "enabled"
                else:
                    assert result is None
                    assert spec.explain(state, action, args) != "enabled"


def test_fence_waits_for_old_work() -> None:
    spec = ci()
    s: Any = spec.initial_states()[2]  # REQUIRED
    for action, args in [("start", ()), ("offer", (0,)), ("dispatch", ()), ("new_epoch", ())]:
        s = spec.apply(s, action, args)
        assert s is not None
    assert STATES[s.state] == "FENCING" and s.inflight_old == 1
    assert "drained" in spec.explain(s, "fence_drained", ())
    s = spec.apply(spec.apply(s, "drain_old", ()), "fence_drained", ())
    assert STATES[s.state] == "ACTIVE" and s.epoch == 2


def test_offer_picks_the_highest_common_version() -> None:
    spec = ci()  # local (1, 2); offers (1,), (3,), (2, 3)
    s = spec.apply(spec.initial_states()[1], "start", ())
    assert spec.apply(s, "offer", (2,)).version == 2
    assert STATES[spec.apply(s, "offer", (1,)).state] == "LEGACY"


def test_pack_is_plain_ints_and_describe_names_the_state() -> None:
    spec = ci()
    s = spec.initial_states()[0]
    assert all(type(v) is int for v in spec.pack(s))
    assert spec.describe(s)["mode"] == "DISABLED"


def test_configs_build_negotiation_models() -> None:
    for level in ("tiny", "ci", "deep"):
        model = CONFIGS[f"negotiation/{level}"]()
        assert isinstance(model, NegotiationSpec) and model.name == f"negotiation/{level}"


@pytest.mark.parametrize(
    "fields",
    [
        {"local_versions": ()},
        {"local_versions": (1, 1)},
        {"peer_offers": ((0,),)},
        {"max_epoch": 0},
    ],
)
def test_invalid_negotiation_bounds_are_rejected(fields: dict[str, Any]) -> None:
    base: dict[str, Any] = {
        "local_versions": (1,),
        "peer_offers": ((1,),),
        "max_session": 1,
        "max_epoch": 1,
        "max_inflight": 1,
    }
    with pytest.raises(InvalidBounds):
        NegotiationBounds(**{**base, **fields})
