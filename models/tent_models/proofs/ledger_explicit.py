"""Cross-check of z3's bounded model checking against the explicit-state checker.

:func:`~tent_models.proofs.credit_z3.bmc_ledger` unrolls the ledger's transition system
symbolically. Here the *same* system - the very z3 guard and effect expressions of
``credit_z3._ledger`` over ``bits``-wide counters - is compiled to Python closures and run by
the generic explicit-state checker as a :class:`~tent_models.model_api.SpecModel`, each action
instance enumerating its parameters over ``0 .. 2**bits - 1``. Two engines, one model, so on
small bounds they must agree (:func:`cross_check_ledger`):

1. **Verdict and length**: BMC to depth ``k`` finds a violation exactly when the explicit BFS has
   one within ``k`` steps, and of the same (shortest) length.
2. **Trace**: the BMC counterexample replays step by step on the explicit model (each action
   enabled with the parameters z3 chose, reaching the state z3 printed) and its last state
   violates the invariant BMC names.
3. **Reachable sets**: for every depth ``d ≤ reach_depth``, the states z3 finds reachable within
   ``d`` steps (all solutions of the unrolled formula, enumerated with blocking clauses) are
   exactly the explicit BFS's states at depth ``≤ d``.

The compiler knows the operators the ledger encoding uses (Boolean connectives, ``==``,
unsigned comparisons, ``bvadd``/``bvsub``, ``Extract``/``ZeroExt`` from the checked-add guard,
``If``) and raises ``ValueError`` on any other, so a new operator cannot be silently misread.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any

import attrs
import z3

from tent_models.checker import check
from tent_models.model_api import Invariant, Step
from tent_models.proofs.credit_z3 import (
    LEDGER_INVARIANT,
    LEDGER_MUTATIONS,
    _BitVecArith,
    _ledger,
    _System,
    bmc_ledger,
)

__all__ = [
    "CrossCheck",
    "LedgerExplicit",
    "compile_expr",
    "cross_check_ledger",
    "z3_reachable",
    "z3_reachable_layers",
]

Env = Sequence[int]
Compiled = Callable[[Env], Any]


def compile_expr(expr: Any, index: Mapping[str, int]) -> Compiled:
    """A Python closure computing ``expr`` from ``env[index[name]]`` for each variable.

    Bit-vector values are unsigned ints reduced modulo ``2**width``. Raises ``ValueError`` for
    an operator outside the supported set or a variable missing from ``index``.
    """
    if z3.is_true(expr):
        return lambda _env: True
    if z3.is_false(expr):
        return lambda _env: False
    if z3.is_bv_value(expr):
        value = expr.as_long()
        return lambda _env: value
    kind = expr.decl().kind()
    if kind == z3.Z3_OP_UNINTERPRETED and expr.num_args() == 0:
        name = expr.decl().name()
        if name not in index:
            raise ValueError(f"variable {name!r} is not part of the state or the parameters")
        slot = index[name]
        return lambda env: env[slot]
    args = [compile_expr(child, index) for child in expr.children()]
    if kind == z3.Z3_OP_AND:
        return lambda env: all(arg(env) for arg in args)
    if kind == z3.Z3_OP_OR:
        return lambda env: any(arg(env) for arg in args)
    if kind == z3.Z3_OP_NOT:
        (inner,) = args
        return lambda env: not inner(env)
    if kind == z3.Z3_OP_IMPLIES:
        premise, conclusion = args
        return lambda env: (not premise(env)) or conclusion(env)
    if kind == z3.Z3_OP_ITE:
        cond, then, other = args
        return lambda env: then(env) if cond(env) else other(env)
    if kind == z3.Z3_OP_EQ:
        left, right = args
        return lambda env: left(env) == right(env)
    if kind == z3.Z3_OP_ULEQ:
        left, right = args
        return lambda env: left(env) <= right(env)
    if kind == z3.Z3_OP_ULT:
        left, right = args
        return lambda env: left(env) < right(env)
    if kind in (z3.Z3_OP_BADD, z3.Z3_OP_BSUB):
        mask = (1 << expr.size()) - 1
        first, *rest = args
        if kind == z3.Z3_OP_BADD:
            return lambda env: (first(env) + sum(arg(env) for arg in rest)) & mask
        return lambda env: (first(env) - sum(arg(env) for arg in rest)) & mask
    if kind == z3.Z3_OP_ZERO_EXT:
        (inner,) = args
        return inner  # same unsigned value, wider
    if kind == z3.Z3_OP_EXTRACT:
        high, low = expr.params()
        (inner,) = args
        width_mask = (1 << (high - low + 1)) - 1
        return lambda env: (inner(env) >> low) & width_mask
    raise ValueError(f"unsupported z3 operator {expr.decl()} in {expr}")


@attrs.frozen
class _CompiledAction:
    name: str
    params: tuple[str, ...]
    guard: Compiled
    effects: tuple[Compiled | None, ...]  # per field; None keeps the value


class LedgerExplicit:
    """The ledger's z3 system as an explicit-state :class:`SpecModel` (see the module docstring).

    A state is the tuple of field values in ``credit_z3``'s field order; an action's arguments
    are its parameter values in its parameter order.
    """

    def __init__(self, *, bits: int = 2, mutation: str | None = None) -> None:
        if type(bits) is not int or not 2 <= bits <= 4:
            raise ValueError(f"bits must be an int in 2..4 (explicit enumeration), got {bits!r}")
        if mutation is not None and mutation not in LEDGER_MUTATIONS:
            raise ValueError(f"unknown ledger mutation {mutation!r}")
        self.bits = bits
        self.mutation = mutation
        self.name = f"ledger-explicit bits={bits}" + (f" with {mutation}" if mutation else "")
        self.system: _System = _ledger(_BitVecArith(bits), mutation)
        sys = self.system
        self.fields = sys.fields
        pre = sys.state("")
        self._actions: list[_CompiledAction] = []
        for action in sys.actions:
            params = sys.params(action, "")
            index = {str(var): i for i, var in enumerate([*pre.values(), *params.values()])}
            guard, assigned = action.build(pre, params)
            effects = tuple(
                compile_expr(assigned[f], index) if f in assigned else None for f in self.fields
            )
            self._actions.append(
                _CompiledAction(action.name, action.params, compile_expr(guard, index), effects)
            )
        idx = {str(var): i for i, var in enumerate(pre.values())}
        self._invariants = [
            Invariant(name, "credit_z3.LEDGER_INVARIANT", _holds(sys.predicates[name](pre), idx))
            for name in LEDGER_INVARIANT
        ]
        self._initial = _all_solutions(sys.init(pre), list(pre.values()))

    # ---- SpecModel ----

    def initial_states(self) -> list[tuple[int, ...]]:
        return list(self._initial)

    def successors(self, state: tuple[int, ...]) -> Iterator[Step]:
        values = range(1 << self.bits)
        for action in self._actions:
            for args in itertools.product(values, repeat=len(action.params)):
                nxt = self._fire(action, state, args)
                if nxt is not None:
                    yield Step(action.name, args, nxt)

    def _fire(
        self, action: _CompiledAction, state: tuple[int, ...], args: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        env = (*state, *args)
        if not action.guard(env):
            return None
        return tuple(
            value if effect is None else effect(env)
            for value, effect in zip(state, action.effects, strict=True)
        )

    def apply(
        self, state: tuple[int, ...], action: str, args: tuple[Hashable, ...]
    ) -> tuple[int, ...] | None:
        for compiled in self._actions:
            if compiled.name == action:
                if len(args) != len(compiled.params) or not all(
                    type(a) is int and 0 <= a < 1 << self.bits for a in args
                ):
                    return None
                return self._fire(compiled, state, args)  # type: ignore[arg-type]
        return None

    def explain(self, state: tuple[int, ...], action: str, args: tuple[Hashable, ...]) -> str:
        return (
            "enabled" if self.apply(state, action, args) is not None else f"{action}: guard false"
        )

    def action_names(self) -> Sequence[str]:
        return [a.name for a in self._actions]

    def unreachable_actions(self) -> frozenset[str]:
        return frozenset()

    def fault_actions(self) -> frozenset[str]:
        return frozenset()

    def invariants(self) -> Sequence[Invariant]:
        return self._invariants

    def witnesses(self) -> Sequence[Any]:
        return ()

    def pack(self, state: tuple[int, ...]) -> tuple[int, ...]:
        return state

    def canonicalize(self, state: tuple[int, ...]) -> tuple[int, ...]:
        return state

    def within_bounds(self, _state: tuple[int, ...]) -> bool:
        return True

    def quiescent_by_bound(self, _state: tuple[int, ...]) -> bool:
        return True  # the bit width bounds every counter; running out of room is not a deadlock

    def recovered(self, _state: tuple[int, ...]) -> bool:
        return True

    def describe(self, state: tuple[int, ...]) -> Mapping[str, object]:
        return dict(zip(self.fields, state, strict=True))


def _holds(predicate: Any, index: Mapping[str, int]) -> Callable[[tuple[int, ...]], bool]:
    compiled = compile_expr(predicate, index)
    return lambda state: bool(compiled(state))


def _all_solutions(constraint: Any, variables: Sequence[Any], limit: int = 100_000) -> set[Any]:
    """Every assignment of ``variables`` satisfying ``constraint`` (blocking-clause AllSAT)."""
    solver = z3.Solver()
    solver.add(constraint)
    found: set[tuple[int, ...]] = set()
    while solver.check() == z3.sat:
        model = solver.model()
        values = tuple(model.eval(v, model_completion=True).as_long() for v in variables)
        found.add(values)
        if len(found) > limit:
            raise RuntimeError(f"more than {limit} solutions")
        solver.add(z3.Or(*[v != value for v, value in zip(variables, values, strict=True)]))
    return found


def z3_reachable(depth: int, *, bits: int = 2, mutation: str | None = None) -> set[tuple[int, ...]]:
    """The states z3 finds reachable from Init within ``depth`` steps of the ledger system
    (the unrolled transition relation, no invariant assumed), enumerated exhaustively."""
    return z3_reachable_layers(depth, bits=bits, mutation=mutation)[-1]


def z3_reachable_layers(
    depth: int, *, bits: int = 2, mutation: str | None = None
) -> list[set[tuple[int, ...]]]:
    """``[z3_reachable(0), z3_reachable(1), ..., z3_reachable(depth)]`` from one unrolling."""
    sys = _ledger(_BitVecArith(bits), mutation)
    states = [sys.state("@0")]
    constraints = [sys.init(states[0])]
    for step in range(depth):
        nxt = sys.state(f"@{step + 1}")
        constraints.append(
            z3.Or(
                *[
                    sys.relation(action, states[step], sys.params(action, f"@{step}"), nxt)
                    for action in sys.actions
                ]
            )
        )
        states.append(nxt)
    layers: list[set[tuple[int, ...]]] = []
    found: set[tuple[int, ...]] = set()
    # Within ``end`` steps = the end state of some prefix of the unrolling up to ``end``.
    for end in range(depth + 1):
        found |= _all_solutions(z3.And(*constraints[: end + 1]), list(states[end].values()))
        layers.append(set(found))
    return layers


@attrs.frozen(kw_only=True)
class CrossCheck:
    """The outcome of :func:`cross_check_ledger`; ``agree`` is the conjunction of the checks."""

    name: str
    k: int
    bits: int
    explicit_states: int
    explicit_depth: int  # the explicit graph's diameter from Init: BMC with k >= it is complete
    explicit_shortest: int | None  # length of the explicit checker's shortest violation
    explicit_violation: str | None
    bmc_holds: bool
    bmc_length: int | None
    bmc_violation: str | None
    verdicts_agree: bool
    trace_replays: bool
    reachable_depth: int
    reachable_sets_agree: bool
    seconds: float

    @property
    def agree(self) -> bool:
        return self.verdicts_agree and self.trace_replays and self.reachable_sets_agree

    def summary(self) -> str:
        """One line: both verdicts and the three agreements."""
        explicit = (
            "no violation"
            if self.explicit_shortest is None
            else f"{self.explicit_violation} in {self.explicit_shortest} steps"
        )
        bmc = "holds" if self.bmc_holds else f"{self.bmc_violation} in {self.bmc_length} steps"
        return (
            f"{self.name}: explicit {self.explicit_states} states, depth {self.explicit_depth}, "
            f"{explicit}; bmc k={self.k}: {bmc}; verdicts "
            f"{'agree' if self.verdicts_agree else 'DISAGREE'}, trace "
            f"{'replays' if self.trace_replays else 'DOES NOT REPLAY'}, reachable sets to depth "
            f"{self.reachable_depth} {'equal' if self.reachable_sets_agree else 'DIFFER'}"
        )


def cross_check_ledger(
    k: int, *, bits: int = 2, mutation: str | None = None, reach_depth: int = 2
) -> CrossCheck:
    """Run BMC to depth ``k`` and the explicit checker on the same ledger system and compare
    (module docstring: verdict and length, trace replay, reachable sets to ``reach_depth``)."""
    started = time.perf_counter()
    model = LedgerExplicit(bits=bits, mutation=mutation)
    explicit = check(model, check_deadlock=False, check_recoverability=False)
    invariant_violations = [v for v in explicit.violations if v.kind.value == "invariant"]
    shortest = min(invariant_violations, key=lambda v: len(v.actions), default=None)
    explicit_length = None if shortest is None else len(shortest.actions)
    bmc = bmc_ledger(k, bits=bits, mutation=mutation)
    bmc_length = None
    bmc_violation = None
    trace_replays = True
    if bmc.counterexample is not None:
        steps = bmc.counterexample["steps"]
        bmc_length = len(steps) - 1
        bmc_violation = bmc.counterexample["violated"]
        trace_replays = _replays(model, steps, bmc_violation)
    expected_violation = explicit_length is not None and explicit_length <= k
    verdicts_agree = (not bmc.holds) == expected_violation and (
        bmc.holds or bmc_length == explicit_length
    )
    reachable_agree = _reachable_sets_agree(model, reach_depth, bits=bits, mutation=mutation)
    return CrossCheck(
        name=model.name,
        k=k,
        bits=bits,
        explicit_states=explicit.distinct_states,
        explicit_depth=explicit.depth,
        explicit_shortest=explicit_length,
        explicit_violation=None if shortest is None else shortest.name,
        bmc_holds=bmc.holds,
        bmc_length=bmc_length,
        bmc_violation=bmc_violation,
        verdicts_agree=verdicts_agree,
        trace_replays=trace_replays,
        reachable_depth=reach_depth,
        reachable_sets_agree=reachable_agree,
        seconds=time.perf_counter() - started,
    )


def _replays(model: LedgerExplicit, steps: Sequence[Mapping[str, Any]], violated: str) -> bool:
    state = tuple(steps[0]["state"][f] for f in model.fields)
    if state not in model.initial_states():
        return False
    params = {a.name: a.params for a in model._actions}
    for step in steps[1:]:
        args = tuple(step["args"][p] for p in params[step["action"]])
        nxt = model.apply(state, step["action"], args)
        if nxt is None or nxt != tuple(step["state"][f] for f in model.fields):
            return False
        state = nxt
    holds = {inv.name: inv.holds for inv in model.invariants()}
    return not holds[violated](state)


def _reachable_sets_agree(
    model: LedgerExplicit, depth: int, *, bits: int, mutation: str | None
) -> bool:
    layers = z3_reachable_layers(depth, bits=bits, mutation=mutation)
    frontier = set(model.initial_states())
    within = set(frontier)
    for d in range(depth + 1):
        if layers[d] != within:
            return False
        frontier = {step.state for s in frontier for step in model.successors(s)} - within
        within |= frontier
    return True
