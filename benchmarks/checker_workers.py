"""``--workers 1`` against ``--workers N`` on the shipped models, interleaved; prints JSON.

Usage::

    python benchmarks/checker_workers.py [--models credit/ci --models admission/ci ...]
                                         [--workers 2] [--rounds 2] [--max-states N]
                                         [--baseline-src DIR]

Each round runs every model once serially and once with ``--workers`` processes, alternating,
so both see the same load; the speedup is serial seconds over parallel seconds per round (the
best and the median are reported). Every run is a fresh process. CPU times (its own; the
forked workers', once joined) give two figures the load disturbs less: ``work_inflation``
(the parallel run's total CPU over the serial run's) and ``cpu_bound_speedup_estimate``
(serial CPU over one worker's share plus the coordinator's). The load average before and
after is recorded: on a shared machine a ratio is only as good as the cores that were free, so
each round also measures ``machine_ceiling``: what ``--workers`` independent CPU-bound Python
processes (dict updates, as the seen set does) get over one, in the same round;
``of_ceiling`` is the checker's speedup over it (1.0: the checker scales as well as work that
shares nothing). With ``--baseline-src`` (an older tree with ``models/`` and ``spec/``) the
parallel runs of that tree's checker are interleaved too.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

# One measured run, in a fresh interpreter: the serial run must not inherit the memory (or
# the heap's fragmentation) of the runs before it in this process. The CPU figures are that
# process's own (the coordinator) and its children's (the forked workers, once joined).
RUN = """
import json, resource, sys, time
sys.path[:0] = {paths!r}
from tent_models.registry import catalogue
from tent_models.checker import check
target = next(t for t in catalogue() if t.name == {name!r})
model = target.model()
started = time.perf_counter()
r = check(model, workers={workers}, max_states={cut})
seconds = time.perf_counter() - started
me = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({{
    "states": r.distinct_states, "ok": r.ok, "seconds": round(seconds, 2),
    "cpu_coordinator_s": round(me.ru_utime + me.ru_stime, 2),
    "cpu_workers_s": round(kids.ru_utime + kids.ru_stime, 2),
}}))
"""


def _spin(rounds: int = 3_000_000) -> None:
    table: dict[int, int] = {}
    for i in range(rounds):
        table[(i * 2654435761) & 0xFFFFF] = i


def machine_ceiling(workers: int) -> float:
    """``workers`` x (one process's time) / (``workers`` processes' time) for the same spin:
    the speedup the machine gave work that shares nothing, measured now."""
    fork = multiprocessing.get_context("fork")

    def timed(count: int) -> float:
        processes = [fork.Process(target=_spin) for _ in range(count)]
        started = time.perf_counter()
        for process in processes:
            process.start()
        for process in processes:
            process.join()
        return time.perf_counter() - started

    return workers * timed(1) / timed(workers)


def run(name: str, workers: int, cut: int | None, source: Path | None = None) -> dict[str, Any]:
    """One check of ``name`` in a fresh process: this tree's checker, or ``source``'s."""
    paths = [] if source is None else [str(source / "models"), str(source / "spec")]
    script = RUN.format(paths=paths, name=name, workers=workers, cut=cut)
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)
    value: dict[str, Any] = json.loads(out.stdout)
    return value


# "\b" before a paragraph keeps it as written (click would rewrap the lists)
@click.command(
    help=(__doc__ or "").replace("\n\n", "\n\n\b\n"),
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--models",
    multiple=True,
    default=("credit/ci", "admission/ci", "gated/ci"),
    show_default=True,
    help="a model to measure (repeatable)",
)
@click.option("--workers", type=click.IntRange(min=2), default=2, show_default=True)
@click.option("--rounds", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--max-states", type=click.IntRange(min=1), default=None)
@click.option(
    "--baseline-src", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None
)
def main(
    models: tuple[str, ...],
    workers: int,
    rounds: int,
    max_states: int | None,
    baseline_src: Path | None,
) -> None:
    report: dict[str, Any] = {
        "workers": workers,
        "max_states": max_states,
        "cpus": os.cpu_count(),
        "load_before": os.getloadavg(),
        "models": {},
    }
    for name in models:
        rows = []
        for _ in range(rounds):
            before = machine_ceiling(workers)
            serial = run(name, 1, max_states)
            parallel = run(name, workers, max_states)
            ceiling = (before + machine_ceiling(workers)) / 2
            if serial["states"] != parallel["states"]:
                raise SystemExit(f"{name}: {serial['states']} != {parallel['states']} states")
            serial_cpu = serial["cpu_coordinator_s"]
            per_worker = parallel["cpu_workers_s"] / workers
            row = {
                "serial_s": serial["seconds"],
                "parallel_s": parallel["seconds"],
                "speedup": round(serial["seconds"] / parallel["seconds"], 2),
                "machine_ceiling": round(ceiling, 2),
                "of_ceiling": round(serial["seconds"] / parallel["seconds"] / ceiling, 2),
                "load": round(os.getloadavg()[0], 1),
                "serial_cpu_s": serial_cpu,
                "parallel_cpu_workers_s": parallel["cpu_workers_s"],
                "parallel_cpu_coordinator_s": parallel["cpu_coordinator_s"],
                # CPU the parallel run spent over the serial run's (duplicated work, exchange)
                "work_inflation": round(
                    (parallel["cpu_workers_s"] + parallel["cpu_coordinator_s"]) / serial_cpu, 2
                ),
                # the speedup free cores would give if each worker's share ran alongside the
                # coordinator's (an estimate that the machine's load does not disturb)
                "cpu_bound_speedup_estimate": round(
                    serial_cpu / (per_worker + parallel["cpu_coordinator_s"]), 2
                ),
            }
            if baseline_src is not None:
                old = run(name, workers, max_states, baseline_src)
                row["baseline_parallel_s"] = old["seconds"]
                row["baseline_speedup"] = round(serial["seconds"] / old["seconds"], 2)
            rows.append(row)
            print(json.dumps({name: row}), file=sys.stderr, flush=True)  # partial results
        speedups = [r["speedup"] for r in rows]
        report["models"][name] = {
            "states": serial["states"],
            "rounds": rows,
            "best_speedup": max(speedups),
            "median_speedup": round(statistics.median(speedups), 2),
            "median_machine_ceiling": round(
                statistics.median(r["machine_ceiling"] for r in rows), 2
            ),
            "median_of_ceiling": round(statistics.median(r["of_ceiling"] for r in rows), 2),
        }
    report["load_after"] = os.getloadavg()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
