"""What a hostile peer sends gets a typed, documented outcome and changes nothing it shouldn't.

Regression tests of issue 10's remote-input items (1, 2, 3, 5, 10); the class of each defect is
covered by ``test_endpoint_fuzz.py`` (any message to either endpoint in any state) and by
``test_fuzz_sample.py`` (the decoder).
"""

from __future__ import annotations

import attrs
import pytest

from tent_credit import CreditCharge, CreditResource, Plan, SessionId, charge_for_plan
from tent_credit._allocator import AllocatorConfig
from tent_credit._backpressure import BackpressureInfo
from tent_credit._describe import describe
from tent_credit._endpoints import CreditReceiver, SenderEndpoint
from tent_credit._gate import DispatchGate, GateBlocked, GateConfig
from tent_credit._messages import CapabilityActivation, CreditAmount, ReceiverCreditUpdate
from tent_credit._negotiation import CreditMode, NegotiationState
from tent_credit._wire import WireErrorCode, decode, encode
from tent_credit.errors import ArithmeticOverflow, DecodeError, InvalidArgument, InvalidEntry

R = CreditResource
SLOT = 4096
CHARGE = charge_for_plan(Plan.REMOTE_DIRECT_WRITE, SLOT)
assert CHARGE is not None

# issue 10 item 1: [bignum of 1786 0xff bytes, 1]; its repr needs over 4,300 digits
HUGE_TAG = bytes.fromhex("82c25906fa") + b"\xff" * 1786 + b"\x01"


def _bignum(n_bytes: int) -> bytes:
    assert n_bytes < 24  # the length fits in the header byte
    return bytes([0xC2, 0x40 | n_bytes]) + b"\x7f" * n_bytes


def config(slots: int = 8) -> AllocatorConfig:
    return AllocatorConfig(
        capacity={R.DATA_BYTES: slots * SLOT, R.REQUEST_SLOTS: slots, R.CONSUMER_SLOTS: slots},
        control_slots=4,
        max_grant={R.DATA_BYTES: 2 * SLOT, R.REQUEST_SLOTS: 2, R.CONSUMER_SLOTS: 2},
        max_keys=64,
        retry_after_us=100,
    )


def active_pair(session: int = 5) -> tuple[SenderEndpoint, CreditReceiver]:
    rx = CreditReceiver(config(), SessionId(session))
    ep = rx.accept(7)
    tx = SenderEndpoint(sender_peer=7)
    tx.connect(0)
    for _ in range(3):
        for data in tx.messages_to_send(0):
            ep.receive_message(data, 0)
        tx.receive_batch(ep.messages_to_send(0), 0)
    assert tx.state is NegotiationState.ACTIVE
    return tx, rx


# ------------------------------------------------------------------ item 1: the decoder


def test_huge_bignum_type_tag_is_a_decode_error() -> None:
    with pytest.raises(DecodeError) as info:
        decode(HUGE_TAG)
    assert info.value.code is WireErrorCode.INVALID_FIELD
    assert len(str(info.value)) < 200


@pytest.mark.parametrize("position", [0, 1, 2, 3])
def test_wide_bignum_in_any_position_is_refused_before_it_is_built(position: int) -> None:
    # A heartbeat [6, 1, session, epoch, qos] with a 17-byte bignum in one position: no field
    # is wider than u128, so the prescan refuses it; the message stays short.
    items = [b"\x06", b"\x01", b"\x01", b"\x01", b"\x00"]
    items[position] = _bignum(17)
    with pytest.raises(DecodeError) as info:
        decode(b"\x85" + b"".join(items))
    assert info.value.code is WireErrorCode.INVALID_FIELD
    assert len(str(info.value)) < 200


def test_released_memoryview_is_the_documented_caller_error() -> None:
    view = memoryview(
        encode(
            ReceiverCreditUpdate(
                qos_class=0, receiver_session_id=SessionId(1), epoch=1, sequence=1, grants=()
            )
        )
    )
    view.release()
    with pytest.raises(InvalidArgument) as info:
        decode(view)
    assert not isinstance(info.value, DecodeError)


def test_describe_is_bounded_whatever_the_value() -> None:
    for value in (
        1 << 100_000,
        -(1 << 100_000),
        "x" * 1_000_000,
        b"y" * 1_000_000,
        list(range(100_000)),
        object(),
    ):
        assert len(describe(value)) < 80
    assert describe(2**64) == str(2**64)


def test_huge_bignum_to_the_sender_is_a_violation_and_the_batch_goes_on() -> None:
    tx, rx = active_pair()
    ep = rx.endpoints()[0]
    tx.set_pending_demand({r: a for r, a in CHARGE.parts})
    now = 10_000_000  # past the usage interval
    for data in tx.messages_to_send(now):
        ep.receive_message(data, now)
    update = ep.messages_to_send(now)
    assert update
    before = tx.statistics().protocol_violations
    events = tx.receive_batch([HUGE_TAG, *update], now)
    assert [e.kind for e in events] == ["protocol_violation", "grant_applied"]
    assert tx.statistics().protocol_violations == before + 1
    assert tx.available()[R.REQUEST_SLOTS] > 0


def test_huge_bignum_to_the_receiver_is_a_violation() -> None:
    _tx, rx = active_pair()
    ep = rx.endpoints()[0]
    events = ep.receive_message(HUGE_TAG, 1)
    assert [e.kind for e in events] == ["protocol_violation"]


# ------------------------------------------------------------------ item 2: activations


def _activation(tx: SenderEndpoint, session: int, epoch: int) -> bytes:
    return encode(
        CapabilityActivation(
            versions=(1,),
            selected_version=1,
            receiver_session_id=SessionId(session),
            epoch=epoch,
            qos_class=tx.qos_class,
        )
    )


def test_activation_of_a_newer_session_with_epoch_0_is_a_violation() -> None:
    tx, _rx = active_pair(session=5)
    before = tx.statistics()
    events = tx.receive_message(_activation(tx, session=6, epoch=0), 1)
    assert [e.kind for e in events] == ["protocol_violation"]
    after = tx.statistics()
    assert after.protocol_violations == before.protocol_violations + 1
    assert (after.state, after.key) == (before.state, before.key)


# ------------------------------------------------------------------ item 3: the inbox


def _update(tx: SenderEndpoint, sequence: int, amount: int) -> bytes:
    assert tx.key is not None
    return encode(
        ReceiverCreditUpdate(
            qos_class=tx.qos_class,
            receiver_session_id=tx.key.receiver_session,
            epoch=tx.epoch,
            sequence=sequence,
            grants=tuple(CreditAmount(resource=r, amount=amount * a) for r, a in CHARGE.parts),
        )
    )


def test_a_bogus_higher_sequence_in_the_batch_never_displaces_the_valid_update() -> None:
    tx, _rx = active_pair()
    applied = tx.ledger.entry(tx.key).last_sequence  # type: ignore[arg-type]
    valid, bogus = _update(tx, applied + 1, 4), _update(tx, applied + 2, 3)
    events = tx.receive_batch([valid, bogus], 1)
    assert sorted(e.kind for e in events) == ["grant_applied", "protocol_violation"]
    assert tx.available()[R.REQUEST_SLOTS] == 4


def test_an_update_below_the_ledger_is_refused_before_it_enters_the_inbox() -> None:
    tx, _rx = active_pair()
    seq = tx.ledger.entry(tx.key).last_sequence  # type: ignore[arg-type]
    tx.receive_batch([_update(tx, seq + 1, 4)], 1)
    # lower than the ledger (a violation) followed by a valid newer one in the same batch
    events = tx.receive_batch([_update(tx, seq + 3, 1), _update(tx, seq + 2, 5)], 2)
    assert sorted(e.kind for e in events) == ["grant_applied", "protocol_violation"]
    assert tx.available()[R.REQUEST_SLOTS] == 5


# ------------------------------------------------------------------ item 5: refused calls


def test_a_refused_complete_changes_nothing_not_even_the_clock() -> None:
    tx, _rx = active_pair()
    tx.receive_batch([_update(tx, 50, 4)], 10)
    token = tx.try_reserve(CHARGE, 10)
    assert not isinstance(token, BackpressureInfo)
    before = tx.statistics()
    with pytest.raises(InvalidEntry):
        tx.complete(token, 5_000)  # RESERVED, not COMMITTED
    with pytest.raises(InvalidArgument):
        tx.complete(None, 5_000)  # type: ignore[arg-type]
    assert tx.statistics() == before
    assert before.update_age_ns == 0


@pytest.mark.parametrize(
    "datas",
    [None, 3, b"\x01", "text", [b"ok", None], [b"ok", "text"], [memoryview(b"")]],
    ids=["none", "int", "one-bytes", "str", "none-item", "str-item", "released-view"],
)
def test_a_refused_receive_batch_changes_nothing(datas: object) -> None:
    tx, _rx = active_pair()
    if isinstance(datas, list) and isinstance(datas[0], memoryview):
        datas[0].release()
    before = tx.statistics()
    with pytest.raises(InvalidArgument):
        tx.receive_batch(datas, 5_000)  # type: ignore[arg-type]
    assert tx.statistics() == before


def test_a_refused_receiver_message_changes_nothing() -> None:
    _tx, rx = active_pair()
    ep = rx.endpoints()[0]
    before = ep.statistics()
    with pytest.raises(InvalidArgument):
        ep.receive_message(None, 5)  # type: ignore[arg-type]
    assert ep.statistics() == before


# ------------------------------------------------------------------ item 10: near 2**64


def test_a_reserve_no_u64_grant_can_cover_is_refused_and_changes_nothing() -> None:
    tx, _rx = active_pair()
    big = encode(
        ReceiverCreditUpdate(
            qos_class=0,
            receiver_session_id=tx.key.receiver_session,  # type: ignore[union-attr]
            epoch=tx.epoch,
            sequence=60,
            grants=(
                CreditAmount(resource=R.DATA_BYTES, amount=2**64 - 2),
                CreditAmount(resource=R.REQUEST_SLOTS, amount=10),
                CreditAmount(resource=R.CONSUMER_SLOTS, amount=10),
            ),
        )
    )
    tx.receive_batch([big], 1)
    small = tx.try_reserve(CreditCharge.of({R.DATA_BYTES: 10, R.REQUEST_SLOTS: 1}), 1)
    assert not isinstance(small, BackpressureInfo)
    before = (tx.statistics(), tx.ledger.statistics())
    with pytest.raises(ArithmeticOverflow):
        tx.try_reserve(CreditCharge.of({R.DATA_BYTES: 2**64 - 1, R.REQUEST_SLOTS: 1}), 2)
    assert (tx.statistics(), tx.ledger.statistics()) == before


@attrs.frozen
class _Owner:
    owner_id: int
    length: int
    gate_key: object
    context: object


def test_the_gate_refuses_an_owner_whose_demand_overflows_and_changes_nothing() -> None:
    tx, _rx = active_pair()
    gate = DispatchGate(GateConfig(mode=CreditMode.REQUIRED))
    gate.add_endpoint(9, tx)
    ctx = gate.context(Plan.REMOTE_DIRECT_WRITE, 9)
    first = gate(_Owner(1, 64 * SLOT, ctx.gate_key, ctx), 1)  # blocks: its charge waits
    assert isinstance(first, GateBlocked)
    before = (gate.statistics(), tx.statistics(), tx.ledger.statistics())
    with pytest.raises(ArithmeticOverflow):
        gate(_Owner(2, 2**64 - 1, ctx.gate_key, ctx), 2)
    assert (gate.statistics(), tx.statistics(), tx.ledger.statistics()) == before
    assert gate.stall(2) is None
