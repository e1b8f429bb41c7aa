"""State, messages and bounds of the credit spec, and the small helpers on their values.

Every value is a frozen ``NamedTuple`` of ints and tuples (the checker hashes and packs them);
:class:`CreditBounds` is the finite instance a model is checked under. Read next:
:mod:`tent_spec.credit._table` (the actions and their guards).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from operator import add, sub
from typing import Any, NamedTuple

import attrs

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
    """The sender's ledger entry (docs/semantics.md#sender-ledger). ``session == 0``: no entry
    (fresh process)."""

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
    """The receiver's books for one (sender, epoch) of the current session
    (docs/semantics.md#receiver-allocator)."""

    epoch: int
    status: int  # ACTIVE / FENCING / RECLAIMED
    granted: Vec
    released: Vec  # freed by the receiver's consumer (landed data consumed)
    reclaimed: Vec  # freed from returns (live epoch) or after the fence (old epoch)
    landed: Vec  # committed work that arrived
    pushed_seq: int  # last published update sequence (ACTIVE only)
    usage_seq: int  # last accepted usage sequence (ACTIVE only)
    demand: int  # pending demand: 0 or 1 + charge index (ACTIVE only)
    # Transfers the receiver holds state for (landed, not yet released): only the adversarial
    # spec counts them (issue 27 item 1); the honest spec leaves it 0, so its states are those
    # it always had.
    held: int = 0


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
    compared: Callable[[Any], Mapping[str, object]] | None = None  # the values, for a report


class SpecWitness(NamedTuple):
    name: str
    holds: Callable[[Any], bool]


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
