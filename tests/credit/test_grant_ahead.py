"""Grant-ahead (protocol version 2): the receiver keeps each key's credit topped up from the
level its sender states, in whole charges, first come, within a fair share, and no control
frame carries nothing new (docs/credit_protocol.md "Grant-ahead")."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from tent_credit import (
    AllocationClass,
    AllocatorConfig,
    CreditCharge,
    CreditReceiver,
    CreditResource,
    ReceiverCreditUpdate,
    ReceiverEndpoint,
    ReservationToken,
    SenderCreditUsage,
    SenderEndpoint,
    SessionId,
    decode,
    encode,
)
from tent_credit._ahead import quantum, standing, unit_of
from tent_credit.errors import InvalidArgument

R = CreditResource
BLOCK = 4 << 20
CHARGE = CreditCharge.of({R.DATA_BYTES: BLOCK, R.REQUEST_SLOTS: 1, R.CONSUMER_SLOTS: 1})
ONE = CHARGE.as_dict()


def units(n: int) -> dict[CreditResource, int]:
    return {r: a * n for r, a in ONE.items()}


def config(slots: int = 8, **kw: object) -> AllocatorConfig:
    return AllocatorConfig(
        capacity={R.DATA_BYTES: slots * BLOCK, R.REQUEST_SLOTS: slots, R.CONSUMER_SLOTS: slots},
        control_slots=4,
        max_grant={R.DATA_BYTES: slots * BLOCK, R.REQUEST_SLOTS: slots, R.CONSUMER_SLOTS: slots},
        max_keys=64,
        retry_after_us=100,
        **kw,  # type: ignore[arg-type]
    )


class Net:
    """One receiver and ``senders`` sender endpoints, lossless; every control message is
    counted (``frames``) and every update remembered per sender (``updates``)."""

    def __init__(
        self,
        senders: int,
        *,
        slots: int = 8,
        hold_ns: int = 1_000,
        hold_partial: bool = False,
        **kw: object,
    ):
        self.rx = CreditReceiver(config(slots, **kw), SessionId(1), hold_partial=hold_partial)
        self.now = 1_000
        self.tx: dict[int, SenderEndpoint] = {}
        self.frames = 0
        self.reports: dict[int, list[SenderCreditUsage]] = {}
        self.updates: dict[int, list[ReceiverCreditUpdate]] = {}
        self.tokens: dict[int, list[ReservationToken]] = {}
        self.landed: dict[int, int] = {}
        for peer in range(1, senders + 1):
            self.rx.accept(peer)
            tx = SenderEndpoint(sender_peer=peer, level_hold_ns=hold_ns)
            tx.connect(self.now)
            self.tx[peer] = tx
            self.reports[peer], self.updates[peer] = [], []
            self.tokens[peer] = []
            self.landed[peer] = 0
        self.pump()
        self.frames = 0  # the handshake is not part of any measurement

    def endpoint(self, peer: int):  # type: ignore[no-untyped-def]
        return self.rx.endpoint(peer)

    def pump(self, rounds: int = 4) -> None:
        for _ in range(rounds):
            for peer, tx in self.tx.items():
                ep = self.rx.endpoint(peer)
                assert ep is not None
                for data in tx.messages_to_send(self.now):
                    self.frames += 1
                    message = decode(data)
                    if isinstance(message, SenderCreditUsage):
                        self.reports[peer].append(message)
                    ep.receive_message(data, self.now)
                out = ep.messages_to_send(self.now)
                for data in out:
                    self.frames += 1
                    message = decode(data)
                    if isinstance(message, ReceiverCreditUpdate):
                        self.updates[peer].append(message)
                tx.receive_batch(out, self.now)

    def tick(self, ns: int = 1) -> None:
        self.now += ns

    def wait(self, peer: int, transfers: int) -> None:
        """``transfers`` charges wait for credit at ``peer`` (as the gate states them)."""
        self.tx[peer].set_pending_demand(units(transfers))

    def dispatch(self, peer: int, waiting: int) -> int:
        """Reserve and commit as many charges as credit allows, of ``waiting``; the rest waits."""
        tx = self.tx[peer]
        sent = 0
        while sent < waiting:
            token = tx.try_reserve(CHARGE, self.now)
            if not isinstance(token, ReservationToken):
                break
            tx.commit(token)
            self.tokens[peer].append(token)
            sent += 1
        tx.set_pending_demand(units(waiting - sent))
        return sent

    def land(self, peer: int) -> None:
        """The oldest transfer of ``peer`` lands at the receiver (admitted, counted)."""
        ep = self.endpoint(peer)
        assert ep is not None
        assert self.rx.admit_write(peer, 0, ep.epoch, ONE).accepted
        self.landed[peer] += 1

    def release_and_complete(self, peer: int) -> None:
        """The receiver's consumer releases it and the sender learns it completed."""
        ep = self.endpoint(peer)
        assert ep is not None
        self.rx.release(peer, 0, ep.epoch, ONE)
        self.tx[peer].complete(self.tokens[peer].pop(0), self.now)

    def granted(self, peer: int) -> int:
        ep = self.endpoint(peer)
        assert ep is not None
        return self.rx.allocator.key_totals(peer, 0, ep.epoch).granted[R.REQUEST_SLOTS]

    def held(self, peer: int) -> int:
        ep = self.endpoint(peer)
        assert ep is not None
        return self.rx.allocator.unlanded(peer, 0, ep.epoch)[R.REQUEST_SLOTS]

    def outstanding(self) -> int:
        return self.rx.allocator.outstanding(R.REQUEST_SLOTS)


# ------------------------------------------------------------------------------ arithmetic


def test_the_unit_is_one_charge_and_the_quantum_leaves_an_uncapped_key_in_flight() -> None:
    assert unit_of(units(4)) == ONE
    assert unit_of({}) == {}
    assert [quantum(h, capped=True) for h in (1, 2, 3, 4, 8)] == [1, 2, 2, 2, 4]
    assert [quantum(h, capped=False) for h in (1, 2, 3, 4, 8)] == [1, 1, 2, 2, 4]


def test_the_chunk_is_the_fair_share_rounded_up_and_a_level_never_buys_more() -> None:
    pool = units(8)
    alone = standing(units(4), {}, pool, active=1, static=0)
    assert (alone.hold, alone.deficit, alone.capped) == (4, 4, False)
    sixteen = standing(units(4), {}, pool, active=16, static=0)
    assert (sixteen.hold, sixteen.capped, sixteen.quantum) == (1, True, 1)
    three = standing(units(4), {}, pool, active=3, static=0)
    assert three.hold == 3  # ceil(8 / 3): the third key's last unit waits in line
    liar = standing(units(1000), {}, pool, active=2, static=0)
    assert liar.hold == 4 and liar.capped
    lease = standing(units(4), {}, pool, active=1, static=2)
    assert lease.hold == 2  # the RFC's static lease batch


def test_a_partly_landed_charge_counts_as_held_and_a_settled_fragment_holds_no_unit() -> None:
    half = {R.DATA_BYTES: BLOCK // 2, R.REQUEST_SLOTS: 1, R.CONSUMER_SLOTS: 1}
    flying = standing(units(2), half, units(8), active=1, static=0)
    assert flying.unlanded == 1 and flying.deficit == 1
    assert flying.top_up(1) == ONE  # one more whole charge
    settled = standing(units(2), half, units(8), active=1, static=0, settled=True)
    assert settled.unlanded == 0 and settled.deficit == 2
    # never a part of a charge: the fragment is not completed (its sender returns it)
    assert settled.top_up(1) == ONE


# ------------------------------------------------------------------------------ receiver


def test_a_lone_sender_is_topped_up_ahead_as_its_data_lands() -> None:
    net = Net(1)
    net.wait(1, 4)
    net.pump()
    assert net.granted(1) == 4  # its whole level, in one update
    assert net.dispatch(1, 4) == 4
    net.pump()
    frames = net.frames
    net.land(1)
    net.pump()
    assert net.granted(1) == 4 and net.frames == frames  # deficit 1 < quantum 2: no frame
    net.land(1)
    net.pump()
    assert net.granted(1) == 6  # two units ahead, before either landed unit is released
    assert net.frames == frames + 1
    assert not net.endpoint(1).stalled


def test_sixteen_senders_share_eight_slots_one_unit_each_first_come() -> None:
    net = Net(16)
    for peer in net.tx:
        net.wait(peer, 4)
        net.pump()
    # the first two reports found fewer keys with a level (a bigger share); nothing is ever
    # revoked, so the shares converge as that credit lands
    assert [net.granted(p) for p in net.tx] == [4, 4] + [0] * 14
    assert net.rx.waiting_line == tuple((p, 0) for p in range(3, 17))
    # every key is capped now (it wants 4, its share is 1): told to wait, not to ask again
    assert all(net.updates[p][-1].retry_after_us for p in range(3, 17))
    for peer in (1, 2):
        net.dispatch(peer, 4)
    net.pump()
    for _ in range(4):  # key 1's four units land and are released one by one
        net.land(1)
        net.release_and_complete(1)
        net.pump()
    assert [net.granted(p) for p in range(3, 7)] == [1] * 4  # the line's head, in order
    assert net.rx.waiting_line[-1] == (1, 0)  # key 1 queues again, at the back
    assert net.outstanding() == 8
    for peer in range(3, 7):
        assert net.dispatch(peer, 4) == 1
    net.pump()
    frames = net.frames
    net.land(3)
    net.release_and_complete(3)
    net.pump()
    assert net.granted(7) == 1 and net.frames - frames == 1  # one grant, one frame
    assert net.rx.waiting_line[-1] == (3, 0)


def test_the_head_of_the_line_is_never_passed() -> None:
    # a static chunk of 4 (the RFC's lease batch): key 1 wants 6 and is topped up 2 at a time
    # (its quantum), key 2 wants 1, one at a time; five slots in all
    net = Net(2, slots=5, grant_chunk=4)
    net.wait(1, 6)
    net.wait(2, 1)
    net.pump()
    assert (net.granted(1), net.granted(2), net.outstanding()) == (4, 1, 5)
    net.dispatch(1, 6)
    net.dispatch(2, 1)
    net.pump()
    net.land(1)
    net.land(1)  # key 1's top-up (2 units) is due; nothing is free
    net.pump()
    assert net.rx.waiting_line == ((1, 0),)
    net.release_and_complete(1)  # one unit free: short of key 1's quantum, and key 1 still
    net.pump()  # has two writes to land, so it waits for a second unit
    assert net.rx.waiting_line == ((1, 0),) and net.granted(1) == 4
    net.land(2)  # key 2's top-up (1 unit) is due and one unit is free: it may not pass
    net.pump()
    assert net.rx.waiting_line == ((1, 0), (2, 0)) and net.granted(2) == 1
    net.release_and_complete(1)  # two free: the head first
    net.pump()
    assert (net.granted(1), net.granted(2)) == (6, 1)
    assert net.rx.waiting_line == ((2, 0),)
    net.release_and_complete(2)
    net.pump()
    assert net.granted(2) == 2 and net.rx.waiting_line == ()


def test_a_head_with_nothing_unlanded_takes_what_is_free() -> None:
    # Found by the staged test: a consumer holds what lands until it has three blocks, one
    # block is free and the head's quantum is two. A head still waiting for its own data to
    # land is re-served by that landing; one with nothing unlanded never would be, so it takes
    # the one free unit instead of waiting for capacity its consumer will not free.
    net = Net(1, slots=3, grant_chunk=3)
    net.wait(1, 4)
    net.pump()
    assert net.granted(1) == 3
    net.dispatch(1, 4)
    for _ in range(3):
        net.land(1)
    net.pump()  # nothing unlanded, nothing free: the key waits in the line
    assert net.rx.waiting_line == ((1, 0),) and net.granted(1) == 3
    net.release_and_complete(1)  # one unit free, below the quantum of 2 (hold 3, capped)
    net.pump()
    assert net.granted(1) == 4  # the free unit, at once
    assert net.rx.waiting_line == ((1, 0),)  # still two short of its hold: back in the line


def _consumer_holds_three(*, hold_partial: bool) -> Net:
    # the staged case above: three blocks landed and held by the consumer, the key waits
    net = Net(1, slots=3, grant_chunk=3, hold_partial=hold_partial)
    net.wait(1, 4)
    net.pump()
    net.dispatch(1, 4)
    for _ in range(3):
        net.land(1)
    net.pump()
    assert net.rx.waiting_line == ((1, 0),) and net.granted(1) == 3
    return net


def test_a_held_partial_grant_leaves_with_the_release_that_completes_the_quantum() -> None:
    # hold_partial: the one free unit is not granted alone; the key's next release makes it
    # two, its quantum, and both go out in one grant and one update (docs/incast.md: a
    # single-unit grant was half the updates of the 4-sender row)
    held, at_once = (_consumer_holds_three(hold_partial=h) for h in (True, False))
    before = {id(net): len(net.updates[1]) for net in (held, at_once)}
    for net in (held, at_once):
        net.release_and_complete(1)
        net.pump()
    assert held.granted(1) == 3 and held.rx.partial_waiting and not at_once.rx.partial_waiting
    assert at_once.granted(1) == 4  # the part, at once: an update of its own
    for net in (held, at_once):
        net.release_and_complete(1)
        net.pump()
    # held: both units in one grant; at once: the part left the key one unit short of its
    # quantum, so the second release's unit waits for the next landing's top-up
    assert (held.granted(1), at_once.granted(1)) == (5, 4) and not held.rx.partial_waiting
    assert len(held.updates[1]) - before[id(held)] == 1
    assert len(at_once.updates[1]) - before[id(at_once)] == 1


def test_a_held_partial_grant_is_granted_when_the_hold_runs_out() -> None:
    # a consumer that keeps its data until more arrives never releases: the transport's
    # timer grants the part, so the hold delays the key and never stalls it
    net = _consumer_holds_three(hold_partial=True)
    net.release_and_complete(1)
    net.pump()
    assert net.granted(1) == 3 and net.rx.partial_waiting
    # nothing is owed, yet a transport must flush: its flush arms the hold's timer
    assert net.rx.needs_flush and not net.rx.owing
    assert net.rx.grant_partial()
    net.pump()
    assert net.granted(1) == 4 and not net.rx.partial_waiting
    assert not net.rx.needs_flush  # the grant went out with the pump: nothing owed, none held
    assert net.rx.waiting_line == ((1, 0),)  # still short of its hold: back in the line
    assert not net.rx.grant_partial()  # nothing held any more: a no-op


def test_no_update_without_news_but_a_repeated_report_is_answered() -> None:
    net = Net(1)
    net.wait(1, 2)
    net.pump()
    before = len(net.updates[1])
    for _ in range(3):  # nothing changed: the receiver has nothing to say
        net.tick(10_000_000)
        net.pump()
    assert len(net.updates[1]) == before
    ep = net.endpoint(1)
    assert ep is not None
    (report,) = net.reports[1]
    # the same report again (only a refresh repeats one): answered with the full vector
    ep.receive_message(_reencode(report, sequence=report.sequence + 1), net.now)
    (answer,) = ep.messages_to_send(net.now)
    assert decode(answer).grants == net.updates[1][-1].grants
    assert ep.messages_to_send(net.now) == []


def _reencode(report: SenderCreditUsage, *, sequence: int) -> bytes:
    return encode(
        SenderCreditUsage(
            receiver_session_id=report.receiver_session_id,
            epoch=report.epoch,
            sequence=sequence,
            qos_class=report.qos_class,
            consumed_totals=report.consumed_totals,
            returned_totals=report.returned_totals,
            pending_demand=report.pending_demand,
        )
    )


def test_the_staging_reserve_is_never_granted_ahead() -> None:
    rx = CreditReceiver(
        config(staging_reserve={R.REQUEST_SLOTS: 1}), SessionId(1), initial_grant=units(1)
    )
    user = rx.accept(1)
    staging = rx.accept(2, allocation_class=AllocationClass.STAGING_INTERNAL)
    for peer in (1, 2):
        tx = SenderEndpoint(sender_peer=peer)
        tx.connect(0)
        ep = rx.endpoint(peer)
        assert ep is not None
        for data in tx.messages_to_send(0):
            ep.receive_message(data, 0)
        tx.receive_batch(ep.messages_to_send(0), 0)
        assert tx.ahead is (peer == 1)
    assert user.ahead and not staging.ahead and staging.version == 1


# ------------------------------------------------------------------------------ sender


def test_consumption_alone_is_not_news_and_idle_credit_goes_back_once_the_work_drained() -> None:
    net = Net(1, hold_ns=5_000)
    net.wait(1, 4)
    net.pump()
    net.dispatch(1, 4)
    net.pump()
    assert len(net.reports[1]) == 1  # the level (4 waiting, then 4 in flight: the same 4)
    net.land(1)
    net.land(1)
    net.pump()  # topped up by two
    net.release_and_complete(1)
    net.release_and_complete(1)
    net.tick(10_000)
    net.pump()
    # Two still in flight: the credit on hand is not idle yet, however long it lasts (a return
    # now would be granted straight back: those two already landed count in the level).
    assert len(net.reports[1]) == 1
    net.land(1)
    net.land(1)
    net.pump()
    net.release_and_complete(1)
    net.release_and_complete(1)
    net.tick(4_000)
    net.pump()
    assert len(net.reports[1]) == 1  # drained, but idle for less than the hold
    net.tick(1_000)
    net.pump()
    (_, fall) = net.reports[1]
    returned = {a.resource: a.amount for a in fall.returned_totals}
    assert returned[R.REQUEST_SLOTS] == net.granted(1) - 4  # everything beyond the four used
    assert not {a.resource: a.amount for a in fall.pending_demand}  # no level left
    assert net.held(1) == 0
    granted, updates = net.granted(1), len(net.updates[1])
    net.tick(10_000)
    net.pump()
    assert (net.granted(1), len(net.reports[1])) == (granted, 2)  # nothing granted back
    assert len(net.updates[1]) <= updates + 1  # at most the answer to the return
    net.dispatch(1, 1)  # new work: a rise goes out at once
    net.pump()
    assert len(net.reports[1]) == 3


def test_a_burst_that_resumes_within_the_hold_keeps_its_credit() -> None:
    net = Net(1, hold_ns=5_000)
    net.wait(1, 2)
    net.pump()
    net.dispatch(1, 2)
    net.pump()
    for _ in range(5):  # a lane completes and resubmits a moment later, every time
        net.land(1)
        net.release_and_complete(1)
        net.pump()
        net.tick(1_000)
        assert net.dispatch(1, 1) == 1  # its credit was granted ahead: no stall
        net.pump()
    assert len(net.reports[1]) == 1  # one report for the whole stream


@pytest.mark.parametrize(("senders", "bound"), [(1, 0.6), (4, 0.6), (16, 1.2)])
def test_control_frames_per_transfer_in_a_closed_loop(senders: int, bound: float) -> None:
    """Each sender keeps 4 transfers submitted; the receiver lands and releases one transfer
    at a time, round robin over the senders with data in flight (a serial data path)."""
    net = Net(senders, hold_ns=10**9)
    lanes = 4
    for peer in net.tx:
        net.wait(peer, lanes)
    net.pump()
    waiting = {peer: lanes - net.dispatch(peer, lanes) for peer in net.tx}
    net.pump()
    net.frames = 0
    done = 0
    order: Iterator[int] = itertools.cycle(net.tx)
    while done < 400:
        peer = next(order)
        if not net.tokens[peer]:
            continue
        net.land(peer)
        net.release_and_complete(peer)
        done += 1
        waiting[peer] += 1  # the lane resubmits at once
        net.pump()
        for p in net.tx:
            waiting[p] -= net.dispatch(p, waiting[p])
        net.pump()
        assert net.outstanding() <= 8
    assert net.frames / done <= bound
    # nobody starves: every sender completed work
    assert all(net.landed[p] > 0 for p in net.tx)


TWO = {R.DATA_BYTES: 2 * BLOCK, R.REQUEST_SLOTS: 1, R.CONSUMER_SLOTS: 1}


def _two_blocks_of_capacity() -> CreditReceiver:
    """A receiver of two blocks (two slots) whose activation grant is one block, one slot."""
    room = {R.DATA_BYTES: 2 * BLOCK, R.REQUEST_SLOTS: 2, R.CONSUMER_SLOTS: 2}
    return CreditReceiver(
        AllocatorConfig(
            capacity=room, control_slots=4, max_grant=room, max_keys=4, retry_after_us=100
        ),
        SessionId(1),
        initial_grant=ONE,
    )


def _activated(rx: CreditReceiver, peer: int) -> tuple[SenderEndpoint, ReceiverEndpoint]:
    ep = rx.accept(peer)
    tx = SenderEndpoint(sender_peer=peer, level_hold_ns=10**9)
    tx.connect(0)
    for data in tx.messages_to_send(1):
        ep.receive_message(data, 1)
    tx.receive_batch(ep.messages_to_send(2), 2)
    return tx, ep


def test_an_activation_grant_below_the_charge_goes_back_and_a_whole_charge_comes() -> None:
    # The activation grant (one block) is a fragment of the waiting two-block write's charge.
    # Report rule 5: the sender gives it back with the report that states the two-block head,
    # and the receiver grants one whole two-block charge (it never completes a fragment).
    rx = _two_blocks_of_capacity()
    tx, ep = _activated(rx, 1)
    assert not isinstance(tx.try_reserve(CreditCharge.of(TWO), 3), ReservationToken)
    assert tx.available()[R.DATA_BYTES] == 0  # the fragment went back at once
    for data in tx.messages_to_send(4):  # the level (one two-block write) and the return
        ep.receive_message(data, 4)
    totals = rx.allocator.key_totals(1, 0, ep.epoch)
    assert totals.granted[R.DATA_BYTES] == 3 * BLOCK  # the activation's block, then two
    assert rx.waiting_line == ()
    tx.receive_batch(ep.messages_to_send(5), 5)
    assert isinstance(tx.try_reserve(CreditCharge.of(TWO), 6), ReservationToken)


def test_two_senders_holding_a_fragment_each_do_not_wait_for_each_other() -> None:
    # Hold and wait (found in the engine: 1 of 4 randomized two-sender runs stalled). Each
    # sender holds a one-block activation grant under a two-block head and the capacity is two
    # blocks: nothing is free, and before report rule 5 each waited for the block the other
    # held. Now both fragments go back, one sender gets a whole charge, then the other.
    rx = _two_blocks_of_capacity()
    pairs = [_activated(rx, peer) for peer in (1, 2)]
    for tx, _ in pairs:
        assert not isinstance(tx.try_reserve(CreditCharge.of(TWO), 3), ReservationToken)
    now = 4
    done: set[int] = set()
    for _ in range(4):  # rounds of reports, updates, reservations, landings and releases
        for tx, ep in pairs:
            for data in tx.messages_to_send(now):
                ep.receive_message(data, now)
            tx.receive_batch(ep.messages_to_send(now + 1), now + 1)
            now += 2
            if tx.sender_peer in done:
                continue
            token = tx.try_reserve(CreditCharge.of(TWO), now)
            if isinstance(token, ReservationToken):
                tx.commit(token)
                assert rx.admit_write(tx.sender_peer, 0, ep.epoch, TWO).accepted
                rx.release(tx.sender_peer, 0, ep.epoch, TWO)
                tx.complete(token, now)
                done.add(tx.sender_peer)
    assert done == {1, 2}


def test_idle_credit_left_after_the_first_report_goes_back_after_the_hold() -> None:
    # Found by the gated conformance harness (docs/spec_review_gated.md): the activation grant
    # (two charges) is not idle before the entry's first report; that report (one charge
    # waiting, a rise) leaves one charge idle. Rule 2 returns it once it lasted the hold, but
    # nothing armed the hold after the report: no timer, no report, until some other event.
    rx = CreditReceiver(config(8), SessionId(1), initial_grant=units(2))
    ep = rx.accept(1)
    tx = SenderEndpoint(sender_peer=1, level_hold_ns=1_000)
    tx.connect(0)
    for data in tx.messages_to_send(1):
        ep.receive_message(data, 1)
    tx.receive_batch(ep.messages_to_send(2), 2)
    tx.set_pending_demand(ONE)  # the gate states one charge waiting (nothing in flight)
    (rise,) = tx.messages_to_send(4)
    assert not any(a.amount for a in decode(rise).returned_totals)  # nothing returned yet
    assert tx.get_timer() == 4 + 1_000  # the hold of the idle charge runs from the report
    assert tx.messages_to_send(4 + 999) == []
    (back,) = tx.messages_to_send(4 + 1_000)
    returned = {a.resource: a.amount for a in decode(back).returned_totals}
    assert returned == ONE


# --- writes of different sizes (docs/credit_protocol.md#mixed-charges) ----------------------------

SMALL = CreditCharge.of({R.DATA_BYTES: BLOCK // 2, R.REQUEST_SLOTS: 1, R.CONSUMER_SLOTS: 1})


def test_a_waiting_head_larger_than_the_rest_is_granted_in_its_own_charges() -> None:
    # Two blocks of capacity; the sender sends a half-block write and then waits with a
    # one-block write. Its plain level, (1.5 blocks, 2, 2), is its own unit (gcd 1 with the
    # slots): more than one grant may carry, so it was never granted ahead. Stated in whole
    # heads it is two blocks, whose unit is the head's charge.
    net = Net(1, slots=2)
    tx = net.tx[1]
    tx.set_pending_demand(SMALL.as_dict(), head=SMALL.as_dict())
    net.pump()
    token = tx.try_reserve(SMALL, net.now)
    assert isinstance(token, ReservationToken)
    tx.commit(token)
    blocked = tx.try_reserve(CHARGE, net.now)
    assert not isinstance(blocked, ReservationToken)
    tx.set_pending_demand(ONE, head=ONE)
    assert dict(tx.level()) == units(2)  # the half block in flight and the head: two heads
    net.pump()
    ep = net.endpoint(1)
    assert ep is not None
    assert net.rx.allocator.ahead_inputs(1, 0, ep.epoch)[0][R.DATA_BYTES] >= BLOCK + BLOCK // 2
    assert isinstance(tx.try_reserve(CHARGE, net.now), ReservationToken)


def test_a_lower_level_whose_unit_changed_is_news_while_a_head_waits() -> None:
    net = Net(1, slots=8)
    tx = net.tx[1]
    tx.set_pending_demand({r: 3 * a for r, a in SMALL.as_dict().items()}, head=SMALL.as_dict())
    net.pump()
    reports = len(net.reports[1])
    # the three small writes left; now one large write waits: a lower level, a new unit
    tx.set_pending_demand(ONE, head=ONE)
    net.pump()
    assert len(net.reports[1]) == reports + 1
    assert net.endpoint(1) is not None and dict(net.endpoint(1).level) == ONE


def test_a_head_must_be_a_mapping_of_amounts_and_a_bad_one_changes_nothing() -> None:
    net = Net(1)
    tx = net.tx[1]
    tx.set_pending_demand(units(2), head=ONE)
    before = dict(tx.level()), dict(tx.level_head())
    with pytest.raises(InvalidArgument):
        tx.set_pending_demand(units(1), head={R.DATA_BYTES: -1})
    with pytest.raises(InvalidArgument):
        tx.set_pending_demand(units(1), head=[1, 2])  # type: ignore[arg-type]
    assert (dict(tx.level()), dict(tx.level_head())) == before


def test_a_newer_report_may_lower_consumption_where_the_caller_orders_reports() -> None:
    # A refused submit is an exact rollback at the sender; a version-2 receiver endpoint
    # applies reports in sequence order and takes the lower total (the allocator alone keeps
    # the largest, for callers that may reorder).
    alloc = CreditReceiver(config(4), SessionId(1)).allocator
    epoch = alloc.open_epoch(1, 0)
    assert alloc.grant_exact(1, 0, units(2)) is not None
    alloc.on_usage(1, 0, epoch, consumed_totals=units(2), returned_totals={})
    alloc.on_usage(1, 0, epoch, consumed_totals=units(1), returned_totals={})
    assert alloc.key_totals(1, 0, epoch).consumed_reported[R.REQUEST_SLOTS] == 2
    alloc.on_usage(1, 0, epoch, consumed_totals=units(1), returned_totals={}, latest=True)
    assert alloc.key_totals(1, 0, epoch).consumed_reported[R.REQUEST_SLOTS] == 1
