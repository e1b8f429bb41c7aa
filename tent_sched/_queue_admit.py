"""Admission: :meth:`~tent_sched._queue.AdmissionQueue.try_admit`, all or nothing.

A submit's owners are validated in the order of semantics §2 (arguments, per-owner checks, byte
overflow, batch slots, public-id collisions, capacity with the staging reserves), then committed
at once: owner ids issued, public ids mapped, each owner inserted in order-key order. A mixin of
:class:`~tent_sched._queue.AdmissionQueue` over :mod:`._queue_state`; it never dispatches.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from ._describe import describe
from ._queue_state import _ORDER_KEY, _Owner, _QueueState
from ._queue_values import (
    NO_DEADLINE_KEY,
    U64_MAX,
    OwnerKind,
    OwnerRequest,
    OwnerView,
    _check_u64,
)
from .errors import ExceedsDispatchWindow, InvalidArgument, InvalidEntry, TooManyRequests


class _QueueAdmission(_QueueState):
    """The admission path of an :class:`AdmissionQueue` (module docstring)."""

    def try_admit(
        self, batch_token: int, batch_slots_left: int, owners: Sequence[OwnerRequest]
    ) -> tuple[int, ...]:
        """Admit a submit's owners, all or nothing; return their owner ids in submit order.

        Checks, in this order (§2); the first failing one raises and nothing changes:

        1. ``batch_token`` not a u64 or 0, ``batch_slots_left`` not a u64 → InvalidArgument.
        2. An empty submit → ``()``, nothing changes.
        3. Per owner: not an :class:`OwnerRequest` (kind, length and id ranges are its own
           validators), longer than ``max_dispatch_bytes``, a public id (own or derived) seen
           twice in the submit → InvalidArgument.
        4. The byte charge overflows u64 → InvalidArgument.
        5. More public ids (own + derived) than ``batch_slots_left`` → TooManyRequests.
        6. A public id already mapped for this token (batch not yet retired) → InvalidEntry.
        7. Capacity, limits inclusive → TooManyRequests: ``next_owners > max_owners``,
           ``next_bytes > max_bytes``, ``next_user_owners > max_owners - staging_owner_reserve``,
           ``next_user_bytes > max_bytes - staging_byte_reserve``. Staging-internal owners are
           bound by the totals only; user owners also by ``max - reserve``.

        Admitted owners are QUEUED: appended (FIFO) or inserted after every owner with a key
        ≤ theirs (EDF; key = deadline, or ``2**64 - 1`` without one).
        """
        self._check_not_picking("try_admit")
        _check_u64(batch_token, "batch_token")
        if batch_token == 0:
            raise InvalidArgument("batch token 0 is reserved")
        _check_u64(batch_slots_left, "batch_slots_left")
        if not isinstance(owners, Sequence):
            raise InvalidArgument(f"owners must be a sequence, got {describe(owners)}")
        if not owners:
            return ()
        requests = tuple(owners)

        public_ids: list[int] = []
        seen: set[int] = set()
        charge_bytes = charge_user_owners = charge_user_bytes = 0
        for request in requests:
            if not isinstance(request, OwnerRequest):
                raise InvalidArgument(f"owners must be OwnerRequest, got {type(request).__name__}")
            if self._max_dispatch_bytes is not None and request.length > self._max_dispatch_bytes:
                raise ExceedsDispatchWindow(
                    f"owner {request.public_id}: length {request.length} exceeds "
                    f"max_dispatch_bytes {self._max_dispatch_bytes}"
                )
            for public_id in (request.public_id, *request.derived_ids):
                if public_id in seen:
                    raise InvalidArgument(f"public id {public_id} appears twice in the submit")
                seen.add(public_id)
                public_ids.append(public_id)
            charge_bytes += request.length
            if request.kind is OwnerKind.USER:
                charge_user_owners += 1
                charge_user_bytes += request.length

        next_bytes = self._outstanding_bytes + charge_bytes
        if next_bytes > U64_MAX:
            raise InvalidArgument(f"byte charge {charge_bytes} overflows u64")
        if len(public_ids) > batch_slots_left:
            raise TooManyRequests(
                f"{len(public_ids)} public ids exceed the {batch_slots_left} batch slots left"
            )
        for public_id in public_ids:
            if (batch_token, public_id) in self._public_ids:
                raise InvalidEntry(
                    f"public id {public_id} is already mapped in batch {batch_token}"
                )

        limits = self._limits
        next_owners = self._outstanding_owners + len(requests)
        next_user_owners = self._outstanding_user_owners + charge_user_owners
        next_user_bytes = self._outstanding_user_bytes + charge_user_bytes
        if next_owners > limits.max_outstanding_owners:
            raise TooManyRequests(
                f"{next_owners} owners would exceed max_outstanding_owners "
                f"{limits.max_outstanding_owners}"
            )
        if next_bytes > limits.max_outstanding_bytes:
            raise TooManyRequests(
                f"{next_bytes} bytes would exceed max_outstanding_bytes "
                f"{limits.max_outstanding_bytes}"
            )
        if next_user_owners > self._user_owner_limit:
            raise TooManyRequests(
                f"{next_user_owners} user owners would exceed max_outstanding_owners - "
                f"staging_owner_reserve = {self._user_owner_limit}"
            )
        if next_user_bytes > self._user_byte_limit:
            raise TooManyRequests(
                f"{next_user_bytes} user bytes would exceed max_outstanding_bytes - "
                f"staging_byte_reserve = {self._user_byte_limit}"
            )

        # Validated: commit.
        owner_ids: list[int] = []
        batch = self._batches.setdefault(batch_token, [])
        for request in requests:
            owner = self._new_owner(batch_token, request)
            owner_id = owner.view.owner_id
            self._owners[owner_id] = owner
            for public_id in (request.public_id, *request.derived_ids):
                self._public_ids[(batch_token, public_id)] = owner_id
            batch.append(owner_id)
            owner_ids.append(owner_id)
            if self._deadline_aware:  # §2: bisect_right insert, EDF with FIFO ties
                bisect.insort_right(self._entries, owner, lo=self._head, key=_ORDER_KEY)
            else:
                self._entries.append(owner)
        self._queued += len(requests)
        self._admitted += len(requests)
        self._outstanding_owners = next_owners
        self._outstanding_bytes = next_bytes
        self._outstanding_user_owners = next_user_owners
        self._outstanding_user_bytes = next_user_bytes
        return tuple(owner_ids)

    def _new_owner(self, batch_token: int, request: OwnerRequest) -> _Owner:
        owner_id = self._next_owner_id
        self._next_owner_id += 1
        view = OwnerView(
            owner_id=owner_id,
            public_id=request.public_id,
            length=request.length,
            kind=request.kind,
            deadline_ns=request.deadline_ns,
            degradation_eligible=request.degradation_eligible,
            priority=request.priority,
            gate_key=request.gate_key,
            context=request.context,
            enqueue_seq=self._next_seq,
        )
        self._next_seq += 1
        if not self._deadline_aware:
            key = 0
        elif request.deadline_ns == 0:
            key = NO_DEADLINE_KEY
        else:
            key = request.deadline_ns
        return _Owner(view, batch_token, request.derived_ids, key)
