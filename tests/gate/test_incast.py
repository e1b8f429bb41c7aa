"""Incast: 16 senders against an 8-slot receiver, with and without receiver credit.

RFC "Motivation": with 16 senders targeting one receiver, every sender can observe local
capacity while the receiver is exhausted. Each credited sender here is a real dispatch loop (an
``AdmissionQueue``, a REQUIRED ``DispatchGate`` and a ``SenderEndpoint``) whose control messages
cross lossy, duplicating, reordering ``FaultyChannel`` s; its committed payload lands at the
receiver, is consumed, and completes through the gate. The baseline runs the same offered load
with a fixed per-sender window and no credit at all, and must show the overload the gate
prevents: the receiver holds more than its 8 slots.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable

import attrs

from tent_credit import (
    AllocatorConfig,
    CreditMode,
    CreditReceiver,
    CreditResource,
    DispatchContext,
    DispatchGate,
    GateConfig,
    GateToken,
    Plan,
    SessionId,
    charge_for_plan,
)
from tent_credit.testing import FaultRates, LoopbackNetwork
from tent_sched import AdmissionQueue, OwnerRequest, QueueLimits, TaskStatus

R = CreditResource
SLOT = 4096
RX = 1
SLOTS = 8
SENDERS = 16
TICKS = 3_000
TICK_NS = 10_000
ARRIVAL_EVERY = 4  # each sender offers one transfer every 4 ticks: ~4 per tick in all
FIXED_WINDOW = 2  # the baseline's per-sender window (16 x 2 = 32 > 8)
CHARGE = charge_for_plan(Plan.REMOTE_DIRECT_WRITE, SLOT)
assert CHARGE is not None
LIMITS = QueueLimits(max_outstanding_owners=16, max_outstanding_bytes=1 << 30)
FAULTS = FaultRates(drop=0.05, duplicate=0.1, reorder=0.2, max_delay_ns=30_000)


def receiver() -> CreditReceiver:
    assert CHARGE is not None
    one = CHARGE.as_dict()
    config = AllocatorConfig(
        capacity={r: a * SLOTS for r, a in one.items()},
        control_slots=4,
        max_grant={r: a * 2 for r, a in one.items()},
        max_keys=SENDERS,
        retry_after_us=100,
    )
    return CreditReceiver(config, SessionId(1), freshness_ttl_ms=50, refresh_interval_ns=2_000_000)


@attrs.frozen(kw_only=True)
class IncastResult:
    offered: int
    completed: tuple[int, ...]  # per sender
    peak_occupied_slots: int
    peak_reserved_slots: int  # allocator outstanding (granted, not released or reclaimed)
    peak_in_flight: int  # committed and not completed, summed over the senders' gates


def offer(
    queue: AdmissionQueue, public: itertools.count[int], request: Callable[[int], OwnerRequest]
) -> bool:
    if queue.statistics().outstanding_owners >= LIMITS.max_outstanding_owners:
        return False  # the local queue is full: the offer waits (bounded, not buried)
    queue.try_admit(1, 1 << 30, [request(next(public))])
    return True


def gated_request(ctx: DispatchContext) -> Callable[[int], OwnerRequest]:
    def request(public_id: int) -> OwnerRequest:
        return OwnerRequest(public_id=public_id, length=SLOT, gate_key=ctx.gate_key, context=ctx)

    return request


@functools.cache  # deterministic (seeded channels, explicit clock): both tests share one run
def run_credited(seed: int) -> IncastResult:
    net = LoopbackNetwork(receiver(), seed=seed, rates=FAULTS)
    queues: dict[int, AdmissionQueue] = {}
    gates: dict[int, DispatchGate] = {}
    publics: dict[int, itertools.count[int]] = {}
    completed = dict.fromkeys(range(1, SENDERS + 1), 0)
    in_flight = 0
    offered = 0
    peak_in_flight = 0

    def on_complete(peer: int, token: GateToken, owner_id: int) -> Callable[[int], object]:
        def done(now_ns: int) -> None:
            nonlocal in_flight
            gates[peer].complete(token, now_ns)
            queues[peer].complete(owner_id, TaskStatus.COMPLETED)
            completed[peer] += 1
            in_flight -= 1

        return done

    now = 0
    for peer in completed:
        endpoint = net.add_sender(peer, now, mode=CreditMode.REQUIRED)
        gates[peer] = DispatchGate(GateConfig(mode=CreditMode.REQUIRED))
        gates[peer].add_endpoint(RX, endpoint)
        queues[peer] = AdmissionQueue(LIMITS)
        publics[peer] = itertools.count(1)
    for tick in range(TICKS):
        now += TICK_NS
        for peer, queue in queues.items():
            gate = gates[peer]
            if (tick + peer) % ARRIVAL_EVERY == 0:
                ctx = gate.context(Plan.REMOTE_DIRECT_WRITE, RX)
                offered += offer(queue, publics[peer], gated_request(ctx))
            result = queue.pick_for_dispatch(4, 1 << 30, now_ns=now, eligibility=gate)
            gate.observe_pick(result, queue.owner, now)
            for picked in result.picked:
                token = picked.token
                assert isinstance(token, GateToken) and token.reservation is not None
                gate.commit(token)  # the in-process transport always accepts the submit
                owner_id = picked.owner.owner_id
                net.send_committed(
                    peer, token.reservation, now, on_complete=on_complete(peer, token, owner_id)
                )
                in_flight += 1
            assert result.rejected == ()  # no restart in this run: snapshots stay valid
        peak_in_flight = max(peak_in_flight, in_flight)
        net.step(now)
    stats = net.statistics()
    for endpoint in net.senders.values():
        assert endpoint.statistics().protocol_violations == 0
    return IncastResult(
        offered=offered,
        completed=tuple(completed.values()),
        peak_occupied_slots=stats.peak_occupied.get(R.REQUEST_SLOTS, 0),
        peak_reserved_slots=stats.peak_outstanding.get(R.REQUEST_SLOTS, 0),
        peak_in_flight=peak_in_flight,
    )


def run_fixed_window(seed: int) -> IncastResult:
    assert CHARGE is not None
    amounts = CHARGE.as_dict()
    net = LoopbackNetwork(receiver(), seed=seed, rates=FAULTS)
    queues = {peer: AdmissionQueue(LIMITS) for peer in range(1, SENDERS + 1)}
    publics = {peer: itertools.count(1) for peer in queues}
    window = dict.fromkeys(queues, 0)
    completed = dict.fromkeys(queues, 0)
    offered = 0
    peak_in_flight = 0

    def on_complete(peer: int, owner_id: int) -> Callable[[int], object]:
        def done(_now_ns: int) -> None:
            queues[peer].complete(owner_id, TaskStatus.COMPLETED)
            window[peer] -= 1
            completed[peer] += 1

        return done

    for peer in queues:
        net.add_baseline_sender(peer)
    now = 0
    for tick in range(TICKS):
        now += TICK_NS
        for peer, queue in queues.items():
            if (tick + peer) % ARRIVAL_EVERY == 0:
                offered += offer(
                    queue,
                    publics[peer],
                    lambda public_id: OwnerRequest(public_id=public_id, length=SLOT),
                )
            room = FIXED_WINDOW - window[peer]
            for picked in queue.pick_for_dispatch(room, 1 << 30, now_ns=now).picked:
                owner_id = picked.owner.owner_id
                net.send_uncredited(peer, amounts, now, on_complete=on_complete(peer, owner_id))
                window[peer] += 1
        peak_in_flight = max(peak_in_flight, sum(window.values()))
        net.step(now)
    stats = net.statistics()
    return IncastResult(
        offered=offered,
        completed=tuple(completed.values()),
        peak_occupied_slots=stats.peak_occupied.get(R.REQUEST_SLOTS, 0),
        peak_reserved_slots=stats.peak_outstanding.get(R.REQUEST_SLOTS, 0),
        peak_in_flight=peak_in_flight,
    )


def test_sixteen_credited_senders_never_exceed_the_receivers_eight_slots() -> None:
    result = run_credited(seed=7)
    assert result.peak_occupied_slots <= SLOTS
    assert result.peak_reserved_slots <= SLOTS
    assert result.peak_in_flight <= SLOTS
    # and the receiver is actually used: the bound binds, work flows, no sender starves
    assert result.peak_occupied_slots == SLOTS
    assert all(done > 0 for done in result.completed)
    assert sum(result.completed) > TICKS // 10


def test_the_same_load_with_a_fixed_window_and_no_credit_overloads_the_receiver() -> None:
    credited = run_credited(seed=7)
    baseline = run_fixed_window(seed=7)
    assert baseline.peak_occupied_slots > SLOTS  # the overload the gate prevents
    assert baseline.peak_reserved_slots == 0  # nothing was ever reserved
    assert credited.peak_occupied_slots <= SLOTS < baseline.peak_occupied_slots
    print(  # reported with -s: both peaks side by side
        f"\nincast 16 -> 8 slots: credited peak occupied {credited.peak_occupied_slots}, "
        f"reserved {credited.peak_reserved_slots}; fixed window {FIXED_WINDOW} peak occupied "
        f"{baseline.peak_occupied_slots}; completed {sum(credited.completed)} vs "
        f"{sum(baseline.completed)} of {credited.offered} / {baseline.offered} offered"
    )
