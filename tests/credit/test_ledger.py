"""Unit tests of SenderCreditLedger: one test per rule of docs/semantics.md#sender-ledger.

Every failure case compares a full snapshot of the ledger before and after the call.
"""

from __future__ import annotations

import itertools

import pytest

from tent_credit._arith import U64_MAX
from tent_credit._backpressure import BackpressureInfo, BackpressureSource
from tent_credit._ledger import (
    TOKEN_TRANSITIONS,
    Blocked,
    LedgerEntrySnapshot,
    ReservationToken,
    SenderCreditLedger,
    TokenState,
    UpdateDisposition,
)
from tent_credit._messages import ReceiverCreditUpdate
from tent_credit._types import CreditAmount, CreditCharge, CreditKey, CreditResource, SessionId
from tent_credit.errors import (
    GrantDecreased,
    InsufficientCredit,
    InvalidArgument,
    InvalidEntry,
    RemoteProtocolError,
    TooManyRequests,
)

R = CreditResource
SESSION = SessionId(0xABC)
KEY = CreditKey(receiver_session=SESSION, sender_peer=7, qos_class=2)
OTHER = CreditKey(receiver_session=SESSION, sender_peer=8, qos_class=2)
FULL = {R.DATA_BYTES: 1000, R.REQUEST_SLOTS: 4, R.STAGING_SLOTS: 2, R.CONSUMER_SLOTS: 4}


def update(
    sequence: int,
    grants: dict[CreditResource, int],
    *,
    epoch: int = 1,
    key: CreditKey = KEY,
) -> ReceiverCreditUpdate:
    return ReceiverCreditUpdate(
        qos_class=key.qos_class,
        receiver_session_id=key.receiver_session,
        epoch=epoch,
        sequence=sequence,
        grants=tuple(CreditAmount(resource=r, amount=a) for r, a in grants.items()),
    )


def charge(**parts: int) -> CreditCharge:
    return CreditCharge.of(
        {CreditResource.__members__[name.upper()]: amount for name, amount in parts.items()}
    )


def ledger_with_grant(
    grants: dict[CreditResource, int] = FULL, *, epoch: int = 1
) -> SenderCreditLedger:
    ledger = SenderCreditLedger(max_entries=4)
    ledger.activate(KEY, epoch)
    assert ledger.apply_update(KEY, update(1, grants, epoch=epoch)) is UpdateDisposition.APPLIED
    return ledger


def snapshot(ledger: SenderCreditLedger) -> tuple[tuple[CreditKey, ...], list[LedgerEntrySnapshot]]:
    """Every entry of the ledger, field by field (statistics are compared separately)."""
    keys = ledger.keys()
    return keys, [ledger.entry(k) for k in keys]


def token_of(result: ReservationToken | Blocked) -> ReservationToken:
    assert isinstance(result, ReservationToken), result
    return result


# -- construction --------------------------------------------------------------------------------


@pytest.mark.parametrize("max_entries", [0, -1, True, 1.0, "4", None])
def test_constructor_rejects_invalid_max_entries(max_entries: object) -> None:
    with pytest.raises(InvalidArgument):
        SenderCreditLedger(max_entries=max_entries)  # type: ignore[arg-type]


def test_new_ledger_is_empty() -> None:
    ledger = SenderCreditLedger(max_entries=1)
    assert ledger.keys() == ()
    stats = ledger.statistics()
    assert stats.entries == 0
    assert dict(stats.available) == dict.fromkeys(R, 0)


# -- activate ------------------------------------------------------------------------------------


def test_activate_creates_an_empty_entry_without_update() -> None:
    ledger = SenderCreditLedger(max_entries=2)
    ledger.activate(KEY, 5)
    e = ledger.entry(KEY)
    assert (e.key, e.epoch, e.last_sequence, e.has_update) == (KEY, 5, 0, False)
    for field in (e.grant_total, e.consumed, e.returned, e.available):
        assert dict(field) == dict.fromkeys(R, 0)


@pytest.mark.parametrize("epoch", [0, -1, U64_MAX + 1, True, 1.5])
def test_activate_rejects_invalid_epoch_and_changes_nothing(epoch: object) -> None:
    ledger = ledger_with_grant()
    before = snapshot(ledger)
    with pytest.raises(InvalidArgument):
        ledger.activate(KEY, epoch)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        ledger.activate(OTHER, epoch)  # type: ignore[arg-type]
    assert snapshot(ledger) == before


def test_activate_rejects_a_non_key() -> None:
    ledger = SenderCreditLedger(max_entries=2)
    with pytest.raises(InvalidArgument):
        ledger.activate((SESSION, 7, 2), 1)  # type: ignore[arg-type]
    assert ledger.keys() == ()


def test_activate_lower_epoch_is_invalid_entry_and_changes_nothing() -> None:
    ledger = ledger_with_grant(epoch=3)
    token_of(ledger.try_reserve(KEY, charge(data_bytes=10)))
    before = snapshot(ledger)
    with pytest.raises(InvalidEntry):
        ledger.activate(KEY, 2)
    assert snapshot(ledger) == before


def test_activate_same_epoch_is_a_no_op_that_keeps_consumption() -> None:
    ledger = ledger_with_grant()
    token = token_of(ledger.try_reserve(KEY, charge(data_bytes=10)))
    before = snapshot(ledger)
    ledger.activate(KEY, 1)
    assert snapshot(ledger) == before
    assert ledger.entry(KEY).consumed[R.DATA_BYTES] == 10
    ledger.commit(token)  # the token is not fenced by a same-epoch activation
    assert ledger.statistics().epoch_resets == 0


def test_activate_higher_epoch_replaces_the_entry_with_a_fresh_one() -> None:
    ledger = ledger_with_grant()
    token_of(ledger.try_reserve(KEY, charge(data_bytes=10)))
    ledger.activate(KEY, 2)
    e = ledger.entry(KEY)
    assert (e.epoch, e.last_sequence, e.has_update) == (2, 0, False)
    assert dict(e.grant_total) == dict.fromkeys(R, 0)
    assert dict(e.consumed) == dict.fromkeys(R, 0)
    assert ledger.statistics().epoch_resets == 1
    with pytest.raises(InvalidEntry):
        ledger.try_reserve(KEY, charge(data_bytes=1))  # no update at the new epoch yet


def test_activate_past_max_entries_is_too_many_requests_and_changes_nothing() -> None:
    ledger = SenderCreditLedger(max_entries=1)
    ledger.activate(KEY, 1)
    before = snapshot(ledger)
    with pytest.raises(TooManyRequests):
        ledger.activate(OTHER, 1)
    assert snapshot(ledger) == before
    # an existing key at the bound may still move to a higher epoch
    ledger.activate(KEY, 2)
    assert ledger.entry(KEY).epoch == 2
    ledger.deactivate(KEY, 2)
    ledger.activate(OTHER, 1)
    assert ledger.keys() == (OTHER,)


# -- deactivate ----------------------------------------------------------------------------------


def test_deactivate_missing_key_is_ok() -> None:
    ledger = ledger_with_grant()
    before = snapshot(ledger)
    ledger.deactivate(OTHER, 1)
    assert snapshot(ledger) == before


def test_deactivate_epoch_mismatch_is_invalid_entry_and_changes_nothing() -> None:
    ledger = ledger_with_grant(epoch=2)
    before = snapshot(ledger)
    for epoch in (1, 3):
        with pytest.raises(InvalidEntry):
            ledger.deactivate(KEY, epoch)
    assert snapshot(ledger) == before


@pytest.mark.parametrize("epoch", [0, -1, U64_MAX + 1, False])
def test_deactivate_rejects_invalid_epoch(epoch: object) -> None:
    ledger = ledger_with_grant()
    before = snapshot(ledger)
    with pytest.raises(InvalidArgument):
        ledger.deactivate(KEY, epoch)  # type: ignore[arg-type]
    assert snapshot(ledger) == before


def test_deactivate_removes_the_entry() -> None:
    ledger = ledger_with_grant()
    ledger.deactivate(KEY, 1)
    assert ledger.keys() == ()
    with pytest.raises(InvalidEntry):
        ledger.entry(KEY)
    with pytest.raises(InvalidEntry):
        ledger.available(KEY)


# -- apply_update --------------------------------------------------------------------------------


def test_an_equal_key_object_and_the_installing_one_see_the_same_entry() -> None:
    """The ledger finds the key it installed last by identity (a CreditKey hashes in Python):
    an equal key object, a replaced entry and a removed one must all read as by equality."""
    ledger = ledger_with_grant()
    twin = CreditKey(receiver_session=SESSION, sender_peer=7, qos_class=2)
    assert twin == KEY and twin is not KEY
    token_of(ledger.try_reserve(twin, charge(data_bytes=100)))
    assert ledger.entry(KEY).consumed[R.DATA_BYTES] == 100
    ledger.activate(OTHER, 1)  # another key installed last
    assert ledger.entry(KEY).consumed[R.DATA_BYTES] == 100
    ledger.activate(twin, 2)  # the epoch fence, by the equal object: a fresh entry
    for key in (KEY, twin):
        assert ledger.entry(key).epoch == 2 and ledger.entry(key).consumed[R.DATA_BYTES] == 0
    ledger.deactivate(KEY, 2)
    for key in (KEY, twin):
        with pytest.raises(InvalidEntry):
            ledger.entry(key)
    assert ledger.keys() == (OTHER,)


def test_first_update_may_carry_any_sequence_and_is_applied() -> None:
    ledger = SenderCreditLedger(max_entries=1)
    ledger.activate(KEY, 1)
    assert ledger.apply_update(KEY, update(42, FULL)) is UpdateDisposition.APPLIED
    e = ledger.entry(KEY)
    assert (e.last_sequence, e.has_update) == (42, True)
    assert dict(e.grant_total) == FULL
    assert dict(e.available) == FULL


def test_next_sequence_is_applied_and_a_skip_is_a_sequence_gap() -> None:
    ledger = ledger_with_grant()
    assert ledger.apply_update(KEY, update(2, FULL)) is UpdateDisposition.APPLIED
    grown = {**FULL, R.DATA_BYTES: 2000}
    assert ledger.apply_update(KEY, update(5, grown)) is UpdateDisposition.SEQUENCE_GAP
    e = ledger.entry(KEY)
    assert e.last_sequence == 5
    assert e.grant_total[R.DATA_BYTES] == 2000
    stats = ledger.statistics()
    assert (stats.updates_applied, stats.sequence_gaps) == (3, 1)


@pytest.mark.parametrize("sequence", [1, 2])
def test_duplicate_or_old_update_changes_nothing(sequence: int) -> None:
    ledger = ledger_with_grant()
    ledger.apply_update(KEY, update(2, {R.DATA_BYTES: 1500}))
    before = snapshot(ledger)
    # higher totals in an old update must not be applied either
    result = ledger.apply_update(KEY, update(sequence, {R.DATA_BYTES: 9999}))
    assert result is UpdateDisposition.DUPLICATE_OR_OLD
    assert snapshot(ledger) == before
    assert ledger.statistics().duplicates_or_old == 1


def test_old_update_with_lower_totals_is_duplicate_not_an_error() -> None:
    # docs/semantics.md#sender-ledger: sequence <= last is checked before monotonicity.
    ledger = ledger_with_grant()
    ledger.apply_update(KEY, update(2, {R.DATA_BYTES: 1500}))
    before = snapshot(ledger)
    assert ledger.apply_update(KEY, update(1, {R.DATA_BYTES: 1})) is (
        UpdateDisposition.DUPLICATE_OR_OLD
    )
    assert snapshot(ledger) == before


def test_omitted_resources_keep_their_totals() -> None:
    ledger = ledger_with_grant()
    ledger.apply_update(KEY, update(2, {R.REQUEST_SLOTS: 9}))
    assert dict(ledger.entry(KEY).grant_total) == {**FULL, R.REQUEST_SLOTS: 9}


def test_update_with_no_grants_only_records_the_sequence() -> None:
    ledger = ledger_with_grant()
    assert ledger.apply_update(KEY, update(2, {})) is UpdateDisposition.APPLIED
    e = ledger.entry(KEY)
    assert (e.last_sequence, dict(e.grant_total)) == (2, FULL)


def test_decreasing_grant_is_rejected_and_changes_nothing() -> None:
    ledger = ledger_with_grant()
    before = snapshot(ledger)
    lowered = {R.REQUEST_SLOTS: 5, R.DATA_BYTES: 999}  # one raised, one lowered
    with pytest.raises(GrantDecreased) as info:
        ledger.apply_update(KEY, update(2, lowered))
    assert isinstance(info.value, InvalidArgument)
    assert isinstance(info.value, RemoteProtocolError)
    assert snapshot(ledger) == before
    assert ledger.statistics().updates_rejected == 1
    # the rejected sequence was not recorded: a valid update with it still applies
    assert ledger.apply_update(KEY, update(2, {R.DATA_BYTES: 1000})) is UpdateDisposition.APPLIED


def test_grant_below_consumed_plus_returned_is_rejected() -> None:
    ledger = ledger_with_grant({R.DATA_BYTES: 100})
    token_of(ledger.try_reserve(KEY, charge(data_bytes=60)))
    ledger.return_credit(KEY, charge(data_bytes=30))
    before = snapshot(ledger)
    with pytest.raises(GrantDecreased):
        ledger.apply_update(KEY, update(2, {R.DATA_BYTES: 89}))
    assert snapshot(ledger) == before


def test_equal_totals_with_a_newer_sequence_are_applied() -> None:
    ledger = ledger_with_grant()
    assert ledger.apply_update(KEY, update(2, FULL)) is UpdateDisposition.APPLIED
    assert dict(ledger.entry(KEY).grant_total) == FULL


def test_grant_may_reach_u64_max() -> None:
    ledger = ledger_with_grant()
    ledger.apply_update(KEY, update(2, {R.DATA_BYTES: U64_MAX}))
    assert ledger.available(KEY)[R.DATA_BYTES] == U64_MAX


def _tampered(field: str, value: object) -> ReceiverCreditUpdate:
    # A frozen value whose validators were bypassed: the ledger validates again.
    u = update(2, FULL)
    object.__setattr__(u, field, value)
    return u


INVALID_UPDATES = {
    "schema_version": _tampered("schema_version", 2),
    "epoch_zero": update(2, FULL, epoch=0),
    "sequence_zero": update(0, FULL),
    "other_session": update(
        2, FULL, key=CreditKey(receiver_session=SessionId(1), sender_peer=7, qos_class=2)
    ),
    "other_qos": update(
        2, FULL, key=CreditKey(receiver_session=SESSION, sender_peer=7, qos_class=3)
    ),
    "five_grants": _tampered(
        "grants",
        (*update(2, FULL).grants, CreditAmount(resource=R.DATA_BYTES, amount=1)),
    ),
    "duplicate_resource": _tampered(
        "grants",
        (
            CreditAmount(resource=R.DATA_BYTES, amount=1),
            CreditAmount(resource=R.DATA_BYTES, amount=2),
        ),
    ),
    "unknown_resource": _tampered("grants", ((9, 1),)),
}


@pytest.mark.parametrize("bad", INVALID_UPDATES.values(), ids=INVALID_UPDATES.keys())
def test_malformed_update_is_invalid_argument_and_changes_nothing(
    bad: ReceiverCreditUpdate,
) -> None:
    ledger = ledger_with_grant()
    before = snapshot(ledger)
    with pytest.raises(InvalidArgument):
        ledger.apply_update(KEY, bad)
    assert snapshot(ledger) == before
    assert ledger.statistics().updates_rejected == 1


def test_update_validation_precedes_the_entry_lookup() -> None:
    # A malformed update for a missing key is IA, not IE: validate everything first.
    ledger = SenderCreditLedger(max_entries=1)
    with pytest.raises(InvalidArgument):
        ledger.apply_update(KEY, update(0, FULL))


def test_non_update_is_invalid_argument() -> None:
    ledger = ledger_with_grant()
    with pytest.raises(InvalidArgument):
        ledger.apply_update(KEY, {"sequence": 2})  # type: ignore[arg-type]


def test_update_for_missing_entry_is_invalid_entry() -> None:
    ledger = ledger_with_grant()
    before = snapshot(ledger)
    with pytest.raises(InvalidEntry):
        ledger.apply_update(OTHER, update(1, FULL, key=OTHER))
    assert snapshot(ledger) == before


@pytest.mark.parametrize("epoch", [1, 3])
def test_update_of_another_epoch_is_invalid_entry_and_changes_nothing(epoch: int) -> None:
    ledger = ledger_with_grant(epoch=2)
    before = snapshot(ledger)
    with pytest.raises(InvalidEntry):
        ledger.apply_update(KEY, update(9, {R.DATA_BYTES: 5000}, epoch=epoch))
    assert snapshot(ledger) == before


def test_sequences_restart_with_a_new_epoch() -> None:
    ledger = ledger_with_grant()
    ledger.apply_update(KEY, update(50, FULL))
    ledger.activate(KEY, 2)
    assert ledger.apply_update(KEY, update(1, {R.DATA_BYTES: 10}, epoch=2)) is (
        UpdateDisposition.APPLIED
    )
    assert ledger.entry(KEY).grant_total[R.DATA_BYTES] == 10


# -- try_reserve ---------------------------------------------------------------------------------


def test_reserve_consumes_every_resource_and_returns_a_reserved_token() -> None:
    ledger = ledger_with_grant()
    c = charge(data_bytes=100, request_slots=1, consumer_slots=1)
    token = token_of(ledger.try_reserve(KEY, c))
    assert (token.key, token.epoch, token.charge, token.state) == (KEY, 1, c, TokenState.RESERVED)
    assert token.token_id == 1
    e = ledger.entry(KEY)
    assert dict(e.consumed) == {
        R.DATA_BYTES: 100,
        R.REQUEST_SLOTS: 1,
        R.STAGING_SLOTS: 0,
        R.CONSUMER_SLOTS: 1,
    }
    assert dict(e.available) == {
        R.DATA_BYTES: 900,
        R.REQUEST_SLOTS: 3,
        R.STAGING_SLOTS: 2,
        R.CONSUMER_SLOTS: 3,
    }
    assert token_of(ledger.try_reserve(KEY, c)).token_id == 2


def test_reserve_of_exactly_the_available_credit_succeeds() -> None:
    ledger = ledger_with_grant({R.DATA_BYTES: 100})
    token_of(ledger.try_reserve(KEY, charge(data_bytes=100)))
    assert ledger.available(KEY)[R.DATA_BYTES] == 0


def test_blocked_reserve_names_every_exhausted_resource_and_changes_nothing() -> None:
    ledger = ledger_with_grant({R.DATA_BYTES: 100, R.REQUEST_SLOTS: 1, R.CONSUMER_SLOTS: 5})
    before = snapshot(ledger)
    result = ledger.try_reserve(
        KEY, charge(data_bytes=101, request_slots=1, staging_slots=1, consumer_slots=5)
    )
    assert result == Blocked(key=KEY, exhausted=(R.DATA_BYTES, R.STAGING_SLOTS))
    assert snapshot(ledger) == before
    assert ledger.statistics().blocked == 1


def test_reserve_without_entry_or_update_is_invalid_entry() -> None:
    ledger = SenderCreditLedger(max_entries=1)
    with pytest.raises(InvalidEntry):
        ledger.try_reserve(KEY, charge(data_bytes=1))
    ledger.activate(KEY, 1)
    before = snapshot(ledger)
    with pytest.raises(InvalidEntry):
        ledger.try_reserve(KEY, charge(data_bytes=1))
    assert snapshot(ledger) == before


@pytest.mark.parametrize(
    ("key", "c"),
    [
        (KEY, {R.DATA_BYTES: 1}),
        (KEY, ((R.DATA_BYTES, 1),)),
        (KEY, None),
        ((SESSION, 7, 2), CreditCharge.of({R.DATA_BYTES: 1})),
    ],
)
def test_reserve_rejects_non_key_or_non_charge(key: object, c: object) -> None:
    ledger = ledger_with_grant()
    before = snapshot(ledger)
    with pytest.raises(InvalidArgument):
        ledger.try_reserve(key, c)  # type: ignore[arg-type]
    assert snapshot(ledger) == before


def test_blocked_value_is_validated() -> None:
    with pytest.raises(InvalidArgument):
        Blocked(key=KEY, exhausted=())
    with pytest.raises(InvalidArgument):
        Blocked(key=KEY, exhausted=(R.STAGING_SLOTS, R.DATA_BYTES))
    with pytest.raises(InvalidArgument):
        Blocked(key=KEY, exhausted=(R.DATA_BYTES, R.DATA_BYTES))
    with pytest.raises(InvalidArgument):
        Blocked(key=KEY, exhausted=(1,))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        Blocked(key="key", exhausted=(R.DATA_BYTES,))  # type: ignore[arg-type]


# -- commit / rollback and the token lifecycle ---------------------------------------------------


def test_commit_keeps_the_credit_consumed() -> None:
    ledger = ledger_with_grant()
    token = token_of(ledger.try_reserve(KEY, charge(data_bytes=100)))
    before = snapshot(ledger)
    ledger.commit(token)
    assert token.state is TokenState.COMMITTED
    assert snapshot(ledger) == before  # completion never mints local credit
    assert ledger.available(KEY)[R.DATA_BYTES] == 900


def test_rollback_restores_exactly_the_charge() -> None:
    ledger = ledger_with_grant()
    token_of(ledger.try_reserve(KEY, charge(data_bytes=7)))
    before = snapshot(ledger)
    token = token_of(ledger.try_reserve(KEY, charge(data_bytes=100, request_slots=2)))
    ledger.rollback(token)
    assert token.state is TokenState.ROLLED_BACK
    assert snapshot(ledger) == before


def test_token_lifecycle_table_is_exactly_reserve_then_commit_or_rollback() -> None:
    assert dict(TOKEN_TRANSITIONS) == {
        (TokenState.EMPTY, "reserve"): TokenState.RESERVED,
        (TokenState.RESERVED, "commit"): TokenState.COMMITTED,
        (TokenState.RESERVED, "rollback"): TokenState.ROLLED_BACK,
    }


def _drive(ledger: SenderCreditLedger, token: ReservationToken, event: str) -> None:
    getattr(ledger, event)(token)


@pytest.mark.parametrize(
    ("history", "event"),
    list(itertools.product([(), ("commit",), ("rollback",)], ["commit", "rollback"])),
)
def test_every_token_transition_follows_the_table(history: tuple[str, ...], event: str) -> None:
    ledger = ledger_with_grant()
    token = token_of(ledger.try_reserve(KEY, charge(data_bytes=10)))
    for step in history:
        _drive(ledger, token, step)
    state = token.state
    before = snapshot(ledger)
    expected = TOKEN_TRANSITIONS.get((state, event))
    if expected is None:
        with pytest.raises(InvalidEntry):
            _drive(ledger, token, event)
        assert token.state is state
        assert snapshot(ledger) == before
    else:
        _drive(ledger, token, event)
        assert token.state is expected


def test_token_attributes_are_read_only() -> None:
    ledger = ledger_with_grant()
    token = token_of(ledger.try_reserve(KEY, charge(data_bytes=10)))
    for name in ("state", "key", "epoch", "charge", "token_id"):
        with pytest.raises(AttributeError):
            setattr(token, name, None)
    assert "RESERVED" in repr(token)


@pytest.mark.parametrize("operation", ["commit", "rollback"])
def test_token_ops_reject_non_tokens(operation: str) -> None:
    ledger = ledger_with_grant()
    with pytest.raises(InvalidArgument):
        getattr(ledger, operation)("token")


@pytest.mark.parametrize("operation", ["commit", "rollback"])
def test_token_of_another_ledger_is_invalid_entry(operation: str) -> None:
    mine, theirs = ledger_with_grant(), ledger_with_grant()
    foreign = token_of(theirs.try_reserve(KEY, charge(data_bytes=10)))
    before = snapshot(mine)
    with pytest.raises(InvalidEntry):
        getattr(mine, operation)(foreign)
    assert snapshot(mine) == before
    assert foreign.state is TokenState.RESERVED


FENCES = {
    "deactivated": lambda ledger: ledger.deactivate(KEY, 1),
    "higher_epoch": lambda ledger: ledger.activate(KEY, 2),
    "deactivated_then_same_epoch": lambda ledger: (
        ledger.deactivate(KEY, 1),
        ledger.activate(KEY, 1),
    ),
}


@pytest.mark.parametrize("fence", FENCES.values(), ids=FENCES.keys())
@pytest.mark.parametrize("operation", ["commit", "rollback"])
def test_fenced_token_is_invalid_entry_and_never_touches_the_new_entry(
    fence: object, operation: str
) -> None:
    ledger = ledger_with_grant()
    token = token_of(ledger.try_reserve(KEY, charge(data_bytes=10)))
    fence(ledger)  # type: ignore[operator]
    if ledger.keys():
        epoch = ledger.entry(KEY).epoch
        ledger.apply_update(KEY, update(1, {R.DATA_BYTES: 50}, epoch=epoch))
        token_of(ledger.try_reserve(KEY, charge(data_bytes=10)))
    before = snapshot(ledger)
    with pytest.raises(InvalidEntry):
        getattr(ledger, operation)(token)
    assert snapshot(ledger) == before
    assert token.state is TokenState.RESERVED
    assert ledger.statistics().fenced_tokens == 1


# -- return_credit -------------------------------------------------------------------------------


def test_return_grows_returned_cumulatively_and_lowers_available() -> None:
    ledger = ledger_with_grant()
    ledger.return_credit(KEY, charge(data_bytes=100, staging_slots=1))
    ledger.return_credit(KEY, charge(data_bytes=50))
    e = ledger.entry(KEY)
    assert e.returned[R.DATA_BYTES] == 150
    assert e.returned[R.STAGING_SLOTS] == 1
    assert e.available[R.DATA_BYTES] == 850
    assert e.available[R.STAGING_SLOTS] == 1
    assert ledger.statistics().returns == 2


def test_return_of_all_available_credit_is_allowed() -> None:
    ledger = ledger_with_grant({R.DATA_BYTES: 100})
    token_of(ledger.try_reserve(KEY, charge(data_bytes=40)))
    ledger.return_credit(KEY, charge(data_bytes=60))
    assert ledger.available(KEY)[R.DATA_BYTES] == 0


def test_return_beyond_available_is_insufficient_credit_and_changes_nothing() -> None:
    ledger = ledger_with_grant({R.DATA_BYTES: 100, R.REQUEST_SLOTS: 1})
    token_of(ledger.try_reserve(KEY, charge(data_bytes=50)))
    before = snapshot(ledger)
    with pytest.raises(InsufficientCredit) as info:
        ledger.return_credit(KEY, charge(data_bytes=51, request_slots=1, staging_slots=1))
    assert info.value.exhausted == (R.DATA_BYTES, R.STAGING_SLOTS)
    assert isinstance(info.value, TooManyRequests)
    assert snapshot(ledger) == before


def test_return_without_entry_or_update_is_invalid_entry() -> None:
    ledger = SenderCreditLedger(max_entries=1)
    with pytest.raises(InvalidEntry):
        ledger.return_credit(KEY, charge(data_bytes=1))
    ledger.activate(KEY, 1)
    with pytest.raises(InvalidEntry):
        ledger.return_credit(KEY, charge(data_bytes=1))


def test_return_rejects_non_charge() -> None:
    ledger = ledger_with_grant()
    before = snapshot(ledger)
    with pytest.raises(InvalidArgument):
        ledger.return_credit(KEY, {R.DATA_BYTES: 1})  # type: ignore[arg-type]
    assert snapshot(ledger) == before


# -- queries and statistics ----------------------------------------------------------------------


def test_entry_and_available_reject_missing_or_non_keys() -> None:
    ledger = SenderCreditLedger(max_entries=1)
    for query in (ledger.entry, ledger.available):
        with pytest.raises(InvalidEntry):
            query(KEY)
        with pytest.raises(InvalidArgument):
            query("key")  # type: ignore[arg-type]


def test_available_without_an_update_at_the_epoch_is_invalid_entry_as_reserve_is() -> None:
    # the reference's StaleEpochFailsAndActivationFencesOldState: a new epoch holds no authority
    # until its first update, for the query as for the reservation
    ledger = ledger_with_grant(epoch=7)
    assert ledger.available(KEY)[R.DATA_BYTES] == 1000
    ledger.activate(KEY, 8)
    with pytest.raises(InvalidEntry, match="no update yet at epoch 8"):
        ledger.available(KEY)
    with pytest.raises(InvalidEntry):
        ledger.try_reserve(KEY, charge(data_bytes=1))
    assert ledger.entry(KEY).has_update is False  # the entry itself still reads
    ledger.apply_update(KEY, update(1, {R.DATA_BYTES: 10}, epoch=8))
    assert ledger.available(KEY)[R.DATA_BYTES] == 10


def test_keys_are_in_activation_order_and_survive_epoch_changes() -> None:
    ledger = SenderCreditLedger(max_entries=3)
    ledger.activate(OTHER, 1)
    ledger.activate(KEY, 1)
    ledger.activate(OTHER, 4)
    assert ledger.keys() == (OTHER, KEY)


def test_snapshots_are_read_only() -> None:
    ledger = ledger_with_grant()
    e = ledger.entry(KEY)
    with pytest.raises(TypeError):
        e.available[R.DATA_BYTES] = 0  # type: ignore[index]
    assert ledger.entry(KEY) == e


def test_statistics_count_every_outcome_and_sum_live_entries() -> None:
    ledger = SenderCreditLedger(max_entries=2)
    ledger.activate(KEY, 1)
    ledger.activate(OTHER, 1)
    ledger.apply_update(KEY, update(1, {R.DATA_BYTES: 100, R.REQUEST_SLOTS: 2}))
    ledger.apply_update(OTHER, update(3, {R.DATA_BYTES: 50}, key=OTHER))
    ledger.apply_update(OTHER, update(5, {R.DATA_BYTES: 60}, key=OTHER))  # gap
    ledger.apply_update(OTHER, update(5, {R.DATA_BYTES: 60}, key=OTHER))  # duplicate
    with pytest.raises(InvalidEntry):
        ledger.apply_update(KEY, update(2, {}, epoch=9))
    committed = token_of(ledger.try_reserve(KEY, charge(data_bytes=30, request_slots=1)))
    ledger.commit(committed)
    rolled = token_of(ledger.try_reserve(OTHER, charge(data_bytes=10)))
    ledger.rollback(rolled)
    assert isinstance(ledger.try_reserve(OTHER, charge(data_bytes=61)), Blocked)
    ledger.return_credit(OTHER, charge(data_bytes=5))
    stats = ledger.statistics()
    assert (stats.entries, stats.updates_applied, stats.sequence_gaps) == (2, 3, 1)
    assert (stats.duplicates_or_old, stats.updates_rejected, stats.epoch_resets) == (1, 1, 0)
    assert (stats.reservations, stats.commits, stats.rollbacks) == (2, 1, 1)
    assert (stats.blocked, stats.returns, stats.fenced_tokens) == (1, 1, 0)
    assert stats.granted[R.DATA_BYTES] == 160
    assert stats.consumed[R.DATA_BYTES] == 30
    assert stats.returned[R.DATA_BYTES] == 5
    assert stats.available[R.DATA_BYTES] == 125
    assert stats.available[R.REQUEST_SLOTS] == 1
    ledger.activate(KEY, 2)
    assert ledger.statistics().epoch_resets == 1
    assert ledger.statistics().granted[R.DATA_BYTES] == 60


# -- backpressure of a blocked reserve (RFC "Backpressure API") ----------------------------------


def test_blocked_reserve_becomes_receiver_credit_backpressure() -> None:
    ledger = ledger_with_grant({R.DATA_BYTES: 10})
    blocked = ledger.try_reserve(KEY, charge(data_bytes=11, request_slots=1))
    assert isinstance(blocked, Blocked)
    info = BackpressureInfo.from_blocked(blocked, retry_after_us=250, fallback_allowed=True)
    assert info == BackpressureInfo(
        source=BackpressureSource.RECEIVER_CREDIT,
        peer=KEY.sender_peer,
        qos_class=KEY.qos_class,
        exhausted=(R.DATA_BYTES, R.REQUEST_SLOTS),
        retry_after_us=250,
        fallback_allowed=True,
    )


def test_from_blocked_rejects_a_non_blocked_value_and_bad_hints() -> None:
    blocked = Blocked(key=KEY, exhausted=(R.DATA_BYTES,))
    with pytest.raises(InvalidArgument):
        BackpressureInfo.from_blocked(KEY, retry_after_us=0, fallback_allowed=False)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        BackpressureInfo.from_blocked(blocked, retry_after_us=-1, fallback_allowed=False)
    with pytest.raises(InvalidArgument):
        BackpressureInfo.from_blocked(blocked, retry_after_us=0, fallback_allowed=1)  # type: ignore[arg-type]


VALID_INFO: dict[str, object] = {
    "source": BackpressureSource.LOCAL_QUEUE,
    "peer": 1,
    "qos_class": 0,
    "exhausted": (),
    "retry_after_us": 0,
    "fallback_allowed": False,
}


@pytest.mark.parametrize(
    "overrides",
    [
        {"source": "local_queue"},
        {"peer": -1},
        {"peer": U64_MAX + 1},
        {"qos_class": 1 << 32},
        {"exhausted": [R.DATA_BYTES]},
        {"exhausted": (R.STAGING_SLOTS, R.DATA_BYTES)},
        {"exhausted": (R.DATA_BYTES, R.DATA_BYTES)},
        {"exhausted": (1,)},
        {"retry_after_us": U64_MAX + 1},
        {"retry_after_us": 1.0},
        {"fallback_allowed": 0},
        {"source": BackpressureSource.RECEIVER_CREDIT, "exhausted": ()},
    ],
    ids=repr,
)
def test_backpressure_info_rejects_invalid_fields(overrides: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument):
        BackpressureInfo(**{**VALID_INFO, **overrides})  # type: ignore[arg-type]


@pytest.mark.parametrize("source", list(BackpressureSource))
def test_backpressure_info_accepts_every_source(source: BackpressureSource) -> None:
    info = BackpressureInfo(
        **{**VALID_INFO, "source": source, "exhausted": (R.STAGING_SLOTS,)}  # type: ignore[arg-type]
    )
    assert info.source is source
    assert BackpressureInfo(**{**VALID_INFO, "peer": U64_MAX}).peer == U64_MAX  # type: ignore[arg-type]


# -- the entry snapshot cache ----------------------------------------------------------------


def test_entry_snapshot_is_reused_until_the_entry_changes_and_fresh_after_every_change() -> None:
    """``entry`` hands out one snapshot between changes; each mutation that moves a total or the
    sequence makes the next call build a new one that shows it (a stale cached snapshot would
    let the gate reserve against credit that is gone)."""
    ledger = ledger_with_grant()
    first = ledger.entry(KEY)
    assert ledger.entry(KEY) is first  # nothing changed: the same immutable snapshot

    token = token_of(ledger.try_reserve(KEY, charge(data_bytes=100, request_slots=1)))
    reserved = ledger.entry(KEY)
    assert reserved.available[R.DATA_BYTES] == 900 and reserved.consumed[R.REQUEST_SLOTS] == 1

    ledger.commit(token)  # a state change of the token only: the totals stay
    assert dict(ledger.entry(KEY).consumed) == dict(reserved.consumed)

    rolled = token_of(ledger.try_reserve(KEY, charge(data_bytes=50)))
    assert ledger.entry(KEY).available[R.DATA_BYTES] == 850
    ledger.rollback(rolled)
    assert ledger.entry(KEY).available[R.DATA_BYTES] == 900

    ledger.return_credit(KEY, charge(data_bytes=200))
    returned = ledger.entry(KEY)
    assert returned.returned[R.DATA_BYTES] == 200 and returned.available[R.DATA_BYTES] == 700

    grown = {**FULL, R.DATA_BYTES: 5000}
    assert ledger.apply_update(KEY, update(2, grown)) is UpdateDisposition.APPLIED
    updated = ledger.entry(KEY)
    assert (updated.last_sequence, updated.grant_total[R.DATA_BYTES]) == (2, 5000)
    assert updated.available[R.DATA_BYTES] == 4700

    assert ledger.apply_update(KEY, update(2, grown)) is UpdateDisposition.DUPLICATE_OR_OLD
    assert ledger.entry(KEY) is updated  # a duplicate changes nothing, not even the snapshot
