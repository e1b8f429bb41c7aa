"""The engine's driver runs for a sender that connects without ``start()``.

Regressions: a sender engine that only called ``connect()`` (no listener of its own) never
bound its dispatch driver to the loop, so no pass ran after the submit's own dispatch. A
credit-stalled write never sent its demand (RFC criterion 5: a sender stalled at zero credit
is granted once it reports demand), and an acknowledged write stayed PENDING because the
rail's completion wake-up went nowhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from procs import KEY
from tent_transport.config import load_engine_config
from tent_transport.control import PskIdentity
from tent_transport.devices import Opcode
from tent_transport.dispatch import TransferRequest
from tent_transport.engine import EngineOptions, SyncEngine
from tent_transport.segments import Access

from tent_sched import TaskStatus

BLOCK = 64 << 10
_CAPACITY = {
    "data_bytes": 8 << 20,
    "request_slots": 8,
    "staging_slots": 8,
    "consumer_slots": 8,
}


def _config(initial_grant: dict[str, int] | None) -> Any:
    credit: dict[str, Any] = {"enabled": True, "mode": "required", "capacity": _CAPACITY}
    if initial_grant is not None:
        credit["grant"] = {"initial_grant": initial_grant}
    return load_engine_config({"enable_runtime_queue": True, "receiver_credit": credit})


@pytest.fixture(
    params=[None, {"data_bytes": 1 << 20, "request_slots": 1, "consumer_slots": 1}],
    ids=["no-initial-grant", "initial-grant"],
)
def pair(request: pytest.FixtureRequest) -> Iterator[tuple[SyncEngine, SyncEngine]]:
    config = _config(request.param)
    rx = SyncEngine(
        config, EngineOptions(peer_id=2, identity=PskIdentity(local_peer=2, keys={1: KEY}))
    )
    tx = SyncEngine(
        config, EngineOptions(peer_id=1, identity=PskIdentity(local_peer=1, keys={2: KEY}))
    )
    try:
        yield rx, tx
    finally:
        tx.close()
        rx.close()


def test_sender_without_start_completes_a_write_before_the_consumer_acts(
    pair: tuple[SyncEngine, SyncEngine],
) -> None:
    rx, tx = pair
    host, port = rx.start()
    memory = bytearray(1 << 20)
    segment = rx.register(memory)
    peer = tx.connect(host, port)  # no tx.start(): a pure sender
    rx.expose(1, segment.segment_id, 0, len(memory))
    region = tx.wait_regions(peer, lambda d: bool(d.regions)).regions[0]
    block = bytes(range(256)) * (BLOCK // 256)
    handle = tx.submit_nowait(
        [
            TransferRequest(
                opcode=Opcode.WRITE,
                local=block,
                peer=peer,
                remote_segment=region.segment_id,
                remote_offset=region.offset,
                length=len(block),
            )
        ]
    )
    # the receiver's consumer has not looked at anything yet: the grant (no initial grant)
    # and the acknowledgement must reach the sender's handle on their own
    state = handle.wait(timeout=30)
    assert state.status is TaskStatus.COMPLETED, state
    assert state.in_flight_slices == 0 and state.moved_bytes == len(block)
    event = rx.next_landed(timeout=30)
    assert (event.sender, event.length) == (1, len(block))
    assert bytes(memory[: len(block)]) == block
    assert rx.release(event)


def test_both_engines_on_uvloop_move_a_write_and_a_read() -> None:
    """``SyncEngine(use_uvloop=True)`` carries data: uvloop's transports are not
    ``asyncio.Transport`` subclasses, and the data connections once asserted that they were
    (every slice then ended FAILED)."""
    config = _config({"data_bytes": 1 << 20, "request_slots": 2, "consumer_slots": 2})
    rx = SyncEngine(
        config,
        EngineOptions(peer_id=2, identity=PskIdentity(local_peer=2, keys={1: KEY})),
        use_uvloop=True,
    )
    tx = SyncEngine(
        config,
        EngineOptions(peer_id=1, identity=PskIdentity(local_peer=1, keys={2: KEY})),
        use_uvloop=True,
    )
    try:
        assert type(rx._loop).__module__.startswith("uvloop")
        host, port = rx.start()
        memory = bytearray(1 << 20)
        segment = rx.register(memory)
        peer = tx.connect(host, port)
        rx.expose(1, segment.segment_id, 0, len(memory), Access.READ | Access.WRITE)
        tx.wait_regions(peer, lambda d: bool(d.regions))
        block = os.urandom(BLOCK)
        write = TransferRequest(
            opcode=Opcode.WRITE,
            local=block,
            peer=peer,
            remote_segment=segment.segment_id,
            remote_offset=BLOCK,
            length=BLOCK,
        )
        assert tx.submit([write]).result(30).status is TaskStatus.COMPLETED
        assert rx.release(rx.next_landed(timeout=30))
        assert bytes(memory[BLOCK : 2 * BLOCK]) == block
        local = bytearray(BLOCK)
        read = TransferRequest(
            opcode=Opcode.READ,
            local=local,
            peer=peer,
            remote_segment=segment.segment_id,
            remote_offset=BLOCK,
            length=BLOCK,
        )
        assert tx.submit([read]).result(30).status is TaskStatus.COMPLETED
        assert bytes(local) == block
    finally:
        tx.close()
        rx.close()
