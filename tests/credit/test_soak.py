"""The hostile-peer soak, short (issue 10; the long run is ``benchmarks/soak.py``)."""

from __future__ import annotations

from soak_scenario import HostileSoak, SoakConfig

# Bound on the tracemalloc slope after warm-up, in bytes per round of 250 ticks. An epoch record
# that is never forgotten costs ~1 kB; 250 ticks see ~2.5 reconnects; a leak of one record per
# reconnect (item 9) is therefore ~2.5 kB/round, a leaked event or message per tick far more.
MAX_SLOPE_BYTES_PER_ROUND = 1_000


def test_hostile_peers_never_overfill_and_the_honest_settle() -> None:
    report = HostileSoak(SoakConfig(seed=3, rounds=12, warmup_rounds=3)).run()
    for resource, capacity in report.capacity.items():
        assert report.peak_occupied.get(resource, 0) <= capacity
        assert report.peak_outstanding.get(resource, 0) <= capacity
    assert report.peak_occupied["REQUEST_SLOTS"] == report.capacity["REQUEST_SLOTS"]  # contended
    assert report.lies_told > 0 and report.writes_refused > 0 and report.keys_quarantined > 0
    assert report.honest_quarantined == 0  # an honest (or merely greedy) sender is never refused
    assert report.reconnects > 0 and report.receiver_restarts == 1
    assert report.settle_ticks is not None, report.stuck
    assert report.completed_honest == report.offered > 0
    assert report.memory_slope() < MAX_SLOPE_BYTES_PER_ROUND, report.memory_samples
