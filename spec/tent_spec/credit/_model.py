"""The credit spec as a readable ``SpecModel``: which action instances exist in a state,
successors by guard and effect, ``apply`` / ``explain`` for replay, and the plain encoding,
symmetry reduction, bounds and display the checker reads.

:class:`ReadableCreditSpec` is the whole model with nothing memoised: every method evaluates
the guards, effects and invariants directly. :class:`~tent_spec.credit.CreditSpec` (the one the
checker and the tests run) overrides the hot methods with memoised equals
(:mod:`tent_spec.credit._fastpath`; ``tests/models/test_spec_fastpath.py`` proves them equal).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from typing import Any

from tent_spec.credit._invariants import CreditInvariants
from tent_spec.credit._state import (
    ACTIVE,
    FENCING,
    FRESHNESS_NAMES,
    STATUS_NAMES,
    UPDATE,
    Activation,
    CreditState,
    Peer,
    SpecStep,
    Update,
    Usage,
    _in_flight_messages,
)
from tent_spec.credit._table import _ACTIONS, _ARITY, _CHARGE_ACTIONS, _FAULTS


class ReadableCreditSpec(CreditInvariants):
    """The credit protocol as a finite transition system (structurally a ``SpecModel``),
    evaluated directly: what :class:`~tent_spec.credit.CreditSpec` computes, without its memo
    tables."""

    # ---- SpecModel: enumeration ----------------------------------------------------------

    def _instances(self, state: CreditState) -> Iterator[tuple[str, tuple[Hashable, ...]]]:
        """Action instances worth trying in ``state``: a superset of the enabled ones.

        Cheap necessary conditions (budget left, room in the bag, something to act on) prune
        the candidates; the guards stay the single authority on what is enabled.
        """
        for s in range(len(state.peers)):
            yield from self._sender_instances(state, s)
        if self._receiver_restart_candidate(state):
            yield "receiver_restart", ()

    def _receiver_restart_candidate(self, state: CreditState) -> bool:
        if not self.PRUNE_CANDIDATES:
            return True
        return (
            self._fault_left(state)
            and state.faults.receiver_restarts < self.bounds.max_receiver_restarts
        )

    def _sender_instances(
        self, state: CreditState, s: int
    ) -> Iterator[tuple[str, tuple[Hashable, ...]]]:
        """The candidate instances of sender ``s`` (``grant`` first; see ``_instances``)."""
        if not self.PRUNE_CANDIDATES:
            yield from self._every_sender_instance(state, s)
            return
        bounds = self.bounds
        faults = state.faults
        n_charges = len(self._charges)
        room = self._room(state)
        left = self._fault_left(state)
        dup = left and room and faults.duplications < bounds.max_duplications
        lose = left and faults.losses < bounds.max_losses
        stale = left and faults.stale < bounds.max_stale
        restart = left and faults.sender_restarts < bounds.max_sender_restarts
        regress = left and room and faults.regressions < bounds.max_regressions
        peer = state.peers[s]
        led = peer.ledger
        books = peer.books
        if books[-1].demand:
            yield "grant", (s,)
        if room:
            yield "push_update", (s,)
            yield "send_activation", (s,)
            if led.session:
                for d in range(n_charges + 1):
                    yield "report_usage", (s, d)
        if led.session:
            if led.last_seq:
                for c in range(n_charges):
                    yield "reserve", (s, c)
            if any(self.available(led)):
                for c in range(n_charges):
                    yield "return_unused", (s, c)
            if stale:
                yield "become_stale", (s,)
            if regress:
                for r in range(bounds.resources):
                    yield "publish_regressed", (s, r)
        for c in sorted(set(led.tokens)):
            yield "commit", (s, c)
            yield "rollback", (s, c)
        for bag in (peer.to_sender, peer.to_receiver):
            for msg, _n in bag:
                yield "deliver", (s, msg)
                if dup:
                    yield "duplicate", (s, msg)
                if lose:
                    yield "lose", (s, msg)
        for item in sorted(set(peer.inflight)):
            yield "data_lands", (s, item)
            yield "fail_inflight", (s, item)
        for b in books:
            if b.landed != b.released:
                yield "consumer_release", (s, b.epoch)
            if b.status == FENCING:
                yield "reclaim_after_fence", (s, b.epoch)
        if restart:
            yield "sender_restart", (s,)

    def _every_sender_instance(
        self, state: CreditState, s: int
    ) -> Iterator[tuple[str, tuple[Hashable, ...]]]:
        """Every instance of every action of sender ``s``: each charge, demand and resource
        index, each message in flight, each in-flight item and each epoch with books (the guards
        alone decide; see ``PRUNE_CANDIDATES``)."""
        n_charges = len(self._charges)
        peer = state.peers[s]
        yield "grant", (s,)
        yield "push_update", (s,)
        yield "send_activation", (s,)
        for d in range(n_charges + 1):
            yield "report_usage", (s, d)
        for action in _CHARGE_ACTIONS:
            for c in range(n_charges):
                yield action, (s, c)
        yield "become_stale", (s,)
        for r in range(self.bounds.resources):
            yield "publish_regressed", (s, r)
        for bag in (peer.to_sender, peer.to_receiver):
            for msg, _n in bag:
                yield "deliver", (s, msg)
                yield "duplicate", (s, msg)
                yield "lose", (s, msg)
        for item in sorted(set(peer.inflight)):
            yield "data_lands", (s, item)
            yield "fail_inflight", (s, item)
        for b in peer.books:
            yield "consumer_release", (s, b.epoch)
            yield "reclaim_after_fence", (s, b.epoch)
        yield "sender_restart", (s,)

    def successors(self, state: CreditState) -> Iterator[Any]:
        """Every enabled instance of ``_instances(state)``, in that order, with its successor."""
        guard, effect = self._guard, self._effect
        for action, args in self._instances(state):
            if guard[action](state, *args) is None:
                yield SpecStep(action, args, effect[action](state, *args))

    def _check_args(self, state: CreditState, action: str, args: tuple[Hashable, ...]) -> str:
        """Argument shape errors (empty string when the arguments are well-formed)."""
        arity = _ARITY.get(action)
        if arity is None:
            return f"unknown action {action!r}"
        if not isinstance(args, tuple) or len(args) != arity:
            return f"{action} takes {arity} argument(s), got {args!r}"
        if arity and not self._sender_ok(state, args[0]):
            return f"{action}: the first argument must be a sender index, got {args[0]!r}"
        if action in _CHARGE_ACTIONS and not self._charge_ok(args[1]):
            return f"{action}: unknown charge index {args[1]!r}"
        if action == "report_usage" and not (
            type(args[1]) is int and 0 <= args[1] <= len(self._charges)
        ):
            return f"{action}{args!r}: demand must be 0 or 1 + a charge index"
        if action == "publish_regressed" and not (
            type(args[1]) is int and 0 <= args[1] < self.bounds.resources
        ):
            return f"{action}{args!r}: resource index out of range"
        if action in ("data_lands", "fail_inflight") and not (
            isinstance(args[1], tuple) and len(args[1]) == 3
        ):
            return f"{action}: the in-flight item must be (session, epoch, charge)"
        if action in ("deliver", "duplicate", "lose") and not isinstance(
            args[1], Activation | Update | Usage
        ):
            return f"{action}: the second argument must be a message"
        return ""

    def apply(self, state: CreditState, action: str, args: tuple[Hashable, ...]) -> Any:
        """The successor of one action instance, or ``None`` when its guard is false."""
        if self._check_args(state, action, args):
            return None
        if self._guard[action](state, *args) is not None:
            return None
        return self._effect[action](state, *args)

    def explain(self, state: CreditState, action: str, args: tuple[Hashable, ...]) -> str:
        """Which guard of ``action(args)`` fails in ``state``, in words ("enabled" if none)."""
        bad = self._check_args(state, action, args)
        if bad:
            return bad
        reason = self._guard[action](state, *args)
        return "enabled" if reason is None else f"{action}{args!r}: {reason}"

    # ---- encoding, symmetry, bounds, display -------------------------------------------

    def pack(self, state: CreditState) -> tuple[Any, ...]:
        """Nested plain tuples of ints: every NamedTuple becomes a plain tuple (all fields are
        ints or plain tuples of ints already; vectors, tokens and in-flight items are plain)."""
        return (state.session, tuple(state.faults), tuple(map(_pack_peer, state.peers)))

    def canonicalize(self, state: CreditState) -> CreditState:
        """Renumber sequences by rank per key, then sort the interchangeable senders.

        1. Sequences are only compared, and a new one exceeds every live one, so replacing the
           live values of each key's update and usage sequences by their ranks (0 stays 0)
           keeps every guard and effect (data independence).
        2. No component names another sender, so sorting the per-sender :class:`Peer` slots
           picks one representative of the permutation orbit.
        """
        session = state.session
        peers = sorted(_renumber(p, session) for p in state.peers)
        return CreditState(session, tuple(peers), state.faults)

    def within_bounds(self, state: CreditState) -> bool:
        if _in_flight_messages(state) > self.bounds.max_messages:
            return False
        return all(self._sequences_within_cap(p) for p in state.peers)

    def _sequences_within_cap(self, p: Peer) -> bool:
        cap = self.bounds.seq_cap
        if p.ledger.last_seq > cap or p.ledger.usage_seq > cap:
            return False
        return not any(b.pushed_seq > cap or b.usage_seq > cap for b in p.books)

    def quiescent_by_bound(self, state: CreditState) -> bool:
        """True when no action is enabled but some action is disabled only by a bound."""
        capped = False
        for action, args in self._instances(state):
            reason = self._guard[action](state, *args)
            if reason is None:
                if action not in _FAULTS:
                    return False
            elif reason.startswith("bound:"):
                capped = True
        return capped

    def lifelines(self) -> tuple[str, ...]:
        """The sequence chart's nodes: each sender, the network (the bags), the receiver."""
        return (*(f"sender[{s}]" for s in range(self.bounds.senders)), "network", "receiver")

    def locate(
        self, state: CreditState, action: str, args: tuple[Hashable, ...]
    ) -> tuple[str, str, str | None, str | None]:
        """Where ``action(args)`` happens on the chart (the ``_CHART`` table; the state is not
        needed: the arguments name the sender and the message)."""
        return chart_place(_CHART, action, args)

    def describe(self, state: CreditState) -> Mapping[str, object]:
        out: dict[str, object] = {"receiver.session": state.session}
        for name, value in state.faults._asdict().items():
            out[f"faults.{name}"] = value
        for s, p in enumerate(state.peers):
            pre = f"sender[{s}]"
            for name, value in p.ledger._asdict().items():
                shown = FRESHNESS_NAMES[value] if name == "freshness" else value
                out[f"{pre}.ledger.{name}"] = shown
            out[f"{pre}.receiver_epoch"] = p.epoch
            for b in p.books:
                for name, value in b._asdict().items():
                    if name != "epoch":
                        shown = STATUS_NAMES[value] if name == "status" else value
                        out[f"{pre}.books[{b.epoch}].{name}"] = shown
            out[f"{pre}.inflight"] = p.inflight
            out[f"{pre}.to_sender"] = tuple((_show(m), n) for m, n in p.to_sender)
            out[f"{pre}.to_receiver"] = tuple((_show(m), n) for m, n in p.to_receiver)
        return out


# Sequence charts (tent_models.report): each action's kind and who takes it. "sender" is the
# sender of args[0]; "to" is where the message args[1] travels (a usage report to the
# receiver, an update or activation to the sender). Data goes straight from sender to receiver.
_CHART: Mapping[str, tuple[str, str, str | None]] = {
    "grant": ("send", "receiver", "network"),
    "push_update": ("send", "receiver", "network"),
    "send_activation": ("send", "receiver", "network"),
    "report_usage": ("send", "sender", "network"),
    "deliver": ("deliver", "network", "to"),
    "duplicate": ("duplicate", "network", "to"),
    "lose": ("lose", "network", "to"),
    "reserve": ("local", "sender", None),
    "commit": ("local", "sender", None),
    "rollback": ("local", "sender", None),
    "return_unused": ("local", "sender", None),
    "data_lands": ("deliver", "sender", "receiver"),
    "fail_inflight": ("lose", "sender", "receiver"),
    "consumer_release": ("local", "receiver", None),
    "reclaim_after_fence": ("local", "receiver", None),
    "become_stale": ("local", "sender", None),
    "sender_restart": ("local", "sender", None),
    "receiver_restart": ("local", "receiver", None),
    "publish_regressed": ("send", "receiver", "network"),
}
assert tuple(_CHART) == _ACTIONS


def chart_label(msg: Any) -> str:
    """A message as a chart's arrow names it: ``Update s1 e1 #2 (1, 1)``."""
    key = f"s{msg.session} e{msg.epoch}"
    if isinstance(msg, Update):
        return f"Update {key} #{msg.seq} {msg.grants}"
    if isinstance(msg, Usage):
        return f"Usage {key} #{msg.seq} ret={msg.returned} d={msg.demand}"
    return f"Activation {key}"


def chart_place(
    table: Mapping[str, tuple[str, str, str | None]], action: str, args: tuple[Hashable, ...]
) -> tuple[str, str, str | None, str | None]:
    """``(kind, source, target, label)`` of ``action(args)`` from a ``_CHART``-shaped table."""
    kind, source, target = table[action]
    sender = f"sender[{args[0]}]" if args else ""
    label = None
    if action in ("deliver", "duplicate", "lose"):
        msg = args[1]
        to = "receiver" if isinstance(msg, Usage) else sender
        target = to if target == "to" else target
        label = {"deliver": "", "duplicate": "dup ", "lose": "lost "}[action] + chart_label(msg)
    elif action in ("data_lands", "fail_inflight"):
        label = f"data {args[1]} " + ("lands" if action == "data_lands" else "fails")
    named = {"sender": sender, "network": "network", "receiver": "receiver"}
    return kind, named[source], None if target is None else named.get(target, target), label


def _show(msg: Any) -> str:
    fields = ", ".join(f"{k}={v}" for k, v in msg._asdict().items() if k != "kind")
    return f"{type(msg).__name__}({fields})"


def _pack_peer(p: Peer) -> tuple[Any, ...]:
    return (
        tuple(p.ledger),
        p.epoch,
        tuple(map(tuple, p.books)),
        p.inflight,
        tuple((tuple(m), n) for m, n in p.to_sender),
        tuple((tuple(m), n) for m, n in p.to_receiver),
    )


def _ranks(values: set[int]) -> dict[int, int] | None:
    """Map ``values ∪ {0}`` to ``0..k`` by rank; ``None`` when already ``0..k``."""
    values.add(0)
    if max(values) == len(values) - 1:
        return None
    return {v: i for i, v in enumerate(sorted(values))}


def _renumber(peer: Peer, session: int) -> Peer:
    """Replace each key's live update/usage sequences by their ranks (see ``canonicalize``)."""
    led = peer.ledger
    upd: dict[tuple[int, int], set[int]] = {}
    use: dict[tuple[int, int], set[int]] = {}
    key = (led.session, led.epoch)
    upd.setdefault(key, set()).update((led.last_seq, led.stale_at))
    use.setdefault(key, set()).add(led.usage_seq)
    for b in peer.books:
        if b.status == ACTIVE:
            upd.setdefault((session, b.epoch), set()).add(b.pushed_seq)
            use.setdefault((session, b.epoch), set()).add(b.usage_seq)
    for m, _ in peer.to_sender:
        if m.kind == UPDATE:
            upd.setdefault((m.session, m.epoch), set()).add(m.seq)
    for m, _ in peer.to_receiver:
        use.setdefault((m.session, m.epoch), set()).add(m.seq)
    umap = {k: r for k, v in upd.items() if (r := _ranks(v)) is not None}
    smap = {k: r for k, v in use.items() if (r := _ranks(v)) is not None}
    if not umap and not smap:
        return peer
    if key in umap or key in smap:
        ru = umap.get(key)
        rs = smap.get(key)
        led = led._replace(
            last_seq=ru[led.last_seq] if ru else led.last_seq,
            stale_at=ru[led.stale_at] if ru else led.stale_at,
            usage_seq=rs[led.usage_seq] if rs else led.usage_seq,
        )
    books = peer.books
    if any((session, b.epoch) in umap or (session, b.epoch) in smap for b in books):
        new_books = []
        for b in books:
            k = (session, b.epoch)
            if b.status == ACTIVE and (k in umap or k in smap):
                ru = umap.get(k)
                rs = smap.get(k)
                new_books.append(
                    b._replace(
                        pushed_seq=ru[b.pushed_seq] if ru else b.pushed_seq,
                        usage_seq=rs[b.usage_seq] if rs else b.usage_seq,
                    )
                )
            else:
                new_books.append(b)
        books = tuple(new_books)
    to_sender = peer.to_sender
    if any((m.session, m.epoch) in umap for m, _ in to_sender if m.kind == UPDATE):
        to_sender = tuple(
            sorted(
                (m._replace(seq=umap[m.session, m.epoch][m.seq]), n)
                if m.kind == UPDATE and (m.session, m.epoch) in umap
                else (m, n)
                for m, n in to_sender
            )
        )
    to_receiver = peer.to_receiver
    if any((m.session, m.epoch) in smap for m, _ in to_receiver):
        to_receiver = tuple(
            sorted(
                (m._replace(seq=smap[m.session, m.epoch][m.seq]), n)
                if (m.session, m.epoch) in smap
                else (m, n)
                for m, n in to_receiver
            )
        )
    return peer._replace(ledger=led, books=books, to_sender=to_sender, to_receiver=to_receiver)
