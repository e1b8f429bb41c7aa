"""Gated-queue conformance: the real queue, gate, endpoints and receiver vs ``tent_spec.gated``.

:class:`GatedAdapter` builds one sender process - a ``tent_sched.AdmissionQueue``, a
``tent_credit.DispatchGate`` in REQUIRED mode and one ``SenderEndpoint`` per credit key (QoS
class ``key - 1``) - and one ``CreditReceiver``, and turns every action of
:class:`~tent_spec.gated.GatedSpec` into their calls. Control messages travel as real encoded
CBOR bytes through per-key bags (one per direction) that the harness drives explicitly: it
chooses which message is delivered, duplicated or lost, so a spec ``deliver(k, msg)`` names
exactly one set of bytes.

The endpoints speak credit protocol version 2 (grant-ahead, the default both offer): a
sender's report states its level, the receiver keeps each key topped up from it and serves due
keys from one waiting line.

The abstraction function (:meth:`GatedAdapter.abstract`), field by field:

1. ``owners``: ``queue.owner_state`` (state, status), the owner's ``DispatchContext.snapshot``
   (session), ``gate.stall(id)`` (STALLED; WAS_STALLED once the harness saw a stall end), the
   ``GateToken`` the pick attached (its ``state`` and its reservation's session) and whether the
   harness landed its data. ``queue``, ``outstanding_*`` and ``dispatching_bytes`` come from
   ``queued_ids()`` and ``statistics()``.
2. ``senders[k]``: the endpoint's negotiation state (ACTIVE / STALE / FENCING), key session,
   ledger entry (``last_sequence``, ``grant_total``, ``consumed``, ``returned``) and
   ``level_reports()`` (the waiting work the gate stated, the level and returns last reported).
3. ``receivers[k]``: the allocator's ``key_totals`` (granted, landed, released, reclaimed,
   consumed as reported), the endpoint's ``version``, ``level`` and ``updates_pushed`` (the
   spec's ``pushed_seq``); ``line`` is ``CreditReceiver.waiting_line``.
4. ``to_sender`` / ``to_receiver``: every encoded message in flight, decoded and mapped to the
   spec's message values (``retry`` is ``retry_after_us != 0``; the TTL fields are not
   modelled).

:func:`project_state` erases what the implementation keeps private: the sender's report
counter and "awaiting activation" flag, the gate's ``withdrawn`` flag, the receiver's usage
sequence, its last sent (grants, retry) and due flags, and the spec's ``bypass`` counters (a
property of the spec's line, not a field of the receiver). Those are still checked: they decide
which bytes a flush emits, and the emitted bytes are part of the compared state.

The harness clock advances by 1 ns per step: every offer is due again at the next flush (the
usage interval is 1 ns) and a level's fall or idle credit at the next flush (the level hold is
1 ns). ``refresh_tick`` advances it by :data:`REFRESH_NS`, past both refresh intervals at once:
every receiver endpoint re-publishes its vector and every sender endpoint re-sends its report,
never otherwise.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping
from typing import Any, cast

from tent_spec.credit import ACTIVATION, UPDATE, Activation
from tent_spec.gated import (
    COMMITTED,
    NEVER_STALLED,
    NONE,
    OFFER,
    REPORT,
    RESERVED,
    ROLLED_BACK,
    SETTLED,
    STALLED,
    WAS_STALLED,
    GatedConfig,
    GatedSpec,
    GatedState,
    Offer,
    Owner,
    ReceiverKey,
    Report,
    SenderKey,
    Update,
)
from tent_spec.gated import Faults as SpecFaults

from tent_credit import (
    AllocatorConfig,
    CapabilityActivation,
    CapabilityOffer,
    CreditAmount,
    CreditMode,
    CreditReceiver,
    CreditResource,
    DispatchContext,
    DispatchGate,
    GateConfig,
    GateToken,
    Plan,
    ReceiverCreditUpdate,
    SenderCreditUsage,
    SenderEndpoint,
    SessionId,
    TicketState,
    decode,
)
from tent_credit.errors import CreditError
from tent_models.model_api import SpecModel
from tent_sched import AdmissionQueue, OwnerRequest, OwnerState, QueueLimits, TaskStatus
from tent_sched.errors import SchedError

from ._lockstep import ActionInstance, Divergence, Lockstep, Outcome, OutcomeKind

__all__ = [
    "PEER",
    "REFRESH_NS",
    "RX",
    "GatedAdapter",
    "gated_lockstep",
    "project_state",
    "run_gated",
]

RX = 1
"""The receiver's id as registered with the gate."""
PEER = 7
"""The sender's peer id (bound at connection setup)."""
REFRESH_NS = 10**12
"""The receiver's refresh interval: only ``refresh_tick`` advances the clock that far."""

_RESOURCES = (
    CreditResource.DATA_BYTES,
    CreditResource.REQUEST_SLOTS,
    CreditResource.CONSUMER_SLOTS,
)
_RAISED_IE = Outcome(kind=OutcomeKind.RAISED, error="InvalidEntry")
_RAISED_TMR = Outcome(kind=OutcomeKind.RAISED, error="TooManyRequests")
_PHASE = {"ACTIVE": "ACTIVE", "STALE": "STALE", "FENCING": "FENCING"}
_TOKEN = {
    TicketState.RESERVED: RESERVED,
    TicketState.COMMITTED: COMMITTED,
    TicketState.ROLLED_BACK: ROLLED_BACK,
    TicketState.COMPLETED: SETTLED,
}
_OWNER_STATE = {
    OwnerState.QUEUED: "QUEUED",
    OwnerState.DISPATCHING: "DISPATCHING",
    OwnerState.TERMINAL: "TERMINAL",
}


def _vec(amounts: Mapping[CreditResource, int]) -> tuple[int, ...]:
    """A spec vector from a resource mapping."""
    return tuple(amounts.get(r, 0) for r in _RESOURCES)


def _wire_vec(amounts: tuple[CreditAmount, ...]) -> tuple[int, ...]:
    """A spec vector from a message's ``CreditAmount`` tuple."""
    return _vec({a.resource: a.amount for a in amounts})


def _amounts(vector: tuple[int, ...]) -> dict[CreditResource, int]:
    return dict(zip(_RESOURCES, vector, strict=True))


def spec_message(data: bytes) -> Any:
    """The spec value of one encoded control message (the message part of the abstraction)."""
    message = decode(data)
    if isinstance(message, CapabilityOffer):
        return Offer(OFFER)
    if isinstance(message, SenderCreditUsage):
        return Report(
            REPORT,
            message.receiver_session_id.value,
            message.sequence,
            _wire_vec(message.consumed_totals),
            _wire_vec(message.returned_totals),
            _wire_vec(message.pending_demand),
        )
    if isinstance(message, CapabilityActivation):
        return Activation(ACTIVATION, message.receiver_session_id.value, message.epoch)
    if isinstance(message, ReceiverCreditUpdate):
        return Update(
            UPDATE,
            message.receiver_session_id.value,
            message.epoch,
            message.sequence,
            _wire_vec(message.grants),
            bool(message.retry_after_us),
        )
    raise TypeError(f"unexpected message {message!r}")  # pragma: no cover - never sent here


def project_state(state: GatedState) -> GatedState:
    """The spec state with the endpoints' private counters and flags erased (module docstring)."""
    return state._replace(
        senders=tuple(
            s._replace(usage_seq=0, awaiting=False, withdrawn=False) for s in state.senders
        ),
        receivers=tuple(
            b._replace(
                usage_seq=0,
                grants_unsent=False,
                sent_retry=False,
                push_due=False,
                activation_due=False,
            )
            for b in state.receivers
        ),
        bypass=tuple(0 for _ in state.bypass),
    )


class GatedAdapter:
    """The real sender process and receiver, driven by gated spec actions.

    Satisfies :class:`~tent_models.conformance.ImplementationAdapter` for
    :class:`~tent_spec.gated.GatedState`. Construction performs the handshake of every key (the
    spec's initial state): connect, offer, activation and initial update, introduction report.
    """

    def __init__(self, config: GatedConfig, spec: GatedSpec | None = None) -> None:
        """``spec`` (default: ``GatedSpec(config)``) words the refused guards for
        :meth:`refusal`. Raises the implementation's typed errors for a configuration it
        refuses."""
        self.config = config
        self._spec = GatedSpec(config) if spec is None else spec
        self.now = 1_000
        self.session = 1
        self.faults = SpecFaults(0, 0, 0)
        self.gate = DispatchGate(GateConfig(mode=CreditMode.REQUIRED))
        refresh = REFRESH_NS if config.refresh else 0
        self.endpoints = [
            SenderEndpoint(
                sender_peer=PEER,
                qos_class=k,
                mode=CreditMode.REQUIRED,
                usage_interval_ns=1,
                level_hold_ns=1,
                refresh_interval_ns=refresh,
            )
            for k in range(config.keys)
        ]
        for endpoint in self.endpoints:
            self.gate.add_endpoint(RX, endpoint)
        self.receiver = self._new_receiver()
        self.queue = AdmissionQueue(
            QueueLimits(
                max_outstanding_owners=config.max_outstanding_owners,
                max_outstanding_bytes=config.max_outstanding_bytes,
            )
        )
        self.to_sender: list[Counter[bytes]] = [Counter() for _ in range(config.keys)]
        self.to_receiver: list[Counter[bytes]] = [Counter() for _ in range(config.keys)]
        self.tokens: dict[int, GateToken | None] = {}
        self.landed: set[int] = set()
        self.ever_stalled: set[int] = set()
        for k, endpoint in enumerate(self.endpoints):
            endpoint.connect(self._tick())
            self._pump(k)

    # --- the system -----------------------------------------------------------------------

    def _new_receiver(self) -> CreditReceiver:
        cfg = self.config
        receiver = CreditReceiver(
            AllocatorConfig(
                capacity=_amounts(cfg.capacity),
                control_slots=2,
                max_grant=_amounts(cfg.max_grant),
                max_keys=4,
                retry_after_us=100,
                grant_chunk=cfg.grant_chunk,
            ),
            SessionId(self.session),
            refresh_interval_ns=REFRESH_NS if cfg.refresh else 0,
            initial_grant=_amounts(cfg.initial_grant),
        )
        for k in range(cfg.keys):
            receiver.accept(PEER, k)
        return receiver

    def _tick(self, step: int = 1) -> int:
        self.now += step
        return self.now

    def _receiver_endpoint(self, k: int) -> Any:
        return next(e for e in self.receiver.endpoints() if e.qos_class == k and not e.closed)

    def _pump(self, k: int) -> None:
        """The handshake of key ``k``, loss-free: offer → activation + update (a version-2
        sender reports only news: nothing yet, or the idle initial grant at its next flush)."""
        endpoint, ep = self.endpoints[k], self._receiver_endpoint(k)
        for data in endpoint.messages_to_send(self._tick()):
            ep.receive_message(data, self.now)
        for data in ep.messages_to_send(self._tick()):
            endpoint.receive_message(data, self.now)

    # --- the implementation calls ---------------------------------------------------------

    def perform(self, action: str, args: tuple[Hashable, ...]) -> Outcome:
        """Apply one spec action instance (see the module docstring's mapping)."""
        try:
            outcome = getattr(self, "_do_" + action)(*args)
        except (CreditError, SchedError) as error:
            return Outcome.raised(type(error), str(error))
        self._note_stalls()
        return cast("Outcome", outcome)

    def _note_stalls(self) -> None:
        """Remember every owner the gate has a credit stall for (for WAS_STALLED)."""
        for owner_id in range(1, self.queue.statistics().admitted_total + 1):
            if self.gate.stall(owner_id) is not None:
                self.ever_stalled.add(owner_id)

    def _do_admit(self, index: int) -> Outcome:
        spec = self.config.workload[index]
        if spec.key:
            ctx = self.gate.context(Plan.REMOTE_DIRECT_WRITE, RX, spec.key - 1)
        else:
            ctx = self.gate.context(Plan.RDMA_READ, RX)
        request = OwnerRequest(
            public_id=index + 1,
            length=spec.length,
            gate_key=ctx.gate_key,
            context=ctx,
            degradation_eligible=True,  # the gated spec counts every dispatched byte
        )
        self.queue.try_admit(1, 1 << 32, [request])
        return Outcome.applied()

    def _do_cancel(self, owner_id: int) -> Outcome:
        """The caller cancels a queued owner and tells the gate (``forget``); canceling a
        CANCELED owner again is the queue's idempotent no-op."""
        again = self.queue.owner_state(owner_id) == (OwnerState.TERMINAL, TaskStatus.CANCELED)
        self.queue.cancel(owner_id)
        self.gate.forget(owner_id)
        return Outcome.unchanged() if again else Outcome.applied()

    def _do_pick(self, max_owners: int, max_bytes: int) -> Outcome:
        if not self.queue.queued_ids():
            self.queue.pick_for_dispatch(max_owners, max_bytes, now_ns=self._tick())
            return Outcome.unchanged()
        now = self._tick()
        result = self.queue.pick_for_dispatch(
            max_owners, max_bytes, now_ns=now, eligibility=self.gate
        )
        self.gate.observe_pick(result, self.queue.owner, now)
        for picked in result.picked:
            token = picked.token
            assert token is None or isinstance(token, GateToken)
            self.tokens[picked.owner.owner_id] = token
        return Outcome.applied()

    def _do_submit(self, owner_id: int, ok: bool) -> Outcome:
        token = self.tokens[owner_id]
        if ok:  # the transport accepted the submit
            self.gate.commit(token)
        else:  # the transport refused it: exact rollback, the owner fails
            self.gate.rollback(token)
            self.queue.complete(owner_id, TaskStatus.FAILED)
        return Outcome.applied()

    def _do_land(self, owner_id: int) -> Outcome:
        token = self.tokens[owner_id]
        assert token is not None
        self.receiver.data_landed(PEER, token.qos_class, 1, token.charge.as_dict())
        self.landed.add(owner_id)
        return Outcome.applied()

    def _do_complete(self, owner_id: int) -> Outcome:
        token = self.tokens.get(owner_id)
        self.gate.complete(token, self._tick())
        local = token is None
        status = TaskStatus.COMPLETED if local or owner_id in self.landed else TaskStatus.FAILED
        self.queue.complete(owner_id, status)
        return Outcome.applied()

    def _do_release(self, k: int) -> Outcome:
        totals = self.receiver.allocator.key_totals(PEER, k, 1)
        amounts = {r: totals.landed[r] - totals.released[r] for r in _RESOURCES}
        self.receiver.release(PEER, k, 1, amounts)
        return Outcome.applied()

    def _do_sender_flush(self, k: int) -> Outcome:
        sent = self.endpoints[k].messages_to_send(self._tick())
        self.to_receiver[k].update(sent)
        return Outcome.applied() if sent else Outcome.unchanged()

    def _do_receiver_flush(self, k: int) -> Outcome:
        sent = self._receiver_endpoint(k).messages_to_send(self._tick())
        self.to_sender[k].update(sent)
        return Outcome.applied() if sent else Outcome.unchanged()

    def _do_refresh_tick(self) -> Outcome:
        now = self._tick(REFRESH_NS)
        sent_any = False
        for k in range(self.config.keys):
            sent = self._receiver_endpoint(k).messages_to_send(now)
            self.to_sender[k].update(sent)
            reports = self.endpoints[k].messages_to_send(now)
            self.to_receiver[k].update(reports)
            sent_any = sent_any or bool(sent) or bool(reports)
        return Outcome.applied() if sent_any else Outcome.unchanged()

    def _bytes_of(self, k: int, msg: Any) -> tuple[Counter[bytes], bytes]:
        bag = self.to_receiver[k] if msg.kind in (OFFER, REPORT) else self.to_sender[k]
        for data in bag:
            if spec_message(data) == msg:
                return bag, data
        raise KeyError(msg)  # guarded by the spec: the message is in flight

    def _do_deliver(self, k: int, msg: Any) -> Outcome:
        bag, data = self._bytes_of(k, msg)
        bag[data] -= 1
        if not bag[data]:
            del bag[data]
        now = self._tick()
        if msg.kind in (OFFER, REPORT):
            self._receiver_endpoint(k).receive_message(data, now)
        else:
            self.endpoints[k].receive_message(data, now)
        return Outcome.applied()

    def _do_duplicate(self, k: int, msg: Any) -> Outcome:
        bag, data = self._bytes_of(k, msg)
        bag[data] += 1
        self.faults = self.faults._replace(duplications=self.faults.duplications + 1)
        return Outcome.applied()

    def _do_lose(self, k: int, msg: Any) -> Outcome:
        bag, data = self._bytes_of(k, msg)
        bag[data] -= 1
        if not bag[data]:
            del bag[data]
        self.faults = self.faults._replace(losses=self.faults.losses + 1)
        return Outcome.applied()

    def _do_receiver_restart(self) -> Outcome:
        """A new receiver process (new session); both connections of every key are lost, so
        their bags are gone; each sender endpoint disconnects and reconnects."""
        self.session += 1
        self.receiver = self._new_receiver()
        now = self._tick()
        for k, endpoint in enumerate(self.endpoints):
            self.to_sender[k].clear()
            self.to_receiver[k].clear()
            endpoint.disconnect(now)
            endpoint.reconnect(now)
        self.faults = self.faults._replace(restarts=self.faults.restarts + 1)
        return Outcome.applied()

    # --- refusals -------------------------------------------------------------------------

    def refusal(self, state: GatedState, action: str, args: tuple[Hashable, ...]) -> Outcome | None:
        """What the implementation does when the spec's guard is false.

        1. admit over capacity → TooManyRequests; out of workload order → no counterpart.
        2. pick over an empty queue → unchanged; an unconfigured window → no counterpart.
        3. submit(ok) of a token whose entry was fenced → InvalidEntry (commit refuses it);
           other refused submits → no counterpart (no token to settle).
        4. complete of an owner that is not DISPATCHING, or whose token is still RESERVED →
           InvalidEntry; live work that has not landed → no counterpart (the harness decides
           when data lands).
        5. sender_flush / receiver_flush / refresh_tick with nothing due → unchanged (the
           endpoint emits nothing); model bounds (bag, sequence cap) and an unconfigured
           refresh timer → no counterpart.
        6. release with nothing landed, deliver of a message not in flight, exhausted fault
           budgets → no counterpart.
        7. cancel of an owner that is not QUEUED: CANCELED already → unchanged (idempotent),
           DISPATCHING or another terminal status → InvalidEntry; cancel not configured → no
           counterpart.
        """
        if action == "admit":
            index = args[0]
            if (
                index == state.admitted
                and isinstance(index, int)
                and index < len(self.config.workload)
            ):
                return _RAISED_TMR
            return None
        if action == "cancel":
            owner = _owner(state, args[0])
            if not self.config.cancel or owner is None:
                return None
            # docs/semantics.md#admission-queue cancel: CANCELED again is an idempotent no-op, else
            # InvalidEntry
            return Outcome.unchanged() if owner.status == "CANCELED" else _RAISED_IE
        if action == "pick":
            window = (args[0], args[1])
            return Outcome.unchanged() if window in self.config.windows else None
        if action == "submit":
            owner = _owner(state, args[0])
            if (
                args[1] is True
                and owner is not None
                and owner.token == RESERVED
                and owner.state == "DISPATCHING"
            ):
                return _RAISED_IE
            return None
        if action == "complete":
            owner = _owner(state, args[0])
            if owner is None:
                return None
            if owner.state != "DISPATCHING" or owner.token == RESERVED:
                return _RAISED_IE
            return None
        if action in ("sender_flush", "receiver_flush", "refresh_tick"):
            reason = self._spec.explain(state, action, args)
            quiet = ("nothing to send", "nothing to refresh", "waits for data credit")
            return Outcome.unchanged() if any(q in reason for q in quiet) else None
        return None

    # --- the abstraction function ---------------------------------------------------------

    def abstract(self) -> GatedState:
        """The implementation's public state as a spec state (module docstring)."""
        owners: list[Owner] = []
        stats = self.queue.statistics()
        for owner_id in range(1, stats.admitted_total + 1):
            view = self.queue.owner(owner_id)
            state, status = self.queue.owner_state(owner_id)
            ctx = view.context
            assert isinstance(ctx, DispatchContext)
            snapshot = 0 if ctx.snapshot is None else ctx.snapshot[0].value
            token = self.tokens.get(owner_id)
            if self.gate.stall(owner_id) is not None:
                stall = STALLED
            elif owner_id in self.ever_stalled:
                stall = WAS_STALLED
            else:
                stall = NEVER_STALLED
            reservation = None if token is None else token.reservation
            owners.append(
                Owner(
                    owner_id=owner_id,
                    key=0 if ctx.gate_key is None else ctx.qos_class + 1,
                    length=view.length,
                    snapshot=snapshot,
                    state=_OWNER_STATE[state],
                    status=None if status is TaskStatus.PENDING else status.name,
                    stall=stall,
                    token=NONE if token is None else _TOKEN[token.state],
                    token_session=0
                    if reservation is None
                    else reservation.key.receiver_session.value,
                    landed=owner_id in self.landed,
                )
            )
        senders = []
        for endpoint in self.endpoints:
            key = endpoint.key
            assert key is not None
            entry = endpoint.ledger.entry(key)
            waiting, reported, reported_returned = endpoint.level_reports()
            senders.append(
                SenderKey(
                    phase=_PHASE[endpoint.state.name],
                    session=key.receiver_session.value,
                    last_seq=entry.last_sequence,
                    grant_total=_vec(entry.grant_total),
                    consumed=_vec(entry.consumed),
                    returned=_vec(entry.returned),
                    usage_seq=0,
                    waiting=_vec(waiting),
                    reported=_vec(reported),
                    returns_unreported=_vec(entry.returned) != _vec(reported_returned),
                    awaiting=False,
                    withdrawn=False,
                )
            )
        receivers = []
        for k in range(self.config.keys):
            totals = self.receiver.allocator.key_totals(PEER, k, 1)
            ep = self._receiver_endpoint(k)
            receivers.append(
                ReceiverKey(
                    version=bool(ep.version),
                    granted=_vec(totals.granted),
                    landed=_vec(totals.landed),
                    released=_vec(totals.released),
                    reclaimed=_vec(totals.reclaimed),
                    consumed=_vec(totals.consumed_reported),
                    level=_vec(ep.level),
                    pushed_seq=ep.statistics().updates_pushed,
                    usage_seq=0,
                    grants_unsent=False,
                    sent_retry=False,
                    push_due=False,
                    activation_due=False,
                )
            )
        return GatedState(
            session=self.session,
            admitted=stats.admitted_total,
            owners=tuple(owners),
            queue=self.queue.queued_ids(),
            outstanding_owners=stats.outstanding_owners,
            outstanding_bytes=stats.outstanding_bytes,
            dispatching_bytes=stats.dispatching_bytes,
            senders=tuple(senders),
            receivers=tuple(receivers),
            to_sender=tuple(_bag(c) for c in self.to_sender),
            to_receiver=tuple(_bag(c) for c in self.to_receiver),
            faults=self.faults,
            line=tuple(qos for _peer, qos in self.receiver.waiting_line),
            bypass=(0,) * self.config.keys,
        )

    def project(self, state: GatedState) -> GatedState:
        return project_state(state)


def _bag(counter: Counter[bytes]) -> tuple[tuple[Any, int], ...]:
    bag: Counter[Any] = Counter()
    for data, count in counter.items():
        bag[spec_message(data)] += count
    return tuple(sorted(bag.items()))


def _owner(state: GatedState, owner_id: object) -> Owner | None:
    if type(owner_id) is not int or not 1 <= owner_id <= len(state.owners):
        return None
    return state.owners[owner_id - 1]


def gated_lockstep(spec: GatedSpec, *, initial: GatedState | None = None) -> Lockstep[GatedState]:
    """A :class:`Lockstep` of ``spec`` and a fresh :class:`GatedAdapter` for its config."""
    model = cast("SpecModel[GatedState]", spec)
    return Lockstep(model, GatedAdapter(spec.config, spec), initial=initial)


def run_gated(spec: GatedSpec, actions: Iterable[ActionInstance]) -> Divergence | None:
    """Replay ``actions`` on ``spec`` and a fresh system in lockstep; the first divergence."""
    lockstep = gated_lockstep(spec)
    for action, args in actions:
        verdict = lockstep.step(action, args)
        if isinstance(verdict, Divergence):
            return verdict
    return lockstep.divergence
