"""The receiver allocator as a transition system (docs/semantics.md#receiver-allocator): two
key+epoch records sharing one capacity per resource."""

from __future__ import annotations

import types
from collections.abc import Callable

import z3

from tent_models.proofs.credit_z3._encoding import (
    _CLASS_NAMES,
    _PHASE_NAMES,
    ACTIVE,
    FENCED,
    FENCING,
    KEYS,
    RESOURCES,
    STAGING_INTERNAL,
    USER,
    Expr,
    Vars,
    _Action,
    _Effect,
    _IntArith,
    _System,
    _vec,
)

_COUNTERS = ("granted", "landed", "released", "reclaimed_return", "reclaimed_fence")


def _allocator(mutation: str | None) -> _System:
    """docs/semantics.md#receiver-allocator over two symbolic key+epoch records sharing one capacity
    per resource."""
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
