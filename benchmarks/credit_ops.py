"""Throughput of the credit hot paths beside baselines measured in the same run (ratios).

Prints one JSON object:

* ``reserve_commit``: ``SenderCreditLedger.try_reserve`` + ``commit`` per second, against a bare
  dict "check every resource, then subtract" loop over the same charge;
* ``apply_update``: ``apply_update`` of ever newer cumulative updates per second, against bare
  dict assignment of the same totals;
* ``decode_apply``: ``decode`` + ``apply_update`` of real wire bytes per second, against bare
  ``cbor2.loads`` of the same bytes.

    python benchmarks/credit_ops.py [--quick]
"""

from __future__ import annotations

import json
import platform
import sys
import time
from collections.abc import Callable

import cbor2
import click

from tent_credit import CreditAmount, CreditCharge, CreditKey, CreditResource, SessionId
from tent_credit._ledger import SenderCreditLedger
from tent_credit._messages import ReceiverCreditUpdate
from tent_credit._wire import decode, encode

R = CreditResource
KEY = CreditKey(receiver_session=SessionId(7), sender_peer=1, qos_class=0)
CHARGE = CreditCharge.of({R.DATA_BYTES: 4096, R.REQUEST_SLOTS: 1, R.CONSUMER_SLOTS: 1})


def _update(sequence: int, total: int) -> ReceiverCreditUpdate:
    return ReceiverCreditUpdate(
        qos_class=0,
        receiver_session_id=KEY.receiver_session,
        epoch=1,
        sequence=sequence,
        grants=(
            CreditAmount(resource=R.DATA_BYTES, amount=total * 4096),
            CreditAmount(resource=R.REQUEST_SLOTS, amount=total),
            CreditAmount(resource=R.CONSUMER_SLOTS, amount=total),
        ),
    )


def _rate(fn: Callable[[int], None], n: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(n)
        best = min(best, time.perf_counter() - t0)
    return n / best


def bench_reserve_commit(n: int, repeats: int) -> dict[str, float]:
    def ours(count: int) -> None:
        ledger = SenderCreditLedger(max_entries=4)
        ledger.activate(KEY, 1)
        ledger.apply_update(KEY, _update(1, count + 1))
        for _ in range(count):
            token = ledger.try_reserve(KEY, CHARGE)
            ledger.commit(token)  # type: ignore[arg-type]

    def bare(count: int) -> None:
        available = {
            R.DATA_BYTES: (count + 1) * 4096,
            R.REQUEST_SLOTS: count + 1,
            R.CONSUMER_SLOTS: count + 1,
        }
        parts = CHARGE.parts
        for _ in range(count):
            if all(available[r] >= a for r, a in parts):
                for r, a in parts:
                    available[r] -= a

    return _pair(_rate(ours, n, repeats), _rate(bare, n, repeats))


def bench_apply_update(n: int, repeats: int) -> dict[str, float]:
    updates = [_update(i + 1, i + 1) for i in range(n)]

    def ours(count: int) -> None:
        ledger = SenderCreditLedger(max_entries=4)
        ledger.activate(KEY, 1)
        for update in updates[:count]:
            ledger.apply_update(KEY, update)

    def bare(count: int) -> None:
        totals: dict[CreditResource, int] = {}
        for update in updates[:count]:
            for grant in update.grants:
                totals[grant.resource] = grant.amount

    return _pair(_rate(ours, n, repeats), _rate(bare, n, repeats))


def bench_decode_apply(n: int, repeats: int) -> dict[str, float]:
    wire = [encode(_update(i + 1, i + 1)) for i in range(n)]

    def ours(count: int) -> None:
        ledger = SenderCreditLedger(max_entries=4)
        ledger.activate(KEY, 1)
        for data in wire[:count]:
            ledger.apply_update(KEY, decode(data))  # type: ignore[arg-type]

    def bare(count: int) -> None:
        for data in wire[:count]:
            cbor2.loads(data)

    return _pair(_rate(ours, n, repeats), _rate(bare, n, repeats))


def _pair(ours: float, baseline: float) -> dict[str, float]:
    return {
        "ops_per_second": round(ours),
        "baseline_ops_per_second": round(baseline),
        "ratio_to_baseline": round(ours / baseline, 4),
    }


@click.command(
    help="credit hot-path throughput", context_settings={"help_option_names": ["-h", "--help"]}
)
@click.option("--quick", is_flag=True, help="small counts (smoke test)")
def main(quick: bool) -> None:
    n, repeats = (2_000, 2) if quick else (50_000, 5)
    t0 = time.perf_counter()
    result = {
        "benchmark": "credit_ops",
        "quick": quick,
        "python": platform.python_version(),
        "n": n,
        "reserve_commit": {
            "baseline": "bare dict check-then-subtract",
            **bench_reserve_commit(n, repeats),
        },
        "apply_update": {
            "baseline": "bare dict assignment of the totals",
            **bench_apply_update(n, repeats),
        },
        "decode_apply": {
            "baseline": "bare cbor2.loads of the same bytes",
            **bench_decode_apply(n, repeats),
        },
    }
    result["elapsed_s"] = round(time.perf_counter() - t0, 2)
    json.dump(result, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
