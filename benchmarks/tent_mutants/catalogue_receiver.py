"""Hand-written mutants of ``tent_credit``'s receiver side and gate: allocator, split, gate.

Each breaks one rule of docs/semantics.md#receiver-allocator / the RFC's abuse boundaries /
docs/gate.md and names its defect class.
"""

from __future__ import annotations

import attrs

from .catalogue_credit import one
from .model import DefectClass as D
from .model import Edit, Mutant

_ALLOCATOR = "tent_credit/_allocator.py"
_GRANT_PLAN = "tent_credit/_grant_plan.py"
_EPOCH_RECORD = "tent_credit/_epoch_record.py"
_STATE = "tent_credit/_allocator_state.py"
_GRANTS = "tent_credit/_allocator_grants.py"
_ADMISSION = "tent_credit/_allocator_admission.py"
_FAIRNESS = "tent_credit/_fairness.py"
_GATE = "tent_credit/_gate.py"
_GATE_ROUTES = "tent_credit/_gate_routes.py"

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        name="grant_past_capacity",
        rule="docs/semantics.md#receiver-allocator: outstanding grants never exceed capacity",
        defect=D.MISSING_BOUND,
        edits=(
            Edit(
                file=_GRANT_PLAN,
                old="        offer = max(0, min(wanted, max_grant.get(resource, 0),"
                " free.get(resource, 0)))\n",
                new="        offer = max(0, min(wanted, max_grant.get(resource, 0)))\n",
            ),
            Edit(
                file=_STATE,
                old="                raise TooManyRequests(\n"
                '                    f"{ident} would over-commit {r.name}'
                ' (docs/semantics.md#receiver-allocator)"\n'
                "                )\n",
                new="                pass  # mutant: over-commit allowed\n",
            ),
        ),
    ),
    one(
        "reclaim_before_fence",
        "docs/semantics.md#receiver-allocator: unlanded credit is reclaimed only after the epoch "
        "was fenced",
        D.EPOCH_BOUND,
        _EPOCH_RECORD,
        "    (EpochState.ACTIVE, _Event.FENCE): EpochState.FENCING,\n",
        "    (EpochState.ACTIVE, _Event.FENCE): EpochState.FENCING,\n"
        "    (EpochState.ACTIVE, _Event.COMPLETE_FENCE): EpochState.FENCED,\n",
    ),
    one(
        "allocator_max_keys_off_by_one",
        "docs/semantics.md#receiver-allocator bounds: at most max_keys distinct keys per session",
        D.BOUNDARY_FLIP,
        _ALLOCATOR,
        "if len(self._keys) >= self._config.max_keys:",
        "if len(self._keys) > self._config.max_keys:",
    ),
    one(
        "superseded_epochs_unbounded",
        "issue 10 item 9: at most max_fencing_epochs epochs of a key await fence_complete",
        D.EPOCH_BOUND,
        _ALLOCATOR,
        "if fencing > self._config.max_fencing_epochs:",
        "if False and fencing > self._config.max_fencing_epochs:",
    ),
    one(
        "quarantined_key_reconnects",
        "RFC rule 4 / docs/abuse.md: a quarantined key gets no new epoch in the session",
        D.MISSING_CHECK,
        _ALLOCATOR,
        "        if key in self._quarantined:\n            raise KeyQuarantined(",
        "        if False:\n            raise KeyQuarantined(",
    ),
    one(
        "per_key_cap_ignored",
        "issue 10 item 8: no grant takes a key past max_key_outstanding",
        D.MISSING_BOUND,
        _GRANTS,
        "out[r] = pools[r] if cap is None else min(pools[r], max(0, cap - held[r]))",
        "out[r] = pools[r]",
    ),
    one(
        "return_of_landed_credit_accepted",
        "issue 10 item 6: a returned total that landed data already used is a violation",
        D.MISSING_CHECK,
        _ALLOCATOR,
        "if c + ret > granted or returned_now + record.landed[r] > granted:",
        "if c + ret > granted:",
    ),
    one(
        "exact_credit_write_refused",
        "issue 10 item 6: an honest write that uses exactly its grant is admitted",
        D.BOUNDARY_FLIP,
        _ADMISSION,
        "if landed[r] + back[r] > granted[r]:",
        "if landed[r] + back[r] >= granted[r]:",
    ),
    one(
        "refused_write_not_quarantined",
        "issue 10 item 6 / RFC rule 4: a refused write quarantines its (known) key",
        D.MISSING_CHECK,
        _ADMISSION,
        "self.quarantine(*key)",
        "pass",
    ),
    one(
        "future_epoch_write_misfiled",
        "docs/abuse.md: a write of an epoch the session never opened is UNKNOWN_EPOCH",
        D.EPOCH_BOUND,
        _ADMISSION,
        "if state is None or epoch > state.current_epoch:",
        "if state is None:",
    ),
    attrs.evolve(
        one(
            "release_beyond_landed",
            "docs/semantics.md#receiver-allocator release: at most landed − released, else "
            "InvalidArgument",
            D.MISSING_BOUND,
            _ALLOCATOR,
            "if amount > unreleased:",
            "if False and amount > unreleased:",
        ),
        equivalent="_commit, the allocator's last line of defence, refuses released > landed "
        "with ArithmeticOverflow (an InvalidArgument) before anything changes: the same outcome",
    ),
    one(
        "overdrawn_landing_accepted",
        "docs/semantics.md#receiver-allocator data_landed: landing beyond granted − reclaimed is "
        "a violation",
        D.MISSING_CHECK,
        _ALLOCATOR,
        "            if landed[r] + record.reclaimed_by_return[r] > record.granted[r]:\n",
        "            if False:\n",
    ),
    one(
        "fence_reclaims_landed_credit",
        "docs/semantics.md#receiver-allocator fence_complete: reclaims granted − landed − "
        "returned, never landed data",
        D.WRONG_RULE,
        _ALLOCATOR,
        "record.granted[r], checked_add(record.landed[r], record.reclaimed_by_return[r])",
        "record.granted[r], record.reclaimed_by_return[r]",
    ),
    one(
        "allocator_accepts_epoch_zero",
        "docs/semantics.md#negotiation: epoch 0 is reserved (InvalidArgument at every allocator "
        "call)",
        D.EPOCH_BOUND,
        _EPOCH_RECORD,
        "if type(epoch) is not int or not 0 < epoch <= U64_MAX:",
        "if type(epoch) is not int or not 0 <= epoch <= U64_MAX:",
    ),
    one(
        "water_level_overshoots",
        "docs/abuse.md max-min split: the level's total rise never exceeds free capacity",
        D.BOUNDARY_FLIP,
        _FAIRNESS,
        "return at + (free - rise) // slope",
        "return at + (free - rise) // slope + 1",
    ),
    # -- the gate (docs/gate.md, issue 10 item 14) --------------------------------------------
    one(
        "route_removal_keeps_reserved_tokens",
        "docs/gate.md: removing a route rolls back its RESERVED tokens (exact credit back)",
        D.HALF_APPLIED,
        _GATE_ROUTES,
        "tokens = [t for t in self._unsettled.values() if t._route is route]",
        "tokens: list[GateToken] = []",
    ),
    one(
        "removed_route_raises_out_of_the_pick",
        "docs/gate.md: an owner of a removed route is rejected (ROUTE_REMOVED), not raised",
        D.MISSING_CHECK,
        _GATE,
        "if ident not in self._routes and (ctx.snapshot",
        "if False and ident not in self._routes and (ctx.snapshot",
    ),
    one(
        "replace_endpoint_fences_before_validating",
        "docs/design.md#principle-5: validate everything, then commit once (replace_endpoint)",
        D.VALIDATE_AFTER_MUTATE,
        _GATE_ROUTES,
        "        if endpoint is route.endpoint:\n"
        '            raise InvalidArgument("the route already uses this endpoint")\n'
        "        removal = self._detach(route)",
        "        removal = self._detach(route)\n"
        "        if endpoint is route.endpoint:\n"
        '            raise InvalidArgument("the route already uses this endpoint")',
    ),
    one(
        "legacy_window_off_by_one",
        "docs/semantics.md#negotiation: a legacy route dispatches at most legacy_window owners at "
        "a time",
        D.BOUNDARY_FLIP,
        _GATE,
        "if route.legacy_in_flight >= self._config.legacy_window:",
        "if route.legacy_in_flight > self._config.legacy_window:",
    ),
    one(
        "gate_max_routes_off_by_one",
        "docs/gate.md: at most max_routes registered routes (TooManyRequests past it)",
        D.BOUNDARY_FLIP,
        _GATE_ROUTES,
        "if len(self._routes) >= self._config.max_routes:",
        "if len(self._routes) > self._config.max_routes:",
    ),
)
