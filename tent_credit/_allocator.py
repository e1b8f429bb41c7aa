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

This module holds the class and the epoch lifecycle, the usage and landing accounting, release
and the control budget. Its other parts each have their own module: the state and the checked
commit every mutation goes through (:mod:`._allocator_state`), grants and the fair split
(:mod:`._allocator_grants`, its pure policy :mod:`._grant_plan`), write admission and quarantine
(:mod:`._allocator_admission`), and one key+epoch's record and state machine
(:mod:`._epoch_record`). The names tests and other modules import from here stay importable here.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ._allocator_admission import _WriteAdmission
from ._allocator_config import (
    AllocationClass,
    AllocatorConfig,
    AllocatorStatistics,
    EpochState,
    GrantDecision,
    KeyTotalsSnapshot,
    ResourceVector,
    _frozen,
)
from ._allocator_grants import _GrantPolicy
from ._arith import checked_add, checked_sub
from ._describe import describe
from ._epoch_record import (
    _check_qos,
    _check_sender,
    _Event,
    _fresh_record,
    _KeyState,
    _next_state,
)
from ._grant_plan import compute_grant
from ._types import CreditResource, SessionId
from .errors import (
    InvalidArgument,
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


class ReceiverCreditAllocator(_GrantPolicy, _WriteAdmission):
    """Global capacity of one receiver session, carved into per key+epoch cumulative grants.

    Keys are ``(sender_peer, qos_class)``; a receiver restart is a new allocator with a new
    :class:`SessionId`. Every public call validates completely before it changes anything: when
    it raises, the allocator is exactly as it was (only the ``protocol_violations`` counter counts
    a refused :class:`RemoteProtocolError`).

    Bounds: at most ``config.max_keys`` distinct keys per session (a key's epoch counter is kept
    for the session's lifetime so an epoch number is never reused); a key+epoch record is dropped
    once it is fenced and holds nothing (it then reads as unknown: :class:`InvalidEntry`).
    """

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
            self._books += 1
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
            self._commit(old_ident, old.replace(state=_next_state(old, _Event.FENCE)))
        state.current_epoch = new_epoch
        self._records[(*key, new_epoch)] = _fresh_record(allocation_class, self._resources)
        self._books += 1
        return new_epoch

    def fence(self, sender_peer: int, qos_class: int, epoch: int) -> None:
        """Fence an epoch (its sender disconnected): no more grants for it; idempotent.

        Its outstanding stays committed until :meth:`fence_complete`. Raises IA (malformed ids)
        or IE (unknown record). A failure changes nothing.
        """
        ident, record = self._record(sender_peer, qos_class, epoch)
        self._commit(ident, record.replace(state=_next_state(record, _Event.FENCE)))
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
            record.replace(state=next_state, reclaimed_by_fence=reclaim),
        )
        for r, amount in reclaim.items():
            self._reclaimed_by_fence[r] += amount
        return _frozen(reclaim)

    # -- usage reports, landing and release --

    def on_usage(
        self,
        sender_peer: int,
        qos_class: int,
        epoch: int,
        *,
        consumed_totals: Mapping[CreditResource, int],
        returned_totals: Mapping[CreditResource, int],
        latest: bool = False,
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
        5. ``latest``: the caller applies reports in their sequence order (a version-2 receiver
           endpoint), so a lower *consumed* total is the sender's exact rollback of a refused
           submit, and is taken as it is: the grant-ahead loop reads from it whether the key
           has data in flight (:meth:`ahead_inputs`), and a refused charge counted in flight
           for good left a key with a larger waiting charge unserved
           (docs/credit_protocol.md#mixed-charges). Returned totals still only grow.

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
        if latest:
            known = record.consumed_reported
            new_consumed = {r: consumed.get(r, known[r]) for r in self._resources}
        else:
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
            record.replace(
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
        self._commit(ident, record.replace(state=next_state, landed=landed))

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
        self._commit(ident, record.replace(state=next_state, released=released))
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
