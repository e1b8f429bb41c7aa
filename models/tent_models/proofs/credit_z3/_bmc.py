"""Bounded model checking of the ledger from ``Init`` over checked bit-vectors
(:func:`bmc_ledger`)."""

from __future__ import annotations

import time
from typing import Any

import z3

from tent_models.proofs.credit_z3._encoding import (
    LEDGER_INVARIANT,
    LEDGER_MUTATIONS,
    Expr,
    _BitVecArith,
)
from tent_models.proofs.credit_z3._ledger_rules import _ledger
from tent_models.proofs.credit_z3._results import (
    BmcResult,
    _first_violated,
    _freeze,
    _solver,
    _values,
)


def bmc_ledger(k: int, *, bits: int = 4, mutation: str | None = None) -> BmcResult:
    """Bounded model checking of the ledger: no reachable violation within ``k`` steps of Init.

    Counters are ``bits``-wide unsigned bit-vectors and every addition carries the checked-add
    guard, as in the implementation's u64 arithmetic. Checks depth 0, 1, …, ``k`` in turn and
    stops at the first depth with a violation of :data:`LEDGER_INVARIANT`, returning that
    (shortest) trace. Raises ``ValueError`` for ``k < 0``, ``bits < 2`` or an unknown mutation.
    """
    if type(k) is not int or k < 0:
        raise ValueError(f"k must be a non-negative int, got {k!r}")
    if type(bits) is not int or bits < 2:
        raise ValueError(f"bits must be an int ≥ 2, got {bits!r}")
    if mutation is not None and mutation not in LEDGER_MUTATIONS:
        raise ValueError(f"unknown ledger mutation {mutation!r}")
    started = time.perf_counter()
    sys = _ledger(_BitVecArith(bits), mutation)
    states = [sys.state("@0")]
    choices: list[Expr] = []
    params: list[list[dict[str, Expr]]] = []
    solver = _solver()
    solver.add(sys.init(states[0]))
    counterexample: dict[str, Any] | None = None
    for depth in range(k + 1):
        solver.push()
        solver.add(z3.Not(sys.conjunction(LEDGER_INVARIANT, states[depth])))
        if solver.check() == z3.sat:
            model = solver.model()
            steps: list[dict[str, Any]] = [{"state": _values(sys, model, states[0])}]
            for i in range(depth):
                fired = model.eval(choices[i], model_completion=True).as_long()
                steps.append(
                    {
                        "action": sys.actions[fired].name,
                        "args": _values(sys, model, params[i][fired]),
                        "state": _values(sys, model, states[i + 1]),
                    }
                )
            counterexample = {
                "kind": "trace",
                "steps": tuple(steps),
                "violated": _first_violated(sys, LEDGER_INVARIANT, model, states[depth]),
            }
            solver.pop()
            break
        solver.pop()
        # No violation up to here: assert it, so deeper queries need not rediscover it (sound for
        # finding the shortest counterexample, and it prunes the search a lot).
        solver.add(sys.conjunction(LEDGER_INVARIANT, states[depth]))
        if depth == k:
            break
        nxt = sys.state(f"@{depth + 1}")
        choice = z3.Int(f"action@{depth}")
        step_params = [sys.params(action, f"@{depth}") for action in sys.actions]
        solver.add(
            z3.Or(
                *[
                    z3.And(choice == i, sys.relation(action, states[depth], step_params[i], nxt))
                    for i, action in enumerate(sys.actions)
                ]
            )
        )
        states.append(nxt)
        choices.append(choice)
        params.append(step_params)
    return BmcResult(
        name=f"ledger bmc k={k} bits={bits}" + (f" with {mutation}" if mutation else ""),
        k=k,
        bits=bits,
        holds=counterexample is None,
        counterexample=None if counterexample is None else _freeze(counterexample),
        seconds=time.perf_counter() - started,
    )
