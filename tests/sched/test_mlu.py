"""deadline_mlu (docs/semantics.md#mlu): edge rules, operation order, and bit-equality with the
spec."""

from __future__ import annotations

import struct
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tent_spec import mlu as spec_mlu

from tent_sched._mlu import DBL_MAX, deadline_mlu

U64_MAX = (1 << 64) - 1
MiB = 1 << 20


def bits(value: float) -> bytes:
    return struct.pack("<d", value)


def test_no_deadline_yields_zero() -> None:
    assert deadline_mlu(10, 10, 0, 5, 1e9) == 0.0


@pytest.mark.parametrize("bandwidth_bps", [0.0, -1.0, -1e300, 0])
def test_no_usable_bandwidth_yields_zero(bandwidth_bps: float) -> None:
    assert deadline_mlu(10, 10, 100, 5, bandwidth_bps) == 0.0


def test_zero_checks_come_before_the_past_due_check() -> None:
    # A past deadline without usable bandwidth is still 0: never urgent, never dropped.
    assert deadline_mlu(10, 10, 5, 100, 0.0) == 0.0
    assert deadline_mlu(10, 10, 5, 100, -1.0) == 0.0


@pytest.mark.parametrize("now_ns", [100, 101, U64_MAX])
def test_past_or_equal_deadline_yields_dbl_max_not_inf(now_ns: int) -> None:
    result = deadline_mlu(0, 1, 100, now_ns, 1e9)
    assert result == sys.float_info.max == DBL_MAX
    assert result != float("inf")


def test_ratio_uses_bytes_ahead_as_additive_delay() -> None:
    # 512 MiB at 100 GB/s against a 5 ms window (Deadline Scheduling's R2): ≈ 1.07.
    assert deadline_mlu(0, 512 * MiB, 5_000_000, 0, 1e11) == pytest.approx(1.07, abs=0.005)
    # The wait adds to the request's own time; it is not folded into the rate.
    with_wait = deadline_mlu(512 * MiB, 64 * MiB, 20_000_000, 0, 1e11)
    assert with_wait == pytest.approx(0.30, abs=0.005)


def test_operation_order_is_pinned() -> None:
    # Chosen so a different association rounds differently in float64.
    args = (3, 7, 1_000_000_007, 13, 3.3e9)
    expected = ((3 + 7) / 3.3e9) / ((1_000_000_007 - 13) / 1e9)
    assert bits(deadline_mlu(*args)) == bits(expected)
    reassociated = (3 + 7) / (3.3e9 * ((1_000_000_007 - 13) / 1e9))
    assert bits(expected) != bits(reassociated)


@given(
    bytes_ahead=st.integers(0, U64_MAX),
    length=st.integers(1, U64_MAX),
    deadline_ns=st.one_of(st.just(0), st.integers(0, U64_MAX)),
    now_ns=st.integers(0, U64_MAX),
    bandwidth_bps=st.one_of(
        st.floats(allow_nan=False, allow_infinity=False),
        st.floats(min_value=1e6, max_value=1e13),
        st.integers(-5, 5),
    ),
)
def test_matches_the_spec_bit_for_bit(
    bytes_ahead: int, length: int, deadline_ns: int, now_ns: int, bandwidth_bps: float
) -> None:
    ours = deadline_mlu(bytes_ahead, length, deadline_ns, now_ns, bandwidth_bps)
    theirs = spec_mlu.deadline_mlu(bytes_ahead, length, deadline_ns, now_ns, bandwidth_bps)
    assert bits(ours) == bits(theirs)


@given(
    length=st.integers(1, 1 << 40),
    window_ns=st.integers(1, 10**12),
    now_ns=st.integers(0, 1 << 62),
    bandwidth_bps=st.floats(min_value=1.0, max_value=1e13),
)
def test_near_deadline_values_match_the_spec_bit_for_bit(
    length: int, window_ns: int, now_ns: int, bandwidth_bps: float
) -> None:
    # Realistic magnitudes, where the drop decision mlu >= θ is taken.
    args = (length, length, now_ns + window_ns, now_ns, bandwidth_bps)
    assert bits(deadline_mlu(*args)) == bits(spec_mlu.deadline_mlu(*args))
