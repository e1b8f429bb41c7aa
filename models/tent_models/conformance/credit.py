"""Credit conformance: the real ``tent_credit`` endpoints against ``tent_spec.credit``.

:class:`CreditAdapter` runs one :class:`~tent_credit.CreditReceiver` (allocator, endpoints,
negotiation) and one :class:`~tent_credit.SenderEndpoint` per spec sender (ledger, negotiation,
demand), connected per sender by two :class:`~tent_credit.testing.FaultyChannel` s that carry the
real CBOR bytes of :mod:`tent_credit._wire`. Every fault is injected explicitly by a spec action
(``duplicate`` → ``duplicate_at``, ``lose`` → ``drop_at``, ``deliver`` of any message in flight →
``deliver_one``, i.e. reordering). The adapter is the harness around the endpoints: the transport
(it moves committed work and reports landings and failures) and the receiver's consumer.

The abstraction function (:meth:`CreditAdapter.abstract`) reads the implementation's public state
and the decoded bytes in flight and builds a :class:`~tent_spec.credit.CreditState`:

* ``Ledger`` ← the sender's key, epoch and ledger entry (``grant_total``, ``consumed``,
  ``returned``, last accepted sequence), its RESERVED tokens of the live entry, the last usage
  sequence it put on the wire, and its negotiation state (STALE ↔ ``STALE``).
* ``Peer.epoch`` and ``Books`` ← the allocator's current epoch and ``key_totals`` of every epoch it
  still holds (ACTIVE / FENCING / FENCED ↔ ``ACTIVE`` / ``FENCING`` / ``RECLAIMED``; ``reclaimed``
  = by return + by fence), the endpoint's pushed updates, its last accepted usage sequence and
  whether it is stalled on a demand.
* ``inflight`` ← the work the harness transport carries; bags ← the decoded channel contents.

Mapping decisions where the spec's modelling reductions differ from the implementation by
design (each keeps the same protocol step on both sides):

1. **Eager grants.** The spec's ``grant`` is an internal receiver step that may fire any time
   after a demand arrived; the implementation takes it at once, inside the call that made it
   possible (the usage that carries the demand, or the release / fence completion / return that
   frees capacity for a stalled sender). :class:`EagerGrantSpec` is the spec with that scheduler:
   after every step it fires ``grant`` for the acting sender, then for every sender in index
   order (the receiver's endpoint order), while enabled. A standalone ``grant`` draw is then
   always disabled and has no implementation counterpart.
2. **Demand is a target.** The implementation reports an absolute target grant total; the spec a
   charge index ("grant one more charge"). For ``report_usage(s, d)`` the harness declares the
   waiting work with ``set_pending_demand`` so the target becomes ``granted + charge`` (the
   receiver's current grant of the key), i.e. exactly one more charge. The spec's demand of a
   message in flight is a ghost variable recorded per (session, epoch, sequence) when the
   sender emitted it (the wire carries the target). Targets never move down within an epoch and
   a receiver never grants a demand twice, so a report that would drop or repeat a demand the
   receiver still holds (it is stalled) is outside the implementation's behaviours:
   :meth:`CreditAdapter.supported` says so and the drivers do not draw it.
3. **Refreshes.** The receiver answers an offer, a blocked demand (``retry_after_us``) and every
   grant with an update. An update that carries new totals is the spec's grant publish and goes
   on the wire; one that carries the totals this endpoint sent last is a refresh, which the spec
   sends only as ``push_update``: outside ``push_update`` the harness withholds it (it never
   reaches the wire). Its sequence number is recorded, and the abstraction maps the receiver's
   sequences to the spec's by subtracting the withheld ones below them (sequences are only ever
   compared, so this rank mapping is exact).
4. **push_update** delivers the heartbeats the sender emitted (the receiver answers each with a
   refresh) or, when none is pending, advances the receiver endpoint's refresh timer. It needs
   the endpoint to have negotiated a version (an offer arrived): the implementation does not push
   to a connection that has not offered yet.
5. **send_activation** is the connection handshake: the harness delivers the sender's
   capability offer (not in the spec's alphabet) to the receiver endpoint, which answers with the
   activation (on the wire) and a refresh (withheld, rule 3).
6. **Initial state.** Setup runs that handshake for every sender and delivers the activation, so
   the implementation starts where the spec does: session 1, every sender active at epoch 1
   with no grant and nothing in flight.
7. **Staleness** is the TTL: ``become_stale`` advances the sender's clock past
   ``freshness_ttl_ms`` and calls ``handle_timer``. The spec's ``REVIVED`` mark and
   ``stale_at`` are history variables the harness keeps (stale since the entry began, and the
   sequence then). Only an ACTIVE sender ages: while a sender is FENCING (rule 9) ``reserve``
   and ``become_stale`` are not drawn.
8. **Restarts.** ``sender_restart`` builds a new :class:`SenderEndpoint` (a new process: its
   RESERVED tokens die, its committed work stays with the transport) and ``accept`` s a new
   connection (the receiver bumps the epoch and fences the old one); the old connection's
   receiver→sender bytes are gone, its sender→receiver bytes may still arrive.
   ``receiver_restart`` builds a new :class:`CreditReceiver` with the next session id and
   accepts every sender again; bytes in flight to it and its in-flight work are gone (the
   transport fails that work, which completes it at a live sender).
9. **Sender fencing.** After an activation of a new session, the implementation's sender stays
   FENCING (no reservations) until its work of the old session completed; the spec's sender
   reserves at once. The harness fails dead-session work at the receiver restart, so this only
   shows for work committed on the dead session after it, until ``fail_inflight``.
10. **Completion.** ``data_lands`` is the receiver's write admission (``admit_write``, which
    counts the landing) and completes the token at the sender; ``fail_inflight`` only completes
    it. Neither gives the sender credit. A refused admission is a divergence: every write the
    spec lets land is one an honest sender made within its credit.
11. **Faults and bounds.** The fault counters are erased by :meth:`CreditAdapter.project`
    (the harness injects faults; the implementation cannot count them). The run uses
    :func:`conformance_bounds`: the model's sizes with fault budgets, message and sequence caps
    lifted, so that a bound never disables a step the implementation takes.

12. **Session order.** The spec orders receiver sessions (a restart mints ``session + 1``) and
    its sender ignores an activation of an older session; so does the implementation's, since
    a receiver mints a larger session id on every restart (``SessionId``). These walks found
    the bug this closes: a late activation of a dead session used to move the sender back
    there (``LATE_DEAD_SESSION_ACTIVATION``, and a variant where the sender never saw the
    older session at all).

A spec guard that is false maps to the implementation's refusal in
:meth:`CreditAdapter.refusal`: a typed error (commit/rollback of a token whose entry was
fenced → ``InvalidEntry``; a return without an entry → ``InvalidEntry``, beyond the available
credit → ``InsufficientCredit``; landing in a reclaimed epoch, releasing or completing the fence
of an epoch in the wrong state → ``InvalidEntry``) or a documented no-op (a blocked reserve
answers backpressure and changes nothing). Guards that are model reductions, bounds, or choices
of the sender's own policy have no counterpart and are not performed.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, cast

import attrs
from tent_spec.credit import (
    ACTIVATION,
    ACTIVE,
    FENCING,
    FRESH,
    RECLAIMED,
    REVIVED,
    STALE,
    UPDATE,
    USAGE,
    Activation,
    Books,
    CreditBounds,
    CreditSpec,
    CreditState,
    Faults,
    Ledger,
    Peer,
    Update,
    Usage,
)

from tent_credit import (
    AllocatorConfig,
    CapabilityActivation,
    CapabilityOffer,
    CreditCharge,
    CreditReceiver,
    CreditResource,
    EpochState,
    Heartbeat,
    NegotiationState,
    ReceiverCreditUpdate,
    ReceiverEndpoint,
    ReservationToken,
    SenderCreditUsage,
    SenderEndpoint,
    SessionId,
    TokenState,
)
from tent_credit._messages import SUPPORTED_VERSIONS
from tent_credit._trace import TraceSink
from tent_credit._wire import decode, encode
from tent_credit.errors import CreditError, InsufficientCredit, InvalidEntry
from tent_credit.testing import FaultyChannel
from tent_models.model_api import SpecModel

from ._lockstep import (
    ActionInstance,
    ConformanceFailure,
    Divergence,
    Lockstep,
    Outcome,
    StepVerdict,
)

__all__ = [
    "CONFORMANCE_BOUNDS",
    "CreditAdapter",
    "CreditRun",
    "EagerGrantSpec",
    "conformance_bounds",
    "credit_lockstep",
    "export_regression",
    "run_credit",
    "run_credit_conformance",
    "weighted_choice",
]

RESOURCES: tuple[CreditResource, ...] = tuple(CreditResource)
"""Spec resource index ``r`` is ``RESOURCES[r]`` (DATA_BYTES, REQUEST_SLOTS, ...)."""

USAGE_INTERVAL_NS = 1
FRESHNESS_TTL_MS = 1_000
REFRESH_INTERVAL_NS = 1_000_000
_TTL_NS = FRESHNESS_TTL_MS * 1_000_000
_LIFTED = 1 << 30  # a bound that a conformance run never reaches
_NO_FAULTS = Faults(0, 0, 0, 0, 0, 0)


def conformance_bounds(
    base: CreditBounds,
    *,
    max_receiver_restarts: int = _LIFTED,
    max_tokens: int | None = None,
) -> CreditBounds:
    """``base``'s sizes (senders, capacity, charges) with every cap a run could hit lifted.

    Fault budgets, the message bag, sequences, epochs and the grant total are unbounded in the
    implementation, so a bound there would disable steps it takes (mapping rule 11).
    """
    return CreditBounds(
        senders=base.senders,
        capacity=base.capacity,
        charges=base.charges,
        max_grant_total=_LIFTED,
        max_tokens=base.max_tokens if max_tokens is None else max_tokens,
        max_epoch=_LIFTED,
        max_messages=_LIFTED,
        max_duplications=_LIFTED,
        max_losses=_LIFTED,
        max_sender_restarts=_LIFTED,
        max_receiver_restarts=max_receiver_restarts,
        max_stale=_LIFTED,
        max_regressions=_LIFTED,
        max_seq=_LIFTED,
    )


CONFORMANCE_BOUNDS = CreditBounds(
    senders=2,
    capacity=(2, 1),
    charges=((1, 1), (1, 0)),
    max_grant_total=_LIFTED,
    max_tokens=2,
    max_epoch=_LIFTED,
    max_messages=_LIFTED,
    max_duplications=_LIFTED,
    max_losses=_LIFTED,
    max_sender_restarts=_LIFTED,
    max_receiver_restarts=_LIFTED,
    max_stale=_LIFTED,
    max_regressions=_LIFTED,
    max_seq=_LIFTED,
)
"""credit/tiny-like sizes with two senders and a partial charge (so multi-resource atomicity,
per-resource returns and contention matter), every cap lifted."""


# --------------------------------------------------------------------------------------------
# The spec with eager grants (mapping rule 1)
# --------------------------------------------------------------------------------------------


class EagerGrantSpec:
    """:class:`~tent_spec.credit.CreditSpec` scheduled the way the implementation grants.

    ``apply`` applies the action, then ``grant`` for the acting sender of a delivered usage
    report, then for every sender in index order, each while enabled. Everything else is the
    spec's own (guards, invariants, ``explain``, ``describe``). Structurally a ``SpecModel``.
    """

    def __init__(self, spec: CreditSpec) -> None:
        self.spec = spec
        self.bounds = spec.bounds
        self.name = f"{spec.name}+eager-grants"

    def initial_states(self) -> list[CreditState]:
        return self.spec.initial_states()

    def apply(self, state: CreditState, action: str, args: tuple[Hashable, ...]) -> Any:
        nxt = self.spec.apply(state, action, args)
        if nxt is None:
            return None
        return self.grant_closure(nxt, action, args)

    def grant_closure(
        self, state: CreditState, action: str, args: tuple[Hashable, ...]
    ) -> CreditState:
        """Fire every enabled ``grant`` in the implementation's order (mapping rule 1)."""
        order = list(range(len(state.peers)))
        if action == "deliver" and isinstance(args[1], Usage):
            first = cast("int", args[0])
            order.remove(first)
            order.insert(0, first)
        for s in order:
            granted = self.spec.apply(state, "grant", (s,))
            if granted is not None:
                state = granted
        return state

    def successors(self, state: CreditState) -> Iterable[Any]:
        for step in self.spec.successors(state):
            yield step._replace(state=self.grant_closure(step.state, step.action, step.args))

    def explain(self, state: CreditState, action: str, args: tuple[Hashable, ...]) -> str:
        return self.spec.explain(state, action, args)

    def action_names(self) -> Sequence[str]:
        return self.spec.action_names()

    def unreachable_actions(self) -> frozenset[str]:
        return self.spec.unreachable_actions()

    def fault_actions(self) -> frozenset[str]:
        return self.spec.fault_actions()

    def invariants(self) -> Sequence[Any]:
        return self.spec.invariants()

    def witnesses(self) -> Sequence[Any]:
        return self.spec.witnesses()

    def pack(self, state: CreditState) -> tuple[Any, ...]:
        return self.spec.pack(state)

    def canonicalize(self, state: CreditState) -> CreditState:
        return state

    def within_bounds(self, state: CreditState) -> bool:
        return self.spec.within_bounds(state)

    def quiescent_by_bound(self, state: CreditState) -> bool:
        return self.spec.quiescent_by_bound(state)

    def recovered(self, state: CreditState) -> bool:
        return self.spec.recovered(state)

    def describe(self, state: CreditState) -> Mapping[str, object]:
        return self.spec.describe(state)


# --------------------------------------------------------------------------------------------
# Harness pieces
# --------------------------------------------------------------------------------------------


class _Channel:
    """A :class:`FaultyChannel` (no random faults) plus the harness's view of its contents.

    The view lists ``(due_ns, serial, bytes)`` in the channel's documented pending order, so a
    spec message maps to the channel index ``i`` of ``deliver_one`` / ``drop_at`` /
    ``duplicate_at``; every delivery checks that the channel returned the bytes the view names.
    """

    def __init__(self) -> None:
        self.channel = FaultyChannel()
        self.view: list[tuple[int, int, bytes]] = []
        self._serial = 0

    def send(self, data: bytes, now_ns: int) -> None:
        self.channel.send(data, now_ns)
        self._add(now_ns, data)

    def _add(self, due_ns: int, data: bytes) -> None:
        bisect.insort(self.view, (due_ns, self._serial, data))
        self._serial += 1

    def deliver(self, i: int, now_ns: int) -> bytes:
        data = self.channel.deliver_one(i, now_ns)
        _due, _serial, expected = self.view.pop(i)
        if data != expected:
            raise ConformanceFailure("the channel delivered other bytes than the harness expected")
        return data

    def drop(self, i: int) -> None:
        self.channel.drop_at(i)
        self.view.pop(i)

    def duplicate(self, i: int) -> None:
        self.channel.duplicate_at(i)
        due, _serial, data = self.view[i]
        self._add(due, data)

    def contents(self) -> list[bytes]:
        return [data for _due, _serial, data in self.view]


@attrs.define
class _Work:
    """Committed work the harness transport carries (spec ``inflight``)."""

    session: int
    epoch: int
    charge: int
    token: ReservationToken
    process: SenderEndpoint  # the sender process that committed it


@attrs.define
class _SenderSlot:
    """One spec sender: its current process and what the harness knows about it."""

    endpoint: SenderEndpoint
    clock: int
    down: _Channel  # receiver -> sender (replaced with the connection)
    up: _Channel  # sender -> receiver (survives a sender restart: old reports may still arrive)
    tokens: list[tuple[ReservationToken, int]] = attrs.Factory(list)  # (token, charge index)
    heartbeats: list[bytes] = attrs.Factory(list)
    dirty: bool = False  # mirrors "something changed since the last usage report"
    usage_seq: int = 0  # last usage sequence put on the wire for the live entry
    was_stale: bool = False  # history: stale since the live entry began (REVIVED mark)
    stale_at: int = 0  # history: implementation sequence when it last became stale


@attrs.define
class _ReceiverSlot:
    """The receiver's endpoint for one spec sender (one connection = one epoch)."""

    endpoint: ReceiverEndpoint
    clock: int = 0
    last_grants: tuple[int, ...] | None = None  # totals of the last update it emitted
    usage_seq: int = 0  # last usage sequence it accepted
    demand: int = 0  # ghost: the spec demand of that usage


def _vector(mapping: Mapping[CreditResource, int], n: int) -> tuple[int, ...]:
    return tuple(mapping.get(RESOURCES[r], 0) for r in range(n))


def _amounts_vector(amounts: Iterable[Any], n: int) -> tuple[int, ...]:
    values = {a.resource: a.amount for a in amounts}
    return tuple(values.get(RESOURCES[r], 0) for r in range(n))


def _bag(messages: Iterable[Any]) -> tuple[tuple[Any, int], ...]:
    counts: dict[Any, int] = {}
    for m in messages:
        counts[m] = counts.get(m, 0) + 1
    return tuple(sorted(counts.items()))


# --------------------------------------------------------------------------------------------
# The adapter
# --------------------------------------------------------------------------------------------


class CreditAdapter:
    """One receiver and ``bounds.senders`` senders driven by credit spec actions.

    Satisfies :class:`~tent_models.conformance.ImplementationAdapter` for
    :class:`~tent_spec.credit.CreditState` (see the module docstring for every mapping rule).
    ``trace``, when given, is passed to every endpoint (recording starts after setup, at the
    spec's initial state, when the sink's ``begin`` is called if it has one).
    """

    def __init__(self, bounds: CreditBounds, *, trace: TraceSink | None = None) -> None:
        self.bounds = bounds
        self._n = bounds.resources
        self._trace = trace
        capacity = {RESOURCES[r]: c for r, c in enumerate(bounds.capacity)}
        self._config = AllocatorConfig(
            capacity=capacity,
            control_slots=1,
            # all-or-nothing on the whole demand (spec grant), never capped below it
            max_grant=dict.fromkeys(capacity, _LIFTED),
            min_grant=dict.fromkeys(capacity, _LIFTED),
            max_keys=bounds.senders,
            retry_after_us=1,
        )
        self._now = 0
        self._session = 1
        self._withheld: dict[tuple[int, int, int], list[int]] = {}  # (session, s, epoch)
        self._demands: dict[tuple[int, int, int, int], int] = {}  # (s, session, epoch, seq)
        self._work: dict[int, list[_Work]] = {s: [] for s in range(bounds.senders)}
        self._receiver = self._new_receiver()
        self._rslots: list[_ReceiverSlot] = []
        self._slots: list[_SenderSlot] = []
        for s in range(bounds.senders):
            endpoint = self._new_sender(s, clock=0)
            self._slots.append(
                _SenderSlot(endpoint=endpoint, clock=0, down=_Channel(), up=_Channel())
            )
            self._rslots.append(_ReceiverSlot(endpoint=self._receiver.accept(self.peer(s))))
        for s in range(bounds.senders):  # mapping rule 6: the handshake, delivered at once
            self._handshake(s)
            data = self._slots[s].down.deliver(0, self._tick())
            self._receive_down(s, data)
        begin = getattr(trace, "begin", None)
        if callable(begin):
            begin()

    # ---- construction helpers ------------------------------------------------------------

    @staticmethod
    def peer(s: int) -> int:
        """The implementation's sender peer id of spec sender ``s``."""
        return s + 1

    def _new_receiver(self) -> CreditReceiver:
        return CreditReceiver(
            self._config,
            SessionId(self._session),
            freshness_ttl_ms=FRESHNESS_TTL_MS,
            refresh_interval_ns=REFRESH_INTERVAL_NS,
            trace=self._trace,
        )

    def _new_sender(self, s: int, *, clock: int) -> SenderEndpoint:
        endpoint = SenderEndpoint(
            sender_peer=self.peer(s), usage_interval_ns=USAGE_INTERVAL_NS, trace=self._trace
        )
        endpoint.connect(clock)
        return endpoint

    def _tick(self) -> int:
        self._now += 1
        return self._now

    def _charge(self, c: int) -> CreditCharge:
        return CreditCharge.of({RESOURCES[r]: a for r, a in enumerate(self.bounds.charges[c]) if a})

    # ---- sequences (mapping rule 3) ------------------------------------------------------

    def _spec_seq(self, session: int, s: int, epoch: int, seq: int) -> int:
        withheld = self._withheld.get((session, s, epoch), ())
        return seq - sum(1 for w in withheld if w <= seq)

    # ---- messages --------------------------------------------------------------------------

    def _spec_message(self, s: int, data: bytes) -> Activation | Update | Usage:
        message = decode(data)
        n = self._n
        if isinstance(message, CapabilityActivation):
            return Activation(ACTIVATION, message.receiver_session_id.value, message.epoch)
        if isinstance(message, ReceiverCreditUpdate):
            session, epoch = message.receiver_session_id.value, message.epoch
            return Update(
                UPDATE,
                session,
                epoch,
                self._spec_seq(session, s, epoch, message.sequence),
                _amounts_vector(message.grants, n),
            )
        if isinstance(message, SenderCreditUsage):
            session, epoch = message.receiver_session_id.value, message.epoch
            return Usage(
                USAGE,
                session,
                epoch,
                message.sequence,
                _amounts_vector(message.returned_totals, n),
                self._demands.get((s, session, epoch, message.sequence), -1),
            )
        raise ConformanceFailure(f"a {type(message).__name__} is in flight")

    def _find(self, s: int, msg: Any) -> tuple[_Channel, int] | None:
        slot = self._slots[s]
        channel = slot.up if isinstance(msg, Usage) else slot.down
        for i, data in enumerate(channel.contents()):
            if self._spec_message(s, data) == msg:
                return channel, i
        return None

    def _receive_down(self, s: int, data: bytes) -> None:
        """Feed a receiver→sender message to the sender; track a change of its entry."""
        slot = self._slots[s]
        before = (slot.endpoint.key, slot.endpoint.epoch)
        slot.endpoint.receive_message(data, slot.clock)
        if (slot.endpoint.key, slot.endpoint.epoch) != before:
            # a fresh entry: new usage sequences, no stale history, "introduce ourselves"
            slot.usage_seq = 0
            slot.was_stale = False
            slot.stale_at = 0
            slot.dirty = True

    def _emit_receiver(self, s: int, data: bytes, *, publish: bool) -> None:
        """Route one receiver→sender message (mapping rule 3 decides about updates)."""
        rslot = self._rslots[s]
        message = decode(data)
        if isinstance(message, ReceiverCreditUpdate):
            grants = _amounts_vector(message.grants, self._n)
            last = rslot.last_grants if rslot.last_grants is not None else (0,) * self._n
            rslot.last_grants = grants
            if not publish and grants == last:
                key = (message.receiver_session_id.value, s, message.epoch)
                self._withheld.setdefault(key, []).append(message.sequence)
                return
        self._slots[s].down.send(data, self._now)

    def _drain(self, *, forced: int | None = None) -> None:
        """Collect what every receiver endpoint sends now (eager grants publish here)."""
        for s, rslot in enumerate(self._rslots):
            for data in rslot.endpoint.messages_to_send(rslot.clock):
                self._emit_receiver(s, data, publish=s == forced)

    def _handshake(self, s: int) -> None:
        """Deliver the sender's capability offer to its receiver endpoint (mapping rule 5)."""
        rslot = self._rslots[s]
        offer = CapabilityOffer(versions=SUPPORTED_VERSIONS, qos_class=0)
        rslot.endpoint.receive_message(encode(offer), rslot.clock)
        self._drain()

    # ---- ImplementationAdapter ---------------------------------------------------------------

    def perform(self, action: str, args: tuple[Hashable, ...]) -> Outcome:
        """Apply one spec action instance to the implementation (module docstring rules)."""
        self._tick()
        handler = self._handlers.get(action)
        if handler is None:
            raise ConformanceFailure(f"the credit adapter has no action {action!r}")
        try:
            outcome = handler(self, *args)
        except CreditError as error:
            return Outcome.raised(type(error), str(error))
        self._drain()
        return outcome

    def _grant(self, s: int) -> Outcome:
        raise ConformanceFailure(
            f"grant({s}) is enabled on its own, but the implementation grants eagerly inside "
            "the step that makes a grant possible (mapping rule 1)"
        )

    def _push_update(self, s: int) -> Outcome:
        slot, rslot = self._slots[s], self._rslots[s]
        for data in slot.heartbeats:
            rslot.endpoint.receive_message(data, rslot.clock)
        slot.heartbeats.clear()
        out = rslot.endpoint.messages_to_send(rslot.clock)
        if not any(isinstance(decode(d), ReceiverCreditUpdate) for d in out):
            rslot.clock += REFRESH_INTERVAL_NS  # the refresh timer fires
            out += rslot.endpoint.messages_to_send(rslot.clock)
        for data in out:
            self._emit_receiver(s, data, publish=True)
        return Outcome.applied()

    def _send_activation(self, s: int) -> Outcome:
        self._handshake(s)
        return Outcome.applied()

    def _report_usage(self, s: int, demand: int) -> Outcome:
        slot = self._slots[s]
        endpoint = slot.endpoint
        key = endpoint.key
        if key is None:
            raise ConformanceFailure("report_usage without a ledger entry")
        if demand:
            entry = endpoint.ledger.entry(key)
            reference = self._receiver_grant(s) or _vector(entry.grant_total, self._n)
            charge = self.bounds.charges[demand - 1]
            waiting = {
                RESOURCES[r]: reference[r]
                + a
                - entry.consumed[RESOURCES[r]]
                - entry.returned[RESOURCES[r]]
                for r, a in enumerate(charge)
                if a
            }
            before = dict(endpoint.statistics().demand_target)
            endpoint.set_pending_demand(waiting)
            if dict(endpoint.statistics().demand_target) != before:
                slot.dirty = True
        slot.clock += USAGE_INTERVAL_NS
        usages: list[SenderCreditUsage] = []
        for data in endpoint.messages_to_send(slot.clock):
            message = decode(data)
            if isinstance(message, Heartbeat):
                slot.heartbeats.append(data)  # answered by a later push_update (rule 4)
            elif isinstance(message, SenderCreditUsage):
                usages.append(message)
                self._demands[
                    (s, message.receiver_session_id.value, message.epoch, message.sequence)
                ] = demand
                slot.up.send(data, self._now)
            # a capability offer is the handshake's (rule 5), not a spec message
        if len(usages) != 1:
            raise ConformanceFailure(f"the sender emitted {len(usages)} usage reports, not one")
        slot.usage_seq = usages[0].sequence
        slot.dirty = False
        return Outcome.applied()

    def _reserve(self, s: int, c: int) -> Outcome:
        slot = self._slots[s]
        before = dict(slot.endpoint.statistics().demand_target)
        result = slot.endpoint.try_reserve(self._charge(c), slot.clock)
        if isinstance(result, ReservationToken):
            slot.tokens.append((result, c))
            return Outcome.applied()
        if dict(slot.endpoint.statistics().demand_target) != before:
            slot.dirty = True  # the shortfall raised the demand target
        return Outcome.unchanged()

    def _token(self, s: int, c: int, *, live: bool) -> ReservationToken | None:
        """A RESERVED token of charge ``c``: of the live entry, or of a fenced one."""
        endpoint = self._slots[s].endpoint
        current = (endpoint.key, endpoint.epoch)
        for token, charge in self._slots[s].tokens:
            live_entry = (token.key, token.epoch) == current
            if charge == c and token.state is TokenState.RESERVED and live_entry == live:
                return token
        return None

    def _commit(self, s: int, c: int) -> Outcome:
        slot = self._slots[s]
        token = self._token(s, c, live=True) or self._token(s, c, live=False)
        if token is None:
            raise ConformanceFailure(f"sender {s} holds no RESERVED token of charge {c}")
        slot.endpoint.commit(token)
        slot.dirty = True
        self._work[s].append(
            _Work(
                session=token.key.receiver_session.value,
                epoch=token.epoch,
                charge=c,
                token=token,
                process=slot.endpoint,
            )
        )
        return Outcome.applied()

    def _rollback(self, s: int, c: int) -> Outcome:
        token = self._token(s, c, live=True) or self._token(s, c, live=False)
        if token is None:
            raise ConformanceFailure(f"sender {s} holds no RESERVED token of charge {c}")
        self._slots[s].endpoint.rollback(token)
        return Outcome.applied()

    def _return_unused(self, s: int, c: int) -> Outcome:
        slot = self._slots[s]
        slot.endpoint.return_unused(self._charge(c))
        slot.dirty = True
        return Outcome.applied()

    def _deliver(self, s: int, msg: Any) -> Outcome:
        found = self._find(s, msg)
        if found is None:
            raise ConformanceFailure(f"{msg!r} is not in flight")
        channel, i = found
        data = channel.deliver(i, self._now)
        if isinstance(msg, Usage):
            rslot = self._rslots[s]
            events = rslot.endpoint.receive_message(data, rslot.clock)
            if any(e.kind == "usage_applied" for e in events):
                rslot.usage_seq = msg.seq
                rslot.demand = msg.demand
        else:
            self._receive_down(s, data)
        return Outcome.applied()

    def _duplicate(self, s: int, msg: Any) -> Outcome:
        found = self._find(s, msg)
        if found is None:
            raise ConformanceFailure(f"{msg!r} is not in flight")
        found[0].duplicate(found[1])
        return Outcome.applied()

    def _lose(self, s: int, msg: Any) -> Outcome:
        found = self._find(s, msg)
        if found is None:
            raise ConformanceFailure(f"{msg!r} is not in flight")
        found[0].drop(found[1])
        return Outcome.applied()

    def _take_work(self, s: int, item: Any) -> _Work:
        session, epoch, c = item
        for work in self._work[s]:
            if (work.session, work.epoch, work.charge) == (session, epoch, c):
                return work
        raise ConformanceFailure(f"no in-flight work {item!r} of sender {s}")

    def _complete(self, s: int, work: _Work) -> None:
        """The transport reports completion to the sender process, if it still runs."""
        self._work[s].remove(work)
        slot = self._slots[s]
        if work.process is slot.endpoint:
            slot.endpoint.complete(work.token, slot.clock)

    def _data_lands(self, s: int, item: Any) -> Outcome:
        work = self._take_work(s, item)
        amounts = self._charge(work.charge).as_dict()
        # The transport admits every credited write before it lands (docs/seams.md "Write
        # admission"): an honest sender's write is never refused, so a refusal diverges.
        admission = self._receiver.admit_write(self.peer(s), 0, work.epoch, amounts)
        if not admission.accepted:  # it never landed, and the key is now quarantined
            return Outcome.unchanged()
        self._complete(s, work)
        return Outcome.applied()

    def _fail_inflight(self, s: int, item: Any) -> Outcome:
        self._complete(s, self._take_work(s, item))
        return Outcome.applied()

    def _consumer_release(self, s: int, epoch: int) -> Outcome:
        allocator = self._receiver.allocator
        totals = allocator.key_totals(self.peer(s), 0, epoch)
        amounts = {r: totals.landed[r] - totals.released[r] for r in totals.landed}
        self._receiver.release(self.peer(s), 0, epoch, amounts)
        return Outcome.applied()

    def _reclaim_after_fence(self, s: int, epoch: int) -> Outcome:
        self._receiver.fence_complete(self.peer(s), 0, epoch)
        return Outcome.applied()

    def _become_stale(self, s: int) -> Outcome:
        slot = self._slots[s]
        key = slot.endpoint.key
        if key is None:
            raise ConformanceFailure("become_stale without a ledger entry")
        slot.clock += _TTL_NS + 1
        events = slot.endpoint.handle_timer(slot.clock)
        if not any(e.kind == "became_stale" for e in events):
            raise ConformanceFailure(f"the sender did not become stale ({slot.endpoint.state})")
        slot.was_stale = True
        slot.stale_at = slot.endpoint.ledger.entry(key).last_sequence
        return Outcome.applied()

    def _sender_restart(self, s: int) -> Outcome:
        old = self._slots[s]
        endpoint = self._new_sender(s, clock=old.clock)
        self._slots[s] = _SenderSlot(endpoint=endpoint, clock=old.clock, down=_Channel(), up=old.up)
        self._rslots[s] = _ReceiverSlot(endpoint=self._receiver.accept(self.peer(s)))
        return Outcome.applied()

    def _receiver_restart(self) -> Outcome:
        self._session += 1
        self._receiver = self._new_receiver()  # every earlier session's work is dead now
        for s in range(self.bounds.senders):
            self._rslots[s] = _ReceiverSlot(endpoint=self._receiver.accept(self.peer(s)))
            slot = self._slots[s]
            slot.up = _Channel()
            slot.heartbeats.clear()
            for work in list(self._work[s]):
                self._complete(s, work)  # the transport fails work of the dead sessions
        return Outcome.applied()

    def _publish_regressed(self, s: int, r: int) -> Outcome:
        slot, rslot = self._slots[s], self._rslots[s]
        key = slot.endpoint.key
        if key is None:
            raise ConformanceFailure("publish_regressed without a ledger entry")
        low = slot.endpoint.ledger.entry(key).grant_total[RESOURCES[r]] - 1
        rslot.clock += REFRESH_INTERVAL_NS
        for sent in rslot.endpoint.messages_to_send(rslot.clock):
            message = decode(sent)
            if isinstance(message, ReceiverCreditUpdate):
                rslot.last_grants = _amounts_vector(message.grants, self._n)
                grants = tuple(
                    attrs.evolve(a, amount=low) if a.resource is RESOURCES[r] else a
                    for a in message.grants
                )
                sent = encode(attrs.evolve(message, grants=grants))  # noqa: PLW2901 (tampered)
            slot.down.send(sent, self._now)
        return Outcome.applied()

    _handlers: Mapping[str, Callable[..., Outcome]] = {
        "grant": _grant,
        "push_update": _push_update,
        "send_activation": _send_activation,
        "report_usage": _report_usage,
        "deliver": _deliver,
        "duplicate": _duplicate,
        "lose": _lose,
        "reserve": _reserve,
        "commit": _commit,
        "rollback": _rollback,
        "return_unused": _return_unused,
        "data_lands": _data_lands,
        "fail_inflight": _fail_inflight,
        "consumer_release": _consumer_release,
        "reclaim_after_fence": _reclaim_after_fence,
        "become_stale": _become_stale,
        "sender_restart": _sender_restart,
        "receiver_restart": _receiver_restart,
        "publish_regressed": _publish_regressed,
    }

    # ---- receiver facts ------------------------------------------------------------------

    def _receiver_grant(self, s: int) -> tuple[int, ...] | None:
        """The receiver's granted totals for the sender's live entry (``None`` if not live)."""
        endpoint = self._slots[s].endpoint
        key = endpoint.key
        if key is None or key.receiver_session.value != self._session:
            return None
        if endpoint.epoch != self._rslots[s].endpoint.epoch:
            return None
        totals = self._receiver.allocator.key_totals(self.peer(s), 0, endpoint.epoch)
        return _vector(totals.granted, self._n)

    # ---- refusals --------------------------------------------------------------------------

    def refusal(
        self, state: CreditState, action: str, args: tuple[Hashable, ...]
    ) -> Outcome | None:
        """The implementation's answer when the spec's guard of ``action(args)`` is false.

        1. ``reserve``: backpressure, nothing changes (unchanged) - except when only the
           ``max_tokens`` bound disables it (no counterpart).
        2. ``commit`` / ``rollback`` with a RESERVED token of that charge only in a fenced entry
           → InvalidEntry (an old token never touches the new epoch).
        3. ``return_unused``: no entry or no update yet → InvalidEntry; else InsufficientCredit.
        4. ``data_lands`` of work in flight to a reclaimed (or settled) epoch of the live session
           → InvalidEntry from the allocator.
        5. ``reclaim_after_fence`` of an ACTIVE, RECLAIMED or unknown epoch → InvalidEntry.
        6. ``consumer_release`` of an epoch without books → InvalidEntry.
        7. Everything else (bounds, the spec's send-policy reductions, faults, internal steps,
           arguments naming nothing) has no counterpart.
        """
        if not args and action != "receiver_restart":
            return None
        if action == "reserve":
            s, c = cast("tuple[int, int]", args)
            led = state.peers[s].ledger
            if led.session and led.last_seq and led.freshness != STALE:
                available = CreditSpec.available(led)
                fits = all(a <= v for a, v in zip(self.bounds.charges[c], available, strict=True))
                if fits:
                    return None  # only the max_tokens bound refused it
            return Outcome.unchanged()
        if action in ("commit", "rollback"):
            s, c = cast("tuple[int, int]", args)
            if self._token(s, c, live=False) is not None and self._token(s, c, live=True) is None:
                return Outcome.raised(InvalidEntry)
            return None
        if action == "return_unused":
            s, _c = cast("tuple[int, int]", args)
            led = state.peers[s].ledger
            if not led.session or not led.last_seq:
                return Outcome.raised(InvalidEntry)
            return Outcome.raised(InsufficientCredit)
        if action == "data_lands":
            s, item = cast("tuple[int, tuple[int, int, int]]", args)
            peer = state.peers[s]
            if item in peer.inflight and item[0] == state.session:
                books = [b for b in peer.books if b.epoch == item[1]]
                if not books or books[0].status == RECLAIMED:
                    return Outcome.raised(InvalidEntry)
            return None
        if action == "reclaim_after_fence":
            s, epoch = cast("tuple[int, int]", args)
            books = [b for b in state.peers[s].books if b.epoch == epoch]
            if type(epoch) is int and epoch >= 1 and (not books or books[0].status != FENCING):
                return Outcome.raised(InvalidEntry)
            return None
        if action == "consumer_release":
            s, epoch = cast("tuple[int, int]", args)
            books = [b for b in state.peers[s].books if b.epoch == epoch]
            if type(epoch) is int and epoch >= 1 and not books:
                return Outcome.raised(InvalidEntry)
            return None
        return None

    # ---- which enabled steps the implementation can take (the drivers' filter) -----------

    def supported(self, state: CreditState, action: str, args: tuple[Hashable, ...]) -> bool:
        """Whether the implementation can take the spec-enabled step ``action(args)`` now.

        False only for the behaviours the module docstring excludes: a report that drops or
        repeats a demand the receiver still holds, or has nothing new for the implementation to
        say (rule 2); a push before the connection offered (rule 4); ``reserve`` or
        ``become_stale`` while the sender is FENCING (rules 7 and 9); an activation of an older
        receiver session than the sender's (rule 12).
        """
        if action in ("reserve", "become_stale"):
            s = cast("int", args[0])
            return self._slots[s].endpoint.state is NegotiationState.ACTIVE or (
                action == "reserve" and self._slots[s].endpoint.state is NegotiationState.STALE
            )
        if action in ("push_update", "publish_regressed"):
            s = cast("int", args[0])
            return self._rslots[s].endpoint.statistics().version != 0
        if action == "report_usage":
            s, demand = cast("tuple[int, int]", args)
            return self._report_supported(s, demand)
        return True

    def _report_supported(self, s: int, demand: int) -> bool:
        slot = self._slots[s]
        key = slot.endpoint.key
        if key is None:
            return True  # the spec refuses it
        entry = slot.endpoint.ledger.entry(key)
        own = _vector(entry.grant_total, self._n)
        target = _vector(slot.endpoint.statistics().demand_target, self._n)
        reference = self._receiver_grant(s)
        if reference is None:  # a dead session or epoch: the receiver ignores the report
            return (
                bool(demand) or slot.dirty or any(t > g for t, g in zip(target, own, strict=True))
            )
        if self._rslots[s].endpoint.stalled:
            return False  # the receiver still holds a demand of this key
        if demand:
            charge = self.bounds.charges[demand - 1]
            return all(
                t <= g + a if a else t <= g
                for t, g, a in zip(target, reference, charge, strict=True)
            )
        if any(t > g for t, g in zip(target, reference, strict=True)):
            return False
        return slot.dirty or any(t > g for t, g in zip(target, own, strict=True))

    # ---- the abstraction function ------------------------------------------------------------

    def abstract(self) -> CreditState:
        """The implementation's public state (and the bytes in flight) as a spec state."""
        peers = tuple(self._abstract_peer(s) for s in range(self.bounds.senders))
        return CreditState(self._session, peers, _NO_FAULTS)

    def project(self, state: CreditState) -> CreditState:
        """The spec state with the fault counters erased (rule 11)."""
        return state._replace(faults=_NO_FAULTS)

    def _abstract_ledger(self, s: int) -> Ledger:
        slot = self._slots[s]
        endpoint = slot.endpoint
        key = endpoint.key
        n = self._n
        zero = (0,) * n
        if key is None:
            return Ledger(0, 0, 0, 0, FRESH, 0, zero, zero, zero, ())
        entry = endpoint.ledger.entry(key)
        session, epoch = key.receiver_session.value, endpoint.epoch
        if endpoint.state is NegotiationState.STALE:
            freshness = STALE
        else:
            freshness = REVIVED if slot.was_stale else FRESH
        tokens = sorted(
            c
            for token, c in slot.tokens
            if token.state is TokenState.RESERVED and (token.key, token.epoch) == (key, epoch)
        )
        return Ledger(
            session,
            epoch,
            self._spec_seq(session, s, epoch, entry.last_sequence),
            slot.usage_seq,
            freshness,
            self._spec_seq(session, s, epoch, slot.stale_at) if slot.was_stale else 0,
            _vector(entry.grant_total, n),
            _vector(entry.consumed, n),
            _vector(entry.returned, n),
            tuple(tokens),
            # the spec's history of tokens held since staleness: the harness draws no reserve
            # on a STALE entry and the implementation refuses one, so all of them
            tuple(tokens) if freshness == STALE else (),
        )

    def _abstract_books(self, s: int) -> tuple[int, tuple[Books, ...]]:
        allocator = self._receiver.allocator
        peer = self.peer(s)
        current = allocator.current_epoch(peer, 0)
        rslot = self._rslots[s]
        n = self._n
        books: list[Books] = []
        for epoch in range(1, current + 1):
            try:
                totals = allocator.key_totals(peer, 0, epoch)
            except InvalidEntry:
                continue  # settled and forgotten
            status = {
                EpochState.ACTIVE: ACTIVE,
                EpochState.FENCING: FENCING,
                EpochState.FENCED: RECLAIMED,
            }[totals.state]
            pushed = usage = demand = 0
            if status == ACTIVE and rslot.endpoint.epoch == epoch:
                stats = rslot.endpoint.statistics()
                pushed = self._spec_seq(self._session, s, epoch, stats.updates_pushed)
                usage = rslot.usage_seq
                demand = (rslot.demand or -1) if stats.stalled else 0
            books.append(
                Books(
                    epoch,
                    status,
                    _vector(totals.granted, n),
                    _vector(totals.released, n),
                    _vector(totals.reclaimed, n),
                    _vector(totals.landed, n),
                    pushed,
                    usage,
                    demand,
                )
            )
        return current, tuple(books)

    def _abstract_peer(self, s: int) -> Peer:
        slot = self._slots[s]
        epoch, books = self._abstract_books(s)
        inflight = tuple(sorted((w.session, w.epoch, w.charge) for w in self._work[s]))
        to_sender = _bag(self._spec_message(s, d) for d in slot.down.contents())
        to_receiver = _bag(self._spec_message(s, d) for d in slot.up.contents())
        return Peer(self._abstract_ledger(s), epoch, books, inflight, to_sender, to_receiver)


# --------------------------------------------------------------------------------------------
# Runners
# --------------------------------------------------------------------------------------------


@attrs.frozen
class CreditRun:
    """One lockstep run: the eager-grant model, the adapter and the :class:`Lockstep`."""

    model: EagerGrantSpec
    adapter: CreditAdapter
    lockstep: Lockstep[CreditState]

    @property
    def state(self) -> CreditState:
        """The spec's current state."""
        return self.lockstep.state

    def step(self, action: str, args: tuple[Hashable, ...]) -> StepVerdict | Divergence:
        """:meth:`Lockstep.step`."""
        return self.lockstep.step(action, args)

    def menu(self) -> list[ActionInstance]:
        """The spec-enabled action instances the implementation can take now (a driver's
        menu; never ``grant``, which is scheduled eagerly)."""
        state = self.lockstep.state
        return [
            (step.action, tuple(step.args))
            for step in self.model.spec.successors(state)
            if step.action != "grant"
            and self.adapter.supported(state, step.action, tuple(step.args))
        ]

    def drawable(self, action: str, args: tuple[Hashable, ...]) -> bool:
        """False for a spec-enabled step the implementation never takes (a driver skips it)."""
        state = self.lockstep.state
        enabled = self.model.apply(state, action, args) is not None
        return not enabled or self.adapter.supported(state, action, args)


def credit_lockstep(
    bounds: CreditBounds = CONFORMANCE_BOUNDS,
    *,
    spec: CreditSpec | None = None,
    trace: TraceSink | None = None,
) -> CreditRun:
    """A lockstep run of the eager-grant spec (``spec``, or the clean spec under ``bounds``)
    and a fresh :class:`CreditAdapter` (passing ``trace`` to its endpoints)."""
    clean = spec if spec is not None else CreditSpec(bounds, name="credit/conformance")
    model = EagerGrantSpec(clean)
    adapter = CreditAdapter(model.bounds, trace=trace)
    # The spec restates model_api's Step/Invariant shapes (DESIGN principle 2): structural only.
    lockstep = Lockstep(cast("SpecModel[CreditState]", model), adapter)
    return CreditRun(model=model, adapter=adapter, lockstep=lockstep)


def run_credit(
    actions: Iterable[ActionInstance],
    *,
    bounds: CreditBounds = CONFORMANCE_BOUNDS,
    spec: CreditSpec | None = None,
) -> Divergence | None:
    """Replay ``actions`` on the (eager-grant) spec and a fresh implementation in lockstep.

    Returns the first divergence, or ``None``. Steps the spec refuses are checked as refusals.
    """
    run = credit_lockstep(bounds, spec=spec)
    for action, args in actions:
        verdict = run.step(action, args)
        if isinstance(verdict, Divergence):
            return verdict
    return run.lockstep.divergence


WALK_WEIGHTS: Mapping[str, float] = {
    "deliver": 4.0,
    "reserve": 2.0,
    "commit": 2.0,
    "data_lands": 2.0,
    "report_usage": 2.0,
    "duplicate": 0.3,
    "lose": 0.3,
    "become_stale": 0.2,
    "publish_regressed": 0.1,
    "sender_restart": 0.1,
    "receiver_restart": 0.05,
}
"""Relative weight of an action name in a random walk (1.0 when absent): faults are rare, so a
walk reaches grants, reservations and landings between them."""


def weighted_choice(rng: random.Random, menu: Sequence[ActionInstance]) -> ActionInstance:
    """Draw an action name by :data:`WALK_WEIGHTS`, then one of its instances uniformly."""
    by_name: dict[str, list[ActionInstance]] = {}
    for instance in menu:
        by_name.setdefault(instance[0], []).append(instance)
    names = sorted(by_name)
    name = rng.choices(names, weights=[WALK_WEIGHTS.get(n, 1.0) for n in names])[0]
    return rng.choice(by_name[name])


def run_credit_conformance(
    *,
    steps: int,
    seed: int,
    bounds: CreditBounds = CONFORMANCE_BOUNDS,
    spec: CreditSpec | None = None,
    trace: TraceSink | None = None,
    exclude: frozenset[str] = frozenset(),
) -> Divergence | None:
    """A seeded random walk of ``steps`` steps in lockstep; the first divergence or ``None``.

    Each step draws among the enabled, implementation-supported action instances (faults
    included) with :func:`weighted_choice`, and one step in ten is a draw that ignores the guards
    (a refused one is checked as a refusal).
    ``spec`` replaces the clean spec (e.g. a known-bad variant, which must diverge); ``trace``
    records the implementation's events; ``exclude`` names actions never drawn (a trace meant
    for validation excludes ``publish_regressed``: the harness, not the receiver, forges that
    update). ``tent check`` runs a few hundred steps of this.
    """
    rng = random.Random(seed)
    run = credit_lockstep(bounds, spec=spec, trace=trace)
    for _ in range(steps):
        if run.lockstep.divergence is not None:
            return run.lockstep.divergence
        menu = [instance for instance in run.menu() if instance[0] not in exclude]
        if rng.random() < 0.1 or not menu:
            action, args = _refused_draw(rng, run.state, bounds)
            if not run.drawable(action, args):
                continue  # enabled, but not a step the implementation takes (see supported)
        else:
            action, args = weighted_choice(rng, menu)
        verdict = run.step(action, args)
        if isinstance(verdict, Divergence):
            return verdict
    return run.lockstep.divergence


def _refused_draw(rng: random.Random, state: CreditState, bounds: CreditBounds) -> ActionInstance:
    """A draw that ignores the guards: reserve, commit, rollback, return or reclaim anything."""
    s = rng.randrange(bounds.senders)
    c = rng.randrange(len(bounds.charges))
    action = rng.choice(("reserve", "commit", "rollback", "return_unused", "reclaim_after_fence"))
    if action == "reclaim_after_fence":
        return action, (s, rng.randint(1, state.peers[s].epoch))
    return action, (s, c)


def export_regression(
    trace_steps: Sequence[ActionInstance],
    *,
    name: str = "test_pinned_trace_conforms",
    bounds_expr: str = "CONFORMANCE_BOUNDS",
    comment: str = "",
) -> str:
    """Python test source that replays ``trace_steps`` through :func:`run_credit`.

    ``trace_steps`` is a list of ``(action, args)`` pairs (e.g. a model-checker
    ``CounterExample.actions``); ``bounds_expr`` is an expression for the bounds, evaluated in the
    generated module (``CONFORMANCE_BOUNDS`` and ``conformance_bounds`` are imported there). The
    test asserts that the real implementation conforms along the whole trace.
    """
    lines = [
        '"""Pinned credit conformance regression (generated by export_regression)."""',
        "",
        "from tent_models.configs import CREDIT_BOUNDS, KNOWN_BAD_BOUNDS",
        "from tent_models.conformance.credit import (",
        "    CONFORMANCE_BOUNDS,",
        "    conformance_bounds,",
        "    run_credit,",
        ")",
        "from tent_spec.credit import Activation, Update, Usage",
        "",
        "# Keep the names the generated trace may use (ruff: F401).",
        "_NAMES = (CREDIT_BOUNDS, KNOWN_BAD_BOUNDS, CONFORMANCE_BOUNDS, conformance_bounds)",
        "_MESSAGES = (Activation, Update, Usage)",
        "",
        "ACTIONS = [",
    ]
    lines.extend(f"    ({action!r}, {tuple(args)!r})," for action, args in trace_steps)
    lines += ["]", "", "", f"def {name}() -> None:"]
    if comment:
        lines.extend(f"    # {line}" for line in comment.splitlines())
    lines += [
        f"    divergence = run_credit(ACTIONS, bounds={bounds_expr})",
        "    assert divergence is None, divergence.format()",
        "",
    ]
    return "\n".join(lines)
