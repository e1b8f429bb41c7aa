"""The catalogue of everything ``tent check`` verifies, and how each kind of target is judged.

A :class:`Target` is one named check with a kind, a tier and a ``run`` function returning an
:class:`Outcome` (a value: a failed check is an outcome, never an exception). The kinds, in the
order ``tent check`` runs them (:data:`TARGET_KINDS`):

1. ``model``: a shipped model configuration (the modules of ``tent_models.configs``:
   credit, admission, gated), explored exhaustively. It passes when no property is
   violated, the exploration was exhaustive, and its counts equal the manifest
   (:mod:`tent_models.manifest`).
2. ``known-bad``: a spec variant with one rule removed. It passes when the checker *refutes* it
   with a counterexample to the invariant the variant names; no counterexample, or only other
   violations, is a failure (the invariants are then too weak to notice the missing rule).
3. ``ablation``: one conjunct of a credit spec action's guard removed
   (:mod:`tent_models.ablation`). It passes when a small shipped model refutes the weakened
   spec, or when the conjunct's survival is explained (``ablation.EXPLAINED``, or it is a bound
   or a fault budget); a survivor or an inconclusive run without a reason fails it. The rule
   conjuncts of the actions that move credit or capacity are ``ci``, the rest ``deep``.
4. ``proof``: a z3 proof (``tent_models.proofs``: credit ledger and allocator induction and
   BMC, MLU properties, arbitration order). A proof of a property passes when it holds; a proof
   over a known-bad (mutated) transition passes when z3 produces a counterexample.

Tiers: ``ci`` targets are the default run, ``deep`` ones are added by ``--deep`` (and are the
ones ``--simulate`` walks), ``tiny`` models are the unit tests' (selected with ``--only``).

Extension point: a new kind (the conformance run) adds a :class:`TargetKind` member, its place
in :data:`TARGET_KINDS` and a source of targets in :data:`_SOURCES`; the CLI, the reports and the
selection need no change.
"""

from __future__ import annotations

import enum
import fnmatch
import inspect
import random
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import attrs
from tent_spec.variants import KNOWN_BAD as CREDIT_VARIANTS

from tent_models import configs
from tent_models.checker import (
    CheckResult,
    CounterExample,
    PlainModel,
    ViolationKind,
    check,
    format_counterexample,
    simulate,
)
from tent_models.configs import admission as configs_admission
from tent_models.configs import gated as configs_gated
from tent_models.conformance import Divergence, minimise_divergence
from tent_models.manifest import Counts, Manifest
from tent_models.model_api import SpecModel
from tent_models.proofs import arbitration_z3, credit_z3, ledger_explicit, mlu_z3

__all__ = [
    "TARGET_KINDS",
    "Outcome",
    "ProofVerdict",
    "RunOptions",
    "Target",
    "TargetKind",
    "Tier",
    "catalogue",
    "judge_known_bad",
    "judge_model",
    "known_bad_target",
    "model_target",
    "proof_target",
    "run_target",
    "select",
    "simulate_target",
]

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
    """How targets run: checker processes, the live progress display, the expected counts."""

    workers: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    progress: bool = False
    manifest: Manifest = attrs.field(factory=Manifest)
    plain: bool = False  # hide the models' fast path (PlainModel): the readable path only


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
    return ", ".join(f"{v.kind.value} {v.name}" for v in violations)


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
    """
    common = _counts(result)
    expected = [
        v for v in result.violations if v.kind is ViolationKind.INVARIANT and v.name == invariant
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
        result = check(_build(factory, options), workers=options.workers, progress=options.progress)
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
        result = check(_build(factory, options), workers=options.workers, progress=options.progress)
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
        return Outcome(
            target=target.name,
            kind=target.kind,
            tier=target.tier,
            passed=False,
            verdict="error",
            seconds=time.perf_counter() - started,
            message=f"{type(exc).__name__}: {exc}",
            report="".join(traceback.format_exception(exc)),
        )
    return attrs.evolve(outcome, seconds=time.perf_counter() - started)


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


# --- the catalogue ------------------------------------------------------------------------------


def _tier_of(name: str) -> Tier:
    """``credit/ci`` -> ``Tier.CI``: the last path segment of a configuration name is its tier."""
    return Tier(name.rsplit("/", 1)[-1])


def _as_model(factory: Callable[[], object]) -> ModelFactory:
    """Type a spec factory as a :class:`SpecModel` factory.

    The admission spec restates the ``Step`` / ``Invariant`` shapes as its own NamedTuples (the
    spec imports nothing from ``tent_models``), so it satisfies the Protocol only structurally
    at run time, not nominally for mypy.
    """
    return cast(ModelFactory, factory)


def _model_targets() -> list[Target]:
    merged: dict[str, ModelFactory] = {
        **{name: _as_model(f) for name, f in configs_admission.CONFIGS.items()},
        **configs.CONFIGS,
        **{name: _as_model(f) for name, f in configs_gated.CONFIGS.items()},
    }
    return [model_target(name, _tier_of(name), factory) for name, factory in merged.items()]


def _known_bad_targets() -> list[Target]:
    targets = [
        known_bad_target(
            f"credit/bad/{variant}",
            factory,
            configs.KNOWN_BAD_EXPECTED[variant],
            description=f"must violate {configs.KNOWN_BAD_EXPECTED[variant]}: "
            f"{CREDIT_VARIANTS[variant][2]}",
        )
        for variant, factory in configs.KNOWN_BAD_CONFIGS.items()
    ]
    targets.extend(
        known_bad_target(name, _as_model(factory), invariant)
        for module in (configs_admission, configs_gated)
        for name, (factory, invariant) in module.KNOWN_BAD.items()
    )
    return targets


def _ablation_targets() -> list[Target]:
    from tent_spec.credit import RULE  # noqa: PLC0415 - only the ablation needs the kinds

    from tent_models import ablation  # noqa: PLC0415 - keeps the registry import light

    def target(ref: ablation.GuardRef) -> Target:
        tier = (
            Tier.CI
            if ref.kind == RULE and ref.action in ablation.CREDIT_SAFETY_ACTIONS
            else Tier.DEEP
        )
        name = f"ablation/{ref.spec}/{ref.action}.{ref.guard}"

        def run(options: RunOptions) -> Outcome:
            result = ablation.ablate(ref)
            passed, message = ablation.judge(result)
            return Outcome(
                target=name,
                kind=TargetKind.ABLATION,
                tier=tier,
                passed=passed,
                verdict=result.verdict.value,
                seconds=result.seconds,
                states=sum(n for _m, n, _full in result.runs),
                message=message,
            )

        return Target(
            name=name,
            kind=TargetKind.ABLATION,
            tier=tier,
            description=f"{ref.kind} conjunct {ref.guard!r} of {ref.action} removed: a small "
            "model must refute it, or its survival be explained",
            run=run,
        )

    return [target(ref) for ref in ablation.credit_guards()]


def _credit_proof(
    call: Callable[[], credit_z3.ProofResult | credit_z3.BmcResult],
) -> Callable[[], ProofVerdict]:
    def prove() -> ProofVerdict:
        result = call()
        trace = result.cti if isinstance(result, credit_z3.ProofResult) else result.counterexample
        return ProofVerdict(
            holds=result.holds,
            counterexample=None if trace is None else credit_z3.format_cti(result),
        )

    return prove


_CROSS_CHECK_K = 6  # the diameter of the u2 ledger's graph: BMC to it is complete there


def _ledger_cross_check() -> ProofVerdict:
    checks = [
        ledger_explicit.cross_check_ledger(_CROSS_CHECK_K, bits=2, mutation=mutation)
        for mutation in (None, *credit_z3.LEDGER_MUTATIONS)
    ]
    agree = all(c.agree for c in checks)
    return ProofVerdict(
        holds=agree,
        counterexample=None if agree else "\n".join(c.summary() for c in checks),
    )


def _ledger_mutation(mutation: str) -> Callable[[], ProofVerdict]:
    return _credit_proof(lambda: credit_z3.prove_ledger_inductive(mutation=mutation))


def _allocator_mutation(mutation: str) -> Callable[[], ProofVerdict]:
    return _credit_proof(lambda: credit_z3.prove_allocator_inductive(mutation=mutation))


def _describe_obligation_cti(result: credit_z3.ProofResult) -> str | None:
    """The MLU / arbitration CTI shape: the failing obligation and the model's values.

    ``None`` when there is no counterexample (the proof holds, or z3 answered unknown).
    """
    cti = result.cti
    if cti is None or cti["kind"] != "counterexample":
        return None
    values = ", ".join(f"{k}={v}" for k, v in cti["values"].items())
    return f"{result.name}: counterexample to {cti['obligation']}\n    {values}"


def _obligation_proof(prove: Callable[[], credit_z3.ProofResult]) -> Callable[[], ProofVerdict]:
    def run() -> ProofVerdict:
        result = prove()
        return ProofVerdict(holds=result.holds, counterexample=_describe_obligation_cti(result))

    return run


def _broken_arbitration(variant: str) -> Callable[[], ProofVerdict]:
    """Every arbitration proof over a broken greedy: refuted when any of them fails with a CTI."""

    def run() -> ProofVerdict:
        results = arbitration_z3.prove_all(variant=variant)
        shown = [text for r in results if (text := _describe_obligation_cti(r)) is not None]
        return ProofVerdict(
            holds=all(r.holds for r in results),
            counterexample="\n".join(shown) if shown else None,
        )

    return run


def _arbitration_property(name: str) -> Callable[[], ProofVerdict]:
    return _obligation_proof(lambda: arbitration_z3.prove_property(name))


#: The MLU proofs, in :func:`tent_models.proofs.mlu_z3.prove_all` order (a test pins the two).
_MLU_PROOFS: tuple[Callable[[], credit_z3.ProofResult], ...] = (
    mlu_z3.prove_monotone_in_bytes_ahead,
    mlu_z3.prove_monotone_in_length,
    mlu_z3.prove_antitone_in_window,
    mlu_z3.prove_threshold_characterisation,
    mlu_z3.prove_no_deadline_or_bandwidth_never_dropped,
    mlu_z3.prove_past_due_dominates_finite,
    mlu_z3.prove_fp_no_deadline_or_bandwidth_never_dropped,
    mlu_z3.prove_fp_past_due_always_dropped,
)


def _summary(function: Callable[..., object]) -> str:
    """The first paragraph of a proof's docstring, on one line (its ``--list`` description)."""
    first = (inspect.getdoc(function) or "").split("\n\n", 1)[0]
    return " ".join(first.split())


def _proof_targets() -> list[Target]:
    targets = [
        proof_target(
            "z3/credit/ledger",
            _credit_proof(credit_z3.prove_ledger_inductive),
            description="sender ledger invariant is inductive (SEMANTICS §6)",
        ),
        proof_target(
            "z3/credit/allocator",
            _credit_proof(credit_z3.prove_allocator_inductive),
            description="receiver allocator invariant is inductive (SEMANTICS §8)",
        ),
        proof_target(
            "z3/credit/ledger-bmc",
            _credit_proof(lambda: credit_z3.bmc_ledger(_LEDGER_BMC_DEPTH)),
            description=f"ledger: no violation within {_LEDGER_BMC_DEPTH} steps over u4 counters",
        ),
        proof_target(
            "z3/credit/ledger-bmc-vs-explicit",
            _ledger_cross_check,
            description="z3 BMC and the explicit checker agree on the ledger over u2 counters "
            "(verdicts, lengths, trace replay, reachable sets), correct and every mutation",
        ),
    ]
    targets.extend(
        proof_target(
            "z3/mlu/" + prove.__name__.removeprefix("prove_"),
            _obligation_proof(prove),
            description=f"SEMANTICS §1: {_summary(prove)}",
        )
        for prove in _MLU_PROOFS
    )
    targets.append(
        proof_target(
            "z3/arbitration/lemma_score_range",
            _obligation_proof(arbitration_z3.prove_score_range),
            description="SEMANTICS §3: with usable bandwidth a slice without a deadline "
            "scores 0, a past-due one DBL_MAX, one with a deadline ahead strictly between",
        )
    )
    targets.extend(
        proof_target(
            f"z3/arbitration/{name}",
            _arbitration_property(name),
            description=f"SEMANTICS §3: {name.replace('_', ' ')}, for every slot of 2.."
            f"{arbitration_z3.MAX_SLICES} slices",
        )
        for name in arbitration_z3.PROPERTIES
    )
    known_bad_proofs: tuple[
        tuple[str, Callable[[str], Callable[[], ProofVerdict]], Mapping[str, str]], ...
    ] = (
        ("z3/arbitration/bad", _broken_arbitration, arbitration_z3.BROKEN_VARIANTS),
        ("z3/credit/ledger/bad", _ledger_mutation, credit_z3.LEDGER_MUTATIONS),
        ("z3/credit/allocator/bad", _allocator_mutation, credit_z3.ALLOCATOR_MUTATIONS),
    )
    for prefix, refute, rules in known_bad_proofs:
        targets.extend(
            proof_target(
                f"{prefix}/{name}",
                refute(name),
                expect_holds=False,
                description=f"known-bad: {rule}",
            )
            for name, rule in rules.items()
        )
    return targets


_LEDGER_BMC_DEPTH = 5

# --- conformance and contracts ---------------------------------------------------------------

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


_SOURCES: Mapping[TargetKind, Callable[[], Iterable[Target]]] = {
    TargetKind.MODEL: _model_targets,
    TargetKind.KNOWN_BAD: _known_bad_targets,
    TargetKind.ABLATION: _ablation_targets,
    TargetKind.PROOF: _proof_targets,
    TargetKind.CONFORMANCE: _conformance_targets,
    TargetKind.CONTRACTS: _contract_targets,
}


def catalogue() -> tuple[Target, ...]:
    """Every target, grouped by :data:`TARGET_KINDS` order, names sorted within a kind.

    Builds the targets afresh from the configuration and proof modules. Raises
    ``ValueError`` when a configuration name does not end in a tier or two targets share a name.
    """
    targets: list[Target] = []
    for kind in TARGET_KINDS:
        targets.extend(sorted(_SOURCES[kind](), key=lambda t: t.name))
    names = [t.name for t in targets]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"duplicate target names: {duplicates}")
    return tuple(targets)
