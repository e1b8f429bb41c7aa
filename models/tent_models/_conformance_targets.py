"""The conformance and contract targets of ``tent check``: short seeded lockstep runs of the
implementation against the admission and credit specs, and the CrossHair contract search.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, cast

from tent_models._targets import Outcome, RunOptions, Target, TargetKind, Tier
from tent_models.configs import admission as configs_admission
from tent_models.conformance import Divergence, minimise_divergence

CONFORMANCE_STEPS = 300
CONFORMANCE_SEEDS = (1, 2, 3)


def _spec_walks(spec: Any, seed: int, steps: int) -> list[list[tuple[str, tuple[Any, ...]]]]:
    """Seeded random walks of enabled spec actions, ``steps`` in total (the operations a
    conformance run replays). A walk ends when it revisits a state (so a bounded model's idle
    loops, e.g. only the clock left to move, do not eat the budget) and the next one starts
    afresh from an initial state."""
    rng = random.Random(seed)
    initial = list(spec.initial_states())
    walks: list[list[tuple[str, tuple[Any, ...]]]] = []
    total = 0
    while total < steps:
        state = rng.choice(initial)
        seen = {spec.pack(state)}
        walk: list[tuple[str, tuple[Any, ...]]] = []
        while total < steps:
            options = list(spec.successors(state))
            if not options:
                break
            step = rng.choice(options)
            walk.append((step.action, step.args))
            total += 1
            state = step.state
            packed = spec.pack(state)
            if packed in seen:
                break
            seen.add(packed)
        if not walk:
            break
        walks.append(walk)
    return walks


def conformance_target(
    name: str, run_walk: Callable[[int], str | None], *, description: str
) -> Target:
    """A short lockstep run of the implementation against the spec (tier ``ci``): it passes when
    no seed in :data:`CONFORMANCE_SEEDS` finds a divergence."""

    def run(options: RunOptions) -> Outcome:
        started = time.perf_counter()
        for seed in CONFORMANCE_SEEDS:
            divergence = run_walk(seed)
            if divergence is not None:
                return Outcome(
                    target=name,
                    kind=TargetKind.CONFORMANCE,
                    tier=Tier.CI,
                    passed=False,
                    verdict="diverged",
                    seconds=time.perf_counter() - started,
                    message=f"implementation and spec diverged (seed {seed})",
                    report=divergence,
                )
        return Outcome(
            target=name,
            kind=TargetKind.CONFORMANCE,
            tier=Tier.CI,
            passed=True,
            verdict="conforms",
            seconds=time.perf_counter() - started,
        )

    return Target(
        name=name, kind=TargetKind.CONFORMANCE, tier=Tier.CI, description=description, run=run
    )


def _admission_walk(seed: int) -> str | None:
    from tent_models.conformance.admission import run_admission  # noqa: PLC0415 - heavy

    spec = configs_admission.CONFIGS["admission/ci"]()
    for walk in _spec_walks(spec, seed, CONFORMANCE_STEPS):
        divergence = run_admission(cast("Any", spec), walk)
        if divergence is not None:
            shortest = minimise_divergence(
                lambda actions: run_admission(cast("Any", spec), list(actions)), divergence
            )
            return _divergence_report(divergence, shortest)
    return None


def _credit_walk(seed: int) -> str | None:
    from tent_models.conformance.credit import (  # noqa: PLC0415 - heavy
        run_credit,
        run_credit_conformance,
    )

    divergence = run_credit_conformance(steps=CONFORMANCE_STEPS, seed=seed)
    if divergence is None:
        return None
    return _divergence_report(divergence, minimise_divergence(run_credit, divergence))


def _divergence_report(found: Divergence, shortest: Divergence) -> str:
    """The minimised, diff-only divergence, saying how long the walk's own trace was."""
    return (
        f"minimised from {len(found.actions)} to {len(shortest.actions)} step(s) "
        f"(replayed with steps removed)\n{shortest.format()}"
    )


def _conformance_targets() -> list[Target]:
    return [
        conformance_target(
            "conformance/admission",
            _admission_walk,
            description=f"AdmissionQueue vs tent_spec.admission: {len(CONFORMANCE_SEEDS)} seeded "
            f"walks of {CONFORMANCE_STEPS} steps in lockstep",
        ),
        conformance_target(
            "conformance/credit",
            _credit_walk,
            description=f"endpoints over encoded bytes vs tent_spec.credit: "
            f"{len(CONFORMANCE_SEEDS)} seeded walks of {CONFORMANCE_STEPS} steps in lockstep",
        ),
    ]


def _contract_targets() -> list[Target]:
    name = "crosshair/contracts"

    def run(options: RunOptions) -> Outcome:
        from tent_models.contracts import CROSSHAIR_TARGETS, run_crosshair  # noqa: PLC0415

        report = run_crosshair(CROSSHAIR_TARGETS)
        return Outcome(
            target=name,
            kind=TargetKind.CONTRACTS,
            tier=Tier.CI,
            passed=report.passed,
            verdict="no counterexample" if report.passed else "counterexample",
            seconds=report.seconds,
            message="" if report.passed else "CrossHair refuted a contract or failed to run",
            report="" if report.passed else report.output,
        )

    return [
        Target(
            name=name,
            kind=TargetKind.CONTRACTS,
            tier=Tier.CI,
            description="CrossHair: pre/post-conditions of checked arithmetic, deadline_mlu, "
            "charge normalisation, update acceptance, grant computation (bounded search)",
            run=run,
        )
    ]
