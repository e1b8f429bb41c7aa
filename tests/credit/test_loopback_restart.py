"""The loopback harness neither hides nor invents behaviour across restarts (issue 10 item 11)."""

from __future__ import annotations

from tent_credit import (
    AllocatorConfig,
    CreditReceiver,
    CreditResource,
    NegotiationState,
    Plan,
    SessionId,
    charge_for_plan,
)
from tent_credit.testing import LoopbackNetwork

R = CreditResource
CHARGE = charge_for_plan(Plan.REMOTE_DIRECT_WRITE, 4096)
assert CHARGE is not None


def receiver(session: int) -> CreditReceiver:
    one = CHARGE.as_dict()
    config = AllocatorConfig(
        capacity={r: a * 8 for r, a in one.items()},
        control_slots=4,
        max_grant={r: a * 4 for r, a in one.items()},
        max_keys=8,
        retry_after_us=100,
    )
    return CreditReceiver(config, SessionId(session), initial_grant=dict(one))


def run_until(net: LoopbackNetwork, now: int, end: int, step: int = 1_000) -> int:
    while now < end:
        now += step
        net.step(now)
    return now


def test_work_that_landed_but_was_not_released_completes_at_a_receiver_restart() -> None:
    # Item 11: the restart dropped landed-but-unreleased credited work silently; its sender
    # waited for that completion forever (FENCING) and never dispatched again.
    net = LoopbackNetwork(receiver(1), land_delay_ns=1_000, consume_delay_ns=1_000_000)
    sender = net.add_sender(1, 0)
    now = run_until(net, 0, 10_000)
    assert net.try_send(1, CHARGE, now)
    now = run_until(net, now, now + 5_000)  # landed, the consumer has not released it yet
    assert net.receiver.allocator.statistics().outstanding[R.REQUEST_SLOTS] >= 1
    net.restart_receiver(receiver(2), now)
    now = run_until(net, now, now + 50_000)
    assert sender.state is NegotiationState.ACTIVE
    assert sender.statistics().fenced_in_flight == 0
    assert net.try_send(1, CHARGE, now)
    stats = net.statistics()
    assert stats.lost_at_restart == 1  # counted, not hidden
    assert stats.completed == 1


def test_fenced_epochs_complete_once_their_in_flight_work_drained() -> None:
    # Without fence completion every reconnect pinned its epoch's credit (and, now that
    # superseded epochs are bounded, the fifth reconnect would be refused).
    net = LoopbackNetwork(receiver(1), land_delay_ns=1_000, consume_delay_ns=1_000)
    net.add_sender(1, 0)
    now = run_until(net, 0, 10_000)
    for _ in range(10):
        net.try_send(1, CHARGE, now)  # may be blocked right after a reconnect
        net.reconnect_sender(1, now)
        now = run_until(net, now, now + 20_000)
    stats = net.receiver.allocator.statistics()
    assert stats.epochs_fencing == 0
    assert stats.fencing_outstanding[R.REQUEST_SLOTS] == 0
    assert net.statistics().fences_completed == 10
