"""What a hostile peer sends gets a typed, documented outcome and changes nothing it shouldn't.

Regression tests of issue 10's remote-input items (1, 2, 3, 5, 10); the class of each defect is
covered by ``test_endpoint_fuzz.py`` (any message to either endpoint in any state) and by
``test_fuzz_sample.py`` (the decoder).
"""

from __future__ import annotations

import pytest

from tent_credit import CreditResource, Plan, SessionId, charge_for_plan
from tent_credit._allocator import AllocatorConfig
from tent_credit._describe import describe
from tent_credit._endpoints import CreditReceiver, SenderEndpoint
from tent_credit._messages import CapabilityActivation, CreditAmount, ReceiverCreditUpdate
from tent_credit._negotiation import NegotiationState
from tent_credit._wire import WireErrorCode, decode, encode
from tent_credit.errors import DecodeError, InvalidArgument

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
