"""How much of credit's cost per sequential 4 KiB transfer is its control frame, and how much its
bookkeeping; prints one JSON document.

Usage: ``python benchmarks/credit_frame_cost.py [--transfers 2000] [--rounds 3]
[--congestion cubic]``.

The transport benchmark's engine pair (``tent_transport.bench.engine_run``, sequential 4 KiB
writes over loopback TCP) in three modes per round, their order rotating, beside the bare
socket round trip of the same round:

* ``none``: no credit at either end (the baseline);
* ``frame``: no credit, but the receiver sends, at every landing, what credit would send: one
  ``ReceiverCreditUpdate`` (a new sequence and grant each time, encoded as the receiver
  encodes its top-ups) on the control connection, before the write's acknowledgement, as a
  credited landing does; the sender reads it, decodes and validates it (``tent_credit``'s
  wire decoder) and wakes a dispatch pass, as a credited grant does, and stops there.
  Everything of credit but its bookkeeping;
* ``credit``: credit at both ends, as shipped.

So ``frame - none`` is what the frame itself costs (its encode, its writes and reads, the
wake-up and pass it causes) and ``credit - frame`` what credit's bookkeeping costs at the two
ends: the most a leaner bookkeeping could win, since a sequential writer's grant-ahead sends
one update per transfer whatever the implementation (the lone sender's hold is its level, one
write: docs/credit_protocol.md#grant-ahead). Both ends' CPU per transfer is reported beside
the time. docs/benchmarks.md (``credit-frame-cost``) has what it showed.
"""

from __future__ import annotations

import itertools
import json
import platform
import statistics
from typing import Any

import click
from tent_transport import bench
from tent_transport.control import _client
from tent_transport.control._frames import FrameKind
from tent_transport.engine import _receiving

from tent_credit import CreditResource, SessionId
from tent_credit._wire import decode, encode_update

MODES = ("none", "frame", "credit")
SMALL = 4096
_decoded = [0]  # update frames the ``frame`` mode's sender decoded (the emulation's evidence)


def _update_bytes(sequence: int) -> bytes:
    """A sequential writer's update, encoded as the receiver encodes its top-ups (without
    building the message; the bench's receiver has no freshness TTL): the next grant, one 4 KiB
    write's charge more, over the four resources its allocator models."""
    return encode_update(
        0,
        SessionId(7),
        1,
        sequence,
        0,
        {
            CreditResource.DATA_BYTES: sequence * SMALL,
            CreditResource.REQUEST_SLOTS: sequence,
            CreditResource.STAGING_SLOTS: 0,
            CreditResource.CONSUMER_SLOTS: sequence,
        },
        0,
    )


def framing_receiver(*args: Any, **kwargs: Any) -> None:
    """The receiver process of the ``frame`` mode: the uncredited receiver, and one update
    frame per landing on the sender's control connection (module docstring)."""
    landed = _receiving.ReceiverSide.landed
    sequences = itertools.count(1)

    def landed_and_framed(
        self: _receiving.ReceiverSide, peer: int, session: int, request: Any
    ) -> None:
        landed(self, peer, session, request)
        ps = None if self.control is None else self.control.session_of(peer)
        if ps is not None:
            ps.connection.publish(FrameKind.CREDIT, _update_bytes(next(sequences)))

    _receiving.ReceiverSide.landed = landed_and_framed  # type: ignore[method-assign]
    bench.engine_receiver(*args, **kwargs)


def _framed_sender() -> None:
    """This process as the ``frame`` mode's sender: a credit frame, with no endpoint to take
    it, is decoded and wakes a pass, as a grant would."""
    on_frame = _client.ControlClient._on_frame

    def on_frame_decoded(self: _client.ControlClient, kind: FrameKind, payload: bytes) -> None:
        if kind is FrameKind.CREDIT and self.endpoint is None and not self._bootstrap_pending:
            decode(payload)
            _decoded[0] += 1
            self._hooks.credit_received(self)
            return
        on_frame(self, kind, payload)

    _client.ControlClient._on_frame = on_frame_decoded  # type: ignore[method-assign]


def _run(mode: str, transfers: int, congestion: str | None) -> dict[str, float]:
    decoded = _decoded[0]
    figures = bench.engine_run(
        transfers,
        SMALL,
        sequential=True,
        credit=mode == "credit",
        congestion=congestion,
        receiver=framing_receiver if mode == "frame" else bench.engine_receiver,
    )
    # control frames per transfer at the sender: the decoded ones (frame), its endpoint's
    # messages sent and received (credit)
    frames = (_decoded[0] - decoded) / transfers + figures["control_messages_per_transfer"]
    return {
        "us_per_transfer": round(figures["us_per_transfer"], 1),
        "sender_cpu_us": round(figures["sender_cpu_us_per_transfer"], 1),
        "receiver_cpu_us": round(figures["receiver_cpu_us_per_transfer"], 1),
        "control_frames_per_transfer": round(frames, 3),
    }


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--transfers", default=2000, show_default=True, type=click.IntRange(min=10))
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(min=1))
@bench.congestion_option()
def main(transfers: int, rounds: int, congestion: str) -> None:
    """Split credit's cost per sequential 4 KiB transfer (module docstring)."""
    _framed_sender()
    chosen = congestion or None
    rows = []
    for i in range(rounds):
        row: dict[str, Any] = {
            "round": i + 1,
            "bare_us": round(bench.bare(0, transfers, congestion=chosen)["us_per_4kib"], 1),
        }
        for mode in MODES[i % 3 :] + MODES[: i % 3]:  # each mode leads one round in three
            row[mode] = _run(mode, transfers, chosen)
        rows.append(row)

    def median(mode: str, field: str) -> float:
        return round(float(statistics.median(r[mode][field] for r in rows)), 1)

    summary = {m: {f: median(m, f) for f in rows[0][m]} for m in MODES}
    bare = statistics.median(r["bare_us"] for r in rows)
    out = {
        "benchmark": "credit_frame_cost",
        "python": platform.python_version(),
        "transfers": transfers,
        "congestion": congestion,
        "rounds": rows,
        "median": summary,
        "bare_us": round(bare, 1),
        "frame_us": round(
            summary["frame"]["us_per_transfer"] - summary["none"]["us_per_transfer"], 1
        ),
        "bookkeeping_us": round(
            summary["credit"]["us_per_transfer"] - summary["frame"]["us_per_transfer"], 1
        ),
        "credit_over_bare": round(summary["credit"]["us_per_transfer"] / bare, 2),
        "frame_over_bare": round(summary["frame"]["us_per_transfer"] / bare, 2),
        "none_over_bare": round(summary["none"]["us_per_transfer"] / bare, 2),
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
