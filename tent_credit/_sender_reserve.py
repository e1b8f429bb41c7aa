"""The sender endpoint's reservation path: what the dispatch loop calls per transfer.

:meth:`try_reserve`, :meth:`commit`, :meth:`rollback`, :meth:`complete` and
:meth:`return_unused` move credit through the ledger; a blocked reserve and
:meth:`set_pending_demand` raise the demand the next usage report carries (version 1) or the
waiting work of the level (version 2). A mixin of
:class:`~tent_credit._sender_endpoint.SenderEndpoint` over :mod:`._sender_state`, apart from the
input and report paths because it is the hot one: it runs per transfer, they per message.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._arith import U64_MAX, check_u64, checked_add
from ._backpressure import BackpressureInfo, BackpressureSource
from ._describe import describe
from ._endpoint_common import EndpointEvent, _vector
from ._ledger import Blocked, ReservationToken, TokenState
from ._negotiation import NegotiationState
from ._sender_state import _SenderState
from ._types import CreditCharge, CreditKey, CreditResource
from .errors import ArithmeticOverflow, InvalidArgument, InvalidEntry


class _SenderReservations(_SenderState):
    """Reservations and demand of a :class:`SenderEndpoint` (module docstring)."""

    def try_reserve(self, charge: CreditCharge, now_ns: int) -> ReservationToken | BackpressureInfo:
        """Reserve ``charge`` atomically against the current grant, or explain why not.

        Returns a RESERVED token, or a :class:`BackpressureInfo` (source RECEIVER_CREDIT) when
        the peer is not ACTIVE or some resource lacks credit; in the latter case the shortfall
        raises the demand target the next usage report carries. Raises
        :class:`InvalidArgument` for a malformed charge or a bad ``now_ns``, and
        :class:`ArithmeticOverflow` for a charge this epoch's own consumption leaves no u64
        room for (``consumed + amount > 2**64 - 1``); a raised call changes nothing. A charge
        that only the credit returned crowds out (``consumed + returned + amount`` past u64:
        the receiver granted close to 2**64) is blocked, never raised. A blocked reserve
        changes nothing but the demand target and the ``blocked`` counters.
        """
        if not isinstance(charge, CreditCharge):
            raise InvalidArgument(f"expected a CreditCharge, got {describe(charge)}")
        self._check_time(now_ns)
        if self._key is not None:
            self._check_satisfiable(self._key, charge)
        self._blocked_charge = None
        self._advance(now_ns)
        self._negotiation.check_freshness(self._now_ns)
        key = self._key
        if key is None or not self._negotiation.may_reserve():
            self._blocked += 1
            self._trace_reserve(charge, None)
            return self._backpressure(tuple(r for r, _ in charge.parts))
        if not self._ledger.vectors(key)[0]:  # no update yet at this epoch
            self._blocked += 1
            self._raise_demand(key, charge)
            self._trace_reserve(charge, None)
            return self._backpressure(tuple(r for r, _ in charge.parts))
        result = self._ledger.try_reserve(key, charge)
        if isinstance(result, Blocked):
            self._blocked += 1
            self._raise_demand(key, charge)
            self._trace_reserve(charge, None)
            self._blocked_charge = charge
            return self._backpressure(result.exhausted)
        if self._ahead:
            if self._direct_waiting:
                # version 2, a caller without a gate: the reserved charge no longer waits
                self._levels.unwait(dict(charge.parts))
                self._observe_level()
            elif self._levels.settling():
                # Otherwise the level stands and only the credit on hand fell: that can end
                # rule 2's hold but neither start it nor make news, so only a hold running
                # needs a new look (a reservation is the most frequent event).
                self._observe_level()
        self._trace_reserve(charge, result)
        return result

    # ---------------------------------------------------------------- repeated blocked picks

    def _repeat_state(self) -> tuple[object, ...]:
        # Everything a blocked try_reserve reads or changes, the clock aside: the ledger (its
        # change counter), the peer's state, version, key and epoch, the retry hint, and the
        # demand the blocked path raises (and a gate restates right after it). The waiting
        # work and the demand target are held as the dicts themselves, not copies of their
        # items: both are replaced, never changed in place. Fields, not properties, throughout:
        # a dispatch pass asks for this stamp several times per block.
        n = self._negotiation
        return (
            self._ledger._changes,
            n._state,
            n._version,
            self._key,
            self._epoch,
            self._retry_after_us,
            self._direct_waiting,
            self._levels.waiting,
            self._demand_target,
        )

    def repeat_stamp(self, charge: CreditCharge) -> tuple[object, ...] | None:
        """After a :meth:`try_reserve` of ``charge`` the ledger blocked (and whatever the
        caller did next, e.g. a gate's :meth:`set_pending_demand`): a stamp for
        :meth:`repeat_blocked`; ``None`` after any other outcome, or while tracing (a trace
        records every attempt)."""
        if self._blocked_charge is not charge or self._trace is not None:
            return None
        return self._repeat_state()

    def quiet_stamp(self) -> tuple[tuple[object, ...], int | None] | None:
        """What a blocked :meth:`try_reserve` reads but the clock (as :meth:`repeat_stamp`),
        and the first instant at which the clock alone may change its answer (the freshness
        TTL running out; ``None``: never). Equal stamps before that instant: a reservation
        that blocked blocks again the same way. ``None`` while tracing (a trace records every
        attempt). A query; a dispatch gate composes it (``DispatchGate.quiet_stamp``)."""
        if self._trace is not None:
            return None
        return self._repeat_state(), self._negotiation.stale_at_ns()

    def repeat_blocked(self, stamp: tuple[object, ...], now_ns: int) -> bool:
        """Whether :meth:`try_reserve` of the charge that made ``stamp`` would block again at
        ``now_ns`` the same way, with the same :class:`BackpressureInfo` and nothing to change
        but the clock and the ``blocked`` counters; if so, those are applied and ``True``
        returned. ``False`` changes nothing but what ``try_reserve`` at ``now_ns`` would also
        change first (the clock, a TTL expiry): the caller then calls ``try_reserve``.

        A gate asks this for an owner still stalled since its last pick: it is asked again at
        every dispatch pass until a grant comes (docs/incast.md#incast-cpu). Raises
        :class:`InvalidArgument` for a bad ``now_ns`` (nothing changes).
        """
        self._check_time(now_ns)
        if self._trace is not None or self._repeat_state() != stamp:
            return False
        self._advance(now_ns)
        if self._negotiation.check_freshness(self._now_ns) is not stamp[1]:
            return False  # the TTL ran out meanwhile: try_reserve says what that means
        self._blocked += 1
        self._ledger.count_blocked()
        return True

    def _trace_reserve(self, charge: CreditCharge, token: ReservationToken | None) -> None:
        if self._trace is not None:
            self._trace.record(
                self._node,
                "reserve",
                {
                    "charge": _vector(charge.as_dict()),
                    "result": "blocked" if token is None else "reserved",
                    "token": 0 if token is None else token.token_id,
                    "vars": self._trace_vars(),
                },
            )

    def _trace_token(self, kind: str, token: ReservationToken) -> None:
        if self._trace is not None:
            self._trace.record(
                self._node,
                kind,
                {
                    "charge": _vector(token.charge.as_dict()),
                    "token": token.token_id,
                    "epoch": token.epoch,
                    "vars": self._trace_vars(),
                },
            )

    def set_pending_demand(
        self,
        waiting: Mapping[CreditResource, int],
        *,
        head: Mapping[CreditResource, int] | None = None,
    ) -> None:
        """Declare the total charge of the work now waiting for credit (e.g. the credit-stalled
        owners of this key in the admission queue), and ``head``, the charge of the first of
        them (``None`` or ``{}``: none; version 2 states its level in whole heads,
        docs/credit_protocol.md#mixed-charges; version 1 ignores it).

        The demand target becomes ``consumed + returned + waiting`` per resource, i.e. the
        cumulative grant under which all that work would fit. It moves down as well as up
        (issue 10 item 7, docs/abuse.md "Demand withdrawal"): a resource ``waiting`` omits has
        nothing waiting, and ``set_pending_demand({})`` withdraws the demand, so the receiver
        gives freed capacity to keys whose work is still there. Targets stay absolute, and the
        receiver applies only a report newer than the last one it applied, so a duplicated or
        reordered report can neither over-ask nor resurrect a withdrawn demand.
        Raises :class:`InvalidArgument` for a non-mapping or a malformed amount
        (:class:`ArithmeticOverflow` for a waiting amount past u64 beside what was consumed; a
        target that only the credit returned pushes past u64 is stated as U64_MAX) and
        :class:`InvalidEntry` before
        activation; a failure changes nothing.
        """
        targets = self._demand_targets(waiting)  # validates everything first
        if head is not None:
            self._demand_targets(head)  # the same checks: a mapping of u64 amounts
        assert self._key is not None  # _demand_targets raised InvalidEntry otherwise
        if self._ahead:
            # version 2: the waiting work is part of the level (_levels), not a target. A gate
            # restates the same waiting work at every blocked pick: only a change is news to
            # the level (every other input of it observes its own changes).
            stated = {r: a for r, a in waiting.items() if a}
            first = {r: a for r, a in head.items() if a} if head else {}
            self._direct_waiting = False
            levels = self._levels
            if stated != levels.waiting or first != levels.head:
                levels.waiting = stated
                levels.head = first
                self._observe_level()
            return
        entry = self._ledger.entry(self._key)
        for resource in self._demand_target:
            if resource not in targets:  # nothing of it waits any more
                targets[resource] = entry.consumed[resource] + entry.returned[resource]
        targets = {r: t for r, t in targets.items() if t}
        if targets != self._demand_target:
            self._demand_target = targets
            self._usage_dirty = True

    def _demand_targets(self, waiting: Mapping[CreditResource, int]) -> dict[CreditResource, int]:
        # The validation half of set_pending_demand (the gate checks a demand with it before
        # it reserves, so a demand that cannot be expressed is refused before anything changes).
        # a dict skips the ABC's isinstance (a Python-level check): the gate's own calls
        if type(waiting) is not dict and not isinstance(waiting, Mapping):
            raise InvalidArgument(f"waiting must be a mapping, got {describe(waiting)}")
        if self._key is None:
            raise InvalidEntry("no active credit key")
        _, _, consumed, returned = self._ledger.vectors(self._key)
        targets: dict[CreditResource, int] = {}
        # The checks inline, their helpers (and the label's f-string) only to raise: a gate
        # states its waiting work at every blocked pick, several times per transfer.
        for resource, amount in waiting.items():
            if not isinstance(resource, CreditResource):
                raise InvalidArgument(f"unknown credit resource {describe(resource)}")
            if type(amount) is not int or not 0 <= amount <= U64_MAX:
                check_u64(amount, f"waiting[{resource.name}]")
            target = consumed[resource] + returned[resource] + amount
            if target > U64_MAX:
                # what it returned crowds it out (_check_satisfiable): asked as U64_MAX; what it
                # consumed itself: the caller's error, raised
                checked_add(consumed[resource], amount)
                target = U64_MAX
            targets[resource] = target
        return targets

    def _check_satisfiable(self, key: CreditKey, charge: CreditCharge) -> None:
        # A charge this sender's own consumption leaves no u64 room for (consumed + amount >
        # 2**64 - 1) is the caller's error, refused before anything changes, counters included
        # (issue 10 item 10). One that only the credit it returned crowds out is not: returned
        # credit is what the receiver granted, and a hostile receiver's 2**64 - 2 bytes,
        # returned as idle, must not make an honest reserve raise (out of the gate and the
        # dispatch pass, for every peer). That charge waits, blocked, its demand stated as
        # U64_MAX, until a new epoch (found by the endpoint fuzz test).
        _, _, consumed, _ = self._ledger.vectors(key)
        for resource, amount in charge.parts:
            if consumed[resource] + amount > U64_MAX:
                raise ArithmeticOverflow(
                    f"{resource.name} charge of {amount} can never be granted: consumed + "
                    "charge exceeds 2**64 - 1"
                )

    def _raise_demand(self, key: CreditKey, charge: CreditCharge) -> None:
        if self._ahead:
            # version 2: at least this charge waits (a retried charge is not counted twice;
            # a gate states its waiting work exactly with set_pending_demand)
            raised = self._levels.raise_waiting(dict(charge.parts))
            self._direct_waiting = True
            if raised:
                self._observe_level()
            return
        entry = self._ledger.entry(key)
        for resource, amount in charge.parts:
            shortfall = amount - entry.available[resource]
            if shortfall > 0:
                # at most U64_MAX: a grant near it (returned as idle) leaves no room to ask
                target = min(U64_MAX, entry.grant_total[resource] + shortfall)
                if target > self._demand_target.get(resource, 0):
                    # a new dict, never a change in place: a repeat stamp holds the old one
                    self._demand_target = {**self._demand_target, resource: target}
                    self._usage_dirty = True

    def _backpressure(self, exhausted: tuple[CreditResource, ...]) -> BackpressureInfo:
        # A blocked owner is asked again at every pick until credit comes: the same signal
        # is the same (frozen, validated) object.
        ident = (
            tuple(sorted(set(exhausted))),
            self._retry_after_us,
            self._negotiation._state is NegotiationState.LEGACY,
        )
        last = self._last_backpressure
        if last is not None and last[0] == ident:
            return last[1]
        info = BackpressureInfo(
            source=BackpressureSource.RECEIVER_CREDIT,
            peer=self.sender_peer,
            qos_class=self._qos_class,
            exhausted=ident[0],
            retry_after_us=ident[1],
            fallback_allowed=ident[2],
        )
        self._last_backpressure = (ident, info)
        return info

    def commit(self, token: ReservationToken) -> None:
        """The transport accepted the work: RESERVED → COMMITTED; it is now in flight.

        Raises :class:`InvalidEntry` for a token of a fenced epoch or one already settled.
        """
        self._ledger.commit(token)
        slot = (token._key.receiver_session.value, token._entry.epoch)
        self._in_flight[slot] = self._in_flight.get(slot, 0) + 1
        self._usage_dirty = True
        if slot == self._slot:
            self._levels.commit(token.charge.as_dict())
            self._observe_level()
        self._trace_token("commit", token)

    def rollback(self, token: ReservationToken) -> None:
        """The transport refused the work: give the exact charge back
        (docs/semantics.md#sender-ledger)."""
        self._ledger.rollback(token)
        self._observe_level()  # credit on hand grew back
        self._trace_token("rollback", token)

    def complete(self, token: ReservationToken, now_ns: int) -> list[EndpointEvent]:
        """The transport finished committed work (success or failure).

        Completion only ends the in-flight count (used to finish fencing); it never mints
        local credit: the receiver's release makes new grants (RFC concurrency rule 6).
        Raises :class:`InvalidArgument` for a non-token or a bad ``now_ns`` and
        :class:`InvalidEntry` for a token that is not COMMITTED or already completed; a failure
        changes nothing (the clock included).
        """
        if not isinstance(token, ReservationToken):
            raise InvalidArgument(f"expected a ReservationToken, got {describe(token)}")
        self._check_time(now_ns)
        if token._state is not TokenState.COMMITTED:
            raise InvalidEntry(f"token {token.token_id} is {token.state.name}, not COMMITTED")
        slot = (token._key.receiver_session.value, token._entry.epoch)
        count = self._in_flight.get(slot, 0)
        if count <= 0:
            raise InvalidEntry(f"token {token.token_id} was already completed")
        self._advance(now_ns)
        self._in_flight[slot] = count - 1
        if slot == self._slot:
            self._levels.complete(token.charge.as_dict())
            self._observe_level()
        self._trace_token("complete", token)
        return self._maybe_fence_drained(now_ns)

    def return_unused(self, charge: CreditCharge) -> None:
        """Give unused credit back to the receiver (cumulative ``returned`` total).

        Raises :class:`InvalidEntry` before activation and :class:`InsufficientCredit` when
        ``charge`` exceeds what is available; a failure changes nothing.
        """
        if self._key is None:
            raise InvalidEntry("no active credit key")
        self._give_back(self._key, charge)
        self._observe_level()
