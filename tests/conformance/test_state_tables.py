"""State machines are data, twice (docs/design.md#principle-4): the implementation's tables equal
the spec's. The two are never shared; each test maps one vocabulary onto the other explicitly.
"""

from __future__ import annotations

from collections.abc import Mapping

from tent_spec import admission as spec_admission
from tent_spec import credit as spec_credit
from tent_spec import negotiation as spec_negotiation

from tent_credit._ledger import TOKEN_TRANSITIONS, TokenState
from tent_credit._negotiation import TRANSITIONS as IMPL_NEGOTIATION
from tent_credit._negotiation import NegotiationEvent, NegotiationState
from tent_sched._queue import OWNER_TRANSITIONS as IMPL_OWNER
from tent_sched._queue import OwnerState

Edge = tuple[str, str, str]  # (state, event, next state), by name


def test_owner_lifecycle_tables_are_equal() -> None:
    impl = {(s.name, e, n.name) for (s, e), n in IMPL_OWNER.items()}
    spec = {(s, e, n) for (s, e), n in spec_admission.OWNER_TRANSITIONS.items()}
    assert impl == spec
    assert {s.name for s in OwnerState} == set(spec_admission.OWNER_STATES)
    assert {e for _, e in IMPL_OWNER} == set(spec_admission.OWNER_EVENTS)


# --- negotiation -------------------------------------------------------------------------------
#
# The spec keys its table by (mode, state, event) with mode-neutral event names; the
# implementation folds the mode into the event name. The documented mapping, spec → impl:
#
#   (DISABLED mode,  DISABLED, STARTED)            → (DISABLED, CREDIT_DISABLED_STARTED)
#   (OPTIONAL/REQUIRED, DISABLED, STARTED)         → (DISABLED, NEGOTIATION_STARTED)
#   (OPTIONAL, NEGOTIATING, NO_COMMON_VERSION)     → (NEGOTIATING, NO_COMMON_VERSION_LEGACY_ALLOWED)
#   (REQUIRED, NEGOTIATING, NO_COMMON_VERSION)     → (NEGOTIATING, NO_COMMON_VERSION_REQUIRED)
#   (any mode, state, FRESH_UPDATE)                → (state, FRESH_UPDATE_ACCEPTED)
#   (any mode, state, event)                       → (state, event)   for every other event
#
# Mode-independent rows appear once per mode in the spec and collapse to one implementation row.


def _impl_event(mode: str, event: str) -> str:
    if event == "STARTED":
        return "CREDIT_DISABLED_STARTED" if mode == "DISABLED" else "NEGOTIATION_STARTED"
    if event == "NO_COMMON_VERSION":
        return (
            "NO_COMMON_VERSION_LEGACY_ALLOWED"
            if mode == "OPTIONAL"
            else "NO_COMMON_VERSION_REQUIRED"
        )
    if event == "FRESH_UPDATE":
        return "FRESH_UPDATE_ACCEPTED"
    return event


def _spec_negotiation_edges(table: Mapping[tuple[str, str, str], str]) -> set[Edge]:
    return {(s, _impl_event(m, e), n) for (m, s, e), n in table.items()}


def _impl_negotiation_edges() -> set[Edge]:
    return {(s.name, e.name, n.name) for (s, e), n in IMPL_NEGOTIATION.items()}


#: The rows the two tables do not share, reported to the lead (the spec is the lead's file):
#:
#: * impl only, DISCONNECTED in NEGOTIATING / LEGACY / FAILED stays put. A control connection
#:   can drop in any started state; docs/semantics.md#negotiation names only "Active → Stale on
#: disconnect", so the   spec makes it a protocol error elsewhere, while
#: ``PeerNegotiation.on_disconnect`` must   accept it (the transport reports every disconnect). The
#: implementation is right; the spec   lacks the rows.
#: * spec only, TTL_EXPIRED in STALE / FENCING stays put. The implementation's
#:   ``check_freshness`` only fires TTL_EXPIRED in ACTIVE (docs/semantics.md#negotiation: "Active →
#: Stale ...   when no update arrives within freshness_ttl_ms") and treats an expired TTL elsewhere
#: as no   event at all: the same behaviour as the spec's self-loops, so not an implementation gap.
#:
#: When the spec gains the three DISCONNECTED rows and drops (or the implementation models)
#: the two TTL self-loops, this set becomes empty and the tables are equal.
NEGOTIATION_TABLE_DIFFERENCE: frozenset[tuple[str, Edge]] = frozenset()


def test_negotiation_vocabularies_map_one_to_one() -> None:
    assert {s.name for s in NegotiationState} == set(spec_negotiation.STATES)
    spec_events = {_impl_event(m, e) for (m, _, e) in spec_negotiation.TRANSITIONS}
    assert spec_events == {e.name for e in NegotiationEvent}


def test_negotiation_tables_differ_exactly_by_the_reported_rows() -> None:
    spec = _spec_negotiation_edges(spec_negotiation.TRANSITIONS)
    impl = _impl_negotiation_edges()
    difference = {("impl only", edge) for edge in impl - spec} | {
        ("spec only", edge) for edge in spec - impl
    }
    assert difference == NEGOTIATION_TABLE_DIFFERENCE


def test_negotiation_tables_agree_on_every_shared_state_and_event() -> None:
    # Deterministic on both sides, and where both define (state, event) they agree.
    spec: dict[tuple[str, str], str] = {}
    for state, event, nxt in _spec_negotiation_edges(spec_negotiation.TRANSITIONS):
        assert spec.setdefault((state, event), nxt) == nxt, (state, event)
    impl = {(s, e): n for s, e, n in _impl_negotiation_edges()}
    assert {k: impl[k] for k in spec.keys() & impl.keys()} == {
        k: spec[k] for k in spec.keys() & impl.keys()
    }


def test_token_lifecycle_has_no_spec_table_to_compare() -> None:
    # docs/semantics.md#sender-ledger: "EMPTY → RESERVED → COMMITTED | ROLLED_BACK, each transition
    # once". The credit spec models live tokens as a tuple of RESERVED charges and has no lifecycle
    # table, so the implementation's table is pinned against the docs/semantics.md text instead.
    assert not any("TOKEN" in name and "TRANSITION" in name for name in dir(spec_credit))
    assert {(s.name, e, n.name) for (s, e), n in TOKEN_TRANSITIONS.items()} == {
        ("EMPTY", "reserve", "RESERVED"),
        ("RESERVED", "commit", "COMMITTED"),
        ("RESERVED", "rollback", "ROLLED_BACK"),
    }
    assert {s.name for s in TokenState} == {"EMPTY", "RESERVED", "COMMITTED", "ROLLED_BACK"}
