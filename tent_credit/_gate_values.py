"""The dispatch gate's values: what it reads (:class:`GatedOwner`, :class:`DispatchContext`), why
it rejects (:class:`RejectReason`), its tickets' lifecycle (:class:`TicketState`), its policy
table, configuration and statistics. The gate and the decisions that carry a :class:`GateToken`
(:class:`GateEligible`, :class:`GateBlocked`, :class:`GateRejected`) are :mod:`._gate`, the token
and the gate's other records :mod:`._gate_state`; every public name here is re-exported from
:mod:`._gate` and from ``tent_credit``.
"""

from __future__ import annotations

import enum
import functools
import itertools
import types
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Protocol

import attrs

from ._arith import U32_MAX, U64_MAX
from ._backpressure import BackpressureInfo
from ._describe import describe
from ._negotiation import CreditMode, NegotiationState
from ._types import CreditCharge, CreditResource, Plan, SessionId, _IdentityEnum, charge_for_plan
from .errors import InvalidArgument

if TYPE_CHECKING:  # annotations only: the gate module imports this one
    from ._endpoints import SenderEndpoint

_REMOTE_PLANS = frozenset({Plan.REMOTE_DIRECT_WRITE, Plan.REMOTE_STAGED_WRITE})

# The gate asks for an owner's charge at every pick, blocked ones included, and a workload has
# few distinct (plan, length, requests): the charge is frozen, so one object serves them all.
# ``typed``: ``True`` must not hit the entry of ``1`` (a bool length is refused, not charged).
_charge = functools.lru_cache(maxsize=512, typed=True)(charge_for_plan)

DEFAULT_STALL_BUCKETS_NS: tuple[int, ...] = (
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    10_000_000_000,
)
"""Upper bounds (inclusive, ns) of the stall-duration histogram; +Inf is implicit."""


# --------------------------------------------------------------------------- what the gate reads


class GatedOwner(Protocol):
    """What the gate reads of a queued owner (``tent_sched.OwnerView`` satisfies it)."""

    @property
    def owner_id(self) -> int: ...

    @property
    def length(self) -> int: ...

    @property
    def gate_key(self) -> Hashable | None: ...

    @property
    def context(self) -> object: ...


class PickOutcome(Protocol):
    """What :meth:`DispatchGate.observe_pick` reads of a pick (``tent_sched.PickResult``)."""

    @property
    def dropped(self) -> tuple[int, ...]: ...

    @property
    def blocked(self) -> tuple[int, ...]: ...

    @property
    def rejected(self) -> tuple[int, ...]: ...


def _check_owner(owner: object) -> None:
    # The gate reads these of every owner: a value without them is the caller's error (IA),
    # never an AttributeError out of a pick.
    for name in ("owner_id", "length"):
        value = getattr(owner, name, None)
        if type(value) is not int or not 0 <= value <= U64_MAX:
            raise InvalidArgument(f"owner.{name} must be a u64 int, got {describe(value)}")
    if not hasattr(owner, "gate_key") or not hasattr(owner, "context"):
        raise InvalidArgument(f"expected a GatedOwner, got {describe(owner)}")


def _owner_ids(result: object, name: str) -> tuple[int, ...]:
    ids = getattr(result, name, None)
    # set(map(type, ...)) runs in C: a blocked pick hands over every owner it visited
    if type(ids) is not tuple or (ids and set(map(type, ids)) != {int}):
        raise InvalidArgument(f"pick result .{name} must be a tuple of owner ids")
    return ids


def _u64(_inst: object, attr: attrs.Attribute[int], value: object) -> None:
    if type(value) is not int or not 0 <= value <= U64_MAX:
        raise InvalidArgument(f"{attr.name} must be a u64 int, got {describe(value)}")


def _u32(_inst: object, attr: attrs.Attribute[int], value: object) -> None:
    if type(value) is not int or not 0 <= value <= U32_MAX:
        raise InvalidArgument(f"{attr.name} must be a u32 int, got {describe(value)}")


def _requests(_inst: object, _attr: attrs.Attribute[int], value: object) -> None:
    if type(value) is not int or not 1 <= value <= U32_MAX:
        raise InvalidArgument(f"requests must be an int in [1, 2**32 - 1], got {describe(value)}")


def _plan(_inst: object, _attr: attrs.Attribute[Plan], value: object) -> None:
    if not isinstance(value, Plan):
        raise InvalidArgument(f"unknown plan {describe(value)}")


def _snapshot(
    _inst: object, _attr: attrs.Attribute[tuple[SessionId, int] | None], value: object
) -> None:
    if value is None:
        return
    if (
        type(value) is not tuple
        or len(value) != 2
        or not isinstance(value[0], SessionId)
        or type(value[1]) is not int
        or not 0 < value[1] <= U64_MAX
    ):
        raise InvalidArgument(
            f"snapshot must be (SessionId, epoch >= 1) or None, got {describe(value)}"
        )


@attrs.frozen(kw_only=True)
class DispatchContext:
    """How an owner moves its bytes and to whom: the ``context`` of its ``OwnerRequest``.

    ``receiver`` names the receiver (peer endpoint) as registered with
    :meth:`DispatchGate.add_endpoint`; ``qos_class`` picks that receiver's credit class;
    ``snapshot`` pins the ``(session, epoch)`` the owner was admitted under (``None``: unpinned).
    A queued owner whose snapshot was fenced meanwhile (receiver restart, sender reconnect) is
    rejected at pick, never dispatched on the new epoch's credit. ``requests`` is how many
    requests the owner carries (merged requests: :func:`charge_for_plan` charges the slots per
    request). Raises :class:`InvalidArgument` for an unknown plan, a non-u64 receiver, a
    non-u32 class, a malformed snapshot or ``requests`` outside ``[1, 2**32 - 1]``.
    """

    plan: Plan = attrs.field(validator=_plan)
    receiver: int = attrs.field(validator=_u64)
    qos_class: int = attrs.field(default=0, validator=_u32)
    snapshot: tuple[SessionId, int] | None = attrs.field(default=None, validator=_snapshot)
    requests: int = attrs.field(default=1, validator=_requests)

    def charge(self, length: int) -> CreditCharge | None:
        """The owner's remote charge (:func:`charge_for_plan` of its plan and requests)."""
        return _charge(self.plan, length, self.requests)

    @property
    def remote(self) -> bool:
        """Whether the plan charges a remote receiver (direct or staged WRITE)."""
        return self.plan in _REMOTE_PLANS

    @property
    def gate_key(self) -> tuple[int, int] | None:
        """The ``OwnerRequest.gate_key`` callers must set: ``(receiver, qos_class)``.

        ``None`` for READ and local plans: they are never stalled by a remote ledger, so the
        queue must not skip them behind a blocked remote owner (RFC "Terminology and Direction").
        """
        # the plan test inline (not .remote): asked several times per pick
        return (self.receiver, self.qos_class) if self.plan in _REMOTE_PLANS else None


# --------------------------------------------------------------------------- decisions


class RejectReason(enum.Enum):
    """Why the gate refused an owner for good (it ends FAILED in the queue)."""

    SNAPSHOT_FENCED = "snapshot_fenced"
    """The owner's (session, epoch) is no longer the receiver's: restart or reconnect."""
    NEGOTIATION_FAILED = "negotiation_failed"
    """REQUIRED mode, the peer has no usable credit protocol and no fallback is configured."""
    ROUTE_REMOVED = "route_removed"
    """The owner's route was removed (:meth:`DispatchGate.remove_endpoint`) since it queued."""


class TicketState(_IdentityEnum):
    """Lifecycle of a :class:`GateToken`."""

    RESERVED = "reserved"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"
    COMPLETED = "completed"


TICKET_TRANSITIONS: Mapping[tuple[TicketState, str], TicketState] = types.MappingProxyType(
    {
        (TicketState.RESERVED, "commit"): TicketState.COMMITTED,
        (TicketState.RESERVED, "rollback"): TicketState.ROLLED_BACK,
        (TicketState.COMMITTED, "complete"): TicketState.COMPLETED,
    }
)
"""The gate token lifecycle, the only place it is written. A missing key is misuse (IE)."""


# --------------------------------------------------------------------------- policy table


class GateAction(enum.Enum):
    """What the gate does for a remote owner, by mode and the peer's negotiation state."""

    RESERVE = "reserve"
    """Reserve the charge on the endpoint (blocks unless the peer is ACTIVE with credit)."""
    LEGACY = "legacy"
    """Bounded local dispatch without receiver credit (at most ``legacy_window`` in flight)."""
    REJECT = "reject"
    """No credit, no dispatch, for good: the owner fails."""


def _policy() -> Mapping[tuple[CreditMode, NegotiationState, bool], GateAction]:
    S = NegotiationState  # noqa: N806 - a table reads better with a short alias
    table: dict[tuple[CreditMode, NegotiationState, bool], GateAction] = {}
    for mode, fallbacks in ((CreditMode.OPTIONAL, (False,)), (CreditMode.REQUIRED, (False, True))):
        for fallback in fallbacks:
            # Not yet or not currently ACTIVE: reserve anyway; the endpoint answers with a
            # RECEIVER_CREDIT stall (fallback_allowed False) until credit is usable.
            for state in (S.DISABLED, S.NEGOTIATING, S.ACTIVE, S.STALE, S.FENCING):
                table[(mode, state, fallback)] = GateAction.RESERVE
            # RFC "Compatibility and Rollout": OPTIONAL keeps legacy peers on bounded local
            # dispatch; REQUIRED fails them explicitly unless a fallback is configured.
            legacy_ok = mode is CreditMode.OPTIONAL or fallback
            table[(mode, S.LEGACY, fallback)] = (
                GateAction.LEGACY if legacy_ok else GateAction.REJECT
            )
            table[(mode, S.FAILED, fallback)] = GateAction.LEGACY if fallback else GateAction.REJECT
    return types.MappingProxyType(table)


GATE_POLICY: Mapping[tuple[CreditMode, NegotiationState, bool], GateAction] = _policy()
"""``(gate mode, peer state, required_fallback) → action`` for a remote owner; the only place
the policy is written. A DISABLED gate never consults it (every owner is eligible)."""


# --------------------------------------------------------------------------- values


def _window(_inst: object, attr: attrs.Attribute[int], value: object) -> None:
    if type(value) is not int or not 1 <= value <= U64_MAX:
        raise InvalidArgument(f"{attr.name} must be an int >= 1, got {describe(value)}")


def _mode(_inst: object, _attr: attrs.Attribute[CreditMode], value: object) -> None:
    if not isinstance(value, CreditMode):
        raise InvalidArgument(f"unknown credit mode {describe(value)}")


def _flag(_inst: object, attr: attrs.Attribute[bool], value: object) -> None:
    if type(value) is not bool:
        raise InvalidArgument(f"{attr.name} must be a bool, got {describe(value)}")


def _buckets(_inst: object, attr: attrs.Attribute[tuple[int, ...]], value: object) -> None:
    if (
        type(value) is not tuple
        or not value
        or any(type(b) is not int or not 0 < b <= U64_MAX for b in value)
        or any(a >= b for a, b in itertools.pairwise(value))
    ):
        raise InvalidArgument(
            f"{attr.name} must be strictly increasing positive ints: {describe(value)}"
        )


@attrs.frozen(kw_only=True)
class GateConfig:
    """Configuration of a :class:`DispatchGate`.

    1. ``mode``: DISABLED (the default: every owner is eligible without a token, exactly as
       without a gate), OPTIONAL (credit where the peer supports it, bounded legacy dispatch
       where it does not) or REQUIRED (no credit, no dispatch).
    2. ``legacy_window``: owners at most in flight (reserved or committed, not completed) per
       legacy peer route.
    3. ``required_fallback``: REQUIRED only; a peer whose negotiation FAILED falls back to the
       bounded legacy window instead of failing its owners.
    4. ``max_routes``: bound on registered (receiver, class) routes, so metric labels are
       bounded by configuration.
    5. ``stall_buckets_ns``: the stall-duration histogram's bucket bounds.

    Raises :class:`InvalidArgument` on any invalid value, or ``required_fallback`` outside
    REQUIRED mode.
    """

    mode: CreditMode = attrs.field(default=CreditMode.DISABLED, validator=_mode)
    legacy_window: int = attrs.field(default=8, validator=_window)
    required_fallback: bool = attrs.field(default=False, validator=_flag)
    max_routes: int = attrs.field(default=64, validator=_window)
    stall_buckets_ns: tuple[int, ...] = attrs.field(
        default=DEFAULT_STALL_BUCKETS_NS, validator=_buckets
    )

    def __attrs_post_init__(self) -> None:
        if self.required_fallback and self.mode is not CreditMode.REQUIRED:
            raise InvalidArgument("required_fallback applies to REQUIRED mode only")


@attrs.frozen(kw_only=True)
class CreditStall:
    """One owner held back by the gate: where, how much, since when, and why."""

    owner_id: int
    receiver: int
    qos_class: int
    length: int
    charge: CreditCharge
    since_ns: int
    info: BackpressureInfo


@attrs.frozen(kw_only=True)
class RouteStatistics:
    """A snapshot of one (receiver, class) route of a gate; counters are cumulative.

    ``stall_buckets`` pairs each histogram bound (ns) with the cumulative count of ended stalls
    no longer than it; ``stalls_ended`` and ``stall_ns_total`` are the histogram's count and sum.
    """

    receiver: int
    qos_class: int
    state: NegotiationState
    stalled_owners: int
    stalled_bytes: int
    waiting: Mapping[CreditResource, int]
    stalls_ended: int
    stall_ns_total: int
    stall_buckets: tuple[tuple[int, int], ...]
    reserved: int
    committed: int
    rolled_back: int
    completed: int
    blocked: int
    legacy_in_flight: int
    legacy_fallbacks: int
    rejected_snapshots: int
    rejected_failed: int
    idle_returns: int
    """How often the gate returned the route's idle credit (see :class:`DispatchGate` step 6)."""


@attrs.frozen(kw_only=True)
class RouteRemoval:
    """What :meth:`DispatchGate.remove_endpoint` / :meth:`~DispatchGate.replace_endpoint`
    did to the old route.

    ``endpoint`` is the old sender endpoint, now the caller's to disconnect (its ledger holds
    the rolled-back credit again). ``rolled_back`` tokens were RESERVED and never submitted;
    ``stalls_dropped`` credit-stalled owners lost their stall record (they are rejected or
    re-pointed at their next pick); ``in_flight`` tokens were COMMITTED and still complete
    normally on the old endpoint.
    """

    receiver: int
    qos_class: int
    endpoint: SenderEndpoint
    rolled_back: int
    stalls_dropped: int
    in_flight: int


@attrs.frozen(kw_only=True)
class GateStatistics:
    """A snapshot of a :class:`DispatchGate`: its mode, routes, and gate-wide counters."""

    mode: CreditMode
    routes: tuple[RouteStatistics, ...]
    no_credit_dispatches: int
    unsettled_tokens: int

