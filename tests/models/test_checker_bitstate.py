"""Bitstate hashing: fixed memory, real violations only, omissions bounded and reported."""

from __future__ import annotations

import pytest
from tent_models.checker import InvalidArgument, check
from tent_models.checker._bitstate import BitSet, omission_probability
from tent_models.configs import CONFIGS, KNOWN_BAD_CONFIGS


def test_a_roomy_bit_array_finds_every_state_and_reports_a_small_omission_risk() -> None:
    exact = check(CONFIGS["credit/tiny"]())
    bits = check(CONFIGS["credit/tiny"](), bitstate=22)
    assert (bits.distinct_states, bits.transitions, bits.depth, bits.ok) == (
        exact.distinct_states,
        exact.transitions,
        exact.depth,
        exact.ok,
    )
    assert bits.bitstate == 22 and exact.bitstate == 0
    assert bits.collision_probability < 1e-3
    # the 2**22-bit array (512 KiB) plus parent links and action ids: no per-state table
    assert bits.bytes_per_state * bits.distinct_states < (1 << 19) + 20 * bits.distinct_states


def test_a_tiny_bit_array_omits_states_and_says_so() -> None:
    exact = check(CONFIGS["credit/tiny"]())
    bits = check(CONFIGS["credit/tiny"](), bitstate=12)
    assert bits.distinct_states < exact.distinct_states
    assert bits.collision_probability == 1.0


def test_a_bitstate_violation_is_the_exact_runs_counterexample() -> None:
    bad = KNOWN_BAD_CONFIGS["equal_sequence_accepted"]
    exact, bits = check(bad()), check(bad(), bitstate=20)
    assert not bits.ok
    assert [(v.name, v.actions) for v in bits.violations] == [
        (v.name, v.actions) for v in exact.violations
    ]


def test_bit_set_membership_and_the_omission_formula() -> None:
    table = BitSet(16)
    assert table.get(12345) is None and 12345 not in table
    table[12345] = 0
    assert 12345 in table and len(table) == 1 and table.nbytes() == 8192
    assert omission_probability(0, 16) == 0.0
    assert omission_probability(1 << 16, 16) == pytest.approx((1 - 2.718281828**-3) ** 3)


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        ({"bitstate": 9}, "10..40"),
        ({"bitstate": 20, "workers": 2}, "one process"),
    ],
)
def test_invalid_bitstate_options_are_rejected(options: dict[str, int], complaint: str) -> None:
    with pytest.raises(InvalidArgument, match=complaint):
        check(CONFIGS["credit/tiny"](), **options)  # type: ignore[arg-type]
