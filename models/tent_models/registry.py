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

Layout: the target values, judging, builders, running and selection live in
``tent_models._targets`` (re-exported here); the proof targets in ``_proof_targets``, the
conformance and contract targets in ``_conformance_targets``; this module joins the sources
into :func:`catalogue`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import cast

from tent_spec.variants import KNOWN_BAD as CREDIT_VARIANTS

from tent_models import configs
from tent_models._conformance_targets import (
    _conformance_targets,
    _contract_targets,
)
from tent_models._proof_targets import _proof_targets
from tent_models._targets import (
    TARGET_KINDS,
    ModelFactory,
    Outcome,
    ProofVerdict,
    RunOptions,
    Target,
    TargetKind,
    Tier,
    judge_known_bad,
    judge_model,
    known_bad_target,
    model_target,
    proof_target,
    run_target,
    select,
    simulate_target,
)
from tent_models.configs import admission as configs_admission
from tent_models.configs import gated as configs_gated

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
            hook = options.progress if callable(options.progress) else None
            result = ablation.ablate(ref, progress=hook)
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
                result=result.result,
                model=result.factory,
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
