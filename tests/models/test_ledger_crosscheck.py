"""z3's bounded model checking and the explicit-state checker agree on the ledger system."""

from __future__ import annotations

import random

import pytest
import z3
from tent_models.checker import check
from tent_models.proofs import credit_z3
from tent_models.proofs.ledger_explicit import (
    LedgerExplicit,
    _reachable_sets_agree,
    _replays,
    compile_expr,
    cross_check_ledger,
)

MUTATIONS = [None, *credit_z3.LEDGER_MUTATIONS]


@pytest.mark.parametrize("bits", [2, 3])
@pytest.mark.parametrize("mutation", MUTATIONS)
def test_compiled_expressions_evaluate_like_z3(bits: int, mutation: str | None) -> None:
    """Every guard, effect and predicate, on random values: the closure equals z3's value."""
    rng = random.Random(bits * 100 + len(mutation or ""))
    sys = credit_z3._ledger(credit_z3._BitVecArith(bits), mutation)
    pre = sys.state("")
    for action in sys.actions:
        params = sys.params(action, "")
        variables = [*pre.values(), *params.values()]
        index = {str(v): i for i, v in enumerate(variables)}
        guard, assigned = action.build(pre, params)
        exprs = [guard, *assigned.values(), *(p(pre) for p in sys.predicates.values())]
        compiled = [compile_expr(e, index) for e in exprs]
        for _ in range(40):
            env = [rng.randrange(1 << bits) for _ in variables]
            pairs = [(v, z3.BitVecVal(x, bits)) for v, x in zip(variables, env, strict=True)]
            for expr, function in zip(exprs, compiled, strict=True):
                expected = z3.simplify(z3.substitute(expr, *pairs))
                value = z3.is_true(expected) if z3.is_bool(expected) else expected.as_long()
                assert function(env) == value, (action.name, expr, env)


def test_unknown_operators_and_variables_are_refused() -> None:
    a, b = z3.BitVecs("a b", 4)
    with pytest.raises(ValueError, match="unsupported z3 operator"):
        compile_expr(a * b == 1, {"a": 0, "b": 1})
    with pytest.raises(ValueError, match="variable 'b'"):
        compile_expr(a + b == 1, {"a": 0})


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_bmc_and_explicit_checker_agree_on_the_ledger(mutation: str | None) -> None:
    result = cross_check_ledger(6, bits=2, mutation=mutation, reach_depth=2)
    assert result.agree, result.summary()
    assert result.explicit_depth <= 6  # k reaches the diameter: the bits=2 check is complete
    if mutation is None:
        assert result.bmc_holds and result.explicit_shortest is None
    else:  # every known-bad transition is found by both, with the same shortest length
        assert not result.bmc_holds
        assert result.bmc_length == result.explicit_shortest
        assert result.bmc_violation == result.explicit_violation


def test_a_missing_action_makes_the_reachable_sets_differ() -> None:
    model = LedgerExplicit(bits=2)
    assert _reachable_sets_agree(model, 1, bits=2, mutation=None)
    model._actions = [a for a in model._actions if a.name != "receiver_grant"]
    assert not _reachable_sets_agree(model, 1, bits=2, mutation=None)


def test_a_tampered_bmc_trace_does_not_replay() -> None:
    model = LedgerExplicit(bits=2, mutation="ignore_epoch")
    bmc = credit_z3.bmc_ledger(3, bits=2, mutation="ignore_epoch")
    assert bmc.counterexample is not None
    steps = [dict(step) for step in bmc.counterexample["steps"]]
    violated = bmc.counterexample["violated"]
    assert _replays(model, steps, violated)
    last = dict(steps[-1]["state"])
    last["last_seq"] = (last["last_seq"] + 1) % 4
    steps[-1] = {**steps[-1], "state": last}
    assert not _replays(model, steps, violated)


def test_the_explicit_ledger_is_a_model_the_generic_checker_runs() -> None:
    result = check(LedgerExplicit(bits=2, mutation="return_beyond_available"))
    assert not result.ok
    assert [v.name for v in result.violations] == ["available_nonnegative"]
    assert len(result.violations[0].actions) == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"bits": 1}, "bits"), ({"bits": 5}, "bits"), ({"mutation": "nope"}, "unknown")],
)
def test_invalid_arguments_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LedgerExplicit(**kwargs)  # type: ignore[arg-type]
