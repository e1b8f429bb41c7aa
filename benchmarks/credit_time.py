"""Credit's time in place: real time inside ``tent_credit`` per transfer, at each end of a real
engine pair, beside the same run without credit; prints one JSON document.

Usage: ``python benchmarks/credit_time.py [--transfers 4000] [--congestion cubic]``.

The sequential 4 KiB run of the transport benchmark's engine pair
(``tent_transport.bench.engine_run``), twice: without credit (the baseline) and with it. In
the credit run every public method of the credit classes a transport calls (the sender
endpoint, the dispatch gate, the receiver, its endpoints and the transfer book) is wrapped
with a clock in both processes; the outermost call is charged to its entry point, so the sum is
the time each process spent in ``tent_credit``. Against the baseline's CPU per transfer it
says how much of credit's extra CPU is the credit code and how much is the rest of what credit
brings (its control frame's read, write and callbacks).

Why beside ``credit_calls.py``: a call count misses what a call costs, and ``timeit`` of one
function in a loop misses what it costs in place, where everything else the process ran in
between has evicted it from the caches (the sender's update decode took three times its
``timeit`` figure here, docs/benchmarks.md#credit-sender-vectors). The wrapper adds about
0.3 µs per entry; the figures are one run's, on a shared machine: compare runs of two trees
interleaved, not across days.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from tent_transport import bench

import tent_credit
from tent_credit._gate import DispatchGate
from tent_credit._receiver_endpoint import ReceiverEndpoint
from tent_credit._transfers import TransferBook

SENDER_CLASSES: tuple[type, ...] = (tent_credit.SenderEndpoint, DispatchGate)
RECEIVER_CLASSES: tuple[type, ...] = (tent_credit.CreditReceiver, ReceiverEndpoint, TransferBook)


class _Clock:
    """Nanoseconds and calls per entry point, the outermost call only."""

    def __init__(self) -> None:
        self.ns: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self._inside = False

    def wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._inside:
                return method(*args, **kwargs)
            self._inside = True
            start = time.perf_counter_ns()
            try:
                return method(*args, **kwargs)
            finally:
                self.ns[name] += time.perf_counter_ns() - start
                self.calls[name] += 1
                self._inside = False

        return timed

    def install(self, classes: tuple[type, ...]) -> None:
        # every public method (and __call__) the class has, its mixins' included; properties
        # are reads of one attribute and stay as they are
        for cls in classes:
            for name in dir(cls):
                if name.startswith("_") and name != "__call__":
                    continue
                method = getattr(cls, name)
                if isinstance(method, property | type) or not callable(method):
                    continue  # a property, a nested class or a plain value
                setattr(cls, name, self.wrap(f"{cls.__name__}.{name}", method))

    def report(self, transfers: int) -> dict[str, Any]:
        return {
            "us_in_credit_per_transfer": round(sum(self.ns.values()) / transfers / 1000, 1),
            "entries": [
                {
                    "entry": name,
                    "us_per_transfer": round(ns / transfers / 1000, 2),
                    "calls_per_transfer": round(self.calls[name] / transfers, 2),
                }
                for name, ns in self.ns.most_common()
                if ns / transfers >= 100  # 0.1 µs per transfer
            ],
        }


def timed_receiver(*args: Any, **kwargs: Any) -> None:
    """The receiver process under the clock; its report goes to ``CREDIT_TIME_OUT``."""
    clock = _Clock()
    clock.install(RECEIVER_CLASSES)
    try:
        bench.engine_receiver(*args, **kwargs)
    finally:
        transfers = int(os.environ["CREDIT_TIME_TRANSFERS"])
        Path(os.environ["CREDIT_TIME_OUT"]).write_text(json.dumps(clock.report(transfers)))


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--transfers",
    default=4000,
    show_default=True,
    type=click.IntRange(min=100),
    help="Transfers per run.",
)
@bench.congestion_option()
def main(transfers: int, congestion: str) -> None:
    """Time credit in place at both ends (module docstring)."""
    block = bench.SMALL
    baseline = bench.engine_run(
        transfers, block, sequential=True, credit=False, congestion=congestion or None
    )
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "receiver.json"
        os.environ["CREDIT_TIME_OUT"] = str(out)  # the spawned receiver inherits them
        os.environ["CREDIT_TIME_TRANSFERS"] = str(transfers)
        clock = _Clock()
        clock.install(SENDER_CLASSES)
        credit = bench.engine_run(
            transfers,
            block,
            sequential=True,
            credit=True,
            congestion=congestion or None,
            receiver=timed_receiver,
        )
        receiver = json.loads(out.read_text())
    sender = clock.report(transfers)
    ends = {}
    for end, report in (("sender", sender), ("receiver", receiver)):
        cpu_key = f"{end}_cpu_us_per_transfer"
        extra = credit[cpu_key] - baseline[cpu_key]
        ends[end] = {
            "cpu_us_per_transfer": round(credit[cpu_key], 1),
            "cpu_us_per_transfer_without_credit": round(baseline[cpu_key], 1),
            "credit_share_in_tent_credit": round(report["us_in_credit_per_transfer"] / extra, 2)
            if extra > 0
            else None,
            **report,
        }
    print(
        json.dumps(
            {
                "benchmark": "credit_time",
                "shape": "4 KiB one at a time",
                "transfers": transfers,
                "congestion": congestion or None,
                "us_per_transfer": round(credit["us_per_transfer"], 1),
                "us_per_transfer_without_credit": round(baseline["us_per_transfer"], 1),
                **ends,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
