"""The receiver's grant-ahead loop (protocol version 2): :class:`StandingGrants`.

One per :class:`~tent_credit.CreditReceiver`. It keeps every version-2 key's unlanded credit
topped up to its hold (:mod:`._ahead`) and serves the keys whose top-up is due in order:

1. A key's position is re-evaluated when its level changes (a usage report), when its own data
   lands or its sender returns credit (its unlanded credit fell), and for every key when the
   number of keys with a level changes (the adaptive chunk moved). A key whose top-up is due
   (deficit ≥ quantum) joins the **waiting line** at the back; one that is no longer due
   leaves it.
2. Whenever something may be granted (a key joined, capacity was released, returned or
   reclaimed), the line is served **strictly first come**: the head gets ``min(deficit, free
   units, max_grant units)`` units if that reaches its quantum (or is at least one unit, when
   the key holds nothing unlanded: no landing of its own would serve it again), and goes to the
   back if it is still due; a head that cannot be served stops the pass, so no later key
   passes it (a key waits behind at most one grant to every other key: the bounded bypass
   ``tent check`` proves on the gated model).
   With ``hold_partial``, such a head with nothing unlanded is not granted part of its
   quantum by a pass: it waits (the line with it) for its own release, whose top-up may then
   complete the quantum in one grant and one update, until the transport's timer calls
   :meth:`StandingGrants.grant_partial` (``partial_waiting`` says when one is due).
3. A key is **capped** when its level exceeds its hold (it wants more than its share); the
   updates it is sent then carry ``retry_after_us``, as do those of a key in the line, so its
   sender waits for the next top-up instead of reporting again.

Keys of the staging-internal class are never granted ahead (the staging reserve is only ever
granted on exact demand, version 1). Sans-IO and not thread-safe, like the receiver.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from ._ahead import Shape, Standing, position, shape_of, whole_units
from ._allocator import AllocationClass, ReceiverCreditAllocator
from ._types import CreditResource

__all__ = ["AheadEndpoint", "StandingGrants"]

Key = tuple[int, int]


class AheadEndpoint(Protocol):
    """What the loop reads of a version-2 receiver endpoint."""

    @property
    def sender_peer(self) -> int: ...

    @property
    def qos_class(self) -> int: ...

    @property
    def epoch(self) -> int: ...

    @property
    def level(self) -> Mapping[CreditResource, int]: ...

    def ahead_changed(self, *, granted: bool, capped: bool, waiting: bool) -> None:
        """The loop granted (``granted``) or re-evaluated the key."""


class StandingGrants:
    """The waiting line and the top-ups (module docstring).

    ``endpoints`` returns the receiver's live version-2 endpoints (open, negotiated version 2,
    not quarantined). ``static`` is the fixed chunk in units (0: adaptive).
    """

    def __init__(
        self,
        allocator: ReceiverCreditAllocator,
        endpoints: Callable[[], Iterable[AheadEndpoint]],
        *,
        static: int = 0,
        hold_partial: bool = False,
    ) -> None:
        self._allocator = allocator
        self._endpoints = endpoints
        self._static = static
        self._hold_partial = hold_partial
        self._partial_waiting = False  # the last pass stopped at a head held for its release
        self._release_next = False  # grant_partial: the next held head is granted its part
        config = allocator.config
        self._pool = {r: config.limit_for(r, AllocationClass.USER) for r in config.capacity}
        self._line: dict[Key, AheadEndpoint] = {}  # insertion order is the line's order
        # per key: the level it was computed from, the active count, and the shape
        self._shapes: dict[Key, tuple[Mapping[CreditResource, int], int, Shape]] = {}
        # per key, its last position: the books value, epoch and shape it was computed from,
        # the unlanded credit it read, and the position
        self._inputs: dict[Key, tuple[int, int, Shape, dict[CreditResource, int], Standing]] = {}
        self._capped: set[Key] = set()
        self._active = 0
        self.top_ups = 0
        """Grants this loop made."""

    def waiting(self, key: Key) -> bool:
        return key in self._line

    def capped(self, key: Key) -> bool:
        return key in self._capped

    def line(self) -> tuple[Key, ...]:
        """The waiting line, head first."""
        return tuple(self._line)

    @property
    def partial_waiting(self) -> bool:
        """With ``hold_partial``: the head waits for its own release where a pass without
        the hold would have granted it part of its quantum (rule 2)."""
        return self._partial_waiting

    def grant_partial(self) -> bool:
        """The hold ran out: grant the waiting head what is free, and serve on. Whether
        anything was granted (nothing when no head waits that way any more)."""
        if not self._partial_waiting or not self._line:
            return False
        before = self.top_ups
        # the first head the pass reaches that waits that way (keys no longer due ahead of it
        # leave the line in the same pass: the spec's head, whose line holds only due keys)
        self._release_next = True
        try:
            self.serve()
        finally:
            self._release_next = False
        return self.top_ups != before

    # ---------------------------------------------------------------- events

    def level_changed(self, endpoint: AheadEndpoint) -> None:
        """A report changed the key's level (rule 1): re-evaluate it, or every key if the
        number of keys with a level changed, then serve."""
        if self._recount():
            self._evaluate_all()
        else:
            self._evaluate(endpoint, (endpoint.sender_peer, endpoint.qos_class))
        self.serve()

    def landed(self, endpoint: AheadEndpoint) -> None:
        """Data of the key landed: its unlanded credit fell (rule 1), then serve."""
        self._evaluate(endpoint, (endpoint.sender_peer, endpoint.qos_class))
        self.serve()

    def returned(self, endpoint: AheadEndpoint) -> None:
        """The key's sender returned credit: its unlanded credit fell (rule 1). Re-evaluated
        only: the caller serves the line with the capacity freed (``_capacity_freed``).
        Without it a key whose level stayed the same was never due again (found by ``tent
        check`` on ``gated/three/ci``: two failed submits returned their credit while a third
        owner waited, and it waited for good)."""
        self._evaluate(endpoint, (endpoint.sender_peer, endpoint.qos_class))

    def membership_changed(self) -> None:
        """An endpoint opened, closed or was quarantined: forget what left, re-evaluate."""
        live = {(ep.sender_peer, ep.qos_class) for ep in self._endpoints()}
        for key in [k for k in self._line if k not in live]:
            del self._line[key]
        for key in [k for k in self._shapes if k not in live]:
            del self._shapes[key]
        for key in [k for k in self._inputs if k not in live]:
            del self._inputs[key]
        self._capped &= live
        self._recount()
        self._evaluate_all()
        self.serve()

    # ---------------------------------------------------------------- the line

    def serve(self) -> None:
        """Serve the line first come (rule 2)."""
        self._partial_waiting = False
        served: set[Key] = set()
        while self._line:
            key, endpoint = next(iter(self._line.items()))
            if key in served:
                return  # everyone due was served once this pass; the rest waits for capacity
            position = self._position(endpoint, key)
            if not position.due:
                self._leave(key, endpoint, position)
                continue
            free_units, max_units = self._grantable_units(position)
            if not max_units:
                # max_grant is below one charge of this key: it can never be granted ahead
                self._leave(key, endpoint, position)
                continue
            units = min(position.deficit, free_units, max_units)
            if units < min(position.quantum, max_units) and (position.unlanded or not units):
                # The head waits for capacity (nobody passes it) while its own data in flight
                # will land and re-serve the line. A head with nothing unlanded takes what is
                # free instead: the rest of the capacity may be landed data its consumer holds
                # until more arrives (found by the staged test: a consumer waiting for three
                # blocks with one block free and a quantum of two waited for good).
                return
            if units < min(position.quantum, max_units) and self._hold_partial:
                if not self._release_next:
                    # held: the head's own release may complete its quantum (one grant, one
                    # update), or the transport's timer grants it this part (grant_partial)
                    self._partial_waiting = True
                    return
                self._release_next = False  # the timer released this head's part only
            amounts = position.top_up(units)
            if not self._allocator._top_up_own(key[0], key[1], amounts):
                return
            self.top_ups += 1
            served.add(key)
            del self._line[key]
            after = self._position(endpoint, key)
            if after.due:
                self._line[key] = endpoint  # still short: the back of the line
            self._note(key, endpoint, after, granted=True)

    def _grantable_units(self, position: Standing) -> tuple[int, int]:
        """Whole units of the key's charge that free capacity covers, and that one grant may
        carry (``max_grant``). A fragment the key holds below one unit does not count: it is
        never completed, its sender returns it (docs/credit_protocol.md#uncovered-credit)."""
        allocator = self._allocator
        unit = position.unit
        return whole_units(allocator.user_free(), unit), whole_units(
            allocator.config.max_grant, unit
        )

    # ---------------------------------------------------------------- positions

    def _position(self, endpoint: AheadEndpoint, key: Key) -> Standing:
        # ``key``: the endpoint's (sender_peer, qos_class), which its caller has at hand
        level, active = endpoint.level, max(1, self._active)
        cached = self._shapes.get(key)
        if cached is None or cached[0] is not level or cached[1] != active:
            shape = shape_of(level, self._pool, active=active, static=self._static)
            self._shapes[key] = (level, active, shape)
        else:
            shape = cached[2]
        # A landing evaluates the key and then serves it: the same position twice, unless the
        # books or the shape changed in between (the allocator's ``books`` counts every change)
        books, epoch = self._allocator.books, endpoint.epoch
        inputs = self._inputs.get(key)
        if inputs is not None and inputs[0] == books and inputs[1] == epoch and inputs[2] is shape:
            return inputs[4]
        unlanded, settled, room = self._allocator.ahead_inputs(key[0], key[1], epoch)
        standing = position(shape, unlanded, settled=settled, cap_room=room)
        self._inputs[key] = (books, epoch, shape, unlanded, standing)
        return standing

    def _recount(self) -> bool:
        active = sum(1 for ep in self._endpoints() if any(ep.level.values()))
        changed = active != self._active
        self._active = active
        return changed

    def _evaluate_all(self) -> None:
        for endpoint in list(self._endpoints()):
            self._evaluate(endpoint, (endpoint.sender_peer, endpoint.qos_class))

    def _evaluate(self, endpoint: AheadEndpoint, key: Key) -> None:
        position = self._position(endpoint, key)
        if position.due:
            if key not in self._line:
                self._line[key] = endpoint
            self._note(key, endpoint, position, granted=False)
        else:
            self._leave(key, endpoint, position)

    def _leave(self, key: Key, endpoint: AheadEndpoint, position: Standing) -> None:
        self._line.pop(key, None)
        self._note(key, endpoint, position, granted=False)

    def _note(
        self, key: Key, endpoint: AheadEndpoint, position: Standing, *, granted: bool
    ) -> None:
        if position.capped:
            self._capped.add(key)
        else:
            self._capped.discard(key)
        endpoint.ahead_changed(granted=granted, capped=position.capped, waiting=key in self._line)
