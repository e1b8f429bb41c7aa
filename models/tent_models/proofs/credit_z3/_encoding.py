"""The encodings both transition systems share: z3 expression aliases, the protocol's resources,
phases and classes, the named invariants and known-bad mutations, the two arithmetics (``Int``
for proofs, checked bit-vectors for BMC) and :class:`_System` (fields, ``Init``, actions as guard
plus frame, named predicates).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import z3

Expr = Any  # z3 expressions (z3 ships no type information)
Vars = Mapping[str, Expr]
_Effect = tuple[Expr, dict[str, Expr]]  # (guard, assignments)

RESOURCES = ("DATA_BYTES", "REQUEST_SLOTS")
KEYS = (0, 1)
ACTIVE, FENCING, FENCED = 0, 1, 2
USER, STAGING_INTERNAL = 0, 1
_PHASE_NAMES = {ACTIVE: "ACTIVE", FENCING: "FENCING", FENCED: "FENCED"}
_CLASS_NAMES = {USER: "USER", STAGING_INTERNAL: "STAGING_INTERNAL"}
_QUERY_TIMEOUT_MS = 20_000

LEDGER_INVARIANT = ("available_nonnegative", "grant_backed_by_receiver", "epoch_order")
ALLOCATOR_INVARIANT = (
    "within_capacity",
    "user_within_reserve",
    "outstanding_nonnegative",
    "released_within_landed",
    "fence_accounting",
    "config",
)

LEDGER_MUTATIONS: Mapping[str, str] = types.MappingProxyType(
    {
        "accept_decreasing_grant": "apply_update checks a grant only against consumed, not "
        "against its previous total (docs/semantics.md#sender-ledger: below previous total → IA)",
        "ignore_epoch": "apply_update accepts an update of another epoch",
        "return_beyond_available": "return_unused does not check the amount against available",
    }
)
ALLOCATOR_MUTATIONS: Mapping[str, str] = types.MappingProxyType(
    {
        "grant_ignores_reserve": "USER grants may take the staging reserve",
        "fence_reclaims_landed": "fence_complete reclaims landed data too (granted − returned)",
        "return_not_idempotent": "a usage report reclaims its whole returned total again",
    }
)
NON_INDUCTIVE_CANDIDATES: Mapping[str, tuple[str, tuple[str, ...]]] = types.MappingProxyType(
    {
        # available ≥ 0 needs the returned term (and non-negative counters) to be inductive.
        "consumed_without_returned": ("ledger", ("consumed_within_grant",)),
        # Σ outstanding ≤ capacity alone: a record with negative outstanding hides an over-grant.
        "capacity_only": ("allocator", ("within_capacity",)),
        # Without released ≤ landed and the fence accounting, release/fence can go negative.
        "capacity_without_per_key_link": (
            "allocator",
            ("within_capacity", "user_within_reserve", "outstanding_nonnegative", "config"),
        ),
    }
)


# -- arithmetic over Int (proofs) or small bit-vectors (BMC) --


class _IntArith:
    """Unbounded integers: counters must be stated non-negative; additions never overflow."""

    def var(self, name: str) -> Expr:
        return z3.Int(name)

    def lit(self, value: int) -> Expr:
        return z3.IntVal(value)

    def le(self, a: Expr, b: Expr) -> Expr:
        return a <= b

    def lt(self, a: Expr, b: Expr) -> Expr:
        return a < b

    def nonneg(self, a: Expr) -> Expr:
        return a >= 0

    def fits_add(self, _a: Expr, _b: Expr) -> Expr:
        return z3.BoolVal(True)


@attrs.frozen
class _BitVecArith:
    """Unsigned ``bits``-wide counters with the implementation's checked-add guard."""

    bits: int

    def var(self, name: str) -> Expr:
        return z3.BitVec(name, self.bits)

    def lit(self, value: int) -> Expr:
        return z3.BitVecVal(value, self.bits)

    def le(self, a: Expr, b: Expr) -> Expr:
        return z3.ULE(a, b)

    def lt(self, a: Expr, b: Expr) -> Expr:
        return z3.ULT(a, b)

    def nonneg(self, _a: Expr) -> Expr:
        return z3.BoolVal(True)

    def fits_add(self, a: Expr, b: Expr) -> Expr:
        return z3.BVAddNoOverflow(a, b, False)


_Arith = _IntArith | _BitVecArith


# -- transition systems --


@attrs.frozen
class _Action:
    """``build(pre, params)`` returns the guard and the fields it assigns."""

    name: str
    params: tuple[str, ...]
    build: Callable[[Vars, Vars], _Effect]


@attrs.frozen
class _System:
    name: str
    arith: _Arith
    fields: tuple[str, ...]
    init: Callable[[Vars], Expr]
    actions: tuple[_Action, ...]
    predicates: Mapping[str, Callable[[Vars], Expr]]
    render: Mapping[str, Callable[[int], str]] = attrs.field(factory=dict)

    def state(self, suffix: str) -> dict[str, Expr]:
        return {f: self.arith.var(f"{f}{suffix}") for f in self.fields}

    def params(self, action: _Action, suffix: str) -> dict[str, Expr]:
        return {p: self.arith.var(f"{action.name}.{p}{suffix}") for p in action.params}

    def relation(self, action: _Action, pre: Vars, params: Vars, post: Vars) -> Expr:
        guard, assigned = action.build(pre, params)
        unknown = set(assigned) - set(self.fields)
        if unknown:
            raise ValueError(f"action {action.name} assigns unknown fields {sorted(unknown)}")
        frame = [post[f] == assigned.get(f, pre[f]) for f in self.fields]
        return z3.And(guard, *frame)

    def conjunction(self, names: Sequence[str], state: Vars) -> Expr:
        return z3.And(*[self.predicates[n](state) for n in names])


def _vec(prefix: str, resources: Sequence[str] = RESOURCES) -> list[str]:
    return [f"{prefix}[{r}]" for r in resources]
