"""The gated harness's system and drivers: the real sender process and receiver, and the calls
each spec action makes on them.

:class:`_GatedDrivers` is the base of :class:`~tent_models.conformance.gated.GatedAdapter`: it
builds the queue, the gate in REQUIRED mode, one ``SenderEndpoint`` per key and the
``CreditReceiver``, performs every key's handshake, and turns each spec action into its
implementation calls (``perform``, one ``_do_<action>`` each), moving encoded control messages
through the per-key bags it keeps. What the adapter observes (the abstraction function and the
refused guards) is :class:`~tent_models.conformance.gated.GatedAdapter`'s own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from typing import Any, cast

from tent_spec.gated import OFFER, REPORT, GatedConfig, GatedSpec
from tent_spec.gated import Faults as SpecFaults

from tent_credit import (
    AllocatorConfig,
    CreditMode,
    CreditReceiver,
    DispatchGate,
    GateConfig,
    GateToken,
    Plan,
    SenderEndpoint,
    SessionId,
)
from tent_credit.errors import CreditError
from tent_sched import AdmissionQueue, OwnerRequest, OwnerState, QueueLimits, TaskStatus
from tent_sched.errors import SchedError

from ._gated_values import _RESOURCES, PEER, REFRESH_NS, RX, _amounts, spec_message
from ._lockstep import Outcome


class _GatedDrivers:
    """The system under test and the spec actions' calls on it (see the module docstring)."""

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
            hold_partial=cfg.hold_partial,
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

    def _do_grant_partial(self) -> Outcome:
        return Outcome.applied() if self.receiver.grant_partial() else Outcome.unchanged()

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
