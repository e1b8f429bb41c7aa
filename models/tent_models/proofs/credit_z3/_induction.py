"""Inductive-invariant checks: :func:`check_candidate` and the two proofs the registry runs
(:func:`prove_ledger_inductive`, :func:`prove_allocator_inductive`)."""

from __future__ import annotations

import time
import types
from collections.abc import Sequence
from typing import Any

import z3

from tent_models.proofs.credit_z3._allocator_rules import _allocator
from tent_models.proofs.credit_z3._encoding import (
    ALLOCATOR_INVARIANT,
    ALLOCATOR_MUTATIONS,
    LEDGER_INVARIANT,
    LEDGER_MUTATIONS,
    _IntArith,
    _System,
)
from tent_models.proofs.credit_z3._ledger_rules import _ledger
from tent_models.proofs.credit_z3._results import (
    ProofResult,
    _first_violated,
    _freeze,
    _solver,
    _values,
)


def _build(system: str, mutation: str | None) -> _System:
    if system == "ledger":
        if mutation is not None and mutation not in LEDGER_MUTATIONS:
            raise ValueError(f"unknown ledger mutation {mutation!r}")
        return _ledger(_IntArith(), mutation)
    if system == "allocator":
        if mutation is not None and mutation not in ALLOCATOR_MUTATIONS:
            raise ValueError(f"unknown allocator mutation {mutation!r}")
        return _allocator(mutation)
    raise ValueError(f"unknown system {system!r} (ledger or allocator)")


def check_candidate(
    system: str,
    invariants: Sequence[str],
    *,
    mutation: str | None = None,
    name: str | None = None,
) -> ProofResult:
    """Check whether the conjunction of ``invariants`` is inductive for ``system``.

    1. Base case: ``Init ∧ ¬Inv`` must be unsatisfiable.
    2. For each action separately: ``Inv ∧ T_action ∧ ¬Inv'`` must be unsatisfiable.
    3. The first failing check (base case first, then actions in order) gives the CTI. Its
       violated invariant is the first of ``invariants`` that can be falsified by that step (so the
       report is deterministic): it is searched conjunct by conjunct.

    ``system`` is ``"ledger"`` or ``"allocator"``; ``invariants`` are names from
    :func:`predicate_names`; ``mutation`` (a key of :data:`LEDGER_MUTATIONS` /
    :data:`ALLOCATOR_MUTATIONS`) swaps in a known-bad transition. Raises ``ValueError`` on an
    unknown system, mutation or predicate name, or an empty candidate. A query z3 cannot decide in
    time counts as not holding (with no CTI).
    """
    started = time.perf_counter()
    sys = _build(system, mutation)
    names = tuple(invariants)
    if not names:
        raise ValueError("a candidate invariant needs at least one predicate")
    for n in names:
        if n not in sys.predicates:
            raise ValueError(f"unknown {system} predicate {n!r}; known: {sorted(sys.predicates)}")
    per_action: dict[str, bool] = {}
    cti: dict[str, Any] | None = None

    pre = sys.state("")
    solver = _solver()
    solver.add(sys.init(pre), z3.Not(sys.conjunction(names, pre)))
    verdict = solver.check()
    per_action["init"] = verdict == z3.unsat
    if verdict == z3.sat:
        model = solver.model()
        cti = {
            "kind": "base",
            "steps": ({"state": _values(sys, model, pre)},),
            "violated": _first_violated(sys, names, model, pre),
        }

    post = sys.state("'")
    for action in sys.actions:
        params = sys.params(action, "")
        step = z3.And(sys.conjunction(names, pre), sys.relation(action, pre, params, post))
        solver = _solver()
        solver.add(step, z3.Not(sys.conjunction(names, post)))
        verdict = solver.check()
        per_action[action.name] = verdict == z3.unsat
        if verdict != z3.sat or cti is not None:
            continue
        for target in names:  # the first conjunct this step can break names the CTI
            solver = _solver()
            solver.add(step, z3.Not(sys.predicates[target](post)))
            if solver.check() == z3.sat:
                model = solver.model()
                cti = {
                    "kind": "cti",
                    "steps": (
                        {"state": _values(sys, model, pre)},
                        {
                            "action": action.name,
                            "args": _values(sys, model, params),
                            "state": _values(sys, model, post),
                        },
                    ),
                    "violated": target,
                }
                break
    label = name or f"{system}[{', '.join(names)}]" + (f" with {mutation}" if mutation else "")
    return ProofResult(
        name=label,
        holds=all(per_action.values()),
        per_action=types.MappingProxyType(per_action),
        cti=None if cti is None else _freeze(cti),
        seconds=time.perf_counter() - started,
        invariants=names,
    )


def predicate_names(system: str) -> tuple[str, ...]:
    """The named predicates a candidate for ``system`` may combine (ValueError if unknown)."""
    return tuple(_build(system, None).predicates)


def prove_ledger_inductive(*, mutation: str | None = None) -> ProofResult:
    """Prove :data:`LEDGER_INVARIANT` inductive for the sender ledger
    (docs/semantics.md#sender-ledger).

    Invariants: ``0 ≤ consumed, returned`` and ``consumed + returned ≤ grant_total`` (available
    never negative, never above granted); ``grant_total ≤`` the receiver's granted total of that
    key and epoch; ``1 ≤ epoch ≤`` the receiver's epoch. With ``mutation`` the proof is expected
    to fail (a known-bad transition).
    """
    return check_candidate("ledger", LEDGER_INVARIANT, mutation=mutation, name="ledger")


def prove_allocator_inductive(*, mutation: str | None = None) -> ProofResult:
    """Prove :data:`ALLOCATOR_INVARIANT` inductive for the receiver allocator
    (docs/semantics.md#receiver-allocator).

    Invariants: per resource ``Σ outstanding ≤ capacity`` and ``Σ USER outstanding ≤ capacity −
    staging_reserve``; per record ``outstanding ≥ 0``, ``released ≤ landed``, and the fence
    accounting (``landed + reclaimed_by_return ≤ granted`` while live, ``= granted −
    reclaimed_by_fence`` once fenced); ``0 ≤ reserve ≤ capacity``.
    """
    return check_candidate("allocator", ALLOCATOR_INVARIANT, mutation=mutation, name="allocator")
