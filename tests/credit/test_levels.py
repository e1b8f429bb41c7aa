"""The sender's level bookkeeping (``_levels.LevelReports``): the level it reports and observes
is always the work in flight plus the work waiting, per resource, with no zero amounts, stated in
whole charges of the first waiting charge while one waits (docs/credit_protocol.md#mixed-charges),
however its cache (which returns ``in_flight`` itself while nothing waits) is reached."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tent_credit._ahead import in_heads, unit_of
from tent_credit._levels import LevelReports
from tent_credit._types import CreditResource

_CHARGES = st.dictionaries(st.sampled_from(list(CreditResource)), st.integers(1, 5), max_size=4)
_STEPS = st.lists(
    st.tuples(st.sampled_from(["commit", "complete", "wait", "unwait", "read"]), _CHARGES),
    max_size=30,
)


def _expected(
    in_flight: dict[CreditResource, int],
    waiting: dict[CreditResource, int],
    head: dict[CreditResource, int],
) -> dict:
    total = {r: in_flight.get(r, 0) + waiting.get(r, 0) for r in CreditResource}
    plain = {r: a for r, a in total.items() if a}
    if not head:
        return plain
    # the fewest whole heads that cover the plain level on every resource of the head
    m = max(1, *(-(-plain.get(r, 0) // a) for r, a in head.items()))
    return {r: m * a for r, a in head.items()}


@given(_STEPS)
def test_the_level_is_in_flight_plus_waiting_without_zeros(
    steps: list[tuple[str, dict[CreditResource, int]]],
) -> None:
    levels = LevelReports(hold_ns=0)
    committed: list[dict[CreditResource, int]] = []
    for step, charge in steps:
        if step == "commit":
            levels.commit(charge)
            committed.append(charge)
        elif step == "complete" and committed:
            levels.complete(committed.pop())
        elif step == "wait":
            levels.raise_waiting(charge)
        elif step == "unwait":
            levels.unwait(charge)
        level = levels.level()
        assert level == _expected(levels.in_flight, levels.waiting, levels.head)
        assert all(level.values())
        assert levels.level() is level  # read again unchanged: the same dict


def test_a_level_of_mixed_charges_is_stated_in_whole_heads_whose_unit_is_the_head() -> None:
    # A one-block write in flight and a two-block write waiting: (3 blocks, 2, 2) has the whole
    # level as its unit (gcd 1), which no capacity of two blocks could grant; in whole heads
    # it is two two-block charges, whose unit is the head's charge.
    b, r, c = CreditResource.DATA_BYTES, CreditResource.REQUEST_SLOTS, CreditResource.CONSUMER_SLOTS
    levels = LevelReports(hold_ns=0)
    levels.commit({b: 1, r: 1, c: 1})
    assert levels.raise_waiting({b: 2, r: 1, c: 1})
    assert levels.level() == {b: 4, r: 2, c: 2}
    assert unit_of(levels.level()) == {b: 2, r: 1, c: 1}
    assert in_heads({b: 3, r: 2, c: 2}, {}) == {b: 3, r: 2, c: 2}
    levels.unwait({b: 2, r: 1, c: 1})  # reserved: nothing waits, the plain level again
    assert levels.head == {} and levels.level() == {b: 1, r: 1, c: 1}
