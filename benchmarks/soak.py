"""The hostile-peer soak, long; prints one JSON document (issue 10; docs/benchmarks.md).

Usage: ``python benchmarks/soak.py [--rounds 60] [--ticks-per-round 100] [--seed 1]``

The scenario is ``tests/credit/soak_scenario.py``: 16 senders (12 honest, 2 greedy, 2 liars)
against an 8-slot receiver over control channels with 20 % loss, 20 % duplication and 40 %
reordering, sender reconnects and a receiver restart, then the faults stop. Reported:

* the peaks of physical occupancy and of committed credit against capacity;
* refused writes, quarantined keys, honest keys quarantined (must be 0), lies told;
* whether (and how fast) the honest part settled once the faults stopped;
* memory: the tracemalloc slope after warm-up (bytes per round, least squares) and the RSS
  growth (``ru_maxrss``) over the run;
* a baseline in the same run: the same soak with honest senders only (no liars, no greedy), so
  the hostile run's throughput is a ratio, not a wall-clock figure on a loaded machine.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "credit"))

from soak_scenario import HostileSoak, SoakConfig, SoakReport


def _run(config: SoakConfig) -> tuple[SoakReport, float]:
    start = time.process_time()
    report = HostileSoak(config).run()
    return report, time.process_time() - start


def _summary(report: SoakReport, cpu_s: float) -> dict[str, object]:
    return {
        "ticks": report.ticks,
        "cpu_s": round(cpu_s, 2),
        "ticks_per_cpu_s": round(report.ticks / cpu_s, 1),
        "offered": report.offered,
        "completed_honest": report.completed_honest,
        "peak_occupied": report.peak_occupied,
        "peak_outstanding": report.peak_outstanding,
        "capacity": report.capacity,
        "writes_refused": report.writes_refused,
        "keys_quarantined": report.keys_quarantined,
        "honest_quarantined": report.honest_quarantined,
        "lies_told": report.lies_told,
        "reconnects": report.reconnects,
        "reconnects_refused_at_bound_or_quarantine": report.reconnects_refused,
        "receiver_restarts": report.receiver_restarts,
        "settle_ticks": report.settle_ticks,
        "stuck": list(report.stuck),
        "memory_samples": len(report.memory_samples),
        "memory_first_last_bytes": [report.memory_samples[0], report.memory_samples[-1]]
        if report.memory_samples
        else [],
        "memory_slope_bytes_per_round": round(report.memory_slope(), 1),
    }


@click.command(
    help=(__doc__ or "").splitlines()[0], context_settings={"help_option_names": ["-h", "--help"]}
)
@click.option("--rounds", type=click.IntRange(min=1), default=60, show_default=True)
@click.option("--ticks-per-round", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--warmup-rounds", type=click.IntRange(min=0), default=6, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
def main(rounds: int, ticks_per_round: int, warmup_rounds: int, seed: int) -> None:
    hostile = SoakConfig(
        seed=seed,
        rounds=rounds,
        ticks_per_round=ticks_per_round,
        warmup_rounds=warmup_rounds,
    )
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report, cpu = _run(hostile)
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    baseline, baseline_cpu = _run(
        SoakConfig(
            seed=seed,
            rounds=rounds,
            ticks_per_round=ticks_per_round,
            warmup_rounds=warmup_rounds,
            greedy=0,
            liars=0,
        )
    )
    hostile_rate = report.ticks / cpu
    baseline_rate = baseline.ticks / baseline_cpu
    out = {
        "benchmark": "hostile_peer_soak",
        "config": {
            "seed": seed,
            "rounds": rounds,
            "ticks_per_round": ticks_per_round,
            "warmup_rounds": warmup_rounds,
            "senders": {"honest": hostile.honest, "greedy": hostile.greedy, "liars": hostile.liars},
            "faults": {
                "drop": hostile.rates.drop,
                "duplicate": hostile.rates.duplicate,
                "reorder": hostile.rates.reorder,
                "max_delay_ns": hostile.rates.max_delay_ns,
                "reconnect_rate_per_tick": hostile.reconnect_rate,
            },
        },
        "hostile": _summary(report, cpu),
        "baseline_honest_only": _summary(baseline, baseline_cpu),
        "ratios": {
            "honest_completed_hostile_over_baseline": round(
                report.completed_honest / max(1, baseline.completed_honest), 3
            ),
            "tick_rate_hostile_over_baseline": round(hostile_rate / baseline_rate, 3),
        },
        "rss_growth_kib": rss_after - rss_before,
        "checks": {
            "occupancy_within_capacity": all(
                report.peak_occupied.get(r, 0) <= c for r, c in report.capacity.items()
            ),
            "honest_never_quarantined": report.honest_quarantined == 0,
            "settled": report.settle_ticks is not None,
        },
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
