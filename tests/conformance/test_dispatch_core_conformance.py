"""The dispatch core settles the gate as the gated spec says, a failing post included.

``test_gated_conformance.py`` drives the real queue, gate, endpoints and receiver through
``tent_spec.gated``, settling each picked owner itself (``submit(owner, ok)``). Here the
transport's :class:`DispatchCore` does that settlement, as in the engine: it picks, hands off
and posts on a device, so a spec ``submit(owner, False)`` is a post the device refuses and
``submit(owner, True)`` one it accepts. The harness (the gated adapter's endpoints, receiver,
message bags and abstraction, reading the core's queue and gate) compares the real state with
the spec's after every step, through the checker's counterexample of ``gated/bad/no_idle_return``
(a refused submit) and on to recovery. Before the core committed at the first post, the refused
post ended FAILED with its charge COMMITTED: the comparison failed at that step.

The core picks as part of every submit and every pass, so one core call is a group of spec
steps: ``admit`` then ``pick``, or ``pick`` alone (a pass), or ``complete`` then ``pick``; each
picked owner's ``submit`` follows in the same call.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from tent_models.configs.gated import hoarding_config
from tent_models.conformance.gated import RX, GatedAdapter, project_state
from tent_spec.gated import RESERVED, GatedSpec, GatedState
from tent_transport.config import load_engine_config
from tent_transport.devices import Opcode, SliceCompletion, SliceRequest, SliceStatus
from tent_transport.dispatch import DispatchCore, TransferRequest
from tent_transport.errors import PostRefused

from tent_credit import CreditMode, DispatchGate, GateConfig, GateEligible, GateToken


class _Rail:
    """A Device whose posts are accepted or, ``refuse`` set, refused as malformed by a ready
    device; ``finish`` completes what it accepted."""

    name = "rail0"
    link_speed_gbps = 100.0

    def __init__(self) -> None:
        self.refuse = False
        self.outstanding: list[SliceRequest] = []
        self.done: list[SliceCompletion] = []

    def post_budget(self, peer: int) -> int:
        return 16

    def post(self, slices: Sequence[SliceRequest], now_ns: int) -> None:
        if self.refuse:
            raise PostRefused("refused by the device", ready=True)
        self.outstanding.extend(slices)

    def finish(self) -> None:
        self.done += [
            SliceCompletion(wr_id=s.wr_id, status=SliceStatus.SUCCESS, length=s.length)
            for s in self.outstanding
        ]
        self.outstanding = []

    def poll(self, max_entries: int, now_ns: int) -> list[SliceCompletion]:
        out, self.done = self.done[:max_entries], self.done[max_entries:]
        return out

    def next_completion_ns(self) -> int | None:
        return None

    def set_wakeup(self, callback: Callable[[], None] | None) -> None:
        """Polled only."""

    def close(self) -> None:
        """Nothing held."""


class _RecordingGate(DispatchGate):
    """The real gate; it also hands each token it issues to the harness (the spec's abstraction
    reads an owner's token)."""

    def __init__(self, tokens: dict[int, GateToken | None]) -> None:
        super().__init__(GateConfig(mode=CreditMode.REQUIRED))
        self._tokens = tokens

    def __call__(self, owner: Any, now_ns: int, /) -> Any:
        decision = super().__call__(owner, now_ns)
        if isinstance(decision, GateEligible):
            self._tokens[owner.owner_id] = decision.token
        return decision


class CoreHarness:
    """The gated adapter's system with a DispatchCore doing the queue, the picks and the
    settlement, in lockstep with the spec."""

    def __init__(self, spec: GatedSpec) -> None:
        config = spec.config
        self.spec = spec
        self.state: GatedState = spec.initial_states()[0]
        self.adapter = GatedAdapter(config, spec)
        gate = _RecordingGate(self.adapter.tokens)
        for endpoint in self.adapter.endpoints:
            gate.add_endpoint(RX, endpoint)
        ((max_owners, max_bytes),) = config.windows
        self.rail = _Rail()
        self.core = DispatchCore(
            load_engine_config(
                {
                    "enable_runtime_queue": True,
                    "runtime_queue": {
                        "max_outstanding_owners": config.max_outstanding_owners,
                        "max_outstanding_bytes": config.max_outstanding_bytes,
                        "max_dispatch_owners": max_owners,
                        "max_dispatch_bytes": max_bytes,
                    },
                    "receiver_credit": {"enabled": True, "mode": "required"},
                }
            ),
            [self.rail],
            gate=gate,
        )
        queue = self.core.queue
        assert queue is not None
        # the abstraction reads every admitted owner; the core retires a submit's records once
        # it ended, so keep them (the spec never forgets an owner)
        queue.retire_batch = lambda batch_token: None  # type: ignore[method-assign]
        self.adapter.gate = gate
        self.adapter.queue = queue
        self.window = (max_owners, max_bytes)

    def _apply(self, action: str, *args: Hashable) -> None:
        state = self.spec.apply(self.state, action, args)
        assert state is not None, f"the spec refuses {action}{args}"
        self.state = state

    def _picked_then_submitted(self, ok: bool) -> None:
        """The spec's pick (if it picks anything) and the submit of each owner it picked."""
        state = self.spec.apply(self.state, "pick", self.window)
        if state is None:
            return
        before = {o.owner_id for o in self.state.owners if o.token == RESERVED}
        self.state = state
        for owner in state.owners:
            fresh = owner.owner_id not in before
            if fresh and owner.state == "DISPATCHING" and owner.token == RESERVED:
                self._apply("submit", owner.owner_id, ok)

    def _check(self, step: str) -> None:
        self.adapter._note_stalls()
        real, spec = project_state(self.adapter.abstract()), project_state(self.state)
        assert real == spec, f"after {step}:\n real {real}\n spec {spec}"

    def submit(self, index: int) -> None:
        """``admit(index)`` + the pick and submits: one ``DispatchCore.submit``."""
        owner = self.spec.config.workload[index]
        self._apply("admit", index)
        self.rail.refuse = False
        self.core.submit(
            [
                TransferRequest(
                    opcode=Opcode.WRITE,
                    local=bytearray(owner.length),
                    peer=RX,
                    remote_segment=1,
                    remote_offset=0,
                    length=owner.length,
                    qos_class=owner.key - 1,
                )
            ],
            self.adapter._tick(),
        )
        self._picked_then_submitted(ok=True)
        self._check(f"submit({index})")

    def dispatch_pass(self, *, post_ok: bool) -> None:
        """A pass: the pick and the submit of what it picks, on a device that accepts or
        refuses the post."""
        self.rail.refuse = not post_ok
        self.core.progress(self.adapter._tick())
        self._picked_then_submitted(ok=post_ok)
        self._check(f"pass(post_ok={post_ok})")

    def complete(self, owner_id: int) -> None:
        """The device reports the owner's slices: ``complete`` and the pass's pick."""
        self.rail.finish()
        self._apply("complete", owner_id)
        self.core.progress(self.adapter._tick())
        self._picked_then_submitted(ok=True)
        self._check(f"complete({owner_id})")

    def other(self, action: str, *args: Hashable) -> None:
        """A step of the endpoints, receiver or network (no core call)."""
        self._apply(action, *args)
        outcome = self.adapter.perform(action, args)
        assert outcome.kind == "applied", (action, args, outcome)
        self._check(f"{action}{args}")


def test_the_core_follows_the_spec_through_a_refused_post_and_on_to_recovery() -> None:
    harness = CoreHarness(GatedSpec(hoarding_config(cancel=False)))
    harness.submit(0)  # key 1's owner stalls: nothing granted yet
    harness.other("sender_flush", 0)
    harness.other("deliver", 0, harness.state.to_receiver[0][0][0])  # its demand
    harness.other("receiver_flush", 0)
    harness.other("deliver", 0, max(m for m, _n in harness.state.to_sender[0]))  # the grant
    harness.dispatch_pass(post_ok=False)  # the device refuses the post: exact rollback
    owner = harness.state.owners[0]
    assert (owner.status, owner.token) == ("FAILED", "ROLLED_BACK")
    assert harness.state.senders[0].consumed == (0, 0, 0)
    harness.submit(1)  # key 2's owner stalls: the only capacity is key 1's, idle now
    harness.other("sender_flush", 0)
    harness.other("sender_flush", 1)
    harness.other("deliver", 0, harness.state.to_receiver[0][0][0])  # key 1 returns it
    harness.other("deliver", 1, harness.state.to_receiver[1][0][0])  # key 2's demand
    harness.other("receiver_flush", 1)
    harness.other("deliver", 1, max(m for m, _n in harness.state.to_sender[1]))
    harness.dispatch_pass(post_ok=True)  # key 2's owner is posted on the returned credit
    harness.other("land", 2)
    harness.complete(2)
    harness.other("release", 1)
    assert harness.spec.recovered(harness.state)
    assert [o.status for o in harness.state.owners] == ["FAILED", "COMPLETED"]
