"""Credit's Python calls per transfer, at each end of a real engine pair; prints one JSON document.

Usage: ``python benchmarks/credit_calls.py [--transfers 500] [--congestion cubic]``.

The transport benchmark's engine pair (``tent_transport.bench.engine_run``: a receiver process
and this process as the sender, over loopback TCP), run twice with credit on: 4 KiB writes one
at a time, and 4 MiB writes pipelined. A ``sys.setprofile`` hook in each process counts every
call (Python and C) made under an outermost ``tent_credit`` frame and charges it to that
frame's function and its caller, the entry point from the transport. The counts do not depend
on the machine's load, so two trees compare on a shared 2-core machine where their timings do
not; what they miss is what a call costs (a builtin's ``dict.get`` counts as one like a
Python function), and the hook itself slows both processes severalfold, so the transfers'
interleaving (how many picks block, how many frames a read gets) is not a fast run's.
docs/benchmarks.md ("Credit's calls per transfer") has what they showed and what was cut.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import click
from tent_transport import bench

TOP = 12
"""Entry points reported per end (the rest are summed in the total)."""


class _Counter:
    """Calls under each outermost ``tent_credit`` frame, charged to it (module docstring)."""

    def __init__(self) -> None:
        self.calls: collections.Counter[str] = collections.Counter()
        self.entries: collections.Counter[str] = collections.Counter()
        self._entry: str | None = None
        self._depth = 0

    def __call__(self, frame: FrameType, event: str, _arg: object) -> None:
        if event in ("call", "c_call"):
            if self._entry is not None:
                self._depth += 1
                self.calls[self._entry] += 1
            elif event == "call" and "tent_credit" in frame.f_code.co_filename:
                caller = frame.f_back
                by = "?" if caller is None else f"{_where(caller)}"
                self._entry = f"{_where(frame)} <- {by}"
                self._depth = 1
                self.entries[self._entry] += 1
                self.calls[self._entry] += 1
        elif self._entry is not None and event in ("return", "c_return", "c_exception"):
            self._depth -= 1
            if not self._depth:
                self._entry = None

    def report(self, transfers: int) -> dict[str, Any]:
        return {
            "calls_per_transfer": round(sum(self.calls.values()) / transfers, 1),
            "entries": [
                {
                    "entry": entry,
                    "calls_per_transfer": round(calls / transfers, 1),
                    "entered_per_transfer": round(self.entries[entry] / transfers, 2),
                }
                for entry, calls in self.calls.most_common(TOP)
            ],
        }


def _where(frame: FrameType) -> str:
    return f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}"


def counted_receiver(*args: Any, **kwargs: Any) -> None:
    """The receiver process: :func:`tent_transport.bench.engine_receiver` under the counter;
    its report goes to the file ``CREDIT_CALLS_OUT`` names (the pipe is the bench's)."""
    counter = _Counter()
    sys.setprofile(counter)
    try:
        bench.engine_receiver(*args, **kwargs)
    finally:
        sys.setprofile(None)
        transfers = int(os.environ["CREDIT_CALLS_TRANSFERS"])
        Path(os.environ["CREDIT_CALLS_OUT"]).write_text(json.dumps(counter.report(transfers)))


def _row(
    shape: str, transfers: int, block: int, *, sequential: bool, congestion: str, scratch: Path
) -> dict[str, Any]:
    out = scratch / f"receiver-{block}-{sequential}.json"
    os.environ["CREDIT_CALLS_OUT"] = str(out)  # the spawned receiver inherits the environment
    os.environ["CREDIT_CALLS_TRANSFERS"] = str(transfers)
    counter = _Counter()
    run: Callable[..., dict[str, float]] = bench.engine_run
    sys.setprofile(counter)
    try:
        figures = run(
            transfers,
            block,
            sequential=sequential,
            congestion=congestion or None,
            receiver=counted_receiver,
        )
    finally:
        sys.setprofile(None)
    return {
        "shape": shape,
        "transfers": transfers,
        "block_bytes": block,
        "control_messages_per_transfer": round(figures["control_messages_per_transfer"], 3),
        "sender": counter.report(transfers),
        "receiver": json.loads(out.read_text()),
    }


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--transfers",
    default=500,
    show_default=True,
    type=click.IntRange(min=10),
    help="Transfers per shape.",
)
@bench.congestion_option()
def main(transfers: int, congestion: str) -> None:
    """Count credit's calls per transfer at both ends (module docstring)."""
    shapes = (("4 KiB one at a time", 4 << 10, True), ("4 MiB pipelined", 4 << 20, False))
    with tempfile.TemporaryDirectory() as scratch:
        rows = [
            _row(
                name,
                transfers,
                block,
                sequential=one_at_a_time,
                congestion=congestion,
                scratch=Path(scratch),
            )
            for name, block, one_at_a_time in shapes
        ]
    print(
        json.dumps(
            {"benchmark": "credit_calls", "congestion": congestion or None, "rows": rows}, indent=1
        )
    )


if __name__ == "__main__":
    main()
