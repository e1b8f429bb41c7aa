"""The transmit meter against a real rate limit, at posting depth 1 / 16 / 256 (issue 12).

Two network namespaces joined by one veth pair whose sender side is limited by ``tc tbf``; a
sender engine writes ``--blocks`` × ``--block`` bytes over that one TCP rail into a receiver
engine, credit off (so only the posting depth varies), with ``transports/rdma/max_qp_wr`` (the
most slices the dispatch core posts in one chained call) set to each depth in turn.

Deadline Scheduling's claim ("Why per-completion timing cannot serve the predictors"): bytes over
busy time (the transmit estimate) does not depend on how the work was batched, while the per-slice
post → completion sample (the selection EWMA) falls with the depth of the batch. Printed as JSON:
per depth, both estimates as a ratio of the tbf rate, and the rail's bytes over busy time.

Needs root (``ip netns``). Run: ``python benchmarks/tbf_meter.py [--rate-mbit 80] [--blocks 64]``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "transport" / "net"))
from procs import Proc, receiver, sender

SUFFIX = f"{os.getpid() % 100000}"
NS_TX, NS_RX = f"tbftx{SUFFIX}", f"tbfrx{SUFFIX}"
TX, RX = "10.78.1.1", "10.78.1.2"  # inside the namespaces this script creates


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _namespaces(rate_mbit: int) -> None:
    _ip("netns", "add", NS_TX)
    _ip("netns", "add", NS_RX)
    tx_dev, rx_dev = f"bt{SUFFIX}", f"br{SUFFIX}"
    _ip("link", "add", tx_dev, "type", "veth", "peer", "name", rx_dev)
    _ip("link", "set", tx_dev, "netns", NS_TX)
    _ip("link", "set", rx_dev, "netns", NS_RX)
    _ip("-n", NS_TX, "addr", "add", f"{TX}/24", "dev", tx_dev)
    _ip("-n", NS_RX, "addr", "add", f"{RX}/24", "dev", rx_dev)
    for ns, dev in ((NS_TX, tx_dev), (NS_RX, rx_dev)):
        _ip("-n", ns, "link", "set", dev, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
    subprocess.run(
        ["ip", "netns", "exec", NS_TX, "tc", "qdisc", "add", "dev", tx_dev, "root", "tbf",
         "rate", f"{rate_mbit}mbit", "burst", "32kb", "latency", "200ms"],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip


def _delete() -> None:
    for ns in (NS_TX, NS_RX):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30, check=False)


def _config(depth: int, link_gbps: float) -> dict[str, Any]:
    # The link-speed seed must lie inside [min, max]_bandwidth_gbps, and the tbf rate inside the
    # meters' clamp (0.1x .. 10x the seed), or the estimates would sit on a clamp.
    return {
        "enable_runtime_queue": True,
        "runtime_queue": {"max_dispatch_owners": 1024, "max_dispatch_bytes": 1 << 30},
        "receiver_credit": {"enabled": False},
        "transports": {"rdma": {"max_qp_wr": depth, "min_bandwidth_gbps": link_gbps / 10}},
    }


def _run(depth: int, *, blocks: int, block: int, link_gbps: float) -> dict[str, Any]:
    rx = Proc(
        receiver,
        {
            "netns": NS_RX,
            "host": RX,
            "rails": [[RX, 0]],
            "config": _config(depth, link_gbps),
            "senders": [1],
            "segment_bytes": blocks * block,
            "regions": {1: [0, blocks * block]},
            "release": "landing",
        },
    )
    try:
        kind, address, _rails, segment = rx.recv()
        assert kind == "ready"
        tx = Proc(
            sender,
            {
                "netns": NS_TX,
                "rails": [[TX, 0]],
                "link_speed_gbps": [link_gbps],
                "config": _config(depth, link_gbps),
                "peer_id": 1,
                "receiver": address,
                "segment": segment,
                "phases": [{"blocks": [[i * block, block, 7000 + i] for i in range(blocks)]}],
            },
        )
        try:
            kind, report = tx.recv(600)
        finally:
            tx.stop()
        assert kind == "done", report
        statuses = {r["status"] for r in report["phases"][0]["results"]}
        assert statuses == {"COMPLETED"}, statuses
        return dict(report["rails"][0])
    finally:
        rx.stop()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--rate-mbit", default=80, show_default=True, help="the tbf rate of the rail")
@click.option("--blocks", default=64, show_default=True, help="writes per depth")
@click.option("--block", default=256 << 10, show_default=True, help="bytes per write")
@click.option("--depths", default="1,16,256", show_default=True)
def main(rate_mbit: int, blocks: int, block: int, depths: str) -> None:
    """Print the meters against the tbf rate at each posting depth, as JSON."""
    rate_bps = rate_mbit * 1e6 / 8
    link_gbps = rate_mbit * 5 / 1000  # seed 5x the real rate: the clamp is 0.5x .. 50x it
    out: dict[str, Any] = {"rate_bytes_per_s": rate_bps, "block": block, "blocks": blocks}
    try:
        _namespaces(rate_mbit)
        rows = []
        for depth in (int(d) for d in depths.split(",")):
            rail = _run(depth, blocks=blocks, block=block, link_gbps=link_gbps)
            busy_s = rail["busy_ns"] / 1e9
            rows.append(
                {
                    "depth": depth,
                    "transmit_over_rate": round(rail["transmit_bps"] / rate_bps, 3),
                    "selection_over_rate": round(rail["selection_bps"] / rate_bps, 3),
                    "bytes_over_busy_over_rate": round(
                        rail["completed_bytes"] / busy_s / rate_bps, 3
                    ),
                    "transmit_samples": rail["transmit_samples"],
                }
            )
        out["depths"] = rows
    finally:
        _delete()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
