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

The adapter is split by responsibility: :mod:`._gated_drivers` builds the system and performs
the spec actions on it, :mod:`._gated_values` holds the ids and the value conversions both use,
and this module the abstraction function, the refused guards and the lockstep runners.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import cast

from tent_spec.gated import (
    COMMITTED,
    NEVER_STALLED,
    NONE,
    RESERVED,
    ROLLED_BACK,
    SETTLED,
    STALLED,
    WAS_STALLED,
    GatedSpec,
    GatedState,
    Owner,
    ReceiverKey,
    SenderKey,
)

from tent_credit import DispatchContext, TicketState
from tent_models.model_api import SpecModel
from tent_sched import OwnerState, TaskStatus

from ._gated_drivers import _GatedDrivers
from ._gated_values import PEER, REFRESH_NS, RX, _bag, _vec
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


class GatedAdapter(_GatedDrivers):
    """The real sender process and receiver, driven by gated spec actions.

    Satisfies :class:`~tent_models.conformance.ImplementationAdapter` for
    :class:`~tent_spec.gated.GatedState`. Construction performs the handshake of every key (the
    spec's initial state): connect, offer, activation and initial update, introduction report.
    """

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
        8. grant_partial with no head held for its release (or no hold configured) →
           unchanged (the receiver grants nothing).
        """
        if action == "grant_partial":
            return Outcome.unchanged()
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
                    head=_vec(endpoint.level_head()),
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
