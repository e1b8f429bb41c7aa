"""The z3 proof targets of ``tent check``: the credit ledger and allocator (induction, BMC and
their mutations), the explicit-state cross-check of the ledger, the MLU properties and the
arbitration order (:mod:`tent_models.proofs`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping

from tent_models._targets import ProofVerdict, Target, proof_target
from tent_models.proofs import arbitration_z3, credit_z3, ledger_explicit, mlu_z3


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
            description="sender ledger invariant is inductive (docs/semantics.md#sender-ledger)",
        ),
        proof_target(
            "z3/credit/allocator",
            _credit_proof(credit_z3.prove_allocator_inductive),
            description="receiver allocator invariant is inductive "
            "(docs/semantics.md#receiver-allocator)",
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
            description=f"docs/semantics.md#mlu: {_summary(prove)}",
        )
        for prove in _MLU_PROOFS
    )
    targets.append(
        proof_target(
            "z3/arbitration/lemma_score_range",
            _obligation_proof(arbitration_z3.prove_score_range),
            description="docs/semantics.md#arbitration: with usable bandwidth a slice without a "
            "deadline "
            "scores 0, a past-due one DBL_MAX, one with a deadline ahead strictly between",
        )
    )
    targets.extend(
        proof_target(
            f"z3/arbitration/{name}",
            _arbitration_property(name),
            description=f"docs/semantics.md#arbitration: {name.replace('_', ' ')}, for every slot "
            f"of 2.."
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
