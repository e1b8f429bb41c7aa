"""Two network namespaces joined by two veth pairs (two rails), one rate-limited with tc tbf.

The namespaces, links and qdisc are created and deleted by the fixture (this machine is root).
The one allowed skip: ``ip netns`` is unavailable.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest
from procs import Proc, block_bytes, credit_config, receiver, sender
from tent_transport.devices.tcp import checksum

BLOCK = 256 << 10
SUFFIX = f"{os.getpid() % 100000}"
NS_TX, NS_RX = f"tenttx{SUFFIX}", f"tentrx{SUFFIX}"
SLOW = ("10.77.1.1", "10.77.1.2")  # rail 0: tbf-limited
FAST = ("10.77.2.1", "10.77.2.2")  # rail 1


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _netns_available() -> bool:
    if shutil.which("ip") is None:  # (a missing tc is a failure below, not a skip)
        return False
    probe = f"tentprobe{SUFFIX}"
    try:
        _ip("netns", "add", probe)
    except (subprocess.CalledProcessError, OSError):
        return False
    _ip("netns", "del", probe)
    return True


@pytest.fixture
def namespaces() -> Iterator[None]:
    if not _netns_available():
        pytest.skip("ip netns is unavailable on this machine")
    try:
        _ip("netns", "add", NS_TX)
        _ip("netns", "add", NS_RX)
        for index, (a, b) in enumerate((SLOW, FAST)):
            tx_dev, rx_dev = f"tt{index}{SUFFIX}", f"tr{index}{SUFFIX}"
            _ip("link", "add", tx_dev, "type", "veth", "peer", "name", rx_dev)
            _ip("link", "set", tx_dev, "netns", NS_TX)
            _ip("link", "set", rx_dev, "netns", NS_RX)
            _ip("-n", NS_TX, "addr", "add", f"{a}/24", "dev", tx_dev)
            _ip("-n", NS_RX, "addr", "add", f"{b}/24", "dev", rx_dev)
            _ip("-n", NS_TX, "link", "set", tx_dev, "up")
            _ip("-n", NS_RX, "link", "set", rx_dev, "up")
        for ns in (NS_TX, NS_RX):
            _ip("-n", ns, "link", "set", "lo", "up")
        # rail 0 at 80 Mbit/s on the sender's egress: a real bandwidth limit for the meters
        subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                NS_TX,
                "tc",
                "qdisc",
                "add",
                "dev",
                f"tt0{SUFFIX}",
                "root",
                "tbf",
                "rate",
                "80mbit",
                "burst",
                "32kb",
                "latency",
                "100ms",
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )
        yield
    finally:
        for ns in (NS_TX, NS_RX):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30, check=False)


def test_two_namespaces_two_rails_one_rate_limited(namespaces: None) -> None:
    blocks = [[i * BLOCK, BLOCK, 3000 + i] for i in range(48)]
    rx = Proc(
        receiver,
        {
            "netns": NS_RX,
            "host": FAST[1],
            "rails": [[SLOW[1], 0], [FAST[1], 0]],
            "config": credit_config("required", slots=16, block=BLOCK),
            "senders": [1],
            "segment_bytes": 48 * BLOCK,
            "regions": {1: [0, 48 * BLOCK]},
            "release": "landing",
        },
    )
    try:
        kind, address, rails, segment = rx.recv()
        assert kind == "ready" and rails[0][0] == SLOW[1] and rails[1][0] == FAST[1]
        tx = Proc(
            sender,
            {
                "netns": NS_TX,
                "rails": [[SLOW[0], 0], [FAST[0], 0]],
                "config": credit_config("required", block=BLOCK),
                "peer_id": 1,
                "receiver": address,
                "segment": segment,
                "phases": [{"blocks": blocks}],
            },
        )
        try:
            kind, report = tx.recv(120)
        finally:
            tx.stop()
        assert kind == "done"
        assert {r["status"] for r in report["phases"][0]["results"]} == {"COMPLETED"}
        stats = rx.ask("stats")[1]
        expected = {o: checksum(block_bytes(seed, n)) for o, n, seed in blocks}
        assert {o: crc for _p, o, _n, crc, _t in stats["landed"]} == expected
        slow, fast = report["rails"]
        assert slow["completed_bytes"] + fast["completed_bytes"] == 48 * BLOCK
        # the meters saw the limit: the selection sent most bytes over the unlimited rail
        assert fast["completed_bytes"] > slow["completed_bytes"]
    finally:
        rx.stop()
