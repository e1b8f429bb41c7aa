"""The receiver allocator's state and the one commit every change of it goes through.

:class:`_AllocatorState` holds what :class:`~tent_credit.ReceiverCreditAllocator` keeps: the
record of every key+epoch (:mod:`._epoch_record`), the running totals over them, per key what
it holds and its live demand, the quarantined keys and the counters. It answers what is committed
and what is free, and :meth:`_AllocatorState._commit` is the last line of defence of
docs/semantics.md#receiver-allocator: it checks the capacity invariants on the would-be totals
before it installs a record. The operations on that state are the allocator's
(:mod:`._allocator`) and its two parts, grants (:mod:`._allocator_grants`) and write admission
(:mod:`._allocator_admission`); they share this base so that every one of them changes the books
only through the same checked commit.
"""

from __future__ import annotations

from ._allocator_config import (
    AllocationClass,
    AllocatorConfig,
    EpochState,
    ResourceVector,
    _resource_map,
)
from ._arith import U32_MAX, U64_MAX
from ._describe import describe
from ._epoch_record import (
    _check_epoch,
    _check_qos,
    _check_sender,
    _EpochId,
    _EpochRecord,
    _KeyState,
)
from ._types import CreditResource, SessionId
from .errors import ArithmeticOverflow, InvalidArgument, InvalidEntry, TooManyRequests


class _AllocatorState:
    """The books of :class:`~tent_credit.ReceiverCreditAllocator` (see the module docstring)."""

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
        # what the USER class may hold of each resource (capacity − staging_reserve)
        self._user_limit = {r: config.limit_for(r, AllocationClass.USER) for r in self._resources}
        self._books = 0

    # -- what is committed and what is free --

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
        return self._class_free(allocation_class)[resource]

    def user_free(self) -> dict[CreditResource, int]:
        """:meth:`free_for` of every modelled resource for the USER class."""
        return self._class_free(AllocationClass.USER)

    def _class_free(self, allocation_class: AllocationClass) -> dict[CreditResource, int]:
        """:meth:`free_for` of every modelled resource for ``allocation_class`` (trusted)."""
        capacity, total = self._config.capacity, self._outstanding
        if allocation_class is AllocationClass.STAGING_INTERNAL:
            return {r: capacity[r] - total[r] for r in self._resources}
        user, limit = self._user_outstanding, self._user_limit
        return {r: min(capacity[r] - total[r], limit[r] - user[r]) for r in self._resources}

    @property
    def books(self) -> int:
        """A number that changes whenever any record or total of the books changes (every
        commit, every epoch opened): what was computed from the books at one value of it still
        holds while it stays the same (the grant-ahead loop keeps its positions so)."""
        return self._books

    # -- lookups and the commit every mutation goes through --

    def _check_resource(self, resource: object) -> CreditResource:
        if not isinstance(resource, CreditResource) or resource not in self._config.capacity:
            raise InvalidArgument(f"resource {describe(resource)} is not modelled by this receiver")
        return resource

    def _amounts(self, value: object, what: str) -> ResourceVector:
        amounts = _resource_map(value, what)
        for resource in amounts:
            self._check_resource(resource)
        return amounts

    # _key and _record check their ids inline and call the checks only to raise: the
    # grant-ahead loop and the data path look records up several times per landed write (at
    # 16 senders, 38 of the receiver's calls per block were these three checks).

    def _key(self, sender_peer: int, qos_class: int) -> _KeyState:
        if type(sender_peer) is not int or not 0 <= sender_peer <= U64_MAX:
            _check_sender(sender_peer)
        if type(qos_class) is not int or not 0 <= qos_class <= U32_MAX:
            _check_qos(qos_class)
        key = (sender_peer, qos_class)
        state = self._keys.get(key)
        if state is None:
            raise InvalidEntry(f"unknown credit key (sender_peer, qos_class)={key}")
        return state

    def _record(
        self, sender_peer: int, qos_class: int, epoch: int
    ) -> tuple[_EpochId, _EpochRecord]:
        key = self._key(sender_peer, qos_class)
        if type(epoch) is not int or not 0 < epoch <= U64_MAX:
            _check_epoch(epoch)
        ident = (sender_peer, qos_class, epoch)
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
        self._books += 1  # even if refused below: a spurious change costs a cache miss, no more
        total, user = self._outstanding, self._user_outstanding
        capacity = self._config.capacity
        is_user = new.allocation_class is AllocationClass.USER
        deltas = []
        # EpochRecord.outstanding spelled out (two calls per resource per commit, three commits
        # per credited write at the receiver)
        granted, released = new.granted, new.released
        by_return, by_fence = new.reclaimed_by_return, new.reclaimed_by_fence
        old_granted, old_released = old.granted, old.released
        old_return, old_fence = old.reclaimed_by_return, old.reclaimed_by_fence
        for r in self._resources:
            after = granted[r] - released[r] - by_return[r] - by_fence[r]
            if after < 0 or released[r] > new.landed[r]:
                raise ArithmeticOverflow(f"{ident} would hold a negative outstanding of {r.name}")
            delta = after - (old_granted[r] - old_released[r] - old_return[r] - old_fence[r])
            deltas.append(delta)
            if delta <= 0:
                continue  # nothing grows: no bound can be crossed by this resource
            if total[r] + delta > capacity[r] or (
                is_user and user[r] + delta > self._user_limit[r]
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
