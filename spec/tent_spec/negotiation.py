"""Executable specification of capability negotiation and peer freshness
(docs/semantics.md#negotiation).

The spec keeps its *own* transition table (:data:`TRANSITIONS`), never shared with the
implementation (docs/design.md#principle-4); a conformance test proves the two tables equal, and the
docs' diagrams are generated from this one. States and events use the implementation's enum
member names, so that test is a dict comparison.

The table is keyed by ``(mode, state, event)``: the only mode-dependent rows are the start
(``DISABLED`` mode goes straight to ``LEGACY``: default off, behaviour unchanged) and the
missing common version (``OPTIONAL`` falls back to ``LEGACY``, ``REQUIRED`` fails explicitly). A
missing key is a protocol error (h11 "Rule 1"): the event cannot happen in that state.

:class:`NegotiationSpec` is a small model over one peer context: it drives the table with
explicit events and checks that the context keeps its sender identity, that required mode
never degrades to legacy, that ``ACTIVE`` always has a common version, and that an epoch change
reaches ``ACTIVE`` only after the old epoch's in-flight work is drained.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import attrs

from .credit import InvalidBounds, SpecInvariant, SpecStep, SpecWitness

__all__ = [
    "EVENTS",
    "MODES",
    "STATES",
    "TRANSITIONS",
    "NegotiationBounds",
    "NegotiationSpec",
    "NegotiationState",
    "next_state",
]

MODES = ("DISABLED", "OPTIONAL", "REQUIRED")
STATES = ("DISABLED", "NEGOTIATING", "LEGACY", "FAILED", "ACTIVE", "STALE", "FENCING")
EVENTS = (
    "STARTED",
    "COMMON_VERSION_FOUND",
    "NO_COMMON_VERSION",
    "FRESH_UPDATE",
    "TTL_EXPIRED",
    "DISCONNECTED",
    "NEW_SESSION_OR_EPOCH",
    "FENCE_DRAINED",
)


def _table() -> dict[tuple[str, str, str], str]:
    rows: dict[tuple[str, str, str], str] = {}
    for mode in MODES:
        # RFC "Disabled ---> Legacy": default off keeps today's bounded local dispatch.
        rows[mode, "DISABLED", "STARTED"] = "LEGACY" if mode == "DISABLED" else "NEGOTIATING"
        if mode == "DISABLED":
            continue
        rows[mode, "NEGOTIATING", "COMMON_VERSION_FOUND"] = "ACTIVE"
        # A control connection can drop in any started state; before activation nothing
        # changes (the offer is retransmitted on reconnect), and LEGACY / FAILED are final.
        rows[mode, "NEGOTIATING", "DISCONNECTED"] = "NEGOTIATING"
        # RFC: "Negotiating -- unsupported ---> Legacy or Failed(required)".
        rows[mode, "NEGOTIATING", "NO_COMMON_VERSION"] = (
            "LEGACY" if mode == "OPTIONAL" else "FAILED"
        )
        rows[mode, "LEGACY", "DISCONNECTED"] = "LEGACY"
        rows[mode, "FAILED", "DISCONNECTED"] = "FAILED"
        rows[mode, "ACTIVE", "FRESH_UPDATE"] = "ACTIVE"
        # docs/semantics.md#negotiation: Active -> Stale on disconnect or when no update arrives
        # within the TTL.
        rows[mode, "ACTIVE", "TTL_EXPIRED"] = "STALE"
        rows[mode, "ACTIVE", "DISCONNECTED"] = "STALE"
        # The TTL is evaluated only while ACTIVE: expiry is not an event in any other state.
        rows[mode, "STALE", "DISCONNECTED"] = "STALE"
        # RFC: "Stale +-- newer update -> Active".
        rows[mode, "STALE", "FRESH_UPDATE"] = "ACTIVE"
        # RFC: "new session/epoch ---> Fencing -> Active(new epoch)".
        rows[mode, "ACTIVE", "NEW_SESSION_OR_EPOCH"] = "FENCING"
        rows[mode, "STALE", "NEW_SESSION_OR_EPOCH"] = "FENCING"
        rows[mode, "FENCING", "NEW_SESSION_OR_EPOCH"] = "FENCING"
        # Updates of the new key may arrive while old work drains; dispatch waits for the fence.
        rows[mode, "FENCING", "FRESH_UPDATE"] = "FENCING"
        rows[mode, "FENCING", "DISCONNECTED"] = "FENCING"
        rows[mode, "FENCING", "FENCE_DRAINED"] = "ACTIVE"
    return rows


TRANSITIONS: Mapping[tuple[str, str, str], str] = _table()
"""``(mode, state, event) -> next state``; a missing key is a protocol error."""


def next_state(mode: str, state: str, event: str) -> str | None:
    """The table's next state, or ``None`` when the event is a protocol error in ``state``."""
    return TRANSITIONS.get((mode, state, event))


class NegotiationState(NamedTuple):
    """One peer context. Indices into :data:`MODES` / :data:`STATES` keep the state all-int."""

    mode: int
    state: int
    version: int  # the active version (0 = none)
    session: int  # the receiver session the context is keyed by (0 = none yet)
    epoch: int
    sender: int  # the sender identity bound at connection setup; never changes
    inflight_now: int  # credit-gated work in flight under the current key
    inflight_old: int  # work of a superseded key that must drain before ACTIVE


_S = {name: i for i, name in enumerate(STATES)}
_M = {name: i for i, name in enumerate(MODES)}


def _versions(_inst: object, attr: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, tuple) or not value or len(set(value)) != len(value):
        raise InvalidBounds(f"{attr.name} must be a non-empty tuple of unique versions")
    if any(type(v) is not int or v < 1 for v in value):
        raise InvalidBounds(f"{attr.name}: every version must be an int >= 1")


def _offers(_inst: object, attr: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, tuple) or not value:
        raise InvalidBounds(f"{attr.name} must be a non-empty tuple of version lists")
    for offer in value:
        _versions(_inst, attr, offer)


def _positive(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 1:
        raise InvalidBounds(f"{attr.name} must be an int >= 1, got {value!r}")


@attrs.frozen(kw_only=True)
class NegotiationBounds:
    """Versions we speak, the offers a peer may make, and caps on generations and work."""

    local_versions: tuple[int, ...] = attrs.field(validator=_versions)
    peer_offers: tuple[tuple[int, ...], ...] = attrs.field(validator=_offers)
    max_session: int = attrs.field(validator=_positive)
    max_epoch: int = attrs.field(validator=_positive)
    max_inflight: int = attrs.field(validator=_positive)


_ACTIONS = (
    "start",
    "offer",
    "fresh_update",
    "ttl_expired",
    "disconnect",
    "new_epoch",
    "new_session",
    "dispatch",
    "complete",
    "drain_old",
    "fence_drained",
)
_EVENT_OF = {
    "start": "STARTED",
    "fresh_update": "FRESH_UPDATE",
    "ttl_expired": "TTL_EXPIRED",
    "disconnect": "DISCONNECTED",
    "new_epoch": "NEW_SESSION_OR_EPOCH",
    "new_session": "NEW_SESSION_OR_EPOCH",
    "fence_drained": "FENCE_DRAINED",
}
_ENVIRONMENT_FAULTS = frozenset({"ttl_expired", "disconnect", "new_epoch", "new_session"})
_SENDER = 1  # the identity bound at connection setup in every initial state


class NegotiationSpec:
    """The negotiation state machine of one peer context (structurally a ``SpecModel``)."""

    def __init__(self, bounds: NegotiationBounds, *, name: str = "negotiation") -> None:
        self.bounds = bounds
        self.name = name

    def initial_states(self) -> list[NegotiationState]:
        """One context per mode, not started, sender identity bound."""
        return [NegotiationState(m, _S["DISABLED"], 0, 0, 0, _SENDER, 0, 0) for m in range(3)]

    def _common(self, offer: tuple[int, ...]) -> int:
        """The highest version both sides speak (0 when none)."""
        both = set(self.bounds.local_versions) & set(offer)
        return max(both) if both else 0

    def _event(self, st: NegotiationState, event: str) -> int | None:
        nxt = TRANSITIONS.get((MODES[st.mode], STATES[st.state], event))
        return None if nxt is None else _S[nxt]

    def _guard(self, st: NegotiationState, action: str, args: tuple[Hashable, ...]) -> str | None:
        b = self.bounds
        if action not in _ACTIONS:
            return f"unknown action {action!r}"
        want = 1 if action == "offer" else 0
        if not isinstance(args, tuple) or len(args) != want:
            return f"{action} takes {want} argument(s), got {args!r}"
        if action == "offer":
            i = args[0]
            if type(i) is not int or not 0 <= i < len(b.peer_offers):
                return "offer index out of range"
            event = (
                "COMMON_VERSION_FOUND" if self._common(b.peer_offers[i]) else "NO_COMMON_VERSION"
            )
        elif action in ("dispatch", "complete", "drain_old"):
            if action == "dispatch":
                if STATES[st.state] != "ACTIVE":
                    return "credit-gated dispatch needs ACTIVE (RFC rule 1)"
                if st.inflight_now >= b.max_inflight:
                    return "bound: max_inflight"
            elif action == "complete" and not st.inflight_now:
                return "no work in flight under the current key"
            elif action == "drain_old" and not st.inflight_old:
                return "no old work left to drain"
            return None
        else:
            event = _EVENT_OF[action]
        if self._event(st, event) is None:
            return f"{event} is not allowed in {STATES[st.state]} ({MODES[st.mode]} mode)"
        if action == "new_epoch" and st.epoch >= b.max_epoch:
            return "bound: max_epoch"
        if action == "new_session" and st.session >= b.max_session:
            return "bound: max_session"
        if action == "fence_drained" and st.inflight_old:
            return "old in-flight work has not drained or failed yet (RFC rule 3)"
        return None

    def _effect(
        self, st: NegotiationState, action: str, args: tuple[Hashable, ...]
    ) -> NegotiationState:
        if action == "dispatch":
            return st._replace(inflight_now=st.inflight_now + 1)
        if action == "complete":
            return st._replace(inflight_now=st.inflight_now - 1)
        if action == "drain_old":
            return st._replace(inflight_old=st.inflight_old - 1)
        if action == "offer":
            index = args[0]
            assert isinstance(index, int)  # guarded
            offer = self.bounds.peer_offers[index]
            version = self._common(offer)
            event = "COMMON_VERSION_FOUND" if version else "NO_COMMON_VERSION"
            nxt = self._event(st, event)
            assert nxt is not None  # guarded
            if version:  # docs/semantics.md#negotiation: the activation carries session and epoch
                return st._replace(state=nxt, version=version, session=1, epoch=1)
            return st._replace(state=nxt)
        nxt = self._event(st, _EVENT_OF[action])
        assert nxt is not None  # guarded
        if action == "new_epoch":  # a sender reconnect: the receiver bumps the epoch
            return st._replace(
                state=nxt,
                epoch=st.epoch + 1,
                inflight_now=0,
                inflight_old=st.inflight_old + st.inflight_now,
            )
        if action == "new_session":  # a receiver restart: new session, epochs restart
            return st._replace(
                state=nxt,
                session=st.session + 1,
                epoch=1,
                inflight_now=0,
                inflight_old=st.inflight_old + st.inflight_now,
            )
        return st._replace(state=nxt)

    # ---- SpecModel --------------------------------------------------------------------

    def _instances(self, st: NegotiationState) -> Iterator[tuple[str, tuple[Hashable, ...]]]:
        for action in _ACTIONS:
            if action == "offer":
                for i in range(len(self.bounds.peer_offers)):
                    yield action, (i,)
            else:
                yield action, ()

    def successors(self, state: NegotiationState) -> Iterator[Any]:
        for action, args in self._instances(state):
            if self._guard(state, action, args) is None:
                yield SpecStep(action, args, self._effect(state, action, args))

    def apply(self, state: NegotiationState, action: str, args: tuple[Hashable, ...]) -> Any:
        if self._guard(state, action, args) is not None:
            return None
        return self._effect(state, action, args)

    def explain(self, state: NegotiationState, action: str, args: tuple[Hashable, ...]) -> str:
        reason = self._guard(state, action, args)
        return "enabled" if reason is None else f"{action}{args!r}: {reason}"

    def action_names(self) -> Sequence[str]:
        return _ACTIONS

    def unreachable_actions(self) -> frozenset[str]:
        dead = set()
        if self.bounds.max_epoch < 2:
            dead.add("new_epoch")
        if self.bounds.max_session < 2:
            dead.add("new_session")
        return frozenset(dead)

    def fault_actions(self) -> frozenset[str]:
        return _ENVIRONMENT_FAULTS

    def invariants(self) -> Sequence[Any]:
        b = self.bounds

        def identity(st: NegotiationState) -> bool:
            return st.sender == _SENDER

        def required_never_legacy(st: NegotiationState) -> bool:
            return not (MODES[st.mode] == "REQUIRED" and STATES[st.state] == "LEGACY")

        def disabled_stays_off(st: NegotiationState) -> bool:
            return MODES[st.mode] != "DISABLED" or STATES[st.state] in ("DISABLED", "LEGACY")

        def active_has_common_version(st: NegotiationState) -> bool:
            if STATES[st.state] in ("ACTIVE", "STALE", "FENCING"):
                return (
                    st.version in b.local_versions
                    and any(st.version in offer for offer in b.peer_offers)
                    and st.session >= 1
                    and st.epoch >= 1
                )
            return st.version == 0

        def gated_work_only_when_active(st: NegotiationState) -> bool:
            if STATES[st.state] in ("ACTIVE", "STALE", "FENCING"):
                return True
            return st.inflight_now == 0 and st.inflight_old == 0

        def active_after_drain(st: NegotiationState) -> bool:
            return STATES[st.state] != "ACTIVE" or st.inflight_old == 0

        return (
            SpecInvariant(
                "sender_identity_never_changes",
                'docs/semantics.md#negotiation: "A peer context never changes its sender identity"',
                identity,
            ),
            SpecInvariant(
                "required_never_legacy",
                'RFC rollout: "Required mode: unsupported/stale peers cannot enter the gated '
                'path; use configured fallback or fail explicitly"',
                required_never_legacy,
            ),
            SpecInvariant(
                "disabled_mode_never_negotiates",
                'RFC acceptance 8: "Default-disabled and old-peer behavior remain compatible"',
                disabled_stays_off,
            ),
            SpecInvariant(
                "active_only_with_common_version",
                'RFC: "Active(version): typed updates are accepted" after "compatible" negotiation',
                active_has_common_version,
            ),
            SpecInvariant(
                "gated_work_only_after_activation",
                'RFC state machine rule 1: "Active: new dispatch may reserve credit"',
                gated_work_only_when_active,
            ),
            SpecInvariant(
                "active_only_after_old_work_drained",
                'RFC rule 3: "do not reuse old target resources until old QPs/inflight work '
                'are fenced"',
                active_after_drain,
            ),
        )

    def witnesses(self) -> Sequence[Any]:
        def reached(name: str, mode: str | None = None) -> SpecWitness:
            label = f"{mode.lower()}_" if mode else ""
            return SpecWitness(
                f"{label}reaches_{name.lower()}",
                lambda st: STATES[st.state] == name and (mode is None or MODES[st.mode] == mode),
            )

        return (
            reached("ACTIVE"),
            reached("LEGACY", "OPTIONAL"),
            reached("LEGACY", "DISABLED"),
            reached("FAILED", "REQUIRED"),
            reached("STALE"),
            reached("FENCING"),
            SpecWitness(
                "active_again_in_a_new_epoch",
                lambda st: STATES[st.state] == "ACTIVE" and (st.epoch > 1 or st.session > 1),
            ),
        )

    def pack(self, state: NegotiationState) -> tuple[Any, ...]:
        return tuple(state)

    def canonicalize(self, state: NegotiationState) -> NegotiationState:
        return state  # one peer context: no symmetry

    def within_bounds(self, state: NegotiationState) -> bool:
        b = self.bounds
        return state.session <= b.max_session and state.epoch <= b.max_epoch

    def quiescent_by_bound(self, state: NegotiationState) -> bool:
        capped = False
        for action, args in self._instances(state):
            reason = self._guard(state, action, args)
            if reason is None and action not in _ENVIRONMENT_FAULTS:
                return False
            if reason is not None and reason.startswith("bound:"):
                capped = True
        return capped

    def recovered(self, state: NegotiationState) -> bool:
        """Settled: a terminal outcome (LEGACY/FAILED) or ACTIVE with no old work pending."""
        name = STATES[state.state]
        return name in ("LEGACY", "FAILED") or (name == "ACTIVE" and not state.inflight_old)

    def lifelines(self) -> tuple[str, ...]:
        """The sequence chart's nodes: the peer's receiver and this sender's peer context."""
        return ("receiver", "sender")

    def locate(
        self, state: NegotiationState, action: str, args: tuple[Hashable, ...]
    ) -> tuple[str, str, str | None, str | None]:
        """Where ``action(args)`` happens on the chart: an offer's answer, a fresh update and
        an activation of a new epoch or session come from the receiver; everything else
        (the start, timers, disconnects, dispatch and drain) is the sender's own step."""
        if action == "offer" and type(args[0]) is int:
            return ("deliver", "receiver", "sender", f"offer {self.bounds.peer_offers[args[0]]}")
        if action in ("fresh_update", "new_epoch", "new_session"):
            return ("deliver", "receiver", "sender", action.replace("_", " "))
        return ("local", "sender", None, None)

    def describe(self, state: NegotiationState) -> Mapping[str, object]:
        out: dict[str, object] = dict(state._asdict())
        out["mode"] = MODES[state.mode]
        out["state"] = STATES[state.state]
        return out
