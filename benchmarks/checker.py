"""Benchmark of the explicit-state checker; prints one JSON document.

Usage: ``python benchmarks/checker.py [--model credit/ci] [--workers 2] [--max-states N]``

Measured on one model (``tent_models.configs.CONFIGS[model]`` when that module exists, else a
clearly labelled toy stand-in from ``tests/models/toy_models.py``):

* single-process and ``--workers`` BFS rates (distinct states/s) and the speedup;
* the model's fast path against its plain ``SpecModel`` methods in the same run
  (``PlainModel``: readable ``successors`` + ``canonicalize`` + ``pack`` + every invariant);
* storage: tracemalloc peak during a separate BFS run, ``ru_maxrss`` growth, and B/state;
* the symmetry reduction factor (distinct states without / with ``canonicalize``);
* a baseline in the same run: a bare BFS over the same expansion the checker uses (the fast
  path when the model has one) with a plain ``set`` of fingerprints, no checks, no parents
  (``ratio`` = checker rate / bare rate: the cost of the checker's own bookkeeping);
* fingerprint functions per packed state (the chosen xxh3_64+marshal and alternatives);
* for each known-bad variant found (``tent_spec.variants.KNOWN_BAD`` and the ``KNOWN_BAD`` maps of
  the ``tent_models.configs`` modules), the counterexample length and the time to find it.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import marshal
import resource
import sys
import time
import timeit
import tracemalloc
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click
from tent_models.checker import PlainModel, check, fingerprint
from tent_models.checker._bfs import cyclic_gc_paused
from tent_models.checker._components import materialise
from tent_models.checker._fastpath import FAST_PATH_METHODS, expander, fingerprinter


def load_model(name: str) -> tuple[Callable[[], Any], str]:
    """The factory for ``name`` and where it came from."""
    for module_name in ("tent_models.configs", "tent_models.configs.admission"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        configs: Mapping[str, Callable[[], Any]] = module.CONFIGS
        if name in configs:
            return configs[name], module_name
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "models"))
    from toy_models import CreditToy

    return (
        lambda: CreditToy(capacity=3, max_grant=4, bag_max=3),
        f"TOY STAND-IN (tests/models/toy_models.CreditToy): {name} not found in configs",
    )


def known_bad() -> dict[str, tuple[Callable[[], Any], str | None]]:
    """Every shipped known-bad variant: name -> (factory, expected invariant)."""
    from tent_models import configs
    from tent_models.configs import admission as configs_admission
    from tent_models.configs import gated as configs_gated

    found: dict[str, tuple[Callable[[], Any], str | None]] = {
        f"credit/bad/{name}": (factory, configs.KNOWN_BAD_EXPECTED[name])
        for name, factory in configs.KNOWN_BAD_CONFIGS.items()
    }
    for module in (configs_admission, configs_gated):
        for name, (factory, invariant) in module.KNOWN_BAD.items():
            found[name] = (factory, invariant)
    return found


def bare_bfs(model: Any, max_states: int | None) -> tuple[int, float]:
    """The baseline: BFS with a set of fingerprints, nothing else (no checks, no parents)."""
    started = time.perf_counter()
    expand = expander(model, symmetry=True)
    canonicalize = model.canonicalize
    fingerprint_of = fingerprinter(model)
    within = model.within_bounds
    seen: set[int] = set()
    queue: deque[Any] = deque()
    for initial in model.initial_states():
        state = canonicalize(initial)
        fp = fingerprint_of(state)
        if fp not in seen:
            seen.add(fp)
            queue.append(state)
    limit = max_states or sys.maxsize
    with cyclic_gc_paused():  # as the checker does
        while queue and len(seen) < limit:
            state = queue.popleft()
            if not within(state):
                continue
            for _action, _args, nxt, fp in expand(state):
                if fp not in seen:
                    seen.add(fp)
                    queue.append(materialise(nxt))
    seconds = time.perf_counter() - started
    return len(seen), seconds


def fingerprint_costs(model: Any) -> dict[str, float]:
    """ns per packed state of candidate fingerprint functions, on real states of the model."""
    samples = []
    for state in model.initial_states():
        samples.append(model.pack(state))
        for step in model.successors(state):
            samples.append(model.pack(step.state))
    samples = samples[:50]
    if callable(getattr(model, "fingerprint", None)):
        states = [model.canonicalize(s) for s in model.initial_states()]
        for state in list(states):
            states.extend(model.canonicalize(step.state) for step in model.successors(state))
        states = states[:50]

        def own() -> list[int]:
            return [model.fingerprint(state) for state in states]

        runs = timeit.repeat(own, number=200, repeat=3)
        own_cost = round(min(runs) / (200 * len(states)) * 1e9, 1)
    else:
        own_cost = None
    candidates: dict[str, Callable[[Any], int]] = {
        "xxh3_64(marshal v2) [used]": fingerprint,
        "blake2b8(marshal v2) [used before]": lambda p: int.from_bytes(
            hashlib.blake2b(marshal.dumps(p, 2), digest_size=8).digest(), "little"
        ),
        "md5(marshal v2)[:8]": lambda p: int.from_bytes(
            hashlib.md5(marshal.dumps(p, 2)).digest()[:8], "little"
        ),
        "sha1(marshal v2)[:8]": lambda p: int.from_bytes(
            hashlib.sha1(marshal.dumps(p, 2)).digest()[:8], "little"
        ),
        "hash(packed) [unsafe: hash(-1)==hash(-2)]": hash,
    }
    costs = {}
    for name, function in candidates.items():

        def run(f: Callable[[Any], int] = function) -> list[int]:
            return [f(p) for p in samples]

        runs = timeit.repeat(run, number=200, repeat=3)
        costs[name] = round(min(runs) / (200 * len(samples)) * 1e9, 1)
    if own_cost is not None:
        costs["model.fingerprint (per-sender digests memoised, warm) [used]"] = own_cost
        costs["xxh3_64(marshal v2) [plain path]"] = costs.pop("xxh3_64(marshal v2) [used]")
    return costs


# "\b" before a paragraph keeps it as written (click would rewrap the lists)
@click.command(
    help=(__doc__ or "").replace("\n\n", "\n\n\b\n"),
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option("--model", default="credit/ci", show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--max-states", type=click.IntRange(min=1), default=None)
@click.option("--skip-symmetry-off", is_flag=True)
def main(model: str, workers: int, max_states: int | None, skip_symmetry_off: bool) -> None:
    factory, source = load_model(model)
    report: dict[str, Any] = {"model": model, "source": source}

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    serial = check(factory(), max_states=max_states)
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report["serial"] = {
        "ok": serial.ok,
        "exhaustive": serial.exhaustive,
        "distinct_states": serial.distinct_states,
        "transitions": serial.transitions,
        "depth": serial.depth,
        "seconds": round(serial.seconds, 3),
        "states_per_second": round(serial.states_per_second),
        "estimated_bytes_per_state": round(serial.bytes_per_state, 1),
        "ru_maxrss_delta_kib": rss_after - rss_before,
        "ru_maxrss_delta_bytes_per_state": round(
            (rss_after - rss_before) * 1024 / serial.distinct_states, 1
        ),
        "collision_probability": serial.collision_probability,
    }

    fast_path = [name for name in FAST_PATH_METHODS if callable(getattr(factory(), name, None))]
    if fast_path:
        plain = check(PlainModel(factory()), max_states=max_states)
        report["fast_path"] = {
            "methods": fast_path,
            "plain_states_per_second": round(plain.states_per_second),
            "same_states_transitions_depth": (
                plain.distinct_states,
                plain.transitions,
                plain.depth,
            )
            == (serial.distinct_states, serial.transitions, serial.depth),
            "speedup_over_plain": round(serial.states_per_second / plain.states_per_second, 2),
        }

    tracemalloc.start()
    traced = check(factory(), max_states=max_states)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    report["tracemalloc"] = {
        "peak_bytes": peak,
        "peak_bytes_per_state": round(peak / traced.distinct_states, 1),
        "note": "peak includes the frontier states and the model's own objects",
    }

    if workers > 1:
        parallel = check(factory(), workers=workers, max_states=max_states)
        report["parallel"] = {
            "workers": workers,
            "distinct_states": parallel.distinct_states,
            "same_verdict_and_count": (parallel.ok, parallel.distinct_states)
            == (serial.ok, serial.distinct_states),
            "seconds": round(parallel.seconds, 3),
            "states_per_second": round(parallel.states_per_second),
            "speedup": round(serial.seconds / parallel.seconds, 2),
        }

    if not skip_symmetry_off:
        # The reduction is only meaningful on exhaustive runs: with a --max-states cut both runs
        # stop at the cut, so the model family's tiny configuration is measured instead.
        sym_name = model
        if max_states is not None:
            sym_name = model.rsplit("/", 1)[0] + "/tiny"
        sym_factory, _ = load_model(sym_name)
        with_symmetry = check(sym_factory(), check_recoverability=False)
        without = check(sym_factory(), symmetry=False, check_recoverability=False)
        report["symmetry"] = {
            "model": sym_name,
            "exhaustive": with_symmetry.exhaustive and without.exhaustive,
            "states_with": with_symmetry.distinct_states,
            "states_without": without.distinct_states,
            "reduction_factor": round(without.distinct_states / with_symmetry.distinct_states, 3),
            "note": "canonicalize = sender symmetry + per-key sequence renumbering",
        }

    bare_states, bare_seconds = bare_bfs(factory(), max_states)
    bare_rate = bare_states / bare_seconds
    report["bare_bfs_baseline"] = {
        "distinct_states": bare_states,
        "seconds": round(bare_seconds, 3),
        "states_per_second": round(bare_rate),
        "ratio_checker_over_bare": round(serial.states_per_second / bare_rate, 3),
    }
    report["fingerprint_ns_per_state"] = fingerprint_costs(factory())

    variants = {}
    for name, (make, expected) in known_bad().items():
        result = check(make())
        first = result.violations[0] if result.violations else None
        variants[name] = {
            "found": first is not None,
            "expected_invariant": expected,
            "violation": None if first is None else f"{first.kind.value}:{first.name}",
            "matches_expected": expected is None
            or any(v.name == expected for v in result.violations),
            "counterexample_steps": None if first is None else len(first.actions),
            "seconds": round(result.seconds, 3),
            "states_explored": result.distinct_states,
        }
    report["known_bad"] = variants
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
