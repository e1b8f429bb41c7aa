"""z3 proofs of the arbitration order (docs/semantics.md#arbitration, Deadline Scheduling "RDMA
Bandwidth Arbitration").

``order_by_deadline`` is encoded here from docs/semantics.md#arbitration, not imported. The greedy
loop is unrolled slot by slot for ``n`` symbolic slices (symbolic deadlines, clock and scores),
exactly as
specified:

1. score every unplaced slice with ``deadline_mlu(bytes_ahead, length, deadline, now, bw)``;
2. walk the slices in arrival order; a slice replaces the best so far only when its score is
   **strictly greater** (ties go to the lowest index);
3. place the best, ``bytes_ahead += length``.

The proof is compositional, which keeps every query well under a second:

* **lemma ``score_range``** (over the reals, with symbolic lengths, bytes ahead and bandwidth and
  :func:`tent_models.proofs.mlu_z3.real_mlu`): with usable bandwidth (≥ 1 B/s) and
  ``bytes_ahead`` below ``(n + 1) · 2**64`` (the posted bytes plus the lengths already placed), a
  slice without a deadline scores exactly 0, a past-due slice exactly ``DBL_MAX`` and a slice
  whose deadline is ahead strictly between 0 and ``DBL_MAX``;
* **slot obligations**: each slot's scores are fresh reals constrained only by the lemma's three
  categories, so the properties are proved for *every* score vector the lemma allows, in
  particular for the real ones whatever ``bytes_ahead`` has grown to.

The arbitration is active (bandwidth > 0, at least two slices, one with a deadline); ``n ≤ 4`` is
far below the 64 exactly-resolved slots. For every ``n`` in ``2..max_slices`` and every slot:

* ``greedy_picks_a_maximum``: the placed slice's score is ≥ every unplaced slice's score;
* ``ties_keep_arrival_order``: every unplaced slice before it in arrival order scores strictly
  less (the first maximum wins);
* ``no_deadline_never_precedes_deadline``: a slice without a deadline is placed only when no
  unplaced slice has one (MLU 0 against a deadline slice's > 0);
* ``past_due_first``: while a past-due slice is unplaced, the placed slice is past due
  (``DBL_MAX`` beats every finite score).

Scores are compared over the reals. The FP64 implementation compares rounded values; the three
categories survive rounding (rounding is monotone, maps 0 to 0 and ``DBL_MAX`` to itself, and a
deadline-ahead score is at least 1e9 / 2**128, far above the smallest subnormal), so the two
deadline properties carry over; among deadline-ahead slices rounding can create ties, which the
implementation breaks by arrival order exactly as proved here.

``variant`` selects a deliberately broken greedy (:data:`BROKEN_VARIANTS`) for the tests; each
must fail at least one property.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import z3

from tent_models.checker import InvalidArgument
from tent_models.proofs.credit_z3 import ProofResult
from tent_models.proofs.mlu_z3 import DBL_MAX, U64_LIMIT, real_mlu, render

__all__ = [
    "BROKEN_VARIANTS",
    "PROPERTIES",
    "prove_all",
    "prove_property",
    "prove_score_range",
]

PROPERTIES = (
    "greedy_picks_a_maximum",
    "ties_keep_arrival_order",
    "no_deadline_never_precedes_deadline",
    "past_due_first",
)

#: Broken greedy variants and what they get wrong.
BROKEN_VARIANTS: Mapping[str, str] = {
    "ge_wins": "a later slice wins a tie (>= instead of >): arrival order of ties is lost",
    "ascending": "the lowest score wins: the least urgent slice posts first",
    "no_deadline_as_past_due": "the past-due check runs before the no-deadline check, so "
    "deadline 0 <= now scores DBL_MAX",
}

_QUERY_TIMEOUT_MS = 60_000
MAX_SLICES = 4

Term = Any  # a z3 expression


class _Slot:
    """One unrolled slot: which slices were unplaced, their scores, and the choice."""

    def __init__(self, unplaced: list[Term], scores: list[Term], choice: Term) -> None:
        self.unplaced = unplaced
        self.scores = scores
        self.choice = choice

    def select(self, values: list[Term]) -> Term:
        """``values[choice]`` as a term."""
        term = values[0]
        for i in range(1, len(values)):
            term = z3.If(self.choice == i, values[i], term)
        return term


class _Slices:
    """Symbolic inputs of one arbitration pass over ``n`` slices."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.deadlines = [z3.Int(f"deadline{i}") for i in range(n)]
        self.now = z3.Int("now")

    def active(self) -> Term:
        """Inputs on which the arbitration reorders (docs/semantics.md#arbitration), in the u64
        domain."""
        return z3.And(
            *(z3.And(d >= 0, d < U64_LIMIT) for d in self.deadlines),
            self.now >= 0,
            self.now < U64_LIMIT,
            z3.Or(*(d != 0 for d in self.deadlines)),
        )

    def scores(self, slot: int, variant: str | None) -> tuple[list[Term], Term]:
        """Fresh scores for one slot and what lemma ``score_range`` says about them."""
        scores = [z3.Real(f"score{slot}_{i}") for i in range(self.n)]
        categories = [
            _category(score, d, self.now, variant)
            for score, d in zip(scores, self.deadlines, strict=True)
        ]
        return scores, z3.And(*categories)

    def shown(self, slots: list[_Slot]) -> dict[str, Term]:
        values: dict[str, Term] = {"now": self.now}
        for i in range(self.n):
            values[f"deadline{i}"] = self.deadlines[i]
        for k, slot in enumerate(slots):
            values[f"slot{k}"] = slot.choice
            for i, score in enumerate(slot.scores):
                values[f"score{k}_{i}"] = score
        return values


def _category(score: Term, deadline: Term, now: Term, variant: str | None) -> Term:
    """The score of one slice by category (docs/semantics.md#mlu edge rules, lemma
    ``score_range``)."""
    ahead = z3.And(score > 0, score < DBL_MAX)
    if variant == "no_deadline_as_past_due":  # the past-due test runs first, and 0 <= now
        return z3.If(deadline <= now, score == DBL_MAX, ahead)
    return z3.If(deadline == 0, score == 0, z3.If(deadline <= now, score == DBL_MAX, ahead))


def prove_score_range(*, max_slices: int = MAX_SLICES) -> ProofResult:
    """Prove lemma ``score_range`` over the reals for ``bytes_ahead < (max_slices + 1) · 2**64``.

    Raises :class:`~tent_models.checker.InvalidArgument` for ``max_slices`` outside ``2..4``.
    """
    _check_slices(max_slices)
    b, length, bw = z3.Reals("bytes_ahead length bandwidth")
    d, now = z3.Ints("deadline now")
    domain = z3.And(
        b >= 0,
        b < (max_slices + 1) * U64_LIMIT,
        length > 0,
        length < U64_LIMIT,
        bw >= 1,
        bw < U64_LIMIT,
        d >= 0,
        d < U64_LIMIT,
        now >= 0,
        now < U64_LIMIT,
    )
    formula = z3.Implies(domain, _category(real_mlu(b, length, d, now, bw), d, now, None))
    start = time.perf_counter()
    solver = z3.Solver()
    solver.set("timeout", _QUERY_TIMEOUT_MS)
    solver.add(z3.Not(formula))
    verdict = solver.check()
    shown = {"bytes_ahead": b, "length": length, "bandwidth": bw, "deadline": d, "now": now}
    return ProofResult(
        name="arbitration/lemma_score_range",
        holds=verdict == z3.unsat,
        per_action={"real": verdict == z3.unsat},
        cti=None if verdict == z3.unsat else _counterexample(solver, verdict, "real", shown),
        seconds=time.perf_counter() - start,
    )


def _check_slices(max_slices: int) -> None:
    if not 2 <= max_slices <= MAX_SLICES:
        raise InvalidArgument(f"max_slices must be in 2..{MAX_SLICES}")


def _better(candidate: Term, best: Term, variant: str | None) -> Term:
    if variant == "ge_wins":
        return candidate >= best
    if variant == "ascending":
        return candidate < best
    # docs/semantics.md#arbitration: "strictly greater wins, so ties go to the lowest index"
    return candidate > best


def _unroll(s: _Slices, variant: str | None) -> tuple[list[_Slot], Term]:
    """The greedy loop of docs/semantics.md#arbitration for ``s.n`` slices, every slot, and the
    lemma's constraint on the slots' scores."""
    placed: list[Term] = [z3.BoolVal(False)] * s.n
    slots = []
    constraints = []
    for k in range(s.n):
        scores, constraint = s.scores(k, variant)
        constraints.append(constraint)
        best: Term = z3.IntVal(-1)
        best_score: Term = z3.RealVal(0)
        for i in range(s.n):
            take = z3.And(
                z3.Not(placed[i]), z3.Or(best == -1, _better(scores[i], best_score, variant))
            )
            best = z3.If(take, i, best)
            best_score = z3.If(take, scores[i], best_score)
        slots.append(_Slot([z3.Not(p) for p in placed], scores, best))
        placed = [z3.Or(placed[i], best == i) for i in range(s.n)]
    return slots, z3.And(*constraints)


def _property(name: str, s: _Slices, slot: _Slot) -> Term:
    chosen_score = slot.select(slot.scores)
    chosen_deadline = slot.select(s.deadlines)
    idx = range(s.n)
    if name == "greedy_picks_a_maximum":
        return z3.And(*(z3.Implies(slot.unplaced[i], slot.scores[i] <= chosen_score) for i in idx))
    if name == "ties_keep_arrival_order":
        return z3.And(
            *(
                z3.Implies(z3.And(slot.unplaced[i], i < slot.choice), slot.scores[i] < chosen_score)
                for i in idx
            )
        )
    if name == "no_deadline_never_precedes_deadline":
        any_deadline = z3.Or(*(z3.And(slot.unplaced[i], s.deadlines[i] != 0) for i in idx))
        return z3.Implies(any_deadline, chosen_deadline != 0)
    past_due = [z3.And(s.deadlines[i] != 0, s.deadlines[i] <= s.now) for i in idx]
    any_past_due = z3.Or(*(z3.And(slot.unplaced[i], past_due[i]) for i in idx))
    return z3.Implies(any_past_due, z3.And(chosen_deadline != 0, chosen_deadline <= s.now))


def prove_property(
    name: str, *, max_slices: int = MAX_SLICES, variant: str | None = None
) -> ProofResult:
    """Prove one of :data:`PROPERTIES` for every ``n`` in ``2..max_slices`` and every slot.

    ``per_action`` maps ``"n=<n>/slot=<k>"`` to whether the property holds there; ``cti`` holds
    the deadlines, the clock, the scores, the choices and the failing obligation of the first
    counterexample. The scores are constrained by lemma ``score_range`` only, which
    :func:`prove_score_range` proves (:func:`prove_all` runs both).
    Raises :class:`~tent_models.checker.InvalidArgument` for an unknown property or variant, or
    ``max_slices`` outside ``2..4``.
    """
    if name not in PROPERTIES:
        raise InvalidArgument(f"unknown arbitration property {name!r}")
    if variant is not None and variant not in BROKEN_VARIANTS:
        raise InvalidArgument(f"unknown broken variant {variant!r}")
    _check_slices(max_slices)
    start = time.perf_counter()
    per_action: dict[str, bool] = {}
    cti: Mapping[str, Any] | None = None
    for n in range(2, max_slices + 1):
        s = _Slices(n)
        slots, lemma = _unroll(s, variant)
        for k, slot in enumerate(slots):
            obligation = f"n={n}/slot={k}"
            solver = z3.Solver()
            solver.set("timeout", _QUERY_TIMEOUT_MS)
            solver.add(s.active(), lemma, z3.Not(_property(name, s, slot)))
            verdict = solver.check()
            per_action[obligation] = verdict == z3.unsat
            if cti is None and verdict != z3.unsat:
                cti = _counterexample(solver, verdict, obligation, s.shown(slots))
    suffix = "" if variant is None else f"[{variant}]"
    return ProofResult(
        name=f"arbitration/{name}{suffix}",
        holds=all(per_action.values()),
        per_action=per_action,
        cti=cti,
        seconds=time.perf_counter() - start,
    )


def _counterexample(
    solver: Any, verdict: Any, obligation: str, shown: Mapping[str, Term]
) -> Mapping[str, Any]:
    if verdict == z3.unknown:
        return {"kind": "unknown", "obligation": obligation, "reason": solver.reason_unknown()}
    model = solver.model()
    values = {k: render(model.eval(v, model_completion=True)) for k, v in shown.items()}
    return {"kind": "counterexample", "obligation": obligation, "values": values}


def prove_all(
    *, max_slices: int = MAX_SLICES, variant: str | None = None
) -> tuple[ProofResult, ...]:
    """Lemma ``score_range``, then every property of :data:`PROPERTIES`, in that order."""
    properties = [prove_property(p, max_slices=max_slices, variant=variant) for p in PROPERTIES]
    return (prove_score_range(max_slices=max_slices), *properties)
