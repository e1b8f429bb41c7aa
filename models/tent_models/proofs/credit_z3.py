"""z3 proofs of the credit rules: inductive invariants of the sender ledger and receiver allocator.

The rules are encoded here directly from SEMANTICS §6 (sender ledger) and §8 (receiver allocator);
nothing is imported from the implementation (a proof of the code's own formulas proves nothing).

Two transition systems, each a set of named state fields, an ``Init`` predicate, named actions
(guard plus effect; every field an action does not assign keeps its value) and named predicates:

* **ledger** — one credit key: the sender's epoch, last sequence and per resource ``grant_total``,
  ``consumed`` and ``returned``, next to the receiver's epoch of the key and what the receiver has
  granted in the sender's epoch. An update message is a *past receiver value*: its grants never
  exceed what the receiver has granted in that epoch by now (cumulative grants only grow).
* **allocator** — two symbolic key+epoch records sharing a capacity per resource, each with a
  lifecycle phase (ACTIVE / FENCING / FENCED), an allocation class (USER or STAGING_INTERNAL) and
  cumulative ``granted``, ``landed``, ``released``, ``reclaimed_return``, ``reclaimed_fence``. The
  usage report's totals are arbitrary (the receiver must be safe against any sender); only the
  receiver's own guards constrain them.

A proof checks the base case (``Init ⇒ Inv``) and, for every action separately, the inductive step
(``Inv ∧ T_action ⇒ Inv'``). A failing step yields a counterexample to induction (CTI): a state
satisfying the candidate invariant and one action instance leading out of it, printed by
:func:`format_cti` in the explicit checker's trace format. Steps whose guard fails (duplicate or
old updates, refused calls) leave the state unchanged and are trivially inductive; they are not
listed as actions.

Integers are unbounded (``Int``) in the proofs: the implementation's checked u64 arithmetic only
*refuses* more steps, so safety over unbounded integers implies safety with the overflow checks.
:func:`bmc_ledger` instead unrolls the ledger from ``Init`` over small bit-vectors, with the
checked-arithmetic guards, for a cross-check against the explicit-state checker.
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import z3

__all__ = [
    "ALLOCATOR_INVARIANT",
    "ALLOCATOR_MUTATIONS",
    "LEDGER_INVARIANT",
    "LEDGER_MUTATIONS",
    "NON_INDUCTIVE_CANDIDATES",
    "BmcResult",
    "ProofResult",
    "bmc_ledger",
    "check_candidate",
    "format_cti",
    "predicate_names",
    "prove_allocator_inductive",
    "prove_ledger_inductive",
]

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
        "against its previous total (SEMANTICS §6: below previous total → IA)",
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


def _ledger(arith: _Arith, mutation: str | None) -> _System:
    """SEMANTICS §6 for one key (the epoch fence included), with the receiver's side of it."""
    a = arith
    sender_fields = ["epoch", "last_seq"]
    for r in RESOURCES:
        sender_fields += [f"grant_total[{r}]", f"consumed[{r}]", f"returned[{r}]"]
    receiver_fields = ["recv_epoch", *_vec("recv_granted")]
    fields = (*sender_fields, *receiver_fields)

    def available(s: Vars, r: str) -> Expr:
        return s[f"grant_total[{r}]"] - s[f"consumed[{r}]"] - s[f"returned[{r}]"]

    def init(s: Vars) -> Expr:
        zeros = [s[f] == a.lit(0) for f in fields if "[" in f]
        return z3.And(
            s["epoch"] == a.lit(1), s["recv_epoch"] == a.lit(1), s["last_seq"] == a.lit(0), *zeros
        )

    def apply_update(s: Vars, p: Vars) -> _Effect:
        # The message is a past receiver value: in its epoch, cumulative grants only grow, so any
        # grant it carries is at most what the receiver has granted in that epoch by now.
        past_value = z3.Implies(
            p["m_epoch"] == s["epoch"],
            z3.And(*[a.le(p[f"m_grant[{r}]"], s[f"recv_granted[{r}]"]) for r in RESOURCES]),
        )
        guard = [past_value, a.lt(s["last_seq"], p["m_seq"])]  # §6: sequence ≤ last → no-op
        if mutation != "ignore_epoch":
            guard.append(p["m_epoch"] == s["epoch"])  # §6: epoch mismatch → IE
        assigned = {"last_seq": p["m_seq"]}
        for r in RESOURCES:
            grant = p[f"m_grant[{r}]"]
            guard += [a.nonneg(grant), a.le(s[f"consumed[{r}]"], grant)]  # §6: below consumed → IA
            if mutation != "accept_decreasing_grant":
                guard.append(a.le(s[f"grant_total[{r}]"], grant))  # §6: below previous → IA
            assigned[f"grant_total[{r}]"] = grant
        return z3.And(*guard), assigned

    def reserve(s: Vars, p: Vars) -> _Effect:
        guard = [a.lt(a.lit(0), s["last_seq"])]  # §6: no update yet → IE
        guard.append(z3.Or(*[a.lt(a.lit(0), p[f"amount[{r}]"]) for r in RESOURCES]))
        assigned: dict[str, Expr] = {}
        for r in RESOURCES:
            amount = p[f"amount[{r}]"]
            # All or nothing: every resource of the charge must have the credit.
            guard += [a.nonneg(amount), a.le(amount, available(s, r))]
            guard.append(a.fits_add(s[f"consumed[{r}]"], amount))
            assigned[f"consumed[{r}]"] = s[f"consumed[{r}]"] + amount
        return z3.And(*guard), assigned

    def rollback(s: Vars, p: Vars) -> _Effect:
        guard: list[Expr] = []
        assigned: dict[str, Expr] = {}
        for r in RESOURCES:
            amount = p[f"amount[{r}]"]
            guard += [a.nonneg(amount), a.le(amount, s[f"consumed[{r}]"])]  # underflow → IA
            assigned[f"consumed[{r}]"] = s[f"consumed[{r}]"] - amount
        return z3.And(*guard), assigned

    def return_unused(s: Vars, p: Vars) -> _Effect:
        guard: list[Expr] = []
        assigned: dict[str, Expr] = {}
        for r in RESOURCES:
            amount = p[f"amount[{r}]"]
            guard += [a.nonneg(amount), a.fits_add(s[f"returned[{r}]"], amount)]
            if mutation != "return_beyond_available":
                guard.append(a.le(amount, available(s, r)))  # §6: cannot exceed available
            assigned[f"returned[{r}]"] = s[f"returned[{r}]"] + amount
        return z3.And(*guard), assigned

    def activate(s: Vars, p: Vars) -> _Effect:
        # §6/§7: a higher epoch (chosen by the receiver, so at most its current one) starts a
        # fresh entry; what the receiver granted in it so far is unknown but non-negative.
        guard = [a.lt(s["epoch"], p["new_epoch"]), a.le(p["new_epoch"], s["recv_epoch"])]
        assigned = {"epoch": p["new_epoch"], "last_seq": a.lit(0)}
        for r in RESOURCES:
            guard.append(a.nonneg(p[f"granted_so_far[{r}]"]))
            assigned[f"grant_total[{r}]"] = a.lit(0)
            assigned[f"consumed[{r}]"] = a.lit(0)
            assigned[f"returned[{r}]"] = a.lit(0)
            assigned[f"recv_granted[{r}]"] = p[f"granted_so_far[{r}]"]
        return z3.And(*guard), assigned

    def receiver_grant(s: Vars, p: Vars) -> _Effect:
        # §8: the receiver grants only in its current epoch of the key.
        guard = [s["recv_epoch"] == s["epoch"]]
        assigned: dict[str, Expr] = {}
        for r in RESOURCES:
            amount = p[f"amount[{r}]"]
            guard += [a.nonneg(amount), a.fits_add(s[f"recv_granted[{r}]"], amount)]
            assigned[f"recv_granted[{r}]"] = s[f"recv_granted[{r}]"] + amount
        return z3.And(*guard), assigned

    def receiver_reconnect(s: Vars, _p: Vars) -> _Effect:
        # §7: the sender reconnects, the receiver bumps the key's epoch (the old one is fenced).
        return a.fits_add(s["recv_epoch"], a.lit(1)), {"recv_epoch": s["recv_epoch"] + 1}

    amounts = tuple(_vec("amount"))
    actions = (
        _Action("apply_update", ("m_epoch", "m_seq", *_vec("m_grant")), apply_update),
        _Action("reserve", amounts, reserve),
        _Action("rollback", amounts, rollback),
        _Action("return_unused", amounts, return_unused),
        _Action("activate", ("new_epoch", *_vec("granted_so_far")), activate),
        _Action("receiver_grant", amounts, receiver_grant),
        _Action("receiver_reconnect", (), receiver_reconnect),
    )

    def available_nonnegative(s: Vars) -> Expr:
        # RFC "available = grant_total − consumed" (with returned): never negative, ≤ granted.
        parts = []
        for r in RESOURCES:
            gt, c, ret = s[f"grant_total[{r}]"], s[f"consumed[{r}]"], s[f"returned[{r}]"]
            parts += [a.nonneg(c), a.nonneg(ret), a.le(c, gt), a.le(ret, gt - c)]
        return z3.And(*parts)

    def consumed_within_grant(s: Vars) -> Expr:
        return z3.And(*[a.le(s[f"consumed[{r}]"], s[f"grant_total[{r}]"]) for r in RESOURCES])

    def grant_backed_by_receiver(s: Vars) -> Expr:
        # RFC "A grant is a reservation": the sender never holds more than the receiver granted.
        return z3.And(*[a.le(s[f"grant_total[{r}]"], s[f"recv_granted[{r}]"]) for r in RESOURCES])

    def epoch_order(s: Vars) -> Expr:
        return z3.And(
            a.le(a.lit(1), s["epoch"]), a.le(s["epoch"], s["recv_epoch"]), a.nonneg(s["last_seq"])
        )

    return _System(
        name="ledger",
        arith=arith,
        fields=fields,
        init=init,
        actions=actions,
        predicates=types.MappingProxyType(
            {
                "available_nonnegative": available_nonnegative,
                "grant_backed_by_receiver": grant_backed_by_receiver,
                "epoch_order": epoch_order,
                "consumed_within_grant": consumed_within_grant,
            }
        ),
    )


_COUNTERS = ("granted", "landed", "released", "reclaimed_return", "reclaimed_fence")


def _allocator(mutation: str | None) -> _System:
    """SEMANTICS §8 over two symbolic key+epoch records sharing one capacity per resource."""
    a = _IntArith()
    fields: list[str] = [*_vec("capacity"), *_vec("reserve")]
    for k in KEYS:
        fields += [f"k{k}.phase", f"k{k}.class"]
        for counter in _COUNTERS:
            fields += _vec(f"k{k}.{counter}")

    def at(s: Vars, k: int, counter: str, r: str) -> Expr:
        return s[f"k{k}.{counter}[{r}]"]

    def outstanding(s: Vars, k: int, r: str) -> Expr:
        return (
            at(s, k, "granted", r)
            - at(s, k, "released", r)
            - at(s, k, "reclaimed_return", r)
            - at(s, k, "reclaimed_fence", r)
        )

    def held(s: Vars, k: int, r: str) -> Expr:
        """Physically committed: a negative outstanding commits nothing."""
        out = outstanding(s, k, r)
        return z3.If(out > 0, out, 0)

    def user_limit(s: Vars, r: str) -> Expr:
        return s[f"capacity[{r}]"] - s[f"reserve[{r}]"]

    def init(s: Vars) -> Expr:
        parts = []
        for r in RESOURCES:
            parts += [s[f"reserve[{r}]"] >= 0, s[f"reserve[{r}]"] <= s[f"capacity[{r}]"]]
        for k in KEYS:
            parts.append(z3.Or(s[f"k{k}.phase"] == ACTIVE, s[f"k{k}.phase"] == FENCED))
            parts.append(z3.Or(s[f"k{k}.class"] == USER, s[f"k{k}.class"] == STAGING_INTERNAL))
            parts += [at(s, k, c, r) == 0 for c in _COUNTERS for r in RESOURCES]
        return z3.And(*parts)

    def per_key(build: Callable[[Vars, Vars, int], _Effect]) -> Callable[[Vars, Vars], _Effect]:
        """An action on the record chosen by parameter ``key`` (the other one is untouched)."""

        def relation(s: Vars, p: Vars) -> _Effect:
            guards: list[Expr] = []
            assigned: dict[str, Expr] = {}
            for k in KEYS:
                guard_k, assigned_k = build(s, p, k)
                guards.append(z3.And(p["key"] == k, guard_k))
                for f, value in assigned_k.items():
                    assigned[f] = z3.If(p["key"] == k, value, assigned.get(f, s[f]))
            return z3.Or(*guards), assigned

        return relation

    def grant(s: Vars, p: Vars, k: int) -> _Effect:
        guard = [s[f"k{k}.phase"] == ACTIVE]  # §8: no grants for a fenced epoch
        assigned: dict[str, Expr] = {}
        for r in RESOURCES:
            amount = p[f"amount[{r}]"]
            total = sum((outstanding(s, j, r) for j in KEYS), z3.IntVal(0))
            users = sum(
                (z3.If(s[f"k{j}.class"] == USER, outstanding(s, j, r), 0) for j in KEYS),
                z3.IntVal(0),
            )
            free = s[f"capacity[{r}]"] - total
            if mutation != "grant_ignores_reserve":
                # RFC "Staging and Deadlock Avoidance": USER keys never take the reserve.
                user_room = user_limit(s, r) - users
                user_free = z3.If(free < user_room, free, user_room)
                free = z3.If(s[f"k{k}.class"] == USER, user_free, free)
            guard += [amount >= 0, amount <= free]
            assigned[f"k{k}.granted[{r}]"] = at(s, k, "granted", r) + amount
        return z3.And(*guard), assigned

    def land(s: Vars, p: Vars, k: int) -> _Effect:
        # Landing beyond granted − returned is the sender's overdraw: refused (protocol error).
        guard = [s[f"k{k}.phase"] != FENCED]
        assigned: dict[str, Expr] = {}
        for r in RESOURCES:
            amount = p[f"amount[{r}]"]
            landed = at(s, k, "landed", r) + amount
            guard += [
                amount >= 0,
                landed + at(s, k, "reclaimed_return", r) <= at(s, k, "granted", r),
            ]
            assigned[f"k{k}.landed[{r}]"] = landed
        return z3.And(*guard), assigned

    def report_usage(s: Vars, p: Vars, k: int) -> _Effect:
        # Arbitrary reported totals, filtered only by the receiver's checks; reclaim is
        # returned − already reclaimed (idempotent), an older (lower) total reclaims nothing.
        guard = [s[f"k{k}.phase"] != FENCED]
        assigned: dict[str, Expr] = {}
        for r in RESOURCES:
            consumed, returned = p[f"consumed[{r}]"], p[f"returned[{r}]"]
            granted, reclaimed = at(s, k, "granted", r), at(s, k, "reclaimed_return", r)
            guard += [
                consumed >= 0,
                returned >= 0,
                consumed + returned <= granted,
                returned + at(s, k, "landed", r) <= granted,
            ]
            if mutation == "return_not_idempotent":
                assigned[f"k{k}.reclaimed_return[{r}]"] = reclaimed + returned
            else:
                assigned[f"k{k}.reclaimed_return[{r}]"] = z3.If(
                    returned > reclaimed, returned, reclaimed
                )
        return z3.And(*guard), assigned

    def release(s: Vars, p: Vars, k: int) -> _Effect:
        guard: list[Expr] = []
        assigned: dict[str, Expr] = {}
        for r in RESOURCES:
            amount = p[f"amount[{r}]"]
            released = at(s, k, "released", r) + amount
            guard += [amount >= 0, released <= at(s, k, "landed", r)]  # §8: only landed data
            assigned[f"k{k}.released[{r}]"] = released
        return z3.And(*guard), assigned

    def fence(s: Vars, _p: Vars, k: int) -> _Effect:
        return s[f"k{k}.phase"] != FENCED, {f"k{k}.phase": z3.IntVal(FENCING)}

    def fence_complete(s: Vars, _p: Vars, k: int) -> _Effect:
        # §8: after in-flight work is drained, reclaim everything that never landed.
        assigned: dict[str, Expr] = {f"k{k}.phase": z3.IntVal(FENCED)}
        for r in RESOURCES:
            unlanded = at(s, k, "granted", r) - at(s, k, "reclaimed_return", r)
            if mutation != "fence_reclaims_landed":
                unlanded = unlanded - at(s, k, "landed", r)
            assigned[f"k{k}.reclaimed_fence[{r}]"] = unlanded
        return s[f"k{k}.phase"] == FENCING, assigned

    def open_epoch(s: Vars, p: Vars, k: int) -> _Effect:
        # A fenced record holding nothing is forgotten; a (re)connect opens a fresh one.
        guard = [s[f"k{k}.phase"] == FENCED]
        guard += [outstanding(s, k, r) == 0 for r in RESOURCES]
        guard.append(z3.Or(p["class"] == USER, p["class"] == STAGING_INTERNAL))
        assigned = {f"k{k}.phase": z3.IntVal(ACTIVE), f"k{k}.class": p["class"]}
        for counter in _COUNTERS:
            for r in RESOURCES:
                assigned[f"k{k}.{counter}[{r}]"] = z3.IntVal(0)
        return z3.And(*guard), assigned

    def reconnect(s: Vars, p: Vars) -> _Effect:
        # open_epoch of a connected key: its ACTIVE epoch turns FENCING and a new one opens.
        guards: list[Expr] = []
        assigned: dict[str, Expr] = {}
        for old, new in ((0, 1), (1, 0)):
            guard_new, assigned_new = open_epoch(s, p, new)
            chosen = p["key"] == new
            guards.append(z3.And(chosen, s[f"k{old}.phase"] == ACTIVE, guard_new))
            for f, value in {**assigned_new, f"k{old}.phase": z3.IntVal(FENCING)}.items():
                assigned[f] = z3.If(chosen, value, assigned.get(f, s[f]))
        return z3.Or(*guards), assigned

    amounts = ("key", *_vec("amount"))
    actions = (
        _Action("grant", amounts, per_key(grant)),
        _Action("data_landed", amounts, per_key(land)),
        _Action("on_usage", ("key", *_vec("consumed"), *_vec("returned")), per_key(report_usage)),
        _Action("release", amounts, per_key(release)),
        _Action("fence", ("key",), per_key(fence)),
        _Action("fence_complete", ("key",), per_key(fence_complete)),
        _Action("open_epoch", ("key", "class"), per_key(open_epoch)),
        _Action("reconnect", ("key", "class"), reconnect),
    )

    def within_capacity(s: Vars) -> Expr:
        # RFC "Receiver-capacity safety": Σ outstanding reservations ≤ capacity, per resource.
        return z3.And(
            *[
                sum((held(s, k, r) for k in KEYS), z3.IntVal(0)) <= s[f"capacity[{r}]"]
                for r in RESOURCES
            ]
        )

    def user_within_reserve(s: Vars) -> Expr:
        return z3.And(
            *[
                sum(
                    (z3.If(s[f"k{k}.class"] == USER, held(s, k, r), 0) for k in KEYS),
                    z3.IntVal(0),
                )
                <= user_limit(s, r)
                for r in RESOURCES
            ]
        )

    def outstanding_nonnegative(s: Vars) -> Expr:
        return z3.And(*[outstanding(s, k, r) >= 0 for k in KEYS for r in RESOURCES])

    def released_within_landed(s: Vars) -> Expr:
        return z3.And(
            *[
                z3.And(
                    at(s, k, "released", r) >= 0, at(s, k, "released", r) <= at(s, k, "landed", r)
                )
                for k in KEYS
                for r in RESOURCES
            ]
        )

    def fence_accounting(s: Vars) -> Expr:
        parts = []
        for k in KEYS:
            for r in RESOURCES:
                granted, landed = at(s, k, "granted", r), at(s, k, "landed", r)
                by_return, by_fence = (
                    at(s, k, "reclaimed_return", r),
                    at(s, k, "reclaimed_fence", r),
                )
                parts += [by_return >= 0, by_fence >= 0]
                parts.append(
                    z3.If(
                        s[f"k{k}.phase"] == FENCED,
                        landed + by_return + by_fence == granted,
                        z3.And(by_fence == 0, landed + by_return <= granted),
                    )
                )
        return z3.And(*parts)

    def config(s: Vars) -> Expr:
        parts = []
        for r in RESOURCES:
            parts += [s[f"reserve[{r}]"] >= 0, s[f"reserve[{r}]"] <= s[f"capacity[{r}]"]]
        for k in KEYS:
            parts += [s[f"k{k}.phase"] >= ACTIVE, s[f"k{k}.phase"] <= FENCED]
            parts.append(z3.Or(s[f"k{k}.class"] == USER, s[f"k{k}.class"] == STAGING_INTERNAL))
        return z3.And(*parts)

    render: dict[str, Callable[[int], str]] = {}
    for k in KEYS:
        render[f"k{k}.phase"] = lambda v: _PHASE_NAMES.get(v, str(v))
        render[f"k{k}.class"] = lambda v: _CLASS_NAMES.get(v, str(v))
    return _System(
        name="allocator",
        arith=a,
        fields=tuple(fields),
        init=init,
        actions=actions,
        predicates=types.MappingProxyType(
            {
                "within_capacity": within_capacity,
                "user_within_reserve": user_within_reserve,
                "outstanding_nonnegative": outstanding_nonnegative,
                "released_within_landed": released_within_landed,
                "fence_accounting": fence_accounting,
                "config": config,
            }
        ),
        render=types.MappingProxyType(render),
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
    """Prove :data:`LEDGER_INVARIANT` inductive for the sender ledger (SEMANTICS §6).

    Invariants: ``0 ≤ consumed, returned`` and ``consumed + returned ≤ grant_total`` (available
    never negative, never above granted); ``grant_total ≤`` the receiver's granted total of that
    key and epoch; ``1 ≤ epoch ≤`` the receiver's epoch. With ``mutation`` the proof is expected
    to fail (a known-bad transition).
    """
    return check_candidate("ledger", LEDGER_INVARIANT, mutation=mutation, name="ledger")


def prove_allocator_inductive(*, mutation: str | None = None) -> ProofResult:
    """Prove :data:`ALLOCATOR_INVARIANT` inductive for the receiver allocator (SEMANTICS §8).

    Invariants: per resource ``Σ outstanding ≤ capacity`` and ``Σ USER outstanding ≤ capacity −
    staging_reserve``; per record ``outstanding ≥ 0``, ``released ≤ landed``, and the fence
    accounting (``landed + reclaimed_by_return ≤ granted`` while live, ``= granted −
    reclaimed_by_fence`` once fenced); ``0 ≤ reserve ≤ capacity``.
    """
    return check_candidate("allocator", ALLOCATOR_INVARIANT, mutation=mutation, name="allocator")


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
