"""The hostile-peer soak, short (issue 10; the long run is ``benchmarks/soak.py``)."""

from __future__ import annotations

from soak_scenario import HostileSoak, SoakConfig

# Bound on the tracemalloc slope after warm-up, in bytes per round of 30 ticks (~1.2 sender
# reconnects per round). Measured: ~900 B/round clean (start-up transients of a short run; the
# long benchmark run is flatter), ~2,900 B/round when fenced epoch records are never forgotten
# (the item 9 leak class, one record per reconnect).
MAX_SLOPE_BYTES_PER_ROUND = 1_800
CONFIG = SoakConfig(seed=3, rounds=30, ticks_per_round=30, warmup_rounds=4)


def test_hostile_peers_never_overfill_the_honest_settle_and_memory_stays_flat() -> None:
    report = HostileSoak(CONFIG).run()
    for resource, capacity in report.capacity.items():
        assert report.peak_occupied.get(resource, 0) <= capacity
        assert report.peak_outstanding.get(resource, 0) <= capacity
    assert report.peak_outstanding["REQUEST_SLOTS"] == report.capacity["REQUEST_SLOTS"]  # busy
    assert report.lies_told > 0 and report.writes_refused > 0 and report.keys_quarantined > 0
    assert report.honest_quarantined == 0  # an honest (or merely greedy) sender is never refused
    assert report.reconnects > 0 and report.receiver_restarts == 1
    assert report.settle_ticks is not None, report.stuck
    assert report.completed_honest == report.offered > 0
    assert len(report.memory_samples) == CONFIG.rounds - CONFIG.warmup_rounds
    assert report.memory_slope() < MAX_SLOPE_BYTES_PER_ROUND, report.memory_samples
