"""A version-2 sender observes its level only where it can change (``_levels`` rules 1–2): after
any sequence of the endpoint's own calls, what it holds (news due, a hold running) is what an
observation from scratch over the ledger's snapshot finds. A reservation alone is observed only
while a hold runs (it can end one, never start one or make news), and the observation reads the
ledger's own vectors (``SenderCreditLedger.vectors``), not its snapshot."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tent_credit import (
    AllocatorConfig,
    CreditCharge,
    CreditKey,
    CreditReceiver,
    CreditResource,
    ReservationToken,
    SenderEndpoint,
    SessionId,
)
from tent_credit.errors import InvalidArgument, InvalidEntry

R = CreditResource
BLOCK = 4096
CHARGE = CreditCharge.of({R.DATA_BYTES: BLOCK, R.REQUEST_SLOTS: 1, R.CONSUMER_SLOTS: 1})
ONE = CHARGE.as_dict()


def _pair(slots: int = 4) -> tuple[CreditReceiver, SenderEndpoint]:
    capacity = {R.DATA_BYTES: slots * BLOCK, R.REQUEST_SLOTS: slots, R.CONSUMER_SLOTS: slots}
    config = AllocatorConfig(
        capacity=capacity, control_slots=4, max_grant=capacity, max_keys=8, retry_after_us=100
    )
    rx = CreditReceiver(config, SessionId(1))
    rx.accept(1)
    tx = SenderEndpoint(sender_peer=1, level_hold_ns=3)
    tx.connect(1)
    return rx, tx


def _pump(rx: CreditReceiver, tx: SenderEndpoint, now: int) -> None:
    ep = rx.endpoint(1)
    assert ep is not None
    for _ in range(3):
        for data in tx.messages_to_send(now):
            ep.receive_message(data, now)
        tx.receive_batch(ep.messages_to_send(now), now)


def _from_scratch(tx: SenderEndpoint) -> tuple[bool, bool]:
    """(news due, hold running) as rules 1 and 2 define them, from the ledger's snapshot."""
    levels = tx._levels
    assert tx.key is not None
    entry = tx.ledger.entry(tx.key)
    level = levels.level()
    reported = levels._reported
    returned = {r: a for r, a in entry.returned.items() if a}
    news = returned != levels._reported_returned or any(
        a > (reported or {}).get(r, 0) for r, a in level.items()
    )
    quiet = reported is not None and any(a > level.get(r, 0) for r, a in entry.available.items())
    return news, quiet


_STEPS = st.lists(
    st.sampled_from(
        ["reserve", "commit", "rollback", "land", "release", "wait", "unwait", "pump", "tick"]
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(_STEPS)
# idle credit (its hold running) that reservations then use up: the hold must end
@example(["wait", "pump", "unwait", "reserve", "reserve"])
# idle credit returned after its hold: what is returned is no longer on hand
@example(["wait", "pump", "unwait", "tick", "tick", "pump", "wait", "pump"])
def test_what_the_sender_holds_is_what_an_observation_from_scratch_finds(steps: list[str]) -> None:
    rx, tx = _pair()
    now = 1
    _pump(rx, tx, now)
    assert tx.ahead
    reserved: list[ReservationToken] = []
    committed: list[ReservationToken] = []
    landed = 0
    for step in steps:
        ep = rx.endpoint(1)
        assert ep is not None
        if step == "reserve":
            token = tx.try_reserve(CHARGE, now)
            if isinstance(token, ReservationToken):
                reserved.append(token)
        elif step == "commit" and reserved:
            token = reserved.pop()
            tx.commit(token)
            committed.append(token)
        elif step == "rollback" and reserved:
            tx.rollback(reserved.pop())
        elif step == "land" and len(committed) > landed:
            assert rx.admit_write(1, 0, ep.epoch, ONE).accepted
            landed += 1
        elif step == "release" and landed:
            rx.release(1, 0, ep.epoch, ONE)
            tx.complete(committed.pop(0), now)
            landed -= 1
        elif step == "wait":
            tx.set_pending_demand({r: 2 * a for r, a in ONE.items()})
        elif step == "unwait":
            tx.set_pending_demand({})
        elif step == "pump":
            _pump(rx, tx, now)
        elif step == "tick":
            now += 2
        news, quiet = _from_scratch(tx)
        assert tx._levels._news == news, step
        assert (tx._levels._quiet_since is not None) == quiet, step


def test_the_vectors_are_the_entrys_totals_by_resource_value() -> None:
    rx, tx = _pair()
    _pump(rx, tx, 1)
    key = tx.key
    assert key is not None
    tx.set_pending_demand(ONE)
    _pump(rx, tx, 1)
    token = tx.try_reserve(CHARGE, 1)
    assert isinstance(token, ReservationToken)
    sequence, grant, consumed, returned = tx.ledger.vectors(key)
    entry = tx.ledger.entry(key)
    assert sequence == entry.last_sequence > 0
    for r in R:
        assert (grant[r], consumed[r], returned[r]) == (
            entry.grant_total[r],
            entry.consumed[r],
            entry.returned[r],
        )
    other = CreditKey(receiver_session=SessionId(9), sender_peer=1, qos_class=0)
    with pytest.raises(InvalidEntry):
        tx.ledger.vectors(other)  # no entry: no vectors
    with pytest.raises(InvalidArgument):
        tx.ledger.vectors("key")  # type: ignore[arg-type]  # the caller's error
