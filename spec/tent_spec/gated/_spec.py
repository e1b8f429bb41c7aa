"""The gated spec as a ``SpecModel``: enumeration, invariants, witnesses, encoding, recovery
(:class:`GatedSpec`)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any, cast

from tent_spec.admission import (
    CANCELED,
    COMPLETED,
    DISPATCHING,
    FAILED,
    QUEUED,
    TERMINAL,
)
from tent_spec.credit import (
    UPDATE,
    Activation,
    SpecInvariant,
    SpecStep,
    SpecWitness,
)

from ._control import GatedControl
from ._values import (
    _ACTIONS,
    _ARITY,
    _BOUND,
    _FAULTS,
    COMMITTED,
    NONE,
    PHASES,
    REPORT,
    RESERVED,
    ROLLED_BACK,
    SETTLED,
    STALLED,
    TOKEN_STATES,
    WAS_STALLED,
    Bag,
    GatedState,
    Offer,
    Owner,
    ReceiverKey,
    Report,
    SenderKey,
    Update,
    Vec,
    _vadd,
    _vle,
    _vsub,
    charge_of,
)


class GatedSpec(GatedControl):
    """The gated queue as a finite transition system (structurally a ``SpecModel``).

    Guards are ``_g_<action>(state, *args)`` (``None`` = enabled, else the failing guard in
    words; a reason starting ``"bound:"`` is a model bound, not a protocol rule), effects
    ``_e_<action>(state, *args)``: the queue and gate ones in :class:`~._core.GatedCore`, the
    control ones in :class:`~._control.GatedControl`. Known-bad variants override one of the
    policy hooks (:meth:`reserve`, :meth:`snapshot_fenced`, :meth:`requeue_blocked`,
    :meth:`control_needs_credit`, :meth:`idle_credit`).
    """

    # ---- SpecModel: enumeration -------------------------------------------------------------

    def _instances(self, state: GatedState) -> Iterator[tuple[str, tuple[Hashable, ...]]]:
        """Candidate action instances (a superset of the enabled ones)."""
        cfg = self.config
        if state.admitted < len(cfg.workload):
            yield "admit", (state.admitted,)
        if cfg.cancel:
            for owner_id in state.queue:
                yield "cancel", (owner_id,)
        for window in cfg.windows:
            yield "pick", window
        for o in state.owners:
            if o.state == DISPATCHING:
                if o.token == RESERVED:
                    yield "submit", (o.owner_id, True)
                    yield "submit", (o.owner_id, False)
                if o.token == COMMITTED and not o.landed:
                    yield "land", (o.owner_id,)
                yield "complete", (o.owner_id,)
        for k in range(cfg.keys):
            yield "release", (k,)
            yield "sender_flush", (k,)
            yield "receiver_flush", (k,)
        yield "refresh_tick", ()
        for k in range(cfg.keys):
            for bag in (state.to_receiver[k], state.to_sender[k]):
                for msg, _n in bag:
                    yield "deliver", (k, msg)
                    yield "duplicate", (k, msg)
                    yield "lose", (k, msg)
        yield "receiver_restart", ()

    def _guard(self, state: GatedState, action: str, args: tuple[Hashable, ...]) -> str | None:
        return getattr(self, "_g_" + action)(state, *args)  # type: ignore[no-any-return]

    def successors(self, state: GatedState) -> Iterator[Any]:
        """Every enabled action instance with its successor."""
        for action, args in self._instances(state):
            if self._guard(state, action, args) is None:
                yield SpecStep(action, args, getattr(self, "_e_" + action)(state, *args))

    def _malformed(self, action: str, args: tuple[Hashable, ...]) -> str:
        arity = _ARITY.get(action)
        if arity is None:
            return f"unknown action {action!r}"
        if not isinstance(args, tuple) or len(args) != arity:
            return f"{action} takes {arity} argument(s), got {args!r}"
        if action in ("deliver", "duplicate", "lose") and not isinstance(
            args[1], Offer | Report | Activation | Update
        ):
            return f"{action}: the second argument must be a message"
        if args and type(args[0]) is not int:
            return f"{action}: the first argument must be an int, got {args!r}"
        return ""

    def apply(self, state: GatedState, action: str, args: tuple[Hashable, ...]) -> Any:
        """The successor of one action instance, or ``None`` when its guard is false."""
        if self._malformed(action, args) or self._guard(state, action, args) is not None:
            return None
        return getattr(self, "_e_" + action)(state, *args)

    def explain(self, state: GatedState, action: str, args: tuple[Hashable, ...]) -> str:
        """Which guard of ``action(args)`` fails in ``state``, in words ("enabled" if none)."""
        bad = self._malformed(action, args)
        if bad:
            return bad
        reason = self._guard(state, action, args)
        return "enabled" if reason is None else f"{action}{args!r}: {reason}"

    def action_names(self) -> Sequence[str]:
        return _ACTIONS

    def unreachable_actions(self) -> frozenset[str]:
        """Fault actions without a budget, and the refresh timer when none is configured."""
        cfg = self.config
        dead = {
            action
            for action, budget in (
                ("duplicate", cfg.max_duplications),
                ("lose", cfg.max_losses),
                ("receiver_restart", cfg.max_receiver_restarts),
            )
            if budget == 0 or cfg.max_faults == 0
        }
        if not cfg.refresh:
            dead.add("refresh_tick")
        if not cfg.cancel:
            dead.add("cancel")
        return frozenset(dead)

    def fault_actions(self) -> frozenset[str]:
        return _FAULTS

    # ---- invariants ------------------------------------------------------------------------

    def _live_token_charge(self, state: GatedState, key: int, session: int) -> Vec:
        total = self._zero
        for o in state.owners:
            if (
                o.key == key
                and o.token_session == session
                and o.token
                in (
                    RESERVED,
                    COMMITTED,
                    SETTLED,
                )
            ):
                total = _vadd(total, charge_of(o.length))
        return total

    def inv_dispatched_owner_holds_full_charge(self, state: GatedState) -> bool:
        """Every DISPATCHING remote owner holds a token (RESERVED or COMMITTED), and every owner
        that holds one was charged on the session its snapshot names."""
        for o in state.owners:
            if o.key and o.state == DISPATCHING and o.token not in (RESERVED, COMMITTED):
                return False
        return True

    def inv_consumed_equals_token_charges(self, state: GatedState) -> bool:
        """Per key, the live entry's ``consumed`` is exactly the charges of its tokens (reserved,
        committed or completed): a blocked reserve leaves nothing consumed."""
        for k, ledger in enumerate(state.senders):
            if ledger.consumed != self._live_token_charge(state, k + 1, ledger.session):
                return False
        return True

    def inv_no_dispatch_on_fenced_snapshot(self, state: GatedState) -> bool:
        """A token is only ever taken on the session the owner's snapshot pinned (a rejected
        owner takes none)."""
        return all(o.token == NONE or o.token_session == o.snapshot for o in state.owners)

    def inv_usage_within_accepted_grant(self, state: GatedState) -> bool:
        """consumed + returned ≤ the accepted grant total, per key and resource."""
        return all(_vle(_vadd(s.consumed, s.returned), s.grant_total) for s in state.senders)

    def inv_reclaimed_within_returned(self, state: GatedState) -> bool:
        """The receiver reclaimed at most what the sender returned on the live session's
        entry: a duplicated or reordered report never reclaims twice."""
        for s, b in zip(state.senders, state.receivers, strict=True):
            if s.session == state.session and not _vle(b.reclaimed, s.returned):
                return False
        return True

    def inv_accepted_grant_within_receiver_grant(self, state: GatedState) -> bool:
        """The sender's accepted total ≤ what the receiver granted that key in that session."""
        for s, b in zip(state.senders, state.receivers, strict=True):
            if s.session == state.session and not _vle(s.grant_total, b.granted):
                return False
        return True

    def inv_capacity(self, state: GatedState) -> bool:
        """Per resource, Σ over keys of (granted − released − reclaimed) ≤ capacity."""
        return all(f >= 0 for f in self.free_capacity(state)) and all(
            _vle(b.released, b.landed) and _vle(_vadd(b.landed, b.reclaimed), b.granted)
            for b in state.receivers
        )

    def inv_claims_covered(self, state: GatedState) -> bool:
        """What can still occupy the receiver for a key of the live session - landed unreleased
        data, committed work in flight, reserved tokens and available credit - fits the key's
        outstanding grant ``granted − released − reclaimed``."""
        for k, (s, b) in enumerate(zip(state.senders, state.receivers, strict=True)):
            if s.session != state.session:
                continue
            claim = _vadd(_vsub(b.landed, b.released), self.available(s))
            for o in state.owners:
                if (
                    o.key == k + 1
                    and o.token_session == state.session
                    and (o.token == RESERVED or (o.token == COMMITTED and not o.landed))
                ):
                    claim = _vadd(claim, charge_of(o.length))
            if not _vle(claim, _vsub(_vsub(b.granted, b.released), b.reclaimed)):
                return False
        return True

    def inv_control_unblocked(self, state: GatedState) -> bool:
        """A credit stall never blocks control: every message in flight is deliverable, and a key
        that owes a report can send it whenever the bag has room (whatever its data credit)."""
        for k in range(self.config.keys):
            for bag in (state.to_sender[k], state.to_receiver[k]):
                for msg, _n in bag:
                    if self._g_deliver(state, k, msg) is not None:
                        return False
            ledger = state.senders[k]
            reason = self._g_sender_flush(state, k)
            if self.report_due(ledger) and reason is not None and not reason.startswith(_BOUND):
                return False
        return True

    def inv_queue_order(self, state: GatedState) -> bool:
        """The queue holds exactly the QUEUED owners, in enqueue (owner id) order."""
        queued = [o.owner_id for o in state.owners if o.state == QUEUED]
        return list(state.queue) == queued

    def inv_admission_counters(self, state: GatedState) -> bool:
        """Outstanding owners/bytes count the live owners within the limits; dispatching_bytes
        is the DISPATCHING owners' lengths (every owner here is degradation-eligible)."""
        live = [o for o in state.owners if o.state != TERMINAL]
        cfg = self.config
        return (
            state.outstanding_owners == len(live) <= cfg.max_outstanding_owners
            and state.outstanding_bytes == sum(o.length for o in live) <= cfg.max_outstanding_bytes
            and state.dispatching_bytes
            == sum(o.length for o in state.owners if o.state == DISPATCHING)
            and all((o.state == TERMINAL) == (o.status is not None) for o in state.owners)
        )

    def invariants(self) -> Sequence[Any]:
        """The named safety properties; the physical catch-all (claims) comes last."""
        return (
            SpecInvariant(
                "dispatched_owner_holds_full_charge",
                'RFC acceptance 2: "A sender never dispatches a required remote plan without '
                'all credit dimensions"; issue 6: "no owner dispatched without every charged '
                'dimension reserved"',
                self.inv_dispatched_owner_holds_full_charge,
            ),
            SpecInvariant(
                "consumed_equals_token_charges",
                "RFC claim 3 (atomic multi-resource eligibility); docs/semantics.md#sender-ledger "
                'try_reserve: "if '
                'any resource lacks credit → insufficient, nothing changes"',
                self.inv_consumed_equals_token_charges,
            ),
            SpecInvariant(
                "no_dispatch_on_fenced_snapshot",
                'docs/design.md#gate-at-eligibility: "A rejected owner (its key was fenced) '
                'becomes TERMINAL(FAILED)"; RFC '
                'acceptance 4: "Restarted peers cannot reuse old credit or old allocation '
                'generation"',
                self.inv_no_dispatch_on_fenced_snapshot,
            ),
            SpecInvariant(
                "usage_within_accepted_grant",
                'issue 6: "consumed − returned ≤ the sender\'s accepted grant total"; '
                "docs/semantics.md#sender-ledger "
                "available = grant_total − consumed − returned ≥ 0",
                self.inv_usage_within_accepted_grant,
            ),
            SpecInvariant(
                "accepted_grant_within_receiver_grant",
                "issue 6: \"the sender's accepted grant total ≤ what the receiver granted that "
                'key in that epoch"; RFC acceptance 3',
                self.inv_accepted_grant_within_receiver_grant,
            ),
            SpecInvariant(
                "reclaimed_within_returned",
                'docs/semantics.md#receiver-allocator: "return ... reclaimed as returned − '
                "already reclaimed "
                '(idempotent)"; RFC principle 2: cumulative totals make duplicates harmless',
                self.inv_reclaimed_within_returned,
            ),
            SpecInvariant(
                "capacity_never_exceeded",
                'issue 6: "per resource, Σ over keys of (granted − released − reclaimed) ≤ '
                'capacity"; RFC acceptance 1',
                self.inv_capacity,
            ),
            SpecInvariant(
                "control_never_blocked_by_data_credit",
                'issue 6: "a credit stall never blocks control updates"; RFC acceptance 5: '
                '"Zero data credit cannot block control updates"',
                self.inv_control_unblocked,
            ),
            SpecInvariant(
                "blocked_owner_keeps_enqueue_order",
                'docs/design.md#gate-at-eligibility: "A blocked owner stays QUEUED in place with '
                'its enqueue order"; issue 6: '
                '"no requeue reversal"',
                self.inv_queue_order,
            ),
            SpecInvariant(
                "admission_counters_and_limits",
                "docs/semantics.md#admission-queue: outstanding within max_outstanding_*; "
                'dispatching_bytes is "every '
                'eligible owner dispatched and not yet completed"',
                self.inv_admission_counters,
            ),
            SpecInvariant(
                "claims_covered_by_receiver_grant",
                'RFC claim 1 (receiver-capacity safety): "Aggregate reserved receiver resources '
                'never exceed configured capacity"',
                self.inv_claims_covered,
            ),
        )

    def witnesses(self) -> Sequence[Any]:
        """Interesting states the model must reach (non-vacuity), those the bounds allow:

        1. always: a stalled owner dispatched after a grant, a rollback after a failed submit;
        2. with a receiver restart: an old snapshot rejected, in-flight work failed by it;
        3. with two owners on one key: both stalled at once (the second skipped);
        4. with a local owner behind a remote one: it dispatched past the remote one's stall;
        5. when the remote owners' charges exceed the capacity: the receiver granted short;
        6. always: idle credit returned after its owner left, and reclaimed by the receiver;
        7. with cancel: a credit-stalled owner canceled.
        """

        def dispatched_after_stall(s: GatedState) -> bool:
            return any(o.stall == WAS_STALLED and o.token == COMMITTED for o in s.owners)

        def rejected_after_restart(s: GatedState) -> bool:
            return any(
                o.key and o.status == FAILED and o.token == NONE and o.snapshot < s.session
                for o in s.owners
            )

        def rolled_back(s: GatedState) -> bool:
            return any(o.token == ROLLED_BACK for o in s.owners)

        def two_stalled_on_a_key(s: GatedState) -> bool:
            keys = [o.key for o in s.owners if o.stall == STALLED]
            return any(keys.count(k) >= 2 for k in set(keys))

        def local_passes_a_stall(s: GatedState) -> bool:
            first_stalled = next((o.owner_id for o in s.owners if o.stall == STALLED), None)
            return first_stalled is not None and any(
                o.key == 0 and o.owner_id > first_stalled and o.state != QUEUED for o in s.owners
            )

        def receiver_short(s: GatedState) -> bool:
            return any(b.stalled for b in s.receivers)

        def inflight_failed_by_restart(s: GatedState) -> bool:
            return any(o.token == SETTLED and o.status == FAILED for o in s.owners)

        def idle_credit_reclaimed(s: GatedState) -> bool:
            return any(any(b.reclaimed) for b in s.receivers)

        def stalled_owner_canceled(s: GatedState) -> bool:
            return any(o.status == CANCELED and o.stall == WAS_STALLED for o in s.owners)

        cfg = self.config
        remote = [o for o in cfg.workload if o.key]
        keys = [o.key for o in remote]
        demand = self._zero
        for o in remote:
            demand = _vadd(demand, charge_of(o.length))
        first_remote = next((i for i, o in enumerate(cfg.workload) if o.key), len(cfg.workload))
        restarts = cfg.max_receiver_restarts > 0 and cfg.max_faults != 0
        found = [
            SpecWitness("stalled_owner_dispatched_after_a_grant", dispatched_after_stall),
            SpecWitness("submit_failure_rolled_back", rolled_back),
            SpecWitness("idle_credit_returned_and_reclaimed", idle_credit_reclaimed),
        ]
        if cfg.cancel:
            found.append(SpecWitness("stalled_owner_canceled", stalled_owner_canceled))
        if restarts:
            found.append(SpecWitness("old_snapshot_rejected_after_restart", rejected_after_restart))
            found.append(
                SpecWitness("in_flight_work_failed_by_restart", inflight_failed_by_restart)
            )
        if any(keys.count(k) >= 2 for k in keys):
            found.append(SpecWitness("two_owners_stalled_on_one_key", two_stalled_on_a_key))
        if any(o.key == 0 for o in cfg.workload[first_remote:]):
            found.append(SpecWitness("local_owner_dispatched_past_a_stall", local_passes_a_stall))
        if not _vle(demand, cfg.capacity):
            found.append(SpecWitness("receiver_short_of_capacity", receiver_short))
        return tuple(found)

    # ---- encoding, symmetry, bounds, recovery, display ---------------------------------------

    def pack(self, state: GatedState) -> tuple[Any, ...]:
        """Nested tuples of ints (names become their index in the module's name tuples); the
        code of each owner, endpoint and bag is memoised by value (speed only)."""
        code = self._code
        return (
            state.session,
            state.admitted,
            tuple(code(o, _pack_owner) for o in state.owners),
            state.queue,
            state.outstanding_owners,
            state.outstanding_bytes,
            state.dispatching_bytes,
            tuple(code(s, _pack_sender) for s in state.senders),
            tuple(code(b, _pack_receiver) for b in state.receivers),
            tuple(code(bag, _pack_bag) for bag in (*state.to_sender, *state.to_receiver)),
            tuple(state.faults),
        )

    def _code(self, value: Any, encode: Callable[[Any], tuple[Any, ...]]) -> tuple[Any, ...]:
        codes = self._codes
        packed = codes.get(value)
        if packed is None:
            if len(codes) >= _CODE_LIMIT:
                codes.clear()
            packed = codes[value] = encode(value)
        return packed

    def canonicalize(self, state: GatedState) -> GatedState:
        """Renumber sequences by rank per (key, session, direction) family.

        Data independence: sequences are only compared, and a new one always exceeds every
        live one of its family (the publisher's counter is the family's maximum), so replacing
        each family's live values by their ranks (0 stays 0) keeps every guard and effect. Keys
        are not interchangeable (owners name them): there is no permutation symmetry.
        """
        senders = list(state.senders)
        receivers = list(state.receivers)
        to_sender = list(state.to_sender)
        to_receiver = list(state.to_receiver)
        changed = False
        for k in range(self.config.keys):
            s, b = senders[k], receivers[k]
            upd: dict[int, set[int]] = {s.session: {s.last_seq}}
            use: dict[int, set[int]] = {s.session: {s.usage_seq}}
            upd.setdefault(state.session, set()).add(b.pushed_seq)
            use.setdefault(state.session, set()).add(b.usage_seq)
            for m, _n in to_sender[k]:
                if m.kind == UPDATE:
                    upd.setdefault(m.session, set()).add(m.seq)
            for m, _n in to_receiver[k]:
                if m.kind == REPORT:
                    use.setdefault(m.session, set()).add(m.seq)
            ru = {session: r for session, v in upd.items() if (r := _ranks(v)) is not None}
            rs = {session: r for session, v in use.items() if (r := _ranks(v)) is not None}
            if not ru and not rs:
                continue  # already canonical (the common case)
            changed = True
            senders[k] = s._replace(
                last_seq=_renumber(ru, s.session, s.last_seq),
                usage_seq=_renumber(rs, s.session, s.usage_seq),
            )
            receivers[k] = b._replace(
                pushed_seq=_renumber(ru, state.session, b.pushed_seq),
                usage_seq=_renumber(rs, state.session, b.usage_seq),
            )
            to_sender[k] = tuple(
                sorted(
                    (m._replace(seq=_renumber(ru, m.session, m.seq)), n)
                    if m.kind == UPDATE
                    else (m, n)
                    for m, n in to_sender[k]
                )
            )
            to_receiver[k] = tuple(
                sorted(
                    (m._replace(seq=_renumber(rs, m.session, m.seq)), n)
                    if m.kind == REPORT
                    else (m, n)
                    for m, n in to_receiver[k]
                )
            )
        if not changed:
            return state
        return state._replace(
            senders=tuple(senders),
            receivers=tuple(receivers),
            to_sender=tuple(to_sender),
            to_receiver=tuple(to_receiver),
        )

    def within_bounds(self, state: GatedState) -> bool:
        cap = self.config.seq_cap
        return (
            self._in_flight(state) <= self.config.max_messages
            and all(s.usage_seq <= cap and s.last_seq <= cap for s in state.senders)
            and all(b.pushed_seq <= cap for b in state.receivers)
        )

    def quiescent_by_bound(self, state: GatedState) -> bool:
        """No non-fault action is enabled, but some is disabled only by a model bound."""
        capped = False
        for action, args in self._instances(state):
            reason = self._guard(state, action, args)
            if reason is None:
                if action not in _FAULTS:
                    return False
            elif reason.startswith(_BOUND):
                capped = True
        return capped

    def recovered(self, state: GatedState) -> bool:
        """Recoverability goal: the whole workload admitted and TERMINAL (every stalled owner has
        dispatched or was failed for good), and every landed byte released by the consumer."""
        return (
            state.admitted == len(self.config.workload)
            and all(o.state == TERMINAL for o in state.owners)
            and all(b.landed == b.released for b in state.receivers)
        )

    def lifelines(self) -> tuple[str, ...]:
        """The sequence chart's nodes: the sender (queue, gate and endpoints), the network (one
        pair of bags per key), the receiver (allocator, endpoints and consumer)."""
        return ("sender", "network", "receiver")

    def locate(
        self, state: GatedState, action: str, args: tuple[Hashable, ...]
    ) -> tuple[str, str, str | None, str | None]:
        """Where ``action(args)`` happens on the chart (the ``_CHART`` table below)."""
        kind, source, target = _CHART[action]
        label = None
        if action in ("deliver", "duplicate", "lose"):
            msg = args[1]
            to_receiver = isinstance(msg, Offer | Report)
            target = "receiver" if to_receiver else "sender"
            prefix = {"deliver": "", "duplicate": "dup ", "lose": "lost "}[action]
            label = f"{prefix}key{cast(int, args[0]) + 1} {_chart_label(msg)}"
        elif action == "land":
            label = f"data of owner {args[0]} lands"
        return kind, source, target, label

    def describe(self, state: GatedState) -> Mapping[str, object]:
        """A flat ``field -> value`` view for diff-only counterexamples."""
        out: dict[str, object] = {
            "receiver.session": state.session,
            "admitted": state.admitted,
            "queue": state.queue,
            "outstanding_owners": state.outstanding_owners,
            "outstanding_bytes": state.outstanding_bytes,
            "dispatching_bytes": state.dispatching_bytes,
        }
        for name, value in state.faults._asdict().items():
            out[f"faults.{name}"] = value
        for o in state.owners:
            status = o.state if o.status is None else f"{o.state}({o.status})"
            stall = ("", " STALLED", " was-stalled")[o.stall]
            token = "" if o.token == NONE else f" token={o.token}@s{o.token_session}"
            where = "local" if o.key == 0 else f"key{o.key} snapshot=s{o.snapshot}"
            landed = " landed" if o.landed else ""
            out[f"owner[{o.owner_id}]"] = f"{status} {where} len={o.length}{stall}{token}{landed}"
        for k in range(self.config.keys):
            for name, value in state.senders[k]._asdict().items():
                out[f"sender[key{k + 1}].{name}"] = value
            for name, value in state.receivers[k]._asdict().items():
                out[f"receiver[key{k + 1}].{name}"] = value
            out[f"to_sender[key{k + 1}]"] = tuple((_show(m), n) for m, n in state.to_sender[k])
            out[f"to_receiver[key{k + 1}]"] = tuple((_show(m), n) for m, n in state.to_receiver[k])
        return out


# Sequence charts (tent_models.report): each action's kind and who takes it; a message goes to
# the receiver (an offer, a report) or the sender (an activation, an update), read from it.
_CHART: Mapping[str, tuple[str, str, str | None]] = {
    "admit": ("local", "sender", None),
    "cancel": ("local", "sender", None),
    "pick": ("local", "sender", None),
    "submit": ("local", "sender", None),
    "land": ("deliver", "sender", "receiver"),
    "complete": ("local", "sender", None),
    "release": ("local", "receiver", None),
    "sender_flush": ("send", "sender", "network"),
    "receiver_flush": ("send", "receiver", "network"),
    "refresh_tick": ("send", "receiver", "network"),
    "deliver": ("deliver", "network", "to"),
    "duplicate": ("duplicate", "network", "to"),
    "lose": ("lose", "network", "to"),
    "receiver_restart": ("local", "receiver", None),
}
assert tuple(_CHART) == _ACTIONS

_CODE_LIMIT = 1 << 18  # pack memo entries before the memo is cleared


def _pack_owner(o: Owner) -> tuple[int, ...]:
    return (
        o.owner_id,
        o.key,
        o.length,
        o.snapshot,
        _STATE_CODE[o.state],
        _STATUS_CODE[o.status],
        o.stall,
        _TOKEN_CODE[o.token],
        o.token_session,
        int(o.landed),
    )


def _pack_sender(s: SenderKey) -> tuple[Any, ...]:
    return (
        _PHASE_CODE[s.phase],
        s.session,
        s.last_seq,
        s.grant_total,
        s.consumed,
        s.returned,
        s.usage_seq,
        int(s.dirty),
        s.demand,
        int(s.awaiting),
        int(s.withdrawn),
    )


def _pack_receiver(b: ReceiverKey) -> tuple[Any, ...]:
    return tuple(int(v) if type(v) is bool else v for v in b)


def _pack_bag(bag: Bag) -> tuple[Any, ...]:
    return tuple((tuple(m), n) for m, n in bag)


def _ranks(values: set[int]) -> dict[int, int] | None:
    """Map ``values ∪ {0}`` to ``0..n`` by rank; ``None`` when they already are ``0..n``."""
    values.add(0)
    if max(values) == len(values) - 1:
        return None
    return {v: i for i, v in enumerate(sorted(values))}


def _renumber(ranks: dict[int, dict[int, int]], session: int, seq: int) -> int:
    family = ranks.get(session)
    return seq if family is None else family[seq]


def _chart_label(msg: Any) -> str:
    """A message as a chart's arrow names it: ``Report s1 #2 demand=(1, 1, 1)``."""
    if isinstance(msg, Offer):
        return "Offer"
    if isinstance(msg, Report):
        return f"Report s{msg.session} #{msg.seq} demand={msg.demand}"
    if isinstance(msg, Update):
        return f"Update s{msg.session} #{msg.seq} {msg.grants}"
    return f"Activation s{msg.session}"


def _show(msg: Any) -> str:
    fields = ", ".join(f"{k}={v}" for k, v in msg._asdict().items() if k not in ("kind", "epoch"))
    return f"{type(msg).__name__}({fields})"


_STATE_CODE = {name: i for i, name in enumerate((QUEUED, DISPATCHING, TERMINAL))}
_STATUS_CODE: dict[str | None, int] = {None: 0, COMPLETED: 1, FAILED: 2, CANCELED: 3}
_TOKEN_CODE = {name: i for i, name in enumerate(TOKEN_STATES)}
_PHASE_CODE = {name: i for i, name in enumerate(PHASES)}
