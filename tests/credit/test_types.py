"""Tests of the credit value types (_types.py) and checked arithmetic (_arith.py)."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tent_credit._arith import U32_MAX, U64_MAX, U128_MAX, check_u64, checked_add, checked_sub
from tent_credit._types import (
    CreditAmount,
    CreditCharge,
    CreditKey,
    CreditResource,
    Plan,
    SessionId,
    charge_for_plan,
)
from tent_credit.errors import ArithmeticOverflow, InvalidArgument

R = CreditResource
u64 = st.integers(min_value=0, max_value=U64_MAX)


# -- CreditCharge -------------------------------------------------------------------------------


def test_charge_of_normalises_order_so_equal_content_is_equal() -> None:
    a = CreditCharge.of({R.CONSUMER_SLOTS: 1, R.DATA_BYTES: 4096})
    b = CreditCharge.of([(R.DATA_BYTES, 4096), (R.CONSUMER_SLOTS, 1)])
    assert a == b
    assert a.parts == ((R.DATA_BYTES, 4096), (R.CONSUMER_SLOTS, 1))
    assert hash(a) == hash(b)


@given(
    st.dictionaries(
        st.sampled_from(list(R)), st.integers(min_value=1, max_value=U64_MAX), min_size=1
    ),
    st.randoms(),
)
def test_charge_of_is_independent_of_input_order(
    parts: dict[CreditResource, int], rnd: object
) -> None:
    items = list(parts.items())
    shuffled = items[:]
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    charge = CreditCharge.of(shuffled)
    assert charge == CreditCharge.of(items)
    assert charge.as_dict() == parts
    for r in R:
        assert charge.amount(r) == parts.get(r, 0)


@pytest.mark.parametrize(
    "parts",
    [
        {},
        [],
        [(R.DATA_BYTES, 1), (R.DATA_BYTES, 2)],
        [(1, 5)],
        [("DATA_BYTES", 5)],
        {R.DATA_BYTES: 0},
        {R.DATA_BYTES: -1},
        {R.DATA_BYTES: U64_MAX + 1},
        {R.DATA_BYTES: True},
        {R.DATA_BYTES: 1.0},
        [(R.DATA_BYTES,)],
        [R.DATA_BYTES],
    ],
    ids=repr,
)
def test_charge_of_rejects_invalid_parts(parts: object) -> None:
    with pytest.raises(InvalidArgument):
        CreditCharge.of(parts)  # type: ignore[arg-type]


def test_charge_constructor_rejects_unsorted_parts() -> None:
    with pytest.raises(InvalidArgument, match="sorted"):
        CreditCharge(((R.REQUEST_SLOTS, 1), (R.DATA_BYTES, 1)))


def test_charge_constructor_rejects_duplicates_and_empty() -> None:
    with pytest.raises(InvalidArgument):
        CreditCharge(())
    with pytest.raises(InvalidArgument):
        CreditCharge(((R.DATA_BYTES, 1), (R.DATA_BYTES, 1)))


def test_charge_accepts_u64_max_amount() -> None:
    assert CreditCharge.of({R.DATA_BYTES: U64_MAX}).amount(R.DATA_BYTES) == U64_MAX


def test_charge_is_frozen() -> None:
    charge = CreditCharge.of({R.DATA_BYTES: 1})
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        charge.parts = ()  # type: ignore[misc]


# -- SessionId, CreditKey, CreditAmount ----------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, U128_MAX + 1, True, 1.0, "1", None])
def test_session_id_rejects_zero_out_of_range_and_non_int(value: object) -> None:
    with pytest.raises(InvalidArgument):
        SessionId(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [1, U64_MAX + 1, U128_MAX])
def test_session_id_accepts_non_zero_u128(value: int) -> None:
    assert int(SessionId(value)) == value


def test_session_ids_order_by_value() -> None:
    assert SessionId(1) < SessionId(2)
    assert SessionId(7) == SessionId(7)


def _key(**overrides: object) -> CreditKey:
    fields: dict[str, object] = {
        "receiver_session": SessionId(9),
        "sender_peer": 3,
        "qos_class": 0,
    }
    fields.update(overrides)
    return CreditKey(**fields)  # type: ignore[arg-type]


def test_credit_key_accepts_bounds() -> None:
    key = _key(sender_peer=U64_MAX, qos_class=U32_MAX)
    assert (key.sender_peer, key.qos_class) == (U64_MAX, U32_MAX)
    assert _key(sender_peer=0, qos_class=0) == _key(sender_peer=0, qos_class=0)


@pytest.mark.parametrize(
    "overrides",
    [
        {"receiver_session": 9},
        {"receiver_session": None},
        {"sender_peer": -1},
        {"sender_peer": U64_MAX + 1},
        {"sender_peer": True},
        {"qos_class": -1},
        {"qos_class": U32_MAX + 1},
        {"qos_class": 1.5},
    ],
    ids=repr,
)
def test_credit_key_rejects_invalid_fields(overrides: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument):
        _key(**overrides)


def test_credit_key_is_keyword_only_and_frozen() -> None:
    with pytest.raises(TypeError):
        CreditKey(SessionId(1), 1, 0)  # type: ignore[call-arg]
    key = _key()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        key.qos_class = 1  # type: ignore[misc]


def test_credit_key_is_hashable_and_equal_by_value() -> None:
    assert {_key(): 1}[_key()] == 1
    assert _key(qos_class=1) != _key(qos_class=2)


@pytest.mark.parametrize(
    ("resource", "amount"),
    [(1, 5), (R.DATA_BYTES, -1), (R.DATA_BYTES, U64_MAX + 1), (R.DATA_BYTES, False)],
)
def test_credit_amount_rejects_invalid_fields(resource: object, amount: object) -> None:
    with pytest.raises(InvalidArgument):
        CreditAmount(resource=resource, amount=amount)  # type: ignore[arg-type]


def test_credit_amount_allows_zero_total() -> None:
    # A cumulative grant total of 0 is valid on the wire (nothing granted yet).
    assert CreditAmount(resource=R.STAGING_SLOTS, amount=0).amount == 0


def test_credit_amount_reads_as_the_rfc_grant_total() -> None:
    # RFC ``struct CreditAmount { resource; grant_total; }``: the same value under its name
    assert CreditAmount(resource=R.DATA_BYTES, amount=7).grant_total == 7


# -- charge_for_plan ------------------------------------------------------------------------------


def test_direct_write_charges_bytes_request_and_consumer_slots() -> None:
    charge = charge_for_plan(Plan.REMOTE_DIRECT_WRITE, 4096)
    assert charge == CreditCharge.of({R.DATA_BYTES: 4096, R.REQUEST_SLOTS: 1, R.CONSUMER_SLOTS: 1})


def test_staged_write_adds_a_staging_slot() -> None:
    charge = charge_for_plan(Plan.REMOTE_STAGED_WRITE, 10)
    assert charge == CreditCharge.of(
        {R.DATA_BYTES: 10, R.REQUEST_SLOTS: 1, R.STAGING_SLOTS: 1, R.CONSUMER_SLOTS: 1}
    )


@pytest.mark.parametrize("plan", [Plan.RDMA_READ, Plan.LOCAL])
def test_read_and_local_plans_have_no_remote_charge(plan: Plan) -> None:
    assert charge_for_plan(plan, 1 << 20) is None


@pytest.mark.parametrize("plan", list(Plan))
@pytest.mark.parametrize("length", [0, -1, U64_MAX + 1, True, 1.0])
def test_charge_for_plan_rejects_invalid_length_for_every_plan(plan: Plan, length: object) -> None:
    with pytest.raises(InvalidArgument):
        charge_for_plan(plan, length)  # type: ignore[arg-type]


def test_charge_for_plan_rejects_unknown_plan() -> None:
    with pytest.raises(InvalidArgument):
        charge_for_plan("remote_direct_write", 1)  # type: ignore[arg-type]


def test_charge_for_plan_accepts_u64_max_length() -> None:
    charge = charge_for_plan(Plan.REMOTE_DIRECT_WRITE, U64_MAX)
    assert charge is not None
    assert charge.amount(R.DATA_BYTES) == U64_MAX


# -- checked arithmetic --------------------------------------------------------------------------


def test_checked_add_reaches_u64_max_and_overflows_past_it() -> None:
    assert checked_add(U64_MAX - 1, 1) == U64_MAX
    with pytest.raises(ArithmeticOverflow):
        checked_add(U64_MAX, 1)


def test_checked_sub_reaches_zero_and_underflows_past_it() -> None:
    assert checked_sub(5, 5) == 0
    with pytest.raises(ArithmeticOverflow):
        checked_sub(4, 5)


def test_arithmetic_overflow_is_an_invalid_argument_and_value_error() -> None:
    assert issubclass(ArithmeticOverflow, InvalidArgument)
    assert issubclass(ArithmeticOverflow, ValueError)


@given(u64, u64)
def test_checked_add_is_exact_or_raises(a: int, b: int) -> None:
    if a + b <= U64_MAX:
        assert checked_add(a, b) == a + b
    else:
        with pytest.raises(ArithmeticOverflow):
            checked_add(a, b)


@given(u64, u64)
def test_checked_sub_is_exact_or_raises(a: int, b: int) -> None:
    if b <= a:
        assert checked_sub(a, b) == a - b
    else:
        with pytest.raises(ArithmeticOverflow):
            checked_sub(a, b)


@pytest.mark.parametrize("value", [-1, U64_MAX + 1, True, 1.0, "1", None])
def test_check_u64_rejects_out_of_range_and_non_int(value: object) -> None:
    with pytest.raises(InvalidArgument):
        check_u64(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, 1, U64_MAX])
def test_check_u64_returns_valid_values(value: int) -> None:
    assert check_u64(value) == value
