"""A credit-stalled owner's repeated pick answered from memory (``DispatchGate._blocked_again``,
``SenderEndpoint.repeat_blocked``) must be indistinguishable from the full decision: two rigs
run the same random schedule, one with the memory and one without, and every answer, counter,
stall, level and control message must agree at every step, across grants, landings, releases,
completions, cancels and a freshness TTL running out."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_gate import DIRECT, RX, Rig, picked_ids, pump, rx_config

from tent_credit import CreditReceiver, ReservationToken, SessionId
from tent_credit._endpoints import SenderEndpoint

OPS = (
    "admit",
    "pick",
    "land",
    "finish",
    "release",
    "exchange",
    "tick",
    "cancel",
    "expire",
    "direct",
    "withdraw",
)


def _rig(versions: tuple[int, ...], ttl_ms: int, *, repeats: bool) -> tuple[Rig, SenderEndpoint]:
    rig = Rig()
    rig.receivers[RX] = CreditReceiver(
        rx_config(slots=3), SessionId(RX * 100), freshness_ttl_ms=ttl_ms, versions=versions
    )
    tx = rig.connect(RX)
    if not repeats:  # an endpoint that never vouches: every pick is decided in full
        tx.repeat_stamp = lambda charge: None  # type: ignore[method-assign]
    return rig, tx


class _Run:
    """One rig and the transfers it has in each stage (owner ids, oldest first)."""

    def __init__(self, versions: tuple[int, ...], ttl_ms: int, *, repeats: bool) -> None:
        self.rig, self.tx = _rig(versions, ttl_ms, repeats=repeats)
        self.queued: list[int] = []
        self.picked: list[int] = []
        self.landed: list[int] = []
        self.finished: list[tuple[int, int]] = []  # (owner, epoch) landed and completed

    def step(self, op: str) -> object:
        rig, tx, rx = self.rig, self.tx, self.rig.receivers[RX]
        if op == "admit" and len(self.queued) < 6:
            self.queued.append(rig.admit())
        elif op == "pick":
            result = rig.pick()
            for owner in picked_ids(result):
                self.queued.remove(owner)
                self.picked.append(owner)
            return (picked_ids(result), result.blocked, result.dropped, result.rejected)
        elif op == "land" and self.picked:
            owner = self.picked.pop(0)
            rx.data_landed(7, 0, tx.epoch, DIRECT.as_dict())
            self.landed.append(owner)
        elif op == "finish" and self.landed:
            owner = self.landed.pop(0)
            rig.finish(owner)
            self.finished.append((owner, tx.epoch))
        elif op == "release" and self.finished:
            _, epoch = self.finished.pop(0)
            rx.release(7, 0, epoch, DIRECT.as_dict())
        elif op == "exchange":
            rig.exchange()
        elif op == "tick":
            rig.now += 10_000
        elif op == "cancel" and self.queued:
            owner = self.queued.pop()
            rig.queue.cancel(owner)
            rig.gate.forget(owner)
        elif op == "direct":  # the endpoint used beside the gate: a reserve, given back at once
            token = tx.try_reserve(DIRECT, rig.now)
            if isinstance(token, ReservationToken):
                tx.rollback(token)
                return "reserved"
            return token
        elif op == "withdraw" and tx.key is not None:  # a caller restates the demand itself
            tx.set_pending_demand({})
        elif op == "expire":  # past any TTL: the peer goes STALE until a refresh comes
            rig.now += 50_000_000
            pump(tx, rx, rig.now, rounds=1)
        return None

    def observed(self) -> tuple[Any, ...]:
        rig, tx = self.rig, self.tx
        owners = self.queued + self.picked
        return (
            rig.gate.statistics(),
            tx.statistics(),
            tx.ledger.statistics(),
            tx.state,
            dict(tx.level()) if tx.ahead else None,
            [rig.gate.stall(o) for o in owners],
            tx.messages_to_send(rig.now),
        )


# a caller that withdraws the demand (or reserves directly) between two picks of a stalled
# owner: the next pick must restate the demand, as a full decision does
_BESIDE = ["admit", "admit", "pick", "pick", "pick", "withdraw", "pick", "exchange", "pick"]
_DIRECT_BETWEEN = ["admit", "admit", "pick", "pick", "withdraw", "direct", "pick", "pick"]


@settings(max_examples=150, deadline=None)
@example(versions=(1,), ttl_ms=0, ops=_BESIDE)
@example(versions=(1, 2), ttl_ms=0, ops=_BESIDE)
@example(versions=(1, 2), ttl_ms=0, ops=_DIRECT_BETWEEN)
@given(
    versions=st.sampled_from([(1,), (1, 2)]),
    ttl_ms=st.sampled_from([0, 20]),
    ops=st.lists(st.sampled_from(("pick", "pick", *OPS)), min_size=1, max_size=60),
)
def test_a_remembered_blocked_pick_is_indistinguishable_from_a_full_one(
    versions: tuple[int, ...], ttl_ms: int, ops: list[str]
) -> None:
    full = _Run(versions, ttl_ms, repeats=False)
    fast = _Run(versions, ttl_ms, repeats=True)
    for op in ops:
        assert fast.step(op) == full.step(op), op
        assert fast.observed() == full.observed(), op


def test_the_repeat_is_taken_for_a_stalled_owner_and_dropped_by_a_grant() -> None:
    run = _Run((1, 2), 0, repeats=True)
    taken: list[bool] = []
    original = run.tx.repeat_blocked

    def spy(stamp: tuple[object, ...], now_ns: int) -> bool:
        taken.append(original(stamp, now_ns))
        return taken[-1]

    run.tx.repeat_blocked = spy  # type: ignore[method-assign]
    for _ in range(4):
        run.step("admit")
    assert run.step("pick") == ([], tuple(run.queued), (), ())  # no credit yet: all stall
    # decided in full again: the owners skipped behind the head joined the route's demand
    # after the head's decision, so what it read has changed
    run.step("pick")
    assert taken == []
    run.step("pick")
    run.step("tick")
    run.step("pick")
    assert taken == [True, True]  # then the stalled head is answered from memory
    run.step("exchange")  # the level reaches the receiver, which grants what it has free
    granted = run.step("pick")
    assert taken[-1] is False  # the grant moved the ledger: decided in full again
    assert isinstance(granted, tuple) and granted[0] == run.picked
