"""The receiver allocator's grants: what one grant to a key may take, and the grant itself.

:class:`_GrantPolicy` is the part of :class:`~tent_credit.ReceiverCreditAllocator` that carves
grants out of free capacity: the demand-driven :meth:`~_GrantPolicy.grant` (version 1), whose
room is the key's class, its ``max_key_outstanding`` cap and its max-min fair share among the
keys with live demand, taken in whole units of its demand (:meth:`~_GrantPolicy._grantable`),
and whose amounts follow the pure policy of :mod:`._grant_plan`; the exact grant of the
grant-ahead path (:meth:`~_GrantPolicy.grant_exact`, version 2) and the reads that path takes
its top-ups from. Separate from the epoch lifecycle and the usage accounting of
:mod:`._allocator` because it alone owns the live demand and decides between keys.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

from ._allocator_config import AllocationClass, GrantDecision, ResourceVector, _frozen
from ._allocator_state import _AllocatorState
from ._arith import checked_add
from ._describe import describe
from ._epoch_record import _check_qos, _check_sender, _EpochId, _Event, _next_state
from ._fairness import GrantSplit, max_min_share
from ._grant_plan import _plan_grant
from ._types import CreditResource
from .errors import InvalidArgument, KeyQuarantined


class _GrantPolicy(_AllocatorState):
    """Grants of :class:`~tent_credit.ReceiverCreditAllocator` (see the module docstring)."""

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
        self._commit(ident, record.replace(state=next_state, granted=granted))
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
        amounts = self._amounts(amounts, "amounts")
        ident = self._grant_exactly(sender_peer, qos_class, amounts)
        if ident is None:
            return None
        granted = self._records[ident].granted
        return GrantDecision(
            sender_peer=ident[0],
            qos_class=ident[1],
            epoch=ident[2],
            grant_totals=_frozen(granted),
            granted_now=_frozen({r: amounts.get(r, 0) for r in self._resources}),
            retry_after_us=0,
            blocked=(),
        )

    def top_up(
        self, sender_peer: int, qos_class: int, amounts: Mapping[CreditResource, int]
    ) -> bool:
        """:meth:`grant_exact` for the grant-ahead loop (:mod:`._standing`), which asks on every
        landing and reads the books, not a decision: the same checks and the same grant,
        answered with whether it was made. Raises like :meth:`grant_exact`; a failure changes
        nothing."""
        amounts = self._amounts(amounts, "amounts")
        return self._grant_exactly(sender_peer, qos_class, amounts) is not None

    def _top_up_own(
        self, sender_peer: int, qos_class: int, amounts: Mapping[CreditResource, int]
    ) -> bool:
        """:meth:`top_up` for the grant-ahead loop of this receiver (:mod:`._standing`), whose
        amounts are its own arithmetic over the books (modelled resources, whole charges no
        larger than the free capacity): the argument's validation and copy are skipped, every
        check of the grant itself runs (key, quarantine, record state, room, ``max_grant``).
        A negative amount would lower a cumulative grant: it still raises."""
        for a in amounts.values():
            if type(a) is not int or a < 0:
                raise InvalidArgument(f"a top-up amount must be a u64 int, got {describe(a)}")
        return self._grant_exactly(sender_peer, qos_class, amounts) is not None

    def _grant_exactly(
        self, sender_peer: int, qos_class: int, amounts: Mapping[CreditResource, int]
    ) -> _EpochId | None:
        key = self._key(sender_peer, qos_class)
        if (sender_peer, qos_class) in self._quarantined:
            raise KeyQuarantined(f"key {(sender_peer, qos_class)} is quarantined: no grants")
        ident, record = self._record(sender_peer, qos_class, key.current_epoch)
        next_state = _next_state(record, _Event.GRANT)
        if not any(amounts.values()):
            return None
        room = self._grantable(ident[:2], record.allocation_class, {}, None)
        maximum = self._config.max_grant
        # loops, not generators: the grant-ahead loop tops a key up on most landings
        for r, a in amounts.items():
            if a and (a > room[r] or a > maximum.get(r, 0)):
                return None
        granted = dict(record.granted)
        for r, a in amounts.items():
            if a:
                granted[r] = checked_add(granted[r], a)
        self._commit(ident, record.replace(state=next_state, granted=granted))
        self._grants_issued += 1
        return ident

    def ahead_inputs(
        self, sender_peer: int, qos_class: int, epoch: int
    ) -> tuple[dict[CreditResource, int], bool, dict[CreditResource, int] | None]:
        """:meth:`unlanded`, :meth:`settled` and :meth:`cap_room` of the key+epoch in one
        lookup (the grant-ahead loop asks them on every landing). IA / IE like them."""
        _ident, record = self._record(sender_peer, qos_class, epoch)
        granted, landed, back = record.granted, record.landed, record.reclaimed_by_return
        unlanded = {r: granted[r] - landed[r] - back[r] for r in self._resources}
        consumed = record.consumed_reported
        settled = True
        for r in self._resources:
            if consumed[r] > landed[r]:
                settled = False
                break
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

    def unreleased(
        self, sender_peer: int, qos_class: int, epoch: int, resources: tuple[CreditResource, ...]
    ) -> int:
        """The least over ``resources`` of the key+epoch's ``granted − released −
        reclaimed_by_return``: the slot credit it holds (``TransferBook``). IA / IE like
        :meth:`key_totals`; cheaper than it (asked for every transfer a write opens)."""
        _ident, record = self._record(sender_peer, qos_class, epoch)
        granted, released, back = record.granted, record.released, record.reclaimed_by_return
        return min(granted[r] - released[r] - back[r] for r in resources)

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
        pools = self._class_free(allocation_class)
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
