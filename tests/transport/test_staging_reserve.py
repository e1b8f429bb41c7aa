"""The staging reserve is what keeps the staged path live (issue 11; RFC "Staging and Deadlock
Avoidance"), shown by contrast and without timing.

A staged WRITE lands in the receiver's staging pool and holds its user credit until the consumer
sees it, which is only after an inner STAGING_INTERNAL transfer has moved it to its target; the
inner transfer needs credit of its own. With ``staging_reserve`` the user key can never hold the
whole capacity, so the inner transfers always find some; without it the user key takes
everything, every inner transfer stalls on credit, no outer write is ever acknowledged and
nothing is released: a deadlock. ``tests/transport/net/test_staged.py`` shows the live half
through real processes; this file shows both halves on one input, deterministically.

The system under test is the real one, sans-IO, on a fake clock: the sender's
:class:`~tent_transport.dispatch.DispatchCore` with its ``DispatchGate`` and ``SenderEndpoint``,
one :class:`~tent_transport.sim.SimDevice` link, the receiver's ``CreditReceiver`` and the
engine's own :class:`StagingPath` (its pool, inner dispatch core, ``LocalCopyRail`` and inner
credit key). ``StagingPath`` schedules itself on the asyncio loop and reads
``time.monotonic_ns``; here both are replaced by a fake loop that runs its callbacks only when
the driver says and by the fake clock, so every run takes the same steps. What the TCP
receiver does between a staged write's arrival and its acknowledgement (admit, copy into a
slot, move, give STAGING_SLOTS back, announce) is restated in :class:`StagedReceiver`, after
``engine/_receiving.py``; the consumer releases each write as soon as it is announced.

A deadlock is a fixed point: ``QUIET_PASSES`` passes in a row in which no transfer ended, no
slice arrived, nothing moved, and no credit was granted or released, while work is still
queued. The reserve can be turned off through the public configuration (``staging_reserve`` is
optional, default none), so no internal constructor is needed.
"""

from __future__ import annotations

import collections
import types
from collections.abc import Callable, Sequence

import attrs
import pytest
from tent_transport.config import EngineConfig, load_engine_config
from tent_transport.devices import Opcode, SliceCompletion, SliceRequest, SliceStatus
from tent_transport.dispatch import DispatchCore, TransferPlan, TransferRequest
from tent_transport.engine import _staging
from tent_transport.engine._staging import StagingPath
from tent_transport.segments import SegmentTable
from tent_transport.sim import LinkSpec, SimDevice

from tent_credit import (
    AllocationClass,
    BackpressureInfo,
    BackpressureSource,
    CreditReceiver,
    CreditResource,
    DispatchGate,
    SenderEndpoint,
    SessionId,
)
from tent_sched import TaskStatus

R = CreditResource
BLOCK = 64 << 10
CAPACITY_BLOCKS = 4
WRITES = 6
SENDER = 1  # the sender's peer id, as the receiver knows it
RECEIVER = 2  # the receiver's peer id: also the key of its inner staging transfers
STEP_NS = 100_000  # one driver pass: longer than one block on the link (8 B/ns: 8.2 µs)
QUIET_PASSES = 200  # 20 ms of fake time: past every usage interval and repeat back-off
MAX_PASSES = 5_000


def engine_config(*, reserve: bool) -> EngineConfig:
    block = {"data_bytes": BLOCK, "request_slots": 1, "consumer_slots": 1}
    return load_engine_config(
        {
            "enable_runtime_queue": True,
            "dispatch": {"slice_bytes": BLOCK},
            "receiver_credit": {
                "enabled": True,
                "mode": "required",
                "capacity": {
                    "data_bytes": CAPACITY_BLOCKS * BLOCK,
                    "request_slots": CAPACITY_BLOCKS,
                    "staging_slots": CAPACITY_BLOCKS,
                    "consumer_slots": CAPACITY_BLOCKS,
                },
                # one block no user key may take, or none
                "staging_reserve": block if reserve else {},
                # no initial grant: an inner key that starts with credit only postpones the
                # deadlock until that credit is spent
            },
        }
    )


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def monotonic_ns(self) -> int:
        return self.now


@attrs.define
class FakeTimer:
    due: int
    callback: Callable[[], object]
    canceled: bool = False

    def cancel(self) -> None:
        self.canceled = True


class FakeLoop:
    """The two loop calls ``StagingPath`` makes; callbacks run only in :meth:`run_due`."""

    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock
        self._soon: collections.deque[Callable[[], object]] = collections.deque()
        self._timers: list[FakeTimer] = []

    def call_soon(self, callback: Callable[..., object], *args: object) -> None:
        self._soon.append(lambda: callback(*args))

    def call_later(self, delay: float, callback: Callable[..., object], *args: object) -> FakeTimer:
        timer = FakeTimer(self._clock.now + int(delay * 1e9), lambda: callback(*args))
        self._timers.append(timer)
        return timer

    def run_due(self) -> None:
        """Every callback scheduled before this call, then every timer due now (each once)."""
        for _ in range(len(self._soon)):
            self._soon.popleft()()
        due = [t for t in self._timers if not t.canceled and t.due <= self._clock.now]
        self._timers = [t for t in self._timers if not t.canceled and t.due > self._clock.now]
        for timer in due:
            timer.callback()


class StagedReceiver:
    """The receiver's part between a staged write's arrival and its acknowledgement, after
    ``engine/_receiving.py``: admit the lease, copy the payload into a staging slot, move it with
    the staging path; when the move ends give STAGING_SLOTS back, announce the write (the
    consumer releases the rest at once) and acknowledge it."""

    def __init__(self, credit: CreditReceiver, staging: StagingPath) -> None:
        self._credit = credit
        self._staging = staging
        self.acks: collections.deque[SliceCompletion] = collections.deque()
        self.arrived = 0
        self.announced = 0

    def arrive(self, s: SliceRequest) -> None:
        self.arrived += 1
        lease = s.lease
        assert lease is not None and s.opcode is Opcode.WRITE
        amounts = {R(r): a for r, a in lease.charge}
        admission = self._credit.admit_write(SENDER, lease.qos_class, lease.epoch, amounts)
        assert admission.accepted, admission.reason  # an honest sender within its credit
        slot = self._staging.slot(s.length)
        assert slot is not None  # STAGING_SLOTS credit never exceeds the pool's slots
        index, view = slot
        view[:] = s.local

        def done(ok: bool, detail: str) -> None:
            assert ok, detail
            staging_slots = amounts.pop(R.STAGING_SLOTS)
            # the slot is free again: its STAGING_SLOTS go back; then the write is announced
            # and this consumer is done with it at once (release on landing)
            self._credit.release(
                SENDER, lease.qos_class, lease.epoch, {R.STAGING_SLOTS: staging_slots}
            )
            self.announced += 1
            self._credit.release(SENDER, lease.qos_class, lease.epoch, amounts)
            self.acks.append(
                SliceCompletion(wr_id=s.wr_id, status=SliceStatus.SUCCESS, length=s.length)
            )

        self._staging.move(index, s.remote_segment, s.remote_offset, s.length, done)


class ReceiverLink:
    """A Device: the :class:`SimDevice` carries each slice to the receiver; its completion
    there is the slice's arrival, and the sender sees it complete only when acknowledged."""

    def __init__(self, sim: SimDevice, receiver: StagedReceiver) -> None:
        self._sim = sim
        self._receiver = receiver
        self._posted: dict[int, SliceRequest] = {}

    @property
    def name(self) -> str:
        return self._sim.name

    @property
    def link_speed_gbps(self) -> float:
        return self._sim.link_speed_gbps

    @property
    def in_flight(self) -> int:
        """Slices posted and not yet arrived at the receiver."""
        return len(self._posted)

    def post_budget(self, peer: int) -> int:
        return self._sim.post_budget(peer)

    def post(self, slices: Sequence[SliceRequest], now_ns: int) -> None:
        self._sim.post(slices, now_ns)
        self._posted.update((s.wr_id, s) for s in slices)

    def poll(self, max_entries: int, now_ns: int) -> list[SliceCompletion]:
        for arrival in self._sim.poll(1 << 20, now_ns):
            self._receiver.arrive(self._posted.pop(arrival.wr_id))
        acks = self._receiver.acks
        return [acks.popleft() for _ in range(min(max_entries, len(acks)))]

    def next_completion_ns(self) -> int | None:
        return self._sim.next_completion_ns()

    def set_wakeup(self, callback: Callable[[], None] | None) -> None:
        """Virtual time: the driver polls every pass."""

    def close(self) -> None:
        self._sim.close()


@attrs.frozen
class Outcome:
    passes: int
    fixed_point: bool  # stopped on QUIET_PASSES passes without progress, with work queued
    statuses: tuple[TaskStatus, ...]  # per outer write, in submit order
    progress: tuple[object, ...]  # the last progress signature
    user_outstanding: int  # DATA_BYTES the sender's USER key holds
    inner_free: int  # DATA_BYTES the STAGING_INTERNAL class could still be granted
    outer_queued: int
    outer_dispatched: int
    inner_queued: int
    inner_dispatched: int
    inner_pressure: BackpressureInfo | None  # what an inner transfer meets at the gate
    in_flight: int  # slices on the link, plus inner moves posted and not polled
    moved: int
    target: bytes


def run(monkeypatch: pytest.MonkeyPatch, *, reserve: bool) -> Outcome:
    clock, blocks = FakeClock(), [bytes([i + 1]) * BLOCK for i in range(WRITES)]
    loop = FakeLoop(clock)
    monkeypatch.setattr(_staging, "asyncio", types.SimpleNamespace(get_running_loop=lambda: loop))
    monkeypatch.setattr(_staging, "time", types.SimpleNamespace(monotonic_ns=clock.monotonic_ns))
    config = engine_config(reserve=reserve)
    rc = config.receiver_credit
    credit = CreditReceiver(rc.allocator_config(), SessionId(77))  # as the engine builds it
    segments = SegmentTable()
    memory = bytearray(WRITES * BLOCK)
    segment = segments.register(memory).segment_id
    staging = StagingPath(
        config=config,
        credit=credit,
        segments=segments,
        peer=RECEIVER,
        slots=CAPACITY_BLOCKS,
        slot_bytes=BLOCK,
    )
    receiver_endpoint = credit.accept(SENDER, rc.default_qos_class)
    sender = SenderEndpoint(
        sender_peer=SENDER,
        qos_class=rc.default_qos_class,
        mode=rc.credit_mode,
        usage_interval_ns=rc.usage_interval_ns,
    )
    gate = DispatchGate(rc.gate_config())
    gate.add_endpoint(RECEIVER, sender)
    receiver = StagedReceiver(credit, staging)
    link = ReceiverLink(SimDevice(LinkSpec(name="sim0", bytes_per_ns=8.0)), receiver)
    core = DispatchCore(config, [link], gate=gate)
    sender.connect(clock.now)
    ids = core.submit(
        [
            TransferRequest(
                opcode=Opcode.WRITE,
                local=block,
                peer=RECEIVER,
                remote_segment=segment,
                remote_offset=i * BLOCK,
                length=BLOCK,
                plan=TransferPlan.STAGED,
            )
            for i, block in enumerate(blocks)
        ],
        clock.now,
    )
    ended: dict[int, TaskStatus] = {}

    def control() -> None:
        # the sender's control connection, lossless and in order
        for _ in range(4):
            up = sender.messages_to_send(clock.now)
            for data in up:
                receiver_endpoint.receive_message(data, clock.now)
            down = receiver_endpoint.messages_to_send(clock.now)
            sender.receive_batch(down, clock.now)
            if not up and not down:
                break

    def signature() -> tuple[object, ...]:
        # everything that is data-plane progress (control chatter is not)
        stats = credit.allocator.statistics()
        return (
            len(ended),
            receiver.arrived,
            receiver.announced,
            staging.moved,
            staging.rail.copies,
            stats.grants_issued,
            tuple(stats.outstanding.values()),
            tuple(stats.released.values()),
        )

    last, quiet, passes = signature(), 0, 0
    while len(ended) < WRITES and quiet < QUIET_PASSES and passes < MAX_PASSES:
        passes += 1
        clock.now += STEP_NS
        for event in core.progress(clock.now):
            ended[event.transfer_id] = event.status
        control()
        loop.run_due()
        control()
        now = signature()
        quiet = quiet + 1 if now == last else 0
        last = now
    if len(ended) == WRITES:
        # grant-ahead (version 2): credit granted ahead of writes that never came goes back once
        # it has been idle for the sender's hold, 20 usage intervals by default
        settle = clock.now + 20 * rc.usage_interval_ns + STEP_NS
        while clock.now < settle:
            clock.now += STEP_NS
            core.progress(clock.now)
            control()
    outer, inner = core.statistics(), staging.core.statistics()
    return Outcome(
        passes=passes,
        fixed_point=quiet >= QUIET_PASSES,
        statuses=tuple(ended.get(tid, TaskStatus.PENDING) for tid in ids),
        progress=last,
        user_outstanding=credit.allocator.key_totals(SENDER, 0, 1).outstanding[R.DATA_BYTES],
        inner_free=credit.allocator.free_for(R.DATA_BYTES, AllocationClass.STAGING_INTERNAL),
        outer_queued=outer.queued_transfers,
        outer_dispatched=outer.dispatched_transfers,
        inner_queued=inner.queued_transfers,
        inner_dispatched=inner.dispatched_transfers,
        inner_pressure=staging.core.backpressure(RECEIVER),
        in_flight=link.in_flight
        + len(receiver.acks)
        + sum(rail.posted_slices + rail.waiting_slices for rail in staging.core.rail_statistics()),
        moved=staging.moved,
        target=bytes(memory),
    )


def test_with_the_staging_reserve_every_staged_write_completes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outcome = run(monkeypatch, reserve=True)
    assert not outcome.fixed_point and outcome.passes < MAX_PASSES
    assert outcome.statuses == (TaskStatus.COMPLETED,) * WRITES
    assert outcome.moved == WRITES  # every write went through the pool and an inner move
    assert outcome.target == b"".join(bytes([i + 1]) * BLOCK for i in range(WRITES))
    assert outcome.user_outstanding == 0  # every outer reservation came back
    assert (outcome.inner_queued, outcome.inner_dispatched, outcome.in_flight) == (0, 0, 0)


def test_without_the_staging_reserve_the_same_input_deadlocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outcome = run(monkeypatch, reserve=False)
    assert outcome.fixed_point  # QUIET_PASSES passes without any data-plane progress
    assert TaskStatus.COMPLETED not in outcome.statuses  # no outer write was ever acknowledged
    assert outcome.statuses == (TaskStatus.PENDING,) * WRITES
    # the user key holds the whole capacity in staged writes that wait for their moves ...
    assert outcome.user_outstanding == CAPACITY_BLOCKS * BLOCK
    assert outcome.inner_free == 0
    # ... and every inner move waits for credit that only those writes' release would free
    assert outcome.inner_queued == CAPACITY_BLOCKS and outcome.inner_dispatched == 0
    pressure = outcome.inner_pressure
    assert pressure is not None and pressure.source is BackpressureSource.RECEIVER_CREDIT
    assert R.DATA_BYTES in pressure.exhausted
    assert outcome.moved == 0 and outcome.in_flight == 0  # nothing in flight, nothing movable
    # the rest of the sender's writes are queued behind the same credit
    assert outcome.outer_dispatched == CAPACITY_BLOCKS
    assert outcome.outer_queued == WRITES - CAPACITY_BLOCKS


def test_the_deadlock_is_deterministic(monkeypatch: pytest.MonkeyPatch) -> None:
    first = run(monkeypatch, reserve=False)
    with monkeypatch.context() as again:
        assert run(again, reserve=False) == first
