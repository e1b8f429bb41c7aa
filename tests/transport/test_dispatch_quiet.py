"""Quiet passes: a refill whose last pick changed nothing, with nothing it read changed since
and before the clock can matter, is skipped (docs/gate.md#quiet-passes).

The differential test runs two dispatch cores on the same random schedule, one whose gate
never offers a quiet stamp (every pass picks in full), and holds them to the same transfers,
statuses, posts, control messages and books at every step; only the counters of blocked
answers may differ, since a skipped pick asks nothing.
"""

from __future__ import annotations

import re
from typing import Any

import attrs
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tent_transport.config import load_engine_config
from tent_transport.devices import Opcode
from tent_transport.dispatch import DispatchCore, EndReason, TransferPhase
from test_dispatch_credit import CONFIG, ME, MIB, RESOURCES, RX, pump, request
from transport_fakes import FakeDevice

from tent_credit import (
    AllocatorConfig,
    CreditMode,
    CreditReceiver,
    CreditResource,
    DispatchGate,
    GateConfig,
    SenderEndpoint,
    SessionId,
)
from tent_sched import AdmissionQueue, OwnerKind, OwnerRequest, QueueLimits, TaskStatus

_SKIPPED = re.compile(r"(.*blocked.*|update_age_ns)$")
CHARGE = {CreditResource.DATA_BYTES: 2 * MIB, CreditResource.REQUEST_SLOTS: 1}
CHARGE[CreditResource.CONSUMER_SLOTS] = 1
# θ = 1: a pick of an owner with a deadline reads the clock (the MLU drop)
DEADLINES = {**CONFIG, "runtime_queue": {"deadline_aware": True, "mlu_local_threshold": 1.0}}
# a dispatch window of two writes, and credit for three: the window stops picks too
WINDOW = {**CONFIG, "runtime_queue": {"deadline_aware": True, "max_dispatch_bytes": 4 * MIB}}


class Side:
    """One sender (core, gate, endpoint, fake rail) and its receiver's credit books."""

    def __init__(
        self, *, quiet: bool, ttl_ms: int = 0, config: dict[str, Any] = CONFIG, blocks: int = 1
    ) -> None:
        cap = {r: 4 * (2 * MIB if r is CreditResource.DATA_BYTES else 1) for r in RESOURCES}
        self.rx = CreditReceiver(
            AllocatorConfig(
                capacity=cap, control_slots=2, max_grant=cap, max_keys=4, retry_after_us=100
            ),
            SessionId(4242),
            initial_grant={
                r: blocks * (2 * MIB if r is CreditResource.DATA_BYTES else 1) for r in RESOURCES
            },
            freshness_ttl_ms=ttl_ms,
        )
        self.rx.accept(ME, 0)
        self.tx = SenderEndpoint(sender_peer=ME, qos_class=0, mode=CreditMode.REQUIRED)
        self.gate = DispatchGate(GateConfig(mode=CreditMode.REQUIRED))
        if not quiet:  # a gate that never vouches: every pass picks in full
            self.gate.quiet_stamp = lambda: None  # type: ignore[method-assign]
        self.gate.add_endpoint(RX, self.tx)
        self.tx.connect(1)
        pump(self.tx, self.rx, 1)
        self.rail = FakeDevice()
        self.core = DispatchCore(load_engine_config(config), [self.rail], gate=self.gate)
        self.now = 10
        self.ids: list[int] = []
        self.landed: list[int] = []  # epochs of writes landed at the receiver, not released
        self.writes: set[int] = set()
        self.sent: set[int] = set()  # writes dispatched at some point
        self.seen: set[int] = set()  # transfers that landed

    def step(self, op: str, arg: int) -> object:
        result = self._step(op, arg)
        for tid in self.ids:
            known = tid in self.writes and self._known(tid)
            if known and self.core.status(tid).phase is TransferPhase.DISPATCHED:
                self.sent.add(tid)
        return result

    def _step(self, op: str, arg: int) -> object:
        core = self.core
        if op == "write":
            deadline = 0 if arg % 3 else self.now + arg * 1_000_000
            ids = core.submit([request(deadline_ns=deadline)], self.now)
            self.ids.extend(ids)
            self.writes.update(ids)
            return ids
        if op == "read":  # needs no receiver credit; the window still bounds it
            ids = core.submit([request(Opcode.READ, length=(1 + arg % 3) * MIB)], self.now)
            self.ids.extend(ids)
            return ids
        if op == "progress":
            self.now += arg * 100_000
            return [(e.transfer_id, e.status, e.reason) for e in core.progress(self.now)]
        if op == "finish":  # the rail completes what it posted (seen at the next poll)
            self.rail.finish()
            return None
        if op == "land":  # the receiver sees the dispatched writes land (before or after the
            # sender polls their completion)
            for tid in sorted(self.sent - self.seen):
                if self.tx.epoch is not None and len(self.landed) < 4:
                    self.seen.add(tid)
                    self.rx.data_landed(ME, 0, self.tx.epoch, CHARGE)
                    self.landed.append(self.tx.epoch)
            return None
        if op == "release" and self.landed:
            self.rx.release(ME, 0, self.landed.pop(0), CHARGE)
            return None
        if op == "exchange":  # what each side sends is compared too
            return self._exchange()
        if op == "tick":
            self.now += arg * 10_000_000  # past a 20 ms TTL when arg > 1
            return None
        if op == "cancel":
            queued = [t for t in self.ids if self._queued(t)]
            return core.cancel(queued[arg % len(queued)], self.now) if queued else None
        return None

    def _exchange(self) -> list[list[bytes]]:
        sent: list[list[bytes]] = []
        for _ in range(3):
            ep = next(e for e in self.rx.endpoints() if not e.closed)
            up = self.tx.messages_to_send(self.now)
            for data in up:
                ep.receive_message(data, self.now)
            down = ep.messages_to_send(self.now)
            self.tx.receive_batch(down, self.now)
            sent += [up, down]
        return sent

    def _known(self, tid: int) -> bool:
        try:
            self.core.status(tid)
        except Exception:  # reported and forgotten
            return False
        return True

    def _queued(self, tid: int) -> bool:
        return self._known(tid) and self.core.status(tid).phase is TransferPhase.QUEUED

    def observed(self) -> Any:
        states = [self.core.status(t) for t in self.ids if self._known(t)]
        return _comparable(
            (
                states,
                [[(s.write_id, s.lease) for s in post] for post in self.rail.posts],
                self.tx.statistics(),
                self.tx.ledger.statistics(),
                self.gate.statistics(),
                attrs.evolve(self.core.statistics(), quiet_refills_total=0),
            )
        )


def _comparable(value: Any) -> Any:
    """``value`` with every counter of blocked answers zeroed, and the endpoint's update age
    (read at its last clock reading): a skipped pick asks nothing and reads no clock."""
    if attrs.has(type(value)):
        fields = {
            f.name: 0
            if _SKIPPED.match(f.name) and isinstance(getattr(value, f.name), int)
            else _comparable(getattr(value, f.name))
            for f in attrs.fields(type(value))
            if f.init
        }
        return attrs.evolve(value, **fields)
    if isinstance(value, list | tuple):
        return type(value)(_comparable(v) for v in value)
    return value


OPS = st.tuples(
    st.sampled_from(
        [
            *("write", "read", "progress", "progress", "progress", "finish", "land"),
            *("release", "exchange", "tick", "cancel"),
        ]
    ),
    st.integers(0, 5),
)


# a grant after the sender saw its first write complete (the window no longer changes): the
# quiet side must pick again at once
_GRANT = [("write", 1), ("write", 1), ("progress", 1), ("finish", 0), ("progress", 1)]
_GRANT += [("progress", 1), ("land", 0), ("release", 0), ("tick", 1), ("exchange", 0)]
_GRANT += [("progress", 1)]
# the freshness TTL runs out with nothing else changing; a deadline passes likewise
_CLOCK = [("write", 1), ("write", 3), ("progress", 1), ("progress", 1), ("tick", 3)]
_CLOCK += [("progress", 1), ("progress", 1)]


@settings(max_examples=150, deadline=None)
@example(ttl_ms=0, deadlines=False, ops=_GRANT)
@example(ttl_ms=20, deadlines=False, ops=_CLOCK)
@example(ttl_ms=0, deadlines=True, ops=_CLOCK)
@example(ttl_ms=0, deadlines=None, ops=[*_GRANT[:1], *_GRANT])  # the window frees
@example(ttl_ms=0, deadlines=None, ops=[("read", 2)] * 2 + [("progress", 1), ("finish", 0)] * 2)
@given(
    ttl_ms=st.sampled_from([0, 20]),
    deadlines=st.sampled_from([False, True, None]),
    ops=st.lists(OPS, min_size=1, max_size=50),
)
def test_a_quiet_pass_is_indistinguishable_from_a_full_one(
    ttl_ms: int, deadlines: bool | None, ops: list[tuple[str, int]]
) -> None:
    """``deadlines``: θ = 1 with deadlines (True), none (False), or the small window (None)."""
    config = {True: DEADLINES, False: CONFIG, None: WINDOW}[deadlines]
    blocks = 3 if deadlines is None else 1
    full = Side(quiet=False, ttl_ms=ttl_ms, config=config, blocks=blocks)
    quiet = Side(quiet=True, ttl_ms=ttl_ms, config=config, blocks=blocks)
    for op, arg in ops:
        assert quiet.step(op, arg) == full.step(op, arg), op
        assert quiet.observed() == full.observed(), op


def test_a_pass_with_no_news_asks_the_gate_nothing_until_a_grant_comes() -> None:
    side = Side(quiet=True)
    first, second = side.core.submit([request(), request()], 10)  # credit for one
    assert side.core.status(second).phase is TransferPhase.QUEUED
    blocked = side.gate.statistics().routes[0].blocked
    for now in (20, 30, 40):
        assert side.core.progress(now) == []
    assert side.gate.statistics().routes[0].blocked == blocked  # not asked again
    assert side.core.statistics().quiet_refills_total == 3
    # the first write lands and is released: the receiver's grant is news
    side.rail.finish()
    assert [e.transfer_id for e in side.core.progress(50)] == [first]
    side.rx.data_landed(ME, 0, side.tx.epoch, CHARGE)
    side.rx.release(ME, 0, side.tx.epoch, CHARGE)
    pump(side.tx, side.rx, 2_000_000)
    side.core.progress(2_000_010)
    assert side.core.status(second).phase is TransferPhase.DISPATCHED


def test_a_completion_alone_does_not_repeat_a_pick_that_visited_every_owner() -> None:
    # every queued owner was answered "blocked": the window did not stop that pick, and a
    # completion only frees it, so the pick would decide the same way
    side = Side(quiet=True)
    first, second = side.core.submit([request(), request()], 10)  # credit for one
    blocked = side.gate.statistics().routes[0].blocked
    side.rail.finish()
    assert [e.transfer_id for e in side.core.progress(20)] == [first]
    assert side.core.statistics().window_owners == 0
    assert side.gate.statistics().routes[0].blocked == blocked  # not asked again
    assert side.core.statistics().quiet_refills_total == 1
    assert side.core.status(second).phase is TransferPhase.QUEUED


def test_a_completion_repeats_a_pick_the_window_stopped() -> None:
    # a window of two writes and credit for three: the pick stopped at the window before the
    # third owner, so the window the first completion frees is news
    side = Side(quiet=True, config=WINDOW, blocks=3)
    ids = side.core.submit([request(), request(), request()], 10)
    assert [side.core.status(i).phase for i in ids] == [
        TransferPhase.DISPATCHED,
        TransferPhase.DISPATCHED,
        TransferPhase.QUEUED,
    ]
    side.rail.finish()
    side.core.progress(20)
    assert side.core.status(ids[2]).phase is TransferPhase.DISPATCHED


def test_a_full_gate_is_asked_at_every_pass() -> None:
    # the differential test's other side, shown asking: what the quiet side saves
    side = Side(quiet=False)
    side.core.submit([request(), request()], 10)
    blocked = side.gate.statistics().routes[0].blocked
    for now in (20, 30, 40):
        side.core.progress(now)
    assert side.gate.statistics().routes[0].blocked == blocked + 3
    assert side.core.statistics().quiet_refills_total == 0


def test_a_new_owner_is_asked_at_once() -> None:
    side = Side(quiet=True)
    side.core.submit([request(), request()], 10)
    side.core.progress(20)
    assert side.core.statistics().quiet_refills_total == 1
    (read,) = side.core.submit([request(Opcode.READ)], 30)  # needs no receiver credit
    assert side.core.status(read).phase is TransferPhase.DISPATCHED


def test_the_freshness_ttl_ends_the_quiet_at_its_instant() -> None:
    side = Side(quiet=True, ttl_ms=20)
    side.core.submit([request(), request()], 10)
    stamp = side.gate.quiet_stamp()
    assert stamp is not None and stamp[1] is not None
    until = stamp[1]
    side.core.progress(until - 1)
    skipped = side.core.statistics().quiet_refills_total
    assert skipped == 1
    side.core.progress(until)  # the TTL ran out: the pick runs and sees the peer STALE
    assert side.core.statistics().quiet_refills_total == skipped
    assert side.tx.state.name == "STALE"


def test_an_owner_with_a_deadline_keeps_every_pick_while_a_drop_can_come() -> None:
    side = Side(quiet=True, config=DEADLINES)
    side.core.submit([request()], 10)  # takes the one block of credit
    (second,) = side.core.submit([request(deadline_ns=60_000_000)], 10)
    assert side.core.status(second).phase is TransferPhase.QUEUED
    for now in (20, 30):
        side.core.progress(now)
    assert side.core.statistics().quiet_refills_total == 0
    # the clock alone makes it infeasible: dropped at the first pass past that point
    events = side.core.progress(60_000_000)
    assert [(e.transfer_id, e.status, e.reason) for e in events] == [
        (second, TaskStatus.CANCELED, EndReason.DROPPED)
    ]


def test_the_queue_reads_the_clock_only_for_a_deadline_it_can_act_on() -> None:
    limits = QueueLimits(max_outstanding_owners=8, max_outstanding_bytes=1 << 30)
    assert not AdmissionQueue(limits).pick_reads_clock()  # FIFO: no deadline is read
    plain = AdmissionQueue(limits, deadline_aware=True)  # no slack, θ = 0: nothing acts
    assert not plain.pick_reads_clock()
    for kwargs in ({"mlu_local_threshold": 1.0}, {"promotion_slack_ns": 1_000}):
        queue = AdmissionQueue(limits, deadline_aware=True, **kwargs)  # type: ignore[arg-type]
        assert not queue.pick_reads_clock()  # empty
        _admit(queue, deadline_ns=0)
        assert not queue.pick_reads_clock()  # no owner with a deadline
        _admit(queue, deadline_ns=5_000)
        assert queue.pick_reads_clock()


def _admit(queue: AdmissionQueue, *, deadline_ns: int) -> None:
    queue.try_admit(
        deadline_ns + 1,
        1,
        [OwnerRequest(public_id=1, length=1, kind=OwnerKind.USER, deadline_ns=deadline_ns)],
    )
