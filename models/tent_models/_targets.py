"""What a ``tent check`` target is and how each kind is judged: :class:`Target`,
:class:`Outcome`, the model, known-bad and proof target builders, running a target (an escaping
exception becomes an ``error`` outcome) and selecting targets. :mod:`tent_models.registry`
re-exports these and builds the catalogue from them.
"""

from __future__ import annotations

import enum
import fnmatch
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from tent_models.checker import (
    CheckResult,
    CounterExample,
    PlainModel,
    ViolationKind,
    check,
    format_counterexample,
    simulate,
)
from tent_models.manifest import Counts, Manifest
from tent_models.model_api import SpecModel

ModelFactory = Callable[[], SpecModel[Any]]


class TargetKind(enum.StrEnum):
    """What a target checks (its column in the ``tent check`` table)."""

    MODEL = "model"
    KNOWN_BAD = "known-bad"
    ABLATION = "ablation"
    PROOF = "proof"
    CONFORMANCE = "conformance"
    CONTRACTS = "contracts"


TARGET_KINDS: tuple[TargetKind, ...] = (
    TargetKind.MODEL,
    TargetKind.KNOWN_BAD,
    TargetKind.ABLATION,
    TargetKind.PROOF,
    TargetKind.CONFORMANCE,
    TargetKind.CONTRACTS,
)
"""Every kind, in the order ``tent check`` runs and lists them."""


class Tier(enum.StrEnum):
    """How expensive a target is, and so which runs include it."""

    TINY = "tiny"  # unit tests: seconds
    CI = "ci"  # the default `tent check`: every CI run
    DEEP = "deep"  # `tent check --deep` and `--simulate`: benchmark campaigns


@attrs.frozen(kw_only=True)
class RunOptions:
    """How targets run: checker processes, the live progress display, the expected counts.

    ``progress`` is ``True`` for the checker's own progress line, or a callable
    ``(distinct, transitions, depth)`` that the caller's display updates from.
    """

    workers: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    progress: bool | Callable[[int, int, int], None] = False
    manifest: Manifest = attrs.field(factory=Manifest)
    plain: bool = False  # hide the models' fast path (PlainModel): the readable path only
    no_deadlock: bool = False  # judge no deadlocks (TLC's -deadlock, Apalache's --no-deadlock)


@attrs.frozen(kw_only=True)
class ProofVerdict:
    """What a proof entry point reports: whether it holds, and the counterexample text if not.

    ``counterexample`` is ``None`` when z3 gave none (the proof holds, or a query timed out).
    """

    holds: bool
    counterexample: str | None = None


@attrs.frozen(kw_only=True)
class Outcome:
    """The judged result of one target.

    ``verdict`` is the word in the table's result column: ``ok``, ``violated``, ``not
    exhaustive`` or ``manifest mismatch`` (models); ``refuted``, ``not refuted`` or ``wrong
    violation`` (known-bad variants and mutated proofs); ``proved`` or ``not proved`` (proofs);
    ``error`` when the target raised. ``message`` says why in one line; ``report`` is the
    multi-line counterexample text (for a refuted known-bad target: the expected one). Counts are
    ``None`` for targets that explore no state space.
    """

    target: str
    kind: TargetKind
    tier: Tier
    passed: bool
    verdict: str
    seconds: float = attrs.field(validator=attrs.validators.ge(0.0))
    states: int | None = None
    transitions: int | None = None
    depth: int | None = None
    states_per_second: float | None = None
    message: str = ""
    report: str = ""
    result: CheckResult | None = None
    model: ModelFactory | None = attrs.field(default=None, eq=False, repr=False)
    # the factory of the model ``result`` was checked on (its counterexamples' charts replay
    # on it); ``run_target`` fills in the target's own when the run names none

    @property
    def refutation(self) -> bool:
        """True for a passing target whose pass *is* a counterexample (known-bad, mutation)."""
        return self.passed and self.verdict == "refuted"


@attrs.frozen(kw_only=True)
class Target:
    """One named check. ``run`` never raises for an expected failure: it returns an outcome.

    ``model`` is the factory of the explored model (``model`` and ``known-bad`` kinds), used by
    ``tent manifest update`` and ``--simulate``; ``None`` for proofs.
    """

    name: str
    kind: TargetKind
    tier: Tier
    description: str
    run: Callable[[RunOptions], Outcome] = attrs.field(eq=False, repr=False)
    model: ModelFactory | None = attrs.field(default=None, eq=False, repr=False)


# --- judging a model check ------------------------------------------------------------------------


def _counts(result: CheckResult) -> dict[str, Any]:
    return {
        "states": result.distinct_states,
        "transitions": result.transitions,
        "depth": result.depth,
        "states_per_second": result.states_per_second,
        "seconds": result.seconds,
        "result": result,
    }


def _violation_summary(violations: Sequence[CounterExample]) -> str:
    return ", ".join(
        v.kind.value if v.name == v.kind.value else f"{v.kind.value} {v.name}" for v in violations
    )


def _report(violations: Sequence[CounterExample]) -> str:
    return "\n\n".join(format_counterexample(v) for v in violations)


def judge_model(name: str, tier: Tier, result: CheckResult, manifest: Manifest) -> Outcome:
    """Judge an exhaustive check of a shipped model, in this order.

    1. Any violation (invariant, deadlock, recoverability, witness, coverage) fails it, with
       every counterexample in ``report``.
    2. A run that was not exhaustive fails it: a ``ci`` model must be explored completely.
    3. Counts that differ from the manifest fail it ("state space changed"); so does a missing
       entry, except for a ``deep`` model (its entry is optional).
    """
    common = _counts(result)
    if result.violations:
        return Outcome(
            target=name,
            kind=TargetKind.MODEL,
            tier=tier,
            passed=False,
            verdict="violated",
            message=_violation_summary(result.violations),
            report=_report(result.violations),
            **common,
        )
    if not result.exhaustive:
        return Outcome(
            target=name,
            kind=TargetKind.MODEL,
            tier=tier,
            passed=False,
            verdict="not exhaustive",
            message="the exploration stopped before the state space was exhausted",
            **common,
        )
    measured = Counts(
        distinct_states=result.distinct_states, transitions=result.transitions, depth=result.depth
    )
    if tier is Tier.DEEP and name not in manifest.models:
        return Outcome(
            target=name,
            kind=TargetKind.MODEL,
            tier=tier,
            passed=True,
            verdict="ok",
            message="not in the manifest (optional for deep models)",
            **common,
        )
    mismatch = manifest.compare(name, measured)
    if mismatch is not None:
        return Outcome(
            target=name,
            kind=TargetKind.MODEL,
            tier=tier,
            passed=False,
            verdict="manifest mismatch",
            message=mismatch,
            **common,
        )
    return Outcome(
        target=name, kind=TargetKind.MODEL, tier=tier, passed=True, verdict="ok", **common
    )


def judge_known_bad(name: str, tier: Tier, result: CheckResult, invariant: str) -> Outcome:
    """Judge a known-bad variant: it must be refuted by a violation of ``invariant``.

    1. A violation of ``invariant`` passes it; ``report`` is that counterexample.
    2. Other violations only fail it ("wrong violation"): the named invariant missed the bug.
    3. No violation fails it ("not refuted").

    ``"recoverability"`` names the liveness check: a mutant that breaks no invariant but leaves
    some state from which the goal is unreachable.
    """
    common = _counts(result)
    expected = [
        v
        for v in result.violations
        if v.kind in (ViolationKind.INVARIANT, ViolationKind.RECOVERABILITY) and v.name == invariant
    ]
    if expected:
        return Outcome(
            target=name,
            kind=TargetKind.KNOWN_BAD,
            tier=tier,
            passed=True,
            verdict="refuted",
            message=f"counterexample to {invariant} after {len(expected[0].actions)} step(s)",
            report=_report(expected[:1]),
            **common,
        )
    if result.violations:
        return Outcome(
            target=name,
            kind=TargetKind.KNOWN_BAD,
            tier=tier,
            passed=False,
            verdict="wrong violation",
            message=f"expected a violation of {invariant}, found "
            f"{_violation_summary(result.violations)}",
            report=_report(result.violations),
            **common,
        )
    return Outcome(
        target=name,
        kind=TargetKind.KNOWN_BAD,
        tier=tier,
        passed=False,
        verdict="not refuted",
        message=f"expected a violation of {invariant}, the check found none",
        **common,
    )


# --- target builders ------------------------------------------------------------------------------


def _build(factory: ModelFactory, options: RunOptions) -> SpecModel[Any]:
    """The target's model, its fast path hidden when ``options.plain``."""
    model = factory()
    return PlainModel(model) if options.plain else model


def model_target(name: str, tier: Tier, factory: ModelFactory, description: str = "") -> Target:
    """A shipped model configuration, checked exhaustively and compared with the manifest."""

    def run(options: RunOptions) -> Outcome:
        result = check(
            _build(factory, options),
            workers=options.workers,
            progress=options.progress,
            check_deadlock=not options.no_deadlock,
        )
        return judge_model(name, tier, result, options.manifest)

    return Target(
        name=name,
        kind=TargetKind.MODEL,
        tier=tier,
        description=description or f"exhaustive check of {name}",
        run=run,
        model=factory,
    )


def known_bad_target(
    name: str, factory: ModelFactory, invariant: str, description: str = ""
) -> Target:
    """A known-bad variant (tier ``ci``) that must be refuted by a violation of ``invariant``."""

    def run(options: RunOptions) -> Outcome:
        result = check(
            _build(factory, options),
            workers=options.workers,
            progress=options.progress,
            check_deadlock=not options.no_deadlock,
        )
        return judge_known_bad(name, Tier.CI, result, invariant)

    return Target(
        name=name,
        kind=TargetKind.KNOWN_BAD,
        tier=Tier.CI,
        description=description or f"must violate {invariant}",
        run=run,
        model=factory,
    )


def proof_target(
    name: str,
    prove: Callable[[], ProofVerdict],
    *,
    expect_holds: bool = True,
    description: str = "",
) -> Target:
    """A z3 proof (tier ``ci``). With ``expect_holds=False`` it is a known-bad proof.

    A known-bad proof passes only with a counterexample: a query z3 could not decide (no
    counterexample) is "not refuted", since nothing was shown.
    """

    def run(options: RunOptions) -> Outcome:
        started = time.perf_counter()
        verdict = prove()
        seconds = time.perf_counter() - started
        report = verdict.counterexample or ""
        if expect_holds:
            return Outcome(
                target=name,
                kind=TargetKind.PROOF,
                tier=Tier.CI,
                passed=verdict.holds,
                verdict="proved" if verdict.holds else "not proved",
                seconds=seconds,
                message="" if verdict.holds else "z3 found a counterexample or timed out",
                report=report,
            )
        refuted = not verdict.holds and verdict.counterexample is not None
        return Outcome(
            target=name,
            kind=TargetKind.PROOF,
            tier=Tier.CI,
            passed=refuted,
            verdict="refuted" if refuted else "not refuted",
            seconds=seconds,
            message="" if refuted else "the known-bad transition was not refuted by z3",
            report=report,
        )

    return Target(name=name, kind=TargetKind.PROOF, tier=Tier.CI, description=description, run=run)


# --- running ------------------------------------------------------------------------------------


def _guarded(target: Target, call: Callable[[], Outcome]) -> Outcome:
    started = time.perf_counter()
    try:
        outcome = call()
    except Exception as exc:
        from tent_models._failure import describe_failure  # noqa: PLC0415 (only on a failure)

        described = describe_failure(exc, target.model)
        message, report = described or (
            f"{type(exc).__name__}: {exc}",
            "".join(traceback.format_exception(exc)),
        )
        return Outcome(
            target=target.name,
            kind=target.kind,
            tier=target.tier,
            passed=False,
            verdict="error",
            seconds=time.perf_counter() - started,
            message=message,
            report=report,
        )
    return attrs.evolve(
        outcome, seconds=time.perf_counter() - started, model=outcome.model or target.model
    )


def run_target(target: Target, options: RunOptions) -> Outcome:
    """Run ``target``; an exception escaping it becomes an ``error`` outcome with the traceback.

    The CLI keeps going after an erroring target, so one broken model cannot hide the others'
    results (and the reports are still written). The outcome's ``seconds`` is the target's
    wall-clock time (model construction, exploration and counterexample rebuilding).
    """
    return _guarded(target, lambda: target.run(options))


def simulate_target(target: Target, *, seed: int, walks: int, depth: int) -> Outcome:
    """Seeded random simulation of a model target (``tent check --simulate``).

    Passes when no walk met a violation; the (minimised) counterexample is in ``report``. As in
    :func:`run_target`, an exception (e.g. ``walks < 1``, or a target without a model) becomes
    an ``error`` outcome.
    """

    def run() -> Outcome:
        if target.model is None:
            raise ValueError(f"target {target.name!r} has no model to simulate")
        result = simulate(target.model(), seed=seed, walks=walks, depth=depth)
        return Outcome(
            target=target.name,
            kind=target.kind,
            tier=target.tier,
            passed=result.ok,
            verdict="ok" if result.ok else "violated",
            message=_violation_summary(result.violations),
            report=_report(result.violations),
            **_counts(result),
        )

    return _guarded(target, run)


def select(
    targets: Iterable[Target], *, only: Sequence[str] = (), deep: bool = False
) -> tuple[Target, ...]:
    """The targets a run includes, in catalogue order.

    1. Without ``only``: every ``ci`` target, plus the ``deep`` ones when ``deep``.
    2. With ``only`` (shell globs on the target name, any may match): every matching target of
       any tier, except ``deep`` ones unless ``deep`` (so ``--only 'credit/*'`` never starts a
       benchmark campaign by accident).
    """
    chosen: list[Target] = []
    for target in targets:
        if target.tier is Tier.DEEP and not deep:
            continue
        if only:
            if any(fnmatch.fnmatchcase(target.name, pattern) for pattern in only):
                chosen.append(target)
        elif target.tier is not Tier.TINY:
            chosen.append(target)
    return tuple(chosen)
