"""Issue 27 item 4: one peer's control frames have a budget (``control/_rate``): past it its
connection is not read for a while, and a peer that keeps at it is a flood."""

from __future__ import annotations

import pytest
from tent_transport.control._rate import ControlRate


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_frames_within_the_budget_are_never_held_back() -> None:
    clock = Clock()
    rate = ControlRate(100.0, 50, flood_s=1.0, clock=clock)
    assert rate.charge(50) == 0.0  # the burst
    for _ in range(100):  # then exactly the rate: 1 frame per 10 ms
        clock.now += 0.01
        assert rate.charge(1) == 0.0
    assert rate.throttled == 0 and not rate.flooding


def test_past_the_burst_the_wait_repays_the_debt_at_the_rate() -> None:
    clock = Clock()
    rate = ControlRate(100.0, 50, flood_s=1.0, clock=clock)
    assert rate.charge(70) == pytest.approx(0.2)  # 20 frames over, 100 a second
    clock.now += 0.2
    assert rate.charge(1) == pytest.approx(0.01)  # the debt was repaid, nothing saved up
    assert rate.throttled == 2 and rate.throttled_s == pytest.approx(0.21)


def test_a_peer_that_keeps_over_its_rate_becomes_a_flood() -> None:
    clock = Clock()
    rate = ControlRate(100.0, 50, flood_s=1.0, clock=clock)
    waited = 0.0
    for _ in range(10_000):  # bounded: 20 frames a read, read when allowed
        if rate.flooding:
            break
        wait = rate.charge(20)
        clock.now += wait + 0.001
        waited += wait
    assert rate.flooding
    assert 1.0 <= waited <= 4.0  # the level grows by half the time held back


def test_an_honest_burst_is_held_back_a_moment_and_drains() -> None:
    clock = Clock()
    rate = ControlRate(100.0, 50, flood_s=1.0, clock=clock)
    for _ in range(20):  # bounded: a reconnect's burst, then quiet, twenty times
        wait = rate.charge(80)
        clock.now += wait + 5.0
        assert not rate.flooding
    assert rate.throttled == 20


@pytest.mark.parametrize(
    "args",
    [
        (0.0, 1, 1.0),
        (1.0, 0, 1.0),
        (1.0, 1, 0.0),
        (-1.0, 1, 1.0),
        (float("inf"), 1, 1.0),
        (float("nan"), 1, 1.0),
        (1.0, "1", 1.0),
        (1.0, True, 1.0),
    ],
)
def test_a_budget_that_is_not_a_finite_positive_number_is_refused(
    args: tuple[float, int, float],
) -> None:
    with pytest.raises(ValueError):
        ControlRate(args[0], args[1], flood_s=args[2])


@pytest.mark.parametrize("bad", [(0.0, 1, 1.0), (1.0, 1), [1.0, 1, 1.0], (1.0, -5, 1.0)])
def test_an_engine_refuses_a_bad_control_rate_before_anything_starts(bad: object) -> None:
    from tent_transport.control import PskIdentity
    from tent_transport.engine import EngineOptions

    with pytest.raises(ValueError):
        EngineOptions(
            peer_id=1,
            identity=PskIdentity(local_peer=1, keys={2: b"k" * 32}),
            control_rate=bad,  # type: ignore[arg-type]
        )
