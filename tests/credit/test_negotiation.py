"""Tests of the negotiation state machine (docs/semantics.md#negotiation, RFC "State Machine").

Every failure case compares the full snapshot before and after the call. The last section checks
the table twice, h2-style: the pure ``transition`` over *every* (state, event) pair, and the
public API over every pair reachable through it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tent_credit._arith import U64_MAX
from tent_credit._messages import SUPPORTED_VERSIONS, CapabilityActivation
from tent_credit._negotiation import (
    REMOTE_EVENTS,
    TRANSITIONS,
    CreditMode,
    NegotiationEvent,
    NegotiationState,
    PeerNegotiation,
    transition,
)
from tent_credit._types import SessionId
from tent_credit.errors import (
    InvalidArgument,
    LocalProtocolError,
    NegotiationFailed,
    RemoteProtocolError,
)

S = NegotiationState
E = NegotiationEvent
MS = 1_000_000
SESSION = SessionId(0x5E55)


def activation(
    versions: tuple[int, ...] = (1,),
    selected: int = 1,
    *,
    session: SessionId = SESSION,
    epoch: int = 1,
    ttl_ms: int = 0,
) -> CapabilityActivation:
    return CapabilityActivation(
        versions=versions,
        selected_version=selected,
        receiver_session_id=session,
        epoch=epoch,
        freshness_ttl_ms=ttl_ms,
    )


def active(ttl_ms: int = 0, mode: CreditMode = CreditMode.REQUIRED) -> PeerNegotiation:
    n = PeerNegotiation(mode=mode, sender_peer=11)
    n.start(0)
    assert n.on_activation(activation(ttl_ms=ttl_ms), 10) is S.ACTIVE
    return n


def fencing() -> PeerNegotiation:
    n = active()
    assert n.on_new_session_or_epoch(SESSION, 2, 20) is S.FENCING
    return n


# -- construction and identity -------------------------------------------------------------------


def test_new_context_is_disabled_and_holds_nothing() -> None:
    n = PeerNegotiation(mode=CreditMode.OPTIONAL, sender_peer=3)
    assert n.state is S.DISABLED
    assert (n.version, n.session, n.epoch) == (None, None, None)
    assert n.local_versions == SUPPORTED_VERSIONS
    assert not n.may_reserve()
    assert not n.legacy()
    assert n.update_age_ns(0) is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mode": "optional", "sender_peer": 1},
        {"mode": CreditMode.OPTIONAL, "sender_peer": -1},
        {"mode": CreditMode.OPTIONAL, "sender_peer": U64_MAX + 1},
        {"mode": CreditMode.OPTIONAL, "sender_peer": True},
        {"mode": CreditMode.OPTIONAL, "sender_peer": 1, "local_versions": ()},
        {"mode": CreditMode.OPTIONAL, "sender_peer": 1, "local_versions": [1]},
        {"mode": CreditMode.OPTIONAL, "sender_peer": 1, "local_versions": (0,)},
        {"mode": CreditMode.OPTIONAL, "sender_peer": 1, "local_versions": (1, 1)},
        {"mode": CreditMode.OPTIONAL, "sender_peer": 1, "local_versions": (0x10000,)},
        {"mode": CreditMode.OPTIONAL, "sender_peer": 1, "local_versions": tuple(range(1, 10))},
    ],
    ids=repr,
)
def test_constructor_rejects_invalid_arguments(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument):
        PeerNegotiation(**kwargs)  # type: ignore[arg-type]


def test_sender_peer_is_bound_at_construction_and_cannot_be_assigned() -> None:
    n = active()
    with pytest.raises(AttributeError):
        n.sender_peer = 12  # type: ignore[misc]
    with pytest.raises(AttributeError):
        n.other_identity = 12  # type: ignore[attr-defined]  # no __dict__ to smuggle one in
    # a new session or epoch keeps the identity too
    n.on_new_session_or_epoch(SessionId(99), 1, 20)
    assert n.sender_peer == 11


# -- start ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (CreditMode.DISABLED, S.LEGACY),
        (CreditMode.OPTIONAL, S.NEGOTIATING),
        (CreditMode.REQUIRED, S.NEGOTIATING),
    ],
)
def test_start_follows_the_mode(mode: CreditMode, expected: NegotiationState) -> None:
    n = PeerNegotiation(mode=mode, sender_peer=1)
    assert n.start(5) is expected
    assert n.legacy() is (expected is S.LEGACY)
    assert not n.may_reserve()


def test_start_twice_is_a_local_protocol_error_and_changes_nothing() -> None:
    n = PeerNegotiation(mode=CreditMode.OPTIONAL, sender_peer=1)
    n.start(5)
    before = n.snapshot()
    with pytest.raises(LocalProtocolError):
        n.start(6)
    assert n.snapshot() == before


def test_disabled_mode_never_becomes_credit_gated() -> None:
    n = PeerNegotiation(mode=CreditMode.DISABLED, sender_peer=1)
    n.start(0)
    before = n.snapshot()
    with pytest.raises(RemoteProtocolError):
        n.on_activation(activation(), 1)
    assert n.snapshot() == before
    assert n.on_disconnect() is S.LEGACY
    assert n.legacy()
    assert not n.may_reserve()


# -- activation ----------------------------------------------------------------------------------


def test_common_version_activates_with_the_highest_shared_version() -> None:
    n = PeerNegotiation(mode=CreditMode.REQUIRED, sender_peer=1, local_versions=(1, 2, 3))
    n.start(0)
    act = activation((5, 3, 2), 3, epoch=4, ttl_ms=250)
    assert n.on_activation(act, 100) is S.ACTIVE
    assert (n.version, n.session, n.epoch, n.freshness_ttl_ms) == (3, SESSION, 4, 250)
    assert n.may_reserve()
    assert n.update_age_ns(100) == 0  # the activation counts as a refresh


@pytest.mark.parametrize(
    ("peer_versions", "selected"),
    [((1, 2), 2), ((1,), 0), ((2,), 2), ((2,), 1), ((3, 1), 3)],
)
def test_selected_version_other_than_the_common_one_is_remote_error(
    peer_versions: tuple[int, ...], selected: int
) -> None:
    n = PeerNegotiation(mode=CreditMode.OPTIONAL, sender_peer=1, local_versions=(1,))
    n.start(0)
    before = n.snapshot()
    with pytest.raises(RemoteProtocolError):
        n.on_activation(activation(peer_versions, selected), 1)
    assert n.snapshot() == before


def test_no_common_version_in_optional_mode_is_legacy() -> None:
    n = PeerNegotiation(mode=CreditMode.OPTIONAL, sender_peer=1)
    n.start(0)
    assert n.on_activation(activation((7,), 0), 1) is S.LEGACY
    assert n.legacy()
    assert (n.version, n.session, n.epoch) == (None, None, None)


def test_no_common_version_in_required_mode_fails_explicitly() -> None:
    n = PeerNegotiation(mode=CreditMode.REQUIRED, sender_peer=1)
    n.start(0)
    with pytest.raises(NegotiationFailed):
        n.on_activation(activation((7,), 0), 1)
    assert n.state is S.FAILED
    assert not n.may_reserve()
    assert not n.legacy()
    assert n.version is None


def test_activation_selecting_a_version_without_epoch_is_remote_error() -> None:
    n = PeerNegotiation(mode=CreditMode.OPTIONAL, sender_peer=1)
    n.start(0)
    before = n.snapshot()
    with pytest.raises(RemoteProtocolError):
        n.on_activation(activation(epoch=0), 1)
    assert n.snapshot() == before


def test_activation_before_start_or_after_activation_is_remote_error() -> None:
    fresh = PeerNegotiation(mode=CreditMode.OPTIONAL, sender_peer=1)
    before = fresh.snapshot()
    with pytest.raises(RemoteProtocolError):
        fresh.on_activation(activation(), 1)
    assert fresh.snapshot() == before
    n = active()
    before = n.snapshot()
    with pytest.raises(RemoteProtocolError):
        n.on_activation(activation(epoch=2), 20)
    assert n.snapshot() == before


def test_activation_must_be_an_activation() -> None:
    n = PeerNegotiation(mode=CreditMode.OPTIONAL, sender_peer=1)
    n.start(0)
    before = n.snapshot()
    with pytest.raises(InvalidArgument):
        n.on_activation({"selected_version": 1}, 1)  # type: ignore[arg-type]
    assert n.snapshot() == before


# -- freshness -----------------------------------------------------------------------------------


def test_ttl_expiry_is_at_the_ttl_on_the_senders_clock() -> None:
    # as the reference's FreshnessExpiryFailsClosedAndReplayDoesNotRenew: fresh one nanosecond
    # before the TTL, stale at exactly the TTL
    n = active(ttl_ms=5)  # activated at 10 ns
    assert n.stale_at_ns() == 10 + 5 * MS
    assert n.check_freshness(10 + 5 * MS - 1) is S.ACTIVE
    assert n.check_freshness(10 + 5 * MS) is S.STALE
    assert not n.may_reserve()


def test_ttl_zero_means_no_age_limit() -> None:
    n = active(ttl_ms=0)
    assert n.check_freshness(U64_MAX) is S.ACTIVE
    assert n.update_age_ns(U64_MAX) == U64_MAX - 10


def test_accepted_update_refreshes_and_returns_stale_to_active() -> None:
    n = active(ttl_ms=5)
    assert n.on_update_accepted(SESSION, 1, 4 * MS) is S.ACTIVE
    assert n.update_age_ns(6 * MS) == 2 * MS
    assert n.check_freshness(9 * MS - 1) is S.ACTIVE  # measured from the refresh, not activation
    assert n.check_freshness(9 * MS) is S.STALE
    assert n.on_update_accepted(SESSION, 1, 10 * MS) is S.ACTIVE
    assert n.may_reserve()


def test_update_carries_a_new_ttl() -> None:
    n = active(ttl_ms=0)
    n.on_update_accepted(SESSION, 1, 100, freshness_ttl_ms=1)
    assert n.freshness_ttl_ms == 1
    n.on_update_accepted(SESSION, 1, 200)  # None keeps it
    assert n.freshness_ttl_ms == 1
    assert n.check_freshness(200 + MS + 1) is S.STALE


@pytest.mark.parametrize(
    ("session", "epoch"),
    [(SessionId(1), 1), (SESSION, 2)],
)
def test_update_of_another_session_or_epoch_is_local_error(session: SessionId, epoch: int) -> None:
    n = active()
    before = n.snapshot()
    with pytest.raises(LocalProtocolError):
        n.on_update_accepted(session, epoch, 50)
    assert n.snapshot() == before


@pytest.mark.parametrize(
    ("session", "epoch", "ttl"),
    [
        (1, 1, None),
        (SESSION, 0, None),
        (SESSION, U64_MAX + 1, None),
        (SESSION, 1, -1),
        (SESSION, 1, 1 << 32),
    ],
)
def test_update_arguments_are_validated(session: object, epoch: int, ttl: int | None) -> None:
    n = active()
    before = n.snapshot()
    with pytest.raises(InvalidArgument):
        n.on_update_accepted(session, epoch, 50, freshness_ttl_ms=ttl)  # type: ignore[arg-type]
    assert n.snapshot() == before


def test_update_before_activation_is_local_error() -> None:
    n = PeerNegotiation(mode=CreditMode.OPTIONAL, sender_peer=1)
    n.start(0)
    before = n.snapshot()
    with pytest.raises(LocalProtocolError):
        n.on_update_accepted(SESSION, 1, 1)
    assert n.snapshot() == before


def test_only_active_ages() -> None:
    n = fencing()
    n.on_update_accepted(SESSION, 2, 30)
    n.on_disconnect()
    assert n.check_freshness(U64_MAX) is S.FENCING


# -- disconnect ----------------------------------------------------------------------------------


def test_disconnect_makes_active_stale_and_a_newer_update_reactivates() -> None:
    n = active()
    assert n.on_disconnect() is S.STALE
    assert not n.may_reserve()
    assert n.on_disconnect() is S.STALE
    assert n.on_update_accepted(SESSION, 1, 20) is S.ACTIVE


def test_disconnect_before_start_is_local_error() -> None:
    n = PeerNegotiation(mode=CreditMode.REQUIRED, sender_peer=1)
    with pytest.raises(LocalProtocolError):
        n.on_disconnect()
    assert n.state is S.DISABLED


def test_disconnect_while_negotiating_keeps_negotiating() -> None:
    n = PeerNegotiation(mode=CreditMode.REQUIRED, sender_peer=1)
    n.start(0)
    assert n.on_disconnect() is S.NEGOTIATING
    assert n.on_activation(activation(), 1) is S.ACTIVE


# -- new session / epoch and fencing -------------------------------------------------------------


@pytest.mark.parametrize("from_stale", [False, True])
def test_new_epoch_fences_until_drained(from_stale: bool) -> None:
    n = active()
    if from_stale:
        n.on_disconnect()
    assert n.on_new_session_or_epoch(SESSION, 3, 20, freshness_ttl_ms=9) is S.FENCING
    assert (n.session, n.epoch, n.freshness_ttl_ms) == (SESSION, 3, 9)
    assert not n.may_reserve()
    assert n.on_fence_drained(30) is S.ACTIVE
    assert n.may_reserve()
    assert n.version == 1


def test_new_session_may_restart_epochs() -> None:
    n = active()
    other = SessionId(0x5E56)
    assert n.on_new_session_or_epoch(other, 1, 20) is S.FENCING
    assert (n.session, n.epoch) == (other, 1)


@pytest.mark.parametrize("epoch", [1, 0, U64_MAX + 1])
def test_new_epoch_must_grow_within_a_session(epoch: int) -> None:
    n = active()
    before = n.snapshot()
    with pytest.raises((RemoteProtocolError, InvalidArgument)) as info:
        n.on_new_session_or_epoch(SESSION, epoch, 20)
    assert isinstance(info.value, RemoteProtocolError if epoch == 1 else InvalidArgument)
    assert n.snapshot() == before


def test_new_epoch_before_activation_is_remote_error() -> None:
    n = PeerNegotiation(mode=CreditMode.OPTIONAL, sender_peer=1)
    n.start(0)
    before = n.snapshot()
    with pytest.raises(RemoteProtocolError):
        n.on_new_session_or_epoch(SESSION, 1, 1)
    assert n.snapshot() == before


def test_fencing_accepts_updates_of_the_new_epoch_but_stays_fencing() -> None:
    n = fencing()
    assert n.on_update_accepted(SESSION, 2, 30) is S.FENCING
    assert n.update_age_ns(30) == 0
    before = n.snapshot()
    with pytest.raises(LocalProtocolError):
        n.on_update_accepted(SESSION, 1, 31)  # the old epoch
    assert n.snapshot() == before


def test_disconnect_while_fencing_still_requires_the_drain() -> None:
    n = fencing()
    assert n.on_disconnect() is S.FENCING
    assert n.on_update_accepted(SESSION, 2, 30) is S.FENCING
    assert not n.may_reserve()
    assert n.on_fence_drained(40) is S.ACTIVE


def test_another_new_epoch_while_fencing_supersedes() -> None:
    n = fencing()
    assert n.on_new_session_or_epoch(SESSION, 3, 30) is S.FENCING
    assert n.epoch == 3


def test_fence_drained_outside_fencing_is_local_error() -> None:
    n = active()
    before = n.snapshot()
    with pytest.raises(LocalProtocolError):
        n.on_fence_drained(20)
    assert n.snapshot() == before


# -- time ----------------------------------------------------------------------------------------

CALLS_WITH_TIME: dict[str, Callable[[PeerNegotiation, int], object]] = {
    "check_freshness": lambda n, t: n.check_freshness(t),
    "update_age_ns": lambda n, t: n.update_age_ns(t),
    "on_update_accepted": lambda n, t: n.on_update_accepted(SESSION, 1, t),
    "on_new_session_or_epoch": lambda n, t: n.on_new_session_or_epoch(SESSION, 2, t),
    "on_activation": lambda n, t: n.on_activation(activation(), t),
    "on_fence_drained": lambda n, t: n.on_fence_drained(t),
    "start": lambda n, t: n.start(t),
}


@pytest.mark.parametrize("call", CALLS_WITH_TIME.values(), ids=CALLS_WITH_TIME.keys())
@pytest.mark.parametrize("now_ns", [99, -1, U64_MAX + 1, 100.0, True])
def test_time_that_goes_backwards_or_is_not_u64_is_rejected(
    call: Callable[[PeerNegotiation, int], object], now_ns: int
) -> None:
    n = active()
    n.check_freshness(100)
    before = n.snapshot()
    with pytest.raises(InvalidArgument):
        call(n, now_ns)
    assert n.snapshot() == before


def test_equal_time_is_allowed() -> None:
    n = active()
    assert n.check_freshness(10) is S.ACTIVE
    assert n.on_update_accepted(SESSION, 1, 10) is S.ACTIVE


# -- the table -----------------------------------------------------------------------------------


def test_remote_events_are_exactly_the_peer_driven_ones() -> None:
    assert {
        E.COMMON_VERSION_FOUND,
        E.NO_COMMON_VERSION_LEGACY_ALLOWED,
        E.NO_COMMON_VERSION_REQUIRED,
        E.NEW_SESSION_OR_EPOCH,
    } == REMOTE_EVENTS


def test_table_follows_the_rfc_diagram() -> None:
    assert TRANSITIONS[(S.DISABLED, E.CREDIT_DISABLED_STARTED)] is S.LEGACY
    assert TRANSITIONS[(S.NEGOTIATING, E.NO_COMMON_VERSION_LEGACY_ALLOWED)] is S.LEGACY
    assert TRANSITIONS[(S.NEGOTIATING, E.NO_COMMON_VERSION_REQUIRED)] is S.FAILED
    assert TRANSITIONS[(S.NEGOTIATING, E.COMMON_VERSION_FOUND)] is S.ACTIVE
    assert TRANSITIONS[(S.ACTIVE, E.TTL_EXPIRED)] is S.STALE
    assert TRANSITIONS[(S.ACTIVE, E.DISCONNECTED)] is S.STALE
    assert TRANSITIONS[(S.STALE, E.FRESH_UPDATE_ACCEPTED)] is S.ACTIVE
    assert TRANSITIONS[(S.ACTIVE, E.NEW_SESSION_OR_EPOCH)] is S.FENCING
    assert TRANSITIONS[(S.FENCING, E.FENCE_DRAINED)] is S.ACTIVE
    # the only way into ACTIVE at a new epoch is a drain: nothing but FENCE_DRAINED leaves FENCING
    assert {nxt for (s, _), nxt in TRANSITIONS.items() if s is S.FENCING} == {S.FENCING, S.ACTIVE}
    assert [e for (s, e), nxt in TRANSITIONS.items() if s is S.FENCING and nxt is S.ACTIVE] == [
        E.FENCE_DRAINED
    ]
    # FAILED and LEGACY are terminal decisions
    for terminal in (S.FAILED, S.LEGACY):
        assert {nxt for (s, _), nxt in TRANSITIONS.items() if s is terminal} == {terminal}


@given(st.sampled_from(list(S)), st.sampled_from(list(E)))
def test_transition_is_total_every_pair_has_an_entry_or_a_typed_error(
    state: NegotiationState, event: NegotiationEvent
) -> None:
    if (state, event) in TRANSITIONS:
        assert transition(state, event) is TRANSITIONS[(state, event)]
    else:
        expected = RemoteProtocolError if event in REMOTE_EVENTS else LocalProtocolError
        with pytest.raises(expected) as info:
            transition(state, event)
        other = LocalProtocolError if expected is RemoteProtocolError else RemoteProtocolError
        assert not isinstance(info.value, other)


def test_transition_rejects_non_members() -> None:
    with pytest.raises(InvalidArgument):
        transition("ACTIVE", E.DISCONNECTED)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        transition(S.ACTIVE, "DISCONNECTED")  # type: ignore[arg-type]


# The public API, h2-style: a random walk of calls in every mode. Before each call the test
# computes the event it must fire (its own oracle) and checks the object against the table.


class Driver:
    """Drives one PeerNegotiation with a clock; every call names the event it should fire."""

    def __init__(self, mode: CreditMode) -> None:
        self.n = PeerNegotiation(mode=mode, sender_peer=5)
        self.now = 0

    def tick(self) -> int:
        self.now += MS
        return self.now

    def current(self) -> tuple[SessionId, int]:
        return (self.n.session or SESSION, self.n.epoch or 1)

    def call(self, name: str) -> tuple[NegotiationEvent | None, Callable[[], object]]:
        n, mode = self.n, self.n.mode
        session, epoch = self.current()
        if name == "start":
            ev = E.CREDIT_DISABLED_STARTED if mode is CreditMode.DISABLED else E.NEGOTIATION_STARTED
            return ev, lambda: n.start(self.tick())
        if name == "activate_common":
            return E.COMMON_VERSION_FOUND, lambda: n.on_activation(
                activation(ttl_ms=2), self.tick()
            )
        if name == "activate_none":
            ev = (
                E.NO_COMMON_VERSION_REQUIRED
                if mode is CreditMode.REQUIRED
                else E.NO_COMMON_VERSION_LEGACY_ALLOWED
            )
            return ev, lambda: n.on_activation(activation((9,), 0), self.tick())
        if name == "update":
            return E.FRESH_UPDATE_ACCEPTED, lambda: n.on_update_accepted(
                session, epoch, self.tick()
            )
        if name == "disconnect":
            return E.DISCONNECTED, n.on_disconnect
        if name == "new_epoch":
            return E.NEW_SESSION_OR_EPOCH, lambda: n.on_new_session_or_epoch(
                session, epoch + 1, self.tick()
            )
        if name == "drained":
            return E.FENCE_DRAINED, lambda: n.on_fence_drained(self.tick())
        assert name == "expire"
        # 2 ms TTL: ages past it only in ACTIVE (the other states never fire TTL_EXPIRED)
        expiry: NegotiationEvent | None = E.TTL_EXPIRED if n.state is S.ACTIVE else None
        self.now += 3 * MS
        return expiry, lambda: n.check_freshness(self.tick())


CALL_NAMES = [
    "start",
    "activate_common",
    "activate_none",
    "update",
    "disconnect",
    "new_epoch",
    "drained",
    "expire",
]


def step(driver: Driver, name: str, seen: set[tuple[NegotiationState, NegotiationEvent]]) -> None:
    n = driver.n
    state = n.state
    event, call = driver.call(name)
    if event is None:
        call()
        assert n.state is state
        return
    seen.add((state, event))
    expected = TRANSITIONS.get((state, event))
    if expected is None:
        before = n.snapshot()
        error = RemoteProtocolError if event in REMOTE_EVENTS else LocalProtocolError
        with pytest.raises(error):
            call()
        assert n.snapshot() == before
    elif event is E.NO_COMMON_VERSION_REQUIRED:
        with pytest.raises(NegotiationFailed):
            call()
        assert n.state is S.FAILED
    else:
        assert call() is expected
        assert n.state is expected
    assert n.may_reserve() is (n.state is S.ACTIVE)
    assert n.legacy() is (n.state is S.LEGACY)
    assert n.sender_peer == 5


@given(
    st.sampled_from(list(CreditMode)),
    st.lists(st.sampled_from(CALL_NAMES), max_size=25),
)
def test_public_api_agrees_with_the_table_on_random_walks(
    mode: CreditMode, names: list[str]
) -> None:
    driver = Driver(mode)
    for name in names:
        step(driver, name, set())


def _reachable_pairs() -> set[tuple[NegotiationState, NegotiationEvent]]:
    """Breadth-first over call sequences in every mode: every (state, event) the API can fire."""
    seen: set[tuple[NegotiationState, NegotiationEvent]] = set()
    for mode in CreditMode:
        frontier: list[list[str]] = [[]]
        visited: set[NegotiationState] = set()
        while frontier:
            path = frontier.pop(0)
            for name in CALL_NAMES:
                driver = Driver(mode)
                for earlier in path:
                    step(driver, earlier, seen)
                step(driver, name, seen)
                if driver.n.state not in visited:
                    visited.add(driver.n.state)
                    frontier.append([*path, name])
    return seen


def test_public_api_fires_every_table_entry_and_handles_every_reachable_pair() -> None:
    seen = _reachable_pairs()
    # every table entry is reachable through the public API (no dead transitions) ...
    assert set(TRANSITIONS) <= seen
    # ... and the pairs it cannot fire are exactly those excluded by design: TTL expiry is only
    # detected in ACTIVE, and the mode-bound events need their mode, whose reachable states are
    # DISABLED/LEGACY (mode DISABLED), all but LEGACY (REQUIRED), all but FAILED (OPTIONAL).
    by_mode = {
        E.CREDIT_DISABLED_STARTED: {S.DISABLED, S.LEGACY},
        E.NO_COMMON_VERSION_REQUIRED: set(S) - {S.LEGACY},
        E.NO_COMMON_VERSION_LEGACY_ALLOWED: set(S) - {S.FAILED},
    }
    by_design = {(s, E.TTL_EXPIRED) for s in S if s is not S.ACTIVE} | {
        (s, e) for e, states in by_mode.items() for s in set(S) - states
    }
    assert {(s, e) for s in S for e in E} - seen == by_design
