"""The sender ledger as a transition system (docs/semantics.md#sender-ledger), with the receiver's
side of one key."""

from __future__ import annotations

import types

import z3

from tent_models.proofs.credit_z3._encoding import (
    RESOURCES,
    Expr,
    Vars,
    _Action,
    _Arith,
    _Effect,
    _System,
    _vec,
)


def _ledger(arith: _Arith, mutation: str | None) -> _System:
    """docs/semantics.md#sender-ledger for one key (the epoch fence included), with the receiver's
    side of it."""
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
