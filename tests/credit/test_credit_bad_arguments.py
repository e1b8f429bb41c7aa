"""Garbage arguments to tent_credit's public calls: only typed errors, state unchanged (issue 10
items 5 and 12, as a class).

Every argument of every public mutating call of the endpoints, the gate, the ledger, the
inbox, the negotiation and the value constructors is replaced in turn by each garbage value.
The call may succeed (some garbage is valid) or raise; if it raises, the error must be a
``tent_credit.errors`` type, its message short, and the object's ``statistics()`` snapshot
unchanged (the ledger's documented ``updates_rejected`` counter aside). The garbage includes a
20,000-bit integer, so a message that formats an unbounded value fails too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

from tent_credit import (
    CreditCharge,
    CreditKey,
    CreditResource,
    Plan,
    SessionId,
    charge_for_plan,
)
from tent_credit._allocator import AllocatorConfig
from tent_credit._endpoints import CreditReceiver, SenderEndpoint
from tent_credit._gate import DispatchGate, GateConfig
from tent_credit._inbox import ControlInbox
from tent_credit._ledger import ReservationToken, SenderCreditLedger
from tent_credit._messages import CapabilityActivation, ReceiverCreditUpdate
from tent_credit._negotiation import CreditMode, PeerNegotiation
from tent_credit._wire import decode, encode
from tent_credit.errors import CreditError, InvalidArgument

R = CreditResource
SLOT = 4096
CHARGE = charge_for_plan(Plan.REMOTE_DIRECT_WRITE, SLOT)
assert CHARGE is not None
SESSION = SessionId(5)
KEY = CreditKey(receiver_session=SESSION, sender_peer=7, qos_class=0)

GARBAGE: tuple[Any, ...] = (None, 0, -1, 2**64, "", {}, [], object(), 1 << 20_000, 1.5, True)


def config() -> AllocatorConfig:
    return AllocatorConfig(
        capacity={R.DATA_BYTES: 8 * SLOT, R.REQUEST_SLOTS: 8, R.CONSUMER_SLOTS: 8},
        control_slots=4,
        max_grant={R.DATA_BYTES: 2 * SLOT, R.REQUEST_SLOTS: 2, R.CONSUMER_SLOTS: 2},
        max_keys=64,
        retry_after_us=100,
    )


@attrs.define
class World:
    """An activated, granted sender and its receiver, with a reserved and a committed token."""

    tx: SenderEndpoint
    rx: CreditReceiver
    reserved: ReservationToken
    committed: ReservationToken
    now: int


def world() -> World:
    rx = CreditReceiver(config(), SESSION)
    ep = rx.accept(7)
    tx = SenderEndpoint(sender_peer=7)
    tx.connect(0)
    now = 0
    assert CHARGE is not None
    for _ in range(4):
        now += 2_000_000
        for data in tx.messages_to_send(now):
            ep.receive_message(data, now)
        tx.receive_batch(ep.messages_to_send(now), now)
        if tx.key is not None:
            tx.set_pending_demand({r: 2 * a for r, a in CHARGE.parts})
    reserved, committed = tx.try_reserve(CHARGE, now), tx.try_reserve(CHARGE, now)
    assert isinstance(reserved, ReservationToken) and isinstance(committed, ReservationToken)
    tx.commit(committed)
    return World(tx=tx, rx=rx, reserved=reserved, committed=committed, now=now)


def _sender(w: World) -> tuple[Any, object]:
    return w.tx, (w.tx.statistics(), w.tx.ledger.statistics())


def _receiver(w: World) -> tuple[Any, object]:
    ep = w.rx.endpoints()[0]
    return ep, (ep.statistics(), w.rx.allocator.statistics())


def _credit_receiver(w: World) -> tuple[Any, object]:
    stats = tuple(ep.statistics() for ep in w.rx.endpoints())
    return w.rx, (stats, w.rx.allocator.statistics())


def _gate(w: World) -> tuple[Any, object]:
    gate = DispatchGate(GateConfig(mode=CreditMode.REQUIRED))
    gate.add_endpoint(9, w.tx)
    return gate, None


def _gate_stats(gate: DispatchGate, w: World) -> object:
    return gate.statistics(), w.tx.statistics(), w.tx.ledger.statistics()


def _ledger(_w: World) -> tuple[Any, object]:
    ledger = SenderCreditLedger(max_entries=2)
    ledger.activate(KEY, 1)
    ledger.apply_update(KEY, _update())
    return ledger, None


def _update() -> ReceiverCreditUpdate:
    return ReceiverCreditUpdate(
        qos_class=0,
        receiver_session_id=SESSION,
        epoch=1,
        sequence=1,
        grants=tuple(_amount(r, 4 * a) for r, a in (CHARGE.parts if CHARGE else ())),
    )


def _amount(r: CreditResource, a: int) -> Any:
    from tent_credit import CreditAmount

    return CreditAmount(resource=r, amount=a)


def _negotiation(_w: World) -> tuple[Any, object]:
    negotiation = PeerNegotiation(mode=CreditMode.REQUIRED, sender_peer=7)
    negotiation.start(1)
    return negotiation, None


def _inbox(_w: World) -> tuple[Any, object]:
    return ControlInbox(max_keys=2), None


def _snapshot(obj: Any, w: World) -> object:
    if isinstance(obj, SenderEndpoint):
        return _sender(w)[1]
    if isinstance(obj, DispatchGate):
        return _gate_stats(obj, w)
    if isinstance(obj, CreditReceiver):
        return _credit_receiver(w)[1]
    if isinstance(obj, SenderCreditLedger):
        # documented: a refused apply_update counts itself (and nothing else changes)
        return attrs.evolve(obj.statistics(), updates_rejected=0)
    if isinstance(obj, PeerNegotiation):
        return obj.snapshot()
    if obj is None:
        return None
    if hasattr(obj, "statistics"):
        return _receiver(w)[1] if type(obj).__name__ == "ReceiverEndpoint" else obj.statistics()
    return None


@attrs.frozen
class Case:
    """One public call: ``method`` of what ``factory`` builds, with arguments made from ``w``."""

    name: str
    factory: Callable[[World], tuple[Any, object]] | None
    method: str
    args: Callable[[World], tuple[Any, ...]]
    kwargs: Callable[[World], dict[str, Any]] = lambda _w: {}


def _activation() -> bytes:
    return encode(
        CapabilityActivation(
            versions=(1,), selected_version=1, receiver_session_id=SessionId(6), epoch=1
        )
    )


CASES = (
    # the sender endpoint
    Case("tx.connect", _sender, "connect", lambda w: (w.now,)),
    Case("tx.reconnect", _sender, "reconnect", lambda w: (w.now,)),
    Case("tx.disconnect", _sender, "disconnect", lambda w: (w.now,)),
    Case("tx.receive_message", _sender, "receive_message", lambda w: (_activation(), w.now)),
    Case("tx.receive_batch", _sender, "receive_batch", lambda w: ([_activation()], w.now)),
    Case("tx.try_reserve", _sender, "try_reserve", lambda w: (CHARGE, w.now)),
    Case("tx.set_pending_demand", _sender, "set_pending_demand", lambda w: ({R.DATA_BYTES: 1},)),
    Case("tx.commit", _sender, "commit", lambda w: (w.reserved,)),
    Case("tx.rollback", _sender, "rollback", lambda w: (w.reserved,)),
    Case("tx.complete", _sender, "complete", lambda w: (w.committed, w.now)),
    Case(
        "tx.return_unused",
        _sender,
        "return_unused",
        lambda w: (CreditCharge.of({R.REQUEST_SLOTS: 1}),),
    ),
    Case("tx.messages_to_send", _sender, "messages_to_send", lambda w: (w.now,)),
    Case("tx.handle_timer", _sender, "handle_timer", lambda w: (w.now,)),
    # the receiver side
    Case(
        "ep.receive_message", _receiver, "receive_message", lambda w: (b"\x83\x06\x01\x01", w.now)
    ),
    Case("ep.messages_to_send", _receiver, "messages_to_send", lambda w: (w.now,)),
    Case("ep.handle_timer", _receiver, "handle_timer", lambda w: (w.now,)),
    Case("rx.accept", _credit_receiver, "accept", lambda w: (8, 0)),
    Case("rx.disconnect", _credit_receiver, "disconnect", lambda w: (7, 0)),
    Case("rx.messages_to_send", _credit_receiver, "messages_to_send", lambda w: (w.now,)),
    Case("rx.endpoint", _credit_receiver, "endpoint", lambda w: (7, 0)),
    Case(
        "rx.data_landed", _credit_receiver, "data_landed", lambda w: (7, 0, 1, {R.REQUEST_SLOTS: 1})
    ),
    Case("rx.release", _credit_receiver, "release", lambda w: (7, 0, 1, {R.REQUEST_SLOTS: 1})),
    Case("rx.fence_complete", _credit_receiver, "fence_complete", lambda w: (7, 0, 1)),
    # the gate
    Case("gate.call", _gate, "__call__", lambda w: (None, w.now)),
    Case("gate.observe_pick", _gate, "observe_pick", lambda w: (None, lambda i: None, w.now)),
    Case("gate.forget", _gate, "forget", lambda w: (1,)),
    Case("gate.stall", _gate, "stall", lambda w: (1,)),
    Case("gate.commit", _gate, "commit", lambda w: (None,)),
    Case("gate.rollback", _gate, "rollback", lambda w: (None,)),
    Case("gate.complete", _gate, "complete", lambda w: (None, w.now)),
    Case("gate.add_endpoint", _gate, "add_endpoint", lambda w: (10, SenderEndpoint(sender_peer=1))),
    Case("gate.endpoint", _gate, "endpoint", lambda w: (9, 0)),
    Case("gate.snapshot", _gate, "snapshot", lambda w: (9, 0)),
    Case("gate.context", _gate, "context", lambda w: (Plan.REMOTE_DIRECT_WRITE, 9, 0)),
    # the ledger, the inbox, the negotiation
    Case("ledger.activate", _ledger, "activate", lambda w: (KEY, 2)),
    Case("ledger.deactivate", _ledger, "deactivate", lambda w: (KEY, 1)),
    Case("ledger.apply_update", _ledger, "apply_update", lambda w: (KEY, _update())),
    Case("ledger.try_reserve", _ledger, "try_reserve", lambda w: (KEY, CHARGE)),
    Case("ledger.return_credit", _ledger, "return_credit", lambda w: (KEY, CHARGE)),
    Case("ledger.entry", _ledger, "entry", lambda w: (KEY,)),
    Case("inbox.offer", _inbox, "offer", lambda w: (KEY, _update())),
    Case("negotiation.on_update", _negotiation, "on_update_accepted", lambda w: (SESSION, 1, 2)),
    Case("negotiation.on_new", _negotiation, "on_new_session_or_epoch", lambda w: (SESSION, 1, 2)),
    Case("negotiation.check_freshness", _negotiation, "check_freshness", lambda w: (2,)),
    # constructors and pure functions
    Case("CreditCharge.of", None, "CreditCharge.of", lambda w: ({R.DATA_BYTES: 1},)),
    Case("charge_for_plan", None, "charge_for_plan", lambda w: (Plan.REMOTE_DIRECT_WRITE, 4)),
    Case(
        "CreditKey",
        None,
        "CreditKey",
        lambda w: (),
        lambda w: {"receiver_session": SESSION, "sender_peer": 1, "qos_class": 0},
    ),
    Case("SessionId", None, "SessionId", lambda w: (1,)),
    Case("encode", None, "encode", lambda w: (_update(),)),
    Case("decode", None, "decode", lambda w: (encode(_update()),), lambda w: {"max_bytes": 4096}),
    Case(
        "SenderEndpoint",
        None,
        "SenderEndpoint",
        lambda w: (),
        lambda w: {"sender_peer": 1, "qos_class": 0, "usage_interval_ns": 5},
    ),
    Case(
        "CreditReceiver",
        None,
        "CreditReceiver",
        lambda w: (config(), SESSION),
        lambda w: {"initial_grant": {R.REQUEST_SLOTS: 1}, "freshness_ttl_ms": 0},
    ),
    Case("DispatchGate", None, "DispatchGate", lambda w: (GateConfig(),)),
    Case("ControlInbox", None, "ControlInbox", lambda w: (), lambda w: {"max_keys": 2}),
    Case(
        "SenderCreditLedger", None, "SenderCreditLedger", lambda w: (), lambda w: {"max_entries": 2}
    ),
    Case(
        "PeerNegotiation",
        None,
        "PeerNegotiation",
        lambda w: (),
        lambda w: {"mode": CreditMode.REQUIRED, "sender_peer": 1},
    ),
)
_FREE: dict[str, Callable[..., Any]] = {
    "CreditCharge.of": CreditCharge.of,
    "charge_for_plan": charge_for_plan,
    "CreditKey": CreditKey,
    "SessionId": SessionId,
    "encode": encode,
    "decode": decode,
    "SenderEndpoint": SenderEndpoint,
    "CreditReceiver": CreditReceiver,
    "DispatchGate": DispatchGate,
    "ControlInbox": ControlInbox,
    "SenderCreditLedger": SenderCreditLedger,
    "PeerNegotiation": PeerNegotiation,
}


def _positions(case: Case) -> list[str]:
    w = world()
    return [f"arg{i}" for i in range(len(case.args(w)))] + list(case.kwargs(w))


_PARAMS = [
    pytest.param(case, where, id=f"{case.name}-{where}")
    for case in CASES
    for where in _positions(case)
]


@pytest.mark.parametrize(("case", "where"), _PARAMS)
def test_garbage_argument_gives_a_typed_error_and_changes_nothing(case: Case, where: str) -> None:
    for garbage in GARBAGE:
        w = world()
        obj = case.factory(w)[0] if case.factory is not None else None
        call = getattr(obj, case.method) if obj is not None else _FREE[case.method]
        args, kwargs = list(case.args(w)), case.kwargs(w)
        if where.startswith("arg"):
            args[int(where[3:])] = garbage
        else:
            kwargs[where] = garbage
        before = _snapshot(obj, w)
        try:
            call(*args, **kwargs)
        except CreditError as exc:
            assert len(str(exc)) < 1000, str(exc)[:200]
            assert _snapshot(obj, w) == before, (case.name, where, type(garbage).__name__)
        except Exception as exc:
            pytest.fail(f"{case.name}({where}={type(garbage).__name__}) raised {exc!r:.200}")


# ---------------------------------------------------------------- the listed instances


@pytest.mark.parametrize("initial_grant", [3, "x", [1], {R.DATA_BYTES: -1}, {"DATA": 1}])
def test_credit_receiver_refuses_a_malformed_initial_grant(initial_grant: object) -> None:
    with pytest.raises(InvalidArgument):
        CreditReceiver(config(), SESSION, initial_grant=initial_grant)  # type: ignore[arg-type]


def test_credit_charge_of_a_non_iterable_is_invalid_argument() -> None:
    with pytest.raises(InvalidArgument):
        CreditCharge.of(0)  # type: ignore[arg-type]
