"""The gated spec's values: names, messages, the state, the configuration, vector helpers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import attrs

from tent_spec.credit import (
    Activation,
    InvalidBounds,
)

Vec = tuple[int, ...]

#: Resource order of every vector: a remote direct WRITE charges all three (docs/design.md#charges:
#: DATA_BYTES + REQUEST_SLOTS + CONSUMER_SLOTS).
RESOURCES = ("DATA_BYTES", "REQUEST_SLOTS", "CONSUMER_SLOTS")

# Sender endpoint phase (the negotiation states a post-handshake endpoint can be in).
ACTIVE = "ACTIVE"
STALE = "STALE"  # disconnected: no new credit-gated dispatch until the new activation
FENCING = "FENCING"  # a new session installed; the old session's committed work still drains
PHASES = (ACTIVE, STALE, FENCING)

# Gate token lifecycle, as data (one table in one place, as h11's ``_state.py``). NONE = no token (a
# local owner, a rejected one, or one never picked).
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
    returned totals and ``demand = consumed + returned + level`` (zeros for no level): version
    2 carries the sender's level in the demand field, and the receiver reads it back as
    ``demand − consumed − returned``."""

    kind: int
    session: int
    seq: int
    consumed: Vec
    returned: Vec
    demand: Vec


class Update(NamedTuple):
    """Receiver → sender: the key's full cumulative grant vector (``ReceiverCreditUpdate``).

    ``retry`` is the update's ``retry_after_us`` being non-zero: the key is capped (its level
    exceeds its hold) or waits in the receiver's line, so its sender waits for the next top-up
    instead of asking again (a version-2 sender needs nothing else from it)."""

    kind: int
    session: int
    epoch: int
    seq: int
    grants: Vec
    retry: bool = False


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
    """The sender endpoint of one key: negotiation phase, ledger entry and its version-2 level
    reports (docs/credit_protocol.md).

    The level is ``in flight + waiting``: the committed, not completed charges of owners on
    this entry (derived from the owners, :meth:`~._core.GatedCore.in_flight`) plus
    ``waiting``, what the gate last stated waits for credit on the key; while an owner waits it
    is stated in whole charges of ``head`` (:func:`~._ahead.in_heads`)."""

    phase: str
    session: int  # the receiver session of the current ledger entry
    last_seq: int  # last accepted update sequence; 0 = no update yet (nothing reservable)
    grant_total: Vec
    consumed: Vec
    # credit given back (cumulative, docs/semantics.md#sender-ledger return): the gate's idle
    # return and the idle credit a settling report returns
    returned: Vec
    usage_seq: int  # last usage report sequence sent on this entry
    waiting: Vec  # the gate's ``set_pending_demand(waiting)``; zeros on a new entry
    # the charge of the key's first credit-stalled owner, as the gate stated it with
    # ``waiting`` (``head=``); zeros: none. The level is stated in whole heads.
    head: Vec
    reported: Vec  # the level the last report on this entry stated (zeros: none yet)
    returns_unreported: bool  # the returned totals grew since that report
    awaiting: bool  # awaiting an activation: the offer is (re)sent
    withdrawn: bool  # the gate's route flag: owners left this entry (see ``return_idle``)


class ReceiverKey(NamedTuple):
    """The receiver's books and endpoint state for one key of the current session."""

    version: bool  # an offer was received (version 2 is selected)
    granted: Vec
    landed: Vec
    released: Vec
    # returned credit reclaimed from the sender's reports (docs/semantics.md#receiver-allocator)
    reclaimed: Vec
    consumed: Vec  # the largest consumed totals reported (``settled``: all of it landed)
    level: Vec  # the level of the last applied report (zeros: none)
    pushed_seq: int  # last published update sequence (0 = never pushed)
    usage_seq: int  # last accepted usage sequence (0 = no report applied yet)
    # an update goes out only with news: a grant since the last update sent (grants only
    # grow), or a retry hint other than the one it carried
    grants_unsent: bool
    sent_retry: bool
    push_due: bool  # the activation, or the answer to a repeated report
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
    # the receiver's waiting line (key indices, head first): keys whose top-up is due and
    # waits for capacity, served strictly first come
    line: tuple[int, ...]
    # per key index: grants to other keys since the key last joined the line (0 while it is
    # not in the line; ``bounded_bypass`` bounds it)
    bypass: tuple[int, ...]


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
    # the grant chunk in whole charges of a key's work (the RFC's lease batch); 0: adaptive,
    # the key's fair share of the capacity (``_ahead``)
    grant_chunk: int = attrs.field(default=0, validator=_non_negative)
    # the two refreshes (``refresh_tick``): the receiver re-publishes every key's full vector
    # and every sender re-sends its current report
    refresh: bool = True
    cancel: bool = False  # queued owners may be canceled (the caller's cancel + gate.forget)
    # a head with nothing unlanded that could only be granted part of its quantum waits for
    # its own release instead (``grant_partial`` grants it what is free: the transport's
    # timer, docs/credit_protocol.md#partial-hold); False: it is granted at once
    hold_partial: bool = False
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
    "grant_partial": 0,
    "deliver": 2,
    "duplicate": 2,
    "lose": 2,
    "receiver_restart": 0,
}
_ACTIONS = tuple(_ARITY)
_FAULTS = frozenset({"duplicate", "lose", "receiver_restart", "cancel"})
_BOUND = "bound:"
