"""The sender's level bookkeeping (``_levels.LevelReports``): the level it reports and observes
is always the work in flight plus the work waiting, per resource, with no zero amounts, however
its cache (which returns ``in_flight`` itself while nothing waits) is reached."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tent_credit._levels import LevelReports
from tent_credit._types import CreditResource

_CHARGES = st.dictionaries(st.sampled_from(list(CreditResource)), st.integers(1, 5), max_size=4)
_STEPS = st.lists(
    st.tuples(st.sampled_from(["commit", "complete", "wait", "unwait", "read"]), _CHARGES),
    max_size=30,
)


def _expected(in_flight: dict[CreditResource, int], waiting: dict[CreditResource, int]) -> dict:
    total = {r: in_flight.get(r, 0) + waiting.get(r, 0) for r in CreditResource}
    return {r: a for r, a in total.items() if a}


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
        assert level == _expected(levels.in_flight, levels.waiting)
        assert all(level.values())
        assert levels.level() is level  # read again unchanged: the same dict
