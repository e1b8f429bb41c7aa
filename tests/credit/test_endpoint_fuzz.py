"""Nothing a peer sends raises out of an endpoint, in any state (issue 10 item 2, as a class).

Both endpoints get bursts of peer input: well-formed messages aimed *near* their current
session, epoch and sequence (where the interesting branches are), arbitrary messages, raw
bytes, and bit flips and truncations of valid encodings. Each step may only produce what the
docstrings document: a list of :class:`EndpointEvent` of the documented kinds, and for a
closed receiver endpoint :class:`LocalProtocolError`. After every step the endpoint must still
work (send, timers, statistics) and keep its accounting invariants.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import control_messages

from tent_credit import CreditResource, Plan, SessionId, charge_for_plan
from tent_credit._allocator import AllocatorConfig
from tent_credit._backpressure import BackpressureInfo
from tent_credit._endpoints import CreditReceiver, EndpointEvent, ReceiverEndpoint, SenderEndpoint
from tent_credit._ledger import ReservationToken
from tent_credit._messages import (
    CapabilityActivation,
    CapabilityOffer,
    ControlMessage,
    CreditAmount,
    CreditReturn,
    Heartbeat,
    ReceiverCreditUpdate,
    SenderCreditUsage,
)
from tent_credit._negotiation import CreditMode
from tent_credit._wire import decode, encode
from tent_credit.errors import LocalProtocolError

R = CreditResource
SLOT = 4096
CHARGE = charge_for_plan(Plan.REMOTE_DIRECT_WRITE, SLOT)
assert CHARGE is not None
U64_MAX = 2**64 - 1

# EndpointEvent's documented kinds (its docstring)
KINDS = frozenset(
    {
        "activated",
        "legacy_fallback",
        "negotiation_failed",
        "session_fenced",
        "fence_drained",
        "grant_applied",
        "update_ignored",
        "became_stale",
        "usage_applied",
        "demand_blocked",
        "protocol_violation",
    }
)

SENDER_STATES = (
    "unstarted",
    "negotiating",
    "active",
    "granted",
    "stale",
    "fencing",
    "legacy",
    "failed",
    "disabled",
)
RECEIVER_STATES = ("accepted", "active", "granted", "closed")


def config() -> AllocatorConfig:
    return AllocatorConfig(
        capacity={R.DATA_BYTES: 8 * SLOT, R.REQUEST_SLOTS: 8, R.CONSUMER_SLOTS: 8},
        control_slots=4,
        max_grant={R.DATA_BYTES: 2 * SLOT, R.REQUEST_SLOTS: 2, R.CONSUMER_SLOTS: 2},
        max_keys=64,
        retry_after_us=100,
    )


def _exchange(tx: SenderEndpoint, ep: ReceiverEndpoint, now: int) -> None:
    for _ in range(3):
        for data in tx.messages_to_send(now):
            ep.receive_message(data, now)
        tx.receive_batch(ep.messages_to_send(now), now)


def _activation(session: SessionId, epoch: int, selected: int = 1) -> bytes:
    return encode(
        CapabilityActivation(
            versions=(1,) if selected else (9,),
            selected_version=selected,
            receiver_session_id=session,
            epoch=epoch,
        )
    )


def build_sender(state: str) -> tuple[SenderEndpoint, list[ReservationToken]]:
    """A sender endpoint in ``state`` (and its committed tokens), at time 10."""
    mode = {"legacy": CreditMode.OPTIONAL, "disabled": CreditMode.DISABLED}.get(
        state, CreditMode.REQUIRED
    )
    tx = SenderEndpoint(sender_peer=7, mode=mode)
    tokens: list[ReservationToken] = []
    if state == "unstarted":
        return tx, tokens
    tx.connect(0)
    if state in ("negotiating", "disabled"):
        return tx, tokens
    if state in ("legacy", "failed"):
        tx.receive_message(_activation(SessionId(5), 0, selected=0), 1)
        return tx, tokens
    rx = CreditReceiver(config(), SessionId(5), freshness_ttl_ms=10)
    ep = rx.accept(7)
    ep_now = 1
    _exchange(tx, ep, ep_now)
    if state in ("granted", "fencing"):
        tx.set_pending_demand({r: 2 * a for r, a in CHARGE.parts})
        _exchange(tx, ep, 2_000_000)
        token = tx.try_reserve(CHARGE, 2_000_000)
        assert isinstance(token, ReservationToken), token
        tx.commit(token)
        tokens.append(token)
    if state == "stale":
        tx.disconnect(2_000_000)
    if state == "fencing":
        tx.receive_message(_activation(SessionId(5), tx.epoch + 1), 2_000_000)
    return tx, tokens


def build_receiver(state: str) -> tuple[CreditReceiver, ReceiverEndpoint]:
    rx = CreditReceiver(config(), SessionId(5), refresh_interval_ns=1_000_000)
    ep = rx.accept(7)
    if state == "accepted":
        return rx, ep
    tx = SenderEndpoint(sender_peer=7)
    tx.connect(0)
    _exchange(tx, ep, 1)
    if state == "granted":
        tx.set_pending_demand({r: 2 * a for r, a in CHARGE.parts})
        _exchange(tx, ep, 2_000_000)
        token = tx.try_reserve(CHARGE, 2_000_000)
        assert isinstance(token, ReservationToken)
    if state == "closed":
        rx.accept(7)  # a reconnect closes the old endpoint
    return rx, ep


# ------------------------------------------------------------------ peer input


def _near(center: int, top: int) -> st.SearchStrategy[int]:
    """Integers at and around ``center`` (where the branches are), and the boundaries."""
    # few choices, so combinations of them (a newer session *and* epoch 0) come up often
    return st.sampled_from(sorted({v for v in (center, center + 1, 0, top) if 0 <= v <= top}))


def _amounts() -> st.SearchStrategy[tuple[CreditAmount, ...]]:
    amount = st.one_of(
        st.integers(0, 16 * SLOT), st.sampled_from([0, 1, SLOT, 8 * SLOT, U64_MAX - 1, U64_MAX])
    )
    return st.lists(
        st.builds(CreditAmount, resource=st.sampled_from(R), amount=amount),
        max_size=4,
        unique_by=lambda a: a.resource,
    ).map(tuple)


@st.composite
def near_messages(draw: st.DrawFn, session: int, epoch: int, sequence: int) -> ControlMessage:
    """A well-formed message aimed at the endpoint's current (session, epoch, sequence)."""
    sid = SessionId(draw(_near(session, 2**128 - 1).filter(bool)))
    ep = draw(_near(epoch, U64_MAX))
    seq = draw(_near(sequence, U64_MAX))
    qos = draw(st.sampled_from([0] * 7 + [1]))
    ttl = draw(st.sampled_from([0, 1, 10, 2**32 - 1]))
    # mostly what a receiver speaking version 1 would send, so the deep branches are reached
    versions = draw(st.sampled_from([(1,)] * 6 + [(1, 2), (9,)]))
    kinds = ["update", "update", "activation", "activation", "usage", "return", "offer", "hb"]
    kind = draw(st.sampled_from(kinds))
    if kind == "update":
        return ReceiverCreditUpdate(
            qos_class=qos,
            receiver_session_id=sid,
            epoch=ep,
            sequence=seq,
            freshness_ttl_ms=ttl,
            grants=draw(_amounts()),
            retry_after_us=draw(st.sampled_from([0, 100, U64_MAX])),
        )
    if kind == "activation":
        return CapabilityActivation(
            versions=versions,
            selected_version=draw(st.sampled_from([1] * 6 + [0, 2])),
            receiver_session_id=sid,
            epoch=ep,
            qos_class=qos,
            freshness_ttl_ms=ttl,
        )
    if kind == "usage":
        return SenderCreditUsage(
            receiver_session_id=sid,
            epoch=ep,
            sequence=seq,
            qos_class=qos,
            consumed_totals=draw(_amounts()),
            returned_totals=draw(_amounts()),
            pending_demand=draw(_amounts()),
        )
    if kind == "return":
        return CreditReturn(
            receiver_session_id=sid,
            epoch=ep,
            sequence=seq,
            qos_class=qos,
            returned_totals=draw(_amounts()),
        )
    if kind == "offer":
        return CapabilityOffer(versions=versions, qos_class=qos)
    return Heartbeat(receiver_session_id=sid, epoch=ep, qos_class=qos)


@st.composite
def mangled(draw: st.DrawFn, message: ControlMessage) -> bytes:
    """A bit flip, truncation or extension of ``message``'s encoding."""
    data = bytearray(encode(message))
    how = draw(st.sampled_from(["flip", "truncate", "extend"]))
    if how == "flip":
        bit = draw(st.integers(0, len(data) * 8 - 1))
        data[bit // 8] ^= 1 << (bit % 8)
    elif how == "truncate":
        del data[draw(st.integers(0, len(data) - 1)) :]
    else:
        data += draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


def peer_input(session: int, epoch: int, sequence: int) -> st.SearchStrategy[bytes]:
    near = near_messages(session, epoch, sequence)
    return st.one_of(
        near.map(encode),
        near.map(encode),
        near.map(encode),
        near.flatmap(mangled),
        control_messages().map(encode),
        st.binary(max_size=64),
    )


def _sender_context(tx: SenderEndpoint) -> tuple[int, int, int]:
    if tx.key is None:
        return 5, 1, 1
    return tx.key.receiver_session.value, tx.epoch, tx.ledger.entry(tx.key).last_sequence


# ------------------------------------------------------------------ invariants


def _check_sender(tx: SenderEndpoint, now: int) -> None:
    for key in tx.ledger.keys():  # noqa: SIM118 (a ledger method, not a dict)
        entry = tx.ledger.entry(key)
        for r in R:
            assert entry.consumed[r] + entry.returned[r] <= entry.grant_total[r] <= U64_MAX
    stats = tx.statistics()
    assert stats.protocol_violations >= 0
    tx.get_timer()
    tx.handle_timer(now)
    tx.messages_to_send(now)  # every message it builds encodes


def _check_receiver(rx: CreditReceiver, ep: ReceiverEndpoint, now: int) -> None:
    stats = rx.allocator.statistics()
    for r, cap in stats.capacity.items():
        assert stats.outstanding[r] <= cap
    ep.statistics()
    ep.get_timer()
    rx.messages_to_send(now)


# ------------------------------------------------------------------ the tests


@pytest.mark.parametrize("state", SENDER_STATES)
@settings(max_examples=30)
@given(data=st.data())
def test_sender_endpoint_answers_any_peer_input_with_documented_events(
    state: str, data: st.DataObject
) -> None:
    tx, tokens = build_sender(state)
    now = 3_000_000
    for _ in range(data.draw(st.integers(1, 5), label="bursts")):
        batch = data.draw(
            st.lists(peer_input(*_sender_context(tx)), min_size=1, max_size=4), label="batch"
        )
        now += data.draw(st.sampled_from([0, 1, 1_000_000, 20_000_000]), label="dt")
        events = tx.receive_batch(batch, now)
        assert all(type(e) is EndpointEvent and e.kind in KINDS for e in events), events
        _check_sender(tx, now)
        if tokens and data.draw(st.booleans(), label="complete"):
            events = tx.complete(tokens.pop(), now)
            assert all(e.kind in KINDS for e in events)
        if data.draw(st.booleans(), label="reserve"):
            result = tx.try_reserve(CHARGE, now)
            assert isinstance(result, ReservationToken | BackpressureInfo)


@pytest.mark.parametrize("state", RECEIVER_STATES)
@settings(max_examples=30)
@given(data=st.data())
def test_receiver_endpoint_answers_any_peer_input_with_documented_events(
    state: str, data: st.DataObject
) -> None:
    rx, ep = build_receiver(state)
    now = 3_000_000
    for _ in range(data.draw(st.integers(1, 5), label="bursts")):
        batch = data.draw(
            st.lists(peer_input(rx.session.value, ep.epoch, 1), min_size=1, max_size=4),
            label="batch",
        )
        now += data.draw(st.sampled_from([0, 1, 1_000_000, 20_000_000]), label="dt")
        for raw in batch:
            if ep.closed:
                with pytest.raises(LocalProtocolError):
                    ep.receive_message(raw, now)
                continue
            events = ep.receive_message(raw, now)
            assert all(type(e) is EndpointEvent and e.kind in KINDS for e in events), events
        _check_receiver(rx, ep, now)


def test_a_level_report_near_a_u64_grant_states_u64_max_instead_of_failing() -> None:
    """Found by the fuzz test above (CI, seed 259049500868829090395814465604343732613): a
    receiver grants DATA_BYTES 2**64 - 2, the sender returns what is idle and reserves one
    charge; its version-2 report's demand, consumed + returned + level, is past u64. The report
    must still encode (stating U64_MAX), not raise out of messages_to_send."""
    tx, tokens = build_sender("fencing")
    now = 3_000_000
    new_epoch = b"\x88\x05\x01\x81\x01\x01\x05\x00\x00\x00"  # an activation at epoch 5
    huge = (  # an update of epoch 5 granting DATA_BYTES 2**64 - 2 and 2 REQUEST_SLOTS
        b"\x8a\x01\x01\x00\x00\x05\x01\x03\x01\x82\x82\x01\x1b\xff\xff\xff\xff\xff\xff\xff\xfe"
        b"\x82\x02\x02\x00"
    )
    heartbeat = b"\x84\x04\x01\x81\x01\x00"
    tx.receive_batch([new_epoch], now)
    tx.messages_to_send(now)
    tx.complete(tokens.pop(), now)
    now += 1_000_000
    tx.receive_batch([new_epoch, huge, heartbeat], now)
    tx.messages_to_send(now)
    assert isinstance(tx.try_reserve(CHARGE, now), ReservationToken)
    now += 1_000_000
    tx.receive_batch([heartbeat], now)
    tx.get_timer()
    tx.handle_timer(now)
    reports = [decode(m) for m in tx.messages_to_send(now)]
    demands = [a.amount for m in reports for a in getattr(m, "pending_demand", ())]
    assert U64_MAX in demands, reports  # the report went out, stating the most a u64 can


def test_a_reserve_the_returned_part_of_a_u64_grant_crowds_out_waits_instead_of_raising() -> None:
    """Found by the fuzz test above (a pip-only venv, 8 December): two charges reserved, then
    an update granting DATA_BYTES 2**64 - 2, whose idle part the version-2 sender returns; the
    next 4 KiB charge leaves consumed + returned + amount past u64. It raised
    ArithmeticOverflow out of ``try_reserve`` (and out of the gate's pick, so out of every
    dispatch pass); it must be answered, blocked, like any charge the credit does not cover."""
    tx, tokens = build_sender("fencing")
    now = 3_000_000
    empty = b"\x8a\x01\x01\x00\x00\x05\x00\x00\x00\x80\x00"  # an update of epoch 5, no grants
    huge = (
        b"\x8a\x01\x01\x00\x00\x05\x01\x03\x00\x81\x82\x01\x1b\xff\xff\xff\xff\xff\xff\xff\xfe\x00"
    )
    for batch, complete in (([empty], False), ([empty], True), ([huge], False)):
        tx.receive_batch(batch, now)
        _check_sender(tx, now)
        if complete:
            tx.complete(tokens.pop(), now)
        result = tx.try_reserve(CHARGE, now)
        assert isinstance(result, ReservationToken | BackpressureInfo)
    assert isinstance(result, BackpressureInfo)  # the returned grant left nothing to cover it
    _check_sender(tx, now)  # its report still encodes
    key = tx.key
    assert key is not None
    entry = tx.ledger.entry(key)
    assert entry.consumed[R.DATA_BYTES] + entry.returned[R.DATA_BYTES] + 4096 > U64_MAX
