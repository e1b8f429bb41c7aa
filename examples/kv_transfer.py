"""KV-cache transfer between two processes under receiver credit.

A "prefill" process writes 64 KV blocks of 4 MiB, each with a deadline, into a "decode"
process whose receiver grants credit for 8 blocks at a time. The decode side verifies every
block's bytes when it lands and then releases it, which is what lets the receiver grant again.
The run prints the throughput, how many submits met a credit stall, and that every block
verified.

    python examples/kv_transfer.py [--blocks 64] [--block-mib 4]

It needs the ``transport`` extra (``python -m pip install -e '.[transport]'``); without it, it
says so and exits 2.
"""

from __future__ import annotations

import multiprocessing
import random
import sys
import time
from multiprocessing.connection import Connection

from tent_sched import TaskStatus

TRANSPORT_MODULES = frozenset({"click", "crc32c", "matplotlib"})  # the transport extra's

try:
    import click
    from tent_transport.config import load_engine_config
    from tent_transport.control import PskIdentity
    from tent_transport.devices import Opcode
    from tent_transport.devices.tcp import checksum
    from tent_transport.dispatch import TransferRequest
    from tent_transport.engine import EngineOptions, SyncEngine
except ModuleNotFoundError as exc:
    if (exc.name or "").partition(".")[0] not in TRANSPORT_MODULES:
        raise
    print(
        f"kv_transfer.py: {exc.name!r} is not installed; this example needs the transport "
        "extra:\n    python -m pip install -e '.[transport]'",
        file=sys.stderr,
    )
    sys.exit(2)

KEY = b"example-kv-transfer-shared-key!!"
PREFILL, DECODE = 1, 2
SLOTS = 8  # the decode node holds at most 8 unconsumed blocks
RING = 16  # block i lands in ring slot i % 16 (credit keeps at most 8 of them busy)


def config(block: int) -> dict[str, object]:
    return {
        "enable_runtime_queue": True,
        "runtime_queue": {"deadline_aware": True},
        "receiver_credit": {
            "enabled": True,
            "mode": "required",
            "capacity": {
                "data_bytes": SLOTS * block,
                "request_slots": SLOTS,
                "staging_slots": SLOTS,
                "consumer_slots": SLOTS,
            },
            # lease batch 2: the activation grants two blocks, demand asks for the rest
            "grant": {
                "initial_grant": {"data_bytes": 2 * block, "request_slots": 2, "consumer_slots": 2}
            },
        },
    }


def kv_block(index: int, block: int) -> bytes:
    return random.Random(index).randbytes(block)


def decode_node(conn: Connection, blocks: int, block: int) -> None:
    """The receiver: verify each landed block against its expected checksum, then release."""
    expected = {i % RING * block: [] for i in range(blocks)}
    for i in range(blocks):
        expected[i % RING * block].append(checksum(kv_block(i, block)))
    options = EngineOptions(
        peer_id=DECODE, identity=PskIdentity(local_peer=DECODE, keys={PREFILL: KEY})
    )
    with SyncEngine(load_engine_config(config(block)), options) as engine:
        memory = bytearray(RING * block)
        segment = engine.register(memory)
        conn.send((engine.engine.address, segment.segment_id))
        while PREFILL not in engine.sender_sessions():
            time.sleep(0.005)
        engine.expose(PREFILL, segment.segment_id, 0, len(memory))
        verified = 0
        for _ in range(blocks):
            event = engine.next_landed(timeout=120)
            view = memoryview(memory)[event.offset : event.offset + event.length]
            if checksum(view) in expected[event.offset]:  # the block that belongs in this slot
                verified += 1
            engine.release(event)  # the consumer is done: the credit goes back
        conn.send(verified)
        conn.recv()  # stay up until the prefill side is done


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--blocks", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--block-mib", type=click.IntRange(min=1), default=4, show_default=True)
def main(blocks: int, block_mib: int) -> None:
    """Two processes: a prefill node writes KV blocks into a decode node under receiver credit."""
    block = block_mib << 20
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    decode = context.Process(target=decode_node, args=(child, blocks, block), daemon=True)
    decode.start()
    (host, port), segment = parent.recv()
    payloads = [kv_block(i, block) for i in range(blocks)]
    options = EngineOptions(
        peer_id=PREFILL, identity=PskIdentity(local_peer=PREFILL, keys={DECODE: KEY})
    )
    with SyncEngine(load_engine_config(config(block)), options) as engine:
        peer = engine.connect(host, port)
        engine.wait_regions(peer, lambda d: bool(d.regions), timeout=30)
        start = time.perf_counter()
        deadline = time.monotonic_ns() + 30 * 10**9
        handles = []
        stalled = 0
        for i, payload in enumerate(payloads):
            request = TransferRequest(
                opcode=Opcode.WRITE,
                local=payload,
                peer=peer,
                remote_segment=segment,
                remote_offset=i % RING * block,
                length=block,
                deadline_ns=deadline + i * 10**6,  # each layer's block a little later
            )
            handle = engine.submit([request])
            stalled += handle.status().backpressure is not None
            handles.append(handle)
        states = [h.wait(timeout=120) for h in handles]
        elapsed = time.perf_counter() - start
        verified = parent.recv()
        parent.send("done")
    decode.join(10)
    completed = sum(s.status is TaskStatus.COMPLETED for s in states)
    mib = blocks * block_mib
    print(f"moved {mib} MiB in {elapsed:.2f} s: {mib / elapsed:.0f} MiB/s")
    print(f"submits that met a credit stall: {stalled} of {blocks}")
    print(
        f"completed: {completed}/{blocks}; verified at the receiver: {verified}/{blocks}"
    )
    ok = completed == verified == blocks
    print("every block verified" if ok else "SOME BLOCKS DID NOT VERIFY")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
