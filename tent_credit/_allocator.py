"""The receiver's global credit allocator (docs/semantics.md#receiver-allocator; RFC "Credit Key and
Resource Model").

The receiver owns a physical capacity per :class:`CreditResource` and carves cumulative grants for
each ``(sender_peer, qos_class)`` key out of the free part of it, on demand. Everything is
accounted per key *and epoch* (the receiver bumps a key's epoch when its sender reconnects)::

    outstanding = granted − released − reclaimed_by_return − reclaimed_by_fence

and the allocator keeps, after every mutation, per resource:

1. ``Σ outstanding ≤ capacity`` over every key and epoch (RFC "Receiver-capacity safety");
2. ``Σ outstanding of USER keys ≤ capacity − staging_reserve``: user payload can never take the
   part reserved for staging-internal progress (RFC "Staging and Deadlock Avoidance");
3. every epoch's ``outstanding ≥ 0``, ``released ≤ landed`` and ``landed + reclaimed_by_return ≤
   granted`` (what makes 1 and 2 mean something physically).

Two different things free capacity: **release** (the receiver's own consumer finished with data
that landed) and **reclaim** (credit that never carried data: returned by the sender while the
epoch lives, or everything that never landed once the epoch is fenced and its in-flight work is
drained). Control messages use a separate, bounded slot budget that data never draws from.

The allocator is sans-IO: it never reads a clock; the endpoint turns its decisions into
``ReceiverCreditUpdate`` messages.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

import attrs

from ._admission import ACCEPTED, WriteAdmission, WriteRefusal, is_u64, parse_write_amounts, refused
from ._allocator_config import (
    AllocationClass,
    AllocatorConfig,
    AllocatorStatistics,
    EpochState,
    GrantDecision,
    KeyTotalsSnapshot,
    ResourceVector,
    _frozen,
    _resource_map,
)
from ._arith import U32_MAX, checked_add, checked_sub
from ._describe import describe
from ._epoch_record import (
    _check_epoch,
    _check_qos,
    _check_sender,
    _EpochId,
    _EpochRecord,
    _Event,
    _fresh_record,
    _KeyState,
    _next_state,
)
from ._fairness import GrantSplit, max_min_share
from ._grant_plan import _plan_grant, compute_grant
from ._types import CreditResource, SessionId
from .errors import (
    ArithmeticOverflow,
    InvalidArgument,
    InvalidEntry,
    KeyQuarantined,
    LocalProtocolError,
    RemoteProtocolError,
    TooManyRequests,
)

__all__ = [
    "AllocationClass",
    "AllocatorConfig",
    "AllocatorStatistics",
    "EpochState",
    "GrantDecision",
    "KeyTotalsSnapshot",
    "ReceiverCreditAllocator",
    "compute_grant",
]


class ReceiverCreditAllocator:
    """Global capacity of one receiver session, carved into per key+epoch cumulative grants.

    Keys are ``(sender_peer, qos_class)``; a receiver restart is a new allocator with a new
    :class:`SessionId`. Every public call validates completely before it changes anything: when
    it raises, the allocator is exactly as it was (only the ``protocol_violations`` counter counts
    a refused :class:`RemoteProtocolError`).

    Bounds: at most ``config.max_keys`` distinct keys per session (a key's epoch counter is kept
    for the session's lifetime so an epoch number is never reused); a key+epoch record is dropped
    once it is fenced and holds nothing (it then reads as unknown: :class:`InvalidEntry`).
    """

    def __init__(self, config: AllocatorConfig, session: SessionId) -> None:
        if not isinstance(config, AllocatorConfig):
            raise InvalidArgument("config must be an AllocatorConfig")
        if not isinstance(session, SessionId):
            raise InvalidArgument("session must be a SessionId")
        self._config = config
        self._session = session
        self._resources: tuple[CreditResource, ...] = tuple(config.capacity)
        self._keys: dict[tuple[int, int], _KeyState] = {}
        self._records: dict[_EpochId, _EpochRecord] = {}
        self._outstanding: dict[CreditResource, int] = dict.fromkeys(self._resources, 0)
        self._user_outstanding: dict[CreditResource, int] = dict.fromkeys(self._resources, 0)
        self._reclaimed_by_return: dict[CreditResource, int] = dict.fromkeys(self._resources, 0)
        self._reclaimed_by_fence: dict[CreditResource, int] = dict.fromkeys(self._resources, 0)
        self._released: dict[CreditResource, int] = dict.fromkeys(self._resources, 0)
        self._grants_issued = 0
        self._demands_blocked = 0
        self._protocol_violations = 0
        self._control_in_use = 0
        self._quarantined: set[tuple[int, int]] = set()
        # Per key over all its epochs: what it holds (for the cap and the fair split) and how many
        # of its epochs await fence_complete (max_fencing_epochs); its live demand, i.e. what the
        # last grant call asked for and could not give yet (the fair split's other keys).
        self._key_outstanding: dict[tuple[int, int], dict[CreditResource, int]] = {}
        self._key_fencing: dict[tuple[int, int], int] = {}
        self._live_demand: dict[tuple[int, int], dict[CreditResource, int]] = {}
        self._writes_admitted = 0
        self._writes_refused = 0

    # -- read side --

    @property
    def session(self) -> SessionId:
        """The receiver session this allocator grants in."""
        return self._session

    @property
    def config(self) -> AllocatorConfig:
        """The (immutable) configuration."""
        return self._config

    def current_epoch(self, sender_peer: int, qos_class: int) -> int:
        """The key's current epoch. Raises IA on malformed ids, IE for a key never opened."""
        return self._key(sender_peer, qos_class).current_epoch

    def outstanding(self, resource: CreditResource) -> int:
        """Capacity of ``resource`` committed over all keys and epochs (IA if not modelled)."""
        return self._outstanding[self._check_resource(resource)]

    def free(self, resource: CreditResource) -> int:
        """``capacity − outstanding`` of ``resource`` (IA if not modelled).

        USER keys see less: ``free_for(resource, AllocationClass.USER)``.
        """
        return self.free_for(resource, AllocationClass.STAGING_INTERNAL)

    def free_for(self, resource: CreditResource, allocation_class: AllocationClass) -> int:
        """What a key of ``allocation_class`` could still be granted of ``resource`` now."""
        resource = self._check_resource(resource)
        if not isinstance(allocation_class, AllocationClass):
            raise InvalidArgument(f"unknown allocation class {describe(allocation_class)}")
        free_total = self._config.capacity[resource] - self._outstanding[resource]
        if allocation_class is AllocationClass.STAGING_INTERNAL:
            return free_total
        user_room = self._config.limit_for(resource, allocation_class)
        return min(free_total, user_room - self._user_outstanding[resource])

    def user_free(self) -> dict[CreditResource, int]:
        """:meth:`free_for` of every modelled resource for the USER class."""
        user = AllocationClass.USER
        return {r: self.free_for(r, user) for r in self._resources}

    def key_totals(self, sender_peer: int, qos_class: int, epoch: int) -> KeyTotalsSnapshot:
        """A snapshot of one key+epoch. Raises IA on malformed ids, IE if the record is unknown
        (never opened, or fenced and settled, hence forgotten)."""
        ident, record = self._record(sender_peer, qos_class, epoch)
        reclaimed = {
            r: record.reclaimed_by_return[r] + record.reclaimed_by_fence[r] for r in self._resources
        }
        return KeyTotalsSnapshot(
            sender_peer=ident[0],
            qos_class=ident[1],
            epoch=ident[2],
            allocation_class=record.allocation_class,
            state=record.state,
            granted=MappingProxyType(record.granted),
            consumed_reported=MappingProxyType(record.consumed_reported),
            returned_reported=MappingProxyType(record.returned_reported),
            landed=MappingProxyType(record.landed),
            released=MappingProxyType(record.released),
            reclaimed_by_return=MappingProxyType(record.reclaimed_by_return),
            reclaimed_by_fence=MappingProxyType(record.reclaimed_by_fence),
            reclaimed=_frozen(reclaimed),
            outstanding=_frozen({r: record.outstanding(r) for r in self._resources}),
        )

    def statistics(self) -> AllocatorStatistics:
        """A frozen snapshot of capacity, commitments and counters."""
        states = [record.state for record in self._records.values()]
        return AllocatorStatistics(
            capacity=self._config.capacity,
            staging_reserve=_frozen(
                {r: self._config.staging_reserve.get(r, 0) for r in self._resources}
            ),
            outstanding=_frozen(self._outstanding),
            user_outstanding=_frozen(self._user_outstanding),
            free=_frozen({r: self.free(r) for r in self._resources}),
            keys=len(self._keys),
            epochs_active=states.count(EpochState.ACTIVE),
            epochs_fencing=states.count(EpochState.FENCING),
            epochs_fenced=states.count(EpochState.FENCED),
            grants_issued=self._grants_issued,
            demands_blocked=self._demands_blocked,
            reclaimed_by_return=_frozen(self._reclaimed_by_return),
            reclaimed_by_fence=_frozen(self._reclaimed_by_fence),
            released=_frozen(self._released),
            protocol_violations=self._protocol_violations,
            control_slots=self._config.control_slots,
            control_slots_in_use=self._control_in_use,
            writes_admitted=self._writes_admitted,
            writes_refused=self._writes_refused,
            quarantined_keys=len(self._quarantined),
            fencing_outstanding=self._fencing_outstanding(),
            keys_with_demand=len(self._live_demand),
        )

    def _fencing_outstanding(self) -> ResourceVector:
        # Unfenced capacity: held by superseded epochs until their fence completes (item 9).
        total = dict.fromkeys(self._resources, 0)
        for record in self._records.values():
            if record.state is EpochState.FENCING:
                for r in self._resources:
                    total[r] += record.outstanding(r)
        return _frozen(total)

    # -- epochs --

    def open_epoch(
        self,
        sender_peer: int,
        qos_class: int,
        *,
        allocation_class: AllocationClass = AllocationClass.USER,
    ) -> int:
        """Open the key's next epoch (its sender connected) and return it.

        1. First connect of a key: epoch 1, state ACTIVE.
        2. Reconnect (docs/semantics.md#negotiation: the receiver bumps the epoch): the previous
           epoch, if still ACTIVE, becomes FENCING; its outstanding stays committed until it is
           released or :meth:`fence_complete` reclaims it. Returns ``previous + 1``.

        A key keeps the allocation class it was first opened with. Raises IA (malformed ids,
        unknown class, a different class than the key's, epoch counter at u64 max), TMR (a new key
        beyond ``max_keys``, or a reconnect that would leave more than ``max_fencing_epochs``
        epochs of the key awaiting :meth:`fence_complete`), :class:`KeyQuarantined` (the key is
        quarantined). A failure changes nothing.
        """
        sender_peer = _check_sender(sender_peer)
        qos_class = _check_qos(qos_class)
        if not isinstance(allocation_class, AllocationClass):
            raise InvalidArgument(f"unknown allocation class {describe(allocation_class)}")
        key = (sender_peer, qos_class)
        if key in self._quarantined:
            raise KeyQuarantined(f"key {key} is quarantined: no new epoch in this session")
        state = self._keys.get(key)
        if state is None:
            if len(self._keys) >= self._config.max_keys:
                raise TooManyRequests(f"allocator already holds max_keys={self._config.max_keys}")
            self._keys[key] = _KeyState(current_epoch=1, allocation_class=allocation_class)
            self._key_outstanding[key] = dict.fromkeys(self._resources, 0)
            self._records[(*key, 1)] = _fresh_record(allocation_class, self._resources)
            return 1
        if allocation_class is not state.allocation_class:
            raise InvalidArgument(
                f"key {key} was opened as {state.allocation_class.name}, "
                f"not {allocation_class.name}"
            )
        new_epoch = checked_add(state.current_epoch, 1)
        old_ident = (*key, state.current_epoch)
        old = self._records.get(old_ident)
        fencing = self._key_fencing.get(key, 0)
        if old is not None and old.state is EpochState.ACTIVE:
            fencing += 1
        if fencing > self._config.max_fencing_epochs:
            # Principle 7: the superseded epochs a peer can pin are bounded by configuration, not
            # by how often it reconnects. Refused before anything changes.
            raise TooManyRequests(
                f"key {key} already has max_fencing_epochs={self._config.max_fencing_epochs} "
                "epochs awaiting fence_complete; complete one before it reconnects"
            )
        self._live_demand.pop(key, None)
        if old is not None and old.state is EpochState.ACTIVE:
            # RFC "New epoch": do not reuse old resources until old in-flight work is fenced.
            self._commit(old_ident, attrs.evolve(old, state=_next_state(old, _Event.FENCE)))
        state.current_epoch = new_epoch
        self._records[(*key, new_epoch)] = _fresh_record(allocation_class, self._resources)
        return new_epoch

    def fence(self, sender_peer: int, qos_class: int, epoch: int) -> None:
        """Fence an epoch (its sender disconnected): no more grants for it; idempotent.

        Its outstanding stays committed until :meth:`fence_complete`. Raises IA (malformed ids)
        or IE (unknown record). A failure changes nothing.
        """
        ident, record = self._record(sender_peer, qos_class, epoch)
        self._commit(ident, attrs.evolve(record, state=_next_state(record, _Event.FENCE)))
        if epoch == self._keys[ident[:2]].current_epoch:
            self._live_demand.pop(ident[:2], None)

    def fence_complete(
        self, sender_peer: int, qos_class: int, epoch: int
    ) -> Mapping[CreditResource, int]:
        """The fenced epoch's old QPs and in-flight work are drained or failed: reclaim.

        Reclaims ``granted − landed − reclaimed_by_return`` per resource (everything that never
        landed: never used, or failed in flight) and returns those amounts. The landed but not yet
        released part stays outstanding until :meth:`release`. The epoch becomes FENCED: no data
        can land for it any more and no usage report can reclaim from it again; once it holds
        nothing it is forgotten. Raises IA (malformed ids), IE (unknown record, or not FENCING:
        an ACTIVE epoch must be fenced first, a FENCED one was completed already). A failure
        changes nothing.
        """
        ident, record = self._record(sender_peer, qos_class, epoch)
        next_state = _next_state(record, _Event.COMPLETE_FENCE)
        reclaim = {
            r: checked_sub(
                record.granted[r], checked_add(record.landed[r], record.reclaimed_by_return[r])
            )
            for r in self._resources
        }
        self._commit(
            ident,
            attrs.evolve(record, state=next_state, reclaimed_by_fence=reclaim),
        )
        for r, amount in reclaim.items():
            self._reclaimed_by_fence[r] += amount
        return _frozen(reclaim)

    # -- grants and usage --

    def grant(
        self,
        sender_peer: int,
        qos_class: int,
        demand: Mapping[CreditResource, int],
        *,
        waiting: Mapping[CreditResource, int] | None = None,
    ) -> GrantDecision:
        """Carve a grant for the key's current epoch from free capacity
        (docs/semantics.md#receiver-allocator).

        ``demand`` is what the sender still needs beyond its available credit (its
        ``pending_demand``): the key's whole live demand, replacing what it asked before (it may
        go down, or to nothing: docs/abuse.md "Demand withdrawal"). Policy: see
        :func:`compute_grant`, with ``free`` per resource being the least of what the key's
        allocation class may still take (USER keys never the staging reserve), what its
        ``max_key_outstanding`` cap leaves, and (``grant_split`` MAX_MIN_FAIR) its max-min fair
        share among the keys with live demand (:func:`max_min_share`), but never less than the
        grant's minimum ``max(1, min(min_grant, demand))`` while free capacity covers it. A demand
        that cannot be met at least to its minimum grants nothing, stays registered as live
        demand and answers ``retry_after_us``; an empty or all-zero demand grants nothing,
        withdraws the key's live demand and just reports the totals (a refresh).

        ``waiting`` (optional) is the key's whole waiting work per resource (its demand target
        minus what it consumed and returned): the fair split takes its units from it when it
        covers ``demand`` in every demanded resource, else from ``demand`` (see
        :meth:`_grantable`). Credit the sender still holds drops a resource from its demand
        (slot credit on hand leaves a DATA_BYTES-only demand, whose unit is one byte), while
        the waiting work still shows what one charge is.

        Raises IA (malformed ids or demand, a resource this receiver does not model, u64 overflow
        of a cumulative total), IE (unknown key, or its current epoch is fenced),
        :class:`KeyQuarantined` (no grant ever goes to a quarantined key). A failure changes
        nothing.
        """
        key = self._key(sender_peer, qos_class)
        if (sender_peer, qos_class) in self._quarantined:
            raise KeyQuarantined(f"key {(sender_peer, qos_class)} is quarantined: no grants")
        ident, record = self._record(sender_peer, qos_class, key.current_epoch)
        demand = self._amounts(demand, "demand")
        shape = None if waiting is None else self._amounts(waiting, "waiting")
        next_state = _next_state(record, _Event.GRANT)
        free = self._grantable(ident[:2], record.allocation_class, demand, shape)
        offers, blocked = _plan_grant(free, demand, self._config.max_grant, self._config.min_grant)
        granted = {r: checked_add(record.granted[r], offers.get(r, 0)) for r in self._resources}
        self._commit(ident, attrs.evolve(record, state=next_state, granted=granted))
        remaining = {r: w - offers.get(r, 0) for r, w in demand.items() if w > offers.get(r, 0)}
        if remaining:
            self._live_demand[ident[:2]] = remaining
        else:
            self._live_demand.pop(ident[:2], None)
        if any(offers.values()):
            self._grants_issued += 1
        if blocked:
            self._demands_blocked += 1
        short = any(offers.get(r, 0) < wanted for r, wanted in demand.items())
        return GrantDecision(
            sender_peer=ident[0],
            qos_class=ident[1],
            epoch=ident[2],
            grant_totals=_frozen(granted),
            granted_now=_frozen({r: offers.get(r, 0) for r in self._resources}),
            retry_after_us=self._config.retry_after_us if short else 0,
            blocked=blocked,
        )

    def grant_exact(
        self, sender_peer: int, qos_class: int, amounts: Mapping[CreditResource, int]
    ) -> GrantDecision | None:
        """Grant exactly ``amounts`` to the key's current epoch, or nothing (``None``).

        The grant-ahead path (:mod:`._ahead`, protocol version 2): its caller already decided
        the amount from the key's fair share, so neither the fair split nor ``min_grant`` cuts
        it. Granted only when every amount fits what the key's allocation class may still take
        and its ``max_key_outstanding`` cap leaves, and no amount exceeds ``max_grant``. The key
        registers no live demand (the fair split of version-1 keys does not see it). Raises like
        :meth:`grant` (IA, IE, :class:`KeyQuarantined`); a failure changes nothing.
        """
        key = self._key(sender_peer, qos_class)
        if (sender_peer, qos_class) in self._quarantined:
            raise KeyQuarantined(f"key {(sender_peer, qos_class)} is quarantined: no grants")
        ident, record = self._record(sender_peer, qos_class, key.current_epoch)
        amounts = self._amounts(amounts, "amounts")
        next_state = _next_state(record, _Event.GRANT)
        room = self._grantable(ident[:2], record.allocation_class, {}, None)
        maximum = self._config.max_grant
        if not any(amounts.values()) or any(
            a > room[r] or a > maximum.get(r, 0) for r, a in amounts.items() if a
        ):
            return None
        granted = {r: checked_add(record.granted[r], amounts.get(r, 0)) for r in self._resources}
        self._commit(ident, attrs.evolve(record, state=next_state, granted=granted))
        self._grants_issued += 1
        return GrantDecision(
            sender_peer=ident[0],
            qos_class=ident[1],
            epoch=ident[2],
            grant_totals=_frozen(granted),
            granted_now=_frozen({r: amounts.get(r, 0) for r in self._resources}),
            retry_after_us=0,
            blocked=(),
        )

    def ahead_inputs(
        self, sender_peer: int, qos_class: int, epoch: int
    ) -> tuple[dict[CreditResource, int], bool, dict[CreditResource, int] | None]:
        """:meth:`unlanded`, :meth:`settled` and :meth:`cap_room` of the key+epoch in one
        lookup (the grant-ahead loop asks them on every landing). IA / IE like them."""
        _ident, record = self._record(sender_peer, qos_class, epoch)
        granted, landed, back = record.granted, record.landed, record.reclaimed_by_return
        unlanded = {r: granted[r] - landed[r] - back[r] for r in self._resources}
        consumed = record.consumed_reported
        settled = all(consumed[r] <= landed[r] for r in self._resources)
        caps = self._config.max_key_outstanding
        if not caps:
            return unlanded, settled, None
        held = self._key_outstanding[(sender_peer, qos_class)]
        room = {r: max(0, cap - (held[r] - unlanded[r])) for r, cap in caps.items()}
        return unlanded, settled, room

    def granted(self, sender_peer: int, qos_class: int, epoch: int) -> Mapping[CreditResource, int]:
        """The key+epoch's cumulative grant totals (read-only). IA / IE like
        :meth:`key_totals`; cheaper than it."""
        return MappingProxyType(self._record(sender_peer, qos_class, epoch)[1].granted)

    def unlanded(self, sender_peer: int, qos_class: int, epoch: int) -> dict[CreditResource, int]:
        """Credit of the key+epoch that has not landed: ``granted − landed − reclaimed_by_return``
        per resource (what its sender holds unused or has in flight). IA / IE like
        :meth:`key_totals`; cheaper than it (the grant-ahead path asks on every landing)."""
        _ident, record = self._record(sender_peer, qos_class, epoch)
        granted, landed, back = record.granted, record.landed, record.reclaimed_by_return
        return {r: granted[r] - landed[r] - back[r] for r in self._resources}

    def settled(self, sender_peer: int, qos_class: int, epoch: int) -> bool:
        """Whether everything the key+epoch's sender reported consumed has landed (nothing of
        it was in flight as of its last report). IA / IE like :meth:`key_totals`."""
        _ident, record = self._record(sender_peer, qos_class, epoch)
        return all(record.consumed_reported[r] <= record.landed[r] for r in self._resources)

    def cap_room(self, sender_peer: int, qos_class: int) -> dict[CreditResource, int] | None:
        """What the key's ``max_key_outstanding`` cap leaves for its unlanded credit, per capped
        resource: the cap minus what landed and is not released yet, over all its epochs
        (``None``: no cap configured). IA / IE like :meth:`current_epoch`."""
        caps = self._config.max_key_outstanding
        if not caps:
            return None
        key = (_check_sender(sender_peer), _check_qos(qos_class))
        state = self._key(sender_peer, qos_class)
        held = self._key_outstanding[key]
        record = self._records.get((*key, state.current_epoch))
        unlanded = {r: 0 for r in caps}
        if record is not None:
            for r in caps:
                unlanded[r] = record.granted[r] - record.landed[r] - record.reclaimed_by_return[r]
        return {r: max(0, cap - (held[r] - unlanded[r])) for r, cap in caps.items()}

    def on_usage(
        self,
        sender_peer: int,
        qos_class: int,
        epoch: int,
        *,
        consumed_totals: Mapping[CreditResource, int],
        returned_totals: Mapping[CreditResource, int],
    ) -> Mapping[CreditResource, int]:
        """Apply a sender's cumulative usage report; reclaim newly returned credit.

        1. Totals are cumulative; a resource a report omits keeps its previous total.
        2. ``consumed + returned > granted`` (what the receiver granted this key+epoch), or a
           returned total that data which already landed has used (``returned + landed >
           granted``), is a protocol violation: counted, :class:`RemoteProtocolError`, nothing
           else changes.
        3. Reclaim ``returned − already reclaimed by return`` (docs/semantics.md#receiver-allocator,
           idempotent): a duplicated report reclaims nothing.
        4. A total lower than one seen before is taken as an *old* report overtaken by a newer one
           (the allocator sees no sequence numbers and reordering is normal on the control path),
           so it reclaims nothing and lowers nothing; it is not an error. Lowering would re-commit
           credit the sender already gave back, and raising would punish plain reordering.

        Returns the amounts reclaimed now, per modelled resource. Raises IA (malformed input or
        unmodelled resource), IE (unknown record, or FENCED: its unlanded credit was reclaimed by
        the fence, so a late report carries nothing), RemoteProtocolError (rule 2).
        """
        ident, record = self._record(sender_peer, qos_class, epoch)
        consumed = self._amounts(consumed_totals, "consumed_totals")
        returned = self._amounts(returned_totals, "returned_totals")
        next_state = _next_state(record, _Event.REPORT_USAGE)
        for r in self._resources:
            c = consumed.get(r, record.consumed_reported[r])
            ret = returned.get(r, record.returned_reported[r])
            granted = record.granted[r]
            returned_now = max(ret, record.reclaimed_by_return[r])
            if c + ret > granted or returned_now + record.landed[r] > granted:
                self._protocol_violations += 1
                raise RemoteProtocolError(
                    f"usage report for {ident} exceeds the grant of {r.name}: consumed {c} + "
                    f"returned {ret} (landed {record.landed[r]}) > granted {granted}"
                )
        new_consumed = {
            r: max(record.consumed_reported[r], consumed.get(r, 0)) for r in self._resources
        }
        new_returned = {
            r: max(record.returned_reported[r], returned.get(r, 0)) for r in self._resources
        }
        reclaim = {
            r: max(0, new_returned[r] - record.reclaimed_by_return[r]) for r in self._resources
        }
        self._commit(
            ident,
            attrs.evolve(
                record,
                state=next_state,
                consumed_reported=new_consumed,
                returned_reported=new_returned,
                reclaimed_by_return=(  # plain dicts in the records: replaced, never mutated
                    {r: record.reclaimed_by_return[r] + reclaim[r] for r in self._resources}
                ),
            ),
        )
        for r, amount in reclaim.items():
            self._reclaimed_by_return[r] += amount
        return _frozen(reclaim)

    def data_landed(
        self, sender_peer: int, qos_class: int, epoch: int, amounts: Mapping[CreditResource, int]
    ) -> None:
        """The receiver's transport saw data of this key+epoch arrive (it now awaits release).

        Landing beyond ``granted − reclaimed_by_return`` means the sender overdrew its credit: a
        protocol violation (counted, :class:`RemoteProtocolError`, nothing else changes).
        Raises IA (malformed input, u64 overflow), IE (unknown record, or FENCED: after
        :meth:`fence_complete` no in-flight data of the epoch can exist). A failure changes
        nothing.
        """
        ident, record = self._record(sender_peer, qos_class, epoch)
        amounts = self._amounts(amounts, "amounts")
        next_state = _next_state(record, _Event.LAND)
        landed = {r: checked_add(record.landed[r], amounts.get(r, 0)) for r in self._resources}
        for r in self._resources:
            if landed[r] + record.reclaimed_by_return[r] > record.granted[r]:
                self._protocol_violations += 1
                raise RemoteProtocolError(
                    f"data landed for {ident} exceeds its credit of {r.name}: landed {landed[r]}"
                    f" + returned {record.reclaimed_by_return[r]} > granted {record.granted[r]}"
                )
        self._commit(ident, attrs.evolve(record, state=next_state, landed=landed))

    def withdraw_demand(self, sender_peer: int, qos_class: int) -> None:
        """The key wants nothing more (its waiting work is gone): it leaves the fair split.

        Raises IA (malformed ids), IE (unknown key); changes nothing else.
        """
        self._key(sender_peer, qos_class)
        self._live_demand.pop((sender_peer, qos_class), None)

    def _grantable(
        self,
        key: tuple[int, int],
        allocation_class: AllocationClass,
        demand: ResourceVector,
        waiting: ResourceVector | None = None,
    ) -> dict[CreditResource, int]:
        """Per resource, the most one grant to ``key`` may take (see :meth:`grant`).

        The fair split is taken in whole *units* of the demand (the demand vector divided by the
        gcd of its amounts, e.g. one transfer's charge when the demand is k equal charges):
        splitting each resource on its own would hand out fragments that cover no charge, and
        fragments held by every key deadlock them all (found by tests/gate/test_incast.py).
        When ``waiting`` covers the demand, the units are those of ``waiting`` instead: a
        DATA_BYTES-only demand (the key holds slot credit) has a unit of one byte, and 16
        incast senders each held half a block that none could use (issue 13).
        """
        config = self._config
        held = self._key_outstanding[key]
        pools = {r: self.free_for(r, allocation_class) for r in self._resources}
        out: dict[CreditResource, int] = {}
        for r in self._resources:
            cap = config.max_key_outstanding.get(r)
            out[r] = pools[r] if cap is None else min(pools[r], max(0, cap - held[r]))
        wanted = {r: w for r, w in demand.items() if w > 0}
        contended = any(k != key for k in self._live_demand)
        if config.grant_split is not GrantSplit.MAX_MIN_FAIR or not wanted or not contended:
            return out  # nobody else waits: the split is first-come, as it always was
        basis = wanted
        if waiting is not None and all(waiting.get(r, 0) >= w for r, w in wanted.items()):
            basis = {r: a for r, a in waiting.items() if a > 0}
        scale = math.gcd(*basis.values())
        unit = {r: a // scale for r, a in basis.items()}
        units = scale
        for r, w in wanted.items():
            others = (
                (self._key_outstanding[k][r], self._capped_want(k, r, want.get(r, 0)))
                for k, want in self._live_demand.items()
                if k != key
            )
            share = max_min_share(pools[r], (held[r], self._capped_want(key, r, w)), others)
            units = min(units, share // unit[r])
        # Never below the grant's minimum (all-or-nothing), and at least one unit: while free
        # capacity covers it, somebody always makes progress.
        for r, w in wanted.items():
            minimum = max(1, min(config.min_grant.get(r, 0), w))
            units = max(units, -(-minimum // unit[r]))
        for r in wanted:
            out[r] = min(out[r], units * unit[r])
        return out

    def _capped_want(self, key: tuple[int, int], r: CreditResource, want: int) -> int:
        cap = self._config.max_key_outstanding.get(r)
        if cap is None:
            return want
        return min(want, max(0, cap - self._key_outstanding[key][r]))

    # -- write admission and quarantine (docs/abuse.md) --

    def admit_write(
        self, sender_peer: object, qos_class: object, epoch: object, amounts: object
    ) -> WriteAdmission:
        """Decide, before its bytes touch memory, whether a credited write may land.

        Accepted (and counted as landed, in place of :meth:`data_landed`) exactly when the key
        is known and not quarantined, the epoch is ACTIVE or FENCING (in-flight data of a fenced
        connection may still land until :meth:`fence_complete`), and the charge fits the credit
        the sender still holds of that epoch: ``landed + reclaimed_by_return + amount ≤ granted``
        per resource. A sender's *claims* (its usage reports) can only lower what it holds, never
        what the receiver physically stores: so physical occupancy (landed − released, summed) never
        exceeds capacity, whatever a sender reports.

        Refused, in this order: MALFORMED (ids or amounts not well-formed, see
        :func:`~tent_credit._admission.parse_write_amounts`), UNKNOWN_EPOCH (a key or epoch never
        opened in this session), QUARANTINED, FENCED_SESSION (fence completed, or settled and
        forgotten), OVER_CREDIT. Every refusal counts a protocol violation; a refusal of a known
        key also quarantines that key (RFC rule 4, :meth:`quarantine`). An unknown key is not
        remembered (a peer must not grow the receiver's state by inventing keys).

        Never raises: every argument may carry peer-controlled values. An honest sender, whose
        writes are covered by credit it neither consumed elsewhere nor returned, is never refused.
        """
        reason = self._admission_refusal(sender_peer, qos_class, epoch, amounts)
        if reason is None:
            self._writes_admitted += 1
            return ACCEPTED
        self._writes_refused += 1
        self._protocol_violations += 1
        if is_u64(sender_peer) and type(qos_class) is int and 0 <= qos_class <= U32_MAX:
            key = (sender_peer, qos_class)
            if key in self._keys and key not in self._quarantined:
                self.quarantine(*key)
        return refused(reason)

    def _admission_refusal(
        self, sender_peer: object, qos_class: object, epoch: object, amounts: object
    ) -> WriteRefusal | None:
        if not is_u64(sender_peer) or type(qos_class) is not int or not 0 <= qos_class <= U32_MAX:
            return WriteRefusal.MALFORMED
        if not is_u64(epoch) or epoch == 0:
            return WriteRefusal.MALFORMED
        charge = parse_write_amounts(amounts, self._resources)
        if charge is None:
            return WriteRefusal.MALFORMED
        key = (sender_peer, qos_class)
        state = self._keys.get(key)
        if state is None or epoch > state.current_epoch:
            return WriteRefusal.UNKNOWN_EPOCH
        if key in self._quarantined:
            return WriteRefusal.QUARANTINED
        ident = (sender_peer, qos_class, epoch)
        record = self._records.get(ident)
        if record is None or record.state is EpochState.FENCED:
            return WriteRefusal.FENCED_SESSION
        landed = {r: record.landed[r] + charge.get(r, 0) for r in self._resources}
        if any(landed[r] + record.reclaimed_by_return[r] > record.granted[r] for r in landed):
            return WriteRefusal.OVER_CREDIT
        # Within the grant, so within u64 and within capacity: the commit cannot refuse.
        self._commit(
            ident,
            attrs.evolve(record, state=_next_state(record, _Event.LAND), landed=landed),
        )
        return None

    @property
    def quarantined_keys(self) -> int:
        """How many keys this session has quarantined (they stay so until the session ends)."""
        return len(self._quarantined)

    def is_quarantined(self, sender_peer: int, qos_class: int) -> bool:
        """Whether the key is quarantined (IA on malformed ids; an unknown key is not)."""
        return (_check_sender(sender_peer), _check_qos(qos_class)) in self._quarantined

    def quarantine(self, sender_peer: int, qos_class: int) -> Mapping[CreditResource, int]:
        """Quarantine a key for the rest of the session (RFC rule 4: fail/quarantine the peer).

        From now on the key gets no grant and no new epoch (:class:`KeyQuarantined`) and every
        write of any of its epochs is refused (QUARANTINED). Because nothing of it can land any
        more, every epoch it holds is fenced *and* its fence completed at once: everything that
        never landed is reclaimed (returned, per resource) for other keys; what already landed
        stays committed until :meth:`release`. Its usage reports reclaim nothing further (its
        epochs are FENCED). Idempotent. Raises IA (malformed ids), IE (unknown key); a failure
        changes nothing.
        """
        self._key(sender_peer, qos_class)
        key = (sender_peer, qos_class)
        self._quarantined.add(key)
        self._live_demand.pop(key, None)
        reclaimed = dict.fromkeys(self._resources, 0)
        for ident in [i for i in self._records if i[:2] == key]:
            record = self._records[ident]
            if record.state is EpochState.ACTIVE:
                record = attrs.evolve(record, state=_next_state(record, _Event.FENCE))
            if record.state is EpochState.FENCING:
                reclaim = {
                    r: record.granted[r] - record.landed[r] - record.reclaimed_by_return[r]
                    for r in self._resources
                }
                record = attrs.evolve(
                    record,
                    state=_next_state(record, _Event.COMPLETE_FENCE),
                    reclaimed_by_fence=reclaim,
                )
                for r, amount in reclaim.items():
                    reclaimed[r] += amount
                    self._reclaimed_by_fence[r] += amount
            self._commit(ident, record)  # lowers outstanding only: cannot refuse
        return _frozen(reclaimed)

    def release(
        self, sender_peer: int, qos_class: int, epoch: int, amounts: Mapping[CreditResource, int]
    ) -> None:
        """The receiver's own consumer finished with landed data: free that capacity.

        Only data that landed and was not yet released can be released, in any epoch state (a
        sender's message never releases anything). Raises IA (malformed input, or more than
        ``landed − released`` of some resource), IE (unknown record). A failure changes nothing.
        """
        ident, record = self._record(sender_peer, qos_class, epoch)
        amounts = self._amounts(amounts, "amounts")
        next_state = _next_state(record, _Event.RELEASE)
        released: dict[CreditResource, int] = {}
        for r in self._resources:
            amount = amounts.get(r, 0)
            unreleased = record.landed[r] - record.released[r]
            if amount > unreleased:
                raise InvalidArgument(
                    f"release of {amount} {r.name} for {ident} exceeds the {unreleased} "
                    "landed and not yet released"
                )
            released[r] = record.released[r] + amount
        self._commit(ident, attrs.evolve(record, state=next_state, released=released))
        for r in self._resources:
            self._released[r] += amounts.get(r, 0)

    # -- the control budget --

    def try_acquire_control(self) -> bool:
        """Take one control-message slot; ``False`` when all ``control_slots`` are in use.

        The control budget is separate from data capacity (RFC "Control traffic never consumes
        data credit"): zero free data capacity never blocks it.
        """
        if self._control_in_use >= self._config.control_slots:
            return False
        self._control_in_use += 1
        return True

    def release_control(self) -> None:
        """Give back a control slot. Raises LocalProtocolError (nothing changes) if none is held."""
        if self._control_in_use == 0:
            raise LocalProtocolError("release_control without a held control slot")
        self._control_in_use -= 1

    # -- internals --

    def _check_resource(self, resource: object) -> CreditResource:
        if not isinstance(resource, CreditResource) or resource not in self._config.capacity:
            raise InvalidArgument(f"resource {describe(resource)} is not modelled by this receiver")
        return resource

    def _amounts(self, value: object, what: str) -> ResourceVector:
        amounts = _resource_map(value, what)
        for resource in amounts:
            self._check_resource(resource)
        return amounts

    def _key(self, sender_peer: int, qos_class: int) -> _KeyState:
        key = (_check_sender(sender_peer), _check_qos(qos_class))
        state = self._keys.get(key)
        if state is None:
            raise InvalidEntry(f"unknown credit key (sender_peer, qos_class)={key}")
        return state

    def _record(
        self, sender_peer: int, qos_class: int, epoch: int
    ) -> tuple[_EpochId, _EpochRecord]:
        key = self._key(sender_peer, qos_class)
        ident = (sender_peer, qos_class, _check_epoch(epoch))
        record = self._records.get(ident)
        if record is None:
            raise InvalidEntry(
                f"unknown epoch {epoch} of key {ident[:2]} (current {key.current_epoch}); "
                "fenced epochs are forgotten once they hold nothing"
            )
        return ident, record

    def _commit(self, ident: _EpochId, new: _EpochRecord) -> None:
        """Check the capacity invariants on the would-be totals, then install ``new``.

        Raises (and changes nothing) if the new record would hold a negative outstanding
        (:class:`ArithmeticOverflow`) or the totals would exceed ``capacity`` or, for USER keys,
        ``capacity − staging_reserve`` (:class:`TooManyRequests`). Every public call computes its
        step so that neither can happen; this is the last line of defence of
        docs/semantics.md#receiver-allocator.
        """
        old = self._records[ident]
        total, user = self._outstanding, self._user_outstanding
        capacity = self._config.capacity
        is_user = new.allocation_class is AllocationClass.USER
        deltas = []
        for r in self._resources:
            after = new.outstanding(r)
            if after < 0 or new.released[r] > new.landed[r]:
                raise ArithmeticOverflow(f"{ident} would hold a negative outstanding of {r.name}")
            delta = after - old.outstanding(r)
            deltas.append(delta)
            if delta <= 0:
                continue  # nothing grows: no bound can be crossed by this resource
            if total[r] + delta > capacity[r] or (
                is_user and user[r] + delta > self._config.limit_for(r, AllocationClass.USER)
            ):
                raise TooManyRequests(
                    f"{ident} would over-commit {r.name} (docs/semantics.md#receiver-allocator)"
                )
        key = ident[:2]
        held = self._key_outstanding[key]
        for r, delta in zip(self._resources, deltas, strict=True):
            if delta:
                held[r] += delta
                total[r] += delta
                if is_user:
                    user[r] += delta
        fencing = (new.state is EpochState.FENCING) - (old.state is EpochState.FENCING)
        if fencing:
            self._key_fencing[key] = self._key_fencing.get(key, 0) + fencing
        if new.state is EpochState.FENCED and new.settled():
            del self._records[ident]
        else:
            self._records[ident] = new
