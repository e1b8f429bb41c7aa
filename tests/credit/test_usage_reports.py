"""Usage reports on the receiver: validated whole, then applied (issue 10 items 4 and 7)."""

from __future__ import annotations

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from tent_credit import CreditReceiver, CreditResource, SessionId, encode
from tent_credit._allocator import AllocatorConfig
from tent_credit._messages import CreditAmount, SenderCreditUsage

Q = CreditResource.REQUEST_SLOTS
STAGING = CreditResource.STAGING_SLOTS  # not modelled by this receiver
SESSION = SessionId(9)


def receiver(slots: int = 8) -> CreditReceiver:
    config = AllocatorConfig(
        capacity={Q: slots}, control_slots=2, max_grant={Q: slots}, max_keys=8, retry_after_us=50
    )
    return CreditReceiver(config, SESSION)


def usage(
    seq: int,
    *,
    returned: dict[CreditResource, int] | None = None,
    demand: dict[CreditResource, int] | None = None,
) -> bytes:
    return encode(
        SenderCreditUsage(
            receiver_session_id=SESSION,
            epoch=1,
            sequence=seq,
            qos_class=0,
            returned_totals=tuple(
                CreditAmount(resource=r, amount=a) for r, a in (returned or {}).items()
            ),
            pending_demand=tuple(
                CreditAmount(resource=r, amount=a) for r, a in (demand or {}).items()
            ),
        )
    )


def test_a_report_with_an_unmodelled_demand_is_refused_whole_and_stalled_senders_are_pushed() -> (
    None
):
    rx = receiver()
    a, b = rx.accept(1), rx.accept(2)
    a.receive_message(usage(1, demand={Q: 8}), 0)
    assert rx.allocator.free(Q) == 0
    b.receive_message(usage(1, demand={Q: 1}), 0)
    assert b.stalled
    # a's returns ride with a demand this receiver cannot model: nothing of it applies
    events = a.receive_message(usage(2, returned={Q: 8}, demand={STAGING: 1}), 1)
    assert [e.kind for e in events] == ["protocol_violation"]
    assert rx.allocator.free(Q) == 0 and b.stalled
    assert rx.allocator.key_totals(1, 0, 1).reclaimed_by_return[Q] == 0
    # totals are cumulative: the next valid report carries the same returns, and they push b
    a.receive_message(usage(3, returned={Q: 8}), 2)
    assert not b.stalled
    assert rx.allocator.key_totals(2, 0, 1).granted[Q] == 1


_VECTORS = st.dictionaries(st.sampled_from(list(CreditResource)), st.integers(0, 12), max_size=3)


@settings(max_examples=150, deadline=None)
@given(reports=st.lists(st.tuples(_VECTORS, _VECTORS), min_size=1, max_size=8))
def test_a_refused_report_changes_nothing(
    reports: list[tuple[dict[CreditResource, int], dict[CreditResource, int]]],
) -> None:
    """The class of item 4: any report answered with a violation left the receiver as it was."""
    rx = receiver()
    a, b = rx.accept(1), rx.accept(2)
    a.receive_message(usage(1, demand={Q: 6}), 0)
    b.receive_message(usage(1, demand={Q: 4}), 0)
    for seq, (returned, demand) in enumerate(reports, start=2):
        before = (rx.allocator.statistics(), rx.allocator.key_totals(1, 0, 1), b.stalled)
        events = a.receive_message(usage(seq, returned=returned, demand=demand), seq)
        if any(e.kind == "protocol_violation" for e in events):
            after = (rx.allocator.statistics(), rx.allocator.key_totals(1, 0, 1), b.stalled)
            assert attrs.evolve(after[0], protocol_violations=0) == attrs.evolve(
                before[0], protocol_violations=0
            )
            assert after[1:] == before[1:]
        # never reclaimed without pushing: free capacity and a stalled sender do not coexist
        assert not (rx.allocator.free(Q) > 0 and b.stalled)
