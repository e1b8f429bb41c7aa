"""Guard ablation: remove each conjunct of each spec action's guard in turn and look for a
shipped model that refutes the weakened spec (issue 10, item 16).

A conjunct whose removal no model refutes is either redundant (implied by the others) or
guards a rule no invariant states. Either way a reviewer must hear of it: a survivor needs a
written reason (:data:`EXPLAINED`, restated on the spec-review page, a test keeps the two
equal) or it fails the check.

How one conjunct is judged (:func:`ablate`):

1. The spec is rebuilt without the conjunct (``WITHOUT``) and without candidate pruning
   (``PRUNE_CANDIDATES = False``: the pruning restates some conjuncts, and would keep a removed
   one in force), and checked on the readable path (:class:`~tent_models.checker.PlainModel`).
2. The models of the ladder run smallest first; a run stops at its first violation, and the
   first model that shows an invariant, deadlock or recoverability violation *refutes* it. An
   effect that raises without the conjunct also refutes it (the conjunct is the effect's
   precondition; ``tent check`` would fail the same way).
3. A run that hits its state bound proves nothing: if no model refutes the conjunct and some
   run was cut, the verdict is *inconclusive*; if every run was exhaustive, *survived*.

The guard list comes from the spec's own table (``tent_spec.credit.GUARDS``); conjuncts shared
by several actions are ablated per action, as the spec evaluates them per action.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
from tent_spec.credit import BOUND, BUDGET, GUARDS, REDUCTION, RULE, CreditBounds, CreditSpec

from tent_models import configs
from tent_models.checker import CheckResult, PlainModel, ViolationKind, check

__all__ = [
    "CREDIT_LADDER",
    "CREDIT_SAFETY_ACTIONS",
    "EXPLAINED",
    "AblationResult",
    "GuardRef",
    "Rung",
    "Verdict",
    "ablate",
    "ablated_credit_spec",
    "credit_guards",
    "explanation",
]

_REFUTING = frozenset(
    {ViolationKind.INVARIANT, ViolationKind.DEADLOCK, ViolationKind.RECOVERABILITY}
)


class Verdict(enum.StrEnum):
    REFUTED = "refuted"  # some model shows a violation without the conjunct
    SURVIVED = "survived"  # every model was explored exhaustively: no violation
    INCONCLUSIVE = "inconclusive"  # no violation, but some run hit its state bound


@attrs.frozen(kw_only=True)
class GuardRef:
    """One conjunct of one action's guard in one spec."""

    spec: str
    action: str
    guard: str
    kind: str

    @property
    def name(self) -> str:
        return f"{self.spec}:{self.action}.{self.guard}"


@attrs.frozen(kw_only=True)
class Rung:
    """One model of the ladder: bounds and the state bound of its ablation runs."""

    name: str
    bounds: CreditBounds
    max_states: int = attrs.field(validator=attrs.validators.ge(1))


@attrs.frozen(kw_only=True)
class AblationResult:
    """The verdict on one conjunct: which model refuted it (and how), or what was explored."""

    guard: GuardRef
    verdict: Verdict
    model: str | None = None  # the refuting model
    violation: str = ""  # "invariant stale_sender_never_reserves", "effect raised ...", ...
    steps: int | None = None  # length of the counterexample
    runs: tuple[tuple[str, int, bool], ...] = ()  # (model, distinct states, exhaustive)
    seconds: float = 0.0
    result: CheckResult | None = attrs.field(default=None, eq=False, repr=False)
    # the refuting run (its counterexample), and a factory of the weakened model it ran on
    factory: Callable[[], Any] | None = attrs.field(default=None, eq=False, repr=False)

    def summary(self) -> str:
        if self.verdict is Verdict.REFUTED:
            steps = "" if self.steps is None else f" after {self.steps} step(s)"
            return f"refuted by {self.model}: {self.violation}{steps}"
        explored = ", ".join(f"{m} {n:,}{'' if full else ' (cut)'}" for m, n, full in self.runs)
        return f"{self.verdict.value}: {explored}"


def credit_guards(kinds: Iterable[str] | None = None) -> list[GuardRef]:
    """Every conjunct of every credit action (``GUARDS`` order), optionally of some kinds."""
    wanted = None if kinds is None else frozenset(kinds)
    return [
        GuardRef(spec="credit", action=action, guard=g.name, kind=g.kind)
        for action, rows in GUARDS.items()
        for g in rows
        if wanted is None or g.kind in wanted
    ]


def ablated_credit_spec(action: str, guard: str) -> type[CreditSpec]:
    """The credit spec without ``action``'s conjunct ``guard`` and without candidate pruning.

    Raises ``KeyError`` when the action has no such conjunct.
    """
    if guard not in {g.name for g in GUARDS[action]}:
        raise KeyError(f"{action} has no guard conjunct {guard!r}")
    return type(
        f"Without_{action}_{guard}",
        (CreditSpec,),
        {"WITHOUT": frozenset({(action, guard)}), "PRUNE_CANDIDATES": False},
    )


# Distinct states of the clean spec under each small configuration (measured; a test keeps
# them true), so the ladder runs the smallest model first.
_CLEAN_STATES: Mapping[str, int] = {
    "credit/bad-bounds/no_write_admission": 281,
    "credit/bad-bounds/delta_grants": 724,
    "credit/bad-bounds/no_transfer_bound": 1_007,
    "credit/bad-bounds/no_decreasing_grant_check": 2_359,
    "credit/bad-bounds/stale_reserve": 2_820,
    "credit/tiny": 3_566,
    "credit/bad-bounds/equal_sequence_accepted": 8_462,
    "credit/bad-bounds/no_epoch_fence_on_restart": 14_529,
}


def _ladder() -> tuple[Rung, ...]:
    """The small shipped credit models, smallest first: ``tiny`` and the known-bad
    configurations (one sender, two charge vectors, one fault kind each; equal bounds once)."""
    named = {"credit/tiny": configs.CREDIT_BOUNDS["tiny"]}
    seen = {configs.CREDIT_BOUNDS["tiny"]}
    for variant, bounds in configs.KNOWN_BAD_BOUNDS.items():
        if bounds not in seen:
            seen.add(bounds)
            named[f"credit/bad-bounds/{variant}"] = bounds
    order = sorted(named, key=lambda n: _CLEAN_STATES.get(n, 1 << 62))
    return tuple(Rung(name=n, bounds=named[n], max_states=50_000) for n in order)


CREDIT_LADDER: tuple[Rung, ...] = _ladder()
"""The small rungs ``tent check`` runs (each exhaustive in well under a second)."""

CREDIT_DEEP_LADDER: tuple[Rung, ...] = (
    *CREDIT_LADDER,
    Rung(name="credit/ci", bounds=configs.CREDIT_BOUNDS["ci"], max_states=300_000),
    Rung(name="credit/deep", bounds=configs.CREDIT_BOUNDS["deep"], max_states=300_000),
)
"""The benchmark's ladder: the small rungs, then ``ci`` and ``deep`` cut at 300k states."""

CREDIT_SAFETY_ACTIONS: tuple[str, ...] = (
    "grant",
    "reserve",
    "commit",
    "rollback",
    "return_unused",
    "data_lands",
    "fail_inflight",
    "consumer_release",
    "reclaim_after_fence",
)
"""Actions that move credit or capacity: ``tent check`` ablates their rule conjuncts."""


def ablate(
    ref: GuardRef,
    ladder: Sequence[Rung] = CREDIT_LADDER,
    *,
    spec_of: Callable[[str, str], type[CreditSpec]] = ablated_credit_spec,
    progress: Callable[[int, int, int], None] | None = None,
) -> AblationResult:
    """Judge one conjunct on ``ladder`` (smallest first; see the module docstring).

    ``progress(distinct, transitions, depth)`` hears the states explored so far over all rungs.
    """
    started = time.perf_counter()
    cls = spec_of(ref.action, ref.guard)
    runs: list[tuple[str, int, bool]] = []
    for rung in ladder:

        def build(bounds: CreditBounds = rung.bounds, name: str = rung.name) -> PlainModel:
            return PlainModel(cls(bounds, name=f"{name} without {ref.name}"))

        model = build()
        done = sum(n for _m, n, _full in runs)
        hook = (
            None
            if progress is None
            else lambda d, t, depth, done=done: progress(done + d, t, depth)
        )
        try:
            result: CheckResult = check(model, max_states=rung.max_states, progress=hook or False)
        except Exception as exc:  # the effect's precondition was the removed conjunct
            return AblationResult(
                guard=ref,
                verdict=Verdict.REFUTED,
                model=rung.name,
                violation=f"effect raised {type(exc).__name__}",
                runs=(*runs, (rung.name, 0, False)),
                seconds=time.perf_counter() - started,
            )
        runs.append((rung.name, result.distinct_states, result.exhaustive))
        hits = [v for v in result.violations if v.kind in _REFUTING]
        if hits:
            first = hits[0]
            return AblationResult(
                guard=ref,
                verdict=Verdict.REFUTED,
                model=rung.name,
                violation=f"{first.kind.value} {first.name}",
                steps=len(first.actions),
                runs=tuple(runs),
                seconds=time.perf_counter() - started,
                result=result,
                factory=build,
            )
    cut = any(not full for _m, _n, full in runs)
    return AblationResult(
        guard=ref,
        verdict=Verdict.INCONCLUSIVE if cut else Verdict.SURVIVED,
        runs=tuple(runs),
        seconds=time.perf_counter() - started,
    )


# Why a conjunct may survive its removal. Bounds and budgets keep the model finite or limit
# faults: they are not protocol rules, so their survival is explained by their kind.
_BY_KIND: Mapping[str, str] = {
    REDUCTION: "a model reduction (commented at the conjunct): removing it adds interleavings, "
    "and no model finds a new violation - the evidence that it is a reduction, not a rule",
    BOUND: "a model bound (CreditBounds): it keeps the state space finite, it is not a rule",
    BUDGET: "a fault budget (CreditBounds): it limits injected faults, it is not a rule",
}

_ENUMERATED = (
    "implied by the candidate enumeration, which offers only {what}; the conjunct makes "
    "apply/explain refuse a replayed or hand-written instance that names anything else"
)

EXPLAINED: Mapping[str, str] = {
    "credit:grant.demand_pending": (
        "liveness, not safety: a grant without demand still comes from free capacity "
        "(free_covers_demand), so no safety invariant can object; it only parks capacity at "
        "an idle sender (the allocator grants on demand only, issue 10 item 7)"
    ),
    "credit:reserve.entry_has_update": (
        "implied by credit_covers_charge on every reachable state: grant_total rises only "
        "when an update is applied (which sets last_seq), and a fresh or absent entry is all "
        "zeros, so without an applied update nothing non-zero is covered"
    ),
    "credit:return_unused.sender_has_entry": (
        "implied by available_covers_return: an entry-less ledger is all zeros, so no "
        "non-zero charge is covered"
    ),
    "credit:report_usage.sender_has_entry": (
        "harmless without it: an entry-less sender reports on key (0, 0), which the receiver "
        "ignores (not its session); the conjunct only spares the model those no-op messages"
    ),
    "credit:consumer_release.books_exist": _ENUMERATED.format(what="epochs that have books"),
    "credit:consumer_release.landed_awaits_consumer": (
        "redundant: with nothing landed awaiting the consumer the release sets released = "
        "landed, a self-loop on ACTIVE or FENCING books, and RECLAIMED books with nothing "
        "awaiting are never kept (reclaim and release drop them)"
    ),
    "credit:data_lands.work_in_flight": _ENUMERATED.format(what="items in flight"),
    "credit:data_lands.work_epoch_open": (
        "implied on every reachable state by fenced_generation_never_used (3): work in flight "
        "to the live session belongs to books that are present and not RECLAIMED, because "
        "reclaim_after_fence waits for the epoch's work (epoch_work_settled, which is refuted)"
    ),
    "credit:fail_inflight.work_in_flight": _ENUMERATED.format(what="items in flight"),
    "credit:deliver.message_in_flight": _ENUMERATED.format(what="messages in a bag"),
    "credit:duplicate.message_in_flight": _ENUMERATED.format(what="messages in a bag"),
    "credit:lose.message_in_flight": _ENUMERATED.format(what="messages in a bag"),
}
"""``spec:action.guard`` -> why removing that conjunct is not refuted (rule conjuncts and
reductions; bounds and budgets are explained by their kind)."""


def explanation(ref: GuardRef) -> str | None:
    """Why ``ref`` may survive ablation, or ``None`` when it must be refuted."""
    return EXPLAINED.get(ref.name) or _BY_KIND.get(ref.kind)


def rule_guards(actions: Iterable[str]) -> list[GuardRef]:
    """The rule conjuncts of ``actions`` (what ``tent check`` ablates)."""
    chosen = frozenset(actions)
    return [g for g in credit_guards([RULE]) if g.action in chosen]


def judge(result: AblationResult) -> tuple[bool, str]:
    """(passed, message) for the check.

    1. Refuted: passes for a rule conjunct; fails when ``EXPLAINED`` claims it survives (a
       stale reason), and for a reduction, bound or budget (the model then hides a violation
       behind it: a protocol bug outside the explored behaviours).
    2. Survived or inconclusive: passes only with an explanation (:func:`explanation`); the
       message then starts with it (``explained: <reason> (<runs>)``).
    """
    why = explanation(result.guard)
    if result.verdict is Verdict.REFUTED:
        if result.guard.name in EXPLAINED:
            return False, f"{result.summary()}; but EXPLAINED says it survives: drop the reason"
        if result.guard.kind != RULE:
            # a reduction, bound or budget that hides a violation hides a protocol bug
            return False, f"{result.summary()}: the model's {result.guard.kind} hides it"
        return True, result.summary()
    if why is None:
        return False, (
            f"{result.summary()}: no model refutes removing this conjunct - a redundant guard "
            "or a missing invariant; add the invariant, or a z3 proof / written reason"
        )
    return True, f"explained: {why} ({result.summary()})"


def as_json(results: Iterable[AblationResult]) -> list[dict[str, Any]]:
    """JSON rows of the benchmark."""
    return [
        {
            "guard": r.guard.name,
            "kind": r.guard.kind,
            "verdict": r.verdict.value,
            "model": r.model,
            "violation": r.violation,
            "steps": r.steps,
            "runs": [{"model": m, "states": n, "exhaustive": full} for m, n, full in r.runs],
            "seconds": round(r.seconds, 3),
            "explained": explanation(r.guard),
        }
        for r in results
    ]
