"""The gated spec as a ``SpecModel``: enumeration, encoding, bounds, recovery, display
(:class:`GatedSpec`; its invariants and witnesses are :class:`~._properties.GatedProperties`')."""

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
    SpecStep,
)

from ._properties import GatedProperties
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
    TOKEN_STATES,
    Bag,
    GatedState,
    Offer,
    Owner,
    ReceiverKey,
    Report,
    SenderKey,
    Update,
)


class GatedSpec(GatedProperties):
    """The gated queue as a finite transition system (structurally a ``SpecModel``).

    Guards are ``_g_<action>(state, *args)`` (``None`` = enabled, else the failing guard in
    words; a reason starting ``"bound:"`` is a model bound, not a protocol rule), effects
    ``_e_<action>(state, *args)``: the queue and gate ones in :class:`~._core.GatedCore`, the
    control ones in :class:`~._control.GatedControl`; the receiver's grant-ahead loop is
    :class:`~._line.GatedLine`. Known-bad variants override one of the policy hooks
    (:meth:`reserve`, :meth:`snapshot_fenced`, :meth:`requeue_blocked`,
    :meth:`control_needs_credit`, :meth:`idle_credit`, :meth:`head_blocks_the_line`,
    :meth:`join_line`).
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
        if cfg.hold_partial:
            yield "grant_partial", ()
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
        """Fault actions without a budget, and the refresh timer when none is configured or
        the bags cannot hold what it sends (an update and a report per key at least)."""
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
        if not cfg.refresh or cfg.max_messages < 2 * cfg.keys:
            dead.add("refresh_tick")
        if not cfg.cancel:
            dead.add("cancel")
        if not cfg.hold_partial:
            dead.add("grant_partial")
        return frozenset(dead)

    def fault_actions(self) -> frozenset[str]:
        return _FAULTS

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
            state.line,
            state.bypass,
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
        out["receiver.line"] = tuple(f"key{k + 1}" for k in state.line)
        out["receiver.bypass"] = state.bypass
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
    "grant_partial": ("local", "receiver", None),
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
        s.waiting,
        s.head,
        s.reported,
        int(s.returns_unreported),
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
