"""Issue 14's "What to reproduce": each scenario's shape, with its link parameters fixed."""

from __future__ import annotations

import math

import pytest
from tent_transport.sim import (
    dropped_feasible,
    named_workload,
    simulate,
    summarize,
    transmit_follow_ns,
)
from tent_transport.sim._scenarios import (
    limit_failover,
    limit_mixed,
    limit_quarantine,
    probe_3980,
    theta_sweep,
)

MS = 1_000_000


def test_theta_sweep_below_one_drops_feasible_work_and_above_only_what_the_wait_rules_out() -> None:
    workload = theta_sweep(load=1.1, horizon_ns=150 * MS)
    baseline = simulate(workload, theta=0.0)
    runs = {theta: simulate(workload, theta=theta) for theta in (0.5, 0.9, 1.2, 1.5)}
    feasible = {theta: dropped_feasible(run, baseline) for theta, run in runs.items()}
    predicted_ok = {
        theta: sum(1 for o in run.outcomes if o.dropped_mlu is not None and o.dropped_mlu < 1.0)
        for theta, run in runs.items()
    }
    # below 1.0: requests that made their window without the drop, and requests the predictor
    # itself expected to make it, are cancelled
    assert feasible[0.5] > 0 and predicted_ok[0.5] > 0 and predicted_ok[0.9] > 0
    # 1.2-1.5: only requests the wait alone rules out
    assert feasible[1.2] == feasible[1.5] == 0
    assert predicted_ok[1.2] == predicted_ok[1.5] == 0
    drops = [summarize(runs[t]).dropped for t in (0.5, 0.9, 1.2, 1.5)]
    assert drops == sorted(drops, reverse=True) and drops[-1] > 0
    # under overload the drop pays: more requests on time than with it off
    assert summarize(runs[1.2]).on_time_of_all > summarize(baseline).on_time_of_all + 0.1


@pytest.mark.parametrize("theta", [1.0, 1.2, 1.5, 2.0])
def test_the_3980_signature_dispatched_per_pick_is_theta_over_the_increment(theta: float) -> None:
    summary = summarize(simulate(probe_3980(bursts=3), theta=theta))
    assert summary.dispatched_per_pick == math.ceil(theta / 0.22) - 1
    assert abs(summary.dispatched_per_pick - theta / 0.22) < 1
    if theta >= 1.5:  # a count set by θ, not by feasibility: dispatched owners miss
        assert summary.on_time_of_dispatched < 0.7
    else:
        assert summary.on_time_of_dispatched >= 0.8


def test_arbitration_gives_tight_flows_the_link_and_leaves_the_total_unchanged() -> None:
    workload = named_workload("arbitration-2792")
    off = summarize(simulate(workload, arbitration=False))
    on = summarize(simulate(workload, arbitration=True))
    tight_off, tight_on = off.class_throughput_gbps["tight"], on.class_throughput_gbps["tight"]
    # RFC #2792's shape: ~1/4 of the link (12.1 of 48.4) → most of it (44.6)
    assert tight_off == pytest.approx(48.4 / 4, rel=0.05)
    assert tight_on > 3 * tight_off
    assert on.throughput_gbps == pytest.approx(off.throughput_gbps, rel=0.01)
    assert on.class_on_time["tight"] > 0.9
    assert off.class_on_time["tight"] < 0.1


def test_the_transmit_estimate_follows_a_slowing_link_whatever_the_batch_depth() -> None:
    deep = simulate(named_workload("meters-slowdown"))
    shallow = simulate(named_workload("meters-slowdown-shallow"))
    follow = {
        name: transmit_follow_ns(run, rail="nic0", change_ns=200 * MS)
        for name, run in (("deep", deep), ("shallow", shallow))
    }
    for value in follow.values():  # α 0.9 per 10 ms interval: a ~10-interval time constant
        assert value is not None and 80 * MS <= value <= 130 * MS
    assert abs(follow["deep"] - follow["shallow"]) <= 20 * MS  # type: ignore[operator]
    before = {
        name: [s for s in run.rail_samples if 100 * MS <= s.t_ns < 200 * MS]
        for name, run in (("deep", deep), ("shallow", shallow))
    }
    # deep batches on a healthy link: the selection EWMA sits on its lower clamp (0.1 × seed)
    assert all(s.selection_bps == pytest.approx(0.1 * 8e9) for s in before["deep"])
    assert all(s.selection_bps > 0.8 * 8e9 for s in before["shallow"])
    assert all(s.transmit_bps > 0.85 * 8e9 for s in before["deep"])


def test_mixed_submits_hide_their_bytes_from_the_predictor() -> None:
    same = summarize(simulate(limit_mixed("same_submit")))
    apart = summarize(simulate(limit_mixed("separate_submit")))
    assert same.mean_dispatching_bytes < 0.7 * same.mean_rail_bytes
    assert apart.mean_dispatching_bytes > 0.9 * apart.mean_rail_bytes
    assert same.on_time_of_dispatched < apart.on_time_of_dispatched


def test_quarantined_owners_make_the_predictor_pessimistic_over_time() -> None:
    healthy = simulate(limit_quarantine(0))
    lossy = simulate(limit_quarantine(40))
    half = lossy.measure_ns[1] // 2
    early = sum(1 for o in lossy.outcomes if o.reason == "dropped" and o.submit_ns < half)
    late = sum(1 for o in lossy.outcomes if o.reason == "dropped" and o.submit_ns >= half)
    assert late > 2 * early
    assert summarize(lossy).dropped > 10 * summarize(healthy).dropped
    assert lossy.dispatching_bytes_end > 0 and healthy.dispatching_bytes_end == 0
    assert summarize(lossy).never_ended > 0


def test_failover_keeps_the_charge_while_the_slow_path_recovers() -> None:
    healthy = summarize(simulate(limit_failover(0)))
    failing = summarize(simulate(limit_failover(10)))
    assert failing.mean_dispatching_bytes > 3 * healthy.mean_dispatching_bytes
    assert failing.mean_dispatching_bytes > 3 * failing.mean_rail_bytes
    assert failing.dropped > 10 * healthy.dropped
