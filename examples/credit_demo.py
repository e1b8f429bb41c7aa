"""End-to-end credit protocol demo: one receiver, three senders, a hostile control network.

Every control message crosses an in-memory channel as real CBOR bytes; the channel drops,
duplicates, reorders and delays them. Midway, sender 2 reconnects (a new epoch) and the receiver
restarts (a new session). The run prints what was granted, consumed, released and returned, and
checks after every step that the receiver's capacity was never exceeded.

    python examples/credit_demo.py [--seed N]
"""

from __future__ import annotations

import argparse
import sys

from tent_credit import CreditCharge, CreditResource, Plan, SessionId, charge_for_plan
from tent_credit._allocator import AllocatorConfig
from tent_credit._endpoints import CreditReceiver
from tent_credit._loopback import LoopbackNetwork
from tent_credit.testing import FaultRates

R = CreditResource
SLOT = 4096
SLOTS = 8
PER_SENDER = 40
# Each sender may hold up to 4 slots and asks for up to 4: three senders want 12 of the 8
# slots, so they contend and the receiver's capacity check is what keeps them within it.
MAX_GRANT_SLOTS = 4


def receiver(session: int) -> CreditReceiver:
    config = AllocatorConfig(
        capacity={R.DATA_BYTES: SLOTS * SLOT, R.REQUEST_SLOTS: SLOTS, R.CONSUMER_SLOTS: SLOTS},
        control_slots=4,
        max_grant={
            R.DATA_BYTES: MAX_GRANT_SLOTS * SLOT,
            R.REQUEST_SLOTS: MAX_GRANT_SLOTS,
            R.CONSUMER_SLOTS: MAX_GRANT_SLOTS,
        },
        max_keys=16,
        retry_after_us=100,
    )
    return CreditReceiver(
        config, SessionId(session), freshness_ttl_ms=50, refresh_interval_ns=2_000_000
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args(argv)
    charge = charge_for_plan(Plan.REMOTE_DIRECT_WRITE, SLOT)
    assert charge is not None
    rates = FaultRates(drop=0.1, duplicate=0.1, reorder=0.3, max_delay_ns=40_000)
    net = LoopbackNetwork(receiver(1), seed=args.seed, rates=rates)
    now = 0
    for peer in (1, 2, 3):
        net.add_sender(peer, now)
    sent = {1: 0, 2: 0, 3: 0}
    granted_before_restart = 0
    for tick in range(20_000):
        now += 10_000
        for peer, tx in net.senders.items():
            if sent[peer] < PER_SENDER and tx.key is not None:
                tx.set_pending_demand(
                    {r: a * min(MAX_GRANT_SLOTS, PER_SENDER - sent[peer]) for r, a in charge.parts}
                )
                if net.try_send(peer, charge, now):
                    sent[peer] += 1
        if tick == 100:
            print(f"t={now / 1e6:.1f} ms  sender 2 reconnects (new epoch)")
            net.reconnect_sender(2, now)
        if tick == 200:
            granted_before_restart = sum(
                ep.statistics().updates_pushed for ep in net.receiver.endpoints()
            )
            print(f"t={now / 1e6:.1f} ms  receiver restarts (new session)")
            net.restart_receiver(receiver(2), now)
        net.step(now)
        if all(v == PER_SENDER for v in sent.values()) and not net.pending_payload():
            break
    for tx in net.senders.values():
        available = tx.available()
        if any(available.values()):  # give unused credit back explicitly
            tx.return_unused(CreditCharge.of({r: a for r, a in available.items() if a}))
    for _ in range(300):
        now += 10_000
        net.step(now)

    stats = net.statistics()
    alloc = net.receiver.allocator.statistics()
    print(f"\nfinished at t={now / 1e6:.1f} ms, seed {args.seed}")
    print(
        f"{'sender':>6} {'state':>8} {'sent':>5} {'granted':>8} {'consumed':>9} {'returned':>9} "
        f"{'dup/old':>7} {'violations':>10}"
    )
    for peer, tx in net.senders.items():
        s = tx.statistics()
        assert tx.key is not None
        entry = tx.ledger.entry(tx.key)
        print(
            f"{peer:>6} {s.state.name:>8} {sent[peer]:>5} "
            f"{entry.grant_total[R.REQUEST_SLOTS]:>8} {entry.consumed[R.REQUEST_SLOTS]:>9} "
            f"{entry.returned[R.REQUEST_SLOTS]:>9} {s.duplicates_or_old:>7} "
            f"{s.protocol_violations:>10}"
        )
    print("(granted / consumed / returned: REQUEST_SLOTS of the current session)")
    print(f"updates pushed before the restart: {granted_before_restart}")
    print(
        f"transfers reserved {stats.reserved}, landed {stats.landed}, released "
        f"{stats.released}, completed {stats.completed}, lost with the old session "
        f"{stats.fenced_work}"
    )
    ok = True
    for r in (R.DATA_BYTES, R.REQUEST_SLOTS, R.CONSUMER_SLOTS):
        peak = stats.peak_occupied.get(r, 0)
        cap = stats.capacity[r]
        ok &= peak <= cap
        print(
            f"{r.name:>15}: peak occupied {peak:>6} of capacity {cap:>6}; "
            f"outstanding now {alloc.outstanding[r]}"
        )
    verdict = "capacity was never exceeded" if ok else "CAPACITY EXCEEDED"
    print(verdict)
    return 0 if ok and all(v == PER_SENDER for v in sent.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
