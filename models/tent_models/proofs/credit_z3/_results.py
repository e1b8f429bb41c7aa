"""What a proof returns and how a z3 model is read back: :class:`ProofResult`,
:class:`BmcResult`, the solver with its timeout, model values rendered per field, and
:func:`format_cti` (the explicit checker's trace format).
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import z3

from tent_models.proofs.credit_z3._encoding import (
    _QUERY_TIMEOUT_MS,
    Expr,
    Vars,
    _System,
)

# -- results --


@attrs.frozen(kw_only=True)
class ProofResult:
    """The outcome of an inductive-invariant check.

    ``per_action`` maps ``"init"`` (the base case) and every action name to whether that step
    preserves the candidate invariant; ``cti`` is the first counterexample found (``None`` when
    ``holds``): ``{"kind", "steps", "violated"}`` with ``steps`` a tuple of ``{"state"}`` then
    ``{"action", "args", "state"}`` mappings.
    """

    name: str
    holds: bool
    per_action: Mapping[str, bool]
    cti: Mapping[str, Any] | None
    seconds: float
    invariants: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class BmcResult:
    """The outcome of bounded model checking: no violation within ``k`` steps from Init, or the
    shortest counterexample (same shape as :attr:`ProofResult.cti`, ``kind == "trace"``)."""

    name: str
    k: int
    bits: int
    holds: bool
    counterexample: Mapping[str, Any] | None
    seconds: float


# -- checking --


def _solver() -> Any:
    solver = z3.Solver()
    solver.set("timeout", _QUERY_TIMEOUT_MS)
    return solver


def _values(sys: _System, model: Any, exprs: Mapping[str, Expr]) -> dict[str, int | str]:
    out: dict[str, int | str] = {}
    for name, expr in exprs.items():
        value = model.eval(expr, model_completion=True).as_long()
        out[name] = sys.render[name](value) if name in sys.render else value
    return out


def _first_violated(sys: _System, names: Sequence[str], model: Any, state: Vars) -> str:
    for name in names:
        if z3.is_false(model.eval(sys.predicates[name](state), model_completion=True)):
            return name
    raise RuntimeError("z3 returned a counterexample that violates none of the invariants")


def _freeze(cti: Mapping[str, Any]) -> Mapping[str, Any]:
    steps = tuple(
        types.MappingProxyType(
            {
                key: types.MappingProxyType(dict(value)) if isinstance(value, dict) else value
                for key, value in step.items()
            }
        )
        for step in cti["steps"]
    )
    return types.MappingProxyType({**cti, "steps": steps})


# -- output --


def _fields(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={value}" for name, value in values.items())


def format_cti(result: ProofResult | BmcResult) -> str:
    """Print a CTI or BMC counterexample in the explicit checker's trace format::

        ledger[consumed_within_grant]: counterexample to induction
        0 epoch=1, last_seq=1, grant_total[DATA_BYTES]=0, ...
        1 action reserve: consumed[DATA_BYTES]: 0 -> 1
            with amount[DATA_BYTES]=1, amount[REQUEST_SLOTS]=0
        violated: consumed_within_grant

    Step 0 lists every field; later steps only the fields that changed. A result that holds
    prints one line saying so.
    """
    trace = result.cti if isinstance(result, ProofResult) else result.counterexample
    if trace is None:
        return f"{result.name}: holds"
    headline = {
        "base": "initial state violates the invariant",
        "cti": "counterexample to induction",
        "trace": "counterexample trace",
    }[trace["kind"]]
    lines = [f"{result.name}: {headline}"]
    steps = trace["steps"]
    lines.append(f"0 {_fields(steps[0]['state'])}")
    for number, step in enumerate(steps[1:], start=1):
        before = steps[number - 1]["state"]
        changes = ", ".join(
            f"{f}: {before[f]} -> {v}" for f, v in step["state"].items() if before[f] != v
        )
        lines.append(f"{number} action {step['action']}: {changes or '(no change)'}")
        if step["args"]:
            lines.append(f"    with {_fields(step['args'])}")
    lines.append(f"violated: {trace['violated']}")
    return "\n".join(lines)
