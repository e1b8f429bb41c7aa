"""Toy spec models with hand-countable state spaces, for the checker's tests and benchmark.

Each class structurally satisfies :class:`tent_models.model_api.SpecModel`:

* :class:`Counter`: one integer counted up to a limit (deadlock vs quiescence by bound, state
  constraint, an injected bad value, a never-firing action).
* :class:`Mutex`: ``n`` interchangeable processes idle -> waiting -> critical -> idle around one
  lock (symmetry reduction; a bug variant entering without the lock check).
* :class:`CreditToy`: a tiny receiver-advertised cumulative-credit protocol over a bag network
  with loss, duplication and a receiver restart (epoch fence); bug variants ``additive`` (grants
  added instead of taking the cumulative maximum) and ``delta`` (grants sent as increments with
  no refresh: a lost grant leaks capacity forever).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import NamedTuple

from tent_models.model_api import Invariant, Step, Witness


class Counter:
    """``value`` counts 0 -> ``limit`` by ``inc``; ``limit + 1`` states when unconstrained.

    * ``bad``: invariant ``NotBad`` fails at that value (shortest trace = ``bad`` steps).
    * ``constraint``: states above it are stored but not expanded (``within_bounds``).
    * ``quiescent_at_limit``: the limit caps ``inc`` (quiescence by bound, not deadlock).
    * ``recovered_at``: the value where ``recovered`` holds (None: never).
    * ``never``: adds an action ``never`` whose guard is always false; ``declare_never``
      lists it in ``unreachable_actions``.
    * ``witness_at``: a witness ``Reaches`` satisfied at that value.
    """

    def __init__(
        self,
        limit: int,
        *,
        bad: int | None = None,
        constraint: int | None = None,
        quiescent_at_limit: bool = True,
        recovered_at: int | None = 0,
        never: bool = False,
        declare_never: bool = False,
        witness_at: int | None = None,
    ) -> None:
        self.name = f"counter/{limit}"
        self.limit = limit
        self.bad = bad
        self.constraint = constraint
        self.quiescent_at_limit = quiescent_at_limit
        self.recovered_at = recovered_at
        self.never = never
        self.declare_never = declare_never
        self.witness_at = witness_at

    def initial_states(self) -> list[int]:
        return [0]

    def successors(self, state: int) -> Iterator[Step]:
        for action in self.action_names():
            nxt = self.apply(state, action, ())
            if nxt is not None:
                yield Step(action, (), nxt)

    def apply(self, state: int, action: str, args: tuple[Hashable, ...]) -> int | None:
        if action == "inc" and args == () and state < self.limit:
            return state + 1
        if action == "reset" and args == () and state == self.limit and self.recovered_at == 0:
            return 0
        return None

    def explain(self, state: int, action: str, args: tuple[Hashable, ...]) -> str:
        if action == "inc":
            return f"value {state} is at the limit {self.limit}"
        if action == "reset":
            return f"value {state} is below the limit {self.limit}"
        return "this action is never enabled"

    def action_names(self) -> Sequence[str]:
        names = ["inc", "reset"] if self.recovered_at == 0 else ["inc"]
        return [*names, "never"] if self.never else names

    def unreachable_actions(self) -> frozenset[str]:
        return frozenset({"never"}) if self.declare_never else frozenset()

    def fault_actions(self) -> frozenset[str]:
        return frozenset()

    def invariants(self) -> Sequence[Invariant]:
        if self.bad is None:
            return []
        bad = self.bad
        return [Invariant("NotBad", f"the value never reaches {bad}", lambda v: v != bad)]

    def witnesses(self) -> Sequence[Witness]:
        if self.witness_at is None:
            return []
        target = self.witness_at
        return [Witness("Reaches", lambda v: v == target)]

    def pack(self, state: int) -> tuple[int, ...]:
        return (state,)

    def canonicalize(self, state: int) -> int:
        return state

    def within_bounds(self, state: int) -> bool:
        return self.constraint is None or state <= self.constraint

    def quiescent_by_bound(self, state: int) -> bool:
        return self.quiescent_at_limit and state == self.limit

    def recovered(self, state: int) -> bool:
        return self.recovered_at is not None and state == self.recovered_at

    def describe(self, state: int) -> Mapping[str, object]:
        return {"value": state}


IDLE, WAITING, CRITICAL = 0, 1, 2


class Mutex:
    """``processes`` interchangeable processes around one lock.

    Reachable states: ``2**n + n * 2**(n - 1)`` (at most one process critical) without symmetry;
    the number of such multisets with it (7 for n = 3). ``buggy`` lets ``enter`` ignore the
    lock: invariant ``MutualExclusion`` then fails after 4 steps (two requests, two enters).
    """

    def __init__(
        self, processes: int, *, buggy: bool = False, vacuous_witness: bool = False
    ) -> None:
        self.name = f"mutex/{processes}" + ("/buggy" if buggy else "")
        self.processes = processes
        self.buggy = buggy
        self.vacuous_witness = vacuous_witness

    def initial_states(self) -> list[tuple[int, ...]]:
        return [(IDLE,) * self.processes]

    def successors(self, state: tuple[int, ...]) -> Iterator[Step]:
        for action in self.action_names():
            for process in range(self.processes):
                nxt = self.apply(state, action, (process,))
                if nxt is not None:
                    yield Step(action, (process,), nxt)

    def apply(
        self, state: tuple[int, ...], action: str, args: tuple[Hashable, ...]
    ) -> tuple[int, ...] | None:
        if len(args) != 1 or not isinstance(args[0], int) or not 0 <= args[0] < self.processes:
            return None
        process = args[0]
        local = state[process]
        if action == "request" and local == IDLE:
            new = WAITING
        elif action == "enter" and local == WAITING and (self.buggy or CRITICAL not in state):
            new = CRITICAL
        elif action == "leave" and local == CRITICAL:
            new = IDLE
        else:
            return None
        return (*state[:process], new, *state[process + 1 :])

    def explain(self, state: tuple[int, ...], action: str, args: tuple[Hashable, ...]) -> str:
        return f"{action}{args} is not enabled in {state}"

    def action_names(self) -> Sequence[str]:
        return ["request", "enter", "leave"]

    def unreachable_actions(self) -> frozenset[str]:
        return frozenset()

    def fault_actions(self) -> frozenset[str]:
        return frozenset()

    def invariants(self) -> Sequence[Invariant]:
        return [
            Invariant(
                "MutualExclusion",
                "at most one process is critical",
                lambda s: s.count(CRITICAL) <= 1,
            )
        ]

    def witnesses(self) -> Sequence[Witness]:
        both_waiting = Witness("TwoWaiting", lambda s: s.count(WAITING) >= 2)
        if self.vacuous_witness:
            return [
                both_waiting,
                Witness("AllCritical", lambda s: IDLE not in s and WAITING not in s),
            ]
        return [both_waiting]

    def pack(self, state: tuple[int, ...]) -> tuple[int, ...]:
        return state

    def canonicalize(self, state: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(sorted(state))

    def within_bounds(self, state: tuple[int, ...]) -> bool:
        return True

    def quiescent_by_bound(self, state: tuple[int, ...]) -> bool:
        return False

    def recovered(self, state: tuple[int, ...]) -> bool:
        return all(local == IDLE for local in state)

    def describe(self, state: tuple[int, ...]) -> Mapping[str, object]:
        names = ("idle", "waiting", "critical")
        return {f"p{index}": names[local] for index, local in enumerate(state)}


class CreditState(NamedTuple):
    """The toy credit protocol's state (cumulative totals per epoch)."""

    r_epoch: int  # receiver's epoch (bumped by a restart)
    granted: int  # receiver: cumulative grant total this epoch
    freed: int  # receiver: data landed this epoch (capacity freed)
    s_epoch: int  # sender's epoch (adopted from the first grant of a newer epoch)
    known: int  # sender: cumulative grant total known
    used: int  # sender: credit consumed by data sent this epoch
    grants: tuple[tuple[int, int], ...]  # bag of (epoch, total-or-delta) grant messages, sorted
    data: tuple[int, ...]  # bag of in-flight data units, by epoch, sorted
    losses_left: int
    dups_left: int
    restarts_left: int


def _bag_add(
    bag: tuple[tuple[int, int], ...], item: tuple[int, int]
) -> tuple[tuple[int, int], ...]:
    return tuple(sorted((*bag, item)))


def _bag_remove(
    bag: tuple[tuple[int, int], ...], item: tuple[int, int]
) -> tuple[tuple[int, int], ...]:
    index = bag.index(item)
    return bag[:index] + bag[index + 1 :]


class CreditToy:
    """A receiver grants cumulative credit over a lossy, duplicating, reordering bag network.

    RFC: "Cumulative totals make both directions idempotent": the sender keeps the maximum total
    of its epoch, so duplicates and reordering are harmless and a refresh re-sends the total.
    ``variant``: ``"ok"``; ``"additive"`` (sender adds totals: a duplicate over-grants);
    ``"delta"`` (increments instead of totals and no refresh: a lost grant leaks capacity).
    """

    def __init__(
        self,
        *,
        capacity: int = 2,
        max_grant: int = 3,
        bag_max: int = 2,
        losses: int = 1,
        dups: int = 1,
        restarts: int = 1,
        variant: str = "ok",
    ) -> None:
        self.name = f"credit-toy/{variant}"
        self.capacity = capacity
        self.max_grant = max_grant
        self.bag_max = bag_max
        self.budgets = (losses, dups, restarts)
        self.variant = variant

    def initial_states(self) -> list[CreditState]:
        losses, dups, restarts = self.budgets
        return [CreditState(1, 0, 0, 1, 0, 0, (), (), losses, dups, restarts)]

    def _instances(self, s: CreditState) -> Iterator[tuple[str, tuple[Hashable, ...]]]:
        yield "grant", ()
        yield "refresh", ()
        for msg in sorted(set(s.grants)):
            yield "deliver", msg
        yield "send", ()
        for epoch in sorted(set(s.data)):
            yield "land", (epoch,)
        for msg in sorted(set(s.grants)):
            yield "lose", msg
            yield "duplicate", msg
        yield "restart", ()

    def successors(self, state: CreditState) -> Iterator[Step]:
        for action, args in self._instances(state):
            nxt = self.apply(state, action, args)
            if nxt is not None:
                yield Step(action, args, nxt)

    def apply(self, s: CreditState, action: str, args: tuple[Hashable, ...]) -> CreditState | None:
        if action == "grant" and not args:
            if s.granted - s.freed >= self.capacity or s.granted >= self.max_grant:
                return None
            if len(s.grants) >= self.bag_max:
                return None
            amount = 1 if self.variant == "delta" else s.granted + 1
            return s._replace(granted=s.granted + 1, grants=_bag_add(s.grants, (s.r_epoch, amount)))
        if action == "refresh" and not args:
            msg = (s.r_epoch, s.granted)
            if self.variant == "delta" or s.granted == 0 or msg in s.grants:
                return None
            if len(s.grants) >= self.bag_max:
                return None
            return s._replace(grants=_bag_add(s.grants, msg))
        if action in {"deliver", "lose", "duplicate"} and args in s.grants:
            msg = (int(args[0]), int(args[1]))
            if action == "lose":
                if s.losses_left == 0:
                    return None
                return s._replace(grants=_bag_remove(s.grants, msg), losses_left=s.losses_left - 1)
            if action == "duplicate":
                if s.dups_left == 0 or len(s.grants) >= self.bag_max:
                    return None
                return s._replace(grants=_bag_add(s.grants, msg), dups_left=s.dups_left - 1)
            rest = _bag_remove(s.grants, msg)
            epoch, amount = msg
            if epoch < s.s_epoch:  # RFC: an old epoch's update is a no-op
                return s._replace(grants=rest)
            if epoch > s.s_epoch:  # the epoch fence: a newer epoch starts from zero
                return s._replace(grants=rest, s_epoch=epoch, known=amount, used=0)
            # RFC: "Duplicate and old updates become no-ops" (the bug variants add instead)
            known = max(s.known, amount) if self.variant == "ok" else s.known + amount
            return s._replace(grants=rest, known=known)
        if action == "send" and not args:
            if s.used >= s.known:
                return None
            return s._replace(used=s.used + 1, data=tuple(sorted((*s.data, s.s_epoch))))
        if action == "land" and len(args) == 1 and args[0] in s.data:
            epoch = int(args[0])
            index = s.data.index(epoch)
            rest_data = s.data[:index] + s.data[index + 1 :]
            freed = s.freed + 1 if epoch == s.r_epoch else s.freed
            return s._replace(data=rest_data, freed=freed)
        if action == "restart" and not args:
            if s.restarts_left == 0:
                return None
            return s._replace(
                r_epoch=s.r_epoch + 1, granted=0, freed=0, restarts_left=s.restarts_left - 1
            )
        return None

    def explain(self, state: CreditState, action: str, args: tuple[Hashable, ...]) -> str:
        return f"{action}{args} is not enabled in {state}"

    def action_names(self) -> Sequence[str]:
        return ["grant", "refresh", "deliver", "send", "land", "lose", "duplicate", "restart"]

    def unreachable_actions(self) -> frozenset[str]:
        return frozenset({"refresh"}) if self.variant == "delta" else frozenset()

    def fault_actions(self) -> frozenset[str]:
        return frozenset({"lose", "duplicate", "restart"})

    def invariants(self) -> Sequence[Invariant]:
        return [
            Invariant(
                "NoOverUse",
                'RFC: "a sender never consumes more than the receiver granted"',
                lambda s: s.s_epoch != s.r_epoch or s.used <= s.granted,
            ),
            Invariant(
                "CapacityRespected",
                "docs/semantics.md#receiver-allocator: granted - released <= capacity at every "
                "step",
                lambda s: s.granted - s.freed <= self.capacity,
            ),
        ]

    def witnesses(self) -> Sequence[Witness]:
        return [
            Witness("FullyGranted", lambda s: s.granted == self.max_grant),
            Witness("RecoveredAfterRestart", lambda s: s.restarts_left == 0 and self.recovered(s)),
        ]

    def pack(self, s: CreditState) -> tuple[object, ...]:
        return tuple(s)

    def canonicalize(self, state: CreditState) -> CreditState:
        return state

    def within_bounds(self, state: CreditState) -> bool:
        return True

    def quiescent_by_bound(self, s: CreditState) -> bool:
        return s.granted >= self.max_grant

    def recovered(self, s: CreditState) -> bool:
        return s.s_epoch == s.r_epoch and s.known == s.granted and not s.data

    def describe(self, s: CreditState) -> Mapping[str, object]:
        return s._asdict()
