"""Trace validation: replaying a recorded trace against the credit spec, a search over the
hidden spec steps between events (the numbered rules of :mod:`tent_models.trace`).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from pathlib import Path
from typing import Any, cast

import attrs
from tent_spec.credit import (
    ACTIVATION,
    ACTIVE,
    FENCING,
    RECLAIMED,
    STALE,
    UPDATE,
    USAGE,
    CreditSpec,
    CreditState,
    Update,
    Usage,
)

from tent_models.trace._format import (
    TraceFile,
    read_trace,
)

BACKTRACK = 4  # events re-explained with every hidden-step count when the greedy replay stalls

# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class CandidateVerdict:
    """One spec action that could have produced the rejected event, and why it did not."""

    action: str
    args: tuple[Hashable, ...]
    reason: str


@attrs.frozen(kw_only=True)
class TraceReport:
    """The verdict on one trace. ``matched`` events were explained (the longest prefix)."""

    path: str
    ok: bool
    events: int
    matched: int
    hidden_steps: int = 0
    event: Mapping[str, Any] | None = None
    state_before: Mapping[str, object] | None = None
    candidates: tuple[CandidateVerdict, ...] = ()
    allowed: tuple[str, ...] = ()  # what the spec lets the event's node do there instead
    detail: str = ""

    def format(self) -> str:
        """Human-readable verdict (what ``tent trace validate`` prints)."""
        if self.ok:
            return (
                f"{self.path}: valid ({self.events} events, {self.hidden_steps} hidden "
                "spec steps inferred)"
            )
        matched = (
            f"events 0..{self.matched - 1} match the spec" if self.matched else "the first event"
        )
        lines = [
            f"{self.path}: REJECTED at event {self.matched} ({matched})",
            f"  event: {dict(self.event or {})}",
        ]
        if self.detail:
            lines.append(f"  {self.detail}")
        lines.append("  state before the event:")
        lines.extend(f"    {k}: {v!r}" for k, v in (self.state_before or {}).items())
        lines.append("  candidate actions:")
        if not self.candidates:
            lines.append("    (none: no spec action produces this event)")
        lines.extend(f"    {c.action}{tuple(c.args)!r}: {c.reason}" for c in self.candidates)
        if self.allowed:
            lines.append("  the spec allows this node here:")
            lines.extend(f"    {step}" for step in self.allowed)
        return "\n".join(lines)


@attrs.frozen(kw_only=True)
class ValidationReport:
    """The verdicts on every trace given to :func:`validate`."""

    traces: tuple[TraceReport, ...]

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.traces)

    def format(self) -> str:
        return "\n".join(t.format() for t in self.traces)


@attrs.frozen
class _Node:
    """One search state: a spec state and the messages delivered on its path (rule 3)."""

    state: CreditState
    delivered: frozenset[tuple[int, Any]]  # (sender, message): messages carry no sender
    hidden: int


_RECEIVER_ACTIONS = frozenset(
    {
        "grant",
        "push_update",
        "send_activation",
        "publish_regressed",
        "consumer_release",
        "reclaim_after_fence",
        "receiver_restart",
        "data_lands",
    }
)
_ENVIRONMENT = frozenset({"lose", "fail_inflight", "become_stale"})
_KIND_OF = {
    "grant": "send",
    "push_update": "send",
    "publish_regressed": "send",
    "send_activation": "send",
    "report_usage": "send",
    "deliver": "receive",
    "reserve": "reserve",
    "commit": "commit",
    "rollback": "rollback",
    "return_unused": "return",
    "data_lands": "land",
    "consumer_release": "release",
    "reclaim_after_fence": "fence_complete",
    "receiver_restart": "start",
    "sender_restart": "start",
}


class _Validator:
    """Replays one :class:`TraceFile` against the spec (see the module docstring)."""

    def __init__(self, trace: TraceFile, *, hidden_depth: int, max_frontier: int) -> None:
        self.trace = trace
        self.spec = CreditSpec(trace.bounds, name="credit/trace")
        self.hidden_depth = hidden_depth
        self.max_frontier = max_frontier
        self.index = {f"sender:{p}": s for s, p in enumerate(trace.senders)}
        self.n = trace.bounds.resources
        self._allow_duplicate = False

    # ---- attribution ----------------------------------------------------------------------

    def _actor(self, action: str, args: tuple[Hashable, ...]) -> str:
        if action in _RECEIVER_ACTIONS:
            return "receiver"
        if action == "deliver" and isinstance(args[1], Usage):
            return "receiver"
        if action in _ENVIRONMENT or action == "duplicate":
            return "environment"
        return f"sender:{self.trace.senders[cast('int', args[0])]}"

    def _hidden(self, action: str, args: tuple[Hashable, ...]) -> bool:
        if action == "duplicate":
            return False  # rule 3: matched retroactively
        actor = self._actor(action, args)
        if actor == "environment":
            return True
        return actor not in self.trace.nodes or _KIND_OF[action] not in self.trace.kinds

    def _expand(self, frontier: list[_Node], seen: set[CreditState]) -> list[_Node]:
        """The nodes one hidden step beyond ``frontier`` whose state is not in ``seen``."""
        out: list[_Node] = []
        for node in frontier:
            for step in self.spec.successors(node.state):
                if not self._hidden(step.action, tuple(step.args)) or step.state in seen:
                    continue
                seen.add(step.state)
                delivered = node.delivered
                if step.action == "deliver":
                    delivered = delivered | {(cast("int", step.args[0]), step.args[1])}
                out.append(_Node(step.state, delivered, node.hidden + 1))
                if len(out) >= self.max_frontier:
                    return out
        return out

    # ---- vectors and messages ---------------------------------------------------------------

    def _vec(self, raw: object) -> tuple[int, ...]:
        amounts = raw if isinstance(raw, Mapping) else {}
        return tuple(int(amounts.get(r + 1, 0)) for r in range(self.n))

    def _charge_index(self, raw: object) -> int | None:
        vec = self._vec(raw)
        return self.trace.bounds.charges.index(vec) if vec in self.trace.bounds.charges else None

    # ---- candidates ---------------------------------------------------------------------------

    def _candidates(
        self, node: _Node, event: Mapping[str, Any]
    ) -> list[tuple[str, tuple[Hashable, ...], CreditState | None, str]]:
        """``(action, args, successor or None, reason)`` for every action that could produce
        ``event`` in ``node``; a ``None`` successor with ``stutter`` reason means "no step"."""
        kind, who = event["k"], event["n"]
        state = node.state
        out: list[tuple[str, tuple[Hashable, ...], CreditState | None, str]] = []

        def attempt(action: str, args: tuple[Hashable, ...]) -> None:
            nxt = self.spec.apply(state, action, args)
            reason = "" if nxt is not None else self.spec.explain(state, action, args)
            out.append((action, args, nxt, reason))

        if who == "receiver":
            peer = event.get("peer")
            s = self.index.get(f"sender:{peer}") if peer is not None else None
            if kind == "start":
                attempt("receiver_restart", ())
            elif s is None:
                return [("?", (), None, f"event names unknown peer {peer!r}")]
            elif kind == "accept":
                epoch = event.get("epoch")
                if state.peers[s].epoch == epoch:
                    out.append(("stutter", (), state, "stutter"))
                else:
                    attempt("sender_restart", (s,))
            elif kind == "receive":
                msg = event.get("msg", {})
                if msg.get("type") != "SenderCreditUsage":
                    out.append(("stutter", (), state, "stutter"))  # offers, heartbeats
                else:
                    out.extend(self._deliveries(node, s, self._usage_matcher(msg)))
            elif kind == "send":
                out.extend(self._receiver_sends(state, s, event.get("msg", {})))
            elif kind == "land":
                c = self._charge_index(event.get("amounts"))
                if c is None:
                    return [("data_lands", (s,), None, "the landed amounts are no charge")]
                attempt("data_lands", (s, (state.session, event.get("epoch"), c)))
            elif kind == "release":
                attempt("consumer_release", (s, event.get("epoch")))
            elif kind == "fence_complete":
                attempt("reclaim_after_fence", (s, event.get("epoch")))
            else:  # "fence": a disconnect the spec models only through a reconnect
                out.append(("stutter", (), state, "stutter"))
            return out
        s = self.index.get(who)
        if s is None:
            return [("?", (), None, f"unknown node {who!r}")]
        if kind == "start":
            attempt("sender_restart", (s,))
        elif kind in ("stale", "disconnect"):
            attempt("become_stale", (s,))
        elif kind == "receive":
            msg = event.get("msg", {})
            found = self._deliveries(node, s, self._down_matcher(msg))
            led = state.peers[s].ledger
            if (
                msg.get("type") == "CapabilityActivation"
                and all(nxt is None for _a, _g, nxt, _r in found)
                and (led.session, led.epoch) == (msg.get("receiver_session_id"), msg.get("epoch"))
            ):
                # rule 5: a repeated activation of the live key (the receiver's answer to a
                # retransmitted offer) is a no-op wherever it arrives
                found.append(("stutter", (), state, "stutter"))
            out.extend(found)
        elif kind == "send":
            msg = event.get("msg", {})
            if msg.get("type") != "SenderCreditUsage":
                out.append(("stutter", (), state, "stutter"))  # offers, heartbeats
            else:
                out.extend(self._reports(state, s, msg))
        elif kind in ("reserve", "commit", "rollback", "return"):
            c = self._charge_index(event.get("charge"))
            action = {"return": "return_unused"}.get(kind, kind)
            if c is None:
                return [(action, (s,), None, "the charge is none of the model's charges")]
            if kind == "reserve" and event.get("result") != "reserved":
                out.append(("stutter", (), state, "stutter"))  # backpressure changes nothing
            else:
                attempt(action, (s, c))
        else:  # "complete": the transport's report; data_lands / fail_inflight are hidden
            out.append(("stutter", (), state, "stutter"))
        return out

    def _usage_matcher(self, msg: Mapping[str, Any]) -> Any:
        # A usage sequence is the sender's own report count, as in the spec: it matches exactly.
        key = (msg.get("receiver_session_id"), msg.get("epoch"), msg.get("sequence"))
        returned = self._vec(msg.get("returned_totals"))

        def match(m: Any) -> bool:
            return m.kind == USAGE and (m.session, m.epoch, m.seq) == key and m.returned == returned

        return match

    def _down_matcher(self, msg: Mapping[str, Any]) -> Any:
        key = (msg.get("receiver_session_id"), msg.get("epoch"))
        if msg.get("type") == "CapabilityActivation":
            return lambda m: m.kind == ACTIVATION and (m.session, m.epoch) == key
        grants = self._vec(msg.get("grants"))

        def match(m: Any) -> bool:
            return m.kind == UPDATE and (m.session, m.epoch) == key and m.grants == grants

        return match

    def _deliveries(
        self, node: _Node, s: int, match: Any
    ) -> list[tuple[str, tuple[Hashable, ...], CreditState | None, str]]:
        state = node.state
        peer = state.peers[s]
        out: list[tuple[str, tuple[Hashable, ...], CreditState | None, str]] = []
        for m, _n in (*peer.to_sender, *peer.to_receiver):
            if match(m):
                out.append(("deliver", (s, m), self.spec.apply(state, "deliver", (s, m)), ""))
        if not out and self._allow_duplicate:
            for t, m in sorted(node.delivered, key=repr):
                if t != s:
                    continue
                if match(m) and state.faults.duplications < self.trace.bounds.max_duplications:
                    copy = self._with_copy(state, s, m)
                    out.append(("deliver", (s, m), self.spec.apply(copy, "deliver", (s, m)), ""))
        if not out:
            out.append(
                (
                    "deliver",
                    (s,),
                    None,
                    "no message in flight (or delivered before and "
                    "duplicated) matches the received one",
                )
            )
        return out

    @staticmethod
    def _with_copy(state: CreditState, s: int, m: Any) -> CreditState:
        """``state`` with one more copy of ``m`` in flight (a retroactive duplicate, rule 3)."""
        peer = state.peers[s]
        field = "to_receiver" if m.kind == USAGE else "to_sender"
        bag = dict(getattr(peer, field))
        bag[m] = bag.get(m, 0) + 1
        copies = tuple(sorted(bag.items()))
        if m.kind == USAGE:
            peer = peer._replace(to_receiver=copies)
        else:
            peer = peer._replace(to_sender=copies)
        faults = state.faults._replace(duplications=state.faults.duplications + 1)
        peers = (*state.peers[:s], peer, *state.peers[s + 1 :])
        return state._replace(peers=peers, faults=faults)

    def _reports(
        self, state: CreditState, s: int, msg: Mapping[str, Any]
    ) -> list[tuple[str, tuple[Hashable, ...], CreditState | None, str]]:
        match = self._usage_matcher(msg)
        out: list[tuple[str, tuple[Hashable, ...], CreditState | None, str]] = []
        for d in range(len(self.trace.bounds.charges) + 1):
            nxt = self.spec.apply(state, "report_usage", (s, d))
            if nxt is None:
                out.append(
                    ("report_usage", (s, d), None, self.spec.explain(state, "report_usage", (s, d)))
                )
            elif any(match(m) for m, _n in nxt.peers[s].to_receiver):
                out.append(("report_usage", (s, d), nxt, ""))
            else:
                out.append(("report_usage", (s, d), None, "the report would carry other totals"))
        return out

    def _receiver_sends(
        self, state: CreditState, s: int, msg: Mapping[str, Any]
    ) -> list[tuple[str, tuple[Hashable, ...], CreditState | None, str]]:
        out: list[tuple[str, tuple[Hashable, ...], CreditState | None, str]] = []
        if msg.get("type") == "CapabilityActivation":
            nxt = self.spec.apply(state, "send_activation", (s,))
            reason = "" if nxt is not None else self.spec.explain(state, "send_activation", (s,))
            if nxt is None and (
                (state.peers[s].ledger.session, state.peers[s].ledger.epoch)
                == (msg.get("receiver_session_id"), msg.get("epoch"))
            ):
                # a repeated handshake of a live key: a no-op wherever it arrives
                return [("stutter", (), state, "stutter")]
            return [("send_activation", (s,), nxt, reason)]
        if msg.get("type") != "ReceiverCreditUpdate":
            return [("stutter", (), state, "stutter")]
        sent = Update(
            UPDATE,
            int(msg.get("receiver_session_id", 0)),
            int(msg.get("epoch", 0)),
            0,
            self._vec(msg.get("grants")),
        )
        candidates: list[tuple[str, tuple[Hashable, ...]]] = [
            ("grant", (s,)),
            ("push_update", (s,)),
        ]
        candidates += [("publish_regressed", (s, r)) for r in range(self.n)]
        for action, args in candidates:
            nxt = self.spec.apply(state, action, args)
            if nxt is None:
                out.append((action, args, None, self.spec.explain(state, action, args)))
                continue
            new = [m for m, _n in nxt.peers[s].to_sender if m not in dict(state.peers[s].to_sender)]
            if any(
                (m.session, m.epoch, m.grants) == (sent.session, sent.epoch, sent.grants)
                for m in new
            ):
                out.append((action, args, nxt, ""))
            else:
                out.append((action, args, None, "it would publish other totals"))
        if not any(nxt is not None for _a, _g, nxt, _r in out):
            books = state.peers[s].books[-1]
            live = (state.session, books.epoch) == (sent.session, sent.epoch)
            if live and books.granted == sent.grants:
                out.append(("stutter", (), state, "stutter"))  # rule 5: a refresh
        return out

    # ---- logged variables -----------------------------------------------------------------

    def _vars_mismatch(self, state: CreditState, event: Mapping[str, Any]) -> str:
        logged = event.get("vars")
        if not isinstance(logged, Mapping):
            return ""
        who = event["n"]
        if who == "receiver":
            s = self.index.get(f"sender:{event.get('peer')}")
            if s is None:
                return ""
            epoch = logged.get("epoch")
            books = [b for b in state.peers[s].books if b.epoch == epoch]
            if "granted" not in logged and "state" not in logged:
                return ""
            if not books:
                return (
                    f"the receiver logs epoch {epoch} of sender {s}, the spec holds no books"
                    if len(logged) > 1
                    else ""
                )
            b = books[0]
            status = {ACTIVE: "ACTIVE", FENCING: "FENCING", RECLAIMED: "FENCED"}[b.status]
            spec_view: dict[str, object] = {
                "state": status,
                "granted": b.granted,
                "released": b.released,
                "reclaimed": b.reclaimed,
                "landed": b.landed,
            }
            for name, value in logged.items():
                if name in spec_view:
                    got = value if name == "state" else self._vec(value)
                    if got != spec_view[name]:
                        return f"logged {name} {got!r}, the spec has {spec_view[name]!r}"
            return ""
        s = self.index.get(who)
        if s is None:
            return ""
        led = state.peers[s].ledger
        spec_sender: dict[str, object] = {
            "session": led.session,
            "epoch": led.epoch,
            "grant_total": led.grant_total,
            "consumed": led.consumed,
            "returned": led.returned,
        }
        for name, value in logged.items():
            if name == "state":
                if (value == "STALE") != (led.freshness == STALE):
                    return f"logged state {value}, the spec's freshness differs"
            elif name in spec_sender:
                got = value if name in ("session", "epoch") else self._vec(value)
                if name in ("grant_total", "consumed", "returned") and not led.session:
                    continue  # no entry: the implementation logs none
                if got != spec_sender[name]:
                    return f"logged {name} {got!r}, the spec has {spec_sender[name]!r}"
        return ""

    # ---- the replay -------------------------------------------------------------------------

    def _advance(self, frontier: list[_Node], event: Mapping[str, Any]) -> list[_Node]:
        out: list[_Node] = []
        seen: set[CreditState] = set()
        for node in frontier:
            for action, args, nxt, _reason in self._candidates(node, event):
                if nxt is None or nxt in seen or self._vars_mismatch(nxt, event):
                    continue
                seen.add(nxt)
                delivered = node.delivered
                if action == "deliver":
                    delivered = delivered | {(cast("int", args[0]), args[1])}
                out.append(_Node(nxt, delivered, node.hidden))
                if len(out) >= self.max_frontier:
                    return out
        return out

    def _explain(
        self, frontier: list[_Node], event: Mapping[str, Any], *, every: bool
    ) -> list[_Node]:
        """The nodes after ``event``: with the fewest hidden steps that explain it, or (with
        ``every``) after any number of them up to ``hidden_depth``.

        Iterative deepening over hidden steps (rule 1); a retroactive duplicate (rule 3) counts
        as a hidden step, so a plain explanation wins over a duplicated message.
        """
        self._allow_duplicate = every
        pool = list(frontier)
        seen = {node.state for node in pool}
        layer = pool
        found = self._advance(pool, event)
        depth = 0
        while (every or not found) and depth < self.hidden_depth and layer:
            depth += 1
            self._allow_duplicate = True
            layer = self._expand(layer, seen)
            if every:
                found += [
                    n
                    for n in self._advance(layer, event)
                    if n.state not in {f.state for f in found}
                ]
            else:
                pool += layer
                found = self._advance(pool, event)
        return found[: self.max_frontier]

    def run(self, path: str) -> TraceReport:
        """Replay the events; on a dead end, re-explain the last ``BACKTRACK`` events allowing
        every number of hidden steps (a hidden step may be needed before an earlier event:
        a report still in flight when its sender restarted)."""
        initial = self.spec.initial_states()[0]
        frontiers = [[_Node(initial, frozenset(), 0)]]
        events = self.trace.events
        i = 0
        while i < len(events):
            nxt = self._explain(frontiers[i], events[i], every=False)
            if not nxt:
                start = max(0, i - BACKTRACK)
                frontier = frontiers[start]
                for j in range(start, i + 1):
                    frontier = self._explain(frontier, events[j], every=True)
                    if not frontier:
                        break
                    if j < i:
                        frontiers[j + 1] = frontier
                nxt = frontier
            if not nxt:
                return self._reject(path, i, frontiers[i][0], events[i])
            frontiers.append(nxt)
            i += 1
        return TraceReport(
            path=path,
            ok=True,
            events=len(events),
            matched=len(events),
            hidden_steps=min(node.hidden for node in frontiers[-1]),
        )

    def _reject(self, path: str, index: int, node: _Node, event: Mapping[str, Any]) -> TraceReport:
        verdicts = []
        for action, args, nxt, reason in self._candidates(node, event):
            why = reason if nxt is None else self._vars_mismatch(nxt, event) or "enabled"
            verdicts.append(CandidateVerdict(action=action, args=args, reason=why))
        allowed = tuple(
            f"{step.action}{tuple(step.args)!r}"
            for step in self.spec.successors(node.state)
            if self._actor(step.action, tuple(step.args)) == event["n"]
        )
        return TraceReport(
            path=path,
            ok=False,
            events=len(self.trace.events),
            matched=index,
            event=dict(event),
            state_before=dict(self.spec.describe(node.state)),
            candidates=tuple(verdicts),
            allowed=allowed,
            detail=f"no spec step (after up to {self.hidden_depth} hidden ones) produces it",
        )


def validate_trace(
    trace: TraceFile, *, path: str = "<trace>", hidden_depth: int = 4, max_frontier: int = 1000
) -> TraceReport:
    """Replay one decoded trace against the spec (see the module docstring)."""
    validator = _Validator(trace, hidden_depth=hidden_depth, max_frontier=max_frontier)
    return validator.run(path)


def validate(
    paths: Iterable[str | Path], *, hidden_depth: int = 4, max_frontier: int = 1000
) -> ValidationReport:
    """Validate every trace file in ``paths``; raises :class:`TraceError` for an unreadable one.

    ``hidden_depth`` bounds the hidden spec steps tried between two events, ``max_frontier`` the
    spec states kept per event.
    """
    reports = tuple(
        validate_trace(
            read_trace(p), path=str(p), hidden_depth=hidden_depth, max_frontier=max_frontier
        )
        for p in paths
    )
    return ValidationReport(traces=reports)
