"""The hostile-peer soak (issue 10): 16 senders against an 8-slot receiver, under heavy faults.

Shared by ``tests/credit/test_soak.py`` (a few seconds) and ``benchmarks/soak.py`` (long, JSON).
Senders: honest ones that demand what their queue holds and write within their credit, *greedy*
ones that demand 2**40 transfers and hoard, and *liars* that report as returned the credit whose
payload is still in flight (so the receiver re-grants it) and write without any reservation.
Control channels drop, duplicate, reorder and delay; senders reconnect and the receiver restarts.
Then the faults stop and the run must settle.

Checked throughout: the allocator's outstanding never exceeds capacity (the harness raises) and
neither does physical occupancy (payload admitted and not yet consumed). Checked at the end:
honest and greedy keys were never quarantined (an honest sender never sees a refusal), every
honest transfer offered completed, nothing is fencing, and no honest sender is stuck. Memory is
sampled with ``tracemalloc`` after every round past warm-up; the caller bounds its slope.
"""

from __future__ import annotations

import gc
import random
import tracemalloc

import attrs

from tent_credit import (
    AllocatorConfig,
    CreditAmount,
    CreditReceiver,
    CreditResource,
    NegotiationState,
    Plan,
    SenderCreditUsage,
    SessionId,
    charge_for_plan,
    encode,
)
from tent_credit.errors import KeyQuarantined, TooManyRequests
from tent_credit.testing import NO_FAULTS, FaultRates, LoopbackNetwork

R = CreditResource
SLOT = 4096
_CHARGE = charge_for_plan(Plan.REMOTE_DIRECT_WRITE, SLOT)
assert _CHARGE is not None
CHARGE = _CHARGE
SLOTS = 8
HEAVY = FaultRates(drop=0.2, duplicate=0.2, reorder=0.4, max_delay_ns=40_000)
TICK_NS = 10_000


@attrs.frozen(kw_only=True)
class SoakConfig:
    seed: int = 1
    rounds: int = 20  # of faulty traffic; memory is sampled after each
    ticks_per_round: int = 250
    warmup_rounds: int = 4
    settle_ticks: int = 5_000  # the most the run may take to settle once faults stop
    reconnect_rate: float = 0.04  # per tick: a random sender's control connection drops
    honest: int = 12
    greedy: int = 2
    liars: int = 2
    rates: FaultRates = HEAVY


@attrs.frozen(kw_only=True)
class SoakReport:
    ticks: int
    offered: int
    completed_honest: int
    peak_occupied: dict[str, int]
    peak_outstanding: dict[str, int]
    capacity: dict[str, int]
    writes_refused: int
    keys_quarantined: int  # summed over receiver sessions
    honest_quarantined: int
    reconnects: int
    reconnects_refused: int
    receiver_restarts: int
    lies_told: int
    settle_ticks: int | None  # None: did not settle
    stuck: tuple[str, ...]
    memory_samples: tuple[int, ...]  # tracemalloc current bytes after each post-warm-up round

    def memory_slope(self) -> float:
        """Least-squares slope of the memory samples, in bytes per round."""
        ys = self.memory_samples
        n = len(ys)
        if n < 2:
            return 0.0
        mean_x, mean_y = (n - 1) / 2, sum(ys) / n
        num = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(ys))
        den = sum((x - mean_x) ** 2 for x in range(n))
        return num / den


def receiver(session: int) -> CreditReceiver:
    one = CHARGE.as_dict()
    config = AllocatorConfig(
        capacity={r: a * SLOTS for r, a in one.items()},
        control_slots=4,
        max_grant={r: a * 2 for r, a in one.items()},
        max_key_outstanding={r: a * 2 for r, a in one.items()},  # a greedy key holds ≤ 2 slots
        max_keys=32,
        retry_after_us=100,
        max_fencing_epochs=4,
    )
    return CreditReceiver(
        config,
        SessionId(session),
        freshness_ttl_ms=50,
        refresh_interval_ns=2_000_000,
        initial_grant=dict(one),
    )


class HostileSoak:
    """One soak run; :meth:`run` returns its :class:`SoakReport`."""

    def __init__(self, config: SoakConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.session = 1
        self.net = LoopbackNetwork(receiver(1), seed=config.seed, rates=config.rates)
        peers = iter(range(1, 1 + config.honest + config.greedy + config.liars))
        self.honest = [next(peers) for _ in range(config.honest)]
        self.greedy = [next(peers) for _ in range(config.greedy)]
        self.liars = [next(peers) for _ in range(config.liars)]
        self.queue = dict.fromkeys(self.honest + self.greedy + self.liars, 0)
        self.offered = 0
        self.completed_honest = 0
        self.reconnects = 0
        self.reconnects_refused = 0
        self.restarts = 0
        self.lies = 0
        self.quarantined = 0
        self.honest_quarantined = 0
        self.now = 0
        self.offering = True  # new honest work arrives until the faults stop
        self.declared: dict[int, tuple[int, int]] = {}  # (epoch, waiting) last declared
        for peer in self.queue:
            self.net.add_sender(peer, self.now)

    # ---- one tick of traffic ------------------------------------------------------------

    def _offer(self) -> None:
        if not self.offering:
            return
        for peer in self.honest:
            if self.queue[peer] < 4 and self.rng.random() < 0.3:
                self.queue[peer] += 1
                self.offered += 1

    def _dispatch(self) -> None:
        net = self.net
        for peer in (*self.honest, *self.greedy, *self.liars):
            tx = net.senders[peer]
            if tx.key is None or tx.state is not NegotiationState.ACTIVE:
                continue
            if peer in self.greedy:
                if self.declared.get(peer) != (tx.epoch, -1):
                    tx.set_pending_demand({r: a << 40 for r, a in CHARGE.parts})
                    self.declared[peer] = (tx.epoch, -1)
                if self.rng.random() < 0.05:
                    net.try_send(peer, CHARGE, self.now)
                continue
            if peer in self.liars:
                tx.set_pending_demand({r: a * 2 for r, a in CHARGE.parts})
                net.try_send(peer, CHARGE, self.now)
                if self.rng.random() < 0.05:
                    self._lie(peer)
                continue
            waiting = self.queue[peer]
            if self.declared.get(peer) != (tx.epoch, waiting):  # declare only what changed
                tx.set_pending_demand({r: a * waiting for r, a in CHARGE.parts})
                self.declared[peer] = (tx.epoch, waiting)
            while self.queue[peer] and net.try_send(peer, CHARGE, self.now):
                self.queue[peer] -= 1
                self.declared.pop(peer, None)

    def _lie(self, peer: int) -> None:
        """Report everything granted as returned, in-flight payload included, and write once
        more without any reservation."""
        tx = self.net.senders[peer]
        key = tx.key
        if key is None:
            return
        entry = tx.ledger.entry(key)
        self.lies += 1
        lie = SenderCreditUsage(
            receiver_session_id=key.receiver_session,
            epoch=tx.epoch,
            sequence=(1 << 40) + self.lies,
            qos_class=0,
            returned_totals=tuple(
                CreditAmount(resource=r, amount=a) for r, a in entry.grant_total.items() if a
            ),
        )
        self.net.inject(peer, encode(lie), self.now)
        self.net.send_forged(peer, CHARGE.as_dict(), tx.epoch, self.now)

    def _faults(self) -> None:
        if self.rng.random() < self.config.reconnect_rate:
            peer = self.rng.choice(list(self.queue))
            try:
                self.net.reconnect_sender(peer, self.now)
                self.reconnects += 1
            except (TooManyRequests, KeyQuarantined):  # the bound, or a quarantined liar
                self.reconnects_refused += 1

    def _restart_receiver(self) -> None:
        self._count_quarantine()
        self.session += 1
        self.restarts += 1
        self.net.restart_receiver(receiver(self.session), self.now)

    def _count_quarantine(self) -> None:
        alloc = self.net.receiver.allocator
        self.quarantined += alloc.quarantined_keys
        self.honest_quarantined += sum(
            alloc.is_quarantined(p, 0) for p in (*self.honest, *self.greedy)
        )

    def _tick(self) -> None:
        self.now += TICK_NS
        self._offer()
        self._dispatch()
        self.net.step(self.now)

    # ---- the run --------------------------------------------------------------------------

    def run(self) -> SoakReport:
        cfg = self.config
        samples: list[int] = []
        tracing = not tracemalloc.is_tracing()
        if tracing:
            tracemalloc.start()
        try:
            for round_ in range(cfg.rounds):
                for _ in range(cfg.ticks_per_round):
                    self._tick()
                    self._faults()
                if round_ == cfg.warmup_rounds - 1:  # memory is sampled after it has settled
                    self._restart_receiver()
                if round_ >= cfg.warmup_rounds:
                    gc.collect()  # cyclic garbage is not a leak
                    samples.append(tracemalloc.get_traced_memory()[0])
        finally:
            if tracing:
                tracemalloc.stop()
        self.net.calm(self.now, NO_FAULTS)
        self.offering = False
        settled: int | None = None
        stuck: list[str] = []
        for tick in range(cfg.settle_ticks):
            self._tick()
            stuck = self.stuck()
            if not stuck:
                settled = tick
                break
        self._count_quarantine()
        stats = self.net.statistics()
        rstats = self.net.receiver.allocator.statistics()
        return SoakReport(
            ticks=cfg.rounds * cfg.ticks_per_round + (settled or cfg.settle_ticks),
            offered=self.offered,
            completed_honest=self.offered - sum(self.queue[p] for p in self.honest),
            peak_occupied={r.name: v for r, v in stats.peak_occupied.items()},
            peak_outstanding={r.name: v for r, v in stats.peak_outstanding.items()},
            capacity={r.name: v for r, v in stats.capacity.items()},
            writes_refused=stats.refused_writes,
            keys_quarantined=self.quarantined,
            honest_quarantined=self.honest_quarantined,
            reconnects=self.reconnects,
            reconnects_refused=self.reconnects_refused,
            receiver_restarts=self.restarts,
            lies_told=self.lies,
            settle_ticks=settled,
            stuck=tuple(stuck) + (("epochs fencing",) if rstats.epochs_fencing else ()),
            memory_samples=tuple(samples),
        )

    def stuck(self) -> list[str]:
        """Why the honest part of the system has not settled yet (empty when it has)."""
        problems: list[str] = []
        alloc = self.net.receiver.allocator
        for peer in self.honest:
            tx = self.net.senders[peer]
            s = tx.statistics()
            if s.state is not NegotiationState.ACTIVE:
                problems.append(f"sender {peer} is {s.state.name}")
            if self.queue[peer]:
                problems.append(f"sender {peer} still has {self.queue[peer]} queued")
            if s.in_flight or s.fenced_in_flight:
                problems.append(f"sender {peer} has work in flight")
            if alloc.is_quarantined(peer, 0):
                problems.append(f"honest sender {peer} is quarantined")
        if alloc.statistics().epochs_fencing:
            problems.append("an epoch is still fencing")
        return problems
