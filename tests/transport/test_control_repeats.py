"""The control flood of issue 13: repeated usage reports are held back (the read loop's yields:
``test_control_reads.py``).

Sans-IO: a real :class:`SenderEndpoint` and :class:`CreditReceiver` pumped by hand at chosen
times through :class:`RepeatHold`, the rule :class:`ControlClient` applies to what it
publishes. Every bound below is the protocol's (back-off doubling from the usage interval up to
the cap), computed from the simulated times, never from a wall clock.
"""

from __future__ import annotations

import math

import pytest
from tent_transport.control._repeats import RepeatHold

from tent_credit import (
    AllocatorConfig,
    BackpressureInfo,
    CreditCharge,
    CreditReceiver,
    CreditResource,
    ReceiverCreditUpdate,
    SenderCreditUsage,
    SenderEndpoint,
    SessionId,
    decode,
    encode,
)

Q = CreditResource.REQUEST_SLOTS
MS = 1_000_000
INTERVAL = 1 * MS
CAP = 64 * MS


def _receiver(slots: int) -> CreditReceiver:
    config = AllocatorConfig(
        capacity={Q: slots}, control_slots=2, max_grant={Q: slots}, max_keys=8, retry_after_us=100
    )
    # version 1: its reports repeat while demand is unmet, and RepeatHold holds them back
    # (version 2 sends only news; tests/credit/test_grant_ahead.py)
    return CreditReceiver(config, SessionId(5), versions=(1,))


def _is_usage(data: bytes) -> bool:
    return isinstance(decode(data), SenderCreditUsage)


class _Pair:
    """One sender and the receiver, the sender's reports passing through ``hold``."""

    def __init__(self, rx: CreditReceiver, peer: int, hold: RepeatHold | None) -> None:
        self.rx, self.hold = rx, hold
        self.tx = SenderEndpoint(sender_peer=peer, usage_interval_ns=INTERVAL)
        rx.accept(peer)
        self.tx.connect(0)
        self.reports = 0  # usage reports published to the receiver
        self.updates = 0  # updates the receiver sent back

    def pump(self, now: int, *, sender: bool = True) -> None:
        ep = self.rx.endpoint(self.tx.sender_peer)
        assert ep is not None
        for data in self.tx.messages_to_send(now) if sender else ():
            if self.hold is not None and not self.hold.admit(data, now):
                continue
            if _is_usage(data):
                self.reports += 1
            ep.receive_message(data, now)
        back = ep.messages_to_send(now)
        self.updates += len(back)
        self.tx.receive_batch(back, now)


def _stalled(hold: RepeatHold | None) -> tuple[CreditReceiver, _Pair]:
    """A sender holding the receiver's 2 slots (committed) and asking for 2 more."""
    rx = _receiver(2)
    pair = _Pair(rx, 1, hold)
    for now in range(1, 4):
        pair.pump(now * MS)
    pair.tx.set_pending_demand({Q: 2})
    pair.pump(5 * MS)
    tokens = [pair.tx.try_reserve(CreditCharge.of({Q: 1}), 6 * MS) for _ in range(2)]
    for token in tokens:
        pair.tx.commit(token)  # type: ignore[arg-type]
    rx.admit_write(1, 0, pair.tx.epoch, {Q: 2})  # both landed: the receiver holds them
    pair.tx.set_pending_demand({Q: 2})  # two more wait: nothing can be granted until a release
    pair.pump(7 * MS)
    ep = rx.endpoint(1)
    assert ep is not None and ep.stalled
    return rx, pair


def _stall_for(pair: _Pair, start: int, duration: int, *, step: int = INTERVAL // 2) -> int:
    before = pair.reports
    for now in range(start, start + duration, step):
        pair.pump(now)
    return pair.reports - before


def test_repeats_of_an_unchanged_stall_follow_the_backoff_bound() -> None:
    duration = 1_000 * MS
    _, held = _stalled(RepeatHold(INTERVAL, CAP))
    _, raw = _stalled(None)
    published = _stall_for(held, 8 * MS, duration)
    unheld = _stall_for(raw, 8 * MS, duration)
    # interval, 2x, 4x, ... up to the cap, then one per cap
    assert 0 < published <= _repeat_bound(duration)
    # what the hold saves: the core alone re-reports once per interval
    assert unheld >= duration // INTERVAL - 1
    assert held.hold is not None and held.hold.held > 0


def _repeat_bound(stall: int) -> int:
    """Repeats one unchanged stall of ``stall`` ns may publish: interval, 2x, 4x, ... up to the
    cap, then one per cap."""
    return 1 + math.ceil(math.log2(CAP / INTERVAL)) + math.ceil(stall / CAP)


def _incast(hold: bool, *, rounds: int, stall: int) -> tuple[int, int]:
    """Two senders sharing 2 slots, one-slot transfers; each landed block is held ``stall`` ns
    before its release. Returns (transfers, control frames)."""
    rx = _receiver(2)
    pairs = [_Pair(rx, peer, RepeatHold(INTERVAL, CAP) if hold else None) for peer in (1, 2)]
    for now in range(1, 4):
        for p in pairs:
            p.pump(now * MS)
    now, transfers = 10 * MS, 0
    for _ in range(rounds):
        landed = []
        for p in pairs:
            p.tx.set_pending_demand({Q: 1})
            p.pump(now)
            now += INTERVAL
            token = p.tx.try_reserve(CreditCharge.of({Q: 1}), now)
            if isinstance(token, BackpressureInfo):
                continue  # blocked: its demand stands, it waits for a push
            p.tx.commit(token)
            p.tx.set_pending_demand({Q: 1})  # the next block already waits
            rx.admit_write(p.tx.sender_peer, 0, p.tx.epoch, {Q: 1})
            landed.append(p)
        for t in range(now, now + stall, INTERVAL):
            for p in pairs:
                p.pump(t)
        now += stall
        for p in landed:
            rx.release(p.tx.sender_peer, 0, p.tx.epoch, {Q: 1})
            transfers += 1
        for p in pairs:
            p.pump(now)
        now += INTERVAL
    return transfers, sum(p.reports + p.updates for p in pairs)


def test_frames_per_transfer_are_bounded_by_the_protocol_not_the_stall() -> None:
    rounds, stall, senders = 8, 100 * MS, 2
    transfers, frames = _incast(True, rounds=rounds, stall=stall)
    assert transfers >= rounds
    # Per transfer: at most two changed reports (its commit, its demand), each answered by an
    # update, and one push per sender at its release; per stall and sender, the back-off's
    # repeats, each answered too; plus the activation's exchange.
    reports = 2 * transfers + senders * rounds * _repeat_bound(stall)
    bound = 2 * reports + senders * transfers + 4 * senders
    assert frames <= bound
    # without the hold every stall re-reports once per interval: the bound would not hold
    _, unheld = _incast(False, rounds=rounds, stall=stall)
    assert unheld > bound


def test_a_stalled_sender_that_stops_repeating_is_granted_on_release() -> None:
    # a first back-off past the test's end: once stalled, the sender never repeats
    hold = RepeatHold(10**15, 10**15)
    rx, pair = _stalled(hold)
    reports = pair.reports
    _stall_for(pair, 8 * MS, 10_000 * MS, step=10 * MS)
    assert pair.reports == reports and hold.held > 0  # it produced repeats, none went out
    assert pair.tx.available()[Q] == 0
    rx.release(1, 0, pair.tx.epoch, {Q: 2})  # the consumer is done: capacity frees
    pair.pump(10_000 * MS, sender=False)  # only what the receiver sends
    assert pair.tx.available()[Q] == 2  # its push granted the stalled demand


def test_a_changed_report_goes_out_at_once_and_restarts_the_backoff() -> None:
    _, pair = _stalled(RepeatHold(INTERVAL, CAP))
    _stall_for(pair, 8 * MS, 300 * MS)  # backed off to the cap
    before = pair.reports
    pair.tx.set_pending_demand({Q: 3})  # new work: the content changed
    pair.pump(309 * MS)
    assert pair.reports == before + 1
    pair.pump(309 * MS + INTERVAL)  # the first repeat is one interval later again
    assert pair.reports == before + 2


def test_a_refused_publish_makes_the_next_report_go_out() -> None:
    hold = RepeatHold(INTERVAL, CAP)
    _, pair = _stalled(hold)
    usage = [m for m in pair.tx.messages_to_send(20 * MS) if _is_usage(m)]
    assert usage and hold.admit(usage[0], 20 * MS)
    hold.refused()  # the connection's queue was full: the receiver never saw it
    again = [m for m in pair.tx.messages_to_send(21 * MS) if _is_usage(m)]
    assert again and hold.admit(again[0], 21 * MS)


def test_repeated_offers_back_off_other_messages_pass_and_bad_arguments_are_refused() -> None:
    hold = RepeatHold(INTERVAL, CAP)
    tx = SenderEndpoint(sender_peer=3)
    tx.connect(0)
    (offer,) = tx.messages_to_send(0)
    # the first offer goes out; its repeats (no activation yet) back off like usage repeats
    assert [hold.admit(offer, t) for t in (0, 0, INTERVAL, 2 * INTERVAL, 3 * INTERVAL)] == [
        True,
        False,
        True,
        False,
        True,
    ]
    hold.reset()  # a new connection: its first offer goes out at once
    assert hold.admit(offer, 3 * INTERVAL)
    assert hold.admit(b"\xff not cbor", 2)
    with pytest.raises(ValueError, match="interval"):
        RepeatHold(2 * MS, MS)
    with pytest.raises(ValueError, match="interval"):
        RepeatHold(-1, MS)


def test_a_stalled_senders_timer_sleeps_through_its_backoff() -> None:
    hold = RepeatHold(INTERVAL, CAP)
    _, pair = _stalled(hold)
    now = 8 * MS
    deadlines = []
    for _ in range(40):  # wake only when the client's timer says so
        for data in pair.tx.messages_to_send(now):
            hold.admit(data, now)
        deadline = hold.timer(pair.tx.get_timer(), INTERVAL)
        assert deadline is not None and deadline > now
        deadlines.append(deadline - now)
        now = deadline
    # the endpoint alone asks to be woken every interval; the hold moves that to its back-off
    assert max(deadlines) >= CAP // 2
    assert sum(deadlines) >= 40 * INTERVAL * 4
    # another deadline first (an offer being retransmitted) is left alone
    assert hold.timer(now + 1, INTERVAL) == now + 1
    assert hold.timer(None, INTERVAL) is None


def test_the_receiver_holds_unchanged_updates_but_never_a_fresh_grant_or_a_ttl_refresh() -> None:
    rx = _receiver(2)
    pair = _Pair(rx, 1, None)
    for now in range(1, 4):
        pair.pump(now * MS)
    ep = rx.endpoint(1)
    assert ep is not None
    hold = RepeatHold(INTERVAL, CAP, updates=True)
    pair.tx.set_pending_demand({Q: 2})
    pair.pump(5 * MS)  # granted both slots
    tokens = [pair.tx.try_reserve(CreditCharge.of({Q: 1}), 6 * MS) for _ in range(2)]
    for token in tokens:
        pair.tx.commit(token)  # type: ignore[arg-type]
    rx.admit_write(1, 0, pair.tx.epoch, {Q: 2})
    pair.tx.set_pending_demand({Q: 2})
    sent = 0
    for now in range(7 * MS, 1_007 * MS, INTERVAL):
        for data in pair.tx.messages_to_send(now):
            ep.receive_message(data, now)
        for data in ep.messages_to_send(now):  # "still blocked, nothing new": a repeat
            if hold.admit(data, now):
                sent += 1
                pair.tx.receive_message(data, now)
    assert 0 < sent <= 1 + _repeat_bound(1_000 * MS) and hold.held > 0
    rx.release(1, 0, pair.tx.epoch, {Q: 2})  # capacity frees: the grant is new content
    (update,) = ep.messages_to_send(1_008 * MS)
    assert hold.admit(update, 1_008 * MS)
    pair.tx.receive_message(update, 1_008 * MS)
    assert pair.tx.available()[Q] == 2
    # an update with a freshness TTL is a refresh that keeps its sender fresh: never held
    ttl = RepeatHold(INTERVAL, CAP, updates=True)
    refresh = encode(
        ReceiverCreditUpdate(
            qos_class=0,
            receiver_session_id=SessionId(5),
            epoch=1,
            sequence=3,
            freshness_ttl_ms=100,
            grants=(),
            retry_after_us=100,
        )
    )
    assert all(ttl.admit(refresh, t) for t in range(5))
