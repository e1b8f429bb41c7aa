"""A trace recorded by a real two-process run validates against the credit spec."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import cbor2
from procs import Proc, credit_config, traced_receiver, traced_sender

L = 2  # bytes per write: the spec instance grants one charge per demand, sized to match
BOUNDS = {
    "senders": 1,
    "capacity": (2 * L, 2, 1, 2),
    "charges": ((L, 1, 0, 1),),
    "max_grant_total": 10**6,
    "max_tokens": 64,
    "max_epoch": 4,
    "max_messages": 64,
    "max_seq": 10**6,
    "max_duplications": 4,  # an offer retransmitted before its activation arrived
}


def _config() -> dict[str, object]:
    config = credit_config("required", slots=2, block=L, batch=1)
    credit = config["receiver_credit"]
    assert isinstance(credit, dict)
    credit["capacity"] = {
        "data_bytes": 2 * L,
        "request_slots": 2,
        "staging_slots": 1,
        "consumer_slots": 2,
    }
    credit["grant"] = {}  # no grant up front: the spec's initial state holds none
    # The handshake precedes the trace, so a retransmitted offer's second activation would
    # show without its first delivery: retransmit (and report usage) only every 50 ms.
    credit["usage_interval_ns"] = 50_000_000
    # The credit spec the validator replays describes protocol version 1 (grant-ahead, version
    # 2, is the gated spec's): both engines offer only version 1 here.
    credit["versions"] = [1]
    return config


def _validate(*paths: Path) -> subprocess.CompletedProcess[str]:
    command = "import sys; from tent_models.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", command, "trace", "validate", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_two_process_trace_validates_with_tent_trace_validate(tmp_path: Path) -> None:
    rx_path, tx_path = tmp_path / "receiver.cbor", tmp_path / "sender.cbor"
    common = {"config": _config(), "bounds": BOUNDS, "trace_senders": [1]}
    rx = Proc(
        traced_receiver,
        {
            **common,
            "senders": [1],
            "segment_bytes": 64,
            "regions": {1: [0, 64]},
            "release": "landing",
            "credit_session": 1,  # the spec's first session
            "trace_path": str(rx_path),
        },
    )
    try:
        kind, address, _rails, segment = rx.recv()
        assert kind == "ready"
        # one write at a time: the sender demands one charge, as the spec's sender does
        phases = [{"blocks": [[(i % 4) * L, L, i]]} for i in range(6)]
        tx = Proc(
            traced_sender,
            {
                **common,
                "peer_id": 1,
                "receiver": address,
                "segment": segment,
                "phases": phases,
                "trace_path": str(tx_path),
            },
        )
        try:
            kind, report = tx.recv(60)
            assert kind == "done"
            assert all(p["results"][0]["status"] == "COMPLETED" for p in report["phases"])
            rx.stop()  # the receiver's trace ends before the sender's teardown
            time.sleep(0.2)
        finally:
            tx.stop()
    finally:
        rx.stop()
    result = _validate(rx_path, tx_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(": valid") == 2
    # the check has teeth: a receiver trace claiming one more byte granted is rejected
    raw = rx_path.read_bytes()
    items = list(_items(raw))
    for item in items[1:]:
        msg = item.get("msg", {})
        if (
            item["k"] == "send"
            and msg.get("type") == "ReceiverCreditUpdate"
            and msg["grants"].get(1)
        ):
            msg["grants"][1] += 1
            break
    forged = tmp_path / "forged.cbor"
    forged.write_bytes(b"".join(cbor2.dumps(i, canonical=True) for i in items))
    assert _validate(forged).returncode == 1


def _items(raw: bytes) -> list[dict[str, object]]:
    import io

    stream = io.BytesIO(raw)
    decoder = cbor2.CBORDecoder(stream)
    out = []
    while stream.tell() < len(raw):
        out.append(decoder.decode())
    return out
