"""Executable specification of the gated queue: admission dispatch decided by receiver credit.

Issue 6 "Check": the admission spec (:mod:`tent_spec.admission`) leaves the credit gate abstract
(``pick`` takes an eligible / blocked / rejected answer per owner as an argument). Here the
answer comes *from the credit state*: one sender process (its admission queue, its dispatch
gate and one sender endpoint per credit key) talks to one receiver (its allocator and one
receiver endpoint per key) over a lossy, duplicating, reordering network, and the receiver can
restart. The model checker then covers the combined system.

What is modelled (DESIGN "Gate at dispatch eligibility", SEMANTICS §2 and §6–8):

* **Queue.** Owners are admitted one at a time from a bounded workload, FIFO, under the
  outstanding-owner/byte limits. Each names a credit key (``1..keys``: a remote direct WRITE
  to the receiver's QoS class ``key - 1``) or ``0`` (an RDMA READ / local plan: never gated).
  A remote owner is pinned at admission to the sender's current receiver session (its
  snapshot). Lifecycle ``QUEUED → DISPATCHING → TERMINAL`` is the admission spec's own table
  (:data:`tent_spec.admission.OWNER_TRANSITIONS`).
* **Pick** (:meth:`GatedSpec.scan`): per owner in queue order, byte window (head of line stops
  the pick) → a key blocked earlier in this pick skips it → the gate: a snapshot that is not
  the key's current session → REJECTED (FAILED, nothing reserved); the key not ACTIVE, no
  update yet, or some resource short → BLOCKED (stays QUEUED in place, a credit stall, the
  key's demand target becomes ``consumed + returned + Σ stalled charges``); else the whole
  charge ``(length, 1, 1)`` is reserved at once (a RESERVED token) and the owner dispatches.
* **Idle credit** (issue 10 item 8, :meth:`GatedSpec.return_idle`): when an owner leaves a key
  without using credit (a refused submit, a rejected or canceled stalled owner), the gate
  returns the key's available credit beyond what its stalled owners wait for and lowers the
  demand to what they wait for; the key is then settled again at every pick until its entry
  changes (a grant for the old demand may still arrive). The receiver reclaims returns from
  the next report and pushes the freed capacity to keys short of it.
* **Settlement.** ``submit(owner, ok)``: accepted → the token commits (only while its entry
  lives: a fenced token's commit is InvalidEntry); refused → exact rollback, owner FAILED.
  Committed data ``land``\\ s at the receiver (live session only); ``complete`` ends the owner
  COMPLETED (landed) or FAILED (it can no longer land: its session died); completion never
  mints sender credit; the receiver's consumer ``release``\\ s landed data and pushes grants to
  stalled keys.
* **Control.** The sender endpoint reports usage (consumed and returned totals and the absolute
  demand target) when something changed or demand is unmet, and retransmits its capability offer while
  it awaits an activation. The receiver endpoint answers an offer with an activation and the
  initial grant, grants outstanding demand from free capacity (all or nothing at a minimum of 1
  per resource, at most ``max_grant``), and pushes the key's *full* cumulative vector when it
  granted or is short, and on the refresh timer (``refresh_tick``). Identity is per
  connection: every key has its own two bags.
* **Environment.** ``cancel`` (when configured) cancels a QUEUED owner (``queue.cancel`` and
  ``gate.forget``); like the faults it is off while recoverability is asked.
* **Faults.** ``duplicate`` / ``lose`` a message; ``receiver_restart``: a new session, fresh
  books, both connections' bags gone, every sender endpoint disconnects (ACTIVE → STALE) and
  reconnects (offers again); the activation of the new session fences the old entry (FENCING
  until the old session's committed work completed, then ACTIVE).

Deliberately *not* modelled (covered elsewhere or orthogonal): deadlines, promotion and the MLU
drop (the admission spec), returns other than the gate's idle return and sender restarts (the
credit spec), the freshness TTL, retire, staging-internal owners, legacy and disabled modes
(tested in ``tests/gate``). Epochs are always 1: without sender restarts a receiver only opens one epoch
per key and session, so the session alone is the generation.

Sequence numbers are unbounded in the protocol; they are only compared, so
:meth:`GatedSpec.canonicalize` renumbers each (key, session) family by rank and ``max_seq`` is
only a state constraint.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import attrs

from tent_spec.admission import (
    CANCELED,
    COMPLETED,
    DISPATCHING,
    FAILED,
    OWNER_TRANSITIONS,
    QUEUED,
    TERMINAL,
)
from tent_spec.credit import (
    ACTIVATION,
    UPDATE,
    Activation,
    InvalidBounds,
    SpecInvariant,
    SpecStep,
    SpecWitness,
    Update,
)

__all__ = [
    "ACTIVE",
    "FENCING",
    "OFFER",
    "REPORT",
    "RESOURCES",
    "STALE",
    "TOKEN_STATES",
    "TOKEN_TRANSITIONS",
    "GatedConfig",
    "GatedSpec",
    "GatedState",
    "Offer",
    "Owner",
    "OwnerSpec",
    "ReceiverKey",
    "Report",
    "SenderKey",
    "charge_of",
]

Vec = tuple[int, ...]

#: Resource order of every vector: a remote direct WRITE charges all three (DESIGN "Charges by
#: plan": DATA_BYTES + REQUEST_SLOTS + CONSUMER_SLOTS).
RESOURCES = ("DATA_BYTES", "REQUEST_SLOTS", "CONSUMER_SLOTS")

# Sender endpoint phase (the negotiation states a post-handshake endpoint can be in).
ACTIVE = "ACTIVE"
STALE = "STALE"  # disconnected: no new credit-gated dispatch until the new activation
FENCING = "FENCING"  # a new session installed; the old session's committed work still drains
PHASES = (ACTIVE, STALE, FENCING)

# Gate token lifecycle, as data (STYLE: one table in one place). NONE = no token (a local owner,
# a rejected one, or one never picked).
NONE = "NONE"
RESERVED = "RESERVED"
COMMITTED = "COMMITTED"
ROLLED_BACK = "ROLLED_BACK"
SETTLED = "SETTLED"  # committed work completed (landed or failed)
TOKEN_STATES = (NONE, RESERVED, COMMITTED, ROLLED_BACK, SETTLED)
TOKEN_TRANSITIONS: Mapping[tuple[str, str], str] = {
    (NONE, "reserve"): RESERVED,  # the gate reserved the whole charge at pick
    (RESERVED, "commit"): COMMITTED,  # the transport accepted the submit
    (RESERVED, "rollback"): ROLLED_BACK,  # the transport refused it: exact rollback
    (COMMITTED, "complete"): SETTLED,  # the transport finished it (never mints credit)
}

# Owner stall marks (the gate's credit-stall record).
NEVER_STALLED = 0
STALLED = 1
WAS_STALLED = 2

# Message kinds beyond the credit spec's ACTIVATION (0) and UPDATE (1).
OFFER = 3
REPORT = 4

EPOCH = 1  # see the module docstring: without sender restarts every key stays at epoch 1


class Offer(NamedTuple):
    """Sender → receiver: the capability offer (``CapabilityOffer``) of a (re)connect."""

    kind: int


class Report(NamedTuple):
    """Sender → receiver: a usage report (``SenderCreditUsage``): cumulative consumed and
    returned totals and the absolute demand target (zeros = no demand)."""

    kind: int
    session: int
    seq: int
    consumed: Vec
    returned: Vec
    demand: Vec


Message = Offer | Report | Activation | Update
Bag = tuple[tuple[Any, int], ...]  # sorted (message, copies >= 1)


class OwnerSpec(NamedTuple):
    """One owner of the workload: its credit key (0 = READ/local, never gated) and length."""

    key: int
    length: int


class Owner(NamedTuple):
    """An admitted owner with its lifecycle, its gate token and its credit-stall mark."""

    owner_id: int
    key: int
    length: int
    snapshot: int  # receiver session pinned at admission (0 for a local owner)
    state: str  # QUEUED / DISPATCHING / TERMINAL
    status: str | None  # terminal status
    stall: int  # NEVER_STALLED / STALLED / WAS_STALLED
    token: str  # TOKEN_STATES
    token_session: int  # the session whose ledger entry the token consumed (0 = none)
    landed: bool  # committed data arrived at the receiver


class SenderKey(NamedTuple):
    """The sender endpoint of one key: negotiation phase, ledger entry, demand, reporting."""

    phase: str
    session: int  # the receiver session of the current ledger entry
    last_seq: int  # last accepted update sequence; 0 = no update yet (nothing reservable)
    grant_total: Vec
    consumed: Vec
    returned: Vec  # idle credit the gate gave back (cumulative, SEMANTICS §6 return)
    usage_seq: int  # last usage report sequence sent on this entry
    dirty: bool  # something changed since the last report
    demand: Vec  # absolute target grant totals: consumed + returned + waiting
    awaiting: bool  # awaiting an activation: the offer is (re)sent
    withdrawn: bool  # the gate's route flag: owners left this entry (see ``return_idle``)


class ReceiverKey(NamedTuple):
    """The receiver's books and endpoint state for one key of the current session."""

    version: bool  # an offer was received (a common version is selected)
    granted: Vec
    landed: Vec
    released: Vec
    reclaimed: Vec  # returned credit reclaimed from the sender's reports (SEMANTICS §8)
    pushed_seq: int  # last published update sequence (0 = never pushed)
    usage_seq: int  # last accepted usage sequence
    demand: Vec  # the sender's last reported demand target
    stalled: bool  # demand could not be met in full: push again when capacity frees
    push_due: bool
    activation_due: bool


class Faults(NamedTuple):
    duplications: int
    losses: int
    restarts: int


class GatedState(NamedTuple):
    """The whole combined system."""

    session: int  # the receiver's current session
    admitted: int  # workload owners admitted so far (owner ids 1..admitted)
    owners: tuple[Owner, ...]
    queue: tuple[int, ...]  # QUEUED owner ids in queue order
    outstanding_owners: int
    outstanding_bytes: int
    dispatching_bytes: int
    senders: tuple[SenderKey, ...]  # index key - 1
    receivers: tuple[ReceiverKey, ...]  # index key - 1
    to_sender: tuple[Bag, ...]
    to_receiver: tuple[Bag, ...]
    faults: Faults


def charge_of(length: int) -> Vec:
    """The charge of a remote direct WRITE of ``length`` bytes (``charge_for_plan``)."""
    return (length, 1, 1)


def _vadd(a: Vec, b: Vec) -> Vec:
    return tuple(x + y for x, y in zip(a, b, strict=True))


def _vsub(a: Vec, b: Vec) -> Vec:
    return tuple(x - y for x, y in zip(a, b, strict=True))


def _vle(a: Vec, b: Vec) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True))


def _vmax(a: Vec, b: Vec) -> Vec:
    return tuple(max(x, y) for x, y in zip(a, b, strict=True))


def _bag_add(bag: Bag, msg: Any) -> Bag:
    for i, (m, n) in enumerate(bag):
        if m == msg:
            return (*bag[:i], (m, n + 1), *bag[i + 1 :])
    return tuple(sorted((*bag, (msg, 1))))


def _bag_remove(bag: Bag, msg: Any) -> Bag:
    for i, (m, n) in enumerate(bag):
        if m == msg:
            return (*bag[:i], *bag[i + 1 :]) if n == 1 else (*bag[:i], (m, n - 1), *bag[i + 1 :])
    raise AssertionError("guarded: the message is in the bag")  # pragma: no cover


def _bag_has(bag: Bag, msg: object) -> bool:
    return any(m == msg for m, _ in bag)


def _vector(_inst: object, attr: attrs.Attribute[Vec], value: object) -> None:
    if (
        not isinstance(value, tuple)
        or len(value) != len(RESOURCES)
        or any(type(v) is not int or v < 0 for v in value)
    ):
        raise InvalidBounds(f"{attr.name} must be a tuple of 3 ints >= 0, got {value!r}")


def _non_negative(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 0:
        raise InvalidBounds(f"{attr.name} must be an int >= 0, got {value!r}")


def _positive(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 1:
        raise InvalidBounds(f"{attr.name} must be an int >= 1, got {value!r}")


@attrs.frozen(kw_only=True)
class GatedConfig:
    """Bounds of one gated-queue model instance.

    Raises :class:`~tent_spec.credit.InvalidBounds` when a field is out of range: no keys or
    more than two, a workload owner naming an unknown key or with length 0, a capacity or
    maximum grant of 0, an initial grant above the capacity, or no dispatch window.
    """

    name: str
    keys: int = attrs.field(validator=_positive)
    workload: tuple[OwnerSpec, ...]
    max_outstanding_owners: int = attrs.field(validator=_positive)
    max_outstanding_bytes: int = attrs.field(validator=_positive)
    windows: tuple[tuple[int, int], ...]  # (max_owners, max_bytes) a pick may use
    capacity: Vec = attrs.field(validator=_vector)
    max_grant: Vec = attrs.field(validator=_vector)
    initial_grant: Vec = attrs.field(validator=_vector)
    refresh: bool = True  # the receiver's refresh timer re-publishes the full vector
    cancel: bool = False  # queued owners may be canceled (the caller's cancel + gate.forget)
    max_messages: int = attrs.field(validator=_positive)  # messages in flight, all bags
    max_duplications: int = attrs.field(default=0, validator=_non_negative)
    max_losses: int = attrs.field(default=0, validator=_non_negative)
    max_receiver_restarts: int = attrs.field(default=0, validator=_non_negative)
    max_faults: int | None = None
    max_seq: int = attrs.field(default=0, validator=_non_negative)  # 0 = max_messages + 3

    def __attrs_post_init__(self) -> None:
        if self.keys > 2:
            raise InvalidBounds("the gated model has one or two credit keys")
        if not self.workload:
            raise InvalidBounds("the workload needs at least one owner")
        for spec in self.workload:
            if not (0 <= spec.key <= self.keys) or spec.length < 1:
                raise InvalidBounds(f"invalid workload owner {spec!r}")
        if any(c < 1 for c in self.capacity) or any(g < 1 for g in self.max_grant):
            raise InvalidBounds("capacity and max_grant must be >= 1 per resource")
        total = tuple(g * self.keys for g in self.initial_grant)
        if not (_vle(total, self.capacity) and _vle(self.initial_grant, self.max_grant)):
            raise InvalidBounds("every key's initial grant must fit the capacity and max_grant")
        if not self.windows or any(o < 1 or b < 1 for o, b in self.windows):
            raise InvalidBounds("windows must be non-empty pairs of ints >= 1")
        if self.max_faults is not None and self.max_faults < 0:
            raise InvalidBounds("max_faults must be >= 0 when given")

    @property
    def seq_cap(self) -> int:
        """The sequence state constraint (never reached with rank renumbering)."""
        return self.max_seq or self.max_messages + 3


_ARITY = {
    "admit": 1,
    "cancel": 1,
    "pick": 2,
    "submit": 2,
    "land": 1,
    "complete": 1,
    "release": 1,
    "sender_flush": 1,
    "receiver_flush": 1,
    "refresh_tick": 0,
    "deliver": 2,
    "duplicate": 2,
    "lose": 2,
    "receiver_restart": 0,
}
_ACTIONS = tuple(_ARITY)
_FAULTS = frozenset({"duplicate", "lose", "receiver_restart", "cancel"})
_BOUND = "bound:"


class GatedSpec:
    """The gated queue as a finite transition system (structurally a ``SpecModel``).

    Guards are ``_g_<action>(state, *args)`` (``None`` = enabled, else the failing guard in
    words; a reason starting ``"bound:"`` is a model bound, not a protocol rule), effects
    ``_e_<action>(state, *args)``. Known-bad variants override one of the policy hooks
    (:meth:`reserve`, :meth:`snapshot_fenced`, :meth:`requeue_blocked`,
    :meth:`control_needs_credit`).
    """

    def __init__(self, config: GatedConfig) -> None:
        self.config = config
        self.name = config.name
        self._zero: Vec = (0, 0, 0)
        self._codes: dict[Any, tuple[Any, ...]] = {}  # pack memo (see ``pack``)

    # ---- policy hooks (the known-bad variants override exactly one) -----------------------

    def reserve(self, ledger: SenderKey, charge: Vec) -> tuple[SenderKey, bool]:
        """Reserve ``charge`` atomically: all resources or none (RFC claim 3)."""
        if not _vle(charge, self.available(ledger)):
            return ledger, False
        return ledger._replace(consumed=_vadd(ledger.consumed, charge)), True

    def snapshot_fenced(self, owner: Owner, ledger: SenderKey) -> bool:
        """RFC "Replay and restart safety": an old snapshot never spends new-session credit."""
        return owner.snapshot != ledger.session

    def requeue_blocked(self, queue: tuple[int, ...], blocked: Sequence[int]) -> tuple[int, ...]:
        """A blocked owner stays QUEUED *in place* (DESIGN: "with its enqueue order")."""
        del blocked
        return queue

    def control_needs_credit(self, ledger: SenderKey) -> bool:
        """RFC rule 4: "Control traffic never consumes data credit" - reporting is always free."""
        del ledger
        return False

    def idle_credit(self, state: GatedState, key: int) -> Vec:
        """The key's available credit beyond what its credit-stalled owners wait for: what the
        gate gives back when an owner left the key without using credit (issue 10 item 8)."""
        return tuple(
            max(0, a - w)
            for a, w in zip(
                self.available(state.senders[key - 1]), self.waiting(state, key), strict=True
            )
        )

    # ---- initial state -------------------------------------------------------------------

    def initial_states(self) -> list[GatedState]:
        """After the handshake of every key on session 1: each sender endpoint is ACTIVE with
        the initial grant applied (update 1) and has sent its introduction report (usage 1),
        which the receiver applied (an empty demand); no message is in flight."""
        cfg = self.config
        z = self._zero
        grant = cfg.initial_grant
        sender = SenderKey(ACTIVE, 1, 1, grant, z, z, 1, False, z, False, False)
        k = cfg.keys
        receiver = ReceiverKey(True, grant, z, z, z, 1, 1, z, False, False, False)
        return [
            GatedState(
                session=1,
                admitted=0,
                owners=(),
                queue=(),
                outstanding_owners=0,
                outstanding_bytes=0,
                dispatching_bytes=0,
                senders=(sender,) * k,
                receivers=(receiver,) * k,
                to_sender=((),) * k,
                to_receiver=((),) * k,
                faults=Faults(0, 0, 0),
            )
        ]

    # ---- derived quantities --------------------------------------------------------------

    def free_capacity(self, state: GatedState) -> Vec:
        """Capacity minus Σ over keys of (granted − released − reclaimed) (SEMANTICS §8)."""
        free = self.config.capacity
        for b in state.receivers:
            free = _vsub(free, _vsub(_vsub(b.granted, b.released), b.reclaimed))
        return free

    @staticmethod
    def available(ledger: SenderKey) -> Vec:
        """``grant_total − consumed − returned`` (SEMANTICS §6)."""
        return _vsub(_vsub(ledger.grant_total, ledger.consumed), ledger.returned)

    def waiting(self, state: GatedState, key: int) -> Vec:
        """Σ charges of the key's QUEUED owners with a live credit stall (the route's wait)."""
        total = self._zero
        for o in state.owners:
            if o.key == key and o.state == QUEUED and o.stall == STALLED:
                total = _vadd(total, charge_of(o.length))
        return total

    @staticmethod
    def report_due(ledger: SenderKey) -> bool:
        """The endpoint owes a usage report: something changed, or demand is unmet."""
        return ledger.dirty or not _vle(ledger.demand, ledger.grant_total)

    def _in_flight(self, state: GatedState) -> int:
        return sum(n for bags in (state.to_sender, state.to_receiver) for b in bags for _, n in b)

    def _fault_left(self, state: GatedState) -> bool:
        cap = self.config.max_faults
        return cap is None or sum(state.faults) < cap

    def _owner(self, state: GatedState, owner_id: object) -> Owner | None:
        if type(owner_id) is not int or not 1 <= owner_id <= len(state.owners):
            return None
        return state.owners[owner_id - 1]

    @staticmethod
    def _set(items: tuple[Any, ...], index: int, value: Any) -> tuple[Any, ...]:
        return (*items[:index], value, *items[index + 1 :])

    def _with_owner(self, state: GatedState, owner: Owner) -> GatedState:
        return state._replace(owners=self._set(state.owners, owner.owner_id - 1, owner))

    def _terminate(self, state: GatedState, owner: Owner, event: str, status: str) -> GatedState:
        """Owner → TERMINAL(status) via ``event``; its queue capacity is released."""
        done = owner._replace(state=OWNER_TRANSITIONS[(owner.state, event)], status=status)
        dispatching = state.dispatching_bytes - (owner.length if owner.state == DISPATCHING else 0)
        return self._with_owner(state, done)._replace(
            outstanding_owners=state.outstanding_owners - 1,
            outstanding_bytes=state.outstanding_bytes - owner.length,
            dispatching_bytes=dispatching,
        )

    # ---- grants at the receiver ----------------------------------------------------------

    def _grant_outstanding(self, state: GatedState, k: int) -> GatedState:
        """Grant key ``k`` its outstanding demand from free capacity (SEMANTICS §8).

        1. want = demand target − granted, per resource where positive; none → not stalled.
        2. offer = min(want, max_grant, free); if any demanded resource would get less than 1,
           nothing is granted (all or nothing: a charge is never half-backed).
        3. A grant makes a push due; a short grant (some offer < want) marks the key stalled
           and pushes too (the update carries ``retry_after``).
        """
        b = state.receivers[k]
        want = tuple(max(0, t - g) for t, g in zip(b.demand, b.granted, strict=True))
        if not any(want):
            return state._replace(
                receivers=self._set(state.receivers, k, b._replace(stalled=False))
            )
        free = self.free_capacity(state)
        offers = tuple(
            max(0, min(w, m, f)) if w else 0
            for w, m, f in zip(want, self.config.max_grant, free, strict=True)
        )
        if any(w and o < 1 for w, o in zip(want, offers, strict=True)):
            offers = self._zero
        short = any(o < w for w, o in zip(want, offers, strict=True))
        nb = b._replace(
            granted=_vadd(b.granted, offers),
            push_due=b.push_due or any(offers) or short,
            stalled=short,
        )
        return state._replace(receivers=self._set(state.receivers, k, nb))

    def _capacity_freed(self, state: GatedState) -> GatedState:
        """Push: every stalled key gets its outstanding demand granted now, in key order."""
        for k in range(self.config.keys):
            if state.receivers[k].stalled:
                state = self._grant_outstanding(state, k)
        return state

    # ---- the dispatch pass ---------------------------------------------------------------

    def scan(self, state: GatedState, max_owners: int, max_bytes: int) -> GatedState:
        """One pick over the queue with the gate deciding from the credit state.

        1. Queue order (FIFO); an owner longer than the bytes left stops the pick (head of line).
        2. A remote owner whose key blocked earlier in this pick is skipped (order within a key
           is kept) and joins the key's credit stall.
        3. The gate: snapshot fenced → REJECTED (TERMINAL FAILED, no token, stall ended). The
           key not ACTIVE (STALE, FENCING), no update on the entry yet, or :meth:`reserve`
           refused → BLOCKED: stays QUEUED in place, stall recorded, demand target raised to
           ``consumed + waiting`` (never lowered). Else the token is RESERVED and the owner
           dispatches. A local owner (key 0) is always eligible, without a token.
        4. Dispatch: DISPATCHING, ``dispatching_bytes += length``; the pick stops once
           ``max_owners`` owners are picked.
        5. After the pass, owners skipped behind a blocked key that were not stalled yet join
           their key's stall and demand (``observe_pick``).
        """
        used_bytes = 0
        picked = 0
        blocked_keys: set[int] = set()
        blocked: list[int] = []
        skipped: list[int] = []
        gone: set[int] = set()
        left: set[int] = set()  # keys a credit-stalled owner left without dispatching
        for owner_id in state.queue:
            owner = state.owners[owner_id - 1]
            if owner.length > max_bytes - used_bytes:  # SEMANTICS §2: head of line, stop
                break
            if owner.key:
                k = owner.key - 1
                if owner.key in blocked_keys:
                    skipped.append(owner_id)
                    continue
                ledger = state.senders[k]
                if self.snapshot_fenced(owner, ledger):  # REJECTED: nothing is reserved
                    if owner.stall == STALLED:  # it leaves without the credit it asked for
                        left.add(owner.key)
                    stall = WAS_STALLED if owner.stall else NEVER_STALLED
                    state = self._terminate(state, owner._replace(stall=stall), "reject", FAILED)
                    gone.add(owner_id)
                    continue
                charge = charge_of(owner.length)
                ok = False
                if ledger.phase == ACTIVE and ledger.last_seq:
                    ledger, ok = self.reserve(ledger, charge)
                    state = state._replace(senders=self._set(state.senders, k, ledger))
                if not ok:  # BLOCKED: stays queued in place, a credit stall
                    blocked_keys.add(owner.key)
                    blocked.append(owner_id)
                    state = self._with_owner(state, owner._replace(stall=STALLED))
                    state = self._raise_demand(state, owner.key)
                    continue
                owner = owner._replace(
                    token=TOKEN_TRANSITIONS[(owner.token, "reserve")],
                    token_session=ledger.session,
                    stall=WAS_STALLED if owner.stall else NEVER_STALLED,
                )
            owner = owner._replace(state=OWNER_TRANSITIONS[(owner.state, "dispatch")])
            state = self._with_owner(state, owner)._replace(
                dispatching_bytes=state.dispatching_bytes + owner.length
            )
            gone.add(owner_id)
            used_bytes += owner.length
            picked += 1
            if picked == max_owners:
                break
        fresh = [i for i in skipped if state.owners[i - 1].stall != STALLED]
        for owner_id in fresh:
            state = self._with_owner(state, state.owners[owner_id - 1]._replace(stall=STALLED))
        for key in sorted({state.owners[i - 1].key for i in fresh}):
            state = self._raise_demand(state, key)
        queue = tuple(i for i in state.queue if i not in gone)
        state = state._replace(queue=self.requeue_blocked(queue, blocked))
        # ``observe_pick`` settles the keys the pick's rejections left, and every key owners
        # left earlier on its current entry (a grant for the old demand may have come since).
        flagged = {k + 1 for k, ledger in enumerate(state.senders) if ledger.withdrawn}
        for key in sorted(left | flagged):
            state = self.return_idle(state, key)
        return state

    def _raise_demand(self, state: GatedState, key: int) -> GatedState:
        """``set_pending_demand(waiting)``: target = consumed + returned + waiting (exact)."""
        k = key - 1
        ledger = state.senders[k]
        base = _vadd(ledger.consumed, ledger.returned)
        return self._set_demand(state, k, _vadd(base, self.waiting(state, key)))

    def _set_demand(self, state: GatedState, k: int, target: Vec) -> GatedState:
        ledger = state.senders[k]
        if target == ledger.demand:
            return state
        ledger = ledger._replace(demand=target, dirty=True)
        return state._replace(senders=self._set(state.senders, k, ledger))

    def return_idle(self, state: GatedState, key: int) -> GatedState:
        """An owner left ``key`` without using credit (its submit was refused, or it was
        credit-stalled and was rejected or canceled): the gate's settlement (issue 10 item 8).

        1. The idle credit (:meth:`idle_credit`: available beyond what the owners still
           credit-stalled on the key wait for) is returned: ``returned += idle`` (cumulative,
           carried by the next report; the receiver reclaims it).
        2. The demand target becomes what still waits: ``consumed + returned + waiting`` while
           some owner is stalled; with none, the demand is withdrawn (``set_pending_demand({})``:
           every resource it named drops to ``consumed + returned``, already granted).

        3. The key is flagged ``withdrawn`` until its entry changes: the receiver may still
           answer the demand as it was before this settlement (the report that lowered it is in
           flight), so every later pick settles the key again (found by the checker on
           ``gated/hoarding/ci``: a canceled owner's grant arrived after its demand was
           withdrawn, and the other key waited forever).

        A variant without step 1 keeps the idle credit (``gated/hoarding/ci``: another key of
        the same receiver then waits forever, a recoverability violation).
        """
        k = key - 1
        idle = self.idle_credit(state, key)
        if any(idle):
            ledger = state.senders[k]
            ledger = ledger._replace(returned=_vadd(ledger.returned, idle), dirty=True)
            state = state._replace(senders=self._set(state.senders, k, ledger))
        ledger = state.senders[k]
        waiting = self.waiting(state, key)
        base = _vadd(ledger.consumed, ledger.returned)
        if not ledger.withdrawn:
            ledger = ledger._replace(withdrawn=True)
            state = state._replace(senders=self._set(state.senders, k, ledger))
        if any(waiting):
            return self._set_demand(state, k, _vadd(base, waiting))
        withdrawn = tuple(b if d else 0 for b, d in zip(base, ledger.demand, strict=True))
        return self._set_demand(state, k, withdrawn)

    # ---- guards and effects: the queue and the transport ------------------------------------

    def _g_admit(self, state: GatedState, index: int) -> str | None:
        cfg = self.config
        if index != state.admitted or index >= len(cfg.workload):
            return "only the next owner of the workload is admitted (FIFO workload)"
        spec = cfg.workload[index]
        if (
            state.outstanding_owners + 1 > cfg.max_outstanding_owners
            or state.outstanding_bytes + spec.length > cfg.max_outstanding_bytes
        ):
            return "capacity exceeded: TooManyRequests"
        return None

    def _e_admit(self, state: GatedState, index: int) -> GatedState:
        spec = self.config.workload[index]
        snapshot = state.senders[spec.key - 1].session if spec.key else 0
        owner = Owner(index + 1, spec.key, spec.length, snapshot, QUEUED, None, 0, NONE, 0, False)
        return state._replace(
            admitted=index + 1,
            owners=(*state.owners, owner),
            queue=(*state.queue, owner.owner_id),
            outstanding_owners=state.outstanding_owners + 1,
            outstanding_bytes=state.outstanding_bytes + spec.length,
        )

    def _g_pick(self, state: GatedState, max_owners: int, max_bytes: int) -> str | None:
        if (max_owners, max_bytes) not in self.config.windows:
            return f"window ({max_owners}, {max_bytes}) is not configured"
        if not state.queue:
            return "the queue is empty"
        return None

    def _e_pick(self, state: GatedState, max_owners: int, max_bytes: int) -> GatedState:
        return self.scan(state, max_owners, max_bytes)

    def _g_cancel(self, state: GatedState, owner_id: int) -> str | None:
        if not self.config.cancel:
            return "no cancel configured"
        owner = self._owner(state, owner_id)
        if owner is None or owner.state != QUEUED:
            return "only a QUEUED owner is canceled here (SEMANTICS §2 cancel)"
        return None

    def _e_cancel(self, state: GatedState, owner_id: int) -> GatedState:
        """``queue.cancel(id)`` then ``gate.forget(id)``: CANCELED, capacity released; a
        credit-stalled owner's key settles its idle credit and demand (:meth:`return_idle`)."""
        owner = state.owners[owner_id - 1]
        stalled = owner.stall == STALLED
        done = owner._replace(stall=WAS_STALLED if owner.stall else NEVER_STALLED)
        state = self._terminate(state, done, "cancel", CANCELED)
        state = state._replace(queue=tuple(i for i in state.queue if i != owner_id))
        return self.return_idle(state, owner.key) if stalled else state

    def _g_submit(self, state: GatedState, owner_id: int, ok: object) -> str | None:
        owner = self._owner(state, owner_id)
        if not isinstance(ok, bool):
            return "ok must be a bool"
        if owner is None or owner.state != DISPATCHING or owner.token != RESERVED:
            return "no owner awaiting its submit (DISPATCHING with a RESERVED token)"
        if ok and owner.token_session != state.senders[owner.key - 1].session:
            return "the token's entry was fenced: commit raises InvalidEntry (roll back instead)"
        return None

    def _e_submit(self, state: GatedState, owner_id: int, ok: bool) -> GatedState:
        owner = state.owners[owner_id - 1]
        k = owner.key - 1
        ledger = state.senders[k]
        if ok:  # the transport accepted: commit; the usage report owes the new consumption
            done = owner._replace(token=TOKEN_TRANSITIONS[(owner.token, "commit")])
            state = state._replace(senders=self._set(state.senders, k, ledger._replace(dirty=True)))
            return self._with_owner(state, done)
        # The transport refused: exact rollback (a fenced entry is already gone), owner FAILED;
        # it leaves without using credit, so the key's idle credit goes back.
        if owner.token_session == ledger.session:
            ledger = ledger._replace(consumed=_vsub(ledger.consumed, charge_of(owner.length)))
            state = state._replace(senders=self._set(state.senders, k, ledger))
        owner = owner._replace(token=TOKEN_TRANSITIONS[(owner.token, "rollback")])
        return self.return_idle(self._terminate(state, owner, "complete", FAILED), owner.key)

    def _g_land(self, state: GatedState, owner_id: int) -> str | None:
        owner = self._owner(state, owner_id)
        if owner is None or owner.token != COMMITTED or owner.landed:
            return "no committed work of this owner is in flight"
        if owner.token_session != state.session:
            return "work of a dead receiver session never lands"
        return None

    def _e_land(self, state: GatedState, owner_id: int) -> GatedState:
        owner = state.owners[owner_id - 1]
        k = owner.key - 1
        b = state.receivers[k]
        b = b._replace(landed=_vadd(b.landed, charge_of(owner.length)))
        state = state._replace(receivers=self._set(state.receivers, k, b))
        return self._with_owner(state, owner._replace(landed=True))

    def _g_complete(self, state: GatedState, owner_id: int) -> str | None:
        owner = self._owner(state, owner_id)
        if owner is None or owner.state != DISPATCHING:
            return "the owner is not DISPATCHING: InvalidEntry"
        if owner.key == 0:
            return None
        if owner.token != COMMITTED:
            return "the owner's submit is not settled yet (its token is not COMMITTED)"
        if not owner.landed and owner.token_session == state.session:
            return "live work completes only after it landed (it can still land)"
        return None

    def _e_complete(self, state: GatedState, owner_id: int) -> GatedState:
        """The transport finished the owner: COMPLETED if its data landed (or it is local),
        FAILED if it can no longer land. Completion never mints sender credit (RFC rule 6); it
        may finish a fence (FENCING → ACTIVE once no older session's work is in flight)."""
        owner = state.owners[owner_id - 1]
        if owner.key == 0:
            return self._terminate(state, owner, "complete", COMPLETED)
        status = COMPLETED if owner.landed else FAILED
        owner = owner._replace(token=TOKEN_TRANSITIONS[(owner.token, "complete")])
        state = self._terminate(state, owner, "complete", status)
        return self._maybe_fence_drained(state, owner.key - 1)

    def _maybe_fence_drained(self, state: GatedState, k: int) -> GatedState:
        ledger = state.senders[k]
        if ledger.phase != FENCING:
            return state
        for o in state.owners:
            if o.key == k + 1 and o.token == COMMITTED and o.token_session != ledger.session:
                return state
        return state._replace(senders=self._set(state.senders, k, ledger._replace(phase=ACTIVE)))

    def _g_release(self, state: GatedState, k: int) -> str | None:
        if type(k) is not int or not 0 <= k < self.config.keys:
            return "no such key"
        b = state.receivers[k]
        if b.landed == b.released:
            return "nothing landed awaits the consumer"
        return None

    def _e_release(self, state: GatedState, k: int) -> GatedState:
        # SEMANTICS §8 release: the receiver's own consumer frees capacity, never a sender.
        b = state.receivers[k]
        state = state._replace(
            receivers=self._set(state.receivers, k, b._replace(released=b.landed))
        )
        return self._capacity_freed(state)

    # ---- guards and effects: control messages ----------------------------------------------

    def sender_messages(self, state: GatedState, k: int) -> tuple[Any, ...]:
        """What sender endpoint ``k`` emits now: the offer while awaiting an activation, then a
        usage report when one is due (``messages_to_send``)."""
        ledger = state.senders[k]
        out: list[Any] = []
        if ledger.awaiting:
            out.append(Offer(OFFER))
        if self.report_due(ledger):
            seq = ledger.usage_seq + 1
            out.append(
                Report(REPORT, ledger.session, seq, ledger.consumed, ledger.returned, ledger.demand)
            )
        return tuple(out)

    def _g_sender_flush(self, state: GatedState, k: int) -> str | None:
        if type(k) is not int or not 0 <= k < self.config.keys:
            return "no such key"
        out = self.sender_messages(state, k)
        if not out:
            return "nothing to send (no offer owed, no report due)"
        ledger = state.senders[k]
        if self.report_due(ledger) and self.control_needs_credit(ledger):
            return "the report waits for data credit"
        if ledger.usage_seq >= self.config.seq_cap:
            return f"{_BOUND} max_seq reached"
        if self._in_flight(state) + len(out) > self.config.max_messages:
            return f"{_BOUND} max_messages in flight"
        return None

    def _e_sender_flush(self, state: GatedState, k: int) -> GatedState:
        ledger = state.senders[k]
        bag = state.to_receiver[k]
        for msg in self.sender_messages(state, k):
            bag = _bag_add(bag, msg)
        if self.report_due(ledger):
            ledger = ledger._replace(usage_seq=ledger.usage_seq + 1, dirty=False)
        return state._replace(
            senders=self._set(state.senders, k, ledger),
            to_receiver=self._set(state.to_receiver, k, bag),
        )

    def receiver_messages(self, state: GatedState, k: int, *, refresh: bool) -> tuple[Any, ...]:
        """What receiver endpoint ``k`` emits now: the activation once per offer, then one update
        with the full cumulative vector when a push is due (or the refresh timer fired)."""
        b = state.receivers[k]
        out: list[Any] = []
        if b.activation_due:
            out.append(Activation(ACTIVATION, state.session, EPOCH))
        if b.version and (b.push_due or (refresh and b.pushed_seq)):
            out.append(Update(UPDATE, state.session, EPOCH, b.pushed_seq + 1, b.granted))
        return tuple(out)

    def _emit(self, state: GatedState, k: int, *, refresh: bool) -> GatedState:
        out = self.receiver_messages(state, k, refresh=refresh)
        b = state.receivers[k]
        bag = state.to_sender[k]
        for msg in out:
            bag = _bag_add(bag, msg)
        if any(m.kind == UPDATE for m in out):
            b = b._replace(pushed_seq=b.pushed_seq + 1, push_due=False)
        return state._replace(
            receivers=self._set(state.receivers, k, b._replace(activation_due=False)),
            to_sender=self._set(state.to_sender, k, bag),
        )

    def _g_receiver_flush(self, state: GatedState, k: int) -> str | None:
        if type(k) is not int or not 0 <= k < self.config.keys:
            return "no such key"
        out = self.receiver_messages(state, k, refresh=False)
        if not out:
            return "nothing to send (no activation or push due)"
        if state.receivers[k].pushed_seq >= self.config.seq_cap:
            return f"{_BOUND} max_seq reached"
        if self._in_flight(state) + len(out) > self.config.max_messages:
            return f"{_BOUND} max_messages in flight"
        return None

    def _e_receiver_flush(self, state: GatedState, k: int) -> GatedState:
        return self._emit(state, k, refresh=False)

    def _g_refresh_tick(self, state: GatedState) -> str | None:
        if not self.config.refresh:
            return "no refresh timer configured"
        out = [self.receiver_messages(state, k, refresh=True) for k in range(self.config.keys)]
        if not any(out):
            return "no endpoint has anything to refresh"
        if any(b.pushed_seq >= self.config.seq_cap for b in state.receivers):
            return f"{_BOUND} max_seq reached"
        if self._in_flight(state) + sum(map(len, out)) > self.config.max_messages:
            return f"{_BOUND} max_messages in flight"
        return None

    def _e_refresh_tick(self, state: GatedState) -> GatedState:
        # DESIGN: the receiver also pushes "on a refresh timer" - every endpoint at once.
        for k in range(self.config.keys):
            state = self._emit(state, k, refresh=True)
        return state

    def _bag_of(self, state: GatedState, k: int, msg: Any) -> Bag | None:
        if type(k) is not int or not 0 <= k < self.config.keys:
            return None
        to_receiver = getattr(msg, "kind", None) in (OFFER, REPORT)
        bag = (state.to_receiver if to_receiver else state.to_sender)[k]
        return bag if _bag_has(bag, msg) else None

    def _g_deliver(self, state: GatedState, k: int, msg: Any) -> str | None:
        # RFC: control is never gated by data credit - any message in flight is deliverable.
        if self._bag_of(state, k, msg) is None:
            return "the message is not in flight on this key's connection"
        return None

    def _take(self, state: GatedState, k: int, msg: Any) -> GatedState:
        if msg.kind in (OFFER, REPORT):
            return state._replace(
                to_receiver=self._set(state.to_receiver, k, _bag_remove(state.to_receiver[k], msg))
            )
        return state._replace(
            to_sender=self._set(state.to_sender, k, _bag_remove(state.to_sender[k], msg))
        )

    def _e_deliver(self, state: GatedState, k: int, msg: Any) -> GatedState:
        state = self._take(state, k, msg)
        if msg.kind == OFFER:
            return self._on_offer(state, k)
        if msg.kind == REPORT:
            return self._on_report(state, k, msg)
        if msg.kind == ACTIVATION:
            return self._on_activation(state, k, msg)
        return self._on_update(state, k, msg)

    def _on_offer(self, state: GatedState, k: int) -> GatedState:
        """Answer with an activation (the same one for a duplicated offer) and the initial grant
        as a target total, so a duplicated offer cannot grant it twice."""
        b = state.receivers[k]
        b = b._replace(
            version=True,
            activation_due=True,
            demand=_vmax(b.demand, self.config.initial_grant),
        )
        state = state._replace(receivers=self._set(state.receivers, k, b))
        state = self._grant_outstanding(state, k)
        b = state.receivers[k]
        return state._replace(receivers=self._set(state.receivers, k, b._replace(push_due=True)))

    def _on_report(self, state: GatedState, k: int, msg: Report) -> GatedState:
        """A newer report of the live session replaces the demand target and is granted; a
        report that carries demand is always answered with the key's full vector."""
        b = state.receivers[k]
        if msg.session != state.session or msg.seq <= b.usage_seq:
            return state  # another session, or a duplicate/old report: ignored
        returned = _vmax(msg.returned, b.reclaimed)
        if not (
            _vle(_vadd(msg.consumed, msg.returned), b.granted)
            and _vle(_vadd(returned, b.landed), b.granted)
        ):
            return state  # beyond the grant: a protocol violation, nothing changes
        # SEMANTICS §8 return: reclaim ``returned − already reclaimed`` (idempotent).
        reclaim = _vsub(returned, b.reclaimed)
        # A report that still asks for credit is answered with the full vector even when its
        # target is already granted: the sender evidently lost the update that carried it
        # (liveness: found by the checker on `gated/no_refresh`, where nothing else re-pushes).
        b = b._replace(
            reclaimed=returned,
            usage_seq=msg.seq,
            demand=msg.demand,
            push_due=b.push_due or any(msg.demand),
        )
        state = state._replace(receivers=self._set(state.receivers, k, b))
        state = self._grant_outstanding(state, k)
        # The reclaimed capacity is pushed to every key still short of it (in key order).
        return self._capacity_freed(state) if any(reclaim) else state

    def _on_activation(self, state: GatedState, k: int, msg: Activation) -> GatedState:
        """The same session: ignored (a duplicate). A new session: the epoch fence - a fresh
        ledger entry, FENCING until the old session's committed work drained (SEMANTICS §7)."""
        ledger = state.senders[k]
        if msg.session == ledger.session:
            return state._replace(
                senders=self._set(state.senders, k, ledger._replace(awaiting=False))
            )
        z = self._zero
        fresh = SenderKey(FENCING, msg.session, 0, z, z, z, 0, True, z, False, False)
        state = state._replace(senders=self._set(state.senders, k, fresh))
        return self._maybe_fence_drained(state, k)

    def _on_update(self, state: GatedState, k: int, msg: Update) -> GatedState:
        """SEMANTICS §6 apply_update; anything not matching the rule is a no-op."""
        ledger = state.senders[k]
        if msg.session != ledger.session or msg.seq <= ledger.last_seq:
            return state  # another session, or "Duplicate and old updates become no-ops"
        used = _vadd(ledger.consumed, ledger.returned)
        if not (_vle(ledger.grant_total, msg.grants) and _vle(used, msg.grants)):
            return state  # RFC rule 5: a decreasing total is rejected
        phase = ACTIVE if ledger.phase == STALE else ledger.phase
        ledger = ledger._replace(grant_total=msg.grants, last_seq=msg.seq, phase=phase)
        return state._replace(senders=self._set(state.senders, k, ledger))

    def _g_duplicate(self, state: GatedState, k: int, msg: Any) -> str | None:
        if state.faults.duplications >= self.config.max_duplications:
            return "fault budget: max_duplications used"
        if not self._fault_left(state):
            return "fault budget: max_faults used"
        if self._in_flight(state) >= self.config.max_messages:
            return f"{_BOUND} max_messages in flight"
        return self._g_deliver(state, k, msg)

    def _e_duplicate(self, state: GatedState, k: int, msg: Any) -> GatedState:
        if msg.kind in (OFFER, REPORT):
            state = state._replace(
                to_receiver=self._set(state.to_receiver, k, _bag_add(state.to_receiver[k], msg))
            )
        else:
            state = state._replace(
                to_sender=self._set(state.to_sender, k, _bag_add(state.to_sender[k], msg))
            )
        f = state.faults
        return state._replace(faults=f._replace(duplications=f.duplications + 1))

    def _g_lose(self, state: GatedState, k: int, msg: Any) -> str | None:
        if state.faults.losses >= self.config.max_losses:
            return "fault budget: max_losses used"
        if not self._fault_left(state):
            return "fault budget: max_faults used"
        return self._g_deliver(state, k, msg)

    def _e_lose(self, state: GatedState, k: int, msg: Any) -> GatedState:
        state = self._take(state, k, msg)
        f = state.faults
        return state._replace(faults=f._replace(losses=f.losses + 1))

    def _g_receiver_restart(self, state: GatedState) -> str | None:
        if state.faults.restarts >= self.config.max_receiver_restarts:
            return "fault budget: max_receiver_restarts used"
        if not self._fault_left(state):
            return "fault budget: max_faults used"
        return None

    def _e_receiver_restart(self, state: GatedState) -> GatedState:
        """A new receiver process: new session, fresh books per key, both connections' bags gone.
        Every sender endpoint disconnects (ACTIVE → STALE; FENCING stays) and reconnects."""
        z = self._zero
        k = self.config.keys
        fresh = ReceiverKey(False, z, z, z, z, 0, 0, z, False, False, False)
        senders = tuple(
            s._replace(phase=STALE if s.phase == ACTIVE else s.phase, awaiting=True)
            for s in state.senders
        )
        f = state.faults
        return state._replace(
            session=state.session + 1,
            senders=senders,
            receivers=(fresh,) * k,
            to_sender=((),) * k,
            to_receiver=((),) * k,
            faults=f._replace(restarts=f.restarts + 1),
        )

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
                'RFC claim 3 (atomic multi-resource eligibility); SEMANTICS §6 try_reserve: "if '
                'any resource lacks credit → insufficient, nothing changes"',
                self.inv_consumed_equals_token_charges,
            ),
            SpecInvariant(
                "no_dispatch_on_fenced_snapshot",
                'DESIGN: "A rejected owner (its key was fenced) becomes TERMINAL(FAILED)"; RFC '
                'acceptance 4: "Restarted peers cannot reuse old credit or old allocation '
                'generation"',
                self.inv_no_dispatch_on_fenced_snapshot,
            ),
            SpecInvariant(
                "usage_within_accepted_grant",
                'issue 6: "consumed − returned ≤ the sender\'s accepted grant total"; SEMANTICS §6 '
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
                'SEMANTICS §8: "return ... reclaimed as returned − already reclaimed '
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
                'DESIGN: "A blocked owner stays QUEUED in place with its enqueue order"; issue 6: '
                '"no requeue reversal"',
                self.inv_queue_order,
            ),
            SpecInvariant(
                "admission_counters_and_limits",
                'SEMANTICS §2: outstanding within max_outstanding_*; dispatching_bytes is "every '
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


def _show(msg: Any) -> str:
    fields = ", ".join(f"{k}={v}" for k, v in msg._asdict().items() if k not in ("kind", "epoch"))
    return f"{type(msg).__name__}({fields})"


_STATE_CODE = {name: i for i, name in enumerate((QUEUED, DISPATCHING, TERMINAL))}
_STATUS_CODE: dict[str | None, int] = {None: 0, COMPLETED: 1, FAILED: 2, CANCELED: 3}
_TOKEN_CODE = {name: i for i, name in enumerate(TOKEN_STATES)}
_PHASE_CODE = {name: i for i, name in enumerate(PHASES)}
