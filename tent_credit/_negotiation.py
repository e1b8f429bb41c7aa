"""Per-peer capability negotiation and credit freshness (docs/semantics.md#negotiation, RFC "State
Machine").

Every transition is in one table, :data:`TRANSITIONS` (h11's ``_state.py`` "Rule 1"): a
``(state, event)`` pair that is missing from it *is* the protocol error. The error is a
:class:`RemoteProtocolError` when the peer drives the event (:data:`REMOTE_EVENTS`: an activation
or a new session/epoch) and a :class:`LocalProtocolError` when our own caller does; either way
the state is unchanged.

::

    DISABLED --CREDIT_DISABLED_STARTED--> LEGACY
       |
       NEGOTIATION_STARTED
       v
    NEGOTIATING --NO_COMMON_VERSION_LEGACY_ALLOWED--> LEGACY
       |        --NO_COMMON_VERSION_REQUIRED-------> FAILED
       COMMON_VERSION_FOUND
       v
    ACTIVE --TTL_EXPIRED / DISCONNECTED--> STALE --FRESH_UPDATE_ACCEPTED--> ACTIVE
       |                                    |
       NEW_SESSION_OR_EPOCH                 NEW_SESSION_OR_EPOCH
       v                                    v
    FENCING <-------------------------------+
       |
       FENCE_DRAINED
       v
    ACTIVE (new session/epoch)

Decisions the RFC leaves open (also in the docstrings below):

1. ``DISABLED`` is the state before :meth:`PeerNegotiation.start` in every mode. Starting in
   mode ``DISABLED`` takes the RFC's ``Disabled → Legacy`` edge: the peer uses bounded local
   dispatch and is never credit-gated; OPTIONAL/REQUIRED start negotiating.
2. A disconnect while FENCING keeps FENCING: the drain of the old epoch's work is still owed, and
   the only way out of FENCING is FENCE_DRAINED (or yet another new session/epoch). So every
   entry into ACTIVE at a new epoch passes through a drain.
3. A disconnect while NEGOTIATING, LEGACY or FAILED keeps the state (negotiation resumes with the
   next activation; legacy and failed are decisions, not connection states).
4. An accepted update while FENCING refreshes the freshness clock but stays FENCING.
5. TTL staleness: the peer is stale when ``now - last_refresh >= freshness_ttl_ms`` on the
   sender's clock (a grant lives for the TTL, refresh included: at exactly the TTL it is stale,
   as in the reference); TTL 0 means no age limit. Only ACTIVE ages.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Mapping

import attrs

from ._arith import U32_MAX, U64_MAX, check_u64
from ._describe import describe
from ._messages import MAX_VERSIONS, SUPPORTED_VERSIONS, CapabilityActivation
from ._types import SessionId, _IdentityEnum
from .errors import (
    InvalidArgument,
    LocalProtocolError,
    NegotiationFailed,
    RemoteProtocolError,
)

__all__ = [
    "REMOTE_EVENTS",
    "TRANSITIONS",
    "CreditMode",
    "NegotiationEvent",
    "NegotiationSnapshot",
    "NegotiationState",
    "PeerNegotiation",
    "transition",
]


class CreditMode(_IdentityEnum):
    """Rollout mode of receiver credits for one peer (RFC "Compatibility and Rollout")."""

    DISABLED = "disabled"
    """Credits off: legacy bounded local dispatch, no negotiation (the default)."""
    OPTIONAL = "optional"
    """Negotiate; a peer without a common version falls back to legacy dispatch."""
    REQUIRED = "required"
    """Negotiate; a peer without a common version fails explicitly (never "unlimited")."""


class NegotiationState(_IdentityEnum):
    """Negotiation and freshness state of one peer context (docs/semantics.md#negotiation)."""

    DISABLED = "disabled"
    NEGOTIATING = "negotiating"
    LEGACY = "legacy"
    FAILED = "failed"
    ACTIVE = "active"
    STALE = "stale"
    FENCING = "fencing"


class NegotiationEvent(enum.Enum):
    """What happened to a peer context (past tense); the inputs of :data:`TRANSITIONS`."""

    CREDIT_DISABLED_STARTED = "credit_disabled_started"
    NEGOTIATION_STARTED = "negotiation_started"
    COMMON_VERSION_FOUND = "common_version_found"
    NO_COMMON_VERSION_LEGACY_ALLOWED = "no_common_version_legacy_allowed"
    NO_COMMON_VERSION_REQUIRED = "no_common_version_required"
    FRESH_UPDATE_ACCEPTED = "fresh_update_accepted"
    TTL_EXPIRED = "ttl_expired"
    DISCONNECTED = "disconnected"
    NEW_SESSION_OR_EPOCH = "new_session_or_epoch"
    FENCE_DRAINED = "fence_drained"


_S = NegotiationState
_E = NegotiationEvent

TRANSITIONS: Mapping[tuple[NegotiationState, NegotiationEvent], NegotiationState] = (
    types.MappingProxyType(
        {
            (_S.DISABLED, _E.CREDIT_DISABLED_STARTED): _S.LEGACY,
            (_S.DISABLED, _E.NEGOTIATION_STARTED): _S.NEGOTIATING,
            (_S.NEGOTIATING, _E.COMMON_VERSION_FOUND): _S.ACTIVE,
            (_S.NEGOTIATING, _E.NO_COMMON_VERSION_LEGACY_ALLOWED): _S.LEGACY,
            (_S.NEGOTIATING, _E.NO_COMMON_VERSION_REQUIRED): _S.FAILED,
            (_S.NEGOTIATING, _E.DISCONNECTED): _S.NEGOTIATING,
            (_S.LEGACY, _E.DISCONNECTED): _S.LEGACY,
            (_S.FAILED, _E.DISCONNECTED): _S.FAILED,
            (_S.ACTIVE, _E.FRESH_UPDATE_ACCEPTED): _S.ACTIVE,
            (_S.ACTIVE, _E.TTL_EXPIRED): _S.STALE,
            (_S.ACTIVE, _E.DISCONNECTED): _S.STALE,
            (_S.ACTIVE, _E.NEW_SESSION_OR_EPOCH): _S.FENCING,
            (_S.STALE, _E.FRESH_UPDATE_ACCEPTED): _S.ACTIVE,
            (_S.STALE, _E.DISCONNECTED): _S.STALE,
            (_S.STALE, _E.NEW_SESSION_OR_EPOCH): _S.FENCING,
            (_S.FENCING, _E.FRESH_UPDATE_ACCEPTED): _S.FENCING,
            (_S.FENCING, _E.DISCONNECTED): _S.FENCING,
            (_S.FENCING, _E.NEW_SESSION_OR_EPOCH): _S.FENCING,
            (_S.FENCING, _E.FENCE_DRAINED): _S.ACTIVE,
        }
    )
)
"""Every negotiation transition; a missing ``(state, event)`` pair is a protocol error."""

REMOTE_EVENTS: frozenset[NegotiationEvent] = frozenset(
    {
        _E.COMMON_VERSION_FOUND,
        _E.NO_COMMON_VERSION_LEGACY_ALLOWED,
        _E.NO_COMMON_VERSION_REQUIRED,
        _E.NEW_SESSION_OR_EPOCH,
    }
)
"""Events the peer drives (its activation); a misplaced one is a RemoteProtocolError."""


def transition(state: NegotiationState, event: NegotiationEvent) -> NegotiationState:
    """The state after ``event`` in ``state``, from :data:`TRANSITIONS`.

    Raises :class:`InvalidArgument` for a non-state or non-event, and for a pair missing from
    the table :class:`RemoteProtocolError` (``event`` in :data:`REMOTE_EVENTS`) or
    :class:`LocalProtocolError` (any other event).
    """
    if not isinstance(state, NegotiationState):
        raise InvalidArgument(f"expected a NegotiationState, got {describe(state)}")
    if not isinstance(event, NegotiationEvent):
        raise InvalidArgument(f"expected a NegotiationEvent, got {describe(event)}")
    nxt = TRANSITIONS.get((state, event))
    if nxt is None:
        error = RemoteProtocolError if event in REMOTE_EVENTS else LocalProtocolError
        raise error(f"{event.name} is not allowed in state {state.name}")
    return nxt


# FRESH_UPDATE_ACCEPTED's row of the table, by state (which hashes by identity, in C): the
# event's own hash is a Python call
_FRESH_UPDATE_TO = {
    state: nxt for (state, event), nxt in TRANSITIONS.items() if event is _E.FRESH_UPDATE_ACCEPTED
}


@attrs.frozen(kw_only=True)
class NegotiationSnapshot:
    """A copy of a :class:`PeerNegotiation`'s whole state (for statistics and tests)."""

    mode: CreditMode
    sender_peer: int
    state: NegotiationState
    version: int | None
    session: SessionId | None
    epoch: int | None
    freshness_ttl_ms: int
    last_refresh_ns: int | None
    last_now_ns: int | None


def _check_versions(versions: object) -> tuple[int, ...]:
    if not isinstance(versions, tuple) or not 0 < len(versions) <= MAX_VERSIONS:
        raise InvalidArgument(f"local_versions must be a non-empty tuple of at most {MAX_VERSIONS}")
    for v in versions:
        if type(v) is not int or not 0 < v <= 0xFFFF:
            raise InvalidArgument(f"protocol version must be a non-zero u16, got {describe(v)}")
    if len(set(versions)) != len(versions):
        raise InvalidArgument("local_versions must be unique")
    return versions


def _check_ttl(ttl_ms: int | None) -> None:
    if ttl_ms is not None and (type(ttl_ms) is not int or not 0 <= ttl_ms <= U32_MAX):
        raise InvalidArgument(f"freshness_ttl_ms must be a u32 int, got {describe(ttl_ms)}")


def _check_session_epoch(session: SessionId, epoch: int) -> None:
    if not isinstance(session, SessionId):
        raise InvalidArgument(f"expected a SessionId, got {type(session).__name__}")
    check_u64(epoch, "epoch")
    if epoch == 0:
        raise InvalidArgument("epoch 0 is reserved (no epoch)")


class PeerNegotiation:
    """The negotiation and freshness state of one peer context (docs/semantics.md#negotiation).

    ``sender_peer`` (u64) is bound at construction and can never change (a read-only property;
    a peer context never changes its sender identity). Time enters as ``now_ns``, which must not
    go backwards across calls of one object (a smaller value → :class:`InvalidArgument`).
    Every call validates before it mutates: a raised exception leaves the object unchanged,
    with one documented exception, the REQUIRED-mode failure of :meth:`on_activation`.
    """

    __slots__ = (
        "_epoch",
        "_last_now_ns",
        "_last_refresh_ns",
        "_local_versions",
        "_mode",
        "_sender_peer",
        "_session",
        "_state",
        "_ttl_ms",
        "_version",
    )

    def __init__(
        self,
        *,
        mode: CreditMode,
        sender_peer: int,
        local_versions: tuple[int, ...] = SUPPORTED_VERSIONS,
    ) -> None:
        """Raises :class:`InvalidArgument` for an unknown mode, a non-u64 ``sender_peer``, or a
        version list that is empty, longer than ``MAX_VERSIONS``, not unique, or holds a value
        outside 1..65535."""
        if not isinstance(mode, CreditMode):
            raise InvalidArgument(f"unknown credit mode {describe(mode)}")
        check_u64(sender_peer, "sender_peer")
        self._mode = mode
        self._sender_peer = sender_peer
        self._local_versions = _check_versions(local_versions)
        self._state = NegotiationState.DISABLED
        self._version: int | None = None
        self._session: SessionId | None = None
        self._epoch: int | None = None
        self._ttl_ms = 0
        self._last_refresh_ns: int | None = None
        self._last_now_ns: int | None = None

    # -- read-only view -------------------------------------------------------------------------

    @property
    def mode(self) -> CreditMode:
        return self._mode

    @property
    def sender_peer(self) -> int:
        return self._sender_peer

    @property
    def local_versions(self) -> tuple[int, ...]:
        return self._local_versions

    @property
    def state(self) -> NegotiationState:
        return self._state

    @property
    def version(self) -> int | None:
        """The negotiated protocol version, or ``None`` before one was agreed."""
        return self._version

    @property
    def session(self) -> SessionId | None:
        """The receiver session of the current epoch, or ``None`` before activation."""
        return self._session

    @property
    def epoch(self) -> int | None:
        """The receiver-chosen epoch of this sender's key, or ``None`` before activation."""
        return self._epoch

    @property
    def freshness_ttl_ms(self) -> int:
        """The freshness TTL from the last activation/update that carried one (0 = no limit)."""
        return self._ttl_ms

    def stale_at_ns(self) -> int | None:
        """The first instant at which :meth:`check_freshness` turns ACTIVE into STALE (the
        last refresh plus the TTL); ``None`` when the clock alone cannot change the state (not
        ACTIVE, TTL 0, or no refresh yet). A query."""
        if self._state is not NegotiationState.ACTIVE or self._ttl_ms == 0:
            return None
        if self._last_refresh_ns is None:
            return None
        return self._last_refresh_ns + self._ttl_ms * 1_000_000

    def may_reserve(self) -> bool:
        """True only in ACTIVE: new credit-gated dispatch may reserve (RFC rule 1)."""
        return self._state is NegotiationState.ACTIVE

    def legacy(self) -> bool:
        """True in LEGACY: bounded local dispatch without receiver credit."""
        return self._state is NegotiationState.LEGACY

    def update_age_ns(self, now_ns: int) -> int | None:
        """Nanoseconds since the last activation or accepted update (``None`` if none yet).

        Raises :class:`InvalidArgument` if ``now_ns`` is not a u64 or is before the last
        ``now_ns`` this object saw. A query: it records nothing.
        """
        self._check_now(now_ns)
        if self._last_refresh_ns is None:
            return None
        return now_ns - self._last_refresh_ns

    def snapshot(self) -> NegotiationSnapshot:
        """A frozen copy of the whole state."""
        return NegotiationSnapshot(
            mode=self._mode,
            sender_peer=self._sender_peer,
            state=self._state,
            version=self._version,
            session=self._session,
            epoch=self._epoch,
            freshness_ttl_ms=self._ttl_ms,
            last_refresh_ns=self._last_refresh_ns,
            last_now_ns=self._last_now_ns,
        )

    # -- events ---------------------------------------------------------------------------------

    def start(self, now_ns: int) -> NegotiationState:
        """Begin: mode DISABLED → LEGACY (never credit-gated); otherwise → NEGOTIATING.

        Raises :class:`InvalidArgument` for a bad ``now_ns`` and :class:`LocalProtocolError`
        if already started. A failure changes nothing.
        """
        self._check_now(now_ns)
        event = (
            _E.CREDIT_DISABLED_STARTED
            if self._mode is CreditMode.DISABLED
            else _E.NEGOTIATION_STARTED
        )
        self._state = transition(self._state, event)
        self._last_now_ns = now_ns
        return self._state

    def on_activation(self, activation: CapabilityActivation, now_ns: int) -> NegotiationState:
        """Apply the receiver's capability activation.

        1. The common version is the highest version in both ``local_versions`` and
           ``activation.versions`` (0 = none). ``activation.selected_version`` must equal it,
           else :class:`RemoteProtocolError`.
        2. A common version: ``activation.epoch`` must be non-zero (else
           :class:`RemoteProtocolError`); → ACTIVE with that version, session, epoch and TTL;
           the activation counts as the first refresh.
        3. No common version in OPTIONAL mode → LEGACY.
        4. No common version in REQUIRED mode → the state *moves to FAILED* and then
           :class:`NegotiationFailed` is raised (the explicit error of
           docs/semantics.md#negotiation; like h11's ERROR state, the failure is itself the
           outcome).
        5. Not NEGOTIATING → :class:`RemoteProtocolError` (an unexpected activation).

        Raises :class:`InvalidArgument` for a bad ``now_ns`` or a non-activation. Every failure
        but rule 4 changes nothing.
        """
        self._check_now(now_ns)
        if not isinstance(activation, CapabilityActivation):
            raise InvalidArgument(
                f"expected a CapabilityActivation, got {type(activation).__name__}"
            )
        common = max(set(self._local_versions) & set(activation.versions), default=0)
        if activation.selected_version != common:
            raise RemoteProtocolError(
                f"peer selected version {activation.selected_version}, "
                f"but the highest common version is {common}"
            )
        if common == 0:
            event = (
                _E.NO_COMMON_VERSION_REQUIRED
                if self._mode is CreditMode.REQUIRED
                else _E.NO_COMMON_VERSION_LEGACY_ALLOWED
            )
            self._state = transition(self._state, event)
            self._last_now_ns = now_ns
            if self._state is NegotiationState.FAILED:
                raise NegotiationFailed(
                    f"no common credit protocol version: local {self._local_versions}, "
                    f"peer {activation.versions}"
                )
            return self._state
        if activation.epoch == 0:
            raise RemoteProtocolError("an activation that selects a version must carry an epoch")
        self._state = transition(self._state, _E.COMMON_VERSION_FOUND)
        self._version = common
        self._session = activation.receiver_session_id
        self._epoch = activation.epoch
        self._ttl_ms = activation.freshness_ttl_ms
        self._last_refresh_ns = now_ns
        self._last_now_ns = now_ns
        return self._state

    def on_update_accepted(
        self,
        session: SessionId,
        epoch: int,
        now_ns: int,
        *,
        freshness_ttl_ms: int | None = None,
    ) -> NegotiationState:
        """The ledger accepted a newer update of ``(session, epoch)``: refresh freshness.

        ACTIVE stays ACTIVE, STALE → ACTIVE, FENCING stays FENCING (the drain is still owed).
        ``freshness_ttl_ms`` (the update's TTL) replaces the current TTL; ``None`` keeps it.
        Raises :class:`InvalidArgument` for bad arguments, :class:`LocalProtocolError` in any
        other state or when ``(session, epoch)`` is not the current one (report a new session
        or epoch with :meth:`on_new_session_or_epoch` first). A failure changes nothing.
        """
        # The checks inline, their helpers only to raise: a sender accepts an update per
        # transfer (and the table's key holds an event, which hashes in Python).
        self._check_now(now_ns)
        if type(session) is not SessionId or type(epoch) is not int or not 0 < epoch <= U64_MAX:
            _check_session_epoch(session, epoch)
        if freshness_ttl_ms is not None and (
            type(freshness_ttl_ms) is not int or not 0 <= freshness_ttl_ms <= U32_MAX
        ):
            _check_ttl(freshness_ttl_ms)
        state = self._state
        nxt = _FRESH_UPDATE_TO.get(state)
        if nxt is None:
            nxt = transition(state, _E.FRESH_UPDATE_ACCEPTED)  # raises: not allowed in state
        current = self._session  # compared by value: attrs' __eq__ is two Python calls
        if current is None or session.value != current.value or epoch != self._epoch:
            raise LocalProtocolError(
                f"update of session {session.value:#x} epoch {epoch} does not match the "
                f"current session/epoch; report the new one first"
            )
        self._state = nxt
        if freshness_ttl_ms is not None:
            self._ttl_ms = freshness_ttl_ms
        self._last_refresh_ns = now_ns
        self._last_now_ns = now_ns
        return nxt

    def on_new_session_or_epoch(
        self,
        session: SessionId,
        epoch: int,
        now_ns: int,
        *,
        freshness_ttl_ms: int | None = None,
    ) -> NegotiationState:
        """The receiver activated a new session or a new epoch of this sender's key → FENCING.

        From ACTIVE, STALE or FENCING. Within the same session the epoch must grow (epochs are
        the receiver's and only move up); a new session may carry any epoch ≥ 1. The new
        session/epoch becomes current at once and counts as a refresh; ``freshness_ttl_ms``
        (``None`` keeps the TTL) replaces the TTL. Raises :class:`InvalidArgument` for bad
        arguments and :class:`RemoteProtocolError` in another state or for an epoch that did not
        grow. A failure changes nothing.
        """
        self._check_now(now_ns)
        _check_session_epoch(session, epoch)
        _check_ttl(freshness_ttl_ms)
        nxt = transition(self._state, _E.NEW_SESSION_OR_EPOCH)
        if session == self._session and self._epoch is not None and epoch <= self._epoch:
            raise RemoteProtocolError(
                f"epoch {epoch} of the current session is not newer than {self._epoch}"
            )
        self._state = nxt
        self._session = session
        self._epoch = epoch
        if freshness_ttl_ms is not None:
            self._ttl_ms = freshness_ttl_ms
        self._last_refresh_ns = now_ns
        self._last_now_ns = now_ns
        return nxt

    def on_fence_drained(self, now_ns: int) -> NegotiationState:
        """All work of older sessions/epochs is drained or failed: FENCING → ACTIVE.

        Raises :class:`InvalidArgument` for a bad ``now_ns`` and :class:`LocalProtocolError`
        when not FENCING. A failure changes nothing.
        """
        self._check_now(now_ns)
        self._state = transition(self._state, _E.FENCE_DRAINED)
        self._last_now_ns = now_ns
        return self._state

    def on_disconnect(self) -> NegotiationState:
        """The control connection was lost: ACTIVE → STALE (other states: see the table).

        Raises :class:`LocalProtocolError` before :meth:`start`. A failure changes nothing.
        """
        self._state = transition(self._state, _E.DISCONNECTED)
        return self._state

    def check_freshness(self, now_ns: int) -> NegotiationState:
        """ACTIVE → STALE when ``now_ns − last refresh > freshness_ttl_ms`` (TTL 0: never).

        Other states are returned unchanged. Raises :class:`InvalidArgument` for a bad
        ``now_ns``; a failure changes nothing.
        """
        self._check_now(now_ns)
        self._last_now_ns = now_ns
        if (
            self._state is NegotiationState.ACTIVE
            and self._ttl_ms != 0
            and self._last_refresh_ns is not None
            and now_ns - self._last_refresh_ns >= self._ttl_ms * 1_000_000
        ):
            self._state = transition(self._state, _E.TTL_EXPIRED)
        return self._state

    def _check_now(self, now_ns: int) -> None:
        if type(now_ns) is not int or not 0 <= now_ns <= U64_MAX:  # inline: every reservation
            check_u64(now_ns, "now_ns")
        if self._last_now_ns is not None and now_ns < self._last_now_ns:
            raise InvalidArgument(
                f"now_ns {now_ns} is before the last time seen ({self._last_now_ns})"
            )
