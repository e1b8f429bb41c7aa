"""One driver per credit spec action: :meth:`_AdapterDrivers.perform` applies a spec action
instance to the implementation, following the mapping rules of the package docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

import attrs
from tent_spec.credit import Usage

from tent_credit import (
    Heartbeat,
    ReceiverCreditUpdate,
    ReservationToken,
    SenderCreditUsage,
)
from tent_credit._wire import decode, encode
from tent_credit.errors import CreditError
from tent_models.conformance._lockstep import (
    ConformanceFailure,
    Outcome,
)
from tent_models.conformance.credit._core import _AdapterCore
from tent_models.conformance.credit._harness import (
    _amounts_vector,
    _Channel,
    _ReceiverSlot,
    _SenderSlot,
    _vector,
    _Work,
)
from tent_models.conformance.credit._model import (
    _TTL_NS,
    REFRESH_INTERVAL_NS,
    RESOURCES,
    USAGE_INTERVAL_NS,
)


class _AdapterDrivers(_AdapterCore):
    """:meth:`perform` and its table of drivers, one per spec action name."""

    # ---- ImplementationAdapter ---------------------------------------------------------------

    def perform(self, action: str, args: tuple[Hashable, ...]) -> Outcome:
        """Apply one spec action instance to the implementation (package docstring rules)."""
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
