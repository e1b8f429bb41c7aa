"""z3 proofs of deadline_mlu (docs/semantics.md#mlu) and the FP64 encoding checked bit for bit
against the spec's float64 implementation."""

from __future__ import annotations

import math
import struct
from collections.abc import Callable

import pytest
import z3
from hypothesis import given
from hypothesis import strategies as st
from tent_models.checker import InvalidArgument
from tent_models.proofs import mlu_z3
from tent_models.proofs.credit_z3 import ProofResult
from tent_models.proofs.mlu_z3 import EXACT_LIMIT, prove_valid, real_mlu, z3_drops, z3_mlu_value
from tent_spec.mlu import DBL_MAX, deadline_mlu

PROOFS: dict[str, Callable[[], ProofResult]] = {
    "monotone_in_bytes_ahead": mlu_z3.prove_monotone_in_bytes_ahead,
    "monotone_in_length": mlu_z3.prove_monotone_in_length,
    "antitone_in_window": mlu_z3.prove_antitone_in_window,
    "threshold_characterisation": mlu_z3.prove_threshold_characterisation,
    "no_deadline_or_bandwidth_never_dropped": mlu_z3.prove_no_deadline_or_bandwidth_never_dropped,
    "past_due_dominates_finite": mlu_z3.prove_past_due_dominates_finite,
    "fp_no_deadline_or_bandwidth_never_dropped": (
        mlu_z3.prove_fp_no_deadline_or_bandwidth_never_dropped
    ),
    "fp_past_due_always_dropped": mlu_z3.prove_fp_past_due_always_dropped,
}


def _bits(value: float) -> int:
    bits: int = struct.unpack("<Q", struct.pack("<d", value))[0]
    return bits


@pytest.mark.parametrize("name", sorted(PROOFS))
def test_mlu_property_is_proved(name: str) -> None:
    result = PROOFS[name]()
    assert result.name == f"mlu/{name}"
    assert result.holds, result.cti
    assert result.per_action and all(result.per_action.values())
    assert result.cti is None


def test_prove_all_runs_every_proof_in_order() -> None:
    results = mlu_z3.prove_all()
    assert [r.name for r in results] == [f"mlu/{name}" for name in PROOFS]
    assert all(r.holds for r in results)


def test_a_false_claim_yields_a_counterexample() -> None:
    """The prover is not vacuous: "more bytes ahead lower the MLU" is refuted with values."""

    def build() -> tuple[z3.BoolRef, dict[str, z3.ExprRef]]:
        b, b2, ln, bw = z3.Reals("b b2 ln bw")
        d, n = z3.Ints("d n")
        premise = z3.And(b >= 0, b < b2, ln > 0, bw >= 1, d > n, n >= 0)
        claim = real_mlu(b, ln, d, n, bw) >= real_mlu(b2, ln, d, n, bw)
        return z3.Implies(premise, claim), {"b": b, "b2": b2}

    result = prove_valid("mlu/false_antitone_in_bytes_ahead", {"real": build})
    assert not result.holds
    assert result.per_action == {"real": False}
    assert result.cti is not None
    assert result.cti["kind"] == "counterexample"
    assert set(result.cti["values"]) == {"b", "b2"}


_bytes = st.integers(min_value=0, max_value=EXACT_LIMIT // 2 - 1)
_times = st.integers(min_value=0, max_value=2**52)
_bandwidths = st.one_of(
    st.integers(min_value=-5, max_value=2**52),
    st.floats(min_value=-1e3, max_value=1e15, allow_nan=False),
)


@given(bytes_ahead=_bytes, length=_bytes, deadline=_times, now=_times, bandwidth=_bandwidths)
def test_z3_fp_encoding_equals_deadline_mlu_bit_for_bit(
    bytes_ahead: int, length: int, deadline: int, now: int, bandwidth: float
) -> None:
    expected = deadline_mlu(bytes_ahead, length, deadline, now, bandwidth)
    assert _bits(z3_mlu_value(bytes_ahead, length, deadline, now, bandwidth)) == _bits(expected)


@given(
    bytes_ahead=_bytes,
    length=st.integers(min_value=1, max_value=2**40),
    window=st.integers(min_value=1, max_value=2**40),
    now=st.integers(min_value=0, max_value=2**40),
    bandwidth=st.integers(min_value=1, max_value=2**45),
    offset=st.sampled_from([-1, 0, 1]),
)
def test_drop_decision_at_threshold_equal_to_mlu(
    *, bytes_ahead: int, length: int, window: int, now: int, bandwidth: int, offset: int
) -> None:
    """θ exactly at, one ulp below and one ulp above the MLU: FP64 and Python decide alike."""
    mlu = deadline_mlu(bytes_ahead, length, now + window, now, bandwidth)
    theta = {0: mlu, -1: math.nextafter(mlu, 0.0), 1: math.nextafter(mlu, math.inf)}[offset]
    assert z3_drops(bytes_ahead, length, now + window, now, bandwidth, threshold=theta) == (
        mlu >= theta
    )
    assert (mlu >= theta) == (offset <= 0)


def test_past_due_is_dbl_max_and_no_bandwidth_is_zero() -> None:
    assert z3_mlu_value(10, 10, 5, 5, 1e9) == DBL_MAX  # equal counts as past
    assert z3_mlu_value(10, 10, 5, 9, 0) == 0.0  # checked first: past due without bandwidth
    assert z3_mlu_value(10, 10, 0, 0, 1e9) == 0.0
    assert z3_drops(0, 1, 5, 6, 1e9, threshold=DBL_MAX)


@given(
    bytes_ahead=_bytes,
    length=st.integers(min_value=1, max_value=2**50),
    window=st.integers(min_value=1, max_value=2**50),
    bandwidth=st.floats(min_value=1.0, max_value=1e15),
    step=st.integers(min_value=1, max_value=3),
)
def test_fp_mlu_never_decreases_when_length_grows(
    bytes_ahead: int, length: int, window: int, bandwidth: float, step: int
) -> None:
    """FP monotonicity, tested (z3 proves it over the reals only; see the module docstring)."""
    shorter = z3_mlu_value(bytes_ahead, length, window, 0, bandwidth)
    longer = z3_mlu_value(bytes_ahead, length + step, window, 0, bandwidth)
    assert shorter <= longer


@given(
    total=st.integers(min_value=1, max_value=2**50),
    window=st.integers(min_value=2, max_value=2**50),
    bandwidth=st.floats(min_value=1.0, max_value=1e15),
)
def test_fp_mlu_never_increases_when_window_widens(
    total: int, window: int, bandwidth: float
) -> None:
    narrow = z3_mlu_value(0, total, window - 1, 0, bandwidth)
    wide = z3_mlu_value(0, total, window, 0, bandwidth)
    assert wide <= narrow


def test_seed_worked_example_values() -> None:
    """Seed: R2 ≈ 1.07, R1 ≈ 0.30, R4 ≈ 1.45 at 100 GB/s."""
    mib, ms, bw = 1 << 20, 1_000_000, 100_000_000_000
    assert z3_mlu_value(0, 512 * mib, 5 * ms, 0, bw) == pytest.approx(1.07, abs=0.01)
    assert z3_mlu_value(512 * mib, 64 * mib, 20 * ms, 0, bw) == pytest.approx(0.30, abs=0.01)
    assert z3_mlu_value(576 * mib, 256 * mib, 6 * ms, 0, bw) == pytest.approx(1.45, abs=0.01)
    assert z3_drops(576 * mib, 256 * mib, 6 * ms, 0, bw, threshold=1.2)
    assert not z3_drops(0, 512 * mib, 5 * ms, 0, bw, threshold=1.2)


@pytest.mark.parametrize(
    "args",
    [
        (-1, 1, 5, 0, 1.0),
        (EXACT_LIMIT, 0, 5, 0, 1.0),
        (0, 1, -1, 0, 1.0),
        (0, 1, EXACT_LIMIT, 0, 1.0),
        (0, 1, 5, 0, math.inf),
    ],
)
def test_inputs_outside_the_exact_domain_are_rejected(
    args: tuple[int, int, int, int, float],
) -> None:
    with pytest.raises(InvalidArgument):
        z3_mlu_value(*args)


def test_non_finite_threshold_is_rejected() -> None:
    with pytest.raises(InvalidArgument):
        z3_drops(0, 1, 5, 0, 1.0, threshold=math.nan)
