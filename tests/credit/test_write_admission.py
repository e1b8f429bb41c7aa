"""Write admission and quarantine (issue 10 item 6; docs/seams.md; docs/abuse.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tent_credit import (
    CreditReceiver,
    CreditResource,
    SessionId,
    WriteAdmission,
    WriteRefusal,
)
from tent_credit._allocator import AllocatorConfig, EpochState, ReceiverCreditAllocator
from tent_credit.errors import InvalidEntry, KeyQuarantined, RemoteProtocolError

Q = CreditResource.REQUEST_SLOTS
D = CreditResource.DATA_BYTES


def allocator(slots: int = 8) -> ReceiverCreditAllocator:
    config = AllocatorConfig(
        capacity={Q: slots},
        control_slots=2,
        max_grant={Q: slots},
        max_keys=8,
        retry_after_us=100,
    )
    return ReceiverCreditAllocator(config, SessionId(7))


def occupancy(alloc: ReceiverCreditAllocator) -> int:
    """Slots physically holding payload: landed and not released, over every known record."""
    total = 0
    for sender in range(8):
        try:
            current = alloc.current_epoch(sender, 0)
        except InvalidEntry:
            continue
        for epoch in range(1, current + 1):
            try:
                t = alloc.key_totals(sender, 0, epoch)
            except InvalidEntry:
                continue
            total += t.landed[Q] - t.released[Q]
    return total


def test_accepted_write_is_counted_as_landed() -> None:
    alloc = allocator()
    alloc.open_epoch(1, 0)
    alloc.grant(1, 0, {Q: 3})
    assert alloc.admit_write(1, 0, 1, {Q: 2}) == WriteAdmission(accepted=True)
    assert alloc.key_totals(1, 0, 1).landed[Q] == 2
    assert alloc.admit_write(1, 0, 1, {Q: 1}).accepted
    assert alloc.statistics().writes_admitted == 2
    assert alloc.statistics().protocol_violations == 0


def test_lying_sender_cannot_overfill_and_alone_is_quarantined() -> None:
    # Item 6: the liar returns credit whose payload is still in flight; it is re-granted to an
    # honest sender, and then the late payload arrives. Without admission 10 slots land in 8.
    alloc = allocator()
    alloc.open_epoch(1, 0)  # the liar
    alloc.open_epoch(2, 0)  # honest
    alloc.grant(1, 0, {Q: 8})
    alloc.on_usage(1, 0, 1, consumed_totals={Q: 0}, returned_totals={Q: 8})  # the lie
    assert alloc.grant(2, 0, {Q: 8}).granted_now[Q] == 8
    for _ in range(8):
        assert alloc.admit_write(2, 0, 1, {Q: 1}).accepted  # honest: never refused
    late = alloc.admit_write(1, 0, 1, {Q: 2})
    assert late == WriteAdmission(accepted=False, reason=WriteRefusal.OVER_CREDIT)
    assert occupancy(alloc) == 8
    assert alloc.is_quarantined(1, 0) and not alloc.is_quarantined(2, 0)
    assert alloc.statistics().protocol_violations == 1
    # ... while the legacy path (count after the bytes touched memory) only notices too late
    with pytest.raises(KeyQuarantined):
        alloc.grant(1, 0, {Q: 1})


def test_quarantine_reclaims_unlanded_credit_and_refuses_every_later_write() -> None:
    alloc = allocator()
    alloc.open_epoch(1, 0)
    alloc.grant(1, 0, {Q: 6})
    assert alloc.admit_write(1, 0, 1, {Q: 2}).accepted
    assert alloc.admit_write(1, 0, 1, {Q: 5}).reason is WriteRefusal.OVER_CREDIT
    # the 4 never landed came back through the fence; the 2 landed stay until released
    assert alloc.free(Q) == 6
    totals = alloc.key_totals(1, 0, 1)
    assert totals.state is EpochState.FENCED and totals.reclaimed_by_fence[Q] == 4
    assert alloc.admit_write(1, 0, 1, {Q: 1}).reason is WriteRefusal.QUARANTINED
    with pytest.raises(KeyQuarantined):
        alloc.open_epoch(1, 0)
    with pytest.raises(KeyQuarantined):
        alloc.grant(1, 0, {Q: 1})
    alloc.release(1, 0, 1, {Q: 2})
    assert alloc.free(Q) == 8
    assert alloc.statistics().quarantined_keys == 1
    assert alloc.statistics().writes_refused == 2


def test_fencing_epoch_still_admits_in_flight_data_but_a_completed_fence_refuses() -> None:
    alloc = allocator()
    alloc.open_epoch(1, 0)
    alloc.grant(1, 0, {Q: 4})
    alloc.open_epoch(1, 0)  # reconnect: epoch 1 is FENCING, its in-flight data may land
    assert alloc.admit_write(1, 0, 1, {Q: 1}).accepted
    alloc.fence_complete(1, 0, 1)
    assert alloc.admit_write(1, 0, 1, {Q: 1}).reason is WriteRefusal.FENCED_SESSION
    assert alloc.is_quarantined(1, 0)


def test_unknown_key_or_epoch_is_refused_and_the_unknown_key_is_not_remembered() -> None:
    alloc = allocator()
    alloc.open_epoch(1, 0)
    alloc.grant(1, 0, {Q: 4})
    assert alloc.admit_write(5, 0, 1, {Q: 1}).reason is WriteRefusal.UNKNOWN_EPOCH
    assert alloc.statistics().quarantined_keys == 0
    assert alloc.statistics().keys == 1
    assert alloc.admit_write(1, 0, 2, {Q: 1}).reason is WriteRefusal.UNKNOWN_EPOCH
    assert alloc.is_quarantined(1, 0)
    assert alloc.statistics().protocol_violations == 2


class _HostileMapping(Mapping[Any, Any]):
    def __getitem__(self, key: object) -> Any:
        raise RuntimeError("hostile")

    def __iter__(self) -> Iterator[Any]:
        raise RuntimeError("hostile")

    def __len__(self) -> int:
        raise RuntimeError("hostile")


HOSTILE_AMOUNTS: list[object] = [
    None,
    [],
    {},
    {Q: 0},
    {Q: -1},
    {Q: 2**64},
    {Q: 2**4000},
    {Q: True},
    {Q: 1.0},
    {D: 1},  # a resource this receiver does not model
    {99: 1},
    {"Q": 1},
    {True: 1},
    _HostileMapping(),
    dict.fromkeys(range(1000), 1),
]


def _amounts_id(value: object) -> str:
    # Stable across processes (pytest-xdist workers must collect the same ids): no object
    # addresses, and no 1,000-entry reprs.
    text = type(value).__name__ if type(value).__repr__ is object.__repr__ else repr(value)
    return text if len(text) <= 40 else f"{type(value).__name__}-len{len(text)}"


@pytest.mark.parametrize("amounts", HOSTILE_AMOUNTS, ids=_amounts_id)
def test_malformed_amounts_never_raise_and_only_quarantine(amounts: object) -> None:
    alloc = allocator()
    alloc.open_epoch(1, 0)
    alloc.grant(1, 0, {Q: 4})
    assert alloc.admit_write(1, 0, 1, {Q: 1}).accepted
    before = alloc.key_totals(1, 0, 1)
    admission = alloc.admit_write(1, 0, 1, amounts)
    assert admission.reason is WriteRefusal.MALFORMED
    after = alloc.key_totals(1, 0, 1)
    assert after.landed == before.landed and after.granted == before.granted
    assert alloc.is_quarantined(1, 0) and after.state is EpochState.FENCED
    assert alloc.statistics().protocol_violations == 1


@pytest.mark.parametrize(
    ("sender", "qos", "epoch"),
    [
        (None, 0, 1),
        (-1, 0, 1),
        (2**64, 0, 1),
        (2**5000, 0, 1),
        (1, 2**32, 1),
        (1, "0", 1),
        (1, 0, 0),
        (1, 0, -3),
        (1, 0, 2**64),
        (1, 0, True),
        (True, 0, 1),
    ],
)
def test_malformed_ids_never_raise(sender: object, qos: object, epoch: object) -> None:
    alloc = allocator()
    alloc.open_epoch(1, 0)
    alloc.grant(1, 0, {Q: 4})
    assert alloc.admit_write(1, 0, 1, {Q: 1}).accepted
    assert alloc.admit_write(sender, qos, epoch, {Q: 1}).reason is WriteRefusal.MALFORMED
    assert alloc.key_totals(1, 0, 1).landed[Q] == 1
    assert alloc.statistics().protocol_violations == 1


def test_int_resource_values_are_accepted_as_their_enum() -> None:
    alloc = allocator()
    alloc.open_epoch(1, 0)
    alloc.grant(1, 0, {Q: 4})
    assert alloc.admit_write(1, 0, 1, {int(Q): 2}).accepted
    assert alloc.key_totals(1, 0, 1).landed[Q] == 2


def test_write_admission_value_is_consistent() -> None:
    with pytest.raises(ValueError):
        WriteAdmission(accepted=True, reason=WriteRefusal.MALFORMED)
    with pytest.raises(ValueError):
        WriteAdmission(accepted=False)


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["grant", "write", "return", "report", "release"]), st.integers(1, 4)
    ),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(ops_a=_OPS, ops_b=_OPS, liar_returns=st.lists(st.integers(0, 8), max_size=6))
def test_honest_senders_are_never_refused_and_occupancy_stays_within_capacity(
    ops_a: list[tuple[str, int]], ops_b: list[tuple[str, int]], liar_returns: list[int]
) -> None:
    """Two honest senders interleaved with a liar who reports arbitrary returns and writes."""
    alloc = allocator()
    for peer in (1, 2, 3):
        alloc.open_epoch(peer, 0)
    honest = {1: {"consumed": 0, "returned": 0, "landed": 0, "released": 0}, 2: None}
    honest[2] = dict(honest[1])  # type: ignore[arg-type]
    liar_ops = iter(liar_returns)
    for step in range(max(len(ops_a), len(ops_b))):
        for peer, ops in ((1, ops_a), (2, ops_b)):
            if step >= len(ops):
                continue
            op, n = ops[step]
            h = honest[peer]
            assert h is not None
            granted = alloc.key_totals(peer, 0, 1).granted[Q]
            available = granted - h["consumed"] - h["returned"]
            if op == "grant":
                alloc.grant(peer, 0, {Q: n})
            elif op == "write" and available >= n:
                h["consumed"] += n
                assert alloc.admit_write(peer, 0, 1, {Q: n}).accepted
                h["landed"] += n
            elif op == "return" and available >= n:
                h["returned"] += n
            elif op == "report":
                alloc.on_usage(
                    peer,
                    0,
                    1,
                    consumed_totals={Q: h["consumed"]},
                    returned_totals={Q: h["returned"]},
                )
            elif op == "release" and h["landed"] - h["released"] >= n:
                alloc.release(peer, 0, 1, {Q: n})
                h["released"] += n
        lie = next(liar_ops, None)
        if lie is not None and not alloc.is_quarantined(3, 0):
            alloc.grant(3, 0, {Q: 4})
            granted = alloc.key_totals(3, 0, 1).granted[Q]
            with contextlib.suppress(RemoteProtocolError):
                alloc.on_usage(3, 0, 1, consumed_totals={}, returned_totals={Q: min(lie, granted)})
            alloc.admit_write(3, 0, 1, {Q: max(1, lie)})
        assert occupancy(alloc) <= 8
    assert not alloc.is_quarantined(1, 0) and not alloc.is_quarantined(2, 0)


def test_receiver_closes_the_quarantined_endpoint_and_pushes_freed_capacity() -> None:
    config = AllocatorConfig(
        capacity={Q: 8}, control_slots=2, max_grant={Q: 8}, max_keys=8, retry_after_us=100
    )
    rx = CreditReceiver(config, SessionId(3))
    liar = rx.accept(1)
    rx.accept(2)
    rx.allocator.grant(1, 0, {Q: 8})
    assert rx.admit_write(1, 0, 1, {Q: 9}).reason is WriteRefusal.OVER_CREDIT
    assert liar.closed
    assert rx.allocator.free(Q) == 8
    assert rx.admit_write(1, 0, 1, {Q: 1}).reason is WriteRefusal.QUARANTINED
    assert rx.admit_write(None, 0, 1, {Q: 1}).reason is WriteRefusal.MALFORMED  # type: ignore[arg-type]


def test_a_transport_refusal_quarantines_the_key_as_a_refused_write_does() -> None:
    """``CreditReceiver.quarantine`` (the transport's refusals of its own, e.g. a write opening
    more transfers than its slot credit): the endpoint closes, held credit is reclaimed."""
    config = AllocatorConfig(
        capacity={Q: 8}, control_slots=2, max_grant={Q: 8}, max_keys=8, retry_after_us=100
    )
    rx = CreditReceiver(config, SessionId(3))
    liar = rx.accept(1)
    rx.allocator.grant(1, 0, {Q: 8})
    assert not rx.quarantine(9, 0)  # an unknown key: nothing changes, nothing remembered
    assert not rx.quarantine("1", 0)  # type: ignore[arg-type]  # malformed: never raises
    assert rx.allocator.quarantined_keys == 0
    assert rx.quarantine(1, 0)
    assert liar.closed and rx.allocator.is_quarantined(1, 0)
    assert rx.allocator.free(Q) == 8
    assert rx.admit_write(1, 0, 1, {Q: 1}).reason is WriteRefusal.QUARANTINED


def test_an_open_endpoint_of_a_key_quarantined_through_the_allocator_ignores_input() -> None:
    # The allocator may be driven directly (quarantine without the receiver closing the
    # endpoint): nothing a peer sends may then raise out of receive_message.
    from tent_credit import encode
    from tent_credit._messages import CreditAmount, SenderCreditUsage

    config = AllocatorConfig(
        capacity={Q: 8}, control_slots=2, max_grant={Q: 8}, max_keys=8, retry_after_us=100
    )
    rx = CreditReceiver(config, SessionId(3))
    ep = rx.accept(1)
    rx.allocator.quarantine(1, 0)
    report = SenderCreditUsage(
        receiver_session_id=SessionId(3),
        epoch=1,
        sequence=1,
        qos_class=0,
        pending_demand=(CreditAmount(resource=Q, amount=4),),
    )
    events = ep.receive_message(encode(report), 0)
    assert [e.kind for e in events] == ["update_ignored"]
    assert rx.allocator.statistics().outstanding[Q] == 0
