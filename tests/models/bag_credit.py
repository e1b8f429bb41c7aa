"""A user-style spec: cumulative credit over a bag network, written readably against tent_models.

This is the kind of model a user writes (issue 16's "readable model"): frozen dataclasses and
frozensets, one guard and one effect per action, successors enumerated over each action's
argument domain, no memo tables and no fast path. The checker's plain path is measured on it
(``benchmarks/checker.py --model bag/ci``) and its tests run it through every engine.

The protocol: one receiver with ``capacity`` buffer slots shared by ``senders`` senders. The
receiver grants credit per sender as a *cumulative* total and publishes it in ``Grant(epoch,
total)`` messages; a sender sends one ``Data(epoch)`` unit per credit it holds; the receiver
buffers delivered data and frees a slot when it consumes a unit. The network is a bag (any
order), loses and duplicates grants (data rides a reliable transport), and a receiver restart
starts a new epoch: a sender adopts the new epoch's grant total on the first grant it sees
from it and drops grants of older epochs (the epoch fence); the receiver drops data of older
epochs. ``fence=False`` is the known-bad variant that forgets the fence.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tent_models.model_api import Footprint, Invariant, Step, Witness, no_symmetry

ACTIONS = (
    "grant",
    "publish",
    "send",
    "deliver_grant",
    "deliver_data",
    "consume",
    "lose",
    "duplicate",
    "restart",
)
FAULTS = frozenset({"lose", "duplicate", "restart"})


@dataclass(frozen=True, order=True)
class Grant:
    """Receiver -> sender: the cumulative credit granted to the sender in ``epoch``."""

    epoch: int
    total: int


@dataclass(frozen=True, order=True)
class Data:
    """Sender -> receiver: one unit of data sent on credit of ``epoch``."""

    epoch: int


@dataclass(frozen=True, order=True)
class Envelope:
    """A message in flight between the receiver and sender ``sender`` (either direction)."""

    sender: int
    message: Grant | Data


@dataclass(frozen=True)
class Sender:
    epoch: int  # the receiver epoch the sender believes in
    limit: int  # the largest cumulative grant seen for that epoch
    used: int  # data units sent on that epoch's credit


@dataclass(frozen=True)
class Receiver:
    epoch: int
    granted: tuple[int, ...]  # cumulative grant per sender, this epoch
    freed: tuple[int, ...]  # units consumed per sender, this epoch
    buffered: tuple[int, ...]  # units delivered and not yet consumed, per sender
    restarts: int


@dataclass(frozen=True)
class World:
    receiver: Receiver
    senders: tuple[Sender, ...]
    network: frozenset[tuple[Envelope, int]]  # a bag: (message, copies)
    faults: int  # losses and duplications so far


Bag = frozenset[tuple[Envelope, int]]


def _bag_add(bag: Bag, env: Envelope) -> Bag:
    copies = dict(bag)
    copies[env] = copies.get(env, 0) + 1
    return frozenset(copies.items())


def _bag_remove(bag: Bag, env: Envelope) -> Bag:
    copies = dict(bag)
    copies[env] -= 1
    if not copies[env]:
        del copies[env]
    return frozenset(copies.items())


def _order(env: Envelope) -> tuple[int, int, int, int]:
    """A total order on envelopes (grants and data do not compare with each other)."""
    msg = env.message
    if isinstance(msg, Grant):
        return (env.sender, 1, msg.epoch, msg.total)
    return (env.sender, 0, msg.epoch, 0)


def _in_flight(world: World) -> int:
    return sum(n for _env, n in world.network)


def _set(values: tuple[int, ...], index: int, value: int) -> tuple[int, ...]:
    return (*values[:index], value, *values[index + 1 :])


class BagCredit:
    """The protocol above as a finite transition system (structurally a ``SpecModel``)."""

    def __init__(
        self,
        *,
        senders: int = 2,
        capacity: int = 2,
        max_total: int = 3,
        max_in_flight: int = 3,
        max_faults: int = 2,
        max_restarts: int = 1,
        fence: bool = True,
        name: str = "bag",
    ) -> None:
        self.name = name
        self.n = senders
        self.capacity = capacity
        self.max_total = max_total
        self.max_in_flight = max_in_flight
        self.max_faults = max_faults
        self.max_restarts = max_restarts
        self.fence = fence

    # ---- the transition system ----------------------------------------------------------

    def initial_states(self) -> list[World]:
        zero = (0,) * self.n
        receiver = Receiver(epoch=0, granted=zero, freed=zero, buffered=zero, restarts=0)
        senders = tuple(Sender(epoch=0, limit=0, used=0) for _ in range(self.n))
        return [World(receiver, senders, frozenset(), 0)]

    def domain(self, world: World, action: str) -> Iterator[tuple[Hashable, ...]]:
        """Every argument tuple of ``action`` (guards decide which are enabled)."""
        if action in ("grant", "publish", "send", "consume"):
            for s in range(self.n):
                yield (s,)
        elif action in ("deliver_grant", "deliver_data", "lose", "duplicate"):
            for env in sorted((env for env, _copies in world.network), key=_order):
                yield (env,)
        else:
            yield ()

    def guard(self, world: World, action: str, args: tuple[Any, ...]) -> str | None:
        """``None`` when ``action(*args)`` is enabled in ``world``, else why not."""
        r = world.receiver
        room = _in_flight(world) < self.max_in_flight
        if action == "grant":
            (s,) = args
            outstanding = sum(g - f for g, f in zip(r.granted, r.freed, strict=True))
            if r.granted[s] >= self.max_total:
                return "bound: cumulative grant at max_total"
            if outstanding >= self.capacity:
                return "every buffer slot is granted"
            return None
        if action == "publish":
            return None if room else "bound: network full"
        if action == "send":
            (s,) = args
            sender = world.senders[s]
            if sender.used >= sender.limit:
                return "no credit left"
            return None if room else "bound: network full"
        if action == "consume":
            (s,) = args
            return None if r.buffered[s] > 0 else "nothing buffered"
        if action in ("deliver_grant", "deliver_data", "lose", "duplicate"):
            (env,) = args
            if dict(world.network).get(env, 0) == 0:
                return "message not in flight"
            if action == "deliver_grant":
                return None if isinstance(env.message, Grant) else "not a grant"
            if action == "deliver_data":
                return None if isinstance(env.message, Data) else "not data"
            if not isinstance(env.message, Grant):
                return "data rides a reliable transport"
            if world.faults >= self.max_faults:
                return "bound: fault budget spent"
            if action == "duplicate" and not room:
                return "bound: network full"
            return None
        if action == "restart":
            return None if r.restarts < self.max_restarts else "bound: restart budget spent"
        raise ValueError(f"unknown action {action!r}")

    def effect(self, world: World, action: str, args: tuple[Any, ...]) -> World:
        r = world.receiver
        if action == "grant":
            (s,) = args
            return replace(world, receiver=replace(r, granted=_set(r.granted, s, r.granted[s] + 1)))
        if action == "publish":
            (s,) = args
            env = Envelope(s, Grant(r.epoch, r.granted[s]))
            return replace(world, network=_bag_add(world.network, env))
        if action == "send":
            (s,) = args
            sender = world.senders[s]
            senders = list(world.senders)
            senders[s] = replace(sender, used=sender.used + 1)
            return replace(
                world,
                senders=tuple(senders),
                network=_bag_add(world.network, Envelope(s, Data(sender.epoch))),
            )
        if action == "consume":
            (s,) = args
            receiver = replace(
                r,
                buffered=_set(r.buffered, s, r.buffered[s] - 1),
                freed=_set(r.freed, s, r.freed[s] + 1),
            )
            return replace(world, receiver=receiver)
        if action in ("deliver_grant", "deliver_data"):
            (env,) = args
            world = replace(world, network=_bag_remove(world.network, env))
            return self._receive(world, env)
        if action == "lose":
            (env,) = args
            return replace(world, network=_bag_remove(world.network, env), faults=world.faults + 1)
        if action == "duplicate":
            (env,) = args
            return replace(world, network=_bag_add(world.network, env), faults=world.faults + 1)
        if action == "restart":
            zero = (0,) * self.n
            receiver = Receiver(r.epoch + 1, zero, zero, zero, r.restarts + 1)
            return replace(world, receiver=receiver)
        raise ValueError(f"unknown action {action!r}")

    def _receive(self, world: World, env: Envelope) -> World:
        s, msg = env.sender, env.message
        if isinstance(msg, Data):
            r = world.receiver
            if msg.epoch != r.epoch:
                return world  # fenced: data of an older epoch is dropped
            buffered = _set(r.buffered, s, r.buffered[s] + 1)
            return replace(world, receiver=replace(r, buffered=buffered))
        sender = world.senders[s]
        if msg.epoch > sender.epoch:
            new = Sender(epoch=msg.epoch, limit=msg.total, used=0)
        elif msg.epoch == sender.epoch or not self.fence:
            new = replace(sender, limit=max(sender.limit, msg.total))
        else:
            return world  # fenced: a grant of an older epoch
        senders = list(world.senders)
        senders[s] = new
        return replace(world, senders=tuple(senders))

    def action_successors(self, world: World, action: str) -> Iterator[Step]:
        for args in self.domain(world, action):
            if self.guard(world, action, args) is None:
                yield Step(action, args, self.effect(world, action, args))

    def successors(self, world: World) -> Iterator[Step]:
        for action in ACTIONS:
            yield from self.action_successors(world, action)

    def footprints(self) -> Mapping[str, Footprint]:
        """The fields of :class:`World` each action reads and writes (its guard and effect)."""
        return {
            "grant": Footprint(("receiver",), ("receiver",)),
            "publish": Footprint(("receiver", "network"), ("network",)),
            "send": Footprint(("senders", "network"), ("senders", "network")),
            "deliver_grant": Footprint(("senders", "network"), ("senders", "network")),
            "deliver_data": Footprint(("receiver", "network"), ("receiver", "network")),
            "consume": Footprint(("receiver",), ("receiver",)),
            "lose": Footprint(("network", "faults"), ("network", "faults")),
            "duplicate": Footprint(("network", "faults"), ("network", "faults")),
            "restart": Footprint(("receiver",), ("receiver",)),
        }

    def apply(self, world: World, action: str, args: tuple[Hashable, ...]) -> World | None:
        if action not in ACTIONS or tuple(args) not in set(self.domain(world, action)):
            return None
        if self.guard(world, action, tuple(args)) is not None:
            return None
        return self.effect(world, action, tuple(args))

    def explain(self, world: World, action: str, args: tuple[Hashable, ...]) -> str:
        if action not in ACTIONS:
            return f"unknown action {action!r}"
        if tuple(args) not in set(self.domain(world, action)):
            return f"arguments {args!r} are outside the action's domain"
        return self.guard(world, action, tuple(args)) or "enabled"

    def action_names(self) -> Sequence[str]:
        return ACTIONS

    def unreachable_actions(self) -> frozenset[str]:
        return frozenset()

    def fault_actions(self) -> frozenset[str]:
        return FAULTS

    # ---- properties ---------------------------------------------------------------------

    def invariants(self) -> Sequence[Invariant]:
        return (
            Invariant(
                "no_overrun", "the receiver never buffers more than its capacity", self.no_overrun
            ),
            Invariant(
                "within_grant",
                "a sender on the live epoch uses at most its grant",
                self.within_grant,
            ),
            Invariant(
                "outstanding_within_capacity",
                "outstanding grants fit the buffer",
                self.outstanding_within_capacity,
            ),
        )

    def no_overrun(self, world: World) -> bool:
        return sum(world.receiver.buffered) <= self.capacity

    def within_grant(self, world: World) -> bool:
        r = world.receiver
        return all(
            s.used <= r.granted[i] and s.limit <= r.granted[i]
            for i, s in enumerate(world.senders)
            if s.epoch == r.epoch
        )

    def outstanding_within_capacity(self, world: World) -> bool:
        r = world.receiver
        return sum(g - f for g, f in zip(r.granted, r.freed, strict=True)) <= self.capacity

    def witnesses(self) -> Sequence[Witness]:
        return (
            Witness("buffer_full", lambda w: sum(w.receiver.buffered) == self.capacity),
            Witness(
                "sent_after_restart",
                lambda w: w.receiver.restarts > 0 and any(s.used for s in w.senders),
            ),
            Witness("duplicate_grant", lambda w: any(n > 1 for _e, n in w.network)),
        )

    # ---- encoding, bounds, recovery, display --------------------------------------------

    def pack(self, world: World) -> tuple[Any, ...]:
        r = world.receiver
        network = tuple(sorted((*_order(env), n) for env, n in world.network))
        return (
            (r.epoch, r.granted, r.freed, r.buffered, r.restarts),
            tuple((s.epoch, s.limit, s.used) for s in world.senders),
            network,
            world.faults,
        )

    canonicalize = no_symmetry  # no symmetry reduction (senders are not interchangeable here)

    def within_bounds(self, world: World) -> bool:
        return True

    def quiescent_by_bound(self, world: World) -> bool:
        return True

    def recovered(self, world: World) -> bool:
        r = world.receiver
        return (
            not world.network
            and not any(r.buffered)
            and all(
                s.epoch == r.epoch and s.limit == r.granted[i] and s.used == r.freed[i]
                for i, s in enumerate(world.senders)
            )
        )

    def describe(self, world: World) -> Mapping[str, object]:
        r = world.receiver
        out: dict[str, object] = {
            "receiver.epoch": r.epoch,
            "receiver.granted": r.granted,
            "receiver.freed": r.freed,
            "receiver.buffered": r.buffered,
            "receiver.restarts": r.restarts,
            "faults": world.faults,
        }
        for i, s in enumerate(world.senders):
            out[f"sender[{i}]"] = f"epoch={s.epoch} limit={s.limit} used={s.used}"
        out["network"] = sorted(f"{env} x{n}" for env, n in world.network)
        return out
