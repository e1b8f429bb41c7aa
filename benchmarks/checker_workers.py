"""One process against ``--workers N`` on the shipped models, interleaved; prints JSON.

Usage::

    python benchmarks/checker_workers.py [--models credit/ci --models admission/ci ...]
                                         [--workers 2 | --workers 1,4,8,16] [--rounds 3]
                                         [--max-states N] [--baseline-src DIR]
                                         [--ceiling N] [--deadline SECONDS] [--json PATH]

Every measured check runs in a fresh process. A round runs every model once per worker count
(1, the serial engine, always first), so all counts see the same load; ``speedup`` is the best
serial run's seconds over the median of a count's runs, and ``pair_speedups`` gives each
round's serial over parallel. Per run it records the checker's own bytes-per-state estimate
beside the growth of the resident memory of the whole process tree (the proportional set size
of the coordinator and its workers, sampled every 0.5 s: memo tables, frontiers and allocator
slack included, shared pages counted once), and the CPU times: ``work_inflation`` (all
processes' CPU over the serial run's).

Two ceilings say what the machine gives work that shares nothing: per round,
``machine_ceiling`` (``N`` CPU-bound Python processes over one, measured beside the runs) and,
with ``--ceiling N``, ``N`` independent serial checks of the first model cut at
``--ceiling-states`` started at once, over one alone (``N`` x one's time over the batch's).
``of_ceiling`` is a speedup over its ceiling. With ``--baseline-src`` (an older tree with
``models/`` and ``spec/``) that tree's serial and parallel runs are interleaved too, and
``serial_vs_baseline`` is this tree's best serial time over the older one's. ``--deadline``
bounds the whole benchmark: no run starts after it, each run is killed at it (the report
says what was skipped).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parent.parent

# One measured run, in a fresh interpreter: a run must not inherit the memory (or the heap's
# fragmentation) of the runs before it. The tree's own folders go first on the path, so no
# install is needed (the accelerator machine runs it from a copy of the work tree).
RUN = """
import json, resource, sys, time
sys.path[:0] = {paths!r}
from tent_models.configs import CONFIGS, admission, gated  # not the registry: no z3 needed
from tent_models.checker import check
model = {{**admission.CONFIGS, **CONFIGS, **gated.CONFIGS}}[{name!r}]()
print(json.dumps({{"ready": True}}), flush=True)  # the sampler's baseline
started = time.perf_counter()
r = check(model, workers={workers}, max_states={cut})
seconds = time.perf_counter() - started
me = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({{
    "states": r.distinct_states, "transitions": r.transitions, "ok": r.ok,
    "seconds": round(seconds, 2),
    "cpu_coordinator_s": round(me.ru_utime + me.ru_stime, 2),
    "cpu_workers_s": round(kids.ru_utime + kids.ru_stime, 2),
    "estimated_bytes_per_state": round(r.bytes_per_state, 1),
}}), flush=True)
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


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from ``/proc``'s children lists)."""
    out, stack = [], [pid]
    while stack:
        current = stack.pop()
        out.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children", encoding="ascii") as f:
                    stack.extend(int(child) for child in f.read().split())
            except OSError:
                continue
    return out


def _pss(pid: int) -> int:
    """The proportional set size of ``pid``'s process tree, bytes (0 without ``/proc``)."""
    total = 0
    for member in _tree(pid):
        try:
            with open(f"/proc/{member}/smaps_rollup", encoding="ascii") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            continue
    return total


class _Sampler(threading.Thread):
    """The peak PSS of a process tree, sampled until stopped."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, 0, threading.Event()

    def run(self) -> None:
        # a first sample at once: a run shorter than the interval still has a peak (a growth
        # of 0 between the two samples is what was measured then, not a missing figure)
        while True:
            self.peak = max(self.peak, _pss(self.pid))
            if self.done.wait(0.5):
                return


def run(
    name: str, workers: int, cut: int | None, source: Path | None, timeout: float
) -> dict[str, Any]:
    """One check of ``name`` in a fresh process: this tree's checker, or ``source``'s."""
    tree = ROOT if source is None else source
    paths = [str(tree / "models"), str(tree / "spec"), str(tree)]
    script = RUN.format(paths=paths, name=name, workers=workers, cut=cut)
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    ready = process.stdout.readline()  # the model is built: measure growth from here
    if not ready:
        raise SystemExit(f"{name}: {process.communicate()[1]}")
    before = _pss(process.pid)
    sampler = _Sampler(process.pid)
    sampler.start()
    try:
        out, err = process.communicate(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return {"workers": workers, "timed_out": True}
    finally:
        sampler.done.set()
        sampler.join()
    if process.returncode:
        raise SystemExit(f"{name} with {workers} workers failed:\n{err}")
    value: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    value["workers"] = workers
    if before and sampler.peak:
        value["rss_growth_bytes_per_state"] = round(
            max(0, sampler.peak - before) / value["states"], 1
        )
    return value


def ceiling(name: str, count: int, cut: int, timeout: float) -> dict[str, Any]:
    """``count`` independent serial checks of ``name`` (cut at ``cut``) at once, against one
    alone: the speedup the machine gives this very work when nothing is shared."""
    paths = [str(ROOT / "models"), str(ROOT / "spec"), str(ROOT)]
    script = RUN.format(paths=paths, name=name, workers=1, cut=cut)

    def batch(size: int) -> float:
        started = time.perf_counter()
        processes = [
            subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL)
            for _ in range(size)
        ]
        try:
            for process in processes:
                process.wait(timeout=max(1.0, timeout - (time.perf_counter() - started)))
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        return time.perf_counter() - started

    try:
        one = batch(1)
        many = batch(count)
    except subprocess.TimeoutExpired:
        # past the deadline: say so rather than lose the whole report
        return {"model": name, "max_states": cut, "processes": count, "skipped": "deadline"}
    return {
        "model": name,
        "max_states": cut,
        "processes": count,
        "one_s": round(one, 2),
        "all_s": round(many, 2),
        "ceiling": round(count * one / many, 2),
    }


def _counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"not a comma-separated list of counts: {text!r}") from exc
    if not counts or any(c < 1 for c in counts):
        raise click.BadParameter(f"worker counts must be >= 1: {text!r}")
    return [1, *(c for c in dict.fromkeys(counts) if c != 1)]


def _summary(runs: list[dict[str, Any]], counts: list[int], ceilings: dict[int, float]) -> Any:
    done = [r for r in runs if not r.get("timed_out")]
    serial = [r for r in done if r["workers"] == 1 and not r.get("baseline")]
    best_serial = min((r["seconds"] for r in serial), default=None)
    serial_cpu = statistics.median(r["cpu_coordinator_s"] for r in serial) if serial else None
    out: dict[str, Any] = {"best_serial_s": best_serial}
    for count in counts[1:]:
        mine = [r for r in done if r["workers"] == count and not r.get("baseline")]
        if not mine or best_serial is None or serial_cpu is None:
            continue
        median = statistics.median(r["seconds"] for r in mine)
        pairs = [
            round(s["seconds"] / p["seconds"], 2)
            for s, p in zip(serial, mine, strict=False)
            if s["round"] == p["round"]
        ]
        row: dict[str, Any] = {
            "median_s": median,
            "best_s": min(r["seconds"] for r in mine),
            "speedup": round(best_serial / median, 2),
            "pair_speedups": pairs,
            "median_pair_speedup": round(statistics.median(pairs), 2) if pairs else None,
            "work_inflation": round(
                statistics.median(
                    (r["cpu_workers_s"] + r["cpu_coordinator_s"]) / serial_cpu for r in mine
                ),
                2,
            ),
            "estimated_bytes_per_state": mine[-1]["estimated_bytes_per_state"],
            "rss_growth_bytes_per_state": mine[-1].get("rss_growth_bytes_per_state"),
        }
        if count in ceilings:
            row["machine_ceiling"] = ceilings[count]
            row["of_ceiling"] = round(row["speedup"] / ceilings[count], 2)
        out[str(count)] = row
    if serial:
        out["1"] = {
            "estimated_bytes_per_state": serial[-1]["estimated_bytes_per_state"],
            "rss_growth_bytes_per_state": serial[-1].get("rss_growth_bytes_per_state"),
        }
    old = [r for r in done if r.get("baseline")]
    old_serial = [r["seconds"] for r in old if r["workers"] == 1]
    if old_serial and best_serial is not None:
        out["baseline_best_serial_s"] = min(old_serial)
        out["serial_vs_baseline"] = round(best_serial / min(old_serial), 3)
        for count in counts[1:]:
            theirs = [r["seconds"] for r in old if r["workers"] == count]
            if theirs:
                out[f"baseline_{count}_speedup"] = round(
                    min(old_serial) / statistics.median(theirs), 2
                )
    return out


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
@click.option("--workers", default="2", show_default=True, help="worker counts, e.g. 1,4,8,16")
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--max-states", type=click.IntRange(min=1), default=None)
@click.option(
    "--baseline-src", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None
)
@click.option(
    "--ceiling",
    "ceiling_count",
    type=click.IntRange(min=0),
    default=0,
    help="N independent serial checks at once against one (0: not measured)",
)
@click.option("--ceiling-states", type=click.IntRange(min=1), default=100_000, show_default=True)
@click.option("--deadline", type=click.FloatRange(min=1), default=None, help="seconds, in all")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None)
def main(  # noqa: PLR0917 (click passes every option as an argument)
    models: tuple[str, ...],
    workers: str,
    rounds: int,
    max_states: int | None,
    baseline_src: Path | None,
    ceiling_count: int,
    ceiling_states: int,
    deadline: float | None,
    json_path: Path | None,
) -> None:
    counts = _counts(workers)
    started = time.perf_counter()
    end = started + (deadline if deadline is not None else 7 * 24 * 3600.0)
    report: dict[str, Any] = {
        "workers": counts,
        "rounds": rounds,
        "max_states": max_states,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "load_before": os.getloadavg(),
        "models": {},
        "skipped": [],
    }

    def emit() -> None:
        text = json.dumps(report, indent=2)
        if json_path is not None:
            json_path.write_text(text + "\n", encoding="utf-8")
        print(text, flush=True)

    if ceiling_count:
        left = end - time.perf_counter()
        report["ceiling"] = ceiling(models[0], ceiling_count, ceiling_states, left)
        print(json.dumps({"ceiling": report["ceiling"]}), file=sys.stderr, flush=True)
    for name in models:
        runs: list[dict[str, Any]] = []
        ceilings: dict[int, list[float]] = {}
        for index in range(rounds):
            plan = [(count, None) for count in counts]
            if baseline_src is not None:
                plan += [(count, baseline_src) for count in counts[:2]]
            for count, source in plan:
                left = end - time.perf_counter()
                if left <= 0:
                    report["skipped"].append({"model": name, "round": index, "workers": count})
                    continue
                if count > 1 and source is None and left > 60:  # a few seconds where idle
                    ceilings.setdefault(count, []).append(round(machine_ceiling(count), 2))
                row = run(name, count, max_states, source, left)
                row["round"] = index
                if source is not None:
                    row["baseline"] = True
                runs.append(row)
                print(json.dumps({name: row}), file=sys.stderr, flush=True)  # partial results
        states = {r["states"] for r in runs if "states" in r}
        if len(states) > 1:
            raise SystemExit(f"{name}: the runs disagree on the state count: {sorted(states)}")
        report["models"][name] = {
            "states": states.pop() if states else None,
            "runs": runs,
            "summary": _summary(
                runs, counts, {c: statistics.median(v) for c, v in ceilings.items()}
            ),
        }
        if json_path is not None:  # what is done so far survives a kill
            json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    report["load_after"] = os.getloadavg()
    report["seconds"] = round(time.perf_counter() - started, 1)
    emit()


if __name__ == "__main__":
    main()
