"""Hand-written mutants of ``tent_credit``'s sender side: ledger, wire, inbox, endpoints.

Each breaks one rule of docs/semantics.md / the credit RFC / issue 10 and names its defect class.
"""

from __future__ import annotations

import attrs

from .model import DefectClass as D
from .model import Edit, Mutant

_LEDGER = "tent_credit/_ledger.py"
_ARITH = "tent_credit/_arith.py"
_DESCRIBE = "tent_credit/_describe.py"
_WIRE = "tent_credit/_wire.py"
_INBOX = "tent_credit/_inbox.py"
_SENDER = "tent_credit/_sender_endpoint.py"
_SENDER_RESERVE = "tent_credit/_sender_reserve.py"
_RECEIVER = "tent_credit/_receiver_endpoint.py"
_NEGOTIATION = "tent_credit/_negotiation.py"


def one(  # noqa: PLR0917 (a catalogue row: name, rule, class, file, old, new)
    name: str, rule: str, defect: D, file: str, old: str, new: str
) -> Mutant:
    """A mutant of one edit."""
    return Mutant(name=name, rule=rule, defect=defect, edits=(Edit(file=file, old=old, new=new),))


MUTANTS: tuple[Mutant, ...] = (
    # -- the ledger (docs/semantics.md#sender-ledger) ----------------------------------------------
    one(
        "equal_sequence_is_new",
        "docs/semantics.md#sender-ledger apply_update 3: sequence <= last is DUPLICATE_OR_OLD",
        D.BOUNDARY_FLIP,
        _LEDGER,
        "    if sequence <= last_sequence:\n        return UpdateDisposition.DUPLICATE",
        "    if sequence < last_sequence:\n        return UpdateDisposition.DUPLICATE",
    ),
    one(
        "grants_as_deltas",
        "docs/semantics.md#sender-ledger: grant totals are cumulative, replaced not added",
        D.WRONG_RULE,
        _LEDGER,
        "            grant[g.resource] = g.amount\n",
        "            grant[g.resource] += g.amount\n",
    ),
    one(
        "decreasing_grant_accepted",
        "docs/semantics.md#sender-ledger apply_update 4: a grant below its previous total is "
        "GrantDecreased",
        D.MISSING_CHECK,
        _LEDGER,
        "        if total < previous_totals[r]:\n",
        "        if False and total < previous_totals[r]:\n",
    ),
    one(
        "reserve_per_resource",
        "RFC atomic multi-resource eligibility: reserve all of a charge or nothing",
        D.HALF_APPLIED,
        _LEDGER,
        "                exhausted.append(r)\n"
        "        if exhausted is not None:\n"
        "            self._blocked += 1\n"
        "            return Blocked(key=key, exhausted=tuple(exhausted))\n"
        "        for r, amount in parts:\n"
        "            # Cannot overflow: amount <= available, so consumed + amount"
        " <= grant_total <= u64 max.\n"
        "            consumed[r] += amount\n",
        "                exhausted.append(r)\n"
        "            else:  # mutant: consume resource by resource\n"
        "                consumed[r] += amount\n"
        "        if exhausted is not None:\n"
        "            self._blocked += 1\n"
        "            return Blocked(key=key, exhausted=tuple(exhausted))\n",
    ),
    one(
        "rollback_unchecked",
        "docs/semantics.md#sender-ledger rollback: consumed never underflows (checked_sub)",
        D.OVERFLOW,
        _LEDGER,
        "        after = [checked_sub(consumed[r], amount) for r, amount in parts]\n",
        "        after = [consumed[r] - amount for r, amount in parts]\n",
    ),
    one(
        "update_epoch_unchecked",
        "docs/semantics.md#sender-ledger apply_update 2: an update of another epoch is "
        "InvalidEntry",
        D.EPOCH_BOUND,
        _LEDGER,
        "            if e.epoch != epoch:\n",
        "            if False and e.epoch != epoch:\n",
    ),
    one(
        "same_epoch_activation_resets",
        "docs/semantics.md#sender-ledger and docs/semantics.md#negotiation activate 4: the same "
        "epoch is a no-op, consumption is kept",
        D.EPOCH_BOUND,
        _LEDGER,
        "        if epoch == current.epoch:\n            return\n",
        "        if epoch == current.epoch:\n"
        "            current.consumed = [0] * _SLOTS\n"
        "            return\n",
    ),
    one(
        "ledger_max_entries_off_by_one",
        "docs/semantics.md#sender-ledger activate 2: at most max_entries keys (checked before "
        "allocation)",
        D.BOUNDARY_FLIP,
        _LEDGER,
        "if len(self._entries) >= self._max_entries:",
        "if len(self._entries) > self._max_entries:",
    ),
    one(
        "older_activation_replaces_entry",
        "docs/semantics.md#sender-ledger activate 3: an epoch lower than the entry's is "
        "InvalidEntry",
        D.EPOCH_BOUND,
        _LEDGER,
        "if epoch < current.epoch:\n",
        "if False and epoch < current.epoch:\n",
    ),
    one(
        "late_deactivate_erases_newer_epoch",
        "docs/semantics.md#sender-ledger deactivate: a cleanup of another epoch is InvalidEntry",
        D.EPOCH_BOUND,
        _LEDGER,
        "if current.epoch != epoch:\n",
        "if False and current.epoch != epoch:\n",
    ),
    one(
        "update_of_another_session_applies",
        "docs/semantics.md#sender-ledger apply_update 1: the update's receiver session must be "
        "the key's",
        D.WRONG_KEY,
        _LEDGER,
        "if update.receiver_session_id.value != key.receiver_session.value:",
        "if False and update.receiver_session_id.value != key.receiver_session.value:",
    ),
    one(
        "update_of_another_class_applies",
        "docs/semantics.md#sender-ledger apply_update 1: the update's QoS class must be the key's",
        D.WRONG_KEY,
        _LEDGER,
        "if update.qos_class != key.qos_class:",
        "if False and update.qos_class != key.qos_class:",
    ),
    one(
        "available_ignores_returned",
        "docs/semantics.md#sender-ledger: available = grant_total − consumed − returned (returned "
        "credit is gone)",
        D.WRONG_RULE,
        _LEDGER,
        "if amount > grant[r] - consumed[r] - returned[r]:\n",
        "if amount > grant[r] - consumed[r]:\n",
    ),
    one(
        "exact_fit_charge_blocked",
        "docs/semantics.md#sender-ledger try_reserve 3: blocked only when available < amount (an "
        "exact fit reserves)",
        D.BOUNDARY_FLIP,
        _LEDGER,
        "if amount > grant[r] - consumed[r] - returned[r]:\n",
        "if amount >= grant[r] - consumed[r] - returned[r]:\n",
    ),
    one(
        "return_beyond_available",
        "docs/semantics.md#sender-ledger return_credit: more than available is InsufficientCredit",
        D.MISSING_CHECK,
        _LEDGER,
        "exhausted = tuple(r for r, amount in parts if amount > grant[r] - consumed[r]"
        " - returned[r])",
        "exhausted = tuple(r for r, amount in parts if False)",
    ),
    one(
        "refused_update_raises_other_grants",
        "docs/design.md#principle-5 (apply_update): a refused update changes no grant total",
        D.VALIDATE_AFTER_MUTATE,
        _LEDGER,
        "            grant = e.grant\n            disposition = update_acceptance(\n",
        "            grant = e.grant\n"
        "            if sequence > e.last_sequence:  # mutant: apply before validating\n"
        "                for g in grants:\n"
        "                    grant[g.resource] = max(grant[g.resource], g.amount)\n"
        "            disposition = update_acceptance(\n",
    ),
    # -- checked arithmetic and bounded formatting -------------------------------------------
    one(
        "checked_add_wraps_at_2_64",
        "docs/design.md#principle-6: a u64 sum of 2**64 is ArithmeticOverflow, never a value",
        D.OVERFLOW,
        _ARITH,
        "if total > U64_MAX:",
        "if total > U64_MAX + 1:",
    ),
    one(
        "check_u64_no_upper_bound",
        "docs/design.md#principle-6: a u64 argument above 2**64 − 1 is InvalidArgument",
        D.MISSING_BOUND,
        _ARITH,
        "if value < 0 or value > U64_MAX:",
        "if value < 0:",
    ),
    one(
        "describe_formats_any_integer",
        "issue 10 item 1: an error message never formats an unbounded untrusted integer",
        D.UNTRUSTED_FORMATTING,
        _DESCRIBE,
        'return str(int(value)) if bits <= _MAX_BITS else f"an integer of {bits} bits"',
        "return str(int(value))",
    ),
    one(
        "describe_formats_any_string",
        "issue 10 item 1: an error message never carries an unbounded untrusted string",
        D.UNTRUSTED_FORMATTING,
        _DESCRIBE,
        "if len(value) <= _MAX_CHARS:",
        "if True:",
    ),
    one(
        "bignum_width_unbounded",
        "issue 10 item 1: a bignum wider than any field is refused before it is built",
        D.UNTRUSTED_FORMATTING,
        _WIRE,
        "if argument > _MAX_BIGNUM_BYTES:",
        "if False and argument > _MAX_BIGNUM_BYTES:",
    ),
    one(
        "bignum_small_value_accepted",
        "wire decode 2: a bignum for a value below 2**64 is NON_CANONICAL (no round trip)",
        D.BOUNDARY_FLIP,
        _WIRE,
        "if argument <= 8:",
        "if argument < 8:",
    ),
    one(
        "nesting_bound_off_by_one",
        "wire decode 2: nesting deeper than MAX_DEPTH is TOO_DEEP",
        D.BOUNDARY_FLIP,
        _WIRE,
        "if depth > MAX_DEPTH:",
        "if depth > MAX_DEPTH + 1:",
    ),
    one(
        "max_bytes_exclusive",
        "wire decode 1: a message of exactly max_bytes is decoded (TOO_LARGE only beyond it)",
        D.BOUNDARY_FLIP,
        _WIRE,
        "if len(raw) > max_bytes:",
        "if len(raw) >= max_bytes:",
    ),
    attrs.evolve(
        one(
            "amount_list_unbounded",
            "wire schema: at most MAX_RESOURCES_PER_MESSAGE amounts per list",
            D.MISSING_BOUND,
            _WIRE,
            "if type(item) is not list or len(item) > MAX_RESOURCES_PER_MESSAGE:",
            "if type(item) is not list:",
        ),
        equivalent="there are four resources and each may appear once, so a fifth pair is an "
        "unknown or repeated resource: INVALID_FIELD at the latest at the fifth item, as with the "
        "bound (only the message differs)",
    ),
    # -- the inbox (docs/semantics.md#receiver-allocator, issue 10 item 3) -------------------------
    one(
        "inbox_coalesces_by_sequence",
        "docs/semantics.md#receiver-allocator inbox: coalescing compares (epoch, sequence), not "
        "the sequence alone",
        D.WRONG_KEY,
        _INBOX,
        "            if (update.epoch, update.sequence) > (pending.epoch, pending.sequence):\n",
        "            if update.sequence > pending.sequence:\n",
    ),
    one(
        "invalid_update_displaces_valid",
        "issue 10 item 3: a decreasing higher-sequence update never replaces a valid pending one",
        D.MISSING_CHECK,
        _INBOX,
        "        if g.amount < totals.get(g.resource, 0):\n            return None\n",
        "        if False:\n            return None\n",
    ),
    one(
        "inbox_one_key_past_max",
        "docs/semantics.md#receiver-allocator inbox 3: never more than max_keys keys pending",
        D.BOUNDARY_FLIP,
        _INBOX,
        "if len(self._pending) >= self._max_keys:",
        "if len(self._pending) > self._max_keys:",
    ),
    # -- the sender endpoint and negotiation (issue 10 items 2, 5, 10; RFC state machine) ----
    one(
        "completion_mints_credit",
        "RFC concurrency rule 6: completion never mints local credit",
        D.WRONG_RULE,
        _SENDER_RESERVE,
        "        self._in_flight[slot] = count - 1\n",
        "        self._in_flight[slot] = count - 1\n"
        "        for r, amount in token.charge.parts:\n"
        "            token._entry.consumed[r] -= amount\n",
    ),
    one(
        "refused_batch_moves_the_clock",
        "issue 10 item 5: a refused receive_batch leaves the clock and update_age_ns unchanged",
        D.VALIDATE_AFTER_MUTATE,
        _SENDER,
        "        raws = _byte_items(datas)\n        self._advance(now_ns)\n",
        "        self._advance(now_ns)\n        raws = _byte_items(datas)\n",
    ),
    one(
        "refused_complete_moves_the_clock",
        "issue 10 item 5: a refused complete leaves the clock unchanged",
        D.VALIDATE_AFTER_MUTATE,
        _SENDER_RESERVE,
        "        self._check_time(now_ns)\n        if token._state is not TokenState.COMMITTED:",
        "        self._advance(now_ns)\n        if token._state is not TokenState.COMMITTED:",
    ),
    one(
        "epoch_zero_activation_escapes",
        "issue 10 item 2: an activation with epoch 0 is a counted violation, never raised",
        D.EPOCH_BOUND,
        _SENDER,
        "if act.selected_version and act.epoch == 0:",
        "if False and act.selected_version and act.epoch == 0:",
    ),
    Mutant(
        name="unmodelled_demand_half_applies_report",
        rule="issue 10 item 4: a report refused for its demand applies none of its returns",
        defect=D.HALF_APPLIED,
        edits=(
            Edit(
                file=_RECEIVER,
                old="        if target is not None and any(r not in modelled for r in target):\n"
                '            return [self._violation("demand names a resource this receiver'
                ' does not model")]\n',
                new="",
            ),
            Edit(
                file=_RECEIVER,
                old="        except (RemoteProtocolError, InvalidArgument) as exc:\n"
                "            return [self._violation(str(exc))]\n"
                "        self._usage_sequence = usage.sequence\n",
                new="        except (RemoteProtocolError, InvalidArgument) as exc:\n"
                "            return [self._violation(str(exc))]\n"
                "        if target is not None and any(r not in modelled for r in target):\n"
                '            return [self._violation("demand names a resource this receiver'
                ' does not model")]\n'
                "        self._usage_sequence = usage.sequence\n",
            ),
        ),
    ),
    one(
        "duplicate_usage_reapplied",
        "RFC: a duplicate or old usage report is ignored (sequence <= last applied)",
        D.BOUNDARY_FLIP,
        _RECEIVER,
        "if usage.sequence <= self._usage_sequence:",
        "if usage.sequence < self._usage_sequence:",
    ),
    one(
        "unsatisfiable_charge_counted",
        "issue 10 item 10: a charge no u64 grant can cover is refused before any counter moves",
        D.OVERFLOW,
        _SENDER_RESERVE,
        "if consumed[resource] + amount > U64_MAX:",
        "if False and consumed[resource] + amount > U64_MAX:",
    ),
    one(
        "stale_sender_reserves",
        'RFC state machine rule 2: "Stale: stop new credit-gated dispatch"',
        D.MISSING_CHECK,
        _NEGOTIATION,
        "        return self._state is NegotiationState.ACTIVE\n\n    def legacy",
        "        return self._state in "
        "(NegotiationState.ACTIVE, NegotiationState.STALE)\n\n    def legacy",
    ),
    one(
        "ttl_boundary_flip",
        "RFC TTL staleness: stale when now − last refresh ≥ TTL (at exactly the TTL)",
        D.BOUNDARY_FLIP,
        _NEGOTIATION,
        "and now_ns - self._last_refresh_ns >= self._ttl_ms * 1_000_000",
        "and now_ns - self._last_refresh_ns > self._ttl_ms * 1_000_000",
    ),
    one(
        "ttl_in_microseconds",
        "RFC TTL staleness: freshness_ttl_ms is milliseconds (× 1e6 on the ns clock)",
        D.WRONG_RULE,
        _NEGOTIATION,
        "and now_ns - self._last_refresh_ns >= self._ttl_ms * 1_000_000",
        "and now_ns - self._last_refresh_ns >= self._ttl_ms * 1_000",
    ),
    one(
        "same_epoch_reactivation_accepted",
        "docs/semantics.md#negotiation: within one session the epoch must grow",
        D.EPOCH_BOUND,
        _NEGOTIATION,
        "if session == self._session and self._epoch is not None and epoch <= self._epoch:",
        "if session == self._session and self._epoch is not None and epoch < self._epoch:",
    ),
)
