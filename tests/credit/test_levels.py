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


def _change(
    levels: LevelReports,
    committed: list[dict[CreditResource, int]],
    step: str,
    charge: dict[CreditResource, int],
) -> None:
    # one change of the level's inputs (other steps change none)
    if step == "commit":
        levels.commit(charge)
        committed.append(charge)
    elif step == "complete" and committed:
        levels.complete(committed.pop())
    elif step == "wait":
        levels.raise_waiting(charge)
    elif step == "unwait":
        levels.unwait(charge)


@given(_STEPS)
def test_the_level_is_in_flight_plus_waiting_without_zeros(
    steps: list[tuple[str, dict[CreditResource, int]]],
) -> None:
    levels = LevelReports(hold_ns=0)
    committed: list[dict[CreditResource, int]] = []
    for step, charge in steps:
        _change(levels, committed, step, charge)
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


_VECTORS = st.lists(st.integers(0, 12), min_size=len(CreditResource), max_size=len(CreditResource))
_OBSERVED = st.lists(
    st.tuples(
        st.sampled_from(["commit", "complete", "wait", "unwait", "sent", "observe"]),
        _CHARGES,
        _VECTORS,
        _VECTORS,
    ),
    max_size=40,
)


def _vector(values: list[int]) -> list[int]:
    # indexed by resource value (the ledger's vectors): index 0 is unused
    out = [0] * (max(CreditResource) + 1)
    for r, v in zip(CreditResource, values, strict=True):
        out[r] = v
    return out


@given(_OBSERVED)
def test_rule_4_and_rule_5_decide_as_if_every_unit_were_computed_afresh(
    steps: list[tuple[str, dict[CreditResource, int], list[int], list[int]]],
) -> None:
    # the unit of the level and of the last report are kept with them (not recomputed at
    # every observe): whatever the order of changes, the decisions are those of the rules
    # (a hold no run reaches: rule 2's idle credit never makes a report due here)
    levels = LevelReports(hold_ns=1 << 62)
    committed: list[dict[CreditResource, int]] = []
    reported: dict[CreditResource, int] = {}
    reported_returned: dict[CreditResource, int] = {}
    for step, charge, grant_values, spent_values in steps:
        _change(levels, committed, step, charge)
        if step == "sent":
            reported = dict(levels.level())
            reported_returned = {r: a for r, a in charge.items() if a}
            levels.sent(levels.level(), charge, 0)
            continue
        grant = _vector([g + s for g, s in zip(grant_values, spent_values, strict=True)])
        consumed, returned = _vector(spent_values), _vector([0] * len(CreditResource))
        for r, a in reported_returned.items():  # the totals last reported, or news
            returned[r] = a if step != "observe" else a + (charge.get(r, 0) % 2)
        levels.observe(1, grant, consumed, returned)
        level = levels.level()
        now_returned = {r: returned[r] for r in CreditResource if returned[r]}
        news = (
            now_returned != reported_returned
            or any(a > reported.get(r, 0) for r, a in level.items())
            or (bool(levels.head) and unit_of(level) != unit_of(reported))
        )
        assert levels.due(1, 0) is news
        on_hand = {r: grant[r] - consumed[r] - returned[r] for r in CreditResource}
        short = any(on_hand[r] < a for r, a in levels.head.items())
        assert levels.uncovered(grant, consumed, returned) == (
            {r: a for r, a in on_hand.items() if a > 0} if short else {}
        )


def test_a_new_head_of_another_unit_is_news_though_the_level_did_not_rise() -> None:
    # rule 4 after a report: the head changes to a charge of another unit while the level stays
    # at or below the one reported, so only the unit (kept with the level) tells
    b, r = CreditResource.DATA_BYTES, CreditResource.REQUEST_SLOTS
    levels = LevelReports(hold_ns=1 << 62)
    zero = _vector([0] * len(CreditResource))
    levels.raise_waiting({b: 2, r: 1})
    levels.sent(levels.level(), {}, 0)
    levels.observe(1, zero, zero, zero)
    assert not levels.due(1, 0)  # the same level and unit as reported
    levels.unwait({b: 2, r: 1})
    levels.raise_waiting({b: 1, r: 1})
    assert levels.level() == {b: 1, r: 1}  # no rise over {b: 2, r: 1}
    levels.observe(2, zero, zero, zero)
    assert levels.due(2, 0)  # its unit is not the reported one's
