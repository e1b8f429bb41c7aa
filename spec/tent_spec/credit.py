"""Executable specification of TENT's receiver-advertised credits: epochs, fencing, recovery.

One receiver, ``N`` interchangeable senders, ``R`` resources, a lossy reordering network. The
model follows the protocol as the implementation realises it (DESIGN "Protocol decisions",
SEMANTICS §6-8):

* **Receiver push.** The receiver carves grants from free capacity on a sender's demand
  (``grant``) and publishes the *full cumulative* grant vector of the key in an ``Update``
  (``push_update``; the refresh/heartbeat timer publishes the same way, under a new sequence).
* **Sender pull.** The sender reports its cumulative ``returned`` totals and a pending demand in a
  ``Usage`` report (``report_usage``); the receiver reclaims ``returned - already reclaimed``.
* **Keys and generations.** A sender's ledger entry is keyed by ``(receiver session, epoch)``.
  The receiver chooses epochs: it bumps a sender's epoch when that sender reconnects
  (``sender_restart``) and a receiver restart mints a new session (``receiver_restart``); the
  sender learns both from an ``Activation`` and starts a fresh entry (the epoch fence).
* **Fencing.** An old epoch's outstanding credit is reclaimed only after its in-flight work has
  landed or failed (``reclaim_after_fence``); data that landed is freed only by the receiver's own
  consumer (``consumer_release``), never by a sender's message.

A state is a :class:`CreditState` of frozen ``NamedTuple`` values. Everything about one sender -
its ledger, the receiver's books for its epochs, its in-flight work and the messages to and from
it - lives in one :class:`Peer`, so senders are interchangeable slots (symmetry reduction sorts
them) and no component names another sender.

Actions are guard + effect. Every action takes explicit arguments (sender index, message value,
charge index, in-flight item), so a conformance runner can replay ``(action, args)`` on the
implementation. :meth:`CreditSpec.explain` names the guard that fails.

What the bounds (:class:`CreditBounds`) leave out, honestly:

1. ``max_grant_total``: cumulative grants per (sender, epoch, resource) stop growing there, so
   grant/consume/release cycles beyond it are not explored (the arithmetic is the same at any
   size; overflow is the implementation's checked u64 arithmetic, tested there).
2. ``max_epoch`` / ``max_sender_restarts`` / ``max_receiver_restarts``: at most that many
   generations; a third restart behaves like the second (nothing carries over but fenced books).
3. ``max_messages``: at most that many messages in flight in total. A send that would exceed it
   is disabled (not dropped), so the model never loses a message silently. Sending an exact copy
   of a message that is still in flight is not a separate action: that is ``duplicate``.
4. ``max_duplications`` / ``max_losses`` / ``max_stale`` / ``max_regressions`` and the restart
   budgets are per-kind fault budgets; ``max_faults`` (optional) caps all kinds together, so
   a run combines at most that many faults (every pair is still explored when it is 2).
5. ``max_tokens``: live RESERVED tokens per sender (the sender's dispatch window).
6. Sequence numbers are unbounded in the protocol. They are only ever compared, and a new one is
   always larger than every live one, so :meth:`CreditSpec.canonicalize` renumbers them by rank
   per key (data independence); ``max_seq`` is the state constraint that keeps the model finite
   even without that reduction.
7. Consumer release frees all landed data of an epoch at once; a partial release is the same
   arithmetic on smaller numbers.
8. ``consumed_totals`` of a usage report are omitted: no receiver decision depends on them
   (they feed metrics). Tokens are identified by their charge (a multiset), not by a handle.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from hashlib import blake2b
from itertools import pairwise
from marshal import dumps
from operator import add, sub
from typing import Any, NamedTuple

import attrs

__all__ = [
    "ACTIVATION",
    "ACTIVE",
    "FENCING",
    "FRESH",
    "RECLAIMED",
    "REVIVED",
    "STALE",
    "UPDATE",
    "USAGE",
    "Activation",
    "Books",
    "CreditBounds",
    "CreditSpec",
    "CreditState",
    "Faults",
    "InvalidBounds",
    "Ledger",
    "Peer",
    "SpecInvariant",
    "SpecStep",
    "SpecWitness",
    "Update",
    "Usage",
]

Vec = tuple[int, ...]

# Book status (receiver, per sender and epoch).
ACTIVE = 0  # the sender's current epoch: grants and usage apply
FENCING = 1  # superseded by a reconnect: waits until its in-flight work landed or failed
RECLAIMED = 2  # fenced and reclaimed; kept only while landed data awaits the consumer
STATUS_NAMES = ("ACTIVE", "FENCING", "RECLAIMED")

# Ledger freshness (sender): RFC "Stale: stop new credit-gated dispatch".
FRESH = 0
STALE = 1
REVIVED = 2  # was stale, revived by a newer update (the mark makes the rule checkable)
FRESHNESS_NAMES = ("FRESH", "STALE", "REVIVED")

# Message kinds (first field, so messages of different kinds sort and never compare equal).
ACTIVATION = 0
UPDATE = 1
USAGE = 2


class InvalidBounds(ValueError):
    """A model configuration that cannot describe a finite, meaningful model."""


# --------------------------------------------------------------------------------------------
# State
# --------------------------------------------------------------------------------------------


class Activation(NamedTuple):
    """Receiver → sender: use (session, epoch) from now on (``CapabilityActivation``)."""

    kind: int
    session: int
    epoch: int


class Update(NamedTuple):
    """Receiver → sender: the full cumulative grant vector of a key (``ReceiverCreditUpdate``)."""

    kind: int
    session: int
    epoch: int
    seq: int
    grants: Vec


class Usage(NamedTuple):
    """Sender → receiver: cumulative returned totals and pending demand (``SenderCreditUsage``).

    ``demand`` is ``0`` (none) or ``1 + i`` for the charge vector ``charges[i]``.
    """

    kind: int
    session: int
    epoch: int
    seq: int
    returned: Vec
    demand: int


Message = Activation | Update | Usage
Bag = tuple[tuple[Any, int], ...]  # sorted (message, copies) pairs, copies >= 1


class Ledger(NamedTuple):
    """The sender's ledger entry (SEMANTICS §6). ``session == 0``: no entry (fresh process)."""

    session: int
    epoch: int
    last_seq: int  # last accepted update sequence; 0 = no update yet
    usage_seq: int  # last usage report sequence sent
    freshness: int  # FRESH / STALE / REVIVED
    stale_at: int  # last_seq when the entry last became stale
    grant_total: Vec
    consumed: Vec
    returned: Vec
    tokens: tuple[int, ...]  # sorted charge indices of RESERVED tokens of this entry
    # History variable: the RESERVED tokens the entry held when it last became STALE and still
    # holds (always () unless STALE), so "a stale sender never reserves" is a state predicate.
    stale_tokens: tuple[int, ...] = ()


class Books(NamedTuple):
    """The receiver's books for one (sender, epoch) of the current session (SEMANTICS §8)."""

    epoch: int
    status: int  # ACTIVE / FENCING / RECLAIMED
    granted: Vec
    released: Vec  # freed by the receiver's consumer (landed data consumed)
    reclaimed: Vec  # freed from returns (live epoch) or after the fence (old epoch)
    landed: Vec  # committed work that arrived
    pushed_seq: int  # last published update sequence (ACTIVE only)
    usage_seq: int  # last accepted usage sequence (ACTIVE only)
    demand: int  # pending demand: 0 or 1 + charge index (ACTIVE only)


InFlight = tuple[int, int, int]  # (session, epoch, charge index) of committed, unlanded work


class Peer(NamedTuple):
    """Everything about one sender: its ledger, the receiver's view of it, its traffic."""

    ledger: Ledger
    epoch: int  # the receiver's current epoch for this sender
    books: tuple[Books, ...]  # sorted by epoch; the current epoch's books are last
    inflight: tuple[InFlight, ...]  # sorted
    to_sender: Bag
    to_receiver: Bag


class Faults(NamedTuple):
    """Fault budget used so far."""

    duplications: int
    losses: int
    sender_restarts: int
    receiver_restarts: int
    stale: int
    regressions: int


class CreditState(NamedTuple):
    """The whole model: the receiver's session, one :class:`Peer` per sender, faults used."""

    session: int
    peers: tuple[Peer, ...]
    faults: Faults


# Structural copies of ``tent_models.model_api.Step`` / ``Invariant`` / ``Witness`` (the spec
# imports nothing from tent_models). They have the same fields, so the checker reads them the
# same way; the spec's method signatures say ``Any`` for their elements because the Protocol
# names the checker's own (nominal) NamedTuple classes.
class SpecStep(NamedTuple):
    action: str
    args: tuple[Hashable, ...]
    state: Any


class SpecInvariant(NamedTuple):
    name: str
    cites: str
    holds: Callable[[Any], bool]


class SpecWitness(NamedTuple):
    name: str
    holds: Callable[[Any], bool]


# --------------------------------------------------------------------------------------------
# Bounds
# --------------------------------------------------------------------------------------------


def _positive(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 1:
        raise InvalidBounds(f"{attr.name} must be an int >= 1, got {value!r}")


def _non_negative(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 0:
        raise InvalidBounds(f"{attr.name} must be an int >= 0, got {value!r}")


@attrs.frozen(kw_only=True)
class CreditBounds:
    """The finite instance of the credit model: sizes, fault budgets and counter caps.

    Raises :class:`InvalidBounds` on construction when a field is out of range or the charge
    vectors do not match the number of resources.
    """

    senders: int = attrs.field(validator=_positive)
    capacity: Vec = attrs.field()  # per resource; len(capacity) = number of resources
    charges: tuple[Vec, ...] = attrs.field()  # the charge vectors a transfer can carry
    max_grant_total: int = attrs.field(validator=_positive)  # per (sender, epoch, resource)
    max_tokens: int = attrs.field(validator=_positive)  # live RESERVED tokens per sender
    max_epoch: int = attrs.field(validator=_positive)  # epochs per sender within a session
    max_messages: int = attrs.field(validator=_positive)  # messages in flight, in total
    max_duplications: int = attrs.field(default=0, validator=_non_negative)
    max_losses: int = attrs.field(default=0, validator=_non_negative)
    max_sender_restarts: int = attrs.field(default=0, validator=_non_negative)
    max_receiver_restarts: int = attrs.field(default=0, validator=_non_negative)
    max_stale: int = attrs.field(default=0, validator=_non_negative)
    max_regressions: int = attrs.field(default=0, validator=_non_negative)
    max_faults: int | None = attrs.field(default=None)  # faults of all kinds together
    max_seq: int = attrs.field(default=0, validator=_non_negative)  # 0 = max_messages + 4

    @max_faults.validator
    def _check_max_faults(self, attr: attrs.Attribute[int | None], value: int | None) -> None:
        if value is not None:
            _non_negative(self, attr, value)  # type: ignore[arg-type]

    @capacity.validator
    def _check_capacity(self, _attr: attrs.Attribute[Vec], value: Vec) -> None:
        if not isinstance(value, tuple) or not value:
            raise InvalidBounds("capacity must be a non-empty tuple (one entry per resource)")
        if any(type(c) is not int or c < 1 for c in value):
            raise InvalidBounds(f"every capacity must be an int >= 1, got {value!r}")

    @charges.validator
    def _check_charges(
        self, _attr: attrs.Attribute[tuple[Vec, ...]], value: tuple[Vec, ...]
    ) -> None:
        if not isinstance(value, tuple) or not value:
            raise InvalidBounds("charges must be a non-empty tuple of charge vectors")
        for charge in value:
            if not isinstance(charge, tuple) or len(charge) != len(self.capacity):
                raise InvalidBounds(f"charge {charge!r} must have one amount per resource")
            if any(type(a) is not int or a < 0 for a in charge) or not any(charge):
                raise InvalidBounds(f"charge {charge!r} must be non-negative and non-zero")
        if len(set(value)) != len(value):
            raise InvalidBounds("charges must be distinct")

    @property
    def resources(self) -> int:
        return len(self.capacity)

    @property
    def seq_cap(self) -> int:
        """The sequence state constraint (``max_seq``, or ``max_messages + 4`` when 0).

        With rank renumbering, a key's live sequences are 0, the sender's and the receiver's
        counters, a stale mark and one per message in flight, so the default is never reached.
        """
        return self.max_seq or self.max_messages + 4


# --------------------------------------------------------------------------------------------
# Small helpers on vectors and bags
# --------------------------------------------------------------------------------------------


def _vadd(a: Vec, b: Vec) -> Vec:
    return tuple(map(add, a, b))


def _vsub(a: Vec, b: Vec) -> Vec:
    return tuple(map(sub, a, b))


def _vle(a: Vec, b: Vec) -> bool:
    """``a <= b`` in every component."""
    return all(map(int.__le__, a, b))


def _bag_add(bag: Bag, msg: Message) -> Bag:
    for i, (m, n) in enumerate(bag):
        if m == msg:
            return (*bag[:i], (m, n + 1), *bag[i + 1 :])
    return tuple(sorted((*bag, (msg, 1))))


def _bag_remove(bag: Bag, msg: Message) -> Bag:
    for i, (m, n) in enumerate(bag):
        if m == msg:
            if n == 1:
                return (*bag[:i], *bag[i + 1 :])
            return (*bag[:i], (m, n - 1), *bag[i + 1 :])
    raise AssertionError("guarded: the message is in the bag")  # pragma: no cover


def _bag_count(bag: Bag, msg: object) -> int:
    for m, n in bag:
        if m == msg:
            return n
    return 0


def _insert_sorted(items: tuple[Any, ...], item: Any) -> tuple[Any, ...]:
    return tuple(sorted((*items, item)))


def _remove_one(items: tuple[Any, ...], item: Any) -> tuple[Any, ...]:
    i = items.index(item)
    return items[:i] + items[i + 1 :]


def _drop(items: tuple[Any, ...], item: Any) -> tuple[Any, ...]:
    """``items`` without one ``item`` (unchanged when absent)."""
    return _remove_one(items, item) if item in items else items


def _in_flight_messages(state: CreditState) -> int:
    return sum(n for p in state.peers for bag in (p.to_sender, p.to_receiver) for _, n in bag)


# --------------------------------------------------------------------------------------------
# The spec
# --------------------------------------------------------------------------------------------

_CHARGE_ACTIONS = ("reserve", "commit", "rollback", "return_unused")
_ACTIONS = (
    "grant",
    "push_update",
    "send_activation",
    "report_usage",
    "deliver",
    "duplicate",
    "lose",
    "reserve",
    "commit",
    "rollback",
    "return_unused",
    "data_lands",
    "fail_inflight",
    "consumer_release",
    "reclaim_after_fence",
    "become_stale",
    "sender_restart",
    "receiver_restart",
    "publish_regressed",
)
_CACHE_LIMIT = 1 << 20  # memo entries before a memo table is cleared

# Guard kinds: what a conjunct of an action's guard is for (the guard ablation reads them).
RULE = "rule"  # a protocol rule (RFC / SEMANTICS): the behaviour it forbids is wrong
REDUCTION = "reduction"  # a model reduction: fewer interleavings, the same behaviours
BOUND = "bound"  # a model bound of CreditBounds: keeps the state space finite
BUDGET = "budget"  # a fault budget of CreditBounds
GUARD_KINDS = (RULE, REDUCTION, BOUND, BUDGET)


class Guard(NamedTuple):
    """One named conjunct of an action's guard: ``check(state, *args)`` returns ``None`` when
    it holds, else the reason in words (what ``explain`` says)."""

    name: str
    kind: str
    check: str  # the CreditSpec method


# The guard of each action is the conjunction of its rows, evaluated in order (the first
# failing row is the reason). A reviewer reads an action's guard here; the methods hold one
# condition each, beside the action's effect.
_ROOM = Guard("message_room", BOUND, "_message_room")
_PUSH_SEQ = Guard("max_seq", BOUND, "_push_seq_within_cap")
_ANY_FAULT = Guard("max_faults", BUDGET, "_any_fault_left")
_IN_FLIGHT = Guard("message_in_flight", RULE, "_message_in_flight")
_WORK = Guard("work_in_flight", RULE, "_work_in_flight")
_TOKEN = (Guard("token_reserved", RULE, "_token_reserved"),)
GUARDS: Mapping[str, tuple[Guard, ...]] = {
    "grant": (
        Guard("demand_pending", RULE, "_demand_pending"),
        Guard("free_covers_demand", RULE, "_free_covers_demand"),
        Guard("max_grant_total", BOUND, "_grant_within_bound"),
        _ROOM,
        _PUSH_SEQ,
    ),
    "push_update": (Guard("refresh_due", REDUCTION, "_refresh_due"), _ROOM, _PUSH_SEQ),
    "send_activation": (
        Guard("sender_off_live_key", REDUCTION, "_sender_off_live_key"),
        _ROOM,
        Guard("activation_not_in_flight", REDUCTION, "_activation_not_in_flight"),
    ),
    "report_usage": (
        Guard("sender_has_entry", RULE, "_sender_has_entry"),
        _ROOM,
        Guard("max_seq", BOUND, "_usage_seq_within_cap"),
        Guard("demand_uncovered", REDUCTION, "_demand_uncovered"),
        Guard("something_to_report", REDUCTION, "_something_to_report"),
        Guard("report_due", REDUCTION, "_report_due"),
    ),
    "deliver": (_IN_FLIGHT,),
    "duplicate": (
        Guard("max_duplications", BUDGET, "_duplication_left"),
        _ANY_FAULT,
        _ROOM,
        _IN_FLIGHT,
    ),
    "lose": (Guard("max_losses", BUDGET, "_loss_left"), _ANY_FAULT, _IN_FLIGHT),
    "reserve": (
        Guard("entry_has_update", RULE, "_entry_has_update"),
        Guard("entry_not_stale", RULE, "_entry_not_stale"),
        Guard("max_tokens", BOUND, "_tokens_within_bound"),
        Guard("credit_covers_charge", RULE, "_credit_covers_charge"),
    ),
    "commit": _TOKEN,
    "rollback": _TOKEN,
    "return_unused": (
        Guard("sender_has_entry", RULE, "_sender_has_entry"),
        Guard("available_covers_return", RULE, "_available_covers_return"),
    ),
    "data_lands": (
        _WORK,
        Guard("work_of_live_session", RULE, "_work_of_live_session"),
        Guard("work_epoch_open", RULE, "_work_epoch_open"),
    ),
    "fail_inflight": (_WORK, Guard("work_epoch_not_live", RULE, "_work_epoch_not_live")),
    "consumer_release": (
        Guard("books_exist", RULE, "_books_exist"),
        Guard("landed_awaits_consumer", RULE, "_landed_awaits_consumer"),
    ),
    "reclaim_after_fence": (
        Guard("epoch_fencing", RULE, "_epoch_fencing"),
        Guard("epoch_work_settled", RULE, "_epoch_work_settled"),
    ),
    "become_stale": (
        Guard("max_stale", BUDGET, "_stale_left"),
        _ANY_FAULT,
        Guard("entry_live_and_fresh", RULE, "_entry_live_and_fresh"),
    ),
    "sender_restart": (
        Guard("max_sender_restarts", BUDGET, "_sender_restart_left"),
        _ANY_FAULT,
        Guard("max_epoch", BOUND, "_epoch_within_bound"),
    ),
    "receiver_restart": (
        Guard("max_receiver_restarts", BUDGET, "_receiver_restart_left"),
        _ANY_FAULT,
    ),
    "publish_regressed": (
        Guard("max_regressions", BUDGET, "_regression_left"),
        _ANY_FAULT,
        Guard("holds_live_grant", RULE, "_holds_live_grant"),
        _ROOM,
        _PUSH_SEQ,
    ),
}
"""Action name -> the conjuncts of its guard, in evaluation order."""

# One memoised step of a sender: (action, arguments after the sender index, the sender's new
# Peer, the new fault counts). See "Memoisation" in the CreditSpec docstring.
_SenderStep = tuple[str, tuple[Hashable, ...], Peer, Faults]
# The same step for ``fingerprinted_successors``: (action, full arguments, the sender's new Peer
# renumbered and interned as ``canonicalize`` would, the new fault counts, and the partial
# fingerprints h(session, new faults) + h(slot, new Peer) for slot 0 and slot 1).
_CanonicalStep = tuple[str, tuple[Hashable, ...], Peer, Faults, int, int]
# (messages in the peer's bags, outstanding grant of its books, sequences within seq_cap,
# its fingerprint digest in each sender slot): see CreditSpec._summary.
_PeerSummary = tuple[int, Vec, bool, tuple[int, ...]]
_MASK64 = (1 << 64) - 1


def _digest64(value: tuple[Any, ...]) -> int:
    """blake2b-64 of ``marshal.dumps(value, 2)`` as an unsigned int (format 2: no
    back-references, so equal values give equal bytes)."""
    return int.from_bytes(blake2b(dumps(value, 2), digest_size=8).digest(), "little")


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    """Store ``value`` in a memo table, clearing the table first when it is full."""
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[key] = value


_ARITY = {
    "grant": 1,
    "push_update": 1,
    "send_activation": 1,
    "report_usage": 2,
    "deliver": 2,
    "duplicate": 2,
    "lose": 2,
    "reserve": 2,
    "commit": 2,
    "rollback": 2,
    "return_unused": 2,
    "data_lands": 2,
    "fail_inflight": 2,
    "consumer_release": 2,
    "reclaim_after_fence": 2,
    "become_stale": 1,
    "sender_restart": 1,
    "receiver_restart": 0,
    "publish_regressed": 2,
}
assert tuple(_ARITY) == _ACTIONS
_FAULTS = frozenset(
    {
        "duplicate",
        "lose",
        "become_stale",
        "sender_restart",
        "receiver_restart",
        "publish_regressed",
    }
)


class CreditSpec:
    """The credit protocol as a finite transition system (structurally a ``SpecModel``).

    An action's guard is the conjunction of its rows in :data:`GUARDS` (``_g_<action>(state,
    *args)`` evaluates them: ``None`` when enabled, else the first failing conjunct in words);
    effects are ``_e_<action>(state, *args)``. Known-bad variants (:mod:`tent_spec.variants`)
    subclass this and remove a conjunct (``WITHOUT``), or override one guard or effect each.

    Two class attributes exist for the guard ablation (``tent_models.ablation``) and variants:
    ``WITHOUT`` names ``(action, conjunct)`` pairs left out of the guards, and
    ``PRUNE_CANDIDATES = False`` makes ``_instances`` yield every instance of every action
    instead of pruning by cheap necessary conditions (which restate some conjuncts, so a removed
    conjunct would otherwise stay in force).

    Memoisation (speed only; the guards and effects stay the single authority):

    1. *Sender locality.* Every action of sender ``s`` reads only the receiver's session, the
       faults used, whether the bag has room, the free capacity (``grant`` only) and
       ``peers[s]``, and changes only ``peers[s]`` and the fault counts (no component names
       another sender). ``successors`` therefore memoises each sender's steps per such
       context (``_sender_steps``), computed by the very guards and effects on the first
       state that has it; a step that touches anything else raises ``AssertionError`` there.
       ``receiver_restart`` (it changes every sender) is evaluated directly.
    2. The per-sender body of each invariant reads the session, the room in the bag and
       ``peers[s]``; the names of the bodies that fail are memoised per such context and per
       state (``_failed_checks``), so the ten invariants of a new state cost one lookup.
    3. ``canonicalize`` and ``pack`` memoise per sender; the outstanding grant of a sender's
       books (for ``free_capacity``) too.

    Memo keys use ``id(peer)``: canonical states share their ``Peer`` objects (the
    ``canonicalize`` memo returns the same object for the same context), so a key costs a few
    ints to hash instead of the whole nested tuple. tests/models/test_spec_fastpath.py checks
    the memoised results against direct evaluation.
    """

    WITHOUT: frozenset[tuple[str, str]] = frozenset()
    PRUNE_CANDIDATES: bool = True
    # The guards, one per action, generated from GUARDS below the class (overridable).
    _g_grant: Callable[..., str | None]
    _g_push_update: Callable[..., str | None]
    _g_send_activation: Callable[..., str | None]
    _g_report_usage: Callable[..., str | None]
    _g_deliver: Callable[..., str | None]
    _g_duplicate: Callable[..., str | None]
    _g_lose: Callable[..., str | None]
    _g_reserve: Callable[..., str | None]
    _g_commit: Callable[..., str | None]
    _g_rollback: Callable[..., str | None]
    _g_return_unused: Callable[..., str | None]
    _g_data_lands: Callable[..., str | None]
    _g_fail_inflight: Callable[..., str | None]
    _g_consumer_release: Callable[..., str | None]
    _g_reclaim_after_fence: Callable[..., str | None]
    _g_become_stale: Callable[..., str | None]
    _g_sender_restart: Callable[..., str | None]
    _g_receiver_restart: Callable[..., str | None]
    _g_publish_regressed: Callable[..., str | None]

    def __init__(self, bounds: CreditBounds, *, name: str = "credit") -> None:
        self.bounds = bounds
        self.name = name
        self._zero: Vec = (0,) * bounds.resources
        self._charges = bounds.charges
        self._capacity = bounds.capacity
        self._faults_interned: dict[Faults, Faults] = {}
        self._restart_cache: dict[tuple[int, int], tuple[Peer, Peer]] = {}
        self._restart_context: dict[tuple[int, int], tuple[Faults, int, Faults]] = {}
        self._facts_for: CreditState | None = None
        self._facts_value: tuple[int, Vec, bool] = (0, self._zero, True)
        # Per-sender memo tables (see "Memoisation" in the class docstring). Keys start with
        # ``id(peer)``; each entry holds the peer itself, so the id cannot be reused while the
        # entry lives, and a hit is confirmed with ``entry[0] is peer``.
        self._canon_cache: dict[tuple[int, int], tuple[Peer, Peer]] = {}
        self._pack_cache: dict[int, tuple[Peer, tuple[Any, ...]]] = {}
        self._steps_cache: dict[tuple[Any, ...], tuple[Peer, list[_SenderStep]]] = {}
        self._check_cache: dict[tuple[int, int, bool], tuple[Peer, frozenset[str]]] = {}
        self._failed_for: CreditState | None = None
        self._failed_value: frozenset[str] = frozenset()
        self._summary_cache: dict[int, tuple[Peer, _PeerSummary]] = {}
        self._prefix_cache: dict[tuple[int, int], tuple[Faults, int]] = {}
        self._canon_steps_cache: dict[tuple[Any, ...], tuple[Peer, list[_CanonicalStep]]] = {}
        self._interned: dict[Peer, Peer] = {}
        # Per-sender invariant bodies by invariant name (see ``_every_sender``).
        self._sender_checks: dict[str, Callable[[CreditState, int], bool]] = {
            "capacity": self._capacity_at,
            "generation_fenced": self._generation_fenced_at,
            "full_charge": self._full_charge_at,
            "no_overdraw": self._no_overdraw_at,
            "grant_within_receiver": self._grant_within_receiver_at,
            "old_update_harmless": self._old_update_harmless_at,
            "stale_revival": self._stale_revival_at,
            "stale_never_reserves": self._stale_never_reserves_at,
            "control_unblocked": self._control_unblocked_at,
            "claims_covered": self._claims_covered_at,
        }
        # Bound guard/effect methods by action name (subclasses' overrides included).
        unknown = self.WITHOUT - {(a, g.name) for a, rows in GUARDS.items() for g in rows}
        if unknown:
            raise InvalidBounds(f"WITHOUT names no guard conjunct: {sorted(unknown)}")
        self._conjuncts: dict[str, tuple[Callable[..., str | None], ...]] = {
            a: tuple(getattr(self, g.check) for g in rows if (a, g.name) not in self.WITHOUT)
            for a, rows in GUARDS.items()
        }
        self._guard: dict[str, Callable[..., str | None]] = {
            a: getattr(self, "_g_" + a) for a in _ACTIONS
        }
        self._effect: dict[str, Callable[..., CreditState]] = {
            a: getattr(self, "_e_" + a) for a in _ACTIONS
        }

    # ---- initial state ------------------------------------------------------------------

    def _fresh_books(self, epoch: int) -> Books:
        z = self._zero
        return Books(epoch, ACTIVE, z, z, z, z, 0, 0, 0)

    def _fresh_ledger(self, session: int, epoch: int) -> Ledger:
        z = self._zero
        return Ledger(session, epoch, 0, 0, FRESH, 0, z, z, z, ())

    def initial_states(self) -> list[CreditState]:
        """Session 1, every sender activated at epoch 1 with no grant yet, nothing in flight."""
        peer = Peer(self._fresh_ledger(1, 1), 1, (self._fresh_books(1),), (), (), ())
        return [CreditState(1, (peer,) * self.bounds.senders, Faults(0, 0, 0, 0, 0, 0))]

    # ---- derived quantities ------------------------------------------------------------

    def free_capacity(self, state: CreditState) -> Vec:
        """Capacity minus Σ (granted − released − reclaimed) over all books (SEMANTICS §8)."""
        return self._facts(state)[1]

    def _facts(self, state: CreditState) -> tuple[int, Vec, bool]:
        """(messages in flight, free capacity, every sequence within ``seq_cap``) from the
        per-peer summaries; kept for the last state asked about (a new state is checked and
        bounded right after it is found, then expanded)."""
        if state is self._facts_for:
            return self._facts_value
        cache = self._summary_cache
        messages = 0
        free = self._capacity
        seq_ok = True
        for p in state.peers:
            entry = cache.get(id(p))
            count, outstanding, ok, _digests = (
                entry[1] if entry is not None and entry[0] is p else self._summary(p)
            )
            messages += count
            free = _vsub(free, outstanding)
            seq_ok = seq_ok and ok
        facts = (messages, free, seq_ok)
        self._facts_for, self._facts_value = state, facts
        return facts

    def _summary(self, peer: Peer) -> _PeerSummary:
        """What the hot loop reads of one sender, computed once per ``Peer`` object: messages
        in its two bags, its books' outstanding grant, whether its sequences are within
        ``seq_cap``, and its digest ``h(slot, peer)`` for every slot (``fingerprint``)."""
        entry = self._summary_cache.get(id(peer))
        if entry is not None and entry[0] is peer:
            return entry[1]
        outstanding = self._zero
        for b in peer.books:
            outstanding = _vadd(outstanding, _vsub(_vsub(b.granted, b.released), b.reclaimed))
        packed = _pack_peer(peer)
        summary = (
            sum(n for bag in (peer.to_sender, peer.to_receiver) for _, n in bag),
            outstanding,
            self._sequences_within_cap(peer),
            tuple(_digest64((slot, packed)) for slot in range(self.bounds.senders)),
        )
        _remember(self._summary_cache, id(peer), (peer, summary))
        return summary

    @staticmethod
    def available(ledger: Ledger) -> Vec:
        """``grant_total − consumed − returned`` per resource (SEMANTICS §6)."""
        return tuple(map(sub, map(sub, ledger.grant_total, ledger.consumed), ledger.returned))

    def _charge_sum(self, indices: Sequence[int]) -> Vec:
        total = self._zero
        for i in indices:
            total = _vadd(total, self._charges[i])
        return total

    def _inflight_sum(self, peer: Peer, session: int, epoch: int) -> Vec:
        return self._charge_sum([c for s, e, c in peer.inflight if s == session and e == epoch])

    @staticmethod
    def _books_for(peer: Peer, epoch: int) -> Books | None:
        for b in peer.books:
            if b.epoch == epoch:
                return b
        return None

    def _room(self, state: CreditState) -> bool:
        """Another message fits the bag bound (``_in_flight_messages`` from ``_facts``)."""
        return self._facts(state)[0] < self.bounds.max_messages

    @staticmethod
    def _with_peer(state: CreditState, s: int, peer: Peer) -> CreditState:
        peers = state.peers
        return CreditState(state.session, (*peers[:s], peer, *peers[s + 1 :]), state.faults)

    @staticmethod
    def _replace_books(peer: Peer, old: Books, new: Books | None) -> Peer:
        books = tuple(b for b in peer.books if b is not old)
        if new is not None:
            books = tuple(sorted((*books, new)))
        return peer._replace(books=books)

    def _fault_left(self, state: CreditState) -> bool:
        """The overall fault budget (``max_faults``) allows one more fault."""
        cap = self.bounds.max_faults
        return cap is None or sum(state.faults) < cap

    def _sender_ok(self, state: CreditState, s: object) -> bool:
        return type(s) is int and 0 <= s < len(state.peers)

    def _charge_ok(self, c: object) -> bool:
        return type(c) is int and 0 <= c < len(self._charges)

    # ---- receiver: grant, publish, activate --------------------------------------------

    def _demand_pending(self, state: CreditState, s: int) -> str | None:
        if not state.peers[s].books[-1].demand:
            return "no pending demand from this sender's current epoch"
        return None

    def _free_covers_demand(self, state: CreditState, s: int) -> str | None:
        want = self._charges[state.peers[s].books[-1].demand - 1]
        if not _vle(want, self.free_capacity(state)):
            return "free capacity does not cover the demand (all-or-nothing)"
        return None

    def _grant_within_bound(self, state: CreditState, s: int) -> str | None:
        b = state.peers[s].books[-1]
        want = self._charges[b.demand - 1]
        if any(g + w > self.bounds.max_grant_total for g, w in zip(b.granted, want, strict=True)):
            return "bound: max_grant_total reached"
        return None

    def _e_grant(self, state: CreditState, s: int) -> CreditState:
        """Carve the demanded vector from free capacity and publish the new cumulative totals.

        SEMANTICS §8: grants come from free capacity on demand, all-or-nothing. RFC concurrency
        rule 4: "Grant publication happens after reservation is committed" - one step here.
        """
        peer = state.peers[s]
        b = peer.books[-1]
        granted = _vadd(b.granted, self._charges[b.demand - 1])
        return self._publish(state, s, b._replace(granted=granted, demand=0), granted)

    def _message_room(self, state: CreditState, *_args: Any) -> str | None:
        if not self._room(state):
            return "bound: max_messages in flight"
        return None

    def _push_seq_within_cap(self, state: CreditState, s: int, *_args: Any) -> str | None:
        if state.peers[s].books[-1].pushed_seq >= self.bounds.seq_cap:
            return "bound: max_seq reached"
        return None

    def _publish(self, state: CreditState, s: int, b: Books, grants: Vec) -> CreditState:
        """Send ``Update(next sequence, grants)`` for the live key whose books become ``b``."""
        peer = state.peers[s]
        seq = b.pushed_seq + 1
        msg = Update(UPDATE, state.session, b.epoch, seq, grants)
        peer = peer._replace(
            books=(*peer.books[:-1], b._replace(pushed_seq=seq)),
            to_sender=_bag_add(peer.to_sender, msg),
        )
        return self._with_peer(state, s, peer)

    def _refresh_due(self, state: CreditState, s: int) -> str | None:
        peer = state.peers[s]
        b = peer.books[-1]
        for m, _n in peer.to_sender:
            if m.kind == UPDATE and m.session == state.session and m.epoch == b.epoch:
                # Model reduction: the refresh interval exceeds the one-way delay; old copies
                # still arrive late through `duplicate`, and grants publish while one is pending.
                return "an update of the live key is still in flight (refresh timer not due)"
        return None

    def _e_push_update(self, state: CreditState, s: int) -> CreditState:
        # DESIGN: the refresh/heartbeat timer re-publishes the FULL cumulative vector.
        b = state.peers[s].books[-1]
        return self._publish(state, s, b, b.granted)

    def _sender_off_live_key(self, state: CreditState, s: int) -> str | None:
        peer = state.peers[s]
        if (peer.ledger.session, peer.ledger.epoch) == (state.session, peer.epoch):
            # Model reduction: a redundant activation is a no-op wherever it arrives (its key
            # is never newer than the sender's), so it is not sent.
            return "the sender already runs on the live key"
        return None

    def _activation_not_in_flight(self, state: CreditState, s: int) -> str | None:
        peer = state.peers[s]
        if _bag_count(peer.to_sender, Activation(ACTIVATION, state.session, peer.epoch)):
            return "this activation is already in flight (a second copy is a duplicate fault)"
        return None

    def _e_send_activation(self, state: CreditState, s: int) -> CreditState:
        # SEMANTICS §7: the receiver chooses the epoch and carries it in the activation.
        peer = state.peers[s]
        msg = Activation(ACTIVATION, state.session, peer.epoch)
        return self._with_peer(state, s, peer._replace(to_sender=_bag_add(peer.to_sender, msg)))

    # ---- sender: usage reports, reserve / commit / rollback / return --------------------

    # report_usage: RFC "Control traffic never consumes data credit" - no credit conjunct.
    def _sender_has_entry(self, state: CreditState, s: int, *_args: Any) -> str | None:
        if not state.peers[s].ledger.session:
            return "the sender has no ledger entry (not activated since its restart)"
        return None

    def _usage_seq_within_cap(self, state: CreditState, s: int, _demand: int) -> str | None:
        if state.peers[s].ledger.usage_seq >= self.bounds.seq_cap:
            return "bound: max_seq reached"
        return None

    def _demand_uncovered(self, state: CreditState, s: int, demand: int) -> str | None:
        led = state.peers[s].ledger
        if demand and _vle(self._charges[demand - 1], self.available(led)):
            return "a demand is reported only for a charge the available credit cannot cover"
        return None

    def _something_to_report(self, state: CreditState, s: int, demand: int) -> str | None:
        if not demand and not any(state.peers[s].ledger.returned):
            # Model reduction: without a demand, a report only matters for returns.
            return "nothing to report: no demand and nothing returned"
        return None

    def _report_due(self, state: CreditState, s: int, _demand: int) -> str | None:
        led = state.peers[s].ledger
        for m, _n in state.peers[s].to_receiver:
            if (m.session, m.epoch) == (led.session, led.epoch):
                # Model reduction: the report interval exceeds the one-way delay (old copies
                # still arrive late through `duplicate`).
                return "a usage report of this entry is still in flight (report timer not due)"
        return None

    def _e_report_usage(self, state: CreditState, s: int, demand: int) -> CreditState:
        peer = state.peers[s]
        led = peer.ledger
        seq = led.usage_seq + 1
        msg = Usage(USAGE, led.session, led.epoch, seq, led.returned, demand)
        peer = peer._replace(
            ledger=led._replace(usage_seq=seq), to_receiver=_bag_add(peer.to_receiver, msg)
        )
        return self._with_peer(state, s, peer)

    def _entry_has_update(self, state: CreditState, s: int, _c: int) -> str | None:
        led = state.peers[s].ledger
        if not led.session or not led.last_seq:
            return "no ledger entry or no update applied yet (SEMANTICS §6: IE)"
        return None

    def _entry_not_stale(self, state: CreditState, s: int, _c: int) -> str | None:
        if state.peers[s].ledger.freshness == STALE:
            return "the entry is stale: no new credit-gated dispatch (RFC state machine rule 2)"
        return None

    def _tokens_within_bound(self, state: CreditState, s: int, _c: int) -> str | None:
        if len(state.peers[s].ledger.tokens) >= self.bounds.max_tokens:
            return "bound: max_tokens live reservations"
        return None

    def _credit_covers_charge(self, state: CreditState, s: int, c: int) -> str | None:
        if not _vle(self._charges[c], self.available(state.peers[s].ledger)):
            return "insufficient credit in some charged resource (nothing is reserved)"
        return None

    def _e_reserve(self, state: CreditState, s: int, c: int) -> CreditState:
        # RFC "Atomic multi-resource eligibility": the whole charge vector or nothing.
        peer = state.peers[s]
        led = peer.ledger
        led = led._replace(
            consumed=_vadd(led.consumed, self._charges[c]), tokens=_insert_sorted(led.tokens, c)
        )
        return self._with_peer(state, s, peer._replace(ledger=led))

    def _token_reserved(self, state: CreditState, s: int, c: int) -> str | None:
        if c not in state.peers[s].ledger.tokens:
            return "no RESERVED token with this charge in the sender's current entry"
        return None

    def _e_commit(self, state: CreditState, s: int, c: int) -> CreditState:
        # The token goes to the transport: RESERVED -> COMMITTED, now in flight to the receiver.
        peer = state.peers[s]
        led = peer.ledger
        peer = peer._replace(
            ledger=led._replace(
                tokens=_remove_one(led.tokens, c), stale_tokens=_drop(led.stale_tokens, c)
            ),
            inflight=_insert_sorted(peer.inflight, (led.session, led.epoch, c)),
        )
        return self._with_peer(state, s, peer)

    def _e_rollback(self, state: CreditState, s: int, c: int) -> CreditState:
        # SEMANTICS §6: rollback subtracts exactly what was reserved (work never handed off).
        peer = state.peers[s]
        led = peer.ledger
        led = led._replace(
            consumed=_vsub(led.consumed, self._charges[c]),
            tokens=_remove_one(led.tokens, c),
            stale_tokens=_drop(led.stale_tokens, c),
        )
        return self._with_peer(state, s, peer._replace(ledger=led))

    def _available_covers_return(self, state: CreditState, s: int, c: int) -> str | None:
        if not _vle(self._charges[c], self.available(state.peers[s].ledger)):
            return "cannot return more than is available (SEMANTICS §6)"
        return None

    def _e_return_unused(self, state: CreditState, s: int, c: int) -> CreditState:
        peer = state.peers[s]
        led = peer.ledger
        led = led._replace(returned=_vadd(led.returned, self._charges[c]))
        return self._with_peer(state, s, peer._replace(ledger=led))

    # ---- delivery and network faults ---------------------------------------------------

    def _message_in_flight(self, state: CreditState, s: int, msg: Any) -> str | None:
        peer = state.peers[s]
        if not (_bag_count(peer.to_sender, msg) or _bag_count(peer.to_receiver, msg)):
            return "the message is not in flight"
        return None  # RFC: control delivery is never gated by data credit

    def _e_deliver(self, state: CreditState, s: int, msg: Any) -> CreditState:
        peer = state.peers[s]
        if msg.kind == USAGE:
            peer = peer._replace(to_receiver=_bag_remove(peer.to_receiver, msg))
            return self._with_peer(state, s, self._receive_usage(state, peer, msg))
        peer = peer._replace(to_sender=_bag_remove(peer.to_sender, msg))
        if msg.kind == UPDATE:
            led = self._apply_update(peer.ledger, msg)
        else:
            led = self._apply_activation(peer.ledger, msg)
        return self._with_peer(state, s, peer._replace(ledger=led))

    def _accepts_sequence(self, led: Ledger, seq: int) -> bool:
        # RFC: "sequence is newer than the last accepted update".
        return seq > led.last_seq

    def _accepts_totals(self, led: Ledger, grants: Vec) -> bool:
        # RFC: "every cumulative grant is non-decreasing"; SEMANTICS §6: and never below consumed.
        return _vle(led.grant_total, grants) and _vle(_vadd(led.consumed, led.returned), grants)

    def _new_grant_total(self, led: Ledger, grants: Vec) -> Vec:
        return grants  # absolute cumulative totals replace the old ones

    def _apply_update(self, led: Ledger, msg: Update) -> Ledger:
        """SEMANTICS §6 ``apply_update``: anything not matching the rule is a no-op."""
        if msg.session != led.session or msg.epoch != led.epoch:
            return led  # RFC: "session_id and epoch match the active peer session"
        if not self._accepts_sequence(led, msg.seq):
            return led  # RFC: "Duplicate and old updates become no-ops"
        if not self._accepts_totals(led, msg.grants):
            return led  # RFC rule 5: "decreasing cumulative total: reject the update"
        return led._replace(
            grant_total=self._new_grant_total(led, msg.grants),
            last_seq=msg.seq,
            freshness=REVIVED if led.freshness == STALE else led.freshness,
            stale_tokens=(),
        )

    def _apply_activation(self, led: Ledger, msg: Activation) -> Ledger:
        """A newer (session, epoch) starts a fresh entry: the epoch fence (SEMANTICS §6)."""
        if (msg.session, msg.epoch) <= (led.session, led.epoch):
            return led  # same key: no-op (no reset of consumption); older: ignored
        # Old RESERVED tokens die with the old entry: any operation on them is IE.
        return self._fresh_ledger(msg.session, msg.epoch)

    def _receive_usage(self, state: CreditState, peer: Peer, msg: Usage) -> Peer:
        """The receiver applies a newer usage report of a live key; anything else is a no-op."""
        b = peer.books[-1]
        if msg.session != state.session or msg.epoch != b.epoch or msg.seq <= b.usage_seq:
            return peer
        if not (_vle(b.reclaimed, msg.returned) and _vle(msg.returned, b.granted)):
            return peer  # cumulative returns never decrease and never exceed the grant
        # SEMANTICS §8: reclaim `returned − already reclaimed` (idempotent on replay).
        nb = b._replace(usage_seq=msg.seq, reclaimed=msg.returned, demand=msg.demand)
        return peer._replace(books=(*peer.books[:-1], nb))

    def _duplication_left(self, state: CreditState, *_args: Any) -> str | None:
        if state.faults.duplications >= self.bounds.max_duplications:
            return "fault budget: max_duplications used"
        return None

    def _any_fault_left(self, state: CreditState, *_args: Any) -> str | None:
        if not self._fault_left(state):
            return "fault budget: max_faults used"
        return None

    def _e_duplicate(self, state: CreditState, s: int, msg: Any) -> CreditState:
        peer = state.peers[s]
        if msg.kind == USAGE:
            peer = peer._replace(to_receiver=_bag_add(peer.to_receiver, msg))
        else:
            peer = peer._replace(to_sender=_bag_add(peer.to_sender, msg))
        f = state.faults
        state = state._replace(faults=f._replace(duplications=f.duplications + 1))
        return self._with_peer(state, s, peer)

    def _loss_left(self, state: CreditState, *_args: Any) -> str | None:
        if state.faults.losses >= self.bounds.max_losses:
            return "fault budget: max_losses used"
        return None

    def _e_lose(self, state: CreditState, s: int, msg: Any) -> CreditState:
        peer = state.peers[s]
        if msg.kind == USAGE:
            peer = peer._replace(to_receiver=_bag_remove(peer.to_receiver, msg))
        else:
            peer = peer._replace(to_sender=_bag_remove(peer.to_sender, msg))
        f = state.faults
        state = state._replace(faults=f._replace(losses=f.losses + 1))
        return self._with_peer(state, s, peer)

    # ---- in-flight work, consumer, fencing ---------------------------------------------

    def _work_in_flight(self, state: CreditState, s: int, item: Any) -> str | None:
        if item not in state.peers[s].inflight:
            return "no such in-flight work"
        return None

    def _work_of_live_session(self, state: CreditState, s: int, item: Any) -> str | None:
        if item[0] != state.session:
            return "work of a dead receiver session never lands (its QPs died with it)"
        return None

    def _work_epoch_open(self, state: CreditState, s: int, item: Any) -> str | None:
        b = self._books_for(state.peers[s], item[1])
        if b is None or b.status == RECLAIMED:
            return "the epoch was fenced and reclaimed: its QPs are closed"
        return None

    def _e_data_lands(self, state: CreditState, s: int, item: Any) -> CreditState:
        peer = state.peers[s]
        b = self._books_for(peer, item[1])
        assert b is not None  # guarded
        nb = b._replace(landed=_vadd(b.landed, self._charges[item[2]]))
        peer = self._replace_books(peer, b, nb)._replace(inflight=_remove_one(peer.inflight, item))
        return self._with_peer(state, s, peer)

    def _work_epoch_not_live(self, state: CreditState, s: int, item: Any) -> str | None:
        session, epoch, _c = item
        if session == state.session:
            b = self._books_for(state.peers[s], epoch)
            if b is not None and b.status == ACTIVE:
                return "work of a live epoch is not failed by fencing"
        return None

    def _e_fail_inflight(self, state: CreditState, s: int, item: Any) -> CreditState:
        # RFC rule 3: old QPs / in-flight work are "drained or failed" before reuse.
        peer = state.peers[s]
        return self._with_peer(state, s, peer._replace(inflight=_remove_one(peer.inflight, item)))

    def _books_exist(self, state: CreditState, s: int, epoch: int) -> str | None:
        if self._books_for(state.peers[s], epoch) is None:
            return "no books for this epoch"
        return None

    def _landed_awaits_consumer(self, state: CreditState, s: int, epoch: int) -> str | None:
        b = self._books_for(state.peers[s], epoch)
        if b is not None and b.landed == b.released:
            return "nothing landed awaits the consumer"
        return None

    def _e_consumer_release(self, state: CreditState, s: int, epoch: int) -> CreditState:
        # SEMANTICS §8 release: the receiver's own consumer says so, never a sender's message.
        peer = state.peers[s]
        b = self._books_for(peer, epoch)
        assert b is not None  # guarded
        nb: Books | None = b._replace(released=b.landed)
        if b.status == RECLAIMED:
            nb = None  # fully settled: granted == released + reclaimed
        return self._with_peer(state, s, self._replace_books(peer, b, nb))

    def _epoch_fencing(self, state: CreditState, s: int, epoch: int) -> str | None:
        b = self._books_for(state.peers[s], epoch)
        if b is None or b.status != FENCING:
            return "the epoch is not fencing"
        return None

    def _epoch_work_settled(self, state: CreditState, s: int, epoch: int) -> str | None:
        if any(e == epoch and ss == state.session for ss, e, _ in state.peers[s].inflight):
            return "in-flight work of the epoch has not landed or failed yet"
        return None

    def _e_reclaim_after_fence(self, state: CreditState, s: int, epoch: int) -> CreditState:
        # RFC: "do not reuse old target resources until old QPs/inflight work are fenced".
        peer = state.peers[s]
        b = self._books_for(peer, epoch)
        assert b is not None  # guarded
        nb: Books | None = b._replace(status=RECLAIMED, reclaimed=_vsub(b.granted, b.landed))
        if b.landed == b.released:
            nb = None
        return self._with_peer(state, s, self._replace_books(peer, b, nb))

    # ---- faults: staleness, restarts, a regressed publish ------------------------------

    def _stale_left(self, state: CreditState, s: int) -> str | None:
        if state.faults.stale >= self.bounds.max_stale:
            return "fault budget: max_stale used"
        return None

    def _entry_live_and_fresh(self, state: CreditState, s: int) -> str | None:
        led = state.peers[s].ledger
        if not led.session or led.freshness == STALE:
            return "no live ledger entry or already stale"
        return None

    def _e_become_stale(self, state: CreditState, s: int) -> CreditState:
        # SEMANTICS §7: TTL expiry or disconnect; a newer update of the same key revives it.
        peer = state.peers[s]
        led = peer.ledger
        led = led._replace(freshness=STALE, stale_at=led.last_seq, stale_tokens=led.tokens)
        f = state.faults
        state = state._replace(faults=f._replace(stale=f.stale + 1))
        return self._with_peer(state, s, peer._replace(ledger=led))

    def _sender_restart_left(self, state: CreditState, s: int) -> str | None:
        if state.faults.sender_restarts >= self.bounds.max_sender_restarts:
            return "fault budget: max_sender_restarts used"
        return None

    def _epoch_within_bound(self, state: CreditState, s: int) -> str | None:
        if state.peers[s].epoch >= self.bounds.max_epoch:
            return "bound: max_epoch reached for this sender"
        return None

    def _e_sender_restart(self, state: CreditState, s: int) -> CreditState:
        """The sender process restarts and reconnects; the receiver bumps its epoch.

        The new process has no ledger entry and a new control connection: messages still in
        flight to the old process go nowhere (its reports to the receiver may still arrive).
        The old epoch's books start fencing; their pushed sequence, usage sequence and demand
        are dropped (no update or grant goes to that epoch again).
        """
        peer = state.peers[s]
        b = peer.books[-1]
        fenced = b._replace(status=FENCING, pushed_seq=0, usage_seq=0, demand=0)
        epoch = peer.epoch + 1
        peer = peer._replace(
            ledger=self._fresh_ledger(0, 0),
            epoch=epoch,
            books=(*peer.books[:-1], fenced, self._fresh_books(epoch)),
            to_sender=(),
        )
        f = state.faults
        state = state._replace(faults=f._replace(sender_restarts=f.sender_restarts + 1))
        return self._with_peer(state, s, peer)

    def _receiver_restart_left(self, state: CreditState) -> str | None:
        if state.faults.receiver_restarts >= self.bounds.max_receiver_restarts:
            return "fault budget: max_receiver_restarts used"
        return None

    def _e_receiver_restart(self, state: CreditState) -> CreditState:
        """The receiver restarts with a new session id: its books and QPs are gone.

        Work and reports in flight to the old process can never reach the new one; they are
        dropped here (the transport fails them). Updates the old process sent may still arrive;
        senders keep their old-session entries until an activation reaches them.
        """
        session = state.session + 1
        books = (self._fresh_books(1),)
        peers = tuple(
            p._replace(
                epoch=1,
                books=books,
                inflight=tuple(i for i in p.inflight if i[0] == session),
                to_receiver=(),
            )
            for p in state.peers
        )
        f = state.faults
        return CreditState(session, peers, f._replace(receiver_restarts=f.receiver_restarts + 1))

    def _regression_left(self, state: CreditState, s: int, r: int) -> str | None:
        if state.faults.regressions >= self.bounds.max_regressions:
            return "fault budget: max_regressions used"
        return None

    def _holds_live_grant(self, state: CreditState, s: int, r: int) -> str | None:
        peer = state.peers[s]
        led = peer.ledger
        if (led.session, led.epoch) != (state.session, peer.epoch) or not led.grant_total[r]:
            return "the sender holds no accepted grant of this resource on the live key"
        return None

    def _e_publish_regressed(self, state: CreditState, s: int, r: int) -> CreditState:
        """A faulty receiver publishes, under its next sequence, a total for resource ``r`` one
        below what the sender already accepted (the other totals as granted).

        RFC rule 5: "decreasing cumulative total: reject the update". The sender must refuse it.
        """
        peer = state.peers[s]
        b = peer.books[-1]
        low = peer.ledger.grant_total[r] - 1
        grants = tuple(low if i == r else g for i, g in enumerate(b.granted))
        f = state.faults
        state = state._replace(faults=f._replace(regressions=f.regressions + 1))
        return self._publish(state, s, b, grants)

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
        """Every enabled instance of ``_instances(state)``, in that order, with its successor.

        Each sender's steps come from the ``_sender_steps`` memo (policy 1 of the class
        docstring); ``receiver_restart`` is evaluated directly.
        """
        session, peers, _faults = state
        room = self._room(state)
        for s in range(len(peers)):
            for action, rest, new_peer, new_faults in self._sender_steps(state, s, room):
                yield SpecStep(
                    action,
                    (s, *rest),
                    CreditState(session, (*peers[:s], new_peer, *peers[s + 1 :]), new_faults),
                )
        if (
            self._receiver_restart_candidate(state)
            and self._guard["receiver_restart"](state) is None
        ):
            yield SpecStep("receiver_restart", (), self._effect["receiver_restart"](state))

    def _sender_steps(self, state: CreditState, s: int, room: bool) -> list[_SenderStep]:
        """The enabled steps of sender ``s``, memoised per sender context.

        The context is (``peers[s]``, session, faults used, ``room`` = ``_room(state)``, and
        the free capacity when the sender's current books hold a demand, i.e. when ``grant``
        is a candidate). On a miss the steps are computed with the guards and effects on
        ``state``; raises ``AssertionError`` if an effect changes the session or another
        sender (the memo would then be unsound).
        """
        peer = state.peers[s]
        free = (
            self.free_capacity(state)
            if peer.books[-1].demand or not self.PRUNE_CANDIDATES
            else None
        )
        key = (id(peer), state.session, state.faults, room, free)
        entry = self._steps_cache.get(key)
        if entry is not None and entry[0] is peer:
            return entry[1]
        guard, effect = self._guard, self._effect
        steps: list[_SenderStep] = []
        for action, args in self._sender_instances(state, s):
            if guard[action](state, *args) is not None:
                continue
            nxt = effect[action](state, *args)
            others_kept = all(
                q is p
                for j, (q, p) in enumerate(zip(nxt.peers, state.peers, strict=True))
                if j != s
            )
            if nxt.session != state.session or not others_kept:
                raise AssertionError(f"{action}{args!r} is not local to sender {s}")
            steps.append((action, args[1:], nxt.peers[s], nxt.faults))
        _remember(self._steps_cache, key, (peer, steps))
        return steps

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

    def action_names(self) -> Sequence[str]:
        return _ACTIONS

    def unreachable_actions(self) -> frozenset[str]:
        """Actions that can never fire under these bounds (a zero fault budget)."""
        b = self.bounds
        sender_restarts = min(b.max_sender_restarts, b.max_epoch - 1)
        dead = {
            action
            for action, budget in (
                ("duplicate", b.max_duplications),
                ("lose", b.max_losses),
                ("become_stale", b.max_stale),
                ("sender_restart", sender_restarts),
                ("receiver_restart", b.max_receiver_restarts),
                ("publish_regressed", b.max_regressions),
                # only a sender restart starts fencing an epoch
                ("reclaim_after_fence", sender_restarts),
                # fencing (sender restart) or a dead session (receiver restart) fails work
                ("fail_inflight", sender_restarts + b.max_receiver_restarts),
            )
            if budget == 0
        }
        if b.max_faults == 0:
            dead |= _FAULTS | {"reclaim_after_fence", "fail_inflight"}
        return frozenset(dead)

    def fault_actions(self) -> frozenset[str]:
        return _FAULTS

    # ---- invariants ----------------------------------------------------------------------
    #
    # Each invariant is "for every sender s: <body>(state, s)" (plus, for capacity, one sum
    # over senders). A body reads only state.session, the room in the bag and state.peers[s],
    # so ``_every_sender`` memoises its verdict per such context (class docstring, policy 2).

    def _every_sender(self, state: CreditState, check: str) -> bool:
        """``self._sender_checks[check](state, s)`` holds for every sender ``s`` (memoised)."""
        return check not in self._failed_checks(state)

    def _failed_checks(self, state: CreditState) -> frozenset[str]:
        """The names of the per-sender checks that fail for some sender of ``state``.

        Memoised for the last state asked about and, per sender, per (``peers[s]``, session,
        room in the bag): everything a per-sender body reads.
        """
        if state is self._failed_for:
            return self._failed_value
        cache = self._check_cache
        session = state.session
        room = self._room(state)
        failed: frozenset[str] = frozenset()
        for s, peer in enumerate(state.peers):
            key = (id(peer), session, room)
            entry = cache.get(key)
            if entry is None or entry[0] is not peer:
                names = frozenset(
                    name for name, body in self._sender_checks.items() if not body(state, s)
                )
                entry = (peer, names)
                _remember(cache, key, entry)
            if entry[1]:
                failed |= entry[1]
        self._failed_for, self._failed_value = state, failed
        return failed

    def inv_capacity(self, state: CreditState) -> bool:
        """Σ over senders and epochs of (granted − released − reclaimed) ≤ capacity."""
        if not self._every_sender(state, "capacity"):
            return False
        return all(f >= 0 for f in self.free_capacity(state))

    def _capacity_at(self, state: CreditState, s: int) -> bool:
        """No book of sender ``s`` frees more than it granted (released + reclaimed ≤ granted)."""
        for b in state.peers[s].books:
            for r in range(len(self._capacity)):
                if b.released[r] + b.reclaimed[r] > b.granted[r]:
                    return False
        return True

    def inv_claims_covered(self, state: CreditState) -> bool:
        """Everything that can still occupy receiver resources is covered by that epoch's books.

        Claims on (sender, epoch) of the live session: landed-but-unreleased data, work in
        flight, and - when the sender's entry is on that key - its available credit plus its
        RESERVED tokens. Each must fit the books' outstanding ``granted − released − reclaimed``.
        """
        return self._every_sender(state, "claims_covered")

    def _claims_covered_at(self, state: CreditState, s: int) -> bool:
        session = state.session
        peer = state.peers[s]
        led = peer.ledger
        for b in peer.books:
            claim = _vadd(_vsub(b.landed, b.released), self._inflight_sum(peer, session, b.epoch))
            if led.session == session and led.epoch == b.epoch:
                hold = _vadd(self.available(led), self._charge_sum(led.tokens))
                claim = _vadd(claim, hold)
            outstanding = _vsub(_vsub(b.granted, b.released), b.reclaimed)
            if not _vle(claim, outstanding):
                return False
        return True

    def inv_full_charge(self, state: CreditState) -> bool:
        """Reserved, in-flight and landed work of the live key was consumed in full."""
        return self._every_sender(state, "full_charge")

    def _full_charge_at(self, state: CreditState, s: int) -> bool:
        peer = state.peers[s]
        led = peer.ledger
        tokens = self._charge_sum(led.tokens)
        if not _vle(tokens, led.consumed):
            return False
        if led.session != state.session:
            return True
        b = self._books_for(peer, led.epoch)
        if b is None:
            return True  # inv_claims_covered rejects a live entry without books
        dispatched = _vadd(self._inflight_sum(peer, led.session, led.epoch), b.landed)
        return _vadd(tokens, dispatched) == led.consumed

    def inv_no_overdraw(self, state: CreditState) -> bool:
        """The sender never consumes or returns more than it was granted (available ≥ 0)."""
        return self._every_sender(state, "no_overdraw")

    def _no_overdraw_at(self, state: CreditState, s: int) -> bool:
        return min(self.available(state.peers[s].ledger)) >= 0

    def inv_grant_within_receiver(self, state: CreditState) -> bool:
        """A sender's accepted grant never exceeds what the receiver granted that key."""
        return self._every_sender(state, "grant_within_receiver")

    def _grant_within_receiver_at(self, state: CreditState, s: int) -> bool:
        peer = state.peers[s]
        led = peer.ledger
        if led.session != state.session:
            return True
        b = self._books_for(peer, led.epoch)
        return b is None or _vle(led.grant_total, b.granted)

    def inv_old_update_harmless(self, state: CreditState) -> bool:
        """An in-flight update the sender would call duplicate/old carries no higher total."""
        return self._every_sender(state, "old_update_harmless")

    def _old_update_harmless_at(self, state: CreditState, s: int) -> bool:
        peer = state.peers[s]
        led = peer.ledger
        for msg, _n in peer.to_sender:
            if (
                msg.kind == UPDATE
                and (msg.session, msg.epoch) == (led.session, led.epoch)
                and msg.seq <= led.last_seq
                and not _vle(msg.grants, led.grant_total)
            ):
                return False
        return True

    def inv_stale_revival(self, state: CreditState) -> bool:
        """A stale entry returns to use only through a strictly newer update."""
        return self._every_sender(state, "stale_revival")

    def _stale_revival_at(self, state: CreditState, s: int) -> bool:
        led = state.peers[s].ledger
        return led.freshness != REVIVED or led.last_seq > led.stale_at

    def inv_stale_never_reserves(self, state: CreditState) -> bool:
        """A STALE entry takes no new reservation: every RESERVED token it holds was reserved
        before it became stale (``stale_tokens``, the history of those still held)."""
        return self._every_sender(state, "stale_never_reserves")

    def _stale_never_reserves_at(self, state: CreditState, s: int) -> bool:
        led = state.peers[s].ledger
        return led.freshness != STALE or led.tokens == led.stale_tokens

    def inv_generation_fenced(self, state: CreditState) -> bool:
        """No sender uses a fenced generation; work is never in flight to reclaimed capacity.

        1. A ledger entry never names a session newer than the receiver's.
        2. An entry on the live session is keyed by that sender's ACTIVE books.
        3. Work in flight to the live session belongs to books that still hold its capacity
           (present and not yet RECLAIMED).
        """
        return self._every_sender(state, "generation_fenced")

    def _generation_fenced_at(self, state: CreditState, s: int) -> bool:
        session = state.session
        peer = state.peers[s]
        led = peer.ledger
        if led.session > session:
            return False
        if led.session == session:
            b = self._books_for(peer, led.epoch)
            if b is None or b.status != ACTIVE:
                return False
        for s_, e, _c in peer.inflight:
            if s_ == session:
                b = self._books_for(peer, e)
                if b is None or b.status == RECLAIMED:
                    return False
        return True

    def inv_control_unblocked(self, state: CreditState) -> bool:
        """Zero data credit never blocks control traffic.

        A sender short of credit for a charge can always ask for it: when the bag has room and
        no report of its entry is in flight, ``report_usage`` with that demand is enabled. And
        every message in flight is deliverable.
        """
        return self._every_sender(state, "control_unblocked")

    def _control_unblocked_at(self, state: CreditState, s: int) -> bool:
        peer = state.peers[s]
        led = peer.ledger
        if (
            self._room(state)
            and led.session
            and led.usage_seq < self.bounds.seq_cap
            and not any(
                (m.session, m.epoch) == (led.session, led.epoch) for m, _ in peer.to_receiver
            )
        ):
            available = self.available(led)
            for i, charge in enumerate(self._charges):
                if not _vle(charge, available) and self._guard["report_usage"](state, s, i + 1):
                    return False
        for bag in (peer.to_sender, peer.to_receiver):
            for msg, _n in bag:
                if self._guard["deliver"](state, s, msg) is not None:
                    return False
        return True

    def invariants(self) -> Sequence[Any]:
        """The named safety properties, specific ones first and the physical catch-all
        (``claims_covered_by_books``) last, so a counterexample names the rule it breaks."""
        return (
            SpecInvariant(
                "capacity_never_exceeded",
                'RFC acceptance 1: "Aggregate reserved receiver resources never exceed '
                'configured capacity"; SEMANTICS §8: Σ (granted − released − reclaimed) ≤ capacity',
                self.inv_capacity,
            ),
            SpecInvariant(
                "fenced_generation_never_used",
                'RFC acceptance 4: "Restarted peers cannot reuse old credit or old allocation '
                'generation"; RFC claim 5: "Old sessions are fenced before their resources '
                'are reused"',
                self.inv_generation_fenced,
            ),
            SpecInvariant(
                "dispatch_holds_full_charge",
                'RFC acceptance 2: "A sender never dispatches a required remote plan without '
                'all credit dimensions"; RFC claim 3 (atomic multi-resource eligibility)',
                self.inv_full_charge,
            ),
            SpecInvariant(
                "sender_never_overdraws",
                'RFC rule 4: "Credit violation: ... do not silently overdraw"; SEMANTICS §6: '
                "a grant below consumed is rejected",
                self.inv_no_overdraw,
            ),
            SpecInvariant(
                "sender_grant_within_receiver_grant",
                'RFC acceptance 3: "Duplicate, reordered, and stale updates never increase '
                'available credit"; RFC: "Delta grants can be double-applied"',
                self.inv_grant_within_receiver,
            ),
            SpecInvariant(
                "old_update_cannot_raise_credit",
                'RFC: "Duplicate and old updates become no-ops"; acceptance 3',
                self.inv_old_update_harmless,
            ),
            SpecInvariant(
                "stale_revived_only_by_newer_update",
                'RFC state machine: "Stale +-- newer update -> Active"; acceptance 3 (a stale '
                "update never re-opens credit)",
                self.inv_stale_revival,
            ),
            SpecInvariant(
                "stale_sender_never_reserves",
                'RFC state machine rule 2: "Stale: stop new credit-gated dispatch; existing '
                'transport-owned work continues to terminal state"',
                self.inv_stale_never_reserves,
            ),
            SpecInvariant(
                "control_never_blocked_by_data_credit",
                'RFC acceptance 5: "Zero data credit cannot block control updates"; RFC rule 4: '
                '"Control traffic never consumes data credit"',
                self.inv_control_unblocked,
            ),
            SpecInvariant(
                "claims_covered_by_books",
                'RFC rule 3: "do not reuse old target resources until old QPs/inflight work '
                'are fenced"; RFC claim 1 (receiver-capacity safety)',
                self.inv_claims_covered,
            ),
        )

    def witnesses(self) -> Sequence[Any]:
        def reserved_after_receiver_restart(st: CreditState) -> bool:
            return any(p.ledger.session > 1 and any(p.ledger.consumed) for p in st.peers)

        def reserved_after_sender_restart(st: CreditState) -> bool:
            return any(p.ledger.epoch > 1 and any(p.ledger.consumed) for p in st.peers)

        def reclaimed_after_fence(st: CreditState) -> bool:
            return any(b.status == RECLAIMED for p in st.peers for b in p.books)

        def duplicate_in_flight(st: CreditState) -> bool:
            return any(
                n > 1 for p in st.peers for bag in (p.to_sender, p.to_receiver) for _, n in bag
            )

        def reordered_updates(st: CreditState) -> bool:
            return any(sum(1 for m, _ in p.to_sender if m.kind == UPDATE) >= 2 for p in st.peers)

        def stale_sender_revived(st: CreditState) -> bool:
            return any(p.ledger.freshness == REVIVED for p in st.peers)

        def capacity_exhausted(st: CreditState) -> bool:
            return not any(self.free_capacity(st))

        def both_senders_hold_credit(st: CreditState) -> bool:
            return sum(1 for p in st.peers if any(self.available(p.ledger))) >= 2

        # A witness whose enabling action the bounds rule out is not expected (like coverage's
        # unreachable actions): its absence then says nothing about vacuity.
        dead = self.unreachable_actions()
        candidates = (
            (
                "reserved_after_receiver_restart",
                reserved_after_receiver_restart,
                "receiver_restart",
            ),
            ("reserved_after_sender_restart", reserved_after_sender_restart, "sender_restart"),
            (
                "fenced_epoch_reclaimed_with_data_pending",
                reclaimed_after_fence,
                "reclaim_after_fence",
            ),
            ("duplicate_in_flight", duplicate_in_flight, "duplicate"),
            ("two_updates_in_flight_to_one_sender", reordered_updates, "push_update"),
            ("stale_sender_revived", stale_sender_revived, "become_stale"),
            ("capacity_exhausted", capacity_exhausted, "grant"),
            ("two_senders_hold_credit", both_senders_hold_credit, "grant"),
        )
        return tuple(
            SpecWitness(name, holds)
            for name, holds, needs in candidates
            if needs not in dead and (name != "two_senders_hold_credit" or self.bounds.senders > 1)
        )

    # ---- encoding, symmetry, bounds, recovery, display ---------------------------------

    def pack(self, state: CreditState) -> tuple[Any, ...]:
        """Nested plain tuples of ints: every NamedTuple becomes a plain tuple (all fields are
        ints or plain tuples of ints already; vectors, tokens and in-flight items are plain)."""
        cache = self._pack_cache
        packed = []
        for p in state.peers:
            entry = cache.get(id(p))
            if entry is not None and entry[0] is p:
                packed.append(entry[1])
            else:
                q = _pack_peer(p)
                _remember(cache, id(p), (p, q))
                packed.append(q)
        return (state.session, tuple(state.faults), tuple(packed))

    def canonicalize(self, state: CreditState) -> CreditState:
        """Renumber sequences by rank per key, then sort the interchangeable senders.

        1. Sequences are only compared, and a new one exceeds every live one, so replacing the
           live values of each key's update and usage sequences by their ranks (0 stays 0)
           keeps every guard and effect (data independence).
        2. No component names another sender, so sorting the per-sender :class:`Peer` slots
           picks one representative of the permutation orbit.
        """
        cache = self._canon_cache
        session = state.session
        peers = []
        for p in state.peers:
            key = (id(p), session)
            entry = cache.get(key)
            if entry is not None and entry[0] is p:
                peers.append(entry[1])
            else:
                q = self._intern(_renumber(p, session))
                _remember(cache, key, (p, q))
                if q is not p:  # canonical peers are their own representatives
                    _remember(cache, (id(q), session), (q, q))
                peers.append(q)
        peers.sort()
        return CreditState(session, tuple(peers), state.faults)

    def _intern(self, peer: Peer) -> Peer:
        """The one shared object equal to ``peer`` (so the id-keyed memos hit across states)."""
        interned = self._interned
        if len(interned) >= _CACHE_LIMIT:
            interned.clear()
        return interned.setdefault(peer, peer)

    # ---- checker fast path (speed only; proven equal in tests/models/test_spec_fastpath.py) --

    def fingerprint(self, state: CreditState) -> int:
        """A stable 64-bit fingerprint, incremental over the senders (AdHash).

        ``(h(session, faults) + Σ_s h(s, peers[s])) mod 2**64`` where ``h`` is blake2b-64 of the
        marshalled value (format 2) and each ``h(s, peer)`` is memoised per ``Peer``. Equal
        states get equal fingerprints in every process (no salted ``hash()``). Two distinct
        states differ in the (session, faults) part or in some slot ``s``, so one independent
        digest enters their difference with coefficient 1: modelling blake2b as a random
        function they collide with probability 2**-64, the bound the checker reports (Bellare
        and Micciancio, "A New Paradigm for Collision-free Hashing", 1997).
        """
        summary = self._summary
        total = self._prefix(state.session, state.faults)
        for s, p in enumerate(state.peers):
            total += summary(p)[3][s]
        return total & _MASK64

    def _prefix(self, session: int, faults: Faults) -> int:
        """``h(session, faults)`` of ``fingerprint``."""
        key = (id(faults), session)
        entry = self._prefix_cache.get(key)
        if entry is None or entry[0] is not faults:
            entry = (faults, _digest64((session, tuple(faults))))
            _remember(self._prefix_cache, key, entry)
        return entry[1]

    def fingerprinted_successors(
        self, state: CreditState
    ) -> Iterator[tuple[str, tuple[Hashable, ...], CreditState, int]]:
        """``(action, args, canonicalize(next), fingerprint(canonicalize(next)))`` for every
        step of ``successors(state)``, in the same order.

        For a canonical ``state`` (what the checker expands) the other senders are already
        renumbered and interned, so only the changed sender is canonicalised - once per
        memoised sender step, with its slot digests - and the successor's fingerprint is a
        sum of cached digests. Any other state takes the plain path.
        """
        session, peers, _faults = state
        if not self._is_canonical(state):
            interned = self.canonicalize(state)
            if interned != state:  # not canonical: the plain path
                canonicalize, fingerprint = self.canonicalize, self.fingerprint
                for step in self.successors(state):
                    nxt = canonicalize(step.state)
                    yield step.action, step.args, nxt, fingerprint(nxt)
                return
            # a canonical value in other objects (e.g. unpickled in a worker): use the shared
            # Peer objects, whose steps are equal and memoised
            state = interned
            session, peers, _faults = state
        messages, free, _seq_ok = self._facts(state)
        room = messages < self.bounds.max_messages
        n = len(peers)
        new_state = tuple.__new__  # CreditState(...) without the Python-level __new__
        for s in range(n):
            steps = self._canonical_sender_steps(state, s, room, free)
            if n == 2:
                other = peers[1 - s]
                other_first, other_second = self._summary(other)[3]
                for action, args, new_peer, new_faults, first, second in steps:
                    # first/second: h(session, new faults) + h(slot, new_peer) per slot
                    if new_peer <= other:
                        yield (
                            action,
                            args,
                            new_state(CreditState, (session, (new_peer, other), new_faults)),
                            (first + other_second) & _MASK64,
                        )
                    else:
                        yield (
                            action,
                            args,
                            new_state(CreditState, (session, (other, new_peer), new_faults)),
                            (second + other_first) & _MASK64,
                        )
            else:
                others = [*peers[:s], *peers[s + 1 :]]
                for action, args, new_peer, new_faults, _first, _second in steps:
                    nxt = CreditState(session, tuple(sorted((*others, new_peer))), new_faults)
                    yield action, args, nxt, self.fingerprint(nxt)
        if (
            self._receiver_restart_candidate(state)
            and self._guard["receiver_restart"](state) is None
        ):
            nxt = self._restarted(state)
            yield "receiver_restart", (), nxt, self.fingerprint(nxt)

    def _restarted(self, state: CreditState) -> CreditState:
        """``canonicalize(receiver_restart(state))`` from per-sender memos.

        The effect maps each sender's ``Peer`` on its own, given the session (and the fault
        counts on their own), so its canonical image is memoised per (``Peer``, session); on any
        miss the effect itself is evaluated once and every image taken from its result.
        """
        session, peers, faults = state
        cache = self._restart_cache
        images = []
        for p in peers:
            entry = cache.get((id(p), session))
            if entry is None or entry[0] is not p:
                break
            images.append(entry[1])
        context = self._restart_context.get((id(faults), session))
        if len(images) != len(peers) or context is None or context[0] is not faults:
            raw = self._effect["receiver_restart"](state)
            for p, image in zip(peers, raw.peers, strict=True):
                canon = self._intern(_renumber(image, raw.session))
                _remember(cache, (id(p), session), (p, canon))
                _remember(self._canon_cache, (id(canon), raw.session), (canon, canon))
            context = (
                faults,
                raw.session,
                self._faults_interned.setdefault(raw.faults, raw.faults),
            )
            _remember(self._restart_context, (id(faults), session), context)
            images = [cache[(id(p), session)][1] for p in peers]
        return CreditState(context[1], tuple(sorted(images)), context[2])

    def intern(self, state: CreditState) -> CreditState:
        """An equal state built from this process's shared ``Peer`` and ``Faults`` objects, so
        the id-keyed memos hit for a state that arrives as fresh objects (unpickled in a
        checker worker)."""
        faults = self._faults_interned.setdefault(state.faults, state.faults)
        return CreditState(state.session, tuple(self._intern(p) for p in state.peers), faults)

    def invariants_hold(self, state: CreditState) -> bool:
        """Every invariant of ``invariants()`` holds (one memoised pass instead of ten):
        the capacity sum, then each sender's memoised verdict (``_failed_checks``)."""
        messages, free, _seq_ok = self._facts(state)
        if min(free) < 0:
            return False
        cache = self._check_cache
        session = state.session
        room = messages < self.bounds.max_messages
        for peer in state.peers:
            entry = cache.get((id(peer), session, room))
            if entry is None or entry[0] is not peer:
                return not self._failed_checks(state)  # computes and memoises the verdicts
            if entry[1]:
                return False
        return True

    def _is_canonical(self, state: CreditState) -> bool:
        """Every sender is the interned, renumbered ``Peer`` and the senders are sorted."""
        cache = self._canon_cache
        session = state.session
        peers = state.peers
        for p in peers:
            entry = cache.get((id(p), session))
            if entry is None or entry[1] is not p:
                return False
        if len(peers) == 2:
            return peers[0] <= peers[1]
        return all(a <= b for a, b in pairwise(peers))

    def _canonical_sender_steps(
        self, state: CreditState, s: int, room: bool, free_capacity: Vec
    ) -> list[_CanonicalStep]:
        """``_sender_steps`` with full arguments and each new ``Peer`` canonicalised
        (renumbered for the session, then interned), memoised on the same context plus ``s``.
        ``room`` and ``free_capacity`` are ``state``'s."""
        peer = state.peers[s]
        free = free_capacity if peer.books[-1].demand or not self.PRUNE_CANDIDATES else None
        key = (id(peer), s, state.session, state.faults, room, free)
        entry = self._canon_steps_cache.get(key)
        if entry is not None and entry[0] is peer:
            return entry[1]
        session = state.session
        cache = self._canon_cache
        steps: list[_CanonicalStep] = []
        for action, rest, new_peer, raw_faults in self._sender_steps(state, s, room):
            ckey = (id(new_peer), session)
            centry = cache.get(ckey)
            if centry is None or centry[0] is not new_peer:
                canon = self._intern(_renumber(new_peer, session))
                centry = (new_peer, canon)
                _remember(cache, ckey, centry)
                if canon is not new_peer:
                    _remember(cache, (id(canon), session), (canon, canon))
            canon = centry[1]
            # shared Faults objects make the id-keyed prefix memo hit across states
            new_faults = self._faults_interned.setdefault(raw_faults, raw_faults)
            prefix = self._prefix(session, new_faults)
            slots = self._summary(canon)[3]
            steps.append(
                (
                    action,
                    (s, *rest),
                    canon,
                    new_faults,
                    prefix + slots[0],
                    prefix + slots[1] if len(slots) > 1 else 0,
                )
            )
        _remember(self._canon_steps_cache, key, (peer, steps))
        return steps

    def within_bounds(self, state: CreditState) -> bool:
        messages, _free, seq_ok = self._facts(state)
        return seq_ok and messages <= self.bounds.max_messages

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

    def recovered(self, state: CreditState) -> bool:
        """All credit usable again: nothing in flight or fencing, every sender synchronised.

        Per sender: only the current epoch's books remain, landed data was released, the entry
        is on the live key, not stale, holds no RESERVED token, applied the latest grant total,
        and the receiver has reclaimed everything it returned.
        """
        for p in state.peers:
            led = p.ledger
            if p.inflight or len(p.books) != 1 or led.tokens:
                return False
            b = p.books[0]
            if (led.session, led.epoch) != (state.session, b.epoch) or led.freshness == STALE:
                return False
            if b.landed != b.released or led.grant_total != b.granted:
                return False
            if led.returned != b.reclaimed:
                return False
        return True

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


def _conjunction(action: str) -> Callable[..., str | None]:
    """``CreditSpec._g_<action>``: the first failing conjunct of ``GUARDS[action]`` (those in
    ``WITHOUT`` left out), or ``None`` when all hold."""

    def guard(self: CreditSpec, state: CreditState, *args: Any) -> str | None:
        for check in self._conjuncts[action]:
            reason = check(state, *args)
            if reason is not None:
                return reason
        return None

    guard.__name__ = guard.__qualname__ = f"_g_{action}"
    return guard


for _action in _ACTIONS:
    setattr(CreditSpec, f"_g_{_action}", _conjunction(_action))
assert tuple(GUARDS) == _ACTIONS


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
